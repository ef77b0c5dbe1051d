"""Stacked training (issue 54): runs whose heads share a class and settings take one
batched step, and each ends as it would alone: weights and every logged evaluation bit for
bit, a killed stacked run resumed to the same weights, the dry run naming the groups."""

import json
import os

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file
from test_pipelines import REDUCED, SYNTH

from flowclip_cache.cli import main
from flowclip_cache.extraction.extract import run_extract
from flowclip_cache.store import FeatureStore
from flowclip_cache.synthetic.sample import make_sample
from flowclip_cache.training import stacked
from flowclip_cache.training.loop import TrainConfig, train_head, train_heads


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_encoder):
    root = tmp_path_factory.mktemp("stacked")
    s = make_sample(str(root / "sample"), n_images=40)
    fs = FeatureStore.open_or_create(str(root / "store"), tiny_encoder.config)
    run_extract(fs, tiny_encoder, [s["training"]], s["image_root"], workers=0, progress=False)
    fs.refresh()
    return fs, s["training"]


def cfg(**kw):
    base = dict(epochs=1, batch_size=8, train_eval_records=16, checkpoint_every=2)
    return TrainConfig(**{**base, **kw})


# runs that stack differ in what the loss and AdamW read: lr, tau_c, lambda_CIMR, weight decay
CONFIGS = {
    "f1": cfg(head="flow", lr=1e-3, cimr=0.1),
    "f2": cfg(head="flow", lr=3e-4, tau_c=0.02, cimr=0.3),
    "f3": cfg(head="flow", lr=1e-3, cimr=0.1, weight_decay=0.0, beta1=0.8),
    "g1": cfg(head="global", lr=1e-3),
    "g2": cfg(head="global", lr=2e-3, tau_c=0.05),
    "f0": cfg(head="flow", lr=1e-3, cimr=0.0),  # CIMR off: another loss form, alone
}


def _outputs(path):
    logged = [json.loads(x) for x in open(os.path.join(path, "log.jsonl"))]
    steps = [{k: v for k, v in r.items() if k != "steps_per_s"} for r in logged]
    return load_file(os.path.join(path, "head.safetensors")), steps


def _same(a, b):
    (wa, la), (wb, lb) = a, b
    return set(wa) == set(wb) and all(torch.equal(wa[n], wb[n]) for n in wa) and la == lb


def test_stacked_runs_end_as_their_solo_runs(world, tmp_path, monkeypatch):
    fs, manifest = world
    sizes = []
    real = stacked.StackedStep.__init__
    monkeypatch.setattr(stacked.StackedStep, "__init__", lambda self, runs: sizes.append(len(runs)) or real(self, runs))
    quiet = dict(progress=False, log=lambda *_: None)
    train_heads(fs, manifest, [(str(tmp_path / f"s_{k}"), c) for k, c in CONFIGS.items()], stack=True, **quiet)
    assert sorted(sizes) == [2, 3], sizes  # flow (CIMR on) x3, global x2; CIMR off alone
    for k, c in CONFIGS.items():
        train_head(fs, manifest, str(tmp_path / f"one_{k}"), c, **quiet)
        assert _same(_outputs(tmp_path / f"s_{k}"), _outputs(tmp_path / f"one_{k}")), k


def test_a_killed_stacked_run_resumes_to_the_same_weights(world, tmp_path):
    fs, manifest = world
    quiet = dict(progress=False, log=lambda *_: None)
    runs = [(str(tmp_path / k), CONFIGS[k]) for k in ("f1", "f2")]
    train_heads(fs, manifest, runs, stack=True, stop_after=1, **quiet)  # killed after a step: checkpoints only
    assert not os.path.exists(tmp_path / "f1" / "DONE")
    train_heads(fs, manifest, runs, stack=True, resume=True, **quiet)
    for k in ("f1", "f2"):
        train_head(fs, manifest, str(tmp_path / f"one_{k}"), CONFIGS[k], **quiet)
        a, b = _outputs(tmp_path / k)[0], _outputs(tmp_path / f"one_{k}")[0]
        assert all(torch.equal(a[n], b[n]) for n in a), k


def test_the_dry_run_names_the_stacked_groups(tmp_path):
    heads = "heads={g: {head: global}, g2: {head: global, lr: 0.002}, flow: {head: flow, cimr: 0.1}}"
    args = ["run", SYNTH, f"out={tmp_path}/s", "--dry-run", *REDUCED, heads, "stack=true", "train_config.max_steps=3"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    lines = [x.strip() for x in r.output.splitlines() if "stacked:" in x]
    # two seeds (two data orders), each: the two Global-M runs stacked, Flow-CLIP alone
    assert len(lines) == 4 and sum("one batched step for 2 runs" in x for x in lines) == 2, lines
    assert r.output.count("3 steps (max_steps;") == 6, r.output
