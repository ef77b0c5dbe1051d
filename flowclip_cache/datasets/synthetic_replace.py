"""Synthetic replaced attribute (the synthetic world)."""

from ._synthetic import synthetic_benchmark

BENCHMARK = synthetic_benchmark("replace", "Synthetic replaced attribute", binding=False)
