"""Test-time matching over a head (scoring/test_time_matching.py): its pieces against a
float transcription of yinglunz/test-time-matching (0033953: match.py `group_match`'s 2x2
branch, utils.py `get_threshold_schedule` and `get_lr_schedule_lambda`, HF CLIPModel's
loss), SimpleMatch learning the matching it is given, and `flowclip test-time-match`
end to end, its iteration 0 equal to `flowclip score`'s official figures.

Mutations tried: `>` for `>=` in pseudo_matching's identity test (a threshold-0 tie left
out) turns the planted-ties test red; the loss's sign flipped turns the fit test red; the
cosine schedule's `1 +` dropped turns the schedule test red; swapped groups' captions left
unflipped in group_batch turns the batch test and the fit test red."""

import json
import os

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import assert_refused
from test_official_rules_groups import planted_groups

from flowclip_cache.cli import main
from flowclip_cache.heads.global_m import GlobalHead
from flowclip_cache.scoring import test_time_matching as ttm
from flowclip_cache.scoring.metrics import group_decisions


# -- transcriptions ------------------------------------------------------------------------------
def released_group_match(scores: torch.Tensor, threshold: float) -> list[tuple]:
    """match.py group_match's 2x2 branch on logits [n, 2, 2] (float32, as the release holds them)."""
    out = []
    for g in range(len(scores)):
        block = scores[g]
        oracle_margin = (block[0, 0] + block[1, 1] - block[0, 1] - block[1, 0]).item()
        if oracle_margin >= threshold:
            out.append((g, (0, 1), (0, 1)))
        elif oracle_margin <= -threshold:
            out.append((g, (0, 1), (1, 0)))
    return out


def released_threshold(step, iterations, start, end, schedule):
    if schedule == "linear":
        return np.linspace(start, end, iterations)[step]
    if schedule == "cosine":
        grid = np.linspace(0, np.pi, iterations)
        return end + 0.5 * (start - end) * (1 + np.cos(grid[step]))
    return start


def released_lr_lambda(step, total, schedule, min_lr_factor):
    if schedule == "linear":
        return max(1.0 - float(step) / float(total), min_lr_factor)
    if schedule == "cosine":
        progress = min(float(step) / float(total), 1.0)
        return min_lr_factor + 0.5 * (1.0 - min_lr_factor) * (1 + np.cos(np.pi * progress))
    return 1.0


# -- pieces --------------------------------------------------------------------------------------
@pytest.mark.parametrize("threshold", [0.0, 1.0, 2.0])
def test_pseudo_matching_is_the_released_group_match_on_planted_ties(threshold):
    """Exact ties of every pattern (a margin exactly 0, exactly +-threshold): the same groups
    taken, each matched the same way (a threshold-0 tie takes the identity)."""
    s = torch.from_numpy(planted_groups(300, seed=4) * 4)  # integer margins
    groups, swapped = ttm.pseudo_matching(s, threshold)
    want = released_group_match(s, threshold)
    assert groups.tolist() == [g for g, _, _ in want]
    assert swapped.tolist() == [c == (1, 0) for _, _, c in want]
    margins = (s[:, 0, 0] + s[:, 1, 1] - s[:, 0, 1] - s[:, 1, 0]).abs()
    assert (margins == threshold).any()  # the boundary is planted


@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant"])
def test_schedules_are_the_released_ones(schedule):
    cfg = ttm.TTMConfig(iterations=7, threshold_start=2.0, threshold_end=0.25, threshold_schedule=schedule)
    for k in range(7):
        assert ttm.threshold_at(k, cfg) == pytest.approx(released_threshold(k, 7, 2.0, 0.25, schedule), abs=1e-15)
    for step in range(0, 45, 4):
        got = ttm.lr_factor(step, 40, schedule, 0.1)
        assert got == pytest.approx(released_lr_lambda(step, 40, schedule, 0.1), abs=1e-15)


def test_clip_loss_is_clips_symmetric_cross_entropy():
    g = torch.Generator().manual_seed(0)
    S = torch.randn(6, 6, generator=g, dtype=torch.float64)
    tau = 0.07
    X = S.numpy() / tau

    def ce(rows):  # each row's cross-entropy at its diagonal, by hand
        return np.mean([np.log(np.exp(r - r.max()).sum()) + r.max() - r[i] for i, r in enumerate(rows)])

    assert ttm.clip_loss(S, tau).item() == pytest.approx(0.5 * (ce(X) + ce(X.T)), rel=1e-12)


def test_a_batch_pairs_each_image_with_the_caption_its_matching_gives():
    img = torch.tensor([[0, 1], [2, 3], [4, 5]])
    cap = torch.tensor([[10, 11], [12, 13], [14, 15]])
    imgs, caps = ttm.group_batch(torch.tensor([0, 2]), torch.tensor([False, True]), img, cap)
    assert imgs.tolist() == [0, 1, 4, 5] and caps.tolist() == [10, 11, 15, 14]


