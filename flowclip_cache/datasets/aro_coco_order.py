"""ARO COCO-Order: built from the Karpathy test split (coco_karpathy_test.json: a list
of {image, caption: [5]}), each caption with ARO's four shuffles. Tagging needs
spaCy's en_core_web_sm (optional dependency)."""

from ._aro import order_benchmark

BENCHMARK = order_benchmark("aro-coco-order", "ARO COCO-Order", "coco_karpathy_test.json")
