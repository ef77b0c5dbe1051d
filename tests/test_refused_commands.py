"""Commands refused in one line, exit 2, leaving nothing behind (issue 53): a refused
extract creates no store; an unknown --where column names the columns; a missing store
is one line, not click's usage block."""

import os

from click.testing import CliRunner
from conftest import assert_refused

from flowclip_cache.cli import main


def test_a_refused_extract_leaves_no_store(tmp_path, sample):
    """A missing or wrong --image-root: refused before the store exists (before: store.json
    and empty folders stayed, and the corrected command with another encoder was refused as
    'another encoder configuration')."""
    store = tmp_path / "store"
    base = ["extract", "--store", str(store), "--manifest", sample["candidates"], "--workers", "0", "--quiet"]
    tiny = ["--model", "flowclip-tiny-clip"]
    r = CliRunner().invoke(main, base + tiny + ["--image-root", str(tmp_path / "nowhere")])
    assert_refused(r, "does not exist")
    assert not store.exists()
    (tmp_path / "wrong").mkdir()
    r = CliRunner().invoke(main, base + tiny + ["--image-root", str(tmp_path / "wrong")])
    assert_refused(r, "none of the", "--image-root")
    assert not store.exists()
    r = CliRunner().invoke(main, base + tiny + ["--init-seed", "3", "--image-root", sample["image_root"]])
    assert r.exit_code == 0, r.output  # the corrected command, with another encoder configuration
    assert os.path.isfile(store / "store.json")


def _scored(scored):
    """A score output as flowclip score marks it: one scorer's SugarCrepe headline."""
    import json

    from flowclip_cache import outputs

    scored.mkdir()
    summary = {"scorers": [{"run": "flow", "kind": "flow", "train": {"lr": 0.001}}],
               "results": {"real|flow": {"sugarcrepe": {"score": 0.5}}}}  # fmt: skip
    (scored / "results.json").write_text(json.dumps(summary))
    outputs.mark(str(scored), "score-results", ["results.json"])


def test_unknown_where_column_and_a_missing_store_are_one_line(tmp_path):
    """Before: an empty table and exit 0 (and --out wrote it)."""
    scored = tmp_path / "scored"
    _scored(scored)
    r = CliRunner().invoke(main, ["results", str(scored), "--where", "head=flow"])
    assert r.exit_code == 0 and "| 50.00 |" in r.output, r.output
    for where in ("nosuch=1", "head.kind=flow"):
        r = CliRunner().invoke(main, ["results", str(scored), "--where", where, "--out", str(tmp_path / "o")])
        assert_refused(r, f"--where {where.split('=')[0]}", "no such column", "head, method")
        assert not (tmp_path / "o").exists()
    r = CliRunner().invoke(main, ["score", "--store", str(tmp_path / "no-store"), "--manifests", str(tmp_path),
                                  "--scorer", "clip", "--out", str(tmp_path / "s")])  # fmt: skip
    assert_refused(r, "--store", "does not exist", "score --help")


MISTAKES = {  # a typical mistake -> what its one line says; each refused before torch is imported
    "head kind typo": (["train-head", "--store", "{d}", "--train", "{m}", "--out", "{d}/r", "--head", "flwo"],
                       "must be one of ['clip', 'global', 'flow'"),
    "negative lr": (["train-head", "--store", "{d}", "--train", "{m}", "--out", "{d}/r", "--lr", "-1"],
                    "key 'lr': must be at least 0.0"),
    "a missing head file": (["train-head", "--store", "{d}", "--train", "{m}", "--out", "{d}/r", "--head",
                             "{d}/nohead.py:Mine"], "no such file"),
    "unknown key in a config file": (["train-head", "--store", "{d}", "--train", "{m}", "--out", "{d}/r", "--config",
                                      "{d}/head.yaml"], "unknown keys ['lrr']"),
    "scorer typo": (["score", "--store", "{d}", "--manifests", "{m}", "--scorer", "clpi", "--out", "{d}/o"],
                    "the folder clpi does not exist"),
    "controls typo": (["score", "--store", "{d}", "--manifests", "{m}", "--scorer", "clip", "--controls",
                       "real,shufle", "--out", "{d}/o"], "unknown ['shufle']"),
    "suite typo": (["score", "--store", "{d}", "--manifests", "{m}", "--scorer", "clip", "--suite", "feild",
                    "--out", "{d}/o"], "no such suite"),
    "explain's scorer": (["explain", "--store", "{d}", "--manifest", "{m}", "--scorer", "a={d}/x", "--scorer",
                          "clip", "--out", "{d}/e"], "does not exist"),
    "study key typo": (["run", "synthetic", "seedz=[0]", "--dry-run"], "unknown keys ['seedz']"),
    "study file key typo": (["run", "{d}/study.yaml", "--dry-run"], "unknown keys ['trian']"),
    "sweep key typo": (["sweep", "{d}/sweep.yaml"], "unknown keys ['trails']"),
    "model typo": (["extract", "--store", "{d}/s", "--model", "ViT-B-3", "--manifest", "{m}"],
                   "unknown model config 'ViT-B-3'; did you mean ViT-B-32"),
    "pretrained typo": (["extract", "--store", "{d}/s", "--model", "ViT-B-32", "--pretrained", "opnai",
                         "--manifest", "{m}"], "no pretrained tag 'opnai'"),
    "results column typo": (["results", "{d}/scored", "--where", "hed=flow"], "no such column"),
}  # fmt: skip


def test_typical_mistakes_are_refused_before_torch_is_imported(tmp_path, sample):
    """Issue 53: 16 of 20 typical mistakes answered only after torch was imported (1.9-6.5
    CPU-s each). Each now: exit 2, one line, and torch never imported (checked in a fresh
    process per mistake)."""
    import subprocess
    import sys

    (tmp_path / "head.yaml").write_text("lrr: 1\n")
    _scored(tmp_path / "scored")
    (tmp_path / "study.yaml").write_text(f"kind: ablation\nstore: {tmp_path}\ntrian: {sample['training']}\n")
    (tmp_path / "sweep.yaml").write_text(f"store: {tmp_path}\ntrain: {sample['training']}\ntrails: 3\n")
    probe = (
        "import sys\nfrom flowclip_cache.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
        "    print('EXIT', e.code, 'torch' in sys.modules)\n"
    )
    for name, (args, says) in MISTAKES.items():
        argv = [a.format(d=tmp_path, m=sample["training"]) for a in args]
        r = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, cwd=str(tmp_path))
        assert r.stdout.strip().splitlines()[-1] == "EXIT 2 False", (name, r.stdout, r.stderr[-1500:])
        lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("WARNING")]
        assert len(lines) == 1 and says in lines[0], (name, lines)


def test_the_kinds_read_without_torch_are_the_registrys():
    """head_specs.builtin_kinds reads heads/ as text: the same kinds, in the same order, as
    the registry the imported heads build (a new head file and its registry line are all)."""
    from flowclip_cache.head_specs import builtin_kinds
    from flowclip_cache.heads import HEAD_KINDS

    assert builtin_kinds() == HEAD_KINDS
