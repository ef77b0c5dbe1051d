"""The blind audit (scoring/blind_audit.py): folds by image that never train on the record
they score, the probe as the minimiser of its stated objective, figures by hand on planted
records, and the audit through flowclip score and flowclip results."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from flowclip_cache.scoring import blind_audit as ba


def test_folds_keep_an_images_records_together_and_use_every_fold():
    keys = np.array([f"img{i % 13}" for i in range(60)])
    f = ba.image_folds(keys, 5, seed=3)
    assert set(f) == set(range(5))
    for k in set(keys):
        assert len(set(f[keys == k])) == 1
    assert np.array_equal(f, ba.image_folds(keys, 5, seed=3))
    assert not np.array_equal(f, ba.image_folds(keys, 5, seed=4))


def test_no_record_is_scored_by_a_probe_that_trained_on_it():
    """Every record's captions its own: the probe that scores a fold saw none of its captions
    (a probe trained on every record would)."""
    rng = np.random.default_rng(0)
    n, k = 40, 3
    T = rng.normal(size=(n * k, 8))
    C = np.arange(n * k).reshape(n, k)
    gold = rng.integers(0, k, n)
    folds = ba.image_folds(np.array([f"i{r // 2}" for r in range(n)]), 4, seed=0)
    seen = []

    def spy(T_, C_, gold_):
        seen.append(set(C_.ravel().tolist()))
        return ba.fit_probe(T_, C_, gold_)

    out = ba.blind_scores(T, C, gold, folds, fit=spy)
    assert len(seen) == 4 and not np.isnan(out).any()
    for f, trained in zip(sorted(set(folds)), seen):
        held = set(C[folds == f].ravel().tolist())
        assert not held & trained
        assert held | trained == set(range(n * k))


def test_the_probe_minimises_its_objective():
    """At the fitted w the gradient of mean softmax cross-entropy + L2 |w|^2, written out in
    numpy, vanishes (candidates padded with -1 included)."""
    rng = np.random.default_rng(1)
    T = rng.normal(size=(30, 6))
    C = np.array([rng.choice(30, 3, replace=False) for _ in range(50)])
    C[::4, 2] = -1  # records of two candidates
    gold = rng.integers(0, 2, 50)
    w = ba.fit_probe(T, C, gold, l2=1e-2)
    grad = 2 * 1e-2 * w
    for c, g in zip(C, gold):
        X = T[c[c >= 0]]
        p = np.exp(X @ w - (X @ w).max())
        p /= p.sum()
        grad += (p @ X - X[g]) / len(C)
    assert np.abs(grad).max() < 1e-6


def test_planted_records_by_hand():
    """Records 0-29: the gold's text carries a direction the foils lack (solvable blind);
    records 30-59: gold and foil are the same text (a tie: never solvable). Blind accuracy,
    chance and each scorer's accuracy on the unsolved half follow by hand."""
    rng = np.random.default_rng(2)
    n = 60
    T, C = [], np.zeros((n, 2), np.int64)
    for r in range(n):
        base = rng.normal(size=16)
        if r < 30:
            T += [base + 3 * np.eye(16)[0], base - 3 * np.eye(16)[0]]
            C[r] = [len(T) - 2, len(T) - 1] if r % 2 else [len(T) - 1, len(T) - 2]
        else:
            T += [base]
            C[r] = [len(T) - 1, len(T) - 1]
    gold = np.array([0 if r % 2 else 1 for r in range(n)])
    keys = np.array([f"i{r}" for r in range(n)])
    correct = {"a": np.arange(n) % 3 == 0, "b": np.arange(n) >= 45}
    res = ba.audit_task(np.array(T), C, gold, keys, correct, folds=5)
    assert res["blind_accuracy"] == 0.5 and res["chance"] == 0.5 and res["unsolved"] == 30
    assert res["scorers"]["a"]["all"] == pytest.approx(20 / 60)
    assert res["scorers"]["a"]["blind_unsolved"] == pytest.approx(np.mean(np.arange(30, 60) % 3 == 0))
    assert res["scorers"]["b"]["blind_unsolved"] == 0.5


def test_a_paraphrase_record_is_solved_only_when_both_its_decisions_are():
    """Records of two decisions (P1 vs N, P2 vs N): P1 carries the gold direction in every
    record, P2 only in the first half (in the second it is N's own text: a tie). Only the
    first half is solved; chance is 1/3; a scorer's unsolved accuracy is over the second half."""
    rng = np.random.default_rng(4)
    n = 40
    T, C = [], []
    for r in range(n):
        base = rng.normal(size=12)
        T += [base + 3 * np.eye(12)[0], base - 3 * np.eye(12)[0]]  # P1, N
        p1, neg = len(T) - 2, len(T) - 1
        if r < 20:
            T.append(rng.normal(size=12) + 3 * np.eye(12)[0])  # P2, solvable
            C += [[p1, neg], [len(T) - 1, neg]]
        else:
            C += [[p1, neg], [neg, neg]]  # P2 is N's text
    record_of = np.repeat(np.arange(n), 2)
    keys = np.array([f"i{r}" for r in record_of])
    correct = {"a": np.arange(n) % 4 == 0}
    res = ba.audit_task(np.array(T), np.array(C), np.zeros(2 * n, np.int64), keys, correct, folds=5,
                        record_of=record_of)  # fmt: skip
    assert res["n"] == n and res["unsolved"] == 20 and res["blind_accuracy"] == 0.5
    assert res["chance"] == pytest.approx(1 / 3)
    assert res["scorers"]["a"]["blind_unsolved"] == pytest.approx(np.mean(np.arange(20, 40) % 4 == 0))


def test_too_few_images_is_said_not_guessed():
    res = ba.audit_task(np.eye(4), np.array([[0, 1], [2, 3]]), np.array([0, 0]), np.array(["a", "b"]), {}, folds=5)
    assert res == {"defined": False, "reason": "2 distinct images, fewer than the 5 folds"}


def test_the_audit_through_score_and_results(lab, tmp_path):
    from click.testing import CliRunner

    from flowclip_cache.cli import main
    from flowclip_cache.scoring.score import run_score
    from flowclip_cache.store import FeatureStore

    out = str(tmp_path / "blind")
    summary = run_score(FeatureStore(lab["store"]), [lab["candidates"]], ["clip", "flow=filip-score"], out,
                        bootstrap_draws=0, blind_folds=3, log=lambda *_: None)  # fmt: skip
    audit = json.load(open(os.path.join(out, "results.json")))["blind_audit"]["sample"]
    assert audit == summary["blind_audit"]["sample"] and audit["defined"] and audit["folds"] == 3
    import pyarrow.parquet as pq

    per_record = pq.read_table(os.path.join(out, "blind_audit.parquet")).to_pylist()
    records = pq.read_table(os.path.join(out, "records.parquet")).to_pylist()
    flow = {r["record_id"]: r["correct"] for r in records if r["scorer"] == "flow" and r["control"] == "real"}
    assert len(per_record) == audit["n"] == len(flow)
    assert audit["blind_accuracy"] == pytest.approx(np.mean([r["blind_solved"] for r in per_record]))
    unsolved = [flow[r["record_id"]] for r in per_record if not r["blind_solved"]]
    assert audit["scorers"]["flow"]["blind_unsolved"] == pytest.approx(np.mean(unsolved))
    assert "## Blind audit" in open(os.path.join(out, "results.md")).read()
    shown = CliRunner().invoke(main, ["results", out, "--blind"])
    assert shown.exit_code == 0 and "sample blind-unsolved (not official)" in shown.output
    assert "blind-unsolved" not in CliRunner().invoke(main, ["results", out]).output
