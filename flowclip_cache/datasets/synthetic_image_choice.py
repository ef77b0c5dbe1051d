"""Synthetic image choice: a caption chooses its scene among the colour-swapped,
shape-swapped and moved twins (synthetic/contrasts.py)."""

from ._synthetic_contrasts import contrast_benchmark
from .base import Scoring

BENCHMARK = contrast_benchmark(
    "image-choice",
    "Synthetic image choice (4 twins)",
    "image_candidates",
    Scoring(task="image_candidates", tie_rule="wrong"),
)
