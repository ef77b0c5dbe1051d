"""The store's names and shapes: format constants, segment and record names, the
feature dataclasses, the key index, and store.json's reader (docs/store-format.md)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import numpy as np

from ..errors import StoreDamaged, StoreError
from ..hashing import KEY_BYTES, as_fixed, fingerprint_of
from .backends import BACKENDS

FORMAT_NAME = "flowclip-feature-store"
FORMAT_VERSION = 2
IMAGE, CAPTION = "img", "cap"
ARRAYS = {
    IMAGE: ("keys", "global", "patches"),
    CAPTION: ("keys", "token_keys", "global", "tokens", "offsets", "truncated"),
}
# a segment holding global features only (extract --features global) is named KIND-g-HASH:
# the same keys may also be held, with every array, by KIND-HASH
GLOBAL_ARRAYS = {IMAGE: ("keys", "global"), CAPTION: ("keys", "global")}
SEGMENT_NAME = re.compile(r"^(?P<kind>img|cap)-(?P<g>g-)?(?P<hash>[0-9a-f]{24})(?P<suffix>\.zarr|\.h5)\Z")
RECORD_NAME = re.compile(r"^(\d{20})-([0-9a-f]{12})-([0-9a-f]{16})\.parquet\Z")
RECORD_FOLDERS = ("paths", "hashes", "failures")
COMMITS = "commits"  # commits/<segment>.json: the segment was committed; its absence is damage
STORE_ENTRIES = ("store.json", "segments", COMMITS, *RECORD_FOLDERS, "quarantine")  # what a store's top level holds
READ_THREADS = min(4, os.cpu_count() or 1)  # segments read (and checksummed) at once


class GlobalOnly(StoreError):
    """Rows stored with their global features alone, asked for patches or tokens."""

    def __init__(self, root: str, kind: str, n: int):
        what = "images" if kind == IMAGE else "captions"
        part = "patch" if kind == IMAGE else "token"
        super().__init__(
            f"{root}: {n} {what} have only global features (extracted with --features global), and a scorer or "
            f"head here needs their {part} features: add them with `flowclip extract --store {root} --features all` "
            f"with the store's --model and --pretrained (`flowclip store info {root}` names them) and the same "
            "manifests (it encodes those rows again; what is stored stays)"
        )


class MissingFeatures(StoreError):
    def __init__(self, kind: str, missing: list[str]):
        self.kind, self.missing = kind, missing
        what = "images" if kind == IMAGE else "captions"
        super().__init__(f"{len(missing)} {what} are not in the store (first: {', '.join(missing[:3])})")


@dataclass
class Segment:
    kind: str
    name: str
    path: str
    rows: int
    crc: dict  # array name -> CRC-32 of its bytes, recorded at commit
    features: str = "all"  # "global": keys and global features only (GLOBAL_ARRAYS)

    def arrays(self) -> tuple[str, ...]:
        return (GLOBAL_ARRAYS if self.features == "global" else ARRAYS)[self.kind]


@dataclass
class ImageFeatures:
    global_: np.ndarray  # [n, d] float16
    patches: np.ndarray  # [n, P, d] float16


@dataclass
class CaptionFeatures:
    global_: np.ndarray  # [m, d] float16
    tokens: np.ndarray  # [T, d] float16, valid tokens only
    offsets: np.ndarray  # [m+1] int64; caption i owns tokens[offsets[i]:offsets[i+1]]
    truncated: np.ndarray  # [m] bool


class KeyIndex:
    """Sorted keys -> (segment, row), searchable in bulk with numpy. Equal keys keep
    segment order (stable sort), so a key held twice resolves to its first segment."""

    def __init__(self):
        self.keys = np.zeros(0, dtype=f"V{KEY_BYTES}")
        self.seg = np.zeros(0, dtype=np.int32)
        self.row = np.zeros(0, dtype=np.int64)

    def build(self, parts: list[tuple[int, np.ndarray]]) -> None:
        if not parts:
            empty = KeyIndex()
            self.keys, self.seg, self.row = empty.keys, empty.seg, empty.row
            return
        keys = np.concatenate([as_fixed(k) for _, k in parts])
        seg = np.concatenate([np.full(len(k), s, np.int32) for s, k in parts])
        row = np.concatenate([np.arange(len(k), dtype=np.int64) for _, k in parts])
        order = np.argsort(keys, kind="stable")
        self.keys, self.seg, self.row = keys[order], seg[order], row[order]

    def find(self, fixed: np.ndarray) -> np.ndarray:
        """Positions into the sorted arrays (the first of equal keys), -1 where absent."""
        if len(self.keys) == 0:
            return np.full(len(fixed), -1, np.int64)
        pos = np.searchsorted(self.keys, fixed)
        pos_c = np.minimum(pos, len(self.keys) - 1)
        hit = self.keys[pos_c] == fixed
        return np.where(hit, pos_c, -1)

    def duplicates(self) -> int:
        """How many stored rows repeat a key already held by an earlier segment."""
        return int((self.keys[1:] == self.keys[:-1]).sum()) if len(self.keys) > 1 else 0


def describe_encoder(encoder: dict) -> str:
    """An encoder configuration in a few words a person recognises: its model and weights
    ("ViT-B-32, weights open_clip:openai", "flowclip-tiny-clip, random weights (seed 3)")."""
    w: dict = encoder["weights"] if isinstance(encoder.get("weights"), dict) else {}
    if w.get("source") == "random-init":
        weights = f"random weights (seed {w.get('init_seed')})"
    else:
        sha = f", sha256 {str(w['sha256'])[:12]}" if w.get("sha256") else ""
        weights = f"weights {w.get('source', '?')}{sha}"
    extra = [f"{k} {encoder[k]}" for k in ("token_mask",) if encoder.get(k) not in (None, "nonpad")]
    return ", ".join([str(encoder.get("model", "?")), weights, *extra])


def read_store_json(root: str) -> dict:
    """store.json, checked; StoreError naming the fault."""
    meta_path = os.path.join(root, "store.json")
    if not os.path.isfile(meta_path):
        raise StoreError(
            f"{root}: not a flowclip store (no store.json); create one with `flowclip extract --store {root} ...`"
        )
    try:
        with open(meta_path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise StoreDamaged(root, [f"store.json is not readable JSON ({e})"]) from None
    return parse_store_json(raw, root)


def parse_store_json(raw: bytes, root: str) -> dict:
    """store.json's bytes (a local store's or one at a URL, `root` naming it), checked."""
    try:
        meta = json.loads(raw)
    except ValueError as e:
        raise StoreDamaged(root, [f"store.json is not readable JSON ({e})"]) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise StoreError(f"{root}/store.json: not a flowclip store file")
    version = meta.get("version")
    if not isinstance(version, int):
        raise StoreDamaged(root, [f"store.json: version {version!r} is not an integer"])
    if version > FORMAT_VERSION:
        raise StoreError(
            f"{root}: store format {version} is newer than this flowclip reads ({FORMAT_VERSION}); upgrade flowclip"
        )
    if version < FORMAT_VERSION:
        raise StoreError(
            f"{root}: store format {version} (this flowclip reads {FORMAT_VERSION}, which checksums "
            f"every array); run `flowclip store upgrade {root}` once"
        )
    problems = []
    for k, typ in (("backend", str), ("encoder", dict), ("fingerprint", str), ("dim", int), ("num_patches", int)):
        if not isinstance(meta.get(k), typ):
            problems.append(f"store.json: {k!r} is missing or not {typ.__name__}")
    if not problems and meta["backend"] not in BACKENDS:
        problems.append(f"store.json: unknown backend {meta['backend']!r}")
    if not problems and fingerprint_of(meta["encoder"]) != meta["fingerprint"]:
        problems.append("store.json: the fingerprint does not match the encoder configuration it records")
    if problems:
        raise StoreDamaged(root, problems)
    return meta