# -- learning ------------------------------------------------------------------------------------
class PlantedBank:
    """Global features only: 2n twin images (each twin a noisy copy of the other) and 2n captions."""

    def __init__(self, n: int, d: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        unit = lambda x: torch.nn.functional.normalize(x, dim=-1)  # noqa: E731
        base = torch.randn(n, d, generator=g)
        self.v = unit(torch.stack([base, base], 1) + 0.5 * torch.randn(n, 2, d, generator=g)).reshape(2 * n, d)
        self.t = unit(torch.randn(2 * n, d, generator=g))
        self.dim = d

    def features(self, imgs, caps, need_tokens):
        return self.v[imgs], None, self.t[caps], None, None


def test_simplematch_learns_the_matching_it_is_given():
    """Overfitting to GroupMatch's matching (the release's claim, here over a Global-M head):
    from about a coin's fit to nearly every matched group decided as it was matched, and
    the official group score follows the matched-as-gold share."""
    n, d = 24, 32
    bank = PlantedBank(n, d, seed=1)
    img = torch.arange(2 * n).reshape(n, 2)
    cap = torch.arange(2 * n).reshape(n, 2)
    cfg = ttm.TTMConfig(**ttm.RECIPES["simplematch"], epochs=40, batch_groups=8)
    group_of = lambda S: float((group_decisions(S)["group"]).mean())  # noqa: E731
    history = ttm.adapt(GlobalHead(d), bank, img, cap, cfg, 0.05, 0.05, lambda S: {"group": group_of(S),
                        "group_match": 0.0}, log=lambda *_: None)  # fmt: skip
    step = history[1]
    assert step["selected"] == n and step["fit_before"] <= 0.15 and history[0]["group"] <= 0.1
    assert step["fit"] == 1.0, step
    assert history[1]["group"] == pytest.approx(step["pseudo_label_accuracy"], abs=1e-6)


# -- the command ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from flowclip_cache.synthetic.contrasts import build_contrasts
    from flowclip_cache.synthetic.world import build_world

    root = tmp_path_factory.mktemp("ttm")
    w = str(root / "w")
    build_world(w, seed=3, train_scenes=20, eval_scenes=10, heldout_scenes=5)
    build_contrasts(w, seed=3, n=30)
    store = str(root / "store")
    r = CliRunner().invoke(main, ["extract", "--store", store, "--model", "flowclip-tiny-clip", "--pretrained", "none",
                                  "--manifest",
                                  f"{w}/eval_groups.parquet", "--manifest", f"{w}/eval_swap-att.parquet",
                                  "--image-root", f"{w}/images", "--quiet"])  # fmt: skip
    assert r.exit_code == 0, r.output
    return {"root": root, "store": store, "groups": f"{w}/eval_groups.parquet", "images": f"{w}/images",
            "pairwise": f"{w}/eval_swap-att.parquet"}  # fmt: skip


def _ttm(world, out, *extra):
    args = ["test-time-match", "--store", world["store"], "--manifest", world["groups"], "--image-root",
            world["images"], "--out", out, *extra]  # fmt: skip
    return CliRunner().invoke(main, args)


def test_the_command_starts_from_the_official_figures_and_labels_its_own(world):
    root = world["root"]
    r = _ttm(world, str(root / "sm"), "--scorer", "clip", "--epochs", "3", "--lr", "1e-2")
    assert r.exit_code == 0, r.output
    res = json.load(open(root / "sm" / "results.json"))
    s = CliRunner().invoke(main, ["score", "--store", world["store"], "--manifests", world["groups"], "--scorer",
                                  "clip", "--image-root", world["images"], "--out", str(root / "score"),
                                  "--bootstrap", "0", "--quiet", "--no-figures"])  # fmt: skip
    assert s.exit_code == 0, s.output
    official = json.load(open(root / "score" / "results.json"))["results"]["real|clip"]["synthetic-groups"]
    start = res["history"][0]
    for m in ("text", "image", "group"):
        assert start[m] == official["metrics"][m]["score"]
    assert start["group_match"] == official["test_time_matching"]["group_match"]
    assert [h["iteration"] for h in res["history"]] == [0, 1] and res["history"][1]["selected"] == 30
    md = open(root / "sm" / "results.md").read()
    assert "not an official score" in md and "| 1 | 0 | 30 |" in md
    import flowclip_cache as fc

    again = fc.test_time_match(world["store"], world["groups"], "clip", str(root / "sm2"), epochs=3, lr=1e-2,
                               image_root=world["images"], quiet=True)  # fmt: skip
    assert again["history"] == res["history"]  # the Python API is the command's path, to the bit
    with pytest.raises(fc.FlowclipError, match="unexpected keyword"):
        fc.test_time_match(world["store"], world["groups"], "clip", str(root / "sm3"), epoch=3)


def test_ttm_iterations_follow_the_threshold_schedule(world):
    out = str(world["root"] / "ttm")
    r = _ttm(world, out, "--scorer", "clip", "--recipe", "ttm", "--iterations", "3", "--epochs", "1")
    assert r.exit_code == 0, r.output
    h = json.load(open(os.path.join(out, "results.json")))["history"]
    assert [x["threshold"] for x in h[1:]] == [2.0, 1.0, 0.0]
    assert h[3]["selected"] == 30  # threshold 0 takes every group


def test_the_command_refuses_what_it_cannot_adapt(world):
    root = world["root"]
    assert_refused(_ttm(world, str(root / "x1"), "--scorer", "filip-score"), "training-free")
    args = ["test-time-match", "--store", world["store"], "--manifest", world["pairwise"], "--scorer", "clip",
            "--out", str(root / "x2"), "--image-root", world["images"]]  # fmt: skip
    r = CliRunner().invoke(main, args)
    assert_refused(r, "2x2 group task")
    foreign = root / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    assert_refused(_ttm(world, str(foreign), "--scorer", "clip", "--overwrite"), str(foreign))
    assert (foreign / "notes.txt").read_text() == "keep"
    assert not any(os.path.exists(root / x) for x in ("x1", "x2"))
