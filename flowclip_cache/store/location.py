"""Where a store lives: a local folder, or an fsspec URL (s3://, gs://, memory:// in tests).

A Location gives the few operations on the store's layout that differ between the two:
listing a folder, reading and writing a small file whole, creating one only if absent.
Big arrays are read by the backends (backends.py), through a chunk cache at a URL
(cache.py). Credentials and endpoints come from the storage library's usual places
(AWS_* variables and ~/.aws for s3fs, gcloud's for gcsfs; fsspec's FSSPEC_<PROTOCOL>_*
variables), never from flowclip's flags, and are never printed.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any

from ..errors import StoreError
from ..shards import is_url  # noqa: F401  (one rule for what a URL is: stores and image sources)
from .backends import fsync_dir


@dataclass
class Location:
    text: str  # as the user wrote it (for messages)
    fs: Any  # an fsspec filesystem
    root: str  # the store's path inside fs
    local: bool
    scratch: str | None = None  # local: a locked writer folder, where temporaries go

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts]) if not self.local else os.path.join(self.root, *parts)

    def rel(self, path: str) -> str:
        """A path inside the store, relative to its root (for messages)."""
        if self.local:
            return os.path.relpath(path, self.root)
        base = self.root.rstrip("/") + "/"
        return path[len(base) :] if path.startswith(base) else path

    def read(self, rel: str) -> bytes | None:
        try:
            return self.fs.cat_file(self.path(rel))
        except FileNotFoundError:
            return None

    def listdir(self, rel: str) -> list[str]:
        if self.local:  # (no stat per entry: a store's record folders hold thousands of files)
            path = self.path(rel)
            return sorted(os.listdir(path)) if os.path.isdir(path) else []
        return sorted(self.details(rel))

    def details(self, rel: str) -> dict[str, dict]:
        """name -> the listing's entry (size; at a URL also ETag and LastModified), read
        fresh: a listing cache would hide what other writers committed since."""
        if not self.local:
            self.fs.invalidate_cache(self.path(rel))
        try:
            entries = self.fs.ls(self.path(rel), detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        return {e["name"].rstrip("/").rsplit("/", 1)[-1]: e for e in entries}

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

    def create(self, rel: str, data: bytes) -> bool:
        """Write rel only if no object holds that name (S3's and GCS's conditional write,
        If-None-Match); False when one does. A service without conditional writes gets
        a look then a write: two writers racing there both succeed, the last one's object
        standing, whole (docs/store-format.md, "Writers at a URL")."""
        assert not self.local
        try:
            self.fs.pipe_file(self.path(rel), data, mode="create")
            return True
        except FileExistsError:
            return False
        except (TypeError, NotImplementedError):  # an fsspec filesystem without mode="create"
            if self.exists(rel):
                return False
            self.fs.pipe_file(self.path(rel), data)
            return True

    def exists(self, rel: str) -> bool:
        return bool(self.fs.exists(self.path(rel)))

    def remove(self, rel: str) -> None:
        """A file, or every object under a folder; absent already is fine."""
        try:
            self.fs.rm(self.path(rel), recursive=True)
        except FileNotFoundError:
            pass


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
    return Location(where.rstrip("/"), fs, root.rstrip("/"), False)
