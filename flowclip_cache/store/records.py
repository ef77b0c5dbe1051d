"""The store's small record files (paths/, hashes/, failures/): Parquet files named by
time, id and checksum, read in name order, each checked against its name."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import uuid
from typing import Any, Callable

from ..errors import SegmentDamaged
from .backends import fsync_dir
from .layout import RECORD_NAME


class RecordFiles:
    """Mixed into FeatureStore, which provides root, _paths, _damage() and writer_dir()."""

    root: str
    loc: Any  # location.Location
    cache: Any  # chunk cache (a store at a URL) or None
    _paths: dict | None
    _damage: Callable[[], contextlib.AbstractContextManager]
    writer_dir: Callable[[], str]

    def read_records(self, folder: str, columns: tuple[str, ...]):
        """(name, table) of each record file of a folder, in name (= time) order, each
        checked against the checksum in its name."""
        for name in self.loc.listdir(folder):
            if not name.startswith("."):
                with self._damage():
                    yield name, self.read_record(folder, name, columns)

    def read_record(self, folder: str, name: str, columns: tuple[str, ...]):
        """One record file as a pyarrow table; SegmentDamaged if it fails a check."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.loc.path(folder, name)
        m = RECORD_NAME.match(name)
        if not m:
            raise SegmentDamaged(path, "stray file (not <time>-<id>-<checksum>.parquet)")
        # at a URL through the chunk cache: a record's name holds its checksum, so its bytes never change
        with open(path, "rb") if self.loc.local else _remote_open(self, path) as f:
            raw = f.read()
        if hashlib.sha256(raw).hexdigest()[:16] != m.group(3):
            raise SegmentDamaged(path, "fails its checksum (the bytes changed since they were written)")
        try:
            # ParquetFile, not read_table: read_table's dataset path lets an Arrow worker thread
            # drop the last reference to the Python bytes; at interpreter exit that thread then
            # needs the GIL, is killed, and the process aborts (rc 134). Here it stays ours.
            table = pq.ParquetFile(pa.BufferReader(raw)).read(use_threads=False)
        except Exception as e:  # pyarrow raises several kinds for a bad file
            raise SegmentDamaged(path, f"not readable Parquet ({e})") from None
        missing = [c for c in columns if c not in table.column_names]
        if missing:
            raise SegmentDamaged(path, f"lacks columns {missing}")
        return table

    def append_records(self, folder: str, table) -> str:
        """A new record file in folder, durable before it gets its name, named
        <time>-<id>-<sha256 of its bytes>: readers go through them in name order, so a
        later row (a file edited since) wins, and check each against its checksum."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        raw = sink.getvalue().to_pybytes()
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}-{hashlib.sha256(raw).hexdigest()[:16]}.parquet"
        if not self.loc.local:
            self.loc.write(f"{folder}/{name}", raw)  # an object: whole or absent
            return self.loc.path(folder, name)
        d = os.path.join(self.root, folder)
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(self.writer_dir(), name)
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(d, name))
        fsync_dir(d)
        return os.path.join(d, name)

    # -- manifest paths -> image keys ----------------------------------------------------
    # Training and scoring never open images, yet manifests name images by path. Extract
    # records which key each (image root, path, crop) had, in small Parquet files.
    def path_index(self) -> dict[tuple[str, tuple | None], dict[str, str]]:
        """(path, crop) -> {image_root: key}; the latest record wins. Read once and kept
        (scoring maps every manifest through it) until refresh() or add_paths()."""
        if self._paths is None:
            paths: dict = {}
            for _, table in self.read_records("paths", ("image_root", "path", "crop", "key")):
                t = table.to_pydict()
                for root, path, crop, key in zip(t["image_root"], t["path"], t["crop"], t["key"]):
                    paths.setdefault((path, tuple(crop) if crop else None), {})[root] = key
            self._paths = paths
        return self._paths

    def add_paths(self, rows: list[tuple[str, str, tuple | None, str]]) -> None:
        """Record (image_root, path, crop, key) rows not yet indexed."""
        import pyarrow as pa

        known = self.path_index()
        new = [r for r in rows if known.get((r[1], r[2]), {}).get(r[0]) != r[3]]
        if new:
            self._paths = None
            self.append_records(
                "paths",
                pa.table(
                    {
                        "image_root": [r[0] for r in new],
                        "path": [r[1] for r in new],
                        "crop": pa.array([list(r[2]) if r[2] else None for r in new], pa.list_(pa.float64())),
                        "key": [r[3] for r in new],
                    }
                ),
            )

    # -- file digests: an image file is read and hashed once, not on every extract ------
    def file_digests(self) -> dict[str, tuple[tuple[int, int, int], str]]:
        """realpath -> ((size, mtime_ns, inode), sha256 of its bytes) as last hashed."""
        out: dict = {}
        for _, table in self.read_records("hashes", ("path", "size", "mtime_ns", "inode", "sha256")):
            t = table.to_pydict()
            for path, size, mtime, ino, digest in zip(t["path"], t["size"], t["mtime_ns"], t["inode"], t["sha256"]):
                out[path] = ((size, mtime, ino), digest)
        return out

    def add_file_digests(self, rows: list[tuple[str, tuple[int, int, int], str]]) -> None:
        """Record (realpath, (size, mtime_ns, inode), sha256) of files just hashed."""
        import pyarrow as pa

        if rows:
            self.append_records(
                "hashes",
                pa.table(
                    {
                        "path": [r[0] for r in rows],
                        "size": pa.array([r[1][0] for r in rows], pa.int64()),
                        "mtime_ns": pa.array([r[1][1] for r in rows], pa.int64()),
                        "inode": pa.array([r[1][2] for r in rows], pa.uint64()),
                        "sha256": [r[2] for r in rows],
                    }
                ),
            )


def _remote_open(store, path: str):
    return store.cache.open(path) if store.cache is not None else store.loc.fs.open(path, "rb")
