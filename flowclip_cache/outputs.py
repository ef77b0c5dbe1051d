"""Output folders a command owns, and only those.

Every folder a command writes as a whole (a score's results, a head run, a study)
holds a marker file naming its kind and listing the entries the command wrote there.
Only the marker proves ownership: a folder without one (a feature store, a folder of
the user's files, or an output of a flowclip older than markers) is never replaced,
and an older output is adopted only by `flowclip adopt` (marker written on request).
`--overwrite` replaces only what the marker lists, and refuses, naming them, when
anything else is in the folder. No output goes inside a feature store.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid

from .errors import FlowclipError

MARKER = "FLOWCLIP_OUTPUT.json"
KINDS = {
    "score-results": "a score results folder",
    "head-run": "a train-head run folder",
    "study": "a study folder",
    "pretrain-run": "a pretrain-tiny-clip run folder",
    "explain": "an explain folder",
    "adapt-run": "an adapt run folder",
    "published-head": "a published head folder (flowclip publish)",
    "sweep": "a sweep folder",
    "results-table": "a results table folder (flowclip results --out)",
    "leaderboard-export": "a leaderboard export folder (flowclip export --out)",
    "test-time-matching": "a test-time matching folder (flowclip test-time-match --out)",
}
_LEGACY = {
    "score-results": ("results.json", ("store_fingerprint", "results")),
    "head-run": ("config.json", ("store_fingerprint", "train")),
    "pretrain-run": ("config.json", ("scenes", "steps", "attribute_rate")),
}


def atomic_write(path: str, write) -> None:
    """write(tmp) then one rename: `path` is whole or absent, never half-written. Inside a
    marked output folder (at any depth) the path is recorded as the command's own."""
    tmp = f"{path}.tmp"
    write(tmp)
    own_path(path)
    os.replace(tmp, path)


def write_text(path: str, text: str) -> None:
    """A text file written whole or not at all (summaries, profiles)."""

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)

    atomic_write(path, write)


def write_csv(path: str, rows) -> None:
    """A CSV (rows of cells) written whole or not at all."""
    import csv
    import io

    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    write_text(path, buf.getvalue())


