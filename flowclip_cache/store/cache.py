"""A local chunk cache for stores at a URL: a folder the user names, with a size bound.

Every object of a segment (its zarr.json files and chunk files) is immutable once
written: a writer at a URL writes each segment under a prefix no other writer uses, and
a synced segment's name is the hash of its keys. So an object is fetched once, whole,
into <folder>/objects/<protocol>/<service>/<its path> (<service>: a hash of the
endpoint, or `default`), and read from there by every later read
(a second epoch, a second score, another job on the node), with no request to the
service. The bytes are still checked as everywhere: every array read is matched
against its CRC-32, and a cached copy that fails is dropped and fetched again once
(a damaged cache is never read as data).

The bound: when the cached bytes pass it, the least recently read files are removed
until 90% of it remains (a read touches its file's modification time). Several
processes may share one folder: each fetches into a temporary and renames it into
place, so a reader never sees a partial file; each keeps its own count of the folder's
size, rescanned when it passes the bound.

Configured by FLOWCLIP_CHUNK_CACHE (the folder) and FLOWCLIP_CHUNK_CACHE_SIZE (bytes,
with K, M, G or T; 20G if unset), or FeatureStore(url, cache=ChunkCache(...)).
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from typing import Any

from ..errors import StoreError

ENV_FOLDER, ENV_SIZE = "FLOWCLIP_CHUNK_CACHE", "FLOWCLIP_CHUNK_CACHE_SIZE"
DEFAULT_SIZE = "20G"


def parse_size(text: str) -> int:
    """'20G', '512M', '1.5T' or a number of bytes."""
    t = str(text).strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        n = float(t[:-1] if scale > 1 else t) * scale
    except ValueError:
        raise StoreError(f"{ENV_SIZE}={text!r}: not a size (write e.g. 20G, 512M or a number of bytes)") from None
    if n <= 0:
        raise StoreError(f"{ENV_SIZE}={text!r}: the bound must be above 0")
    return int(n)


class ChunkCache:
    def __init__(self, folder: str, max_bytes: int, fs=None):
        self.folder = os.path.abspath(folder)
        self.max_bytes = int(max_bytes)
        self.fs: Any = None  # the fsspec filesystem (bind)
        self._objects = ""
        if fs is not None:
            self.bind(fs)
        self.fetched = 0  # bytes fetched from the service by this process (benchmarks, progress)
        self.hits = 0
        self._lock = threading.Lock()
        self._size: int | None = None

    @classmethod
    def from_environment(cls, url: str) -> "ChunkCache":
        folder = os.environ.get(ENV_FOLDER)
        if not folder:
            raise StoreError(
                f"{url}: a store at a URL is read through a local chunk cache: set {ENV_FOLDER} to a local folder "
                f"(and {ENV_SIZE}, default {DEFAULT_SIZE}); or copy the store to a disk with `flowclip store sync`"
            )
        return cls(folder, parse_size(os.environ.get(ENV_SIZE) or DEFAULT_SIZE))

    def bind(self, fs) -> "ChunkCache":
        self.fs = fs
        self._objects = os.path.join(self.folder, "objects", _service(fs))  # once: where() is on every read
        return self

    # -- what the backends call (ZarrBackend's `fs`) ---------------------------------------
    def open(self, path: str, mode: str = "rb"):
        assert mode == "rb"
        return open(self.local(path), "rb")

    def ls(self, path: str, detail: bool = False):
        return self.fs.ls(path, detail=detail)

    def isfile(self, path: str) -> bool:
        return self.fs.isfile(path)

    # -- the cache -------------------------------------------------------------------------
    def where(self, path: str) -> str:
        parts = [p for p in path.strip("/").split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise StoreError(f"{path}: an object name with '.' or '..' parts is not cached")
        return os.path.join(self._objects, *parts)

    def local(self, path: str, version: str = "") -> str:
        """The cached file of an object, fetched whole first if absent (FileNotFoundError
        when the object does not exist). `version` (a listing's ETag) keys an object whose
        bytes may change under the same name."""
        target = self.where(path) + (f"@{version}" if version else "")
        try:
            os.utime(target)  # a read: most recently used
            self.hits += 1
            return target
        except FileNotFoundError:
            pass
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = os.path.join(self.folder, "tmp", f"{uuid.uuid4().hex}")
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        try:
            self.fs.get_file(path, tmp)
            size = os.path.getsize(tmp)
            os.replace(tmp, target)  # whole or absent, for every process sharing the folder
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        with self._lock:
            self.fetched += size
            if self._size is None:  # this process's first fetch: count the folder, sweep dead fetches
                self._sweep_temporaries()
            self._size = (self._size if self._size is not None else self._scan()) + size
            if self._size > self.max_bytes:
                self._evict(keep=target)
        return target

    def forget(self, prefix: str) -> None:
        """Drop every cached file under an object prefix (a segment whose cached bytes
        failed their checksum is fetched again)."""
        import shutil

        shutil.rmtree(self.where(prefix), ignore_errors=True)
        with self._lock:
            self._size = None

    def _sweep_temporaries(self, older_than_s: float = 3600) -> None:
        """Fetch temporaries a killed process left (a live fetch's is seconds old)."""
        import time

        tmp = os.path.join(self.folder, "tmp")
        for name in os.listdir(tmp) if os.path.isdir(tmp) else []:
            try:
                if time.time() - os.stat(os.path.join(tmp, name)).st_mtime > older_than_s:
                    os.remove(os.path.join(tmp, name))
            except FileNotFoundError:
                pass

    def _files(self) -> list[tuple[float, int, str]]:
        out = []
        for dirpath, _, files in os.walk(os.path.join(self.folder, "objects")):
            for f in files:
                p = os.path.join(dirpath, f)
                try:
                    st = os.stat(p)
                except FileNotFoundError:
                    continue  # another process evicted it
                out.append((st.st_mtime, st.st_size, p))
        return out

    def _scan(self) -> int:
        return sum(s for _, s, _ in self._files())

    def _evict(self, keep: str) -> None:
        """Least recently read first, down to 90% of the bound (never the file just fetched)."""
        files = sorted(self._files())
        total = sum(s for _, s, _ in files)
        for _, size, p in files:
            if total <= 0.9 * self.max_bytes:
                break
            if p == keep:
                continue
            try:
                os.remove(p)
                total -= size
            except FileNotFoundError:
                pass
        self._size = total

    def size(self) -> int:
        return self._scan()


def _service(fs) -> str:
    """<protocol>/<service>: the service a filesystem talks to, as a short hash of its
    endpoint (`default`: the library's own), since two services (AWS and an S3-compatible
    one) may hold the same bucket and key with other bytes."""
    proto = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    url = getattr(fs, "endpoint_url", None) or (getattr(fs, "client_kwargs", None) or {}).get("endpoint_url")
    if not url and proto in ("s3", "s3a"):
        url = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    elif not url and proto in ("gs", "gcs"):
        url = os.environ.get("STORAGE_EMULATOR_HOST")
    return os.path.join(proto, hashlib.sha256(str(url).encode()).hexdigest()[:12] if url else "default")
