"""What the open_clip families share: weights (a tag, a file, the shipped synthetic ones
or random), preprocessing and building the model. Nothing here downloads when offline."""
from __future__ import annotations

import os

from ..encoders import OPENAI_MEAN, OPENAI_STD
from ..errors import FlowclipError
from ..hashing import file_sha256
from .base import Family


def model_config(model: str) -> dict | None:
    import copy

    import open_clip

    from ..encoders import register_package_configs
    register_package_configs()
    cfg = open_clip.get_model_config(model)
    return copy.deepcopy(cfg) if cfg is not None else None


def weights(spec) -> tuple[str | None, dict, dict]:
    """-> (local checkpoint or None, the fingerprint's 'weights' entry, the tag's config)."""
    import open_clip

    from ..encoders import _has_shipped, locate_pretrained, shipped_weights
    if spec.pretrained.lower() in ("none", "random", ""):
        return None, {"source": "random-init", "init_seed": spec.init_seed}, {}
    if spec.pretrained == "synthetic":
        path = shipped_weights(spec.model)
        return path, {"source": "flowclip:synthetic", "sha256": file_sha256(path)}, {}
    if os.path.isfile(spec.pretrained):
        path = os.path.abspath(spec.pretrained)
        return path, {"source": "file", "sha256": file_sha256(path)}, {}
    tag_cfg = open_clip.get_pretrained_cfg(spec.model, spec.pretrained)
    if not tag_cfg:
        tags = [t for m, t in open_clip.list_pretrained() if m == spec.model]
        if _has_shipped(spec.model):
            tags.append("synthetic (ships with flowclip)")
        raise FlowclipError(f"{spec.model}: no pretrained tag {spec.pretrained!r} and no such file; "
                            f"known tags: {', '.join(tags) or 'none'} (and 'none' for random weights); "
                            f"or pass a local checkpoint path")
    path = locate_pretrained(spec.model, spec.pretrained, tag_cfg)
    return path, {"source": f"open_clip:{spec.pretrained}", "sha256": file_sha256(path)}, tag_cfg


def preprocess(image_size, tag_cfg: dict, mean=OPENAI_MEAN, std=OPENAI_STD) -> dict:
    return {"image_size": image_size, "mean": list(tag_cfg.get("mean", mean)), "std": list(tag_cfg.get("std", std)),
            "interpolation": tag_cfg.get("interpolation", "bicubic"),
            "resize_mode": tag_cfg.get("resize_mode", "shortest")}


def versions(*extra: str) -> dict:
    import importlib

    import open_clip
    import torch
    out = {"open_clip": open_clip.__version__, "torch": torch.__version__.split("+")[0]}
    for name in extra:
        out[name] = importlib.import_module(name).__version__
    return out


def build(enc, device: str):
    """(model in FP32 eval mode, preprocess) as the fingerprint describes them."""
    import open_clip
    import torch

    from ..encoders import register_package_configs
    register_package_configs()
    cfg = enc.config
    if enc.checkpoint is None:
        torch.manual_seed(cfg["weights"]["init_seed"])
    pre = cfg["preprocess"]
    model, _, transform = open_clip.create_model_and_transforms(
        enc.spec.model, pretrained=enc.checkpoint, precision="fp32", device=device,
        force_quick_gelu=cfg["model_cfg"].get("quick_gelu", False),
        image_mean=tuple(pre["mean"]), image_std=tuple(pre["std"]),
        image_interpolation=pre["interpolation"], image_resize_mode=pre["resize_mode"])
    model.eval()
    return model, transform


class OpenClipFamily(Family):
    """A family whose model open_clip builds from its config (OpenAI-style CLIP, SigLIP)."""

    @classmethod
    def build(cls, enc, device="cpu"):
        return build(enc, device)
