"""flowclip run: plan, overrides, refusals, and a reduced synthetic grid killed and rerun."""

import glob
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from flowclip_cache.cli import main

SYNTH = "synthetic"  # a packaged config, by name
REDUCED = [
    "world={seed: 0, train_scenes: 40, eval_scenes: 30, heldout_scenes: 10}",
    "encoder={model: flowclip-tiny-vit, pretrained: none}",
    "seeds=[0,1]",
    "heads={global: {head: global}, flow: {head: flow, cimr: 0.1}}",
    "train_config.epochs=1",
    "train_config.batch_size=8",
    "compare=[[global,flow]]",
    "bootstrap=200",
    "controls=[real,shuffle]",
]


def test_every_pipeline_file_names_its_command_and_parses():
    import yaml

    from flowclip_cache.commands.studies import shipped_studies
    from flowclip_cache.config import build, find_config
    from flowclip_cache.studies import pipeline_module

    names = shipped_studies()
    assert {"ablation", "sensitivity", "synthetic", "zoo", "readouts", "adaptation", "binding-lab"} <= set(names)
    for name in names:
        path = find_config(name)
        first = open(path).readline()
        assert first.startswith(f"# flowclip run {name}"), name
        data = yaml.safe_load(open(path))
        build(pipeline_module(data["kind"]).CONFIG, data, path)


def test_dry_run_and_errors(tmp_path):
    r = CliRunner().invoke(main, ["run", SYNTH, f"out={tmp_path}/s", "--dry-run", *REDUCED])
    assert r.exit_code == 0, r.output
    assert r.output.count("[todo   ]") == 4 and not os.path.exists(tmp_path / "s" / "runs")
    # the world is not built yet: its records are estimated, a step timed on random features
    assert "training records: about" in r.output and "epochs x ~" in r.output and "x ? steps" not in r.output
    assert "time left: about" in r.output and "an estimate" in r.output
    # a cap on steps is the plan
    r = CliRunner().invoke(main, ["run", SYNTH, f"out={tmp_path}/s", "--dry-run", *REDUCED, "train_config.max_steps=5"])
    assert r.exit_code == 0, r.output
    assert r.output.count("5 steps (max_steps; 1 epochs x ~") == 4 and "(40 steps," not in r.output, r.output
    assert "time left: about" in r.output and "(20 steps," in r.output, r.output
    r = CliRunner().invoke(main, ["run", SYNTH, "--dry-run", f"out={tmp_path}/s", "training_free=[flow]"])
    assert r.exit_code == 2 and "['flow'] are not training-free scorers; use filip-score" in r.output, r.output
    r = CliRunner().invoke(main, ["run", SYNTH, "--dry-run", "seedz=[0]"])
    assert r.exit_code == 2 and "unknown keys ['seedz']" in r.output
    r = CliRunner().invoke(main, ["run", SYNTH, "--dry-run", "seeds=zero"])
    assert r.exit_code == 2 and "key 'seeds': expected a list" in r.output
    r = CliRunner().invoke(main, ["run", "sensitivity", "--dry-run", f"out={tmp_path}/sens"])
    # it names no store (its header passes one): the plan is printed, the problem named, nothing made
    assert r.exit_code == 2 and r.output.count("[todo   ]") == 8 and "no store=... given" in r.output
    assert not os.path.exists(tmp_path / "sens")
    r = CliRunner().invoke(main, ["run", SYNTH, f"out={tmp_path}/c", "--dry-run", *REDUCED, "device=cuda:7"])
    assert r.exit_code == 2 and "device= cuda:7:" in r.output and "Traceback" not in r.output


