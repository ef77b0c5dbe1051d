"""Whole studies as one command (flowclip run). One readable file per pipeline kind;
YAML configs in the repository's pipelines/ folder, with the command in their header.

Reads a study's YAML, the store and its manifests (or builds the synthetic world and its
store); writes a study folder: each run's folder (training), one score of all runs
(scoring), summary.md/csv/json/png. Entry point: `pipeline_module(kind)` below, whose
`run` each kind's module defines (`study.py` holds what they share)."""

from __future__ import annotations

import importlib

KINDS = {  # kind -> module, looked up by name (the paper's plan lives a stage above, in paper/)
    "ablation": "flowclip_cache.studies.ablation",
    "sensitivity": "flowclip_cache.studies.sensitivity",
    "encoders": "flowclip_cache.studies.encoders",
    "encoders-suite": "flowclip_cache.studies.encoders_suite",
    "adaptation": "flowclip_cache.studies.adaptation",
    "paper": "flowclip_cache.paper.plan",
}


def pipeline_module(kind: str):
    from ..errors import FlowclipError

    if kind not in KINDS:
        raise FlowclipError(f"unknown pipeline kind {kind!r}; known: {', '.join(KINDS)}")
    return importlib.import_module(KINDS[kind])
