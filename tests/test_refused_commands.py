"""Commands refused in one line, exit 2, leaving nothing behind (issue 53): a refused
extract creates no store; an unknown --where column names the columns; a missing store
is one line, not click's usage block."""

import os

from click.testing import CliRunner

from flowclip_cache.cli import main


def _one_line_refusal(r, *words):
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    for w in words:
        assert w in lines[0], lines[0]


def test_a_refused_extract_leaves_no_store(tmp_path, sample):
    """A missing or wrong --image-root: refused before the store exists (before: store.json
    and empty folders stayed, and the corrected command with another encoder was refused as
    'another encoder configuration')."""
    store = tmp_path / "store"
    base = ["extract", "--store", str(store), "--manifest", sample["candidates"], "--workers", "0", "--quiet"]
    tiny = ["--model", "flowclip-tiny-clip"]
    r = CliRunner().invoke(main, base + tiny + ["--image-root", str(tmp_path / "nowhere")])
    _one_line_refusal(r, "does not exist")
    assert not store.exists()
    (tmp_path / "wrong").mkdir()
    r = CliRunner().invoke(main, base + tiny + ["--image-root", str(tmp_path / "wrong")])
    _one_line_refusal(r, "none of the", "--image-root")
    assert not store.exists()
    r = CliRunner().invoke(main, base + tiny + ["--init-seed", "3", "--image-root", sample["image_root"]])
    assert r.exit_code == 0, r.output  # the corrected command, with another encoder configuration
    assert os.path.isfile(store / "store.json")


def test_unknown_where_column_and_a_missing_store_are_one_line(tmp_path):
    """Before: an empty table and exit 0 (and --out wrote it)."""
    import json

    from flowclip_cache import outputs

    scored = tmp_path / "scored"
    scored.mkdir()
    summary = {"scorers": [{"run": "flow", "kind": "flow", "train": {"lr": 0.001}}],
               "results": {"real|flow": {"sugarcrepe": {"score": 0.5}}}}  # fmt: skip
    (scored / "results.json").write_text(json.dumps(summary))
    outputs.mark(str(scored), "score-results", ["results.json"])
    r = CliRunner().invoke(main, ["results", str(scored), "--where", "head=flow"])
    assert r.exit_code == 0 and "| 50.00 |" in r.output, r.output
    for where in ("nosuch=1", "head.kind=flow"):
        r = CliRunner().invoke(main, ["results", str(scored), "--where", where, "--out", str(tmp_path / "o")])
        _one_line_refusal(r, f"--where {where.split('=')[0]}", "no such column", "head, method")
        assert not (tmp_path / "o").exists()
    r = CliRunner().invoke(main, ["score", "--store", str(tmp_path / "no-store"), "--manifests", str(tmp_path),
                                  "--scorer", "clip", "--out", str(tmp_path / "s")])  # fmt: skip
    _one_line_refusal(r, "--store", "does not exist", "score --help")
