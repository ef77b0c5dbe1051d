"""ELEVATER's four zero-shot metrics (scoring/elevater.py) against the code that defines
them: vision-evaluation 0.2.14's evaluators, called as ELEVATER's metric.py calls them
(and scikit-learn's roc_auc_score for roc_auc), on probabilities with planted exact ties;
and each by hand on a small example.

Mutation tried: mean-per-class over every class's column (not only the classes that occur)
and the 11-point interpolation taking the precision at the recall instead of the best at
or above it: each turns a test red."""

from __future__ import annotations

import numpy as np
import pytest

from flowclip_cache.scoring import elevater

v_eval = pytest.importorskip("vision_evaluation.evaluators", reason="pip install vision-evaluation")
sm = pytest.importorskip("sklearn.metrics", reason="pip install scikit-learn")


def _tied_probabilities(rng, n: int, c: int) -> np.ndarray:
    """Logits on a coarse grid (many exact ties in a row and across rows), softmaxed as ELEVATER does."""
    return elevater.probabilities(100 * rng.integers(0, 4, (n, c)) / 4)


@pytest.mark.parametrize("seed", range(5))
def test_equal_to_vision_evaluation_on_planted_ties(seed):
    rng = np.random.default_rng(seed)
    probs = _tied_probabilities(rng, 60, 6)
    labels = rng.integers(0, 5, 60)  # class 5 never occurs: mean-per-class leaves its column out
    top1 = v_eval.TopKAccuracyEvaluator(1)
    top1.add_predictions(predictions=probs, targets=labels)
    assert elevater.accuracy(probs, labels) == top1.get_report()["accuracy_top1"]
    balanced = v_eval.BalancedAccuracyScoreEvaluator()
    balanced.add_predictions(probs, labels)
    assert elevater.mean_per_class(probs, labels) == pytest.approx(balanced.get_report()[balanced._get_id()], abs=1e-15)
    multi = (rng.random((60, 6)) < 0.3).astype(int)  # several labels an image, as VOC 2007's
    multi[:, 4] = 0  # a class no image has: left out
    ap = v_eval.MeanAveragePrecisionNPointsEvaluator(11)
    ap.add_predictions(predictions=probs, targets=multi)
    assert elevater.map_11_points(probs, multi) == pytest.approx(ap.get_report()[ap._get_id()], abs=1e-15)
    two = _tied_probabilities(rng, 80, 2)
    binary = rng.integers(0, 2, 80)
    # (sklearn sums trapezoids in floating point; ours counts pairs exactly: equal to rounding)
    assert elevater.roc_auc(two, binary) == pytest.approx(sm.roc_auc_score(binary, two[:, 1]), abs=1e-12)


def test_each_by_hand():
    probs = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.4, 0.4, 0.2], [0.2, 0.3, 0.5]])
    labels = np.array([0, 1, 1, 0])
    # argmax: 0, 2, 0 (the first of the tie), 2 -> right on image 0 only
    assert elevater.accuracy(probs, labels) == 0.25
    # classes 0 and 1 occur; argmax over their columns: 0, 0 (a tie: the first), 0, 1
    # class 0: images 0, 3 -> 0 right of... image 0 right, image 3 predicted 1: 1/2; class 1: images 1, 2 -> 0/2
    assert elevater.mean_per_class(probs, labels) == 0.25
    # one class, scores 0.9, 0.8, 0.7, 0.6 with positives 1, 0, 1, 0: (recall, precision) = (1/2, 1), (1/2, 1/2),
    # (1, 2/3), (1, 1/2), and the curve's (0, 1); best precision at recall >= 0.6 ... 1.0: 2/3 (five
    # thresholds), at >= 0 ... 0.5: 1 (six)
    one = np.array([[0.9], [0.8], [0.7], [0.6]])
    assert elevater.map_11_points(one, np.array([[1], [0], [1], [0]])) == pytest.approx((5 * 2 / 3 + 6) / 11)
    # a negative ranked first: (recall 0, precision 0), (1, 1/2), and the curve's (0, 1): 1/2 at
    # recalls 0.1 ... 1.0, 1 at 0
    assert elevater.map_11_points(np.array([[0.9], [0.8]]), np.array([[0], [1]])) == pytest.approx((10 * 0.5 + 1) / 11)
    # AUC: positives score 0.9, 0.5; negatives 0.5, 0.1: pairs (0.9>0.5, 0.9>0.1, 0.5=0.5 half, 0.5>0.1) = 3.5/4
    two = np.array([[0.1, 0.9], [0.5, 0.5], [0.5, 0.5], [0.9, 0.1]])
    assert elevater.roc_auc(two, np.array([1, 1, 0, 0])) == 3.5 / 4


def test_an_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="11point_mAP"):
        elevater.elevater_metric("top5", np.zeros((1, 2)), np.zeros(1, int))
