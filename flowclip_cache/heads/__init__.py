"""The head registry: one file per head, one line here. Training, scoring, the command
line and the pipelines list kinds from REGISTRY and know no head by name
(docs/architecture.md, "Adding a head")."""

from __future__ import annotations

from ..errors import FlowclipError
from .base import Head
from .clip import ClipHead
from .dcsm import DcsmHead
from .filip import FilipHead
from .flow import FlowHead, token_scores, token_scores_direct
from .fsc_local import FscLocalHead
from .global_m import GlobalHead, global_scores
from .labclip import LabclipHead

REGISTRY: dict[str, type[Head]] = {
    h.kind: h for h in (ClipHead, GlobalHead, FlowHead, FilipHead, LabclipHead, FscLocalHead, DcsmHead)
}
HEAD_KINDS = tuple(REGISTRY)


def head_class(kind: str) -> type[Head]:
    if kind not in REGISTRY:
        raise FlowclipError(f"unknown head kind {kind!r}; known: {', '.join(HEAD_KINDS)}")
    return REGISTRY[kind]


def build_head(kind: str, dim: int, **hparams) -> Head:
    """A head of this kind at width dim, with its hyper-parameters (others ignored)."""
    cls = head_class(kind)
    return cls(dim, **{k: v for k, v in hparams.items() if k in cls.hparam_names})


__all__ = [
    "Head",
    "REGISTRY",
    "HEAD_KINDS",
    "head_class",
    "build_head",
    "ClipHead",
    "GlobalHead",
    "FlowHead",
    "FilipHead",
    "LabclipHead",
    "FscLocalHead",
    "DcsmHead",
    "global_scores",
    "token_scores",
    "token_scores_direct",
]
