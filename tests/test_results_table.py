"""flowclip results: the score outputs under folders - a sweep's trials and
separate score runs - as one table, the settings that differ as columns, each figure the
one results.json holds; filtered, sorted, written whole to a new --out or not at all."""

import csv
import json

import pytest
from click.testing import CliRunner

from flowclip_cache.cli import main

pytest.importorskip("optuna", reason="flowclip sweep needs Optuna (pip install 'flowclip[sweep]')")


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def afternoon(lab, tmp_path_factory):
    """A two-trial sweep, and a head trained and scored beside the frozen encoder."""
    base = tmp_path_factory.mktemp("afternoon")
    (base / "sweep.yaml").write_text(
        f"out: {base / 'sweep'}\nstore: {lab['store']}\ntrain: {lab['training']}\nvalidation: {lab['candidates']}\n"
        "trials: 2\neval_on_selection: true\ntrain_config: {head: global, epochs: 1, batch_size: 4}\n"
        "space:\n  lr: {choices: [1.0e-3, 1.0e-2]}\n"
    )
    r = cli("sweep", base / "sweep.yaml")
    assert r.exit_code == 0, r.output
    r = cli("train-head", "--store", lab["store"], "--train", lab["training"], "--out", base / "runs" / "flow",
            "--head", "flow", "--epochs", "1", "--batch-size", "4", "--quiet")  # fmt: skip
    assert r.exit_code == 0, r.output
    r = cli("score", "--store", lab["store"], "--manifests", lab["candidates"], "--scorer", "clip",
            "--scorer", f"mine={base / 'runs' / 'flow'}", "--out", base / "scores" / "main", "--bootstrap", "0",
            "--controls", "real,shuffle", "--no-figures")  # fmt: skip
    assert r.exit_code == 0, r.output
    return base


def test_one_table_of_a_sweep_and_a_score_run(afternoon, tmp_path):
    r = cli("results", afternoon, "--out", tmp_path / "table")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(open(tmp_path / "table" / "results.csv")))
    assert len(rows) == 2 + 2  # two trials, and clip and the flow head (Real only by default)
    assert {r["control"] for r in rows} == {"real"} and {r["head"] for r in rows} == {"global", "flow", "clip"}
    # each figure is the one its results.json holds, in percent
    main_res = json.load(open(afternoon / "scores" / "main" / "results.json"))["results"]
    mine = next(r for r in rows if r["scorer"] == "mine")  # the label the user gave (mine=runs/flow)
    assert float(mine["sample"]) == pytest.approx(100 * main_res["real|mine"]["sample"]["score"])
    assert mine["method"] == "mine" and {r["scorer"] for r in rows if r["head"] == "global"} == {"trial"}
    # the settings that differ are columns: the trials' learning rates, the heads
    assert "lr" in rows[0] and {r["lr"] for r in rows if r["head"] == "global"} == {"0.001", "0.01"}
    assert (tmp_path / "table" / "results.md").read_text() == r.output.split("wrote ")[0]
    # filtered and sorted
    r = cli("results", afternoon, "--where", "head=global", "--sort", "sample", "--control", "real")
    lines = [x for x in r.output.splitlines() if x.startswith("| ")][1:]
    values = [float(x.split("|")[-2]) for x in lines]
    assert len(values) == 2 and values == sorted(values, reverse=True)
    r = cli("results", afternoon, "--control", "shuffle")
    assert r.exit_code == 0 and r.output.count("| shuffle |") == 2  # the score run's two scorers
    # an existing --out is never replaced silently; a wrong flag is one line
    r = cli("results", afternoon, "--out", tmp_path / "table")
    assert r.exit_code == 2 and "pass --overwrite" in r.output
    for bad, message in [(["--sort", "nothing"], "no such column"), (["--where", "head"], "COLUMN=VALUE"),
                         (["--benchmark", "absent"], "in none of the results")]:  # fmt: skip
        r = cli("results", afternoon, *bad)
        assert r.exit_code == 2 and message in r.output, r.output
    (tmp_path / "empty").mkdir()
    r = cli("results", tmp_path / "empty")
    assert r.exit_code == 2 and "no score outputs" in r.output


def test_group_match_columns_only_when_asked(tmp_path):
    """`--group-match` adds each group task's GroupMatch after the benchmarks,
    named as not the official score; without it the table is the official figures alone."""
    from flowclip_cache import outputs

    folder = tmp_path / "scored"
    folder.mkdir()
    results = {"real|clip": {"winoground": {"score": 0.25, "test_time_matching": {"group_match": 0.625}},
                             "sample": {"score": 0.5}}}  # fmt: skip
    (folder / "results.json").write_text(json.dumps({"scorers": [{"run": "clip", "kind": "clip"}], "results": results}))
    outputs.mark(str(folder), "score-results", ["results.json"])
    plain = cli("results", tmp_path)
    assert plain.exit_code == 0 and "GroupMatch" not in plain.output, plain.output
    asked = cli("results", tmp_path, "--group-match")
    header, _, row = [x for x in asked.output.splitlines() if x.startswith("|")][:3]
    assert header.split(" | ")[-1].strip(" |") == "winoground GroupMatch (not official)"
    assert row.split(" | ")[-1].strip(" |") == "62.50" and "| 25.00 |" in row
    only = cli("results", tmp_path, "--group-match", "--benchmark", "sample")
    assert "GroupMatch" not in only.output  # a benchmark not shown brings no GroupMatch column
