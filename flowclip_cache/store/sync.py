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
import uuid
from dataclasses import dataclass
from typing import Any

from ..errors import SegmentDamaged, StoreError
from .backends import BACKENDS, ZarrBackend, fsync_dir, fsync_tree
from .layout import COMMITS, RECORD_FOLDERS, RECORD_NAME, SEGMENT_NAME, parse_store_json


def is_url(where: str) -> bool:
    return "://" in where and not where.startswith("file://")


@dataclass
class Location:
    """A store's place: a local folder or an fsspec URL, with the few operations sync needs."""

    text: str  # as the user wrote it (for messages)
    fs: Any  # an fsspec filesystem
    root: str  # the store's path inside fs
    local: bool
    scratch: str | None = None  # local: this sync's locked writer folder, where temporaries go

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts]) if not self.local else os.path.join(self.root, *parts)

    def read(self, rel: str) -> bytes | None:
        try:
            return self.fs.cat_file(self.path(rel))
        except FileNotFoundError:
            return None

    def listdir(self, rel: str) -> list[str]:
        try:
            entries = self.fs.ls(self.path(rel), detail=False)
        except FileNotFoundError:
            return []
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def files(self, rel: str) -> list[str]:
        """Every file under rel (a folder, or rel itself when it is a file), relative to the root."""
        base = self.path(rel)
        if self.fs.isfile(base):
            return [rel]
        return sorted(rel + p[len(base) :].replace(os.sep, "/") for p in self.fs.find(base))

    def write(self, rel: str, data: bytes) -> None:
        """The file whole or absent: an object store writes an object whole or not at all;
        locally a temporary in the locked writer folder (swept if we die; before the store
        exists, a dot-file that no reader lists) is renamed into place."""
        if not self.local:
            self.fs.pipe_file(self.path(rel), data)
            return
        final = self.path(rel)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        hidden = f".{os.path.basename(final)}.{uuid.uuid4().hex}"
        tmp = os.path.join(self.scratch, hidden) if self.scratch else os.path.join(os.path.dirname(final), hidden)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        fsync_dir(os.path.dirname(final))

    def exists(self, rel: str) -> bool:
        return bool(self.fs.exists(self.path(rel)))


def locate(where: str) -> Location:
    if not is_url(where):
        from fsspec.implementations.local import LocalFileSystem

        path = where[len("file://") :] if where.startswith("file://") else where
        return Location(where, LocalFileSystem(), os.path.abspath(path), True)
    try:
        from fsspec.core import url_to_fs

        fs, root = url_to_fs(where)
    except ImportError as e:  # s3fs, gcsfs: the optional extra
        raise StoreError(f"{where}: {e}; install the cloud extra: pip install 'flowclip[cloud]'") from None
    except ValueError as e:
        raise StoreError(f"{where}: not a storage URL fsspec knows ({e})") from None
    return Location(where, fs, root, False)


def _meta(loc: Location) -> tuple[bytes, dict] | None:
    """store.json's bytes and contents, checked as every store's (layout.parse_store_json)."""
    raw = loc.read("store.json")
    return None if raw is None else (raw, parse_store_json(raw, loc.text))


def _destination(src_meta: dict, dst: Location, src_raw: bytes) -> None:
    """A destination store of the same encoder and backend, or a new one in an empty place."""
    found = _meta(dst)
    if found is not None:
        meta = found[1]
        if meta.get("fingerprint") != src_meta["fingerprint"] or meta.get("backend") != src_meta["backend"]:
            raise StoreError(
                f"{dst.text} holds a store of another encoder configuration or backend "
                f"({meta.get('backend')}, fingerprint {str(meta.get('fingerprint'))[:12]}); sync into a new place"
            )
        return
    if dst.local:
        from .core import _check_new_store_place

        _check_new_store_place(dst.root, None)
        for d in ("segments", COMMITS, *RECORD_FOLDERS):
            os.makedirs(dst.path(d), exist_ok=True)
    elif dst.listdir(""):
        raise StoreError(f"{dst.text} holds other objects, not a store; sync into an empty prefix")
    dst.write("store.json", src_raw)


