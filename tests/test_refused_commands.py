"""Commands refused in one line, exit 2, leaving nothing behind: a refused
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
    tiny = ["--model", "flowclip-tiny-clip", "--pretrained", "none"]
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
        assert_refused(r, f"--where {where.split('=')[0]}", "no such column", "head, identity, method")
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
    "model typo": (["extract", "--store", "{d}/s", "--model", "ViT-B-3", "--pretrained", "none", "--manifest", "{m}"],
                   "unknown model config 'ViT-B-3'; did you mean ViT-B-32"),
    "pretrained typo": (["extract", "--store", "{d}/s", "--model", "ViT-B-32", "--pretrained", "opnai",
                         "--manifest", "{m}"], "no pretrained tag 'opnai'"),
    "results column typo": (["results", "{d}/scored", "--where", "hed=flow"], "no such column"),
}  # fmt: skip


def test_typical_mistakes_are_refused_before_torch_is_imported(tmp_path, sample):
    """16 of 20 typical mistakes answered only after torch was imported (1.9-6.5
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


PROBE = (
    "import sys\nfrom flowclip_cache.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
    "    print('EXIT', e.code, 'torch' in sys.modules)\n"
)


def _refused_before_torch(args, says, cwd, name):
    """One fresh process: exit 2, one line holding `says`, torch never imported."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], capture_output=True, text=True, cwd=str(cwd))
    assert r.stdout.strip().splitlines()[-1:] == ["EXIT 2 False"], (name, r.stdout[-800:], r.stderr[-1500:])
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("WARNING")]
    assert len(lines) == 1 and all(w in lines[0] for w in says), (name, lines)


def _bomb(levels: int) -> str:
    """A YAML alias bomb: 9**levels values in a few hundred bytes."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_mistakes_with_stores_runs_and_files_are_refused_before_torch(lab, tmp_path):
    """Each mistake a store, a run folder, a manifest or a config file can carry, and each
    flag out of range: exit 2, one line, torch never imported, nothing written."""
    import json
    import shutil

    import pyarrow.parquet as pq

    import flowclip_cache as fc

    d, tr, cand = tmp_path, lab["training"], lab["candidates"]
    run = fc.train_head(lab["store"], tr, str(d / "run"), head="global", epochs=1, batch_size=4, quiet=True).folder
    other = d / "other-store"
    r = CliRunner().invoke(main, ["extract", "--store", str(other), "--model", "flowclip-tiny-clip", "--pretrained",
                                  "none", "--init-seed", "3", "--manifest", tr, "--image-root", lab["image_root"],
                                  "--quiet"])  # fmt: skip
    assert r.exit_code == 0, r.output
    run2 = fc.train_head(str(other), tr, str(d / "run2"), head="global", epochs=1, batch_size=4, quiet=True).folder
    shutil.copytree(run, d / "trunc")
    w = (d / "trunc" / "head.safetensors").read_bytes()
    (d / "trunc" / "head.safetensors").write_bytes(w[: len(w) // 2])
    for twin in ("a", "b"):
        shutil.copytree(run, d / twin / "run")
    shutil.copytree(run, d / "run_lr")
    cfg = json.loads((d / "run_lr" / "config.json").read_text())
    cfg["train"]["lr"] = 0.5
    (d / "run_lr" / "config.json").write_text(json.dumps(cfg))
    shutil.copytree(run, d / "deep")
    (d / "deep" / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    (d / "userdir").mkdir()
    (d / "userdir" / "notes.txt").write_text("mine")
    (d / "norun").mkdir()
    (d / "bad.csv").write_text("a,b\n1,2\n")
    t = pq.read_table(cand)
    pq.write_table(t.slice(0, 0), d / "empty.parquet")
    shutil.copy(cand, d / "copy.parquet")
    (d / "img").mkdir()
    os.symlink("/etc/hostname", d / "img" / "out.jpg")
    import pyarrow as pa

    from flowclip_cache.manifest import write_manifest

    row = {"record_id": ["r0"], "image": ["out.jpg"], "captions": [["a red cube", "a blue cube"]], "gold": [0]}
    write_manifest(str(d / "link.parquet"), pa.table(row), "candidates")
    (d / "study.yaml").write_text(f"kind: ablation\nstore: {lab['store']}\ntrain: {tr}\n" + _bomb(9))
    (d / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    sweep = f"store: {lab['store']}\ntrain: {tr}\nout: {d}/sw\neval: [{cand}]\n"
    (d / "sweep.yaml").write_text(sweep + f"validation: {d}/nowhere.parquet\n")
    (d / "bomb-sweep.yaml").write_text(_bomb(9) + sweep + "pruner: median\npruner_options: {n: *a9}\n")
    S = ["score", "--store", lab["store"], "--manifests"]
    mistakes = {
        "a training manifest given to score": ([*S, tr, "--scorer", "clip", "--out", d / "o"], ["a training set"]),
        "a truncated head.safetensors": ([*S, cand, "--scorer", d / "trunc", "--out", d / "o"], ["unreadable"]),
        "an unknown --head-option": (["train-head", "--store", lab["store"], "--train", tr, "--out", d / "r",
                                      "--head", "global", "--head-option", "foo=1"], ["not options of the global"]),
        "publish of a folder that is no run": (["publish", d / "norun", "--out", d / "pub"], ["no DONE"]),
        "score --out onto a user's folder": ([*S, cand, "--scorer", "clip", "--out", d / "userdir"],
                                             ["not a folder flowclip wrote"]),
        "a run of another encoder's store": ([*S, cand, "--scorer", run2, "--out", d / "o"],
                                             ["random weights (seed 3)", "random weights (seed 0)"]),
        "a CSV as a manifest": ([*S, d / "bad.csv", "--scorer", "clip", "--out", d / "o"], ["not a readable Parquet"]),
        "an empty manifest": ([*S, d / "empty.parquet", "--scorer", "clip", "--out", d / "o"], ["is empty"]),
        "test-time-match on no group task": (["test-time-match", "--store", lab["store"], "--manifest", cand,
                                              "--scorer", "clip", "--out", d / "o"], ["takes a 2x2 group task"]),
        "one label for two runs": ([*S, cand, "--scorer", d / "a" / "run", "--scorer", d / "b" / "run", "--out",
                                    d / "o"], ["two scorers named 'run'"]),
        "one name for two different runs": ([*S, cand, "--scorer", f"x={run}", "--scorer", f"x={d}/run_lr",
                                             "--out", d / "o"], ["differ in lr"]),
        "two copies of a registered benchmark": ([*S, cand, "--manifests", d / "copy.parquet", "--scorer", "clip",
                                                  "--out", d / "o"], ["a registered benchmark's copies"]),
        "train-head --epochs 0": (["train-head", "--store", lab["store"], "--train", tr, "--out", d / "r",
                                   "--epochs", "0"], ["must be at least 1"]),
        "score --bootstrap -5": ([*S, cand, "--scorer", "clip", "--out", d / "o", "--bootstrap", "-5"], ["x>=0"]),
        "extract --batch-size 0": (["extract", "--store", d / "s", "--model", "flowclip-tiny-clip", "--pretrained",
                                    "none", "--manifest", cand, "--image-root", lab["image_root"], "--batch-size",
                                    "0"], ["x>=1"]),
        "export without --format": (["export", d, "--benchmark", "x", "--scorer", "y", "--out", d / "o"],
                                    ["Missing option '--format'", "c0_i0"]),
        "train-head --overwrite onto a user's folder": (["train-head", "--store", lab["store"], "--train", tr,
                                                         "--out", d / "userdir", "--overwrite"],
                                                        ["not a folder flowclip wrote"]),
        "a sweep whose validation manifest does not exist": (["sweep", d / "sweep.yaml"], ["does not exist"]),
        "an image symlinked out of the root, --on-error fail": (
            ["extract", "--store", d / "s", "--model", "flowclip-tiny-clip", "--pretrained", "none",
             "--manifest", d / "link.parquet",
             "--image-root", d / "img", "--on-error", "fail"], ["out.jpg"]),
        "a study file of aliases": (["run", d / "study.yaml", "--dry-run"], ["expands to over 100,000 values"]),
        "a sweep's pruner_options of aliases": (["sweep", d / "bomb-sweep.yaml"], ["expands to over 100,000"]),
        "an override of aliases": (["run", "synthetic", "seeds=" + _bomb(7).replace("\n", ", ").join("{}"),
                                    "--dry-run"], ["refused"]),
        "a study file nested 5,000 deep": (["run", d / "deep.yaml", "--dry-run"], ["nested over 100 levels"]),
        "a config.json nested 200,000 deep": ([*S, cand, "--scorer", d / "deep", "--out", d / "o"],
                                              ["nested too deeply"]),
    }  # fmt: skip
    for name, (args, says) in mistakes.items():
        _refused_before_torch(args, says, tmp_path, name)
    assert not any((d / n).exists() for n in ("o", "r", "s", "pub", "sw"))
