"""Stacked training: runs whose heads share a class and settings take one
batched step, and each ends as it would alone to FP32 round-off (vmap's reductions over a
stack may associate otherwise than one run's: seen at 1e-10 on weights with 4 runs, none
with 3), with every logged evaluation equal (no decision differs); a killed stacked run
resumes to the very bits of an uninterrupted one; the dry run names the groups."""

import json
import os

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file
from test_pipelines import REDUCED, SYNTH
from test_train import world as train_world  # noqa: F401 (the store train-head's tests train on)

from flowclip_cache.cli import main
from flowclip_cache.training import stacked
from flowclip_cache.training.loop import TrainConfig, train_head, train_heads


@pytest.fixture(scope="module")
def world(train_world):
    return train_world["store"], train_world["manifest"]


def cfg(**kw):
    base = dict(epochs=1, batch_size=8, train_eval_records=16, checkpoint_every=2)
    return TrainConfig(**{**base, **kw})


# runs that stack differ in what the loss and AdamW read: lr, tau_c, lambda_CIMR (0 too), weight decay
CONFIGS = {
    "f1": cfg(head="flow", lr=1e-3, cimr=0.1),
    "f2": cfg(head="flow", lr=3e-4, tau_c=0.02, cimr=0.3),
    "f3": cfg(head="flow", lr=1e-3, cimr=0.1, weight_decay=0.0, beta1=0.8),
    "g1": cfg(head="global", lr=1e-3),
    "g2": cfg(head="global", lr=2e-3, tau_c=0.05),
    "f0": cfg(head="flow", lr=1e-3, cimr=0.0),  # CIMR off: 0 x CIMR, no bit changed
    "f9": cfg(head="flow", lr=1e-3, cimr=0.1, alpha=0.5),  # other head settings: alone
}


def _outputs(path):
    logged = [json.loads(x) for x in open(os.path.join(path, "log.jsonl"))]
    steps = [{k: v for k, v in r.items() if k != "steps_per_s"} for r in logged]
    return load_file(os.path.join(path, "head.safetensors")), steps


def _close(a, b):
    """Weights and logged losses to FP32 round-off; every evaluation equal."""
    (wa, la), (wb, lb) = a, b
    assert set(wa) == set(wb) and len(la) == len(lb)
    for n in wa:
        torch.testing.assert_close(wa[n], wb[n], rtol=1e-5, atol=1e-6)
    for x, y in zip(la, lb):
        assert x.keys() == y.keys()
        if "eval" in x:
            assert x == y  # the same decisions on every evaluation set
        else:
            assert x == pytest.approx(y, rel=1e-5, abs=1e-7)


def test_stacked_runs_end_as_their_solo_runs(world, tmp_path, monkeypatch):
    fs, manifest = world
    sizes = []
    real = stacked.StackedStep.__init__
    monkeypatch.setattr(stacked.StackedStep, "__init__", lambda self, runs: sizes.append(len(runs)) or real(self, runs))
    quiet = dict(progress=False, log=lambda *_: None)
    train_heads(fs, manifest, [(str(tmp_path / f"s_{k}"), c) for k, c in CONFIGS.items()], stack=True, **quiet)
    assert sorted(sizes) == [2, 4], sizes  # flow (alpha 1) x4, global x2; flow at alpha 0.5 alone
    for k, c in CONFIGS.items():
        train_head(fs, manifest, str(tmp_path / f"one_{k}"), c, **quiet)
        _close(_outputs(tmp_path / f"s_{k}"), _outputs(tmp_path / f"one_{k}"))


def test_a_killed_stacked_run_resumes_to_the_same_weights(world, tmp_path):
    fs, manifest = world
    quiet = dict(progress=False, log=lambda *_: None)
    names = ("f1", "f2", "f0")
    whole = [(str(tmp_path / f"whole_{k}"), CONFIGS[k]) for k in names]
    train_heads(fs, manifest, whole, stack=True, **quiet)
    runs = [(str(tmp_path / k), CONFIGS[k]) for k in names]
    train_heads(fs, manifest, runs, stack=True, stop_after=1, **quiet)  # killed after a step: checkpoints only
    assert not os.path.exists(tmp_path / "f1" / "DONE")
    train_heads(fs, manifest, runs, stack=True, resume=True, **quiet)
    for k in names:
        (a, la), (b, lb) = _outputs(tmp_path / k), _outputs(tmp_path / f"whole_{k}")
        assert all(torch.equal(a[n], b[n]) for n in a), k
        assert [x for x in la if "eval" in x] == [x for x in lb if "eval" in x], k


def test_the_dry_run_names_the_stacked_groups(tmp_path):
    heads = "heads={g: {head: global}, g2: {head: global, lr: 0.002}, flow: {head: flow, cimr: 0.1}}"
    compare = "compare=[[g, flow]]"
    args = [
        "run",
        SYNTH,
        f"out={tmp_path}/s",
        "--dry-run",
        *REDUCED,
        heads,
        compare,
        "stack=true",
        "train_config.max_steps=3",
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    lines = [x.strip() for x in r.output.splitlines() if "stacked:" in x]
    # two seeds (two data orders), each: the two Global-M runs stacked, Flow-CLIP alone
    assert len(lines) == 4 and sum("one batched step for 2 runs" in x for x in lines) == 2, lines
    assert r.output.count("3 steps (max_steps;") == 6, r.output


def test_a_head_vmap_cannot_batch_trains_side_by_side_saying_why():
    """A head whose forward reads a tensor's value in Python (`.item()`, which vmap cannot
    batch) does not stop training: its group goes side by side, the reason logged once,
    each run stepped as it is alone."""
    from types import SimpleNamespace

    import torch.nn.functional as F

    from flowclip_cache.heads.global_m import GlobalHead

    class Peeking(GlobalHead):
        def forward_terms(self, v, P, t, H, mask):
            scale = 1.0 + 0.0 * float(self.M.sum().item())
            return super().forward_terms(v, P, t, H, mask)[0] * scale, {}

    said, stepped = [], []

    def run(i):
        head = Peeking(8)
        return SimpleNamespace(head=head, cfg=cfg(head="global", lr=1e-3 * (i + 1)), params=list(head.parameters()),
                               log=said.append, step=lambda *a, i=i: stepped.append(i))  # fmt: skip

    runs = [run(0), run(1)]
    g = torch.Generator().manual_seed(0)
    feats = (F.normalize(torch.randn(4, 8, generator=g), dim=-1), None,
             F.normalize(torch.randn(8, 8, generator=g), dim=-1), None, None)  # fmt: skip
    img, pos, neg = torch.arange(4), torch.arange(4), torch.arange(4, 8)
    stacker = stacked.Stacker(True)
    for _ in range(2):
        stacker.step(runs, img, pos, neg, feats)
    assert stepped == [0, 1, 0, 1] and len(said) == 1 and "cannot take one batched step" in said[0], said
