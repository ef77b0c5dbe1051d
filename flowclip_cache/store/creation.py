"""Making a new store: its store.json, on a disk or at a URL, once, whoever else races
to make the same store (docs/store-format.md)."""

from __future__ import annotations

import json
import os
import uuid

from ..errors import StoreError
from ..hashing import fingerprint_of
from .backends import BACKENDS, fsync_dir
from .layout import COMMITS, FORMAT_NAME, FORMAT_VERSION, RECORD_FOLDERS, STORE_ENTRIES, parse_store_json
from .location import is_url, locate


def create_store_json(root: str, config: dict, backend: str, owner: str | None) -> str:
    """store.json for this encoder config where none is; returns the root to open."""
    if backend not in BACKENDS:
        raise StoreError(f"unknown backend {backend!r}; use one of {sorted(BACKENDS)}")
    if is_url(root) and backend != "zarr":
        raise StoreError(f"{root}: {HDF5_AT_URL}")
    meta = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "backend": backend,
        "fingerprint": fingerprint_of(config),
        "encoder": config,
        "dim": config["model_cfg"]["embed_dim"],
        "num_patches": config["num_patches"],
    }
    return place_store_json(root, json.dumps(meta, indent=1, sort_keys=True).encode(), owner)


def place_store_json(root: str, raw: bytes, owner: str | None) -> str:
    """A new store's store.json (these bytes) where none is, on a disk or at a URL, once:
    a peer making the same store meanwhile wins (the caller then checks its fingerprint).
    A place holding anything but a store's own entries is refused. Returns the root to open."""
    if is_url(root):
        loc = locate(root)
        if not loc.exists("store.json"):
            _refuse_others(root, loc.listdir(""), "objects", "an empty prefix")
            loc.create("store.json", raw)  # only if absent: a peer's stands
        return root
    root = os.path.abspath(root)
    meta_path = os.path.join(root, "store.json")
    if not os.path.exists(meta_path):
        _check_new_store_place(root, owner)
        for d in ("segments", COMMITS) + RECORD_FOLDERS:
            os.makedirs(os.path.join(root, d), exist_ok=True)
        tmp = os.path.join(root, f".store.json.{uuid.uuid4().hex}")
        with open(tmp, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, meta_path)  # fails if another process created it first
            fsync_dir(root)
        except FileExistsError:
            pass
        finally:
            os.remove(tmp)
    return root


def _refuse_others(root: str, names: list[str], what: str, instead: str) -> None:
    """A new store goes only where nothing but a store's own entries is (store.json among
    them: a peer's, made since our look)."""
    other = sorted(n for n in names if n not in STORE_ENTRIES and not n.startswith(".store.json."))
    if other:
        raise StoreError(f"{root} holds other {what} ({', '.join(other[:5])}), not a store; use {instead}")


HDF5_AT_URL = (
    "HDF5 stores stay on a local disk (HDF5 reads files by byte offset, which object storage does not "
    "serve); use --backend zarr for a store at a URL"
)


def _url_store_json(loc) -> dict:
    raw = loc.read("store.json")
    if raw is None:
        raise StoreError(
            f"{loc.text}: not a flowclip store (no store.json); create one with `flowclip extract --store ...`"
        )
    meta = parse_store_json(raw, loc.text)
    if meta["backend"] != "zarr":
        raise StoreError(f"{loc.text}: {HDF5_AT_URL}")
    return meta


def _check_new_store_place(root: str, owner: str | None) -> None:
    from ..outputs import KINDS, kind_of, output_at_or_above

    out = output_at_or_above(root)
    if out is not None and (owner is None or os.path.realpath(out) != os.path.realpath(owner)):
        what = KINDS.get(kind_of(out) or "", "a command's output")
        raise StoreError(
            f"{root}: a new store would go inside {out}, {what}; stores never live "
            f"inside a command's output (an --overwrite there would delete it). Choose another --store"
        )
    if os.path.isdir(root):
        _refuse_others(root, os.listdir(root), "files", "an empty or new folder")
