"""ARO Flickr30k-Order: as COCO-Order, from flickr30k_test.json (Karpathy test split)."""

from ._aro import order_benchmark

BENCHMARK = order_benchmark("aro-flickr-order", "ARO Flickr30k-Order", "flickr30k_test.json")
