"""Synthetic attribute swap (binding) (the synthetic world)."""

from ._synthetic import synthetic_benchmark

BENCHMARK = synthetic_benchmark("swap-att", "Synthetic attribute swap (binding)", binding=True)
