"""What the open_clip families share: weights (a tag, a file, the shipped synthetic ones
or random), preprocessing and building the model. Nothing here downloads when offline."""

from __future__ import annotations

import os

from ...errors import FlowclipError
from ...hashing import file_sha256
from .base import Family
from .locate import OPENAI_MEAN, OPENAI_STD

HUB = "hf-hub:"  # open_clip's schema: a model repository holding open_clip_config.json and the weights
HUB_FILES = ("open_clip_config.json", "open_clip_model.safetensors")  # never the pickled .bin


def hub_config(model: str) -> tuple[str, dict]:
    """hf-hub:ORG/REPO -> (its local snapshot: config and safetensors weights only, its
    open_clip_config.json), through huggingface_hub's cache (HF_HUB_OFFLINE honoured)."""
    import json

    from ...hub import hub_folder

    folder = hub_folder(model, HUB_FILES)
    path = os.path.join(folder, "open_clip_config.json")
    try:
        cfg = json.load(open(path))
        cfg["model_cfg"]["vision_cfg"]  # noqa: B018 (the keys an open_clip config has)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FlowclipError(f"{model}: no open_clip model config in the repository ({path}: {e})") from None
    return folder, cfg


def model_config(model: str) -> dict | None:
    import copy

    if model.startswith(HUB):
        return hub_config(model)[1]["model_cfg"]
    import open_clip

    from .locate import register_package_configs

    register_package_configs()
    cfg = open_clip.get_model_config(model)
    return copy.deepcopy(cfg) if cfg is not None else None


def weights(spec) -> tuple[str | None, dict, dict]:
    """-> (local checkpoint or None, the fingerprint's 'weights' entry, the tag's config)."""
    import open_clip

    from .locate import _has_shipped, locate_pretrained, shipped_weights

    if spec.pretrained.lower() in ("none", "random", ""):
        return None, {"source": "random-init", "init_seed": spec.init_seed}, {}
    if spec.model.startswith(HUB):  # the repository's own weights and preprocessing
        if spec.pretrained != "hf":
            raise FlowclipError(f"--model {spec.model}: --pretrained hf (the repository's weights) or none (random)")
        folder, cfg = hub_config(spec.model)
        path = os.path.join(folder, "open_clip_model.safetensors")
        if not os.path.isfile(path):
            raise FlowclipError(f"{spec.model}: the repository has no open_clip_model.safetensors (a pickled "
                                "open_clip_pytorch_model.bin is never loaded)")  # fmt: skip
        return path, {"source": spec.model, "sha256": file_sha256(path)}, dict(cfg.get("preprocess_cfg", {}))
    if spec.pretrained == "synthetic":
        path = shipped_weights(spec.model)
        return path, {"source": "flowclip:synthetic", "sha256": file_sha256(path)}, {}
    if os.path.isfile(spec.pretrained):
        path = os.path.abspath(spec.pretrained)
        return path, {"source": "file", "sha256": file_sha256(path)}, file_tag_settings(path)
    tag_cfg = open_clip.get_pretrained_cfg(spec.model, spec.pretrained)
    if not tag_cfg:
        tags = [t for m, t in open_clip.list_pretrained() if m == spec.model]
        if _has_shipped(spec.model):
            tags.append("synthetic (ships with flowclip)")
        raise FlowclipError(
            f"{spec.model}: no pretrained tag {spec.pretrained!r} and no such file; "
            f"known tags: {', '.join(tags) or 'none'} (and 'none' for random weights); "
            f"or pass a local checkpoint path"
        )
    path = locate_pretrained(spec.model, spec.pretrained, tag_cfg)
    return path, {"source": f"open_clip:{spec.pretrained}", "sha256": file_sha256(path)}, tag_cfg


# What an open_clip tag sets besides the weights. flowclip adapt writes its base encoder's
# into the exported checkpoint's metadata, so `--pretrained FILE` resolves as the base did
# (an OpenAI-tagged ViT-B-32 is QuickGELU; a bare file would otherwise build plain GELU).
TAG_SETTINGS_KEY = "flowclip.tag_settings"


def tag_settings(config: dict) -> dict:
    """The tag settings of a resolved configuration: activation and preprocessing."""
    pre = config.get("preprocess", {})
    out = {k: pre[k] for k in ("mean", "std", "interpolation", "resize_mode") if k in pre}
    if config.get("model_cfg", {}).get("quick_gelu") is not None:
        out["quick_gelu"] = bool(config["model_cfg"]["quick_gelu"])
    return out


def file_tag_settings(path: str) -> dict:
    """Tag settings from a safetensors file's metadata (written by flowclip adapt); {} for
    any other file. Plain JSON of known keys only; anything else is refused."""
    import json

    if not path.endswith(".safetensors"):
        return {}
    from safetensors import safe_open

    try:
        with safe_open(path, "pt") as f:
            text = (f.metadata() or {}).get(TAG_SETTINGS_KEY)
    except Exception as e:
        raise FlowclipError(f"{path}: not a readable safetensors file ({e})") from None
    if text is None:
        return {}
    try:
        got = json.loads(text)
        ok = (
            isinstance(got, dict)
            and set(got) <= {"quick_gelu", "mean", "std", "interpolation", "resize_mode"}
            and isinstance(got.get("quick_gelu", False), bool)
            and all(isinstance(got.get(k, ""), str) for k in ("interpolation", "resize_mode"))
            and all(isinstance(v, (int, float)) for k in ("mean", "std") for v in got.get(k, [0, 0, 0]))
            and all(len(got.get(k, [0, 0, 0])) == 3 for k in ("mean", "std"))
        )
    except ValueError:
        ok = False
    if not ok:
        raise FlowclipError(f"{path}: metadata {TAG_SETTINGS_KEY!r} is not flowclip's tag settings: {text[:200]!r}")
    return got


def preprocess(image_size, tag_cfg: dict, mean=OPENAI_MEAN, std=OPENAI_STD) -> dict:
    return {
        "image_size": image_size,
        "mean": list(tag_cfg.get("mean", mean)),
        "std": list(tag_cfg.get("std", std)),
        "interpolation": tag_cfg.get("interpolation", "bicubic"),
        "resize_mode": tag_cfg.get("resize_mode", "shortest"),
    }


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

    from .locate import register_package_configs

    register_package_configs()
    cfg = enc.config
    if enc.checkpoint is None:
        torch.manual_seed(cfg["weights"]["init_seed"])
    pre = cfg["preprocess"]
    name, hub = enc.spec.model, enc.spec.model.startswith(HUB)
    if hub:  # open_clip reads the snapshot flowclip fingerprinted (and only it)
        name = "local-dir:" + hub_config(name)[0]
    model, _, transform = open_clip.create_model_and_transforms(
        name,
        pretrained=None if hub else enc.checkpoint,
        load_weights=not hub or enc.checkpoint is not None,
        precision="fp32",
        device=device,
        force_quick_gelu=cfg["model_cfg"].get("quick_gelu", False),
        image_mean=tuple(pre["mean"]),
        image_std=tuple(pre["std"]),
        image_interpolation=pre["interpolation"],
        image_resize_mode=pre["resize_mode"],
    )
    model.eval()
    return model, transform


class OpenClipFamily(Family):
    """A family whose model open_clip builds from its config (OpenAI-style CLIP, SigLIP)."""

    @classmethod
    def build(cls, enc, device="cpu"):
        return build(enc, device)
