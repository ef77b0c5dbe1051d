"""Synthetic paraphrases: SugarCrepe++ in miniature, a scene's caption, the same objects
named in the other order, and the colour-swapped caption (synthetic/contrasts.py); ITT
and TOT offline."""

from ._synthetic_contrasts import contrast_benchmark
from .base import Scoring

BENCHMARK = contrast_benchmark(
    "paraphrases", "Synthetic paraphrases (reordered / colour-swapped)", "paraphrases",
    Scoring(task="paraphrases", tie_rule="wrong"),
)  # fmt: skip
