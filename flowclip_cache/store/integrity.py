"""Checking a store whole (`store verify`), moving damaged parts aside (`--quarantine`),
removing duplicate rows (`store compact`) and upgrading format 1 (`store upgrade`).

verify reads every byte: each segment's arrays against the CRC-32s recorded at commit,
shapes, dtypes, finiteness, offsets; each record file against the checksum in its
name; store.json against its fingerprint. It reports every problem in one run and
raises nothing for damage it can describe.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import SegmentDamaged, StoreError
from ..hashing import KEY_BYTES
from . import remote
from .backends import BACKENDS, crc32, fsync_dir
from .core import (
    ARRAYS,
    CAPTION,
    COMMITS,
    FORMAT_NAME,
    FORMAT_VERSION,
    IMAGE,
    RECORD_FOLDERS,
    SEGMENT_NAME,
    FeatureStore,
    read_store_json,
)
from .location import is_url, locate
from .writer import WriterDir

RECORD_COLUMNS = {
    "paths": ("image_root", "path", "crop", "key"),
    "hashes": ("path", "size", "mtime_ns", "inode", "sha256"),
    "failures": ("kind", "key", "path_or_text", "source", "reason"),
}


@dataclass
class Report:
    problems: list[tuple[str | None, str]] = field(default_factory=list)  # (path to quarantine or None, message)
    notes: list[str] = field(default_factory=list)
    segments: int = 0
    images: int = 0
    captions: int = 0


class _Lenient(FeatureStore):
    """A store opened for checking: damaged segments are left out of the index, not refused."""

    def refresh(self) -> None:
        found, self.scan_problems = self.scan()
        self.segments = [s for s, _ in found]
        self._segment_keys = [k for _, k in found]
        self._paths = None
        self._token_index = None
        for kind in (IMAGE, CAPTION):
            self._index[kind].build([(i, k) for i, (s, k) in enumerate(found) if s.kind == kind])


def verify_store(root: str) -> Report:
    """At a URL every byte is read from the service, not a chunk cache."""
    rep = Report()
    try:
        store = _Lenient(root if is_url(root) else os.path.abspath(root), cache=False)
    except StoreError as e:
        rep.problems.append((None, str(e)))
        return rep
    root, rel = store.root, store.rel
    rep.problems += [(p, f"{rel(p)}: {r}") for p, r in store.scan_problems]
    d, P = store.meta["dim"], store.meta["num_patches"]
    for seg in store.segments:
        for msg in _check_segment(store, seg, d, P):
            rep.problems.append((seg.path, f"{rel(seg.path)}: {msg}"))
    for folder in RECORD_FOLDERS:
        for name in _record_names(store, folder):
            path = store.loc.path(folder, name)
            try:
                store.read_record(folder, name, RECORD_COLUMNS[folder])
            except SegmentDamaged as e:
                rep.problems.append((path, f"{folder}/{name}: {e.reason}"))
    rep.problems += [(None, msg) for msg in _global_mismatches(store)]
    rep.problems += _record_mismatches(store)
    dup = store.duplicates(IMAGE) + store.duplicates(CAPTION)
    if dup:
        rep.notes.append(
            f"{dup} rows repeat a key held by an earlier segment (two writers at once, or global-only rows a "
            f"full extract has since covered; legal: a key's full row is read, else its first in name order). "
            f"`flowclip store compact {root}` removes them"
        )
    if not store.loc.local:
        rep.notes += _uncommitted_note(store)
        rep.segments, rep.images, rep.captions = len(store.segments), store.count(IMAGE), store.count(CAPTION)
        return rep
    temps = [n for n in os.listdir(store.segment_dir) if n.startswith(".tmp-")]
    states = [WriterDir.status(os.path.join(store.segment_dir, n)) for n in temps]
    for state in ("live", "abandoned", "legacy", "unknown"):
        if states.count(state):
            rep.notes.append(
                f"{states.count(state)} {state} writer temporaries in segments/"
                + {
                    "abandoned": " (the next extract removes them)",
                    "legacy": " (format 1; `flowclip store upgrade` removes them)",
                }.get(state, "")
            )
    rep.segments, rep.images, rep.captions = len(store.segments), store.count(IMAGE), store.count(CAPTION)
    return rep


def store_problems(root: str) -> list[str]:
    """Every problem verify finds, as messages (empty: the store is whole)."""
    return [msg for _, msg in verify_store(root).problems]


def _global_mismatches(store: FeatureStore) -> list[str]:
    """A key held both with every feature and with its global one alone must hold the same
    global bits in both (a feature is a function of its input alone)."""
    out = []
    for i, seg in enumerate(store.segments):
        if seg.features != "global":
            continue
        keys = [bytes(r).hex() for r in store._segment_keys[i]]
        full = store.has(seg.kind, keys)
        if not full.any():
            continue
        try:
            here = store.read_array(seg, "global")[full]
            there = store.load_global(seg.kind, [k for k, f in zip(keys, full) if f])
        except (SegmentDamaged, StoreError):
            continue  # reported as the segment's own damage
        differ = int((here.view(np.uint16) != there.view(np.uint16)).any(1).sum())
        if differ:
            out.append(f"{seg.name}: {differ} rows' global features differ from the same keys' full rows")
    return out


def _record_mismatches(store: FeatureStore) -> list[tuple[str | None, str]]:
    """Each segment's commit record must say the kind and row count the segment holds (its
    own attributes, checked with its arrays' CRC-32s); a record that says otherwise is the
    damaged part (on a disk a segment without its record is legal, and still read)."""
    out: list[tuple[str | None, str]] = []
    for seg in store.segments:
        rel = f"{COMMITS}/{seg.name}.json"
        raw = store.loc.read(rel)
        if raw is None:
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            rec = None
        if not isinstance(rec, dict) or rec.get("kind") != seg.kind or rec.get("rows") != seg.rows:
            said = f"kind {rec.get('kind')!r}, rows {rec.get('rows')!r}" if isinstance(rec, dict) else "no JSON object"
            out.append(
                (store.loc.path(rel), f"{rel}: the record says {said}; the segment holds {seg.rows} {seg.kind} rows")
            )
    return out


def _record_names(store: FeatureStore, folder: str) -> list[str]:
    return [n for n in store.loc.listdir(folder) if not n.startswith(".")]


def _uncommitted_note(store: FeatureStore) -> list[str]:
    found = remote.uncommitted(store)
    if not found:
        return []
    oldest = max(age for _, age in found) / 3600
    return [
        f"{len(found)} segment uploads without a commit record (writers still writing, or killed; the oldest "
        f"{oldest:.1f} h old): readers never see them; `flowclip store compact {store.root}` removes those older "
        f"than its --uncommitted-after"
    ]


def _check_segment(store: FeatureStore, seg, d: int, P: int) -> list[str]:
    out = []
    try:
        a = {name: store.read_array(seg, name) for name in seg.arrays()}
    except SegmentDamaged as e:
        return [e.reason]
    n = seg.rows
    expect: dict[str, tuple[tuple[int, ...], type]] = {
        "keys": ((n, KEY_BYTES), np.uint8),
        "global": ((n, d), np.float16),
    }
    if seg.features == "global":
        pass
    elif seg.kind == IMAGE:
        expect["patches"] = ((n, P, d), np.float16)
    else:
        off = a["offsets"]
        expect["token_keys"] = ((n, KEY_BYTES), np.uint8)
        expect["offsets"] = ((n + 1,), np.int64)
        expect["truncated"] = ((n,), np.uint8)
        expect["tokens"] = ((int(off[-1]) if len(off) else 0, d), np.float16)
        if len(off) != n + 1 or off[0] != 0 or (np.diff(off) <= 0).any():
            out.append("offsets are not increasing from 0")
    for name, (shape, dtype) in expect.items():
        if a[name].shape != shape or a[name].dtype != dtype:
            out.append(f"{name} is {a[name].dtype}{list(a[name].shape)}, expected {np.dtype(dtype)}{list(shape)}")
    for name in ("global", "patches", "tokens"):
        if name in a and not np.isfinite(a[name]).all():
            out.append(f"{name} holds NaN or inf")
    if len(np.unique(a["keys"], axis=0)) != n:
        out.append("a key appears twice in the segment")
    return out


def quarantine(root: str, report: Report, log=print) -> str | None:
    """Move every damaged part named in the report to <root>/quarantine/<time>/; the next
    extract re-encodes what they held. store.json cannot be moved (nothing could be read
    without it): that problem is reported, not fixed."""
    if is_url(root):
        return _quarantine_records(root, report, log)
    root = os.path.abspath(root)
    movable = [p for p, _ in report.problems if p is not None and os.path.exists(p)]
    if not movable:
        return None
    dest = os.path.join(root, "quarantine", time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}")
    records = [
        os.path.join(root, COMMITS, os.path.basename(p) + ".json")
        for p in movable
        if os.path.dirname(p) == os.path.join(root, "segments")
    ]
    movable += [r for r in records if os.path.exists(r) and r not in movable]  # a moved segment's record too
    for p in movable:
        target = os.path.join(dest, os.path.relpath(p, root))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.rename(p, target)
        fsync_dir(os.path.dirname(p))
        log(f"moved {os.path.relpath(p, root)} -> {os.path.relpath(target, root)}")
    return dest


def _quarantine_records(url: str, report: Report, log) -> str | None:
    """At a URL a damaged segment is put out of the readers' view by moving its commit
    record (copied to quarantine/<time>-<pid>/, then removed): its upload is then
    uncommitted, the next extract re-encodes its rows, and compact removes it later. A
    damaged record file moves the same way."""
    loc = locate(url)
    parts = []
    for p, _ in report.problems:
        if p is None:
            continue
        r = loc.rel(p)
        parts.append(f"{COMMITS}/{r.rsplit('/', 1)[-1]}.json" if r.startswith("segments/") else r)
    parts = [r for r in dict.fromkeys(parts) if loc.exists(r)]
    if not parts:
        return None
    dest = f"quarantine/{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    for r in parts:
        loc.write(f"{dest}/{r}", loc.read(r) or b"")
        loc.remove(r)
        log(f"moved {r} -> {dest}/{r}")
    return loc.path(dest)


def compact(root: str, log=print, uncommitted_after_s: float = 24 * 3600) -> int:
    """Rewrite segments so that each key is held once, keeping the vector every reader
    reads today (its first segment in index order: full segments by name, then
    global-only ones). Segments are processed from last to first, so at every moment each
    key still resolves to the same vector: a reader running meanwhile sees no change.
    On a disk refused while a writer is live; at a URL (no locks to see writers by) it
    also removes uploads without a commit record older than `uncommitted_after_s` (at
    least remote.MIN_UNCOMMITTED_AFTER_S: a shorter bound could take a live writer's)."""
    if uncommitted_after_s < remote.MIN_UNCOMMITTED_AFTER_S:
        raise StoreError(
            f"an uncommitted upload is removed once at least {remote.MIN_UNCOMMITTED_AFTER_S / 3600:g} h old "
            f"(a live writer's is younger, and shorter bounds could take it); got {uncommitted_after_s / 3600:g} h"
        )
    store = FeatureStore(root)
    if store.loc.local:
        live = WriterDir.live(store.segment_dir)
        if live:
            raise StoreError(f"{root}: a writer is running ({', '.join(live)}); compact when no extract writes here")
        WriterDir.sweep(store.segment_dir)
    owner: dict[tuple[str, bytes], int] = {}
    for i, (s, k) in enumerate(zip(store.segments, store._segment_keys)):
        for row in k:
            owner.setdefault((s.kind, row.tobytes()), i)
    removed = 0
    try:
        for i in range(len(store.segments) - 1, -1, -1):
            s, k = store.segments[i], store._segment_keys[i]
            keep = np.array([owner[(s.kind, row.tobytes())] == i for row in k], bool)
            if keep.all():
                continue
            if keep.any():
                store.write_segment(s.kind, [bytes(r).hex() for r in k[keep]], _rows(store, s, keep))
            _remove_segment(store, s)
            removed += int((~keep).sum())
            log(f"{s.name}: {int((~keep).sum())} duplicate rows removed")
        if not store.loc.local:
            remote.remove_uncommitted(store, uncommitted_after_s, log)
    finally:
        store.release_writer()
    return removed


def _remove_segment(store: FeatureStore, s) -> None:
    """The commit record first (a segment without one is legal on a disk, invisible at a
    URL), then the segment: on a disk renamed out of the readers' view in one step."""
    if not store.loc.local:
        store.loc.remove(f"{COMMITS}/{s.name}.json")
        store.loc.remove(store.rel(s.path))
        return
    trash = os.path.join(store.writer_dir(), "old-" + s.name)
    if os.path.exists(store.commit_record(s.name)):
        os.remove(store.commit_record(s.name))
    os.rename(s.path, trash)
    fsync_dir(store.segment_dir)
    store.backend.remove(trash)


def _rows(store: FeatureStore, seg, keep: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays of a segment restricted to the rows in keep (keys excluded)."""
    a = {n: store.read_array(seg, n) for n in seg.arrays() if n != "keys"}
    if seg.features == "global":
        return {"global": a["global"][keep]}
    if seg.kind == IMAGE:
        return {"global": a["global"][keep], "patches": a["patches"][keep]}
    from .reading import _ranges

    off = a["offsets"]
    r = np.flatnonzero(keep)
    lengths = off[r + 1] - off[r]
    return {
        "token_keys": a["token_keys"][keep],
        "global": a["global"][keep],
        "truncated": a["truncated"][keep],
        "tokens": a["tokens"][_ranges(off[r], off[r + 1])],
        "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
    }


def upgrade(root: str, log=print) -> int:
    """Format 1 -> 2: every segment rewritten with its arrays' CRC-32s (and captions with
    unknown token ids), record files renamed with their checksums, legacy temporaries
    removed, store.json last. Format 1 could not tell a lost zero chunk from a written
    one, so damage from before the upgrade is not detectable; the upgrade checks what
    it can (shapes, finiteness, names). Run it when no older flowclip writes here.
    Rerunnable: upgraded segments are skipped."""
    root = os.path.abspath(root)
    meta_path = os.path.join(root, "store.json")
    meta = json.load(open(meta_path))
    if meta.get("format") != FORMAT_NAME:
        raise StoreError(f"{meta_path}: not a flowclip store file")
    if meta.get("version") == FORMAT_VERSION:
        log(f"{root} is already format {FORMAT_VERSION}")
        return 0
    if meta.get("version") != 1:
        raise StoreError(f"{root}: cannot upgrade format {meta.get('version')!r}")
    backend = BACKENDS[meta["backend"]]
    seg_dir = os.path.join(root, "segments")
    work = WriterDir.create(seg_dir)
    done = 0
    try:
        for name in sorted(os.listdir(seg_dir)):
            path = os.path.join(seg_dir, name)
            if name.startswith(".tmp-") and WriterDir.status(path) == "legacy":
                backend.remove(path) if name.endswith(backend.suffix) else shutil.rmtree(path, ignore_errors=True)
                continue
            m = SEGMENT_NAME.match(name)
            if not m or m["suffix"] != backend.suffix or m["g"]:  # format 1 had no global-only segments
                continue
            if "crc32" in backend.attrs(path):
                continue
            _upgrade_segment(backend, path, name, m, work.path, seg_dir)
            done += 1
        _rename_legacy_records(root)
    finally:
        work.release()
    meta["version"] = FORMAT_VERSION
    tmp = meta_path + f".tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, meta_path)
    fsync_dir(root)
    read_store_json(root)
    log(f"{root}: {done} segments upgraded to format {FORMAT_VERSION}")
    return done


def _upgrade_segment(backend, path: str, name: str, m, work: str, seg_dir: str) -> None:
    """One format-1 segment rewritten with its arrays' CRC-32s (a caption segment gains
    unknown token keys), renamed into place."""
    kind = m["kind"]
    names = ARRAYS[kind] if kind == IMAGE else [n for n in ARRAYS[kind] if n != "token_keys"]
    a = {n: np.ascontiguousarray(backend.read_legacy(path, n)) for n in names}
    if hashlib.sha256(a["keys"].tobytes()).hexdigest()[:24] != m["hash"]:
        raise StoreError(f"{path}: its keys do not hash to its name; move it aside and re-extract")
    if kind == CAPTION:
        a["token_keys"] = np.zeros_like(a["keys"])
    tmp = os.path.join(work, name)
    backend.write(
        tmp,
        a,
        {
            "kind": kind,
            "rows": len(a["keys"]),
            "format_version": FORMAT_VERSION,
            "crc32": {n: crc32(v) for n, v in a.items()},
        },
    )
    old = os.path.join(work, "old-" + name)
    os.rename(path, old)
    os.rename(tmp, path)
    fsync_dir(seg_dir)
    backend.remove(old)


def _rename_legacy_records(root: str) -> None:
    """Record files renamed <time>-<id>-<sha256 of their bytes>.parquet; legacy .tmp files removed."""
    for folder in RECORD_FOLDERS:
        d = os.path.join(root, folder)
        os.makedirs(d, exist_ok=True)
        for name in sorted(os.listdir(d)):
            if name.endswith(".parquet") and not name.startswith("."):
                raw = open(os.path.join(d, name), "rb").read()
                stem = name[: -len(".parquet")]
                t = (
                    stem.split("-")[0]
                    if stem.split("-")[0].isdigit()
                    else f"{os.stat(os.path.join(d, name)).st_mtime_ns:020d}"
                )
                new = (
                    f"{int(t):020d}-{hashlib.sha256(stem.encode()).hexdigest()[:12]}-"
                    f"{hashlib.sha256(raw).hexdigest()[:16]}.parquet"
                )
                os.rename(os.path.join(d, name), os.path.join(d, new))
            elif name.endswith(".tmp"):
                os.remove(os.path.join(d, name))
        fsync_dir(d)
