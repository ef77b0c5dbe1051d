"""Synthetic relation flip (the synthetic world)."""

from ._synthetic import synthetic_benchmark

BENCHMARK = synthetic_benchmark("relation", "Synthetic relation flip", binding=False)
