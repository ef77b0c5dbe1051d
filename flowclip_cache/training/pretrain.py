"""Contrastive pretraining of the tiny CLIP on the synthetic world (CPU, seeded, resumable).

The recipe (pretrain_tiny_clip) is run once; its weights ship in the
package (flowclip_cache/extraction/weights/) as FP16 safetensors with their sha256 and this
config, and load offline as `--pretrained synthetic`. Reads top to bottom: render a
pool of scenes -> model -> (resume) -> steps of InfoNCE over fresh captions -> export.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .. import outputs
from ..config import build
from ..errors import FlowclipError
from ..extraction.encoders import OPENAI_MEAN, OPENAI_STD, register_package_configs
from ..extraction.families.locate import WEIGHTS_DIR
from ..extraction.families.openai_clip import OpenAIClip
from ..progress import bar as progress_bar
from ..synthetic.world import COLOURS, SHAPES, describe, held_out_combos, render, sample_scene
from . import checkpoint
from .adamw import AdamW
from .filip_loss import TOKEN_LOSSES


@dataclass
class PretrainConfig:
    model: str = "flowclip-tiny-clip"
    seed: int = field(default=0, metadata={"min": 0})
    scenes: int = field(default=40000, metadata={"min": 1})  # rendered once; captions drawn fresh each step
    steps: int = field(default=4000, metadata={"min": 0})
    batch_size: int = field(default=256, metadata={"min": 2})
    lr: float = field(default=1e-3, metadata={"min": 0.0})
    weight_decay: float = field(default=0.1, metadata={"min": 0.0})
    warmup: int = field(default=200, metadata={"min": 1})
    attribute_rate: float = field(default=0.5, metadata={"min": 0.0})  # share of objects whose colour is named
    checkpoint_every: int = field(default=250, metadata={"min": 1})
    image_size: int = field(default=64, metadata={"min": 1})
    probe_scenes: int = field(default=0, metadata={"min": 0})  # held-out scenes probed for grounding
    # a token-patch term added to the global InfoNCE (training/filip_loss.py); "none": the global loss alone
    token_loss: str = field(default="none", metadata={"choices": tuple(TOKEN_LOSSES)})
    token_loss_weight: float = field(default=1.0, metadata={"min": 0.0})
    # a synthetic world's seed: no scene holding one of that world's held-out colour-shape
    # combinations is rendered, so its held-out task tests generalisation (the encoder never
    # saw them together); None: every combination
    held_out_of_world: int | None = field(default=None, metadata={"min": 0})

    @classmethod
    def from_dict(cls, d: dict, source: str = "config") -> "PretrainConfig":
        return build(cls, d, source)


def render_pool(cfg: PretrainConfig):
    rng = random.Random(f"pretrain:{cfg.seed}")
    held = held_out_combos(cfg.held_out_of_world) if cfg.held_out_of_world is not None else set()
    combos = [(c, s) for c in COLOURS for s in SHAPES if (c, s) not in held]
    images = np.empty((cfg.scenes, cfg.image_size, cfg.image_size, 3), np.uint8)
    scenes = []
    for i in range(cfg.scenes):
        objs = sample_scene(rng, rng.choice((1, 2, 2, 3, 3)), combos)
        images[i] = np.asarray(render(objs, rng, cfg.image_size))
        scenes.append(objs)
    return images, scenes


def soft_contrastive(logits: torch.Tensor, same: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE where captions shared by several scenes of the batch are all positives."""
    target = same.float() / same.sum(1, keepdim=True)
    return 0.5 * (
        torch.sum(-target * F.log_softmax(logits, 1), 1).mean()
        + torch.sum(-target * F.log_softmax(logits.T, 1), 1).mean()
    )


def probe_set(cfg: PretrainConfig):
    """Held-out two-object scenes and their full captions, for the grounding probe."""
    from ..synthetic.world import _pair_caption, object_label

    rng = random.Random(f"probe:{cfg.seed}")
    combos = [(c, s) for c in COLOURS for s in SHAPES]
    images: list = []
    captions: list[str] = []
    objects: list = []
    while len(captions) < cfg.probe_scenes:
        objs = sample_scene(rng, rng.choice((2, 3)), combos)
        a, b = rng.sample(objs, 2)
        if a.colour == b.colour or a.shape == b.shape:
            continue
        images.append(np.asarray(render(objs, rng, cfg.image_size)))
        captions.append(_pair_caption(a, b))
        objects.append([object_label(o) for o in objs])
    return np.stack(images), captions, objects


