"""The tiny CLIP's pretraining recipe: seeded, resumable, exported as safetensors with a card."""

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from flowclip_cache.errors import FlowclipError
from flowclip_cache.training import checkpoint
from flowclip_cache.training.pretrain import PretrainConfig, pretrain

SMALL = dict(
    model="flowclip-tiny-clip-gap", scenes=48, steps=4, batch_size=16, warmup=2, checkpoint_every=2, probe_scenes=8
)


def _run(tmp_path, name, **kw):
    cfg = PretrainConfig.from_dict({**SMALL, **kw})
    return pretrain(
        str(tmp_path / name), cfg, log=lambda *_: None, progress=False, export_to=str(tmp_path / name / "export")
    )


def test_resume_is_bit_identical_and_card_is_written(tmp_path, monkeypatch):
    from flowclip_cache.training import pretrain as pretrain_module

    straight = _run(tmp_path, "a")
    real_save = pretrain_module._save_state

    def save_then_die(*args):  # a crash right after the first checkpoint
        real_save(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(pretrain_module, "_save_state", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "b")
    monkeypatch.setattr(pretrain_module, "_save_state", real_save)
    assert checkpoint.read_state(str(tmp_path / "b"))["step"] == 2
    with pytest.raises(FlowclipError, match=r"another recipe \(differing: lr 0.001 -> 0.002\)"):
        _run(tmp_path, "b", lr=0.002)  # a resume under another recipe would mix two runs
    resumed = _run(tmp_path, "b")
    wa, wb = load_file(straight), load_file(resumed)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    card = json.load(open(straight.replace(".safetensors", ".json")))
    assert card["steps"] == 4 and card["recipe"]["probe_scenes"] == 8
    assert [g["step"] for g in card["grounding_probe"]] == [2, 4]
    assert all(0 <= g["hit_rate"] <= 1 and g["words"] > 0 for g in card["grounding_probe"])
    assert os.path.basename(straight) == "flowclip-tiny-clip-gap-synthetic.safetensors"


def test_unknown_or_mistyped_recipe_keys_are_refused():
    with pytest.raises(FlowclipError, match="unknown keys"):
        PretrainConfig.from_dict({"stpes": 10})
    with pytest.raises(FlowclipError, match="expected int"):
        PretrainConfig.from_dict({"steps": "ten"})
    with pytest.raises(FlowclipError, match="at least 1"):
        PretrainConfig.from_dict({"checkpoint_every": 0})


def test_pretraining_never_writes_into_a_folder_it_did_not_make(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.json").write_text("my own config")
    with pytest.raises(FlowclipError, match="not a folder flowclip wrote"):
        pretrain(str(tmp_path / "mine"), PretrainConfig.from_dict(dict(SMALL)), log=lambda *_: None, progress=False)
    assert (tmp_path / "mine" / "config.json").read_text() == "my own config"


def _filip_by_loops(P, T, mask):
    """MindFormers' FilipLogit, one image-text pair at a time: padded tokens are zero rows
    (they take part in the image->text maximum), the text->image sum is over valid tokens."""
    P = P / P.norm(dim=-1, keepdim=True)
    T = T / T.norm(dim=-1, keepdim=True) * mask[..., None]
    s_it, s_ti = torch.zeros(len(P), len(T)), torch.zeros(len(T), len(P))
    for i in range(len(P)):
        for t in range(len(T)):
            s_it[i, t] = sum(max(float(p @ q) for q in T[t]) for p in P[i]) / P.shape[1]
            s_ti[t, i] = sum(max(float(q @ p) for p in P[i]) for q, m in zip(T[t], mask[t]) if m) / int(mask[t].sum())
    return s_it, s_ti


def test_filip_similarities_equal_the_released_formula_computed_pair_by_pair():
    from flowclip_cache.training.filip_loss import filip_similarities

    g = torch.Generator().manual_seed(0)
    P, T = torch.randn(3, 5, 4, generator=g), torch.randn(4, 6, 4, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]]).bool()
    s_it, s_ti = filip_similarities(P, T, mask)
    e_it, e_ti = _filip_by_loops(P, T, mask)
    assert torch.allclose(s_it, e_it, atol=1e-6) and torch.allclose(s_ti, e_ti, atol=1e-6)


