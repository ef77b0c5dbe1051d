"""Significance as the draws allow (scoring/stats.py): a bootstrap p is 2 (k + 1) / (B + 1),
never 0; Holm's correction equals statsmodels' on a score's own p-values; the bootstrap's p
agrees with a normal approximation on planted effects of known size; a family its draws
cannot resolve is said to be unresolved; a study's contrasts are checked before training."""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from flowclip_cache.cli import main
from flowclip_cache.scoring.stats import draws_to_resolve, holm, p_floor, paired_bootstrap, two_sided_p


def test_a_p_value_is_never_zero_and_holm_cannot_go_below_m_floors():
    """Every draw on one side: p = 2 / (B + 1), not 0 (mutation: (k / B) gives 0 here).
    Holm over m such p-values gives m times it, at most 1."""
    B = 999
    assert two_sided_p(np.ones(B)) == p_floor(B) == 2 / 1000
    assert two_sided_p(-np.ones(B)) == 2 / 1000
    assert two_sided_p(np.zeros(B)) == 1.0  # every draw ties 0
    d = np.r_[-np.ones(9), np.ones(990)]
    assert two_sided_p(d) == pytest.approx(2 * 10 / 1000)
    adjusted = holm([two_sided_p(np.ones(B))] * 55)
    assert min(adjusted) == pytest.approx(55 * 2 / 1000) and min(adjusted) > 0.05
    assert draws_to_resolve(55) == 2200 and 55 * p_floor(2200) < 0.05 <= 55 * p_floor(2199)


def test_holm_equals_statsmodels_on_a_scores_own_p_values(lab, tmp_path):
    """The study's correction against an independent implementation (statsmodels'
    multipletests, method 'holm'), on the p-values a real score wrote, and on values with ties."""
    from statsmodels.stats.multitest import multipletests  # the test extra installs it

    args = ["score", "--store", lab["store"], "--manifests", lab["candidates"], "--scorer", "clip"]
    r = CliRunner().invoke(main, [*args, "--scorer", "filip-score", "--scorer", "filip-score-i2t", "--out",
                                  str(tmp_path / "s"), "--bootstrap", "300", "--quiet", "--no-figures"])  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.load(open(tmp_path / "s" / "results.json"))
    p = [v["p_two_sided"] for d in res["bootstrap"].values() for v in d.values()]
    assert len(p) == 3 and all(x >= 2 / 301 for x in p)
    assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]), abs=1e-12)
    rng = np.random.default_rng(0)
    q = list(np.round(rng.uniform(0, 0.2, 40), 3))  # ties among them
    assert holm(q) == pytest.approx(list(multipletests(q, method="holm")[1]), abs=1e-12)
    fam = res["bootstrap_family"]
    assert fam["comparisons"] == 3 and fam["kind"] == "every pair of scorers" and fam["draws"] == 300
    md = (tmp_path / "s" / "results.md").read_text()
    assert "**Family.** Holm's correction runs over these 3 comparisons" in md


def _planted(repairs: float, regressions: float, seed: int, n: int = 800):
    """Two methods on n images (2 records each): B is A with a share of A's wrong images
    repaired and a share of its right ones regressed; -> the bootstrap task and each image's
    difference d_i in {-1, 0, 1}."""
    rng = np.random.default_rng(seed)
    a = rng.random(n) < 0.5
    u = rng.random(n)
    b = np.where(a, u >= regressions, u < repairs)
    rec = np.repeat(np.arange(n), 2)
    task = {"name": "t", "image_index": rec, "groups": None, "correct": {"a": a[rec], "b": b[rec]}}
    return task, b.astype(float) - a.astype(float)


@pytest.mark.parametrize("repairs,regressions,seed", [(0.1, 0.1, 2), (0.13, 0.07, 0), (0.13, 0.07, 2),
                                                      (0.14, 0.06, 0), (0.14, 0.06, 1)])  # fmt: skip
def test_the_bootstrap_p_agrees_with_a_normal_approximation_on_planted_effects(repairs, regressions, seed):
    """The normal approximation's two-sided p of the mean image difference (standard error
    sd / sqrt(n)) against the bootstrap's, within 35% (4,000 draws; the bootstrap's runs
    10-25% above it here); an effect far beyond the draws' reach (z 4.6) gives the floor
    2 / (B + 1), not 0. Mutations caught: a one-sided p (half), p as the share k / B (0)."""
    task, d = _planted(repairs, regressions, seed)
    out = paired_bootstrap([task], {"A": ["a"], "B": ["b"]}, [("A", "B")], 800, 4000, 1)["t"]["B - A"]
    z = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    normal = math.erfc(abs(z) / math.sqrt(2))
    assert out["mean_pts"] == pytest.approx(100 * d.mean())
    if normal > 0.01:
        assert abs(out["p_two_sided"] / normal - 1) < 0.35, (out["p_two_sided"], normal)
    else:
        assert out["p_two_sided"] == 2 / 4001 and normal < 1e-4


def test_a_family_the_draws_cannot_resolve_is_said_so(lab, tmp_path):
    args = ["score", "--store", lab["store"], "--manifests", lab["candidates"], "--scorer", "clip"]
    r = CliRunner().invoke(main, [*args, "--scorer", "filip-score", "--out", str(tmp_path / "s"), "--bootstrap", "30",
                                  "--quiet", "--no-figures"])  # fmt: skip
    assert r.exit_code == 0, r.output
    md = (tmp_path / "s" / "results.md").read_text()
    assert "no comparison here can be shown at 0.05" in md and "40 draws or more could" in md


