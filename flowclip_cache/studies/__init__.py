"""Whole studies as one command (flowclip run). One readable file per pipeline kind;
YAML configs in the repository's pipelines/ folder, with the command in their header."""

from __future__ import annotations

import importlib

KINDS = {
    "ablation": "ablation",
    "sensitivity": "sensitivity",
    "encoders": "encoders",
    "adaptation": "adaptation",
    "paper": "paper",
}


def pipeline_module(kind: str):
    from ..errors import FlowclipError

    if kind not in KINDS:
        raise FlowclipError(f"unknown pipeline kind {kind!r}; known: {', '.join(KINDS)}")
    return importlib.import_module(f"{__name__}.{KINDS[kind]}")