def test_filip_loss_is_smoothed_cross_entropy_and_prefers_tokens_on_their_own_patches():
    from flowclip_cache.training.filip_loss import FilipLoss, smoothed_cross_entropy

    logits, eye = torch.randn(5, 5, generator=torch.Generator().manual_seed(1)), torch.eye(5, dtype=torch.bool)
    expected = torch.nn.functional.cross_entropy(logits, torch.arange(5), label_smoothing=0.1)
    assert torch.allclose(smoothed_cross_entropy(logits, eye, 0.1), expected)
    # each caption's tokens are its own image's patches: matched captions score lower loss than shuffled
    P = torch.nn.functional.normalize(torch.randn(4, 6, 8, generator=torch.Generator().manual_seed(2)), dim=-1)
    mask = torch.ones(4, 3, dtype=torch.bool)
    loss = FilipLoss()
    same = torch.eye(4, dtype=torch.bool)
    assert loss(P, P[:, :3], mask, same) < loss(P, P[[1, 2, 3, 0], :3], mask, same) - 1.0


def test_the_filip_recipe_trains_the_term_resumes_bit_identically_and_records_its_curve(tmp_path, monkeypatch):
    from flowclip_cache.config import find_config, load_yaml
    from flowclip_cache.training import pretrain as pretrain_module

    recipe = load_yaml(find_config("pretrain_tiny_clip_filip"))  # the shipped recipe, at a few steps' scale
    assert recipe["token_loss"] == "filip" and recipe["model"] == "flowclip-tiny-clip-filip"
    filip = {**recipe, **{k: v for k, v in SMALL.items() if k != "model"}, "probe_scenes": 0}
    straight = _run(tmp_path, "a", **filip)
    real_save = pretrain_module._save_state

    def save_then_die(*args):
        real_save(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(pretrain_module, "_save_state", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "b", **filip)
    monkeypatch.setattr(pretrain_module, "_save_state", real_save)
    resumed = _run(tmp_path, "b", **filip)
    wa, wb = load_file(straight), load_file(resumed)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)  # the logit scales and their moments resumed too
    plain = load_file(_run(tmp_path, "c", **{**filip, "token_loss": "none"}))
    assert wa.keys() == plain.keys()  # the term's own parameters are not exported
    assert not torch.equal(wa["visual.proj"], plain["visual.proj"])  # the term changed the training
    card = json.load(open(straight.replace(".safetensors", ".json")))
    assert [s for s, _ in card["token_loss_curve"]] == [2, 4] and [s for s, _ in card["loss_curve"]] == [2, 4]
    assert all(v > 0 for _, v in card["token_loss_curve"])


def test_a_recipe_can_leave_out_a_worlds_held_out_combinations():
    """held_out_of_world: 0 renders no scene holding one of world 0's 19 held-out colour-shape
    pairs (the shipped grounded recipe's pool holds them: 140 of these 400 scenes), and the
    clean recipe is the grounded one with that key and its own model name alone."""
    from flowclip_cache.config import find_config, load_yaml
    from flowclip_cache.synthetic.world import held_out_combos
    from flowclip_cache.training.pretrain import PretrainConfig, render_pool

    held = held_out_combos(0)
    seen = lambda cfg: sum(any((o.colour, o.shape) in held for o in objs) for objs in render_pool(cfg)[1])  # noqa: E731
    assert len(held) == 19 and seen(PretrainConfig(scenes=400)) == 140
    assert seen(PretrainConfig(scenes=400, held_out_of_world=0)) == 0
    clean, grounded = (
        load_yaml(find_config(n)) for n in ("pretrain_tiny_clip_filip_clean", "pretrain_tiny_clip_filip")
    )
    assert {k: v for k, v in clean.items() if k not in ("model", "held_out_of_world")} == {
        k: v for k, v in grounded.items() if k != "model"
    }
    assert clean["held_out_of_world"] == 0 and PretrainConfig.from_dict(clean).model == "flowclip-tiny-clip-filip-clean"
