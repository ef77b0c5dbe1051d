"""The registry of encoder families (FAMILIES, in the order they claim a model name) and
the lookups by model name and by a store's configuration."""

from __future__ import annotations

from ...errors import FlowclipError
from .base import Family, Tokens
from .blip import BlipITC
from .openai_clip import OpenAIClip
from .siglip import SigLIP

FAMILIES: list[type[Family]] = [BlipITC, SigLIP, OpenAIClip]


def family_for(model: str) -> type[Family]:
    for fam in FAMILIES:
        if fam.claims(model):
            return fam
    raise FlowclipError(
        f"no encoder family serves {model!r}. Supported: OpenAI-style open_clip CLIP (e.g. ViT-B-32, ViT-B-16, "
        f"ViT-L-14, ViT-L-14-336, flowclip-tiny-clip), open_clip SigLIP/SigLIP2 (e.g. ViT-B-16-SigLIP, "
        f"ViT-B-16-SigLIP2), BLIP ITC (blip:<repo or folder>, e.g. blip:Salesforce/blip-itm-base-coco). "
        f"Model configs: open_clip.list_models(); a family is added in flowclip_cache/extraction/families/."
    )


def family_of(config: dict) -> type[Family]:
    """The family a fingerprinted configuration was made by (none named: OpenAI-style)."""
    name = config.get("adapter", {}).get("name", OpenAIClip.name)
    for fam in FAMILIES:
        if fam.name == name:
            return fam
    raise FlowclipError(f"this store was made by encoder family {name!r}, which this flowclip does not know")


__all__ = ["FAMILIES", "Family", "Tokens", "family_for", "family_of"]  # what the package exports