@torch.no_grad()
def grounding_probe(clip: OpenAIClip, probe, mean, std) -> dict:
    """The synthetic world's grounding measure (synthetic/grounding.py) on the probe
    scenes, straight from the model (the same features extract stores, before FP16
    rounding; token mask 'nonpad')."""
    from ..synthetic.grounding import grounding_hits

    images, captions, objects = probe
    was = clip.model.training
    clip.model.eval()
    x = (torch.from_numpy(images).permute(0, 3, 1, 2).float().div(255) - mean) / std
    patches = F.normalize(clip.image_forward(x)[1], dim=-1).numpy()
    _, states, mask = clip.text_forward(clip.tokenize(captions))
    states = F.normalize(states, dim=-1).numpy()
    clip.model.train(was)
    ids = clip.tokenize(captions)
    id_rows = [row[m].tolist() for row, m in zip(ids.ids, ids.mask)]
    return grounding_hits(
        patches, [states[i, : len(r)] for i, r in enumerate(id_rows)], id_rows, objects, clip.tokenizer.decoder, 0
    )


def _claim_config(out: str, cfg: PretrainConfig) -> None:
    """config.json, whole; a run with a checkpoint resumes only under the recipe it started
    with (the schedule, the batches and the loss all follow from it)."""
    path = os.path.join(out, "config.json")
    if checkpoint.exists(out) and os.path.exists(path):
        stored = dataclasses.asdict(PretrainConfig.from_dict(json.load(open(path)), path))
        differ = [k for k, v in dataclasses.asdict(cfg).items() if stored.get(k) != v]
        if differ:
            raise FlowclipError(
                f"{out} holds a pretraining run of another recipe (differing: "
                + ", ".join(f"{k} {stored.get(k)!r} -> {getattr(cfg, k)!r}" for k in differ)
                + "); resume it with its own recipe or pass another --out"
            )
    outputs.write_text(path, json.dumps(dataclasses.asdict(cfg), indent=1))


def _trained(model, token_loss) -> list:
    return list(model.parameters()) + (list(token_loss.parameters()) if token_loss is not None else [])


def _save_state(out: str, model, token_loss, opt, state: dict) -> None:
    # the token loss's own parameters (FILIP's logit scales) travel beside the CLIP's, never exported
    extra = {f"token_loss.{k}": v for k, v in token_loss.state_dict().items()} if token_loss is not None else {}
    opt_tensors = checkpoint.optimizer_tensors(_trained(model, token_loss), opt)
    checkpoint.save(out, model.state_dict() | extra, opt_tensors, state)


def _load_state(out: str, model, token_loss, opt) -> dict:
    weights, moments, state = checkpoint.load(out)
    extra = {k.split(".", 1)[1]: weights.pop(k) for k in [k for k in weights if k.startswith("token_loss.")]}
    model.load_state_dict(weights)
    if token_loss is not None:
        token_loss.load_state_dict(extra)
    checkpoint.load_optimizer(_trained(model, token_loss), opt, moments)
    return state