def test_dry_run_checks_everything_and_creates_nothing(tmp_path, sample, tiny_encoder):
    """Store and fingerprint, manifests and their kinds, every feature (or the extract
    command), the plan with steps and a measured time estimate; a training manifest in
    the eval folder is skipped with a note, not an error after training."""
    import shutil

    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.store import FeatureStore

    fs = FeatureStore.open_or_create(str(tmp_path / "store"), tiny_encoder.config)
    run_extract(
        fs, tiny_encoder, [sample["candidates"], sample["training"]], sample["image_root"], workers=0, progress=False
    )
    evals = tmp_path / "evals"
    evals.mkdir()
    shutil.copy(sample["candidates"], evals / "sample.parquet")
    shutil.copy(sample["training"], evals / "train-too.parquet")  # the README's old mistake
    args = [
        "run",
        "ablation",
        f"store={fs.root}",
        f"train={sample['training']}",
        f"eval=[{evals}]",
        f"out={tmp_path}/study",
        "seeds=[0]",
        "train_config.epochs=1",
        "train_config.batch_size=4",
        "--dry-run",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert f"fingerprint {fs.fingerprint[:16]}" in r.output and "every feature stored" in r.output
    assert "note: skipping" in r.output and "train-too.parquet: a training manifest" in r.output
    assert (
        r.output.count("[todo   ]") == 4
        and "time left: about" in r.output
        and "dry run: every check passed" in r.output
    )
    assert not os.path.exists(tmp_path / "study")
    # a caption the store lacks: named, with the extract command to run; still nothing created
    import pyarrow as pa

    from flowclip_cache.manifest import Manifest, write_manifest

    m = Manifest.read(sample["candidates"])
    rows = m.table.to_pylist()
    rows[0]["captions"] = ["a caption never extracted", rows[0]["captions"][1]]
    write_manifest(evals / "sample.parquet", pa.Table.from_pylist(rows), "candidates", m.meta)
    r = CliRunner().invoke(main, args)
    assert (
        r.exit_code == 2 and "'a caption never extracted'" in r.output and "Run: flowclip extract --store" in r.output
    )
    assert not os.path.exists(tmp_path / "study")
    # a training record without negatives: refused by the checks, as training would refuse it
    write_manifest(evals / "sample.parquet", m.table, "candidates", m.meta)
    t = Manifest.read(sample["training"])
    rows = t.table.to_pylist()
    rows[1]["negatives"] = []
    write_manifest(tmp_path / "t.parquet", pa.Table.from_pylist(rows, schema=t.table.schema), "training", t.meta)
    r = CliRunner().invoke(main, [a if not a.startswith("train=") else f"train={tmp_path}/t.parquet" for a in args])
    assert r.exit_code == 2 and "rows [1] have no negatives" in r.output, r.output
    assert not os.path.exists(tmp_path / "study")


@pytest.mark.slow
def test_killed_grid_resumes_without_redoing_finished_runs(tmp_path):
    cmd = [sys.executable, "-m", "flowclip_cache.cli", "run", SYNTH, *REDUCED]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    ref = subprocess.run(cmd + [f"out={tmp_path}/ref"], env=env, capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr
    out = tmp_path / "victim"
    proc = subprocess.Popen(cmd + [f"out={out}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    done_before = {}
    while time.time() < deadline and proc.poll() is None:
        runs = out / "runs"
        if runs.exists():
            done_before = {
                d: os.path.getmtime(runs / d / "DONE") for d in os.listdir(runs) if (runs / d / "DONE").exists()
            }
            if len(done_before) >= 2:
                break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 1 <= len(done_before) < 4, "the kill should land part-way through the grid"
    again = subprocess.run(cmd + [f"out={out}"], env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    for d, mtime in done_before.items():
        assert os.path.getmtime(out / "runs" / d / "DONE") == mtime, f"{d} was redone"
    a = json.load(open(tmp_path / "ref" / "summary.json"))
    b = json.load(open(out / "summary.json"))
    assert a["table"] == b["table"] and a["bootstrap"] == b["bootstrap"]
    assert os.path.exists(out / "summary.png") and os.path.exists(out / "STUDY_DONE")
    # a third run does nothing
    third = subprocess.run(cmd + [f"out={out}"], env=env, capture_output=True, text=True)
    assert "the study is finished" in third.stdout


def test_profile_command_writes_and_guards_the_profile(tmp_path):
    out = f"out={tmp_path}/p"
    small = [REDUCED[0], REDUCED[1]]
    r = CliRunner().invoke(main, ["profile", SYNTH, out, *small])
    assert r.exit_code == 0, r.output
    assert "| flowclip-tiny-vit (none, standard) |" in r.output and "object contrast" in r.output
    prof = json.load(open(tmp_path / "p" / "profile.json"))
    g = prof["grounding"]
    assert set(prof["accuracy"]) == {
        "object",
        "swap-att",
        "swap-obj",
        "relation",
        "order",
        "add",
        "replace",
        "heldout-swap-att",
    }
    assert g["words"] > 0 and 0 < g["chance"] < 1 and 0 < g["object_chance"] <= 0.5
    r = CliRunner().invoke(main, ["profile", SYNTH, out, *small])  # same encoder, same profile: fine
    assert r.exit_code == 0, r.output
    prof["accuracy"]["object"] = 0.0  # a different profile is kept ...
    json.dump(prof, open(tmp_path / "p" / "profile.json", "w"))
    r = CliRunner().invoke(main, ["profile", SYNTH, out, *small])
    assert r.exit_code == 2 and "--overwrite" in r.output
    r = CliRunner().invoke(main, ["profile", SYNTH, out, *small, "--overwrite"])  # ... unless asked
    assert r.exit_code == 0 and json.load(open(tmp_path / "p" / "profile.json"))["accuracy"]["object"] > 0


def test_a_study_trains_from_the_store_placement(tmp_path, monkeypatch):
    """data_placement is a study key: several heads share one bank read from the store.
    The training manifest is read once: the study trains on the records its checks read."""
    from flowclip_cache.training import training_data

    reads = []
    real = training_data.training_records
    monkeypatch.setattr(training_data, "training_records", lambda *a, **k: reads.append(1) or real(*a, **k))
    r = CliRunner().invoke(
        main,
        [
            "run",
            SYNTH,
            f"out={tmp_path}/s",
            *REDUCED,
            "seeds=[0]",
            "bootstrap=0",
            "compare=[]",
            "data_placement=store",
            "--quiet",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "placement 'store'" in r.output and os.path.exists(tmp_path / "s" / "summary.md")
    md = open(tmp_path / "s" / "summary.md").read()  # the cross-task columns name their members
    assert "`syn-binding` = mean of synthetic-swap-att, synthetic-swap-obj, synthetic-heldout-swap-att" in md
    # one more seed: the summary in place no longer answers the grid, so it is not "finished"
    more = [
        "run",
        SYNTH,
        f"out={tmp_path}/s",
        *REDUCED,
        "seeds=[0,1]",
        "bootstrap=50",
        "resample_seeds=true",  #
        "data_placement=store",
        "--quiet",
    ]
    reads.clear()
    r = CliRunner().invoke(main, more)
    assert r.exit_code == 0, r.output
    assert len(reads) == 1  # the checks' (seed 1's runs trained on it)
    assert "made for another grid" in r.output and "the study is finished" not in r.output
    boot = json.load(open(tmp_path / "s" / "summary.json"))["bootstrap"]
    assert boot and all(v["seeds_resampled"] and 0 <= v["p_two_sided"] <= 1 for d in boot.values() for v in d.values())
    assert "each draw also draws each method's seeds" in open(tmp_path / "s" / "summary.md").read()
    timing = json.load(open(tmp_path / "s" / "summary.json"))["timing"]
    assert any(k.endswith("seed-1") for k in timing["train_seconds_per_run"])
    assert any(k.endswith("seed-0") for k in timing["train_seconds_per_run"])
    # where this study's time went, its stages only (other tests ran in this process)
    stages = timing["stage_seconds"]
    assert {"imports", "checks", "loading", "steps", "evaluation", "scoring", "summary"} <= set(stages), stages
    assert 0 < sum(stages.values()) <= timing["study_wall_seconds"] <= timing["this_invocation_seconds"]
    assert "Where the time went: " in open(tmp_path / "s" / "summary.md").read()
    assert "the study is finished" in CliRunner().invoke(main, more).output


def test_encoders_study_dry_run_then_side_by_side(tmp_path, sample, blip_folder):
    """backbones.yaml / encoders.yaml: a dry run names each missing store with its extract
    command and creates nothing; with stores it checks each, refuses a store made by
    another model than its row names, and runs one study per encoder plus a combined table."""
    from flowclip_cache.extraction.encoders import EncoderSpec, resolve
    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.store import FeatureStore

    for name in ("backbones", "encoders"):
        r = CliRunner().invoke(main, ["run", name, f"out={tmp_path}/{name}", "--dry-run"])
        assert r.exit_code == 2 and "no store at cache/" in r.output and "flowclip extract --store" in r.output
        assert not os.path.exists(tmp_path / name)
    stores = {}
    for label, model in (("tiny", "flowclip-tiny-vit"), ("blip", f"blip:{blip_folder}")):
        fs = FeatureStore.open_or_create(str(tmp_path / label), resolve(EncoderSpec(model)).config)
        run_extract(
            fs,
            resolve(EncoderSpec(model)),
            [sample["candidates"], sample["training"]],
            sample["image_root"],
            workers=0,
            progress=False,
        )
        stores[label] = (model, fs.root)
    rows = ", ".join(f"{k}: {{model: '{m}', store: '{p}'}}" for k, (m, p) in stores.items())
    base = [
        "run",
        "backbones",
        f"encoders={{{rows}}}",
        f"train={sample['training']}",
        f"eval=[{sample['candidates']}]",
        f"out={tmp_path}/study",
        "seeds=[0]",
        "train_config.epochs=1",
        "train_config.batch_size=4",
        "bootstrap=50",
        "device=cpu",
    ]
    r = CliRunner().invoke(main, [*base, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert r.output.count("[todo   ]") == 4 and not os.path.exists(tmp_path / "study")
    swapped = ", ".join(f"{k}: {{model: 'ViT-B-32', store: '{p}'}}" for k, (m, p) in stores.items())
    r = CliRunner().invoke(main, [*base[:2], f"encoders={{{swapped}}}", *base[3:], "--dry-run"])
    assert r.exit_code == 2 and "was made by flowclip-tiny-vit, not ViT-B-32" in r.output
    r = CliRunner().invoke(main, [*base, "--quiet"])
    assert r.exit_code == 0, r.output
    combined = json.load(open(tmp_path / "study" / "summary.json"))
    assert sorted(combined["encoders"]) == ["blip", "tiny"]
    md = open(tmp_path / "study" / "summary.md").read()
    for enc in ("tiny", "blip"):
        assert os.path.exists(tmp_path / "study" / enc / "summary.md")
        for method in ("clip", "global", "flow"):
            assert f"| {enc} | {method} |" in md


def test_patch_readout_is_a_grid_axis_and_profile_prints_each(tmp_path):
    """encoder.patch_readout=[standard, sclip]: one world, one store and one study per
    readout, the tables side by side; profile prints a row per readout."""
    reduced = [a for a in REDUCED if not a.startswith(("encoder=", "seeds=", "controls="))]
    enc = "encoder={model: flowclip-tiny-vit, pretrained: none, patch_readout: [standard, sclip]}"
    args = ["run", SYNTH, f"out={tmp_path}/s", *reduced, enc, "seeds=[0]", "controls=[real]"]
    r = CliRunner().invoke(main, [*args, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert r.output.count("[todo   ]") == 4 and not os.path.exists(tmp_path / "s")
    r = CliRunner().invoke(main, [*args, "--quiet"])
    assert r.exit_code == 0, r.output
    assert sorted(os.listdir(tmp_path / "s")) == [
        "FLOWCLIP_OUTPUT.json",
        "intervals.png",  # each readout's bootstrap intervals side by side
        "readout-sclip",
        "readout-standard",
        "summary.json",
        "summary.md",
        "world",
    ]
    md = open(tmp_path / "s" / "summary.md").read()
    assert "| flowclip-tiny-vit / sclip | flow |" in md and "| flowclip-tiny-vit / standard | global |" in md
    assert "(synthetic" not in md and "patch in cell" in md  # the profiles, one row per readout
    stores = {
        r: json.load(open(tmp_path / "s" / f"readout-{r}" / "store" / "store.json"))["encoder"]
        for r in ("standard", "sclip")
    }
    assert stores["sclip"]["patch_readout"] == "sclip" and "patch_readout" not in stores["standard"]
    r = CliRunner().invoke(main, ["profile", SYNTH, f"out={tmp_path}/p", REDUCED[0], enc])
    assert r.exit_code == 0, r.output
    assert "flowclip-tiny-vit (none, standard)" in r.output and "flowclip-tiny-vit (none, sclip)" in r.output
    bad = "encoder={model: flowclip-tiny-vit, patch_readout: sclip, readout: x}"
    r = CliRunner().invoke(main, ["run", SYNTH, f"out={tmp_path}/b", *reduced, bad, "--dry-run"])
    assert r.exit_code == 2 and "unknown keys ['readout']" in r.output


def test_study_encoder_keys_are_extracts_flags(siglip_tokenizer):
    """A study's encoder: mapping takes extract's flags (token mask, tokenizer folder, patch
    readout), so a study's store is the one extract would build."""
    from flowclip_cache.extraction.encoders import EncoderSpec
    from flowclip_cache.studies.ablation import encoder_spec

    got = encoder_spec(
        {
            "model": "ViT-B-16-SigLIP",
            "pretrained": "none",
            "token_mask": "content",
            "tokenizer": siglip_tokenizer,
            "init_seed": 3,
        }
    )
    assert got == EncoderSpec("ViT-B-16-SigLIP", "none", 3, "content", tokenizer=siglip_tokenizer)
    assert encoder_spec({"model": "flowclip-tiny-vit", "patch_readout": "sclip"}).patch_readout == "sclip"


def test_adaptation_study_dry_run_and_a_reduced_run(tmp_path):
    """adaptation.yaml: the plan (frozen runs, adapted seeds) with nothing created; then a
    reduced run: frozen and adapted sides, the adapted store a new encoder, the table and
    the paired bootstrap of adapted - frozen."""
    small = [
        "world={seed: 0, train_scenes: 40, eval_scenes: 30, heldout_scenes: 10}",
        "encoder={model: flowclip-tiny-vit, pretrained: none}",
        "seeds=[0]",
        "train_config.epochs=1",
        "train_config.batch_size=8",
        "adapt_config={encoder_lr: 1.0e-5, workers: 0}",
        "bootstrap=100",
    ]
    r = CliRunner().invoke(main, ["run", "adaptation", f"out={tmp_path}/a", *small, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "[todo   ] adapted encoder + head, seed 0" in r.output and not os.path.exists(tmp_path / "a")
    r = CliRunner().invoke(
        main, ["run", "adaptation", f"out={tmp_path}/a", *small, "adapt_config={lr_enc: 1}", "--dry-run"]
    )
    assert r.exit_code == 2 and "unknown keys ['lr_enc']" in r.output
    track = ["report_to=[tensorboard]"] if importlib.util.find_spec("tensorboard") else []
    r = CliRunner().invoke(main, ["run", "adaptation", f"out={tmp_path}/a", *small, *track, "--quiet"])
    assert r.exit_code == 0, r.output
    s = json.load(open(tmp_path / "a" / "summary.json"))
    assert set(s["table"]) == {"frozen", "adapted_clip", "adapted"} and "synthetic-swap-att" in s["table"]["adapted"]
    assert s["adapted_stores"]["0"] != s["frozen_store"]
    assert "adapted - frozen" in open(tmp_path / "a" / "summary.md").read() and s["bootstrap"]["synthetic-swap-att"]
    if track:  # both sides report: the frozen heads' runs, and the adapt run with its adapted head's scores
        from test_tracking import tensorboard_scalars

        adapted, _ = tensorboard_scalars(tmp_path / "a" / "adapted" / "seed-0" / "run" / "tensorboard")
        scores = json.load(open(tmp_path / "a" / "adapted" / "seed-0" / "score" / "results.json"))["results"]
        want = {f"summary/score/{b}": {0: pytest.approx(v["score"])} for b, v in scores["real|adapted"].items()}
        assert {k: adapted[k] for k in want} == want and len(adapted["train/loss"]) > 0
        (frozen,) = glob.glob(str(tmp_path / "a" / "frozen" / "runs" / "*" / "tensorboard"))
        assert "summary/score/synthetic-swap-att" in tensorboard_scalars(frozen)[0]


def test_run_help_names_every_shipped_study_and_a_bad_key_is_named_once():
    import glob

    from flowclip_cache.shipped import shipped_folder

    studies = [
        os.path.basename(p)[:-5]
        for p in glob.glob(os.path.join(shipped_folder("pipelines"), "*.yaml"))
        if "\nkind:" in open(p).read()
    ]
    assert len(studies) >= 8
    help_text = " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split()).replace("- ", "-")  # wrapped
    assert all(name in help_text for name in studies), help_text
    r = CliRunner().invoke(main, ["run", SYNTH, "--dry-run", "train_config.epochs=five"])
    assert r.exit_code == 2 and "1 problem found" in r.output, r.output
    assert r.output.count("expected int, got 'five'") == 1 and "train_config: key 'epochs'" in r.output
    r = CliRunner().invoke(main, ["run", SYNTH, "--dry-run", "heads.global.lr=fast"])
    assert r.exit_code == 2 and r.output.count("got 'fast'") == 1 and "run global" in r.output, r.output


def test_the_binding_labs_world_knobs_are_grid_axes(tmp_path):
    """binding-lab's axes, reduced: world.scene_objects=[2, 3] makes one world, store and
    study per value (each world's scenes hold that many objects), and one summary with
    every setting's bootstrap intervals (table and figure); a list in another world key is
    refused by name before anything is built."""
    import pyarrow.parquet as pq

    world = "world={seed: 0, train_scenes: 40, eval_scenes: 30, heldout_scenes: 10, scene_objects: [2, 3]}"
    reduced = [a for a in REDUCED if not a.startswith(("world=", "seeds=", "controls="))]
    args = ["run", "binding-lab", f"out={tmp_path}/lab", world, *reduced, "seeds=[0]", "controls=[real]"]
    args += ["encoder={model: flowclip-tiny-vit, pretrained: none}"]
    r = CliRunner().invoke(main, [*args, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert r.output.count("[todo   ]") == 4 and "scene_objects 3:" in r.output and not os.path.exists(tmp_path / "lab")
    r = CliRunner().invoke(main, [*args, "--quiet"])
    assert r.exit_code == 0, r.output
    lab = tmp_path / "lab"
    assert {"scene_objects-2", "scene_objects-3", "world__scene_objects-2", "world__scene_objects-3"} <= set(
        os.listdir(lab)
    )
    for k in (2, 3):
        objects = pq.read_table(lab / f"world__scene_objects-{k}" / "eval_swap-att.parquet").column("objects")
        assert {len(o) for o in objects.to_pylist()} == {k}
        assert json.load(open(lab / f"world__scene_objects-{k}" / "WORLD_DONE"))["scene_objects"] == k
    md = open(lab / "summary.md").read()
    assert "## Paired bootstrap intervals, each setting (points)" in md and os.path.exists(lab / "intervals.png")
    for k in (2, 3):
        assert f"| scene_objects {k} | synthetic-swap-att | flow - global |" in md
    summary = json.load(open(lab / "summary.json"))["encoders"]
    assert summary["scene_objects 2"]["world"]["scene_objects"] == 2
    # the token-role diagnosis of the compared Flow-CLIP head, per setting (scoring/binding_diagnosis.py)
    assert "## Which tokens carry the binding decision" in md and "| scene_objects 3 | " in md.split("tokens carry")[1]
    diag = summary["scene_objects 3"]["diagnosis"]
    assert diag["records"] > 0 and diag["seeds"] == 1
    assert sum(diag["share_of_abs_difference"].values()) == pytest.approx(1.0)
    lo, hi = diag["support_change"]["ci95_pts"]  # the colour words' support change, with its interval
    assert lo <= diag["support_change"]["mean_pts"] <= hi and "| support change |" in md
    r = CliRunner().invoke(main, ["run", "binding-lab", f"out={tmp_path}/bad", "world={seed: [0, 1]}", "--dry-run"])
    assert r.exit_code == 2 and "world.seed: a list is a study axis only for" in r.output


def test_the_text_tower_is_a_grid_axis(tmp_path):
    """encoder.model=[causal, bidirectional] (the binding lab's text-tower axis): one study
    and store per model, crossed with the readouts, in one shared world (the models see the
    same scenes); the dry run plans every run and creates nothing; a repeated model is
    refused by name."""
    from flowclip_cache.config import build
    from flowclip_cache.studies import ablation
    from flowclip_cache.studies.grid import study_grid

    towers = "[flowclip-tiny-clip, flowclip-tiny-clip-bidir]"
    enc = f"encoder={{model: {towers}, pretrained: none, patch_readout: [standard, clearclip]}}"
    reduced = [a for a in REDUCED if not a.startswith(("encoder=", "seeds=", "controls="))]
    args = ["run", "binding-lab", f"out={tmp_path}/lab", *reduced, enc, "seeds=[0]", "controls=[real]"]
    r = CliRunner().invoke(main, [*args, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert r.output.count("[todo   ]") == 8 and not os.path.exists(tmp_path / "lab")
    assert "flowclip-tiny-clip-bidir / clearclip:" in r.output
    settings = {"kind": "ablation", "out": "o", "world": {"seed": 0}, "encoder": {"model": ["a", "b"]}}
    cfg = build(ablation.CONFIG, settings, "t")
    grid = study_grid(cfg)
    assert [(label, sub.out, sub.encoder["model"]) for label, sub in grid] == [
        ("a / standard", os.path.join("o", "model-a"), "a"),
        ("b / standard", os.path.join("o", "model-b"), "b"),
    ]
    assert {sub.world_folder for _, sub in grid} == {os.path.join("o", "world")}  # one world for both
    r = CliRunner().invoke(main, [*args[:-2], "encoder={model: [flowclip-tiny-clip, flowclip-tiny-clip]}", "--dry-run"])
    assert r.exit_code == 2 and "encoder.model: a list of distinct values" in r.output


def test_numbers_with_an_exponent_and_no_point_are_numbers(tmp_path):
    """`lr: 1e-4` in a config or an override is the number 1e-4 (PyYAML's YAML 1.1 read it
    as the text '1e-4', and the run was refused: key 'lr': expected float, got '8e-05')."""
    from flowclip_cache.config import load_yaml, parse_overrides

    (tmp_path / "c.yaml").write_text("train_config: {lr: 8e-05, tau_c: 1E-2, epochs: 2}\nname: a1e3\n")
    assert load_yaml(str(tmp_path / "c.yaml")) == {
        "train_config": {"lr": 8e-05, "tau_c": 0.01, "epochs": 2},
        "name": "a1e3",
    }
    assert parse_overrides(["train_config.lr=3e-4", "seeds=[0,1]"]) == [
        (["train_config", "lr"], 3e-4),
        (["seeds"], [0, 1]),
    ]
    r = CliRunner().invoke(main, ["run", SYNTH, f"out={tmp_path}/s", "--dry-run", *REDUCED, "train_config.lr=3e-4"])
    assert r.exit_code == 0, r.output
