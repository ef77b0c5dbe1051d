"""Making a new store: its store.json, on a disk or at a URL, once, whoever else races
to make the same store (docs/store-format.md)."""

from __future__ import annotations

import json
import os
import uuid

from ..errors import StoreError
from ..hashing import fingerprint_of
from .backends import BACKENDS, fsync_dir
from .layout import COMMITS, FORMAT_NAME, FORMAT_VERSION, RECORD_FOLDERS, parse_store_json
from .location import Location, is_url, locate


def create_store_json(root: str, config: dict, backend: str, owner: str | None) -> str:
    """store.json for this encoder config where none is (a peer creating the same store
    meanwhile wins; the caller then checks the fingerprint); returns the root to open."""
    if backend not in BACKENDS:
        raise StoreError(f"unknown backend {backend!r}; use one of {sorted(BACKENDS)}")
    meta = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "backend": backend,
        "fingerprint": fingerprint_of(config),
        "encoder": config,
        "dim": config["model_cfg"]["embed_dim"],
        "num_patches": config["num_patches"],
    }
    if is_url(root):
        if backend != "zarr":
            raise StoreError(f"{root}: {HDF5_AT_URL}")
        create_url_store_json(locate(root), json.dumps(meta, indent=1, sort_keys=True).encode())
        return root
    root = os.path.abspath(root)
    meta_path = os.path.join(root, "store.json")
    if not os.path.exists(meta_path):
        _check_new_store_place(root, owner)
        for d in ("segments", COMMITS) + RECORD_FOLDERS:
            os.makedirs(os.path.join(root, d), exist_ok=True)
        tmp = os.path.join(root, f".store.json.{uuid.uuid4().hex}")
        with open(tmp, "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
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


def create_url_store_json(loc: Location, raw: bytes) -> None:
    """store.json of a new store at a URL, created only if absent. A prefix holding other
    objects is refused."""
    if loc.exists("store.json"):
        return
    # store.json here is a peer's, created since our look: ours is then not written, and
    # the caller checks its fingerprint
    other = [n for n in loc.listdir("") if n not in ("store.json", "segments", COMMITS, "quarantine", *RECORD_FOLDERS)]
    if other:
        raise StoreError(f"{loc.text} holds other objects ({', '.join(other[:5])}), not a store; use an empty prefix")
    loc.create("store.json", raw)


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
        # store.json here is a peer's (another rank creating the same store since our look):
        # our link then finds it, and the store is opened and its fingerprint checked
        own = {"segments", COMMITS, "store.json", *RECORD_FOLDERS}
        other = sorted(n for n in os.listdir(root) if n not in own and not n.startswith(".store.json."))
        if other:
            raise StoreError(
                f"{root} exists and holds other files ({', '.join(other[:5])}), not a store; create a "
                f"store in an empty or new folder"
            )
