"""COCO 5K retrieval: the Karpathy test split (5,000 images / 25,010 captions) from
dataset_coco.json (or the BLIP-style test list). A query counts if any of its
positives is in the top k."""

from ._karpathy import retrieval_benchmark

BENCHMARK = retrieval_benchmark("coco-retrieval", "COCO 5K retrieval", "dataset_coco.json")
