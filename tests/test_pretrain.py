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
