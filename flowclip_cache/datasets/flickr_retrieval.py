"""Flickr30k 1K retrieval: the Karpathy test split (1,000 images / 5,000 captions) from
dataset_flickr30k.json (or the BLIP-style test list)."""

from ._karpathy import retrieval_benchmark

BENCHMARK = retrieval_benchmark("flickr-retrieval", "Flickr30k 1K retrieval", "dataset_flickr30k.json")
