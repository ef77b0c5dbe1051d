"""Where the paper plan's manifests and stores live, and which table an encoder's rows
belong to (shared by the plan, its budget and its tables, so none of them imports another)."""

from __future__ import annotations

import os

TRAINING_SOURCES = ("coco-train", "cc3m-train")


def manifest_path(cfg, name: str) -> str:
    """A training source under MANIFESTS/train/, a benchmark under MANIFESTS/eval/ (a folder
    that is scored never holds a training set)."""
    return os.path.join(cfg.manifests, "train" if name in TRAINING_SOURCES else "eval", f"{name}.parquet")


def store_path(cfg, name: str) -> str:
    return os.path.join(cfg.cache, name)


def table_of(enc: dict) -> int:
    """The table an extra encoder's rows belong to: `table:`, else 6 for OpenAI CLIP ViTs, 5 otherwise."""
    return enc.get("table") or (6 if openai_backbone(enc) else 5)


def openai_backbone(enc: dict) -> bool:
    """Tab. 6's rows (OpenAI CLIP ViTs); the other families are Tab. 5's."""
    return enc["model"].startswith("ViT-") and "SigLIP" not in enc["model"]
