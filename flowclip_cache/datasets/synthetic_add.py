"""Synthetic added absent object (the synthetic world)."""

from ._synthetic import synthetic_benchmark

BENCHMARK = synthetic_benchmark("add", "Synthetic added absent object", binding=False)
