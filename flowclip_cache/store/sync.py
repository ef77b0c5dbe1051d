"""`flowclip store sync SRC DST`: copy a feature store between a local folder and a URL
(s3://, gs://, any fsspec URL; memory:// in tests), or between two of either.

    store.json (a new destination) -> record files -> each committed segment the
    destination lacks: its files, then its CRC-32s read back from the destination, then
    its commit record

What a reader of the destination may assume at any moment: a segment with a commit
record is whole and checked (the record is written only after the segment's every
array was read back from the destination and matched the CRC-32 in its attributes);
on a local destination a segment takes its name by one rename, as a writer's does.
A killed sync leaves committed segments and at most one uncommitted one, which the
next run copies again (objects are written whole or not at all; the same name always
holds the same bytes, as segments are named by the hash of their keys and features are
a function of their input alone). So a sync is resumable by running it again.

Credentials and endpoints come from the usual places of the storage's own library
(AWS_* environment variables and ~/.aws for s3fs, gcloud's for gcsfs; fsspec's
FSSPEC_<PROTOCOL>_* variables), never from flowclip's flags, and are never logged.
HDF5 stores stay local: a URL on either side of an HDF5 store is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time

from ..errors import SegmentDamaged, StoreError
from .backends import BACKENDS, ZarrBackend, fsync_dir, fsync_tree
from .creation import place_store_json
from .layout import COMMITS, RECORD_FOLDERS, RECORD_NAME, parse_store_json
from .location import Location, locate


def _meta(loc: Location) -> tuple[bytes, dict] | None:
    """store.json's bytes and contents, checked as every store's (layout.parse_store_json)."""
    raw = loc.read("store.json")
    return None if raw is None else (raw, parse_store_json(raw, loc.text))


def _destination(src_meta: dict, dst: Location, src_raw: bytes) -> None:
    """A destination store of the same encoder and backend, or a new one (SRC's store.json)
    where nothing else is (creation.place_store_json, as every new store)."""
    if _meta(dst) is None:
        place_store_json(dst.root if dst.local else dst.text, src_raw, None)
    found = _meta(dst)  # ours, or a peer's made meanwhile
    meta = found[1] if found else {}
    if meta.get("fingerprint") != src_meta["fingerprint"] or meta.get("backend") != src_meta["backend"]:
        raise StoreError(
            f"{dst.text} holds a store of another encoder configuration or backend "
            f"({meta.get('backend')}, fingerprint {str(meta.get('fingerprint'))[:12]}); sync into a new place"
        )


def _committed(src: Location, manifests: tuple[str, ...] = (), image_root: str | None = None) -> dict[str, str]:
    """The source's committed segments, name -> path inside the source: every segment
    the store reads, checked as it opens (a damaged source is refused). At a URL those
    are the segments commit records name, wherever their writer put them. With
    manifests, only the segments their rows are read from (an image or caption they
    name that the store lacks is refused, naming the extract command)."""
    from .core import FeatureStore

    store = FeatureStore(src.root if src.local else src.text, cache=False)
    names = {s.name: src.rel(s.path) for s in store.segments}
    if not manifests:
        return names
    from ..hashing import caption_key
    from ..manifest import Manifest
    from .layout import CAPTION, IMAGE
    from .manifest_keys import manifest_keys

    needed: set[int] = set()
    for path in manifests:
        m = Manifest.read(path)
        texts = sorted({c.text for c in m.caption_refs()})
        for kind, ks in ((IMAGE, sorted(set(manifest_keys(store, m, texts, image_root)))),
                         (CAPTION, [caption_key(t) for t in texts])):  # fmt: skip
            if ks:
                needed |= set(store._locate(kind, ks)[0].tolist())
    return {store.segments[i].name: names[store.segments[i].name] for i in sorted(needed)}


def _done(dst: Location, name: str) -> bool:
    return dst.exists(f"{COMMITS}/{name}.json") and (not dst.local or dst.exists(f"segments/{name}"))


def _check_copy(loc: Location, backend: str, name: str, path: str) -> dict:
    """Every array of the copied segment read back from where it now is and matched
    against the CRC-32 in its attributes; returns the attributes."""
    be = BACKENDS[backend] if loc.local else ZarrBackend(loc.fs)
    attrs = be.attrs(path)
    crc = attrs.get("crc32")
    if not isinstance(crc, dict) or not crc:
        raise SegmentDamaged(path, "its attributes hold no crc32")
    for array, want in sorted(crc.items()):
        if backend == "zarr":
            got = be.stream_crc(path, array)  # type: ignore[union-attr]
        else:
            import numpy as np

            shape, dtype = be.shape(path, array)
            got = be.read_into(path, array, np.empty(shape, dtype))
        if got != want:
            raise SegmentDamaged(path, f"{array} fails its CRC-32 after the copy (the source's bytes are damaged)")
    return attrs


def _copy_segment(src: Location, dst: Location, backend: str, name: str, at: str) -> int:
    """One segment's files (at `at` in the source), checked at the destination under
    segments/<name>, then its commit record. Returns bytes copied."""
    suffixes = [f[len(at) :] for f in src.files(at)]  # each file's path inside the segment
    if not suffixes:
        raise StoreError(f"{src.text}: segment {name} has a commit record but no files")
    copied = 0
    if dst.local:  # into this sync's own temporary folder, checked, then renamed into place
        from .core import _commit

        assert dst.scratch is not None
        tmp = os.path.join(dst.scratch, name)
        for suffix in suffixes:
            target = tmp + suffix.replace("/", os.sep)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with src.fs.open(src.path(at + suffix), "rb") as r, open(target, "wb") as w:
                shutil.copyfileobj(r, w, 16 << 20)  # streamed: an HDF5 segment is one large file
                copied += w.tell()
        fsync_tree(tmp)  # durable before it gets its name, as a writer's segment
        attrs = _check_copy(dst, backend, name, tmp)
        if not _commit(tmp, dst.path("segments", name)):
            BACKENDS[backend].remove(tmp)  # the same keys committed meanwhile: the same bytes
        fsync_dir(dst.path("segments"))
    else:
        for suffix in suffixes:
            data = src.fs.cat_file(src.path(at + suffix))
            dst.fs.pipe_file(dst.path(f"segments/{name}{suffix}"), data)
            copied += len(data)
        attrs = _check_copy(dst, backend, name, dst.path("segments", name))
    # the record without `at`: the copy is at segments/<name>, as on a disk
    record = json.dumps({"segment": name, "kind": attrs.get("kind"), "rows": attrs.get("rows")}).encode()
    dst.write(f"{COMMITS}/{name}.json", record)
    return copied


def _copy_records(src: Location, dst: Location) -> int:
    """Record files the destination lacks, each checked against the checksum in its name."""
    n = 0
    for folder in RECORD_FOLDERS:
        have = set(dst.listdir(folder))
        for name in src.listdir(folder):
            m = RECORD_NAME.match(name)
            if name in have or not m:
                continue
            raw = src.read(f"{folder}/{name}") or b""
            if hashlib.sha256(raw).hexdigest()[:16] != m.group(3):
                raise SegmentDamaged(src.path(folder, name), "fails its checksum (the bytes changed since written)")
            dst.write(f"{folder}/{name}", raw)
            n += 1
    return n


def sync(
    src_text: str, dst_text: str, log=print, manifests: tuple[str, ...] = (), image_root: str | None = None
) -> dict:
    """Copy what DST lacks of SRC's committed store; returns the counts. (A storage
    library's error, a missing bucket say, is the command line's one line: cli.py.)"""
    t0 = time.perf_counter()
    src, dst = locate(src_text), locate(dst_text)
    found = _meta(src)
    if found is None:
        raise StoreError(f"{src.text}: not a flowclip store (no store.json)")
    raw, meta = found
    backend = meta["backend"]
    if backend == "hdf5" and not (src.local and dst.local):
        raise StoreError(
            f"{src.text} is an HDF5 store: HDF5 stores stay on a local disk (HDF5 reads files by byte "
            f"offset, which object storage does not serve); extract a Zarr store (--backend zarr) to sync it"
        )
    _destination(meta, dst, raw)
    store = None
    if dst.local:
        from .core import FeatureStore

        store = FeatureStore(dst.root)  # its writer folder: locked, swept by the next writer if we die
        dst.scratch = store.writer_dir()
    copied = 0
    try:
        records = _copy_records(src, dst)
        names = _committed(src, manifests, image_root)
        todo = [n for n in names if not _done(dst, n)]
        log(f"sync {src.text} -> {dst.text}: {len(todo)} of {len(names)} segments to copy, {records} records copied")
        for i, name in enumerate(todo, 1):
            copied += _copy_segment(src, dst, backend, name, names[name])
            log(f"  [{i}/{len(todo)}] {name}: {copied / 2**20:.1f} MiB so far")
    finally:
        if store is not None:
            store.release_writer()
    seconds = time.perf_counter() - t0
    there = len(names) - len(todo)
    log(f"copied {len(todo)} segments ({copied / 2**20:.1f} MiB) in {seconds:.1f} s; {there} were there")
    return {"segments": len(todo), "skipped": len(names) - len(todo), "records": records, "bytes": copied}
