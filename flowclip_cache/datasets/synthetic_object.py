"""Synthetic object recognition (the synthetic world)."""

from ._synthetic import synthetic_benchmark

BENCHMARK = synthetic_benchmark("object", "Synthetic object recognition", binding=False)
