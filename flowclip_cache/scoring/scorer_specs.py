"""A scorer as the command line names it ('clip' or another training-free scorer by its
kind, a run folder, NAME=folder, hf:OWNER/NAME)
and the image controls, read and checked without importing torch: a mistake in either is
refused at once, before a head or the store's features are loaded."""

from __future__ import annotations

import os

from ..errors import FlowclipError

CONTROLS = ("real", "shuffle", "fixed")


def parse_controls(text: str) -> tuple[str, ...]:
    """--controls real,shuffle,fixed -> the names, each one known."""
    ctl = tuple(c.strip() for c in text.split(",") if c.strip())
    bad = [c for c in ctl if c not in CONTROLS]
    if bad:
        raise FlowclipError(f"--controls: unknown {bad}; use {', '.join(CONTROLS)}")
    return ctl


def scorer_folder(spec: str) -> tuple[str, str, bool]:
    """(the NAME given or '', a training-free scorer's kind ('clip', 'filip-score', ...) or
    a finished run folder, whether it is a published head's snapshot) of one --scorer; a
    folder that is missing or unfinished is refused."""
    from ..head_specs import training_free_kinds
    from ..hub import hub_folder, is_hub_spec

    name, sep, path = spec.partition("=")
    if not sep or "/" in name or os.path.exists(spec):  # a bare path
        name, path = "", spec
    hub = is_hub_spec(path)
    if hub:  # a published head (sharing.py): its local snapshot, labelled by its NAME
        name, path = name or path.rsplit("/", 1)[-1].split("@")[0], hub_folder(path)
    if path in training_free_kinds():
        return name, path, hub
    if not os.path.isdir(path):
        raise FlowclipError(f"--scorer {spec}: the folder {path} does not exist" + _nearest(path))
    if not os.path.exists(os.path.join(path, "head.safetensors")) and not os.path.exists(os.path.join(path, "DONE")):
        raise FlowclipError(f"--scorer {spec}: {path} is not a finished train-head run folder")
    if not os.path.exists(os.path.join(path, "DONE")):
        raise FlowclipError(f"--scorer {spec}: {path} is an unfinished run")
    return name, path, hub


def check_scorers(specs) -> None:
    """Every --scorer's folder, before anything heavier is imported."""
    for spec in specs:
        scorer_folder(spec)


def _nearest(path: str) -> str:
    import difflib

    parent = os.path.dirname(os.path.normpath(path)) or "."
    if not os.path.isdir(parent):
        return f" (nor does {parent})"
    names = [n for n in os.listdir(parent) if os.path.isdir(os.path.join(parent, n))]
    near = difflib.get_close_matches(os.path.basename(os.path.normpath(path)), names, n=3, cutoff=0.6)
    return f"; did you mean {', '.join(os.path.join(parent, n) for n in near)}?" if near else ""
