"""SPEC text-to-image: each caption chooses among its candidate images (_spec.py)."""

from ._spec import benchmark

BENCHMARK = benchmark("t2i")
