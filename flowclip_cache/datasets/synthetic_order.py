"""Synthetic word order (5 candidates) (the synthetic world)."""

from ._synthetic import synthetic_benchmark

BENCHMARK = synthetic_benchmark("order", "Synthetic word order (5 candidates)", binding=False)
