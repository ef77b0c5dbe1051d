"""Which family serves an open_clip model config, as pure functions of the config (no
open_clip, no torch): the family classes claim with them, and `flowclip models` lists
with them from open_clip's files read as data (open_clip_tables.py)."""

from __future__ import annotations


def siglip(cfg: dict | None) -> bool:
    """A SigLIP/SigLIP2 config: a timm SigLIP tower and a Hugging Face tokenizer."""
    return bool(
        cfg
        and "siglip" in cfg.get("vision_cfg", {}).get("timm_model_name", "")
        and cfg.get("text_cfg", {}).get("hf_tokenizer_name")
    )


def openai_clip(cfg: dict | None) -> bool:
    """An OpenAI-style CLIP config: open_clip's own ViT and text transformer."""
    if cfg is None:
        return False
    vision, text = cfg.get("vision_cfg", {}), cfg.get("text_cfg", {})
    return (
        isinstance(vision.get("patch_size"), int)
        and not vision.get("timm_model_name")
        and not cfg.get("custom_text")
        and "hf_model_name" not in text
        and "hf_tokenizer_name" not in text
    )


# the families that serve open_clip configs, in FAMILIES' order (blip:<repo> names no config);
# tests/test_families.py checks the two orders agree
CONFIG_FAMILIES = (("siglip", siglip), ("openai-clip", openai_clip))
