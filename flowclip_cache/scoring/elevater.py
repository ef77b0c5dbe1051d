"""ELEVATER's zero-shot metrics, as its toolkit computes them (Computer-Vision-in-the-Wild/
Elevater_Toolkit_IC, vision_benchmark/evaluation/clip_zeroshot_evaluator.py
`clip_zeroshot_evaluator` and metric.py `get_metric`, over vision-evaluation 0.2.14's
evaluators), as small pure functions:

- the scores every metric reads: `(100. * image_features @ text_features).softmax(dim=-1)`,
  float32 (the softmax can round two close logits to one probability: a tie there is a
  tie here);
- `accuracy`: TopKAccuracyEvaluator(1), np.argmax of the probabilities (the first maximum);
- `mean-per-class`: BalancedAccuracyScoreEvaluator, np.argmax over the columns of the
  classes that occur in the labels only (`filter_out_zero_tgt`), then each such class's
  recall, averaged (scikit-learn's balanced_accuracy_score);
- `11point_mAP` (VOC 2007, several labels an image): MeanAveragePrecisionNPointsEvaluator(11),
  per class that occurs: the precision-recall curve of its column (scikit-learn's, which
  ends at recall 0, precision 1), at recalls 1.0, 0.9, ..., 0 the largest precision at that
  recall or above, averaged; then over classes;
- `roc_auc` (two classes: Hateful Memes): scikit-learn's roc_auc_score of the second
  column: the share of (positive, negative) pairs ordered right, a tie counting half.

Which dataset reports which metric is ELEVATER's `resources/datasets/<name>.yaml`
(`TEST.METRIC`); tests/test_elevater_metrics.py runs vision-evaluation's own evaluators on
the same probabilities."""

from __future__ import annotations

import numpy as np

METRICS = ("accuracy", "mean-per-class", "11point_mAP", "roc_auc")


def probabilities(logits100) -> np.ndarray:
    """softmax over classes of 100-scaled logits [N, C], in float32 as torch computes it."""
    import torch

    return torch.as_tensor(np.asarray(logits100, np.float32)).softmax(dim=-1).numpy()


def accuracy(probs: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(probs, axis=1) == labels))


def mean_per_class(probs: np.ndarray, labels: np.ndarray) -> float:
    present = np.unique(labels)
    predicted = present[np.argmax(probs[:, present], axis=1)]  # argmax over the classes that occur
    return float(np.mean([np.mean(predicted[labels == c] == c) for c in present]))


def _interpolated_precision(scores: np.ndarray, positive: np.ndarray, points: int) -> float:
    """One class: the mean over recalls 1, ..., 0 of the best precision at that recall or
    above, the curve taken at every distinct score (highest first)."""
    order = np.argsort(-scores, kind="stable")
    s, pos = scores[order], positive[order].astype(np.int64)
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # the last index of each distinct score
    tp = np.cumsum(pos)[last]
    # scikit-learn's curve ends at (recall 0, precision 1): the point every curve holds
    precision = np.r_[tp / (last + 1), 1.0]
    recall = np.r_[tp / pos.sum(), 0.0]
    best = [max((p for p, r in zip(precision, recall) if r >= t), default=0.0) for t in np.linspace(1, 0, points)]
    return float(np.mean(best))


def map_11_points(probs: np.ndarray, targets: np.ndarray) -> float:
    """targets [N, C] of 0/1 (several labels an image); classes with no positive left out."""
    present = np.flatnonzero(targets.any(axis=0))
    return float(np.mean([_interpolated_precision(probs[:, c], targets[:, c] > 0, 11) for c in present]))


def roc_auc(probs: np.ndarray, labels: np.ndarray) -> float:
    """Two classes: the second column's ranking of positives above negatives, ties half."""
    score, pos = probs[:, 1], labels == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    values, where, counts = np.unique(score, return_inverse=True, return_counts=True)
    twice_rank = 2 * np.cumsum(counts) - counts + 1  # twice each distinct value's average rank (1-based)
    twice_sum = int(twice_rank[where[pos]].sum())  # integers: the count is exact
    return float((twice_sum - n_pos * (n_pos + 1)) / (2 * n_pos * n_neg))


def elevater_metric(name: str, probs: np.ndarray, labels: np.ndarray) -> float:
    """The figure ELEVATER reports for a dataset whose TEST.METRIC is `name`."""
    if name not in METRICS:
        raise ValueError(f"unknown ELEVATER metric {name!r}; ELEVATER's are {', '.join(METRICS)}")
    return {"accuracy": accuracy, "mean-per-class": mean_per_class, "11point_mAP": map_11_points,
            "roc_auc": roc_auc}[name](probs, labels)  # fmt: skip
