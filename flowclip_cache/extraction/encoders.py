"""Encoders: models named by config, resolved by their family (families/) to one
exact configuration whose hash (the *fingerprint*) a feature store records.

The fingerprint covers everything that changes the features: the model config with
QuickGELU resolved, preprocessing (size, mean, std, interpolation, resize mode), the
tokenizer and context length, the weights' sha256, the token-mask and dtype policies,
and the open_clip / torch versions. It is computed from configs and file hashes
alone, so a run with nothing new to encode never builds the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import FlowclipError
from ..hashing import fingerprint_of
from .families.locate import (  # noqa: F401
    _CONFIG_DIR,
    OPENAI_MEAN,
    OPENAI_STD,
    _has_shipped,
    locate_pretrained,
    register_package_configs,
    shipped_weights,
)

TOKEN_MASK_POLICIES = ("nonpad", "content")


@dataclass(frozen=True)
class EncoderSpec:
    """What the user asked for. ``pretrained`` is an open_clip tag, a local file, or
    'none' (random weights drawn with ``init_seed``: tests and benchmarks)."""

    model: str
    pretrained: str = "none"
    init_seed: int = 0
    token_mask: str = "nonpad"
    force_quick_gelu: bool | None = None
    tokenizer: str | None = None  # a local tokenizer folder instead of the config's (HF tokenizers)
    patch_readout: str = "standard"  # how the last ViT block is read out into patches (patch_readouts.py)
    decode: str = "pil"  # who decodes and resizes images: PIL, or torchvision on cpu or gpu (tensor_decode.py)


@dataclass(frozen=True)
class ResolvedEncoder:
    spec: EncoderSpec
    checkpoint: str | None  # local weights file, or None for random init
    config: dict  # the fingerprinted configuration

    @property
    def fingerprint(self) -> str:
        return fingerprint_of(self.config)

    @property
    def family(self):
        from .families import family_of

        return family_of(self.config)

    @property
    def dim(self) -> int:
        return int(self.config["model_cfg"]["embed_dim"])

    @property
    def num_patches(self) -> int:
        return int(self.config["num_patches"])


def resolve(spec: EncoderSpec) -> ResolvedEncoder:
    """The fingerprinted configuration of `spec`, from configs and file hashes alone."""
    from .families import family_for

    if spec.token_mask not in TOKEN_MASK_POLICIES:
        raise FlowclipError(f"unknown token-mask policy {spec.token_mask!r}; use one of {TOKEN_MASK_POLICIES}")
    if spec.model.startswith("blip:") is False and _model_config_missing(spec.model):
        raise FlowclipError(
            f"unknown model config {spec.model!r}; known: open_clip.list_models() "
            f"(e.g. ViT-B-32) or flowclip's own ({', '.join(p.stem for p in _CONFIG_DIR.glob('*.json'))}), "
            f"or blip:<repo or folder>"
        )
    from .patch_readouts import REVISION, check_readout

    family = family_for(spec.model)
    if spec.patch_readout != "standard":
        check_readout(
            spec.patch_readout, spec.model, None if spec.model.startswith("blip:") else _model_config(spec.model)
        )
    config, checkpoint = family.resolve_config(spec)
    if spec.patch_readout != "standard":  # absent for standard: every existing store keeps its fingerprint
        config["patch_readout"] = spec.patch_readout
        if spec.patch_readout in REVISION:
            config["patch_readout_revision"] = REVISION[spec.patch_readout]
    if spec.decode != "pil":  # absent for PIL, as for the standard readout
        from .tensor_decode import decode_config

        config["decode"] = decode_config(spec.decode, config["preprocess"])
    return ResolvedEncoder(spec, checkpoint, config)


def _model_config(model: str) -> dict | None:
    import open_clip

    register_package_configs()
    return open_clip.get_model_config(model)


def _model_config_missing(model: str) -> bool:
    return _model_config(model) is None


def load_model(enc: ResolvedEncoder, device: str = "cpu"):
    """The encoder built in FP32 eval mode: its family's object, with .model, .preprocess,
    .tokenize, .image_forward and .text_forward."""
    return enc.family.load(enc, device)
