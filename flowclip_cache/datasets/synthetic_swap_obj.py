"""Synthetic object swap (the synthetic world)."""

from ._synthetic import synthetic_benchmark

BENCHMARK = synthetic_benchmark("swap-obj", "Synthetic object swap", binding=True)