def test_a_contrast_naming_a_scorer_the_study_lacks_is_refused_before_training(lab, tmp_path):
    """The ablation's default compare (global vs flow_hnb_cimr) on a study without those
    heads: refused at once (dry run and run), naming the study's scorers; nothing trained."""
    study = tmp_path / "s.yaml"
    study.write_text(
        f"kind: ablation\nstore: {lab['store']}\ntrain: {lab['training']}\neval: [{lab['candidates']}]\n"
        f"out: {tmp_path}/out\nheads: {{mine: {{head: global}}}}\nseeds: [0]\n"
        "train_config: {epochs: 1, batch_size: 4}\n"
    )
    for extra in (["--dry-run"], []):
        r = CliRunner().invoke(main, ["run", str(study), *extra])
        assert r.exit_code == 2, r.output
        assert "compare: global vs flow_hnb_cimr: global, flow_hnb_cimr are not among this study's scorers" in r.output
        assert "(clip, mine)" in r.output
    assert not (tmp_path / "out" / "runs").exists()


def test_a_cross_task_mean_is_bootstrapped_as_the_mean_of_its_members():
    """A cross-task mean compared as a task of its own: in every draw the unweighted mean of
    its members' statistics (the same image draws), so its observed difference is the mean of
    theirs and its draws' mean the mean of theirs. Mutation caught: max for mean."""
    t1, _ = _planted(0.14, 0.06, 0)
    t2, _ = _planted(0.10, 0.10, 1)
    t2["name"] = "t2"
    out = paired_bootstrap(
        [t1, t2], {"A": ["a"], "B": ["b"]}, [("A", "B")], 800, 500, 3, means={"mean: m": ["t", "t2"]}
    )
    m, a, b = (out[k]["B - A"] for k in ("mean: m", "t", "t2"))
    assert m["mean_pts"] == pytest.approx((a["mean_pts"] + b["mean_pts"]) / 2)
    assert m["bootstrap_mean_pts"] == pytest.approx((a["bootstrap_mean_pts"] + b["bootstrap_mean_pts"]) / 2)
    assert paired_bootstrap(
        [t1], {"A": ["a"], "B": ["b"]}, [("A", "B")], 800, 50, 3, means={"x": ["t", "gone"]}
    ).keys() == {"t"}


def test_a_rerun_after_a_setting_changed_never_reports_the_old_run(lab, tmp_path):
    """A study run with epochs 1, then the same YAML with epochs 2: the dry run says the run
    was trained otherwise and where the new one goes; the study trains it there (2 epochs),
    keeps the old, and the summary and `flowclip results` name each run's identity. A
    finished train-head run resumed with other settings is refused, naming them (before:
    '[done] ... 2 epochs' over a 1-epoch head)."""
    import os

    def study(epochs: int) -> str:
        p = tmp_path / f"s{epochs}.yaml"
        p.write_text(
            f"kind: ablation\nstore: {lab['store']}\ntrain: {lab['training']}\neval: [{lab['candidates']}]\n"
            f"out: {tmp_path}/out\nheads: {{g: {{head: global}}}}\nseeds: [0]\ncompare: []\nbootstrap: 0\n"
            f"figures: false\ntrain_config: {{epochs: {epochs}, batch_size: 4}}\n"
        )
        return str(p)

    r = CliRunner().invoke(main, ["run", study(1)])
    assert r.exit_code == 0, r.output
    runs = tmp_path / "out" / "runs"
    (first,) = os.listdir(runs)
    r = CliRunner().invoke(main, ["run", study(2), "--dry-run"])
    assert r.exit_code == 0 and "[changed]" in r.output and "train.epochs: 1 -> 2" in r.output, r.output
    assert "__id-" in r.output and "[done" not in r.output
    r = CliRunner().invoke(main, ["run", study(2)])
    assert r.exit_code == 0, r.output
    assert sorted(os.listdir(runs)) == [first, next(n for n in os.listdir(runs) if "__id-" in n)]
    new = next(n for n in os.listdir(runs) if "__id-" in n)
    assert json.load(open(runs / new / "config.json"))["train"]["epochs"] == 2
    assert json.load(open(runs / first / "config.json"))["train"]["epochs"] == 1  # the old run stays
    summary = json.load(open(tmp_path / "out" / "summary.json"))
    from flowclip_cache.training.run_header import identity_digest, read_run_config, run_identity

    assert summary["identities"][new] == identity_digest(run_identity(read_run_config(str(runs / new), new)))
    r = CliRunner().invoke(main, ["results", str(tmp_path / "out")])
    assert r.exit_code == 0 and summary["identities"][new] in r.output, r.output
    # train-head --resume on a finished run, with another epochs: refused, naming it
    r = CliRunner().invoke(main, ["train-head", "--store", lab["store"], "--train", lab["training"], "--out",
                                  str(runs / first), "--head", "global", "--epochs", "3", "--batch-size", "4",
                                  "--resume", "--quiet"])  # fmt: skip
    assert r.exit_code == 2 and "train.epochs: 1 -> 3" in r.output and "never continued or reported" in r.output


def test_a_study_hashes_its_training_manifest_once_per_version(tmp_path, monkeypatch):
    """Every run's identity names the training manifest's sha256: read once per version of
    the file, not once per run (a changed file is read again)."""
    import flowclip_cache.hashing as hashing

    reads = []
    real = hashing.file_sha256
    monkeypatch.setattr(hashing, "file_sha256", lambda p: reads.append(p) or real(p))
    path = tmp_path / "m.parquet"
    path.write_bytes(b"one")
    first = [hashing.unchanged_file_sha256(str(path)) for _ in range(5)]
    assert len(reads) == 1 and len(set(first)) == 1
    path.write_bytes(b"two!")
    assert hashing.unchanged_file_sha256(str(path)) != first[0] and len(reads) == 2
