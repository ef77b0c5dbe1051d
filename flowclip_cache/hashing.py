"""Content keys. An image key is the sha256 of the file's bytes (plus the crop box,
when a record crops a region: the crop is part of what is encoded); a caption key is
the sha256 of its exact UTF-8 text. Keys travel as 64-char hex strings and are stored
as raw 32-byte digests."""

from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Iterable, Sequence

import numpy as np

KEY_BYTES = 32
_CHUNK = 1 << 20


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(_CHUNK)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def unchanged_file_sha256(path: str) -> str:
    """file_sha256, computed once per version of the file (its size and mtime): a study
    asks for its training manifest's hash for every run it names."""
    st = os.stat(path)
    return _versioned_sha256(os.path.abspath(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _versioned_sha256(path: str, size: int, mtime_ns: int) -> str:
    return file_sha256(path)


def image_key(file_digest: str, crop: Sequence[float] | None = None) -> str:
    """Key of an image as encoded: the file digest, or a digest of (file digest, crop)."""
    if crop is None:
        return file_digest
    box = ",".join(repr(float(c)) for c in crop)
    return hashlib.sha256(f"crop:{file_digest}:{box}".encode()).hexdigest()


def caption_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def keys_to_bytes(keys: Iterable[str]) -> np.ndarray:
    """Hex keys -> uint8 [n, 32] (the on-disk form)."""
    keys = list(keys)
    if not keys:
        return np.zeros((0, KEY_BYTES), dtype=np.uint8)
    raw = b"".join(bytes.fromhex(k) for k in keys)
    return np.frombuffer(raw, dtype=np.uint8).reshape(len(keys), KEY_BYTES).copy()


def bytes_to_keys(arr: np.ndarray) -> list[str]:
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    return [bytes(row).hex() for row in arr]


def as_fixed(arr: np.ndarray) -> np.ndarray:
    """uint8 [n, 32] -> 'V32' [n], a sortable, searchable fixed-width view."""
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    return arr.view(f"V{KEY_BYTES}").reshape(-1)


def hex_to_fixed(keys: Iterable[str]) -> np.ndarray:
    return as_fixed(keys_to_bytes(keys))


def fingerprint_of(config: dict) -> str:
    blob = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def diff_configs(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Dotted names of the fields that differ between two fingerprinted configs."""
    out = []
    for k in sorted(set(a) | set(b)):
        name = f"{prefix}{k}"
        va, vb = a.get(k, "<absent>"), b.get(k, "<absent>")
        if isinstance(va, dict) and isinstance(vb, dict):
            out += diff_configs(va, vb, name + ".")
        elif va != vb:
            out.append(f"{name}: {va!r} != {vb!r}")
    return out
