"""A store at a URL: what readers index and how writers commit, without locks.

Object storage writes an object whole or not at all, and (S3, GCS) can create an object
only if its name is free; it has no rename and no locks. So at a URL:

- a writer writes each segment's objects under `segments/.w-<host>-<pid>-<id>/<segment name>/`,
  a prefix no other writer uses, then creates `commits/<segment name>.json`
  ({segment, kind, rows, at: that prefix}) only if absent. A writer that finds the
  record taken (another committed the same keys first) deletes its own objects;
- readers index the segments named by commit records, nothing else: an upload without
  its record (a writer still writing, or killed) is invisible;
- `store compact` removes uploads no record names once they are older than a bound
  (a live writer's upload in progress is younger: a segment is seconds of upload).

A writer's local temporaries (its segment before upload) go to
<chunk cache>/writers/, under the same flock as a local writer's folder (writer.py).
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from .layout import COMMITS, SEGMENT_NAME
from .location import Location

WRITER_PREFIX = ".w-"
# compact's bound on an uncommitted upload's age may not be shorter: a live writer's newest
# object is at most one object's upload plus one record creation old (seconds; minutes on a
# stalled link), so an hour never takes a live writer's upload for a killed one's
MIN_UNCOMMITTED_AFTER_S = 3600
AT = re.compile(r"^segments/(\.w-[A-Za-z0-9_.-]+/)?(?P<seg>[^/]+)\Z")


def committed(store) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(segment name, its path) for each commit record, in name order; and the records
    that are not a segment's, as (path, reason)."""
    loc: Location = store.loc
    entries, problems = [], []
    for name, entry in sorted(loc.details(COMMITS).items()):
        if name.startswith("."):
            continue
        path = loc.path(COMMITS, name)
        seg = name[: -len(".json")] if name.endswith(".json") else ""
        if not SEGMENT_NAME.match(seg):
            problems.append((path, f"stray entry {name!r} (not <segment name>.json)"))
            continue
        try:
            at = record_at(_read_record(store, path, entry), seg)
        except FileNotFoundError:  # removed since the listing (compact)
            continue
        if at is None:
            problems.append((path, "not a commit record of this segment ({segment, kind, rows[, at]})"))
            continue
        entries.append((seg, loc.path(at)))
    return entries, problems


def record_at(raw: bytes | None, seg: str) -> str | None:
    """Where a commit record says its segment is, inside the store (`segments/<name>` when
    it names no writer's prefix); None for a record that is not this segment's."""
    try:
        rec = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    at = rec.get("at", f"segments/{seg}") if isinstance(rec, dict) and rec.get("segment") == seg else None
    m = AT.match(at) if isinstance(at, str) else None
    return at if m and m["seg"] == seg else None


def _read_record(store, path: str, entry: dict) -> bytes:
    """A commit record's bytes, through the chunk cache keyed by the listing's ETag (where
    the service lacks conditional writes the last writer's record stands)."""
    cache = store.cache
    etag = str(entry.get("ETag") or entry.get("etag") or entry.get("md5Hash") or "").strip('"')
    if cache is None or not re.fullmatch(r"[A-Za-z0-9_=+-]{8,}", etag):
        return store.loc.fs.cat_file(path)
    with open(cache.local(path, etag), "rb") as f:
        return f.read()


def upload_segment(store, tmp: str, name: str, kind: str, rows: int) -> str:
    """A segment written locally at tmp goes to the writer's own prefix, then its commit
    record is created; returns where the committed segment is: ours, or (our upload
    removed) the one another writer committed first."""
    loc: Location = store.loc
    writer = os.path.basename(store.writer_dir()).removeprefix(".tmp-")  # <host>-<pid>-<id>
    at = f"segments/{WRITER_PREFIX}{writer}/{name}"
    for dirpath, _, files in os.walk(tmp):
        for f in sorted(files):
            local = os.path.join(dirpath, f)
            rel = os.path.relpath(local, tmp).replace(os.sep, "/")
            loc.fs.put_file(local, loc.path(at, rel))
    record = json.dumps({"segment": name, "kind": kind, "rows": rows, "at": at}).encode()
    if loc.create(f"{COMMITS}/{name}.json", record):
        return loc.path(at)
    loc.remove(at)  # the same keys were committed first; that segment stands
    return loc.path(record_at(loc.read(f"{COMMITS}/{name}.json"), name) or f"segments/{name}")


def uncommitted(store) -> list[tuple[str, float]]:
    """Segment uploads no commit record names, with the age in seconds of their newest
    object: writers still uploading, killed ones, and interrupted syncs."""
    loc: Location = store.loc
    named = {loc.rel(p) for _, p in committed(store)[0]}
    out = []
    now = time.time()
    for entry in loc.listdir("segments"):
        prefixes = (
            [f"segments/{entry}/{n}" for n in loc.listdir(f"segments/{entry}")]
            if entry.startswith(WRITER_PREFIX)
            else [f"segments/{entry}"]
        )
        for rel in prefixes:
            if rel in named:
                continue
            found = loc.fs.find(loc.path(rel), detail=True)
            stamps = [_mtime(e) for e in found.values()] or [now]
            out.append((rel, now - max(stamps)))
    return out


def _mtime(entry: dict) -> float:
    t: Any = entry.get("LastModified") or entry.get("mtime") or entry.get("created") or entry.get("updated")
    if hasattr(t, "timestamp"):
        return float(t.timestamp())
    try:
        return float(t)
    except (TypeError, ValueError):
        return time.time()  # unknown: treated as new (never removed)


def remove_uncommitted(store, older_than_s: float, log=print) -> int:
    """Remove segment uploads no record names whose newest object is older than the bound.
    Each one's record is looked at again just before (a writer stalled past the bound
    may have committed it since the listing)."""
    n = 0
    for rel, age in uncommitted(store):
        if age >= older_than_s and not _named_now(store.loc, rel):
            store.loc.remove(rel)
            log(f"{rel}: uncommitted upload removed ({age / 3600:.1f} h old)")
            n += 1
    return n


def _named_now(loc: Location, rel: str) -> bool:
    """Whether the commit record of this upload's segment names it at this moment."""
    name = rel.rsplit("/", 1)[-1]
    return record_at(loc.read(f"{COMMITS}/{name}.json"), name) == rel
