"""Output folders a command owns, and only those.

Every folder a command writes as a whole (a score's results, a head run, a study)
holds a marker file naming its kind. `--overwrite` replaces a folder only when its
marker says it is that command's own kind of output; anything else (a feature store,
a folder of the user's files, another command's output) is refused, named. Folders
written before markers existed are recognised by the files they always held.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid

from .errors import FlowclipError

MARKER = "FLOWCLIP_OUTPUT.json"
KINDS = {"score-results": "a score results folder", "head-run": "a train-head run folder",
         "study": "a study folder", "pretrain-run": "a pretrain-tiny-clip run folder",
         "explain": "an explain folder", "adapt-run": "an adapt run folder"}
_LEGACY = {"score-results": ("results.json", ("store_fingerprint", "results")),
           "head-run": ("config.json", ("store_fingerprint", "train")),
           "pretrain-run": ("config.json", ("scenes", "steps", "attribute_rate"))}


def atomic_write(path: str, write) -> None:
    """write(tmp) then one rename: `path` is whole or absent, never half-written."""
    tmp = f"{path}.tmp"
    write(tmp)
    os.replace(tmp, path)


def write_text(path: str, text: str) -> None:
    """A text file written whole or not at all (summaries, profiles)."""
    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    atomic_write(path, write)


def mark(folder: str, kind: str) -> None:
    with open(os.path.join(folder, MARKER), "w") as f:
        json.dump({"kind": kind, "written_by": "flowclip"}, f)


def kind_of(folder: str) -> str | None:
    """The kind a flowclip command wrote this folder as, or None."""
    try:
        with open(os.path.join(folder, MARKER)) as f:
            kind = json.load(f).get("kind")
        return kind if kind in KINDS else None
    except (OSError, ValueError, AttributeError):
        pass
    for kind, (file, keys) in _LEGACY.items():
        try:
            with open(os.path.join(folder, file)) as f:
                content = json.load(f)
            if isinstance(content, dict) and all(k in content for k in keys):
                return kind
        except (OSError, ValueError, TypeError):
            continue
    runs = os.path.join(folder, "runs")            # a study of an older flowclip: run folders inside
    if os.path.exists(os.path.join(folder, "STUDY_DONE")) or (os.path.isdir(runs) and any(
            kind_of(os.path.join(runs, r)) == "head-run" for r in os.listdir(runs))):
        return "study"
    return None


def require_own(out: str, kind: str) -> None:
    """Refuse an existing, non-empty `out` that is not this command's kind of output."""
    if not os.path.isdir(out):
        if os.path.exists(out):
            raise FlowclipError(f"{out} exists and is a file, not {KINDS[kind]}; choose another --out")
        return
    if not os.listdir(out):
        return
    found = kind_of(out)
    if found != kind:
        what = KINDS[found] if found else "not a folder flowclip wrote (a feature store? your files?)"
        raise FlowclipError(f"{out} is {what}, not {KINDS[kind]}; flowclip writes and replaces only its own "
                            f"output. Choose another --out")


def check_replaceable(out: str, kind: str, overwrite: bool) -> None:
    """Refuse an existing `out` unless --overwrite was given and it is our own kind."""
    require_own(out, kind)
    if os.path.isdir(out) and os.listdir(out) and not overwrite:
        raise FlowclipError(f"{out} exists; pass --overwrite to replace it (results are never overwritten silently)")


def publish(tmp: str, out: str, kind: str, overwrite: bool) -> None:
    """Move a finished temporary folder to `out`. Without --overwrite, a folder that
    appeared meanwhile (another command writing the same --out) is never replaced."""
    mark(tmp, kind)
    taken = f"{out} was written by another command while this one ran; nothing replaced. Rerun with another --out"
    if os.path.exists(out) and not overwrite:
        raise FlowclipError(taken)
    if os.path.exists(out):
        check_replaceable(out, kind, overwrite)
        old = f"{out}.old-{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
        os.rename(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
        return
    try:
        os.rename(tmp, out)         # onto a non-empty folder this fails: nothing is replaced
    except OSError:
        raise FlowclipError(taken) from None
