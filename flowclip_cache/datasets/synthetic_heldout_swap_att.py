"""Synthetic attribute swap on held-out colour-shape combinations (the synthetic world)."""

from ._synthetic import synthetic_benchmark

BENCHMARK = synthetic_benchmark(
    "heldout-swap-att", "Synthetic attribute swap on held-out colour-shape combinations", binding=True
)
