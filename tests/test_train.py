"""train-head: determinism, resume after SIGKILL, refusals, logs."""

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from flowclip_cache.cli import main
from flowclip_cache.errors import FlowclipError
from flowclip_cache.extraction.extract import run_extract
from flowclip_cache.manifest import write_manifest
from flowclip_cache.store import FeatureStore
from flowclip_cache.synthetic.sample import make_sample
from flowclip_cache.training import checkpoint
from flowclip_cache.training import losses as losses_mod
from flowclip_cache.training.loop import TrainConfig, train_head
from flowclip_cache.training.run_folder import load_head


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_encoder):
    root = tmp_path_factory.mktemp("train")
    s = make_sample(str(root / "sample"), n_images=40)
    fs = FeatureStore.open_or_create(str(root / "store"), tiny_encoder.config)
    run_extract(fs, tiny_encoder, [s["training"]], s["image_root"], workers=0, progress=False)
    fs.refresh()
    return {"store": fs, "manifest": s["training"], "root": root, "sample": s}


def cfg(**kw):
    base = dict(head="flow", epochs=2, batch_size=8, lr=1e-3, train_eval_records=16, checkpoint_every=3)
    base.update(kw)
    return TrainConfig(**base)


def weights(run):
    return load_file(os.path.join(run, "head.safetensors"))