def _plain(rel) -> bool:
    """A relative path inside the folder: a marker is data a stranger may have written,
    and a listed "../x" or "/x" must never make --overwrite reach outside the folder."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or os.sep != "/" and os.sep in rel:
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))


def _read_marker(folder: str) -> dict | None:
    try:
        with open(os.path.join(folder, MARKER)) as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("kind") not in KINDS:
        return None
    files, paths = marker.get("files", []), marker.get("paths", [])
    marker["files"] = [f for f in files if _plain(f) and "/" not in f] if isinstance(files, list) else []
    marker["paths"] = [p for p in paths if _plain(p) and "/" in p] if isinstance(paths, list) else []
    return marker


def _write_marker(folder: str, kind: str, files, paths=()) -> None:
    tmp = os.path.join(folder, f".{MARKER}.{uuid.uuid4().hex[:8]}")
    with open(tmp, "w") as f:
        entry = {"kind": kind, "written_by": "flowclip", "files": sorted(set(files) - {MARKER})}
        if paths:
            entry["paths"] = sorted(set(paths))
        json.dump(entry, f)
    os.replace(tmp, os.path.join(folder, MARKER))


def own_tree(folder: str, *names: str) -> None:
    """own() every path now under these folders of a marked output (a tool such as
    TensorBoard or W&B wrote them there, on the command's behalf)."""
    own(folder, *[p for name in names for p in _tree(folder, name)])


def _tree(folder: str, name: str) -> list[str]:
    """Every path under folder/name (relative to folder), not inside a marked output
    nested there (its own marker speaks for it)."""
    out: list[str] = []
    top = os.path.join(folder, name)
    if not os.path.isdir(top) or os.path.islink(top):
        return out
    for d, dirs, files in os.walk(top):
        rel = os.path.relpath(d, folder).replace(os.sep, "/")
        nested = [x for x in dirs if kind_of(os.path.join(d, x)) is not None and not os.path.islink(os.path.join(d, x))]
        dirs[:] = [x for x in dirs if x not in nested]
        out += [f"{rel}/{x}" for x in sorted(dirs + files + nested)]
    return out


def mark(folder: str, kind: str, files=()) -> None:
    """Mark `folder` as this kind's output, keeping the entries a marker of the same kind
    already lists and adding `files` (a folder among them with everything now inside it:
    mark a folder once it holds what the command wrote)."""
    old = _read_marker(folder)
    same = old if old and old["kind"] == kind else {"files": [], "paths": []}
    paths = same["paths"] + [p for name in files for p in _tree(folder, name)]
    _write_marker(folder, kind, list(files) + same["files"], paths)


def own(folder: str, *names: str) -> None:
    """Record entries a command writes into its marked folder (nothing if unmarked): a
    name, or a path inside one of its folders ("ckpt-00000001/state.json"). Recorded
    before the entry is written, so a crash leaves nothing unlisted."""
    old = _read_marker(folder)
    if old is None:
        return
    tops = [n.split("/")[0] for n in names]
    nested = [n for n in names if "/" in n]
    if not set(tops) <= set(old["files"]) or not set(nested) <= set(old["paths"]):
        _write_marker(folder, old["kind"], old["files"] + tops, old["paths"] + nested)


def own_path(path: str) -> None:
    """own() for a file at any depth: recorded in the nearest marked folder above it."""
    folder = output_at_or_above(os.path.dirname(path) or ".")
    if folder is not None:
        own(folder, os.path.relpath(os.path.realpath(path), folder).replace(os.sep, "/"))


def listed(folder: str) -> set[str]:
    """The entries the folder's marker lists (empty for an unmarked folder)."""
    marker = _read_marker(folder)
    return set(marker["files"]) if marker else set()


def disown(folder: str, *names: str) -> None:
    """Forget entries the command removed (a checkpoint folder replaced by a newer one)."""
    old = _read_marker(folder)
    if old is not None:
        gone = set(names)
        keep = [p for p in old["paths"] if p.split("/")[0] not in gone]
        _write_marker(folder, old["kind"], [f for f in old["files"] if f not in gone], keep)


def kind_of(folder: str) -> str | None:
    """The kind a flowclip command wrote this folder as (its marker alone), or None."""
    marker = _read_marker(folder)
    return marker["kind"] if marker else None


def legacy_kind(folder: str) -> str | None:
    """The kind an unmarked folder looks like (an output of a flowclip older than markers,
    or a look-alike): used only to word a refusal, never to take ownership."""
    for kind, (file, keys) in _LEGACY.items():
        try:
            with open(os.path.join(folder, file)) as f:
                content = json.load(f)
            if isinstance(content, dict) and all(k in content for k in keys):
                return kind
        except (OSError, ValueError, TypeError):
            continue
    if os.path.exists(os.path.join(folder, "STUDY_DONE")) or os.path.isdir(os.path.join(folder, "runs")):
        return "study"
    return None


def foreign_entries(folder: str) -> list[str]:
    """Entries of an owned folder that its marker does not list, at any depth: someone
    else's (a file a user put inside a run's checkpoint folder counts as much as one
    beside it). A marked output nested inside is judged by its own marker where this
    folder's marker lists it (a study's runs); one it does not list is foreign whole, its
    own marker notwithstanding (another command's output copied in)."""
    marker = _read_marker(folder)
    listed = set(marker["files"]) if marker else set()
    known = set(marker["paths"]) if marker else set()
    known |= {"/".join(p.split("/")[:i]) for p in known for i in range(1, p.count("/") + 1)}  # their folders
    out = sorted(n for n in os.listdir(folder) if n != MARKER and n not in listed)
    for name in sorted(listed):
        top = os.path.join(folder, name)
        if not os.path.isdir(top) or os.path.islink(top):
            continue
        if kind_of(top) is not None:
            out += [f"{name}/{x}" for x in foreign_entries(top)]
            continue
        for rel in _tree(folder, name):
            path = os.path.join(folder, rel)
            if rel not in known:
                out.append(rel)  # (a marked output nested where this command wrote none is another's)
            elif kind_of(path) is not None and not os.path.islink(path):
                out += [f"{rel}/{x}" for x in foreign_entries(path)]
    return out


def adopt(folder: str, kind: str) -> list[str]:
    """Mark an output written before markers existed as `kind`, listing what is in it now
    (the user's explicit word that everything there may be replaced by --overwrite)."""
    if kind not in KINDS:
        raise FlowclipError(f"unknown output kind {kind!r}; use one of {', '.join(KINDS)}")
    if not os.path.isdir(folder) or os.path.islink(folder):
        raise FlowclipError(f"{folder} is not a folder")
    found = kind_of(folder)
    if found is not None:
        raise FlowclipError(f"{folder} is already marked as {KINDS[found]}")
    if _store_at_or_above(folder):
        raise FlowclipError(f"{folder} is (inside) a feature store; flowclip outputs never live there")
    entries = sorted(os.listdir(folder))
    _write_marker(folder, kind, entries)
    return entries


def _at_or_above(path: str, found) -> str | None:
    """The first folder at `path` or above it (real paths) for which found(folder) holds."""
    path = os.path.realpath(path)
    while True:
        if found(path):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def _store_at_or_above(path: str) -> str | None:
    """The feature store (a folder with store.json) at `path` or above it, or None."""
    return _at_or_above(path, lambda p: os.path.isfile(os.path.join(p, "store.json")))


def output_at_or_above(path: str) -> str | None:
    """The marked flowclip output at `path` or above it, or None."""
    return _at_or_above(path, lambda p: kind_of(p) is not None)


def require_own(out: str, kind: str) -> None:
    """Refuse an existing, non-empty `out` that is not this command's kind of output by its
    marker, a symbolic link, and any place inside a feature store."""
    if os.path.islink(out):
        raise FlowclipError(
            f"{out} is a symbolic link; name the folder itself (flowclip never follows a link "
            f"to replace what it points at)"
        )
    store = _store_at_or_above(out)
    if store is not None:
        raise FlowclipError(
            f"{out} is inside the feature store {store}; outputs never go inside a store. Choose another --out"
        )
    if not os.path.isdir(out):
        if os.path.exists(out) and not os.path.isdir(out):  # (asked again: another rank may just have made it)
            raise FlowclipError(f"{out} exists and is a file, not {KINDS[kind]}; choose another --out")
        if not os.path.isdir(out):
            return
    if not os.listdir(out):
        return
    found = kind_of(out)
    if found == kind:
        return
    if found is not None:
        what = KINDS[found]
    elif legacy_kind(out) == kind:
        raise FlowclipError(
            f"{out} looks like {KINDS[kind]} of an older flowclip but has no {MARKER}; only the "
            f"marker proves flowclip wrote it. If it is yours to replace: flowclip adopt {out} "
            f"--kind {kind}; otherwise choose another --out"
        )
    else:
        what = "not a folder flowclip wrote (a feature store? your files?)"
    raise FlowclipError(
        f"{out} is {what}, not {KINDS[kind]}; flowclip writes and replaces only its own output. Choose another --out"
    )


def refuse_foreign(out: str) -> None:
    """Refuse to replace an owned folder that holds entries its command did not write."""
    foreign = foreign_entries(out)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise FlowclipError(
            f"{out} holds entries flowclip did not write there ({shown}); --overwrite replaces "
            f"only its own files. Move them out, or choose another --out"
        )


def remove_own(out: str) -> None:
    """Delete what the marker lists (after refuse_foreign), keeping the folder."""
    refuse_foreign(out)
    marker = _read_marker(out) or {"files": []}
    for name in marker["files"] + [MARKER]:
        path = os.path.join(out, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)


def check_replaceable(out: str, kind: str, overwrite: bool) -> None:
    """Refuse an existing `out` unless --overwrite was given, it is our own kind, and it
    holds nothing but what we wrote."""
    require_own(out, kind)
    if os.path.isdir(out) and os.listdir(out):
        if not overwrite:
            raise FlowclipError(
                f"{out} exists; pass --overwrite to replace it (results are never overwritten silently)"
            )
        refuse_foreign(out)


def publish(tmp: str, out: str, kind: str, overwrite: bool) -> None:
    """Move a finished temporary folder to `out`. Without --overwrite, a folder that
    appeared meanwhile (another command writing the same --out) is never replaced."""
    mark(tmp, kind, os.listdir(tmp))
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
        os.rename(tmp, out)  # onto a non-empty folder this fails: nothing is replaced
    except OSError:
        raise FlowclipError(taken) from None


@contextlib.contextmanager
def staged(out: str, kind: str, overwrite: bool):
    """A temporary folder beside `out` to write the output into; published as `out` when the
    block ends (publish above), removed whatever happens: a failure leaves nothing behind."""
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(os.path.abspath(out))}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.makedirs(tmp)
    try:
        yield tmp
        publish(tmp, out, kind, overwrite)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
