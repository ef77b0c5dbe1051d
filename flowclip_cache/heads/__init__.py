"""The head registry: one file per head, one line here. Training, scoring, the command
line and the pipelines list kinds from REGISTRY and know no head by name
(docs/architecture.md, "Adding a head"). Plug-in heads (plugins.py) join it at run time."""

from __future__ import annotations

from ..errors import FlowclipError
from .base import REGISTRY, Head, TokenMapHead, masked_token_mean, token_shares
from .clip import ClipHead
from .dcsm import DcsmHead
from .filip import FilipHead
from .filip_score import FilipScore, FilipScoreI2T
from .flow import FlowHead, token_scores, token_scores_direct
from .flow_evidence import FlowEvidenceHead, FlowEvidenceUnrefinedHead
from .fsc_local import FscLocalHead
from .global_m import GlobalHead, global_scores
from .labclip import LabclipHead
from .plugins import load_entry_points

REGISTRY.update({h.kind: h for h in (ClipHead, GlobalHead, FlowHead, FilipHead, LabclipHead, FscLocalHead, DcsmHead,
                                     FilipScore, FilipScoreI2T, FlowEvidenceHead,
                                     FlowEvidenceUnrefinedHead)})  # fmt: skip
HEAD_KINDS = tuple(REGISTRY)  # the built-in kinds


def available_kinds() -> tuple[str, ...]:
    """Built-in kinds, then installed and loaded plug-ins."""
    load_entry_points()
    return tuple(REGISTRY)


def head_class(kind: str) -> type[Head]:
    if kind not in REGISTRY:
        kinds = available_kinds()
        if kind not in REGISTRY:
            raise FlowclipError(
                f"unknown head kind {kind!r}; known: {', '.join(kinds)} (a head of your own: "
                f"--head FILE.py:Class, or --plugin FILE_OR_MODULE; docs/plugins.md)"
            )
    return REGISTRY[kind]


def build_head(kind: str, dim: int, **hparams) -> Head:
    """A head of this kind at width dim, with its hyper-parameters (others ignored) and
    its head_options (checked against the options it declares)."""
    cls = head_class(kind)
    options = cls.check_options(hparams.get("head_options") or {}, f"the {kind} head") if cls.options else {}
    return cls(dim, **{k: v for k, v in hparams.items() if k in cls.hparam_names}, **options)


__all__ = [
    "Head",
    "TokenMapHead",
    "masked_token_mean",
    "token_shares",
    "available_kinds",
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
    "FilipScore",
    "FilipScoreI2T",
    "global_scores",
    "token_scores",
    "token_scores_direct",
]