def test_same_seed_bit_identical_and_logs(world, tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    train_head(world["store"], world["manifest"], a, cfg(), progress=False, log=lambda *_: None)
    train_head(world["store"], world["manifest"], b, cfg(), progress=False, log=lambda *_: None)
    wa, wb = weights(a), weights(b)
    assert set(wa) == {"M", "M_tok", "W"}
    for k in wa:
        assert torch.equal(wa[k], wb[k])
    assert not torch.equal(wa["W"], torch.zeros_like(wa["W"]))  # it trained
    lines = [json.loads(x) for x in open(os.path.join(a, "log.jsonl"))]
    steps = [x for x in lines if "step" in x]
    assert {"loss", "hnb", "cimr", "lr", "grad_norm", "steps_per_s", "mean_abs_s_token", "token_margin"} <= set(
        steps[0]
    )
    evals = [x["eval"] for x in lines if "eval" in x]
    assert [e["epoch"] for e in evals] == [0, 1, 2] and "val" in evals[0]
    conf = json.load(open(os.path.join(a, "config.json")))
    assert conf["store_fingerprint"] == world["store"].fingerprint and len(conf["manifest_sha256"]) == 64
    assert conf["train"]["lr"] == 1e-3 and os.path.exists(os.path.join(a, "DONE"))


def test_resume_in_process_equals_uninterrupted(world, tmp_path):
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    train_head(world["store"], world["manifest"], full, cfg(), progress=False, log=lambda *_: None)
    train_head(world["store"], world["manifest"], part, cfg(), progress=False, log=lambda *_: None, stop_after=5)
    assert not os.path.exists(os.path.join(part, "DONE"))
    with pytest.raises(FlowclipError, match="unfinished run; pass --resume"):
        train_head(world["store"], world["manifest"], part, cfg(), progress=False, log=lambda *_: None)
    train_head(world["store"], world["manifest"], part, cfg(), progress=False, log=lambda *_: None, resume=True)
    for k, v in weights(full).items():
        assert torch.equal(v, weights(part)[k]), k


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted(world, tmp_path):
    full, victim = str(tmp_path / "full"), str(tmp_path / "victim")
    c = cfg(epochs=3, checkpoint_every=1)
    train_head(world["store"], world["manifest"], full, c, progress=False, log=lambda *_: None)
    cmd = [
        sys.executable,
        "-m",
        "flowclip_cache.cli",
        "train-head",
        "--store",
        world["store"].root,
        "--train",
        world["manifest"],
        "--out",
        victim,
        "--head",
        "flow",
        "--epochs",
        "3",
        "--batch-size",
        "8",
        "--lr",
        "1e-3",
        "--checkpoint-every",
        "1",
        "--device",
        "cpu",
        "--quiet",
    ]
    (tmp_path / "c.yaml").write_text("train_eval_records: 16\n")
    cmd += ["--config", str(tmp_path / "c.yaml")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        try:
            if checkpoint.read_state(victim).get("global_step", 0) >= 4:
                break
        except Exception:  # not written yet, or read while being replaced
            pass
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    r = subprocess.run(cmd + ["--resume"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for k, v in weights(full).items():
        assert torch.equal(v, weights(victim)[k]), k


def test_refusals(world, tmp_path, monkeypatch):
    out = str(tmp_path / "r")
    train_head(world["store"], world["manifest"], out, cfg(epochs=1), progress=False, log=lambda *_: None)
    with pytest.raises(FlowclipError, match="finished run; pass --overwrite"):
        train_head(world["store"], world["manifest"], out, cfg(epochs=1), progress=False, log=lambda *_: None)
    train_head(
        world["store"], world["manifest"], out, cfg(epochs=1), overwrite=True, progress=False, log=lambda *_: None
    )
    # NaN: stop, keep the last good checkpoint
    nan_out = str(tmp_path / "nan")
    real = losses_mod.hnb_loss
    calls = {"n": 0}

    def poisoned(*a, **k):
        calls["n"] += 1
        loss = real(*a, **k)
        return loss * float("nan") if calls["n"] == 5 else loss

    monkeypatch.setattr(losses_mod, "hnb_loss", poisoned)
    with pytest.raises(FlowclipError, match="non-finite loss"):
        train_head(world["store"], world["manifest"], nan_out, cfg(), progress=False, log=lambda *_: None)
    w, _, state = checkpoint.load(nan_out)
    # the epoch-end checkpoint before the poisoned step 5 is kept
    assert state["global_step"] == 4 and not os.path.exists(os.path.join(nan_out, "DONE"))
    assert all(torch.isfinite(v).all() for v in w.values())


def test_resume_on_another_encoder_is_refused(world, tmp_path):
    out = str(tmp_path / "x")
    train_head(world["store"], world["manifest"], out, cfg(), progress=False, log=lambda *_: None, stop_after=1)
    from flowclip_cache.extraction.encoders import EncoderSpec, resolve

    other = FeatureStore.open_or_create(
        str(tmp_path / "other"), resolve(EncoderSpec("flowclip-tiny-vit", init_seed=1)).config
    )
    with pytest.raises(FlowclipError, match="trained on .* but this store holds"):
        train_head(other, world["manifest"], out, cfg(), resume=True, progress=False, log=lambda *_: None)


def test_missing_features_error(world, tmp_path):
    m = tmp_path / "m.parquet"
    write_manifest(
        m,
        pa.Table.from_pylist(
            [
                {
                    "record_id": "1",
                    "image": "scene_00000.png",
                    "positive": "never extracted",
                    "negatives": ["x"],
                    "split": "train",
                },
                {"record_id": "2", "image": "nowhere.png", "positive": "a", "negatives": ["b"], "split": "train"},
            ]
        ),
        "training",
    )
    with pytest.raises(FlowclipError) as e:
        train_head(world["store"], str(m), str(tmp_path / "o"), cfg(), progress=False, log=lambda *_: None)
    msg = str(e.value)
    assert "1 image rows" in msg and "'nowhere.png'" in msg and "4 captions" in msg
    assert "flowclip extract --store" in msg


def test_config_keys_and_types_are_checked(world, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr: 1e-3\nlearning_rate: 2\n")
    r = CliRunner().invoke(
        main,
        [
            "train-head",
            "--store",
            world["store"].root,
            "--train",
            world["manifest"],
            "--out",
            str(tmp_path / "o"),
            "--config",
            str(bad),
        ],
    )
    assert r.exit_code == 2 and "unknown keys ['learning_rate']" in r.output
    with pytest.raises(FlowclipError, match="'epochs': expected int"):
        TrainConfig.from_dict({"epochs": "five"})
    assert TrainConfig.from_dict({"lr": 1}).lr == 1.0
    for bad_value, why in [
        ({"batch_size": 0}, "at least 1"),
        ({"checkpoint_every": 0}, "at least 1"),
        ({"epochs": 0}, "at least 1"),
        ({"train_eval_records": -5}, "at least 0"),
        ({"lr": float("nan")}, "finite"),
        ({"tau_p": 0.0}, "greater than 0"),
        ({"head": "flwo"}, "must be one of"),
        ({"cimr": -0.1}, "at least 0"),
    ]:
        with pytest.raises(FlowclipError, match=why):
            TrainConfig.from_dict(bad_value, "c.yaml")
    # YAML syntax and tags: one line naming the file, never a traceback or constructed object
    for text, why in [
        ("lr: [1e-3\n", "not valid YAML"),
        ("lr: !!python/object:os.system ls\n", "not valid YAML"),
        ("- 1\n- 2\n", "expected a mapping"),
        ("batch_size: 0\n", "at least 1"),
    ]:
        bad.write_text(text)
        r = CliRunner().invoke(
            main,
            [
                "train-head",
                "--store",
                world["store"].root,
                "--train",
                world["manifest"],
                "--out",
                str(tmp_path / "o"),
                "--config",
                str(bad),
            ],
        )
        assert r.exit_code == 2 and why in r.output and "Traceback" not in r.output, r.output
        r = CliRunner().invoke(main, ["run", str(bad)])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert not os.path.exists(tmp_path / "o")


def test_global_and_clip_heads(world, tmp_path):
    for head in ("global", "clip"):
        out = str(tmp_path / head)
        train_head(
            world["store"], world["manifest"], out, cfg(head=head, epochs=1), progress=False, log=lambda *_: None
        )
        assert os.path.exists(os.path.join(out, "DONE"))
        assert set(weights(out)) == ({"M"} if head == "global" else set())


def test_side_by_side_equals_one_by_one(world, tmp_path):
    from flowclip_cache.training.loop import train_heads

    cfgs = {
        "g": cfg(head="global", epochs=1),
        "f": cfg(head="flow", cimr=0.0, epochs=1),
        "fc": cfg(head="flow", cimr=0.1, epochs=1),
    }
    train_heads(
        world["store"],
        world["manifest"],
        [(str(tmp_path / f"sbs_{k}"), c) for k, c in cfgs.items()],
        progress=False,
        log=lambda *_: None,
    )
    for k, c in cfgs.items():
        train_head(
            world["store"], world["manifest"], str(tmp_path / f"one_{k}"), c, progress=False, log=lambda *_: None
        )
        a, b = weights(str(tmp_path / f"sbs_{k}")), weights(str(tmp_path / f"one_{k}"))
        assert set(a) == set(b) and all(torch.equal(a[n], b[n]) for n in a), k
    with pytest.raises(FlowclipError, match="share seed"):
        train_heads(
            world["store"],
            world["manifest"],
            [(str(tmp_path / "x1"), cfg(seed=0)), (str(tmp_path / "x2"), cfg(seed=1))],
            progress=False,
        )


def test_an_evaluation_is_computed_once_per_head_weights_and_records(world, tmp_path, monkeypatch):
    """runs that start from the same weights (two Flow-CLIP heads, CIMR 0 and 0.1,
    and a Global-M head: Flow-CLIP at W = 0 scores as Global-M, Head.scores_as) share their
    start evaluation, computed once per record set; after a step their weights differ and
    each is evaluated. The logged figures equal the solo run's, bit for bit. (A key of the
    head's class alone would share the end evaluations too: the count fails.)"""
    import json

    from flowclip_cache.training import training_data
    from flowclip_cache.training.loop import train_heads

    calls = []
    real = training_data._pairwise_accuracies  # (calls: one per head computed)
    monkeypatch.setattr(training_data, "_pairwise_accuracies", lambda h, *a: calls.extend([1] * len(h)) or real(h, *a))
    cfgs = {"f": cfg(head="flow", cimr=0.0, epochs=1), "fc": cfg(head="flow", cimr=0.1, epochs=1),
            "g": cfg(head="global", epochs=1)}  # fmt: skip
    runs = [(str(tmp_path / k), c) for k, c in cfgs.items()]
    train_heads(world["store"], world["manifest"], runs, progress=False, log=lambda *_: None)
    # start: train sample + val, once for the three runs; end of the epoch: each run's own two
    assert len(calls) == 2 + 3 * 2, len(calls)
    logged = {k: [json.loads(x) for x in open(tmp_path / k / "log.jsonl")] for k in cfgs}
    evals = {k: [r["eval"] for r in recs if "eval" in r] for k, recs in logged.items()}
    assert evals["f"][0] == evals["fc"][0] == evals["g"][0] and len(evals["f"]) == len(evals["fc"]) == 2
    train_head(world["store"], world["manifest"], str(tmp_path / "solo"), cfgs["fc"], progress=False,
               log=lambda *_: None)  # fmt: skip
    solo = [json.loads(x)["eval"] for x in open(tmp_path / "solo" / "log.jsonl") if "eval" in json.loads(x)]
    assert solo == evals["fc"]


def test_heads_evaluated_together_gather_each_chunk_once_and_score_as_alone(world):
    """runs that reach an epoch's end together are evaluated together: each chunk
    of records has its features gathered once for every head (a gather per head fails the
    count), and each head's accuracy is the one it has evaluated alone."""
    import numpy as np

    from flowclip_cache.manifest import Manifest
    from flowclip_cache.training import training_data as td

    data = td.load_training_data(world["store"], Manifest.read(world["manifest"]), True, "cpu", log=lambda *_: None)
    g = torch.Generator().manual_seed(0)
    heads = [cfg(head=k).build_head(world["store"].meta["dim"]) for k in ("flow", "global", "flow")]
    for h in heads:  # moved off the identity, each its own way
        for p in h.parameters():
            p.data += 0.3 * torch.randn(p.shape, generator=g)
    records = np.arange(len(data.split))
    gathers = []
    real = data.features
    data.features = lambda *a: gathers.append(a[2]) or real(*a)
    together = td.pairwise_accuracies(heads, data, records, chunk=16)
    assert gathers == [True] * -(-len(records) // 16)  # once a chunk, with the flow heads' tokens
    alone = []
    for h in heads:
        data.evaluations.clear()
        alone.append(td.pairwise_accuracy(h, data, records, chunk=16))
    assert together == alone and len({a["all"] for a in alone}) > 1


def test_runs_start_and_end_evaluated_together(world, tmp_path, monkeypatch):
    """Two runs from different initial weights (the Python API's head=instance): their
    start evaluations are one pass over each record set for both heads, and so are their
    end evaluations (evaluating each run as it is built fails the call list)."""
    from flowclip_cache.training import training_data
    from flowclip_cache.training.loop import train_heads

    calls = []
    real = training_data._pairwise_accuracies
    monkeypatch.setattr(training_data, "_pairwise_accuracies", lambda h, *a: calls.append(len(h)) or real(h, *a))
    dim = world["store"].meta["dim"]
    starts = []
    for scale in (0.1, 0.2):
        w = {k: v + scale for k, v in cfg(head="global").build_head(dim).state_dict().items()}
        starts.append(w)
    runs = [(str(tmp_path / f"r{i}"), cfg(head="global", epochs=1)) for i in range(2)]
    train_heads(world["store"], world["manifest"], runs, progress=False, initial_weights=starts, log=lambda *_: None)
    assert calls == [2, 2, 2, 2]  # start: train sample, val; end: the same


def test_head_defaults_are_the_papers_rows_and_are_printed(world, tmp_path):
    """Tab. 2: Global-M trains with HNB alone, complete Flow-CLIP with HNB + CIMR 0.1."""
    assert TrainConfig(head="global").cimr == 0.0 and TrainConfig(head="flow").cimr == 0.1
    assert TrainConfig(head="global", cimr=0.1).cimr == 0.1 and TrainConfig.from_dict({"head": "global"}).cimr == 0.0
    out = str(tmp_path / "g")
    args = [
        "train-head",
        "--store",
        world["store"].root,
        "--train",
        world["manifest"],
        "--out",
        out,
        "--head",
        "global",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--quiet",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "head=global" in r.output and "cimr=0.0" in r.output and "start (before training" in r.output
    r = CliRunner().invoke(main, args + ["--resume"])
    assert r.exit_code == 0 and "already finished" in r.output


@pytest.mark.parametrize("kind", sorted(__import__("flowclip_cache.heads", fromlist=["REGISTRY"]).REGISTRY))
def test_every_registered_head_trains_and_scores(world, tmp_path, kind):
    """The registry's contract end to end: train-head builds, trains, checkpoints and
    finishes any head kind; score rebuilds it from its run folder and scores it."""
    from flowclip_cache.scoring.score import run_score

    out = str(tmp_path / kind)
    args = [
        "train-head",
        "--store",
        world["store"].root,
        "--train",
        world["manifest"],
        "--out",
        out,
        "--head",
        kind,
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--quiet",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    res = run_score(
        world["store"],
        [world["sample"]["candidates"]],
        [out],
        str(tmp_path / f"s-{kind}"),
        bootstrap_draws=0,
        log=lambda *_: None,
    )
    assert 0 <= res["results"][f"real|{kind}"]["sample"]["score"] <= 1


def test_max_steps_is_a_finished_run_that_a_larger_cap_continues(world, tmp_path):
    """--max-steps N: a finished run (evaluated at step N, head written, scorable); --resume
    with a larger cap, then with none, continues it to weights bit-identical to runs trained
    to those points in one go. Side by side, each run stops at its own cap."""
    from flowclip_cache.training.loop import train_heads

    quiet = dict(progress=False, log=lambda *_: None)
    capped = str(tmp_path / "capped")
    r = CliRunner().invoke(
        main,
        ["train-head", "--store", world["store"].root, "--train", world["manifest"], "--out", capped,
         "--head", "flow", "--epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--max-steps", "3", "--quiet"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert r.output.count("start (before training") == 1 and "step 3 (max_steps" in r.output, r.output
    state = checkpoint.read_state(capped)
    assert os.path.exists(os.path.join(capped, "DONE")) and state["global_step"] == 3
    assert state["metrics"][-1]["step"] == 3 and "train_sample" in state["metrics"][-1]
    conf = json.load(open(os.path.join(capped, "config.json")))
    assert conf["train"]["max_steps"] == 3
    # a plain --resume of the finished run does nothing; a larger cap continues it
    r = CliRunner().invoke(main, ["train-head", "--store", world["store"].root, "--train", world["manifest"],
                                  "--out", capped, "--head", "flow", "--epochs", "2", "--batch-size", "8",
                                  "--lr", "1e-3", "--max-steps", "5", "--resume", "--quiet"])  # fmt: skip
    assert r.exit_code == 0 and "continuing to 5" in r.output, r.output
    # its evaluations say where they were made: the start once, then the step it stopped at
    # (: both the cap's and the resume's read "start (before training...)")
    assert r.output.count("start (before training") == 0 and "step 5 (max_steps" in r.output, r.output
    five = str(tmp_path / "five")
    base = dict(head="flow", epochs=2, batch_size=8, lr=1e-3)
    train_head(world["store"], world["manifest"], five, TrainConfig(**base, max_steps=5), **quiet)
    for k, v in weights(five).items():
        assert torch.equal(v, weights(capped)[k]), k
    assert json.load(open(os.path.join(capped, "config.json")))["train"]["max_steps"] == 5
    # no cap: on to the end of the epochs, as an uncapped run
    train_head(world["store"], world["manifest"], capped, TrainConfig(**base), resume=True, **quiet)
    whole = str(tmp_path / "whole")
    train_head(world["store"], world["manifest"], whole, TrainConfig(**base), **quiet)
    for k, v in weights(whole).items():
        assert torch.equal(v, weights(capped)[k]), k
    # side by side: the run capped at 2 stops there, the other goes on; each as alone
    two, rest = str(tmp_path / "two"), str(tmp_path / "rest")
    train_heads(world["store"], world["manifest"], [(two, TrainConfig(**base, max_steps=2)),
                                                    (rest, TrainConfig(**base))], **quiet)  # fmt: skip
    assert checkpoint.read_state(two)["global_step"] == 2
    for k, v in weights(whole).items():
        assert torch.equal(v, weights(rest)[k]), k
    alone = str(tmp_path / "alone")
    train_head(world["store"], world["manifest"], alone, TrainConfig(**base, max_steps=2), **quiet)
    for k, v in weights(alone).items():
        assert torch.equal(v, weights(two)[k]), k


def test_a_folder_without_flowclips_marker_is_never_reopened(world, tmp_path):
    """reopen_past_max_steps removes DONE and head.safetensors: only in a run folder whose
    marker says flowclip wrote it (a copied folder without it keeps every file)."""
    import shutil

    from flowclip_cache.training.head_run import HeadRun

    base = dict(head="flow", epochs=2, batch_size=8, lr=1e-3, max_steps=2)
    run = str(tmp_path / "run")
    train_head(world["store"], world["manifest"], run, TrainConfig(**base), progress=False, log=lambda *_: None)
    copy = str(tmp_path / "copy")
    shutil.copytree(run, copy)
    os.remove(os.path.join(copy, "FLOWCLIP_OUTPUT.json"))
    more = TrainConfig(**{**base, "max_steps": 4})
    assert not HeadRun.reopen_past_max_steps(copy, more, lambda *_: None)
    assert os.path.exists(os.path.join(copy, "DONE")) and os.path.exists(os.path.join(copy, "head.safetensors"))
    assert HeadRun.reopen_past_max_steps(run, more, lambda *_: None) and not os.path.exists(os.path.join(run, "DONE"))


def test_a_training_manifest_with_failed_rows_trains_on_the_rest_only_when_asked(tmp_path, tiny_encoder, sample):
    """A training record whose image extract could not read, and one whose negative was
    empty: training on the rest is refused in one line, naming how many and the first,
    unless allow_missing (--allow-missing); then they are left out by name, said, and
    recorded in the run's config.json. A study's dry run agrees."""
    import pyarrow as pa

    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.manifest import Manifest, write_manifest
    from flowclip_cache.store import FeatureStore

    rows = Manifest.read(sample["training"]).table.to_pylist()
    rows[1]["image"] = "gone.png"
    rows[4]["negatives"] = ["  "]
    man = tmp_path / "train.parquet"
    write_manifest(man, pa.Table.from_pylist(rows), "training")
    fs = FeatureStore.open_or_create(str(tmp_path / "store"), tiny_encoder.config)
    s = run_extract(fs, tiny_encoder, [str(man)], sample["image_root"], workers=0, progress=False, on_error="skip",
                    log=lambda *_: None)  # fmt: skip
    assert len(s.failures) == 2
    fs.refresh()
    said = []
    run = str(tmp_path / "run")
    with pytest.raises(FlowclipError, match=r"2 of \d+ records .* rest on an image or caption .* --allow-missing"):
        train_head(fs, str(man), run, TrainConfig(head="flow", epochs=1, batch_size=4), progress=False)
    assert not os.path.exists(run)  # refused before the run folder was made
    train_head(fs, str(man), run, TrainConfig(head="flow", epochs=1, batch_size=4), progress=False, log=said.append,
               allow_missing=True)  # fmt: skip
    assert any("left out of training" in line and rows[1]["record_id"] in line for line in said), said
    conf = json.load(open(os.path.join(run, "config.json")))
    assert [d["record"] for d in conf["excluded_failed"]] == [rows[1]["record_id"], rows[4]["record_id"]]
    assert os.path.exists(os.path.join(run, "DONE"))
    # a study's dry run agrees: no problem, and the two records said left out
    from flowclip_cache.studies.checks import check_study

    checked = check_study(store_path=fs.root, train_manifest=str(man), eval_manifests=[], runs=[], run_dirs={},
                          base_train={}, device="cpu", log=lambda *_: None)  # fmt: skip
    assert any("--allow-missing" in p for p in checked.problems), checked.problems
    checked = check_study(store_path=fs.root, train_manifest=str(man), eval_manifests=[], runs=[], run_dirs={},
                          base_train={}, device="cpu", allow_missing=True, log=lambda *_: None)  # fmt: skip
    assert not any("train" in p for p in checked.problems), checked.problems
    assert any("2 records left out (failed at extract" in line for line in checked.lines), checked.lines
    rows[0]["image"] = "never-extracted.png"  # not a recorded failure: refused as before
    write_manifest(man, pa.Table.from_pylist(rows), "training")
    with pytest.raises(FlowclipError, match="features missing from the store"):
        train_head(fs, str(man), str(tmp_path / "r2"), TrainConfig(head="flow", epochs=1, batch_size=4),
                   progress=False, log=lambda *_: None)  # fmt: skip


def test_adamw_is_torchs_without_the_compiler_stack(world, tmp_path):
    """training's AdamW steps, saves and loads as torch.optim.AdamW does, bit for
    bit, and a train-head process never imports torch._dynamo or torch._inductor (torch's
    optimiser wrappers and use_deterministic_algorithms did: +1.5-1.9 s a process)."""
    from flowclip_cache.training.adamw import AdamW

    g = torch.Generator().manual_seed(0)
    p, q = (torch.nn.Parameter(torch.randn(5, 5, generator=torch.Generator().manual_seed(1))) for _ in range(2))
    ours, theirs = AdamW([p], lr=1e-2, weight_decay=0.1), torch.optim.AdamW([q], lr=1e-2, weight_decay=0.1)
    for _ in range(4):
        grad = torch.randn(5, 5, generator=g)
        for param, opt in ((p, ours), (q, theirs)):
            opt.zero_grad(set_to_none=True)
            param.grad = grad.clone()
            opt.step()
    assert torch.equal(p, q)
    theirs.load_state_dict(ours.state_dict())
    assert str(ours.state_dict()) == str(theirs.state_dict())
    code = (
        "import sys; from flowclip_cache.cli import main\n"
        "try: main()\nexcept SystemExit as e: assert not e.code, e.code\n"
        "bad = [m for m in sys.modules if m.startswith(('torch._dynamo', 'torch._inductor'))]\n"
        "assert not bad, bad[:3]\n"
    )
    args = ["train-head", "--store", world["store"].root, "--train", world["manifest"], "--out", str(tmp_path / "r")]
    proc = subprocess.run(
        [sys.executable, "-c", code, *args, "--epochs", "1", "--batch-size", "8", "--quiet"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_score_process_imports_no_compiler_stack(lab, tmp_path):
    """scoring a run folder builds its built-in head at the store's own dimension,
    not on the meta device (whose torch.eye and normal_ import torch._dynamo: +0.7 s and
    ~900 modules a process); a config naming another size still allocates nothing."""
    run = str(tmp_path / "run")
    train_head(FeatureStore(lab["store"]), lab["training"], run, cfg(epochs=1, batch_size=4), progress=False,
               log=lambda *_: None)  # fmt: skip
    code = (
        "import sys; from flowclip_cache.cli import main\n"
        "try: main()\nexcept SystemExit as e: assert not e.code, e.code\n"
        "bad = [m for m in sys.modules if m.startswith(('torch._dynamo', 'torch._inductor'))]\n"
        "assert not bad, bad[:3]\n"
    )
    args = ["score", "--store", lab["store"], "--manifests", lab["candidates"], "--scorer", run,
            "--out", str(tmp_path / "s"), "--bootstrap", "0", "--no-figures", "--quiet"]  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    # nor the Python API's train_head, which loads the run it trained at its store's width
    api = (
        "import sys, flowclip_cache as fc\n"
        f"fc.train_head({lab['store']!r}, {lab['training']!r}, {str(tmp_path / 'api')!r}, head='flow', epochs=1, "
        "batch_size=4, quiet=True)\n"
        "bad = [m for m in sys.modules if m.startswith(('torch._dynamo', 'torch._inductor'))]\n"
        "assert not bad, bad[:3]\n"
    )
    proc = subprocess.run([sys.executable, "-c", api], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    conf = json.load(open(os.path.join(run, "config.json")))
    conf["head"]["dim"] = 1 << 24  # 2^48 weights if it were built: refused from the header alone
    json.dump(conf, open(os.path.join(run, "config.json"), "w"))
    with pytest.raises(FlowclipError, match="config.json describes"):
        load_head(run, store_dim=FeatureStore(lab["store"]).meta["dim"])


def test_train_head_with_several_outs_ends_each_as_alone(world, tmp_path, monkeypatch):
    """train-head --out A --out B (one --config each, flags for both): each run's weights
    bit-identical to its solo run; with --stack, two Global-M runs of different learning
    rates take one batched step and end within FP32 round-off of their solo runs; refused, before any folder, when
    the runs would not share their batches or the configs do not pair with the outs."""
    (tmp_path / "g.yaml").write_text("head: global\ncimr: 0.0\n")
    (tmp_path / "f.yaml").write_text("head: flow\nlr: 3.0e-3\n")
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    common = ["train-head", "--store", world["store"].root, "--train", world["manifest"], "--epochs", "2",
              "--batch-size", "8", "--quiet"]  # fmt: skip
    r = CliRunner().invoke(main, common + ["--out", a, "--config", str(tmp_path / "g.yaml"), "--out", b,
                                           "--config", str(tmp_path / "f.yaml")])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert f"done: {a}" in r.output and f"done: {b}" in r.output
    quiet = dict(progress=False, log=lambda *_: None)
    solo = {a: TrainConfig(head="global", cimr=0.0, epochs=2, batch_size=8),
            b: TrainConfig(head="flow", lr=3e-3, epochs=2, batch_size=8)}  # fmt: skip
    for run, c in solo.items():
        alone = str(tmp_path / ("solo-" + os.path.basename(run)))
        train_head(world["store"], world["manifest"], alone, c, **quiet)
        assert weights(alone).keys() == weights(run).keys()
        for k, v in weights(alone).items():
            assert torch.equal(v, weights(run)[k]), (run, k)
    from flowclip_cache.training import stacked

    (tmp_path / "g2.yaml").write_text("head: global\ncimr: 0.0\nlr: 3.0e-3\n")
    s1, s2, sizes = str(tmp_path / "s1"), str(tmp_path / "s2"), []
    real_init = stacked.StackedStep.__init__
    monkeypatch.setattr(stacked.StackedStep, "__init__", lambda self, g: sizes.append(len(g)) or real_init(self, g))
    r = CliRunner().invoke(main, common + ["--out", s1, "--config", str(tmp_path / "g.yaml"), "--out", s2,
                                           "--config", str(tmp_path / "g2.yaml"), "--stack"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert 2 in sizes  # the two took one batched step
    solo_g2 = str(tmp_path / "solo-g2")
    train_head(world["store"], world["manifest"], solo_g2, TrainConfig(head="global", cimr=0.0, lr=3e-3, epochs=2,
                                                                      batch_size=8), **quiet)  # fmt: skip
    for run, alone in ((s1, str(tmp_path / "solo-a")), (s2, solo_g2)):
        for k, v in weights(alone).items():
            assert torch.allclose(v, weights(run)[k], atol=1e-5), (run, k)
    c = str(tmp_path / "c")
    r = CliRunner().invoke(main, common + ["--out", c, "--out", str(tmp_path / "d"), "--seed", "1",
                                           "--config", str(tmp_path / "g.yaml"), "--config", str(tmp_path / "f.yaml"),
                                           "--config", str(tmp_path / "f.yaml")])  # fmt: skip
    assert r.exit_code == 2 and "3 --config for 2 --out" in r.output and not os.path.exists(c)
    (tmp_path / "s.yaml").write_text("head: flow\nseed: 4\n")
    r = CliRunner().invoke(main, common + ["--out", c, "--config", str(tmp_path / "g.yaml"), "--out",
                                           str(tmp_path / "d"), "--config", str(tmp_path / "s.yaml")])  # fmt: skip
    assert r.exit_code == 2 and "share" in r.output and "seed 4" in r.output and not os.path.exists(c)