def _committed(src: Location, backend: str) -> list[str]:
    """The source's committed segments: on a local disk every segment the store reads
    (checked as it opens: a damaged source is refused); at a URL, those with a commit record."""
    if src.local:
        from .core import FeatureStore

        return [s.name for s in FeatureStore(src.root).segments]
    suffix = BACKENDS[backend].suffix
    names = [n[: -len(".json")] for n in src.listdir(COMMITS) if n.endswith(".json")]
    return [n for n in names if (m := SEGMENT_NAME.match(n)) and m["suffix"] == suffix]


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


def _copy_segment(src: Location, dst: Location, backend: str, name: str) -> int:
    """One segment's files, checked at the destination, then its commit record. Returns bytes copied."""
    files = src.files(f"segments/{name}")
    if not files:
        raise StoreError(f"{src.text}: segment {name} has a commit record but no files")
    copied = 0
    if dst.local:  # into this sync's own temporary folder, checked, then renamed into place
        from .core import _commit

        assert dst.scratch is not None
        for rel in files:
            target = os.path.join(dst.scratch, *rel.split("/")[1:])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with src.fs.open(src.path(rel), "rb") as r, open(target, "wb") as w:
                shutil.copyfileobj(r, w, 16 << 20)  # streamed: an HDF5 segment is one large file
                copied += w.tell()
        tmp = os.path.join(dst.scratch, name)
        fsync_tree(tmp)  # durable before it gets its name, as a writer's segment
        attrs = _check_copy(dst, backend, name, tmp)
        if not _commit(tmp, dst.path("segments", name)):
            BACKENDS[backend].remove(tmp)  # the same keys committed meanwhile: the same bytes
        fsync_dir(dst.path("segments"))
    else:
        for rel in files:
            data = src.fs.cat_file(src.path(rel))
            dst.fs.pipe_file(dst.path(rel), data)
            copied += len(data)
        attrs = _check_copy(dst, backend, name, dst.path("segments", name))
    record = (
        src.read(f"{COMMITS}/{name}.json")
        or json.dumps({"segment": name, "kind": attrs.get("kind"), "rows": attrs.get("rows")}).encode()
    )
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


def _storage_errors() -> tuple[type[BaseException], ...]:
    """What the storage libraries raise for a missing bucket, refused credentials or an
    unreachable endpoint, beside OSError: botocore's (s3fs) and gcsfs's HTTP errors."""
    out: list[type[BaseException]] = [OSError]
    try:
        from botocore.exceptions import BotoCoreError, ClientError

        out += [BotoCoreError, ClientError]
    except ImportError:
        pass
    try:
        from gcsfs.retry import HttpError

        out.append(HttpError)
    except ImportError:
        pass
    return tuple(out)


def sync(src_text: str, dst_text: str, log=print) -> dict:
    """Copy what DST lacks of SRC's committed store; returns the counts. A storage error
    (no such bucket, refused credentials, no endpoint) is one StoreError line."""
    try:
        return _sync(src_text, dst_text, log)
    except StoreError:
        raise
    except _storage_errors() as e:
        if isinstance(e, OSError) and e.errno is not None and not (is_url(src_text) or is_url(dst_text)):
            raise  # a local disk's error (full, read-only): the command line names its fix
        raise StoreError(
            f"sync {src_text} -> {dst_text}: {type(e).__name__}: {e} (check the URL, that the bucket exists, "
            f"and the storage's credentials and endpoint in its usual environment)"
        ) from None


def _sync(src_text: str, dst_text: str, log) -> dict:
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
        names = _committed(src, backend)
        todo = [n for n in names if not _done(dst, n)]
        log(f"sync {src.text} -> {dst.text}: {len(todo)} of {len(names)} segments to copy, {records} records copied")
        for i, name in enumerate(todo, 1):
            copied += _copy_segment(src, dst, backend, name)
            log(f"  [{i}/{len(todo)}] {name}: {copied / 2**20:.1f} MiB so far")
    finally:
        if store is not None:
            store.release_writer()
    seconds = time.perf_counter() - t0
    there = len(names) - len(todo)
    log(f"copied {len(todo)} segments ({copied / 2**20:.1f} MiB) in {seconds:.1f} s; {there} were there")
    return {"segments": len(todo), "skipped": len(names) - len(todo), "records": records, "bytes": copied}
