"""SPEC image-to-text: each image chooses among its candidate captions (_spec.py)."""

from ._spec import benchmark

BENCHMARK = benchmark("i2t")
