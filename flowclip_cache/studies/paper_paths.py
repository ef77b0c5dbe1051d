"""Where the paper plan's manifests and stores live (shared by the plan, its budget and
its tables, so none of them imports another)."""

from __future__ import annotations

import os

TRAINING_SOURCES = ("coco-train", "cc3m-train")


def manifest_path(cfg, name: str) -> str:
    """A training source under MANIFESTS/train/, a benchmark under MANIFESTS/eval/ (a folder
    that is scored never holds a training set)."""
    return os.path.join(cfg.manifests, "train" if name in TRAINING_SOURCES else "eval", f"{name}.parquet")


def store_path(cfg, name: str) -> str:
    return os.path.join(cfg.cache, name)
