"""`flowclip models`: the encoders flowclip can cache, by family, with their pretrained
tags and which of them this machine already holds (nothing is downloaded). Listed from
open_clip's files read as data, without importing torch (open_clip_tables.py); where those
files are not laid out as expected, from open_clip itself."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import claims
from .locate import _CONFIG_DIR, _has_shipped, local_pretrained
from .open_clip_tables import TableUnreadable, model_configs, pretrained_table


@dataclass
class ModelEntry:
    model: str
    family: str
    tags: list[str] = field(default_factory=list)
    local: list[str] = field(default_factory=list)  # tags whose weights are in a local cache
    shipped: bool = False  # flowclip ships weights for it (--pretrained synthetic)
    about: str = ""  # what the shipped weights are, read from their card and config


def list_models(with_tags_only: bool = True, torch_free: bool = True) -> list[ModelEntry]:
    """Every open_clip model config a family serves (with a pretrained tag, unless
    with_tags_only is False), CLIP first, then by family and name."""
    try:
        if not torch_free:
            raise TableUnreadable("asked for open_clip itself")
        configs, table = model_configs([str(_CONFIG_DIR)]), pretrained_table()
    except (TableUnreadable, OSError, SyntaxError, ValueError):
        configs, table = _from_open_clip()
    out = []
    for model, cfg in configs.items():
        family = next((name for name, claimed in claims.CONFIG_FAMILIES if claimed(cfg)), None)
        shipped = _has_shipped(model)
        tags = table.get(model, {})
        if family is None or (with_tags_only and not tags and not shipped):
            continue
        local = [t for t, tag_cfg in tags.items() if local_pretrained(tag_cfg)]
        out.append(ModelEntry(model, family, list(tags), local, shipped, shipped_about(model, cfg) if shipped else ""))
    order = {name: i for i, (name, _) in enumerate(claims.CONFIG_FAMILIES)}
    return sorted(out, key=lambda e: (e.family != "openai-clip", order[e.family], e.model))  # CLIP first


def shipped_about(model: str, cfg: dict) -> str:
    """What a shipped tiny CLIP is, from its weights card and its config: its text tower,
    its pretraining loss and (where the card holds its grounding probe) how often its
    colour words' best patch lies in their object's cell at the last probe."""
    import json

    from .locate import shipped_weights

    card = json.load(open(shipped_weights(model)[: -len(".safetensors")] + ".json"))
    tower = "bidirectional" if cfg.get("text_cfg", {}).get("no_causal_mask") else "causal"
    recipe = card.get("recipe") if isinstance(card.get("recipe"), dict) else {}
    loss = recipe.get("token_loss")
    what = f"{tower} text tower, " + (
        f"grounded: global InfoNCE + {loss.upper()}'s token-wise loss" if loss else "global InfoNCE alone"
    )
    if isinstance(recipe.get("held_out_of_world"), int):
        what += f"; never saw synthetic world {recipe['held_out_of_world']}'s held-out colour-shape pairs"
    probe = card.get("grounding_probe") or []
    if probe and isinstance(probe[-1], dict) and "colour_hit_rate" in probe[-1]:
        last = probe[-1]
        what += f"; colour words in their object's cell {100 * last['colour_hit_rate']:.0f}% at step {last['step']}"
    return what


def released_tags(model: str) -> list[str]:
    """The --pretrained values a model takes besides a file and 'none', from open_clip's
    table read as data (and 'synthetic' for a tiny CLIP that ships); [] when unknown."""
    if model.startswith(("blip:", "hf-hub:")):
        return ["hf"]
    try:
        table = pretrained_table()
    except (TableUnreadable, OSError, SyntaxError, ValueError):
        return []
    return list(table.get(model, {})) + (["synthetic"] if _has_shipped(model) else [])


def check_encoder_name(model: str, pretrained: str) -> None:
    """extract's --model and --pretrained, checked from open_clip's files read as data (no
    torch): an unknown config, or a tag its model does not have, is refused at once. What
    the tables cannot judge (blip:, hf-hub:, tables laid out otherwise) is left to resolve."""
    import os

    from ...errors import FlowclipError

    if model.startswith(("blip:", "hf-hub:")):
        return
    try:
        configs, table = model_configs([str(_CONFIG_DIR)]), pretrained_table()
    except (TableUnreadable, OSError, SyntaxError, ValueError):
        return
    if model not in configs:
        import difflib

        near = difflib.get_close_matches(model, list(configs), n=3, cutoff=0.6)
        raise FlowclipError(
            f"unknown model config {model!r}" + (f"; did you mean {', '.join(near)}?" if near else "")
            + " (`flowclip models` lists them, or blip:<repo or folder>)"
        )  # fmt: skip
    given = pretrained.lower() in ("none", "random", "") or pretrained in ("synthetic", "hf")
    if not given and not os.path.isfile(pretrained) and pretrained not in table.get(model, {}):
        tags = list(table.get(model, {})) + (["synthetic (ships with flowclip)"] if _has_shipped(model) else [])
        raise FlowclipError(
            f"{model}: no pretrained tag {pretrained!r} and no such file; known tags: {', '.join(tags) or 'none'} "
            f"(and 'none' for random weights); or pass a local checkpoint path"
        )


def _from_open_clip() -> tuple[dict, dict]:
    """(model configs, pretrained table) from open_clip itself (imports torch)."""
    import open_clip

    from .locate import register_package_configs

    register_package_configs()
    table: dict[str, dict] = {}
    for model, tag in open_clip.list_pretrained():
        table.setdefault(model, {})[tag] = open_clip.get_pretrained_cfg(model, tag)
    return {m: open_clip.get_model_config(m) for m in open_clip.list_models()}, table
