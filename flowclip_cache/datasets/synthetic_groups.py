"""Synthetic groups: Winoground in miniature, a scene and its colour-swapped twin with
their two captions (synthetic/contrasts.py)."""

from ._synthetic_contrasts import contrast_benchmark
from .base import Scoring

BENCHMARK = contrast_benchmark(
    "groups", "Synthetic groups (colour-swapped twins)", "groups", Scoring(task="groups", tie_rule="wrong")
)
