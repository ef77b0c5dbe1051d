"""Encoders: models named by config, resolved by their family (encoder_families/) to one
exact configuration whose hash (the *fingerprint*) a feature store records.

The fingerprint covers everything that changes the features: the model config with
QuickGELU resolved, preprocessing (size, mean, std, interpolation, resize mode), the
tokenizer and context length, the weights' sha256, the token-mask and dtype policies,
and the open_clip / torch versions. It is computed from configs and file hashes
alone, so a run with nothing new to encode never builds the model.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from .errors import FlowclipError, WeightsUnavailable
from .hashing import file_sha256

TOKEN_MASK_POLICIES = ("nonpad", "content")
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
_CONFIG_DIR = Path(__file__).parent / "model_configs"
_registered = False


def register_package_configs() -> None:
    """Register the model configs that ship with flowclip (e.g. the tiny CLIP)."""
    global _registered
    if not _registered:
        import open_clip
        open_clip.add_model_config(_CONFIG_DIR)
        _registered = True


@dataclass(frozen=True)
class EncoderSpec:
    """What the user asked for. ``pretrained`` is an open_clip tag, a local file, or
    'none' (random weights drawn with ``init_seed``: tests and benchmarks)."""
    model: str
    pretrained: str = "none"
    init_seed: int = 0
    token_mask: str = "nonpad"
    force_quick_gelu: bool | None = None
    tokenizer: str | None = None    # a local tokenizer folder instead of the config's (HF tokenizers)
    patch_readout: str = "standard"  # how the last ViT block is read out into patches (patch_readouts.py)


@dataclass(frozen=True)
class ResolvedEncoder:
    spec: EncoderSpec
    checkpoint: str | None      # local weights file, or None for random init
    config: dict                # the fingerprinted configuration

    @property
    def fingerprint(self) -> str:
        return fingerprint_of(self.config)

    @property
    def family(self):
        from .encoder_families import family_of
        return family_of(self.config)

    @property
    def dim(self) -> int:
        return int(self.config["model_cfg"]["embed_dim"])

    @property
    def num_patches(self) -> int:
        return int(self.config["num_patches"])


def fingerprint_of(config: dict) -> str:
    blob = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def diff_configs(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Dotted names of the fields that differ between two fingerprinted configs."""
    out = []
    for k in sorted(set(a) | set(b)):
        name = f"{prefix}{k}"
        va, vb = a.get(k, "<absent>"), b.get(k, "<absent>")
        if isinstance(va, dict) and isinstance(vb, dict):
            out += diff_configs(va, vb, name + ".")
        elif va != vb:
            out.append(f"{name}: {va!r} != {vb!r}")
    return out


def resolve(spec: EncoderSpec) -> ResolvedEncoder:
    """The fingerprinted configuration of `spec`, from configs and file hashes alone."""
    from .encoder_families import family_for
    if spec.token_mask not in TOKEN_MASK_POLICIES:
        raise FlowclipError(f"unknown token-mask policy {spec.token_mask!r}; use one of {TOKEN_MASK_POLICIES}")
    if spec.model.startswith("blip:") is False and _model_config_missing(spec.model):
        raise FlowclipError(
            f"unknown model config {spec.model!r}; known: open_clip.list_models() "
            f"(e.g. ViT-B-32) or flowclip's own ({', '.join(p.stem for p in _CONFIG_DIR.glob('*.json'))}), "
            f"or blip:<repo or folder>")
    from .patch_readouts import REVISION, check_readout
    family = family_for(spec.model)
    if spec.patch_readout != "standard":
        check_readout(spec.patch_readout, spec.model, None if spec.model.startswith("blip:")
                      else _model_config(spec.model))
    config, checkpoint = family.resolve_config(spec)
    if spec.patch_readout != "standard":      # absent for standard: every existing store keeps its fingerprint
        config["patch_readout"] = spec.patch_readout
        if spec.patch_readout in REVISION:
            config["patch_readout_revision"] = REVISION[spec.patch_readout]
    return ResolvedEncoder(spec, checkpoint, config)


def _model_config(model: str) -> dict | None:
    import open_clip
    register_package_configs()
    return open_clip.get_model_config(model)


def _model_config_missing(model: str) -> bool:
    return _model_config(model) is None


def _has_shipped(model: str) -> bool:
    try:
        shipped_weights(model)
        return True
    except WeightsUnavailable:
        return False


def shipped_weights(model: str) -> str:
    """Weights flowclip ships (the tiny CLIP pretrained on the synthetic world), checked
    against the sha256 on their card."""
    import json
    folder = os.path.join(os.path.dirname(__file__), "weights")
    path = os.path.join(folder, f"{model}-synthetic.safetensors")
    card = path.replace(".safetensors", ".json")
    if not os.path.isfile(path) or not os.path.isfile(card):
        raise WeightsUnavailable(f"flowclip ships no synthetic-world weights for {model} (looked for {path}); "
                                 f"make them with: flowclip pretrain-tiny-clip pretrain_tiny_clip")
    want = json.load(open(card))["sha256"]
    got = file_sha256(path)
    if got != want:
        raise WeightsUnavailable(f"{path}: sha256 {got[:12]} does not match its card ({want[:12]}); reinstall flowclip")
    return path


def locate_pretrained(model: str, tag: str, tag_cfg: dict) -> str:
    """Find open_clip weights on disk; download only when a network is there.

    open_clip's own download retries for ~46 s before failing on a machine without a
    network. We look in the local caches first, and fail at once when offline."""
    from open_clip import pretrained as ocp

    hf = tag_cfg.get("hf_hub", "")
    if hf:
        repo, filename = os.path.split(hf)
        filenames = [filename] if filename else ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
        try:
            from huggingface_hub import hf_hub_download
            for fn in filenames:
                try:
                    return hf_hub_download(repo_id=repo, filename=fn, local_files_only=True)
                except Exception:
                    pass
        except ImportError:
            pass
    url = tag_cfg.get("url", "")
    if url:
        cached = os.path.join(os.path.expanduser("~/.cache/clip"), os.path.basename(url))
        if os.path.isfile(cached):
            return cached
    where = f"Hugging Face hub {hf}" if hf else url
    if _offline() or not _network_reachable():
        raise WeightsUnavailable(
            f"{model} weights {tag!r} are not on this machine and cannot be downloaded "
            f"({'HF_HUB_OFFLINE is set' if _offline() else 'no network'}). Download them where "
            f"there is a network (from {where}) into the Hugging Face cache, or pass the file "
            f"itself: --pretrained /path/to/weights.safetensors. For a run without weights use "
            f"--pretrained none (random weights).")
    path = ocp.download_pretrained(tag_cfg)
    if not path:
        raise WeightsUnavailable(f"open_clip could not download {model}:{tag} from {where}")
    return path


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def _network_reachable(host: str = "huggingface.co", port: int = 443, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def load_model(enc: ResolvedEncoder, device: str = "cpu"):
    """The encoder built in FP32 eval mode: its family's object, with .model, .preprocess,
    .tokenize, .image_forward and .text_forward."""
    return enc.family.load(enc, device)