def pretrain(out: str, cfg: PretrainConfig, log=print, progress: bool = True, export_to: str | None = None) -> str:
    import open_clip

    register_package_configs()
    outputs.require_own(out, "pretrain-run")  # never writes into a folder it did not make
    os.makedirs(out, exist_ok=True)
    outputs.mark(out, "pretrain-run")
    _claim_config(out, cfg)
    torch.manual_seed(cfg.seed)
    log(f"rendering {cfg.scenes} scenes")
    images, scenes = render_pool(cfg)
    probe = probe_set(cfg) if cfg.probe_scenes else None
    mean = torch.tensor(OPENAI_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(OPENAI_STD).view(1, 3, 1, 1)
    model = open_clip.create_model(cfg.model, pretrained=None)
    tokenizer = open_clip.get_tokenizer(cfg.model)
    clip = OpenAIClip(model, None, tokenizer, {"tokenizer": {"context_length": tokenizer.context_length}})
    make_token_loss = TOKEN_LOSSES[cfg.token_loss]
    token_loss = make_token_loss() if make_token_loss is not None else None
    opt = AdamW(_trained(model, token_loss), lr=cfg.lr, weight_decay=cfg.weight_decay)
    state: dict[str, Any] = {"step": 0, "loss": []}
    if checkpoint.exists(out):
        state = _load_state(out, model, token_loss, opt)
        log(f"resuming at step {state['step']}")
    model.train()
    bar = progress_bar(cfg.steps, "pretrain", "step", progress, state["step"])
    t0 = time.perf_counter()
    while state["step"] < cfg.steps:
        step = state["step"]
        rng = np.random.default_rng([cfg.seed, step])  # the batch depends on (seed, step) only
        idx = rng.choice(cfg.scenes, cfg.batch_size, replace=False)
        caps = [describe(scenes[i], random.Random(f"{cfg.seed}:{step}:{i}"), cfg.attribute_rate) for i in idx]
        x = torch.from_numpy(images[idx]).permute(0, 3, 1, 2).float().div(255)
        x = (x - mean) / std
        lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup) * 0.5 * (1 + math.cos(math.pi * step / cfg.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        img, patches = clip.image_forward(x)
        txt, states, mask = clip.text_forward(clip.tokenize(caps))  # cut to the longest caption
        same = torch.tensor([[a == b for b in caps] for a in caps])
        img, txt = F.normalize(img, dim=-1), F.normalize(txt, dim=-1)
        loss = soft_contrastive(model.logit_scale.exp() * img @ txt.T, same)
        if token_loss is not None:
            term = token_loss(patches, states, mask, same)
            state.setdefault("token_loss", []).append(round(term.item(), 5))
            loss = loss + cfg.token_loss_weight * term
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))
        state["step"] = step + 1
        state["loss"].append(round(loss.item(), 5))
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if state["step"] % cfg.checkpoint_every == 0 or state["step"] == cfg.steps:
            state["seconds"] = state.get("seconds", 0) + time.perf_counter() - t0
            if probe is not None:  # not counted in the training seconds
                g = grounding_probe(clip, probe, mean, std)
                state.setdefault("grounding", []).append({"step": state["step"], **g})
                log(
                    f"step {state['step']}: patch grounding {100 * g['hit_rate']:.1f}% "
                    f"(chance {100 * g['chance']:.1f}%), object contrast {100 * g['object_hit_rate']:.1f}% "
                    f"(chance {100 * g['object_chance']:.1f}%)"
                )
            _save_state(out, model, token_loss, opt, state)
            t0 = time.perf_counter()
    bar.close()
    return export(model, cfg, state, export_to or WEIGHTS_DIR)


def _curve(losses: list, every: int) -> list:
    """The loss averaged over each checkpoint interval: [last step of the interval, mean]."""
    starts = range(0, len(losses), every)
    return [[min(i + every, len(losses)), round(float(np.mean(losses[i : i + every])), 5)] for i in starts]


def export(model, cfg: PretrainConfig, state: dict, folder: str) -> str:
    """FP16 safetensors + a JSON card (sha256, recipe config, training summary)."""
    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{cfg.model}-synthetic.safetensors")
    save_file({k: v.detach().half().contiguous() for k, v in model.state_dict().items()}, path)
    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    card = {
        "model": cfg.model,
        "file": os.path.basename(path),
        "sha256": sha,
        "recipe": dataclasses.asdict(cfg),
        "steps": state["step"],
        "final_loss_mean_last_100": float(np.mean(state["loss"][-100:])),
        "loss_curve": _curve(state["loss"], cfg.checkpoint_every),
        "token_loss_curve": _curve(state.get("token_loss", []), cfg.checkpoint_every),
        "cpu_seconds": state.get("seconds"),
        "grounding_probe": state.get("grounding", []),
    }
    with open(path.replace(".safetensors", ".json"), "w") as f:
        json.dump(card, f, indent=1)
    return path
