"""`flowclip models`: the encoders flowclip can cache, by family, with their pretrained
tags and which of them this machine already holds (nothing is downloaded)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelEntry:
    model: str
    family: str
    tags: list[str] = field(default_factory=list)
    local: list[str] = field(default_factory=list)  # tags whose weights are in a local cache
    shipped: bool = False  # flowclip ships weights for it (--pretrained synthetic)


def list_models(with_tags_only: bool = True) -> list[ModelEntry]:
    """Every open_clip model config a family serves (with a pretrained tag, unless
    with_tags_only is False), in family order, then by name."""
    import open_clip

    from . import FAMILIES
    from .locate import _has_shipped, local_pretrained, register_package_configs

    register_package_configs()
    tags: dict[str, list[str]] = {}
    for model, tag in open_clip.list_pretrained():
        tags.setdefault(model, []).append(tag)
    out = []
    for model in open_clip.list_models():
        fam = next((f for f in FAMILIES if f.claims(model)), None)
        shipped = _has_shipped(model)
        if fam is None or (with_tags_only and not tags.get(model) and not shipped):
            continue
        entry = ModelEntry(model, fam.name, tags.get(model, []), shipped=shipped)
        for tag in entry.tags:
            if local_pretrained(open_clip.get_pretrained_cfg(model, tag)):
                entry.local.append(tag)
        out.append(entry)
    order = {f.name: i for i, f in enumerate(FAMILIES)}
    return sorted(out, key=lambda e: (e.family != "openai-clip", order[e.family], e.model))  # CLIP first
