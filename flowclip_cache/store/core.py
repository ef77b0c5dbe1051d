"""The feature store: content-addressed, append-only, one encoder per store.

Layout (docs/store-format.md is the specification):

    <root>/store.json                 format version, backend, encoder config + fingerprint
    <root>/segments/img-<id>.<ext>    image segments: keys, global, patches
    <root>/segments/cap-<id>.<ext>    caption segments: keys, global, tokens, offsets, truncated
    <root>/failures/<run>.parquet     items an extract run could not encode

Segments are immutable and named by the hash of their keys; a writer writes a
temporary and renames it into place, so writers never share a file. Rows are found
through keys stored inside each segment, never by position across files.
"""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass

import numpy as np

from ..encoders import diff_configs, fingerprint_of
from ..errors import FingerprintMismatch, StoreError
from ..hashing import KEY_BYTES, as_fixed, bytes_to_keys, hex_to_fixed, keys_to_bytes
from .backends import BACKENDS, fsync_dir, fsync_tree

FORMAT_NAME = "flowclip-feature-store"
FORMAT_VERSION = 1
IMAGE, CAPTION = "img", "cap"
ARRAYS = {
    IMAGE: ("keys", "global", "patches"),
    CAPTION: ("keys", "global", "tokens", "offsets", "truncated"),
}


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


@dataclass
class ImageFeatures:
    global_: np.ndarray     # [n, d] float16
    patches: np.ndarray     # [n, P, d] float16


@dataclass
class CaptionFeatures:
    global_: np.ndarray     # [m, d] float16
    tokens: np.ndarray      # [T, d] float16, valid tokens only
    offsets: np.ndarray     # [m+1] int64; caption i owns tokens[offsets[i]:offsets[i+1]]
    truncated: np.ndarray   # [m] bool


class _Index:
    """Sorted keys -> (segment, row), searchable in bulk with numpy."""

    def __init__(self):
        self.keys = np.zeros(0, dtype=f"V{KEY_BYTES}")
        self.seg = np.zeros(0, dtype=np.int32)
        self.row = np.zeros(0, dtype=np.int64)

    def build(self, parts: list[tuple[int, np.ndarray]]) -> None:
        if not parts:
            return self.__init__()
        keys = np.concatenate([as_fixed(k) for _, k in parts])
        seg = np.concatenate([np.full(len(k), s, np.int32) for s, k in parts])
        row = np.concatenate([np.arange(len(k), dtype=np.int64) for _, k in parts])
        order = np.argsort(keys, kind="stable")
        self.keys, self.seg, self.row = keys[order], seg[order], row[order]

    def find(self, fixed: np.ndarray) -> np.ndarray:
        """Positions into the sorted arrays, -1 where absent."""
        if len(self.keys) == 0:
            return np.full(len(fixed), -1, np.int64)
        pos = np.searchsorted(self.keys, fixed)
        pos_c = np.minimum(pos, len(self.keys) - 1)
        hit = self.keys[pos_c] == fixed
        return np.where(hit, pos_c, -1)


class FeatureStore:
    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        meta_path = os.path.join(self.root, "store.json")
        if not os.path.isfile(meta_path):
            raise StoreError(f"{self.root}: not a flowclip store (no store.json); create one with "
                             f"`flowclip extract --store {root} ...`")
        with open(meta_path) as f:
            self.meta = json.load(f)
        if self.meta.get("format") != FORMAT_NAME:
            raise StoreError(f"{meta_path}: not a flowclip store file")
        if self.meta["version"] > FORMAT_VERSION:
            raise StoreError(f"{self.root}: store format {self.meta['version']} is newer than this "
                             f"flowclip reads ({FORMAT_VERSION}); upgrade flowclip")
        self.backend = BACKENDS[self.meta["backend"]]
        self.segments: list[Segment] = []
        self._index = {IMAGE: _Index(), CAPTION: _Index()}
        self._paths = None                 # path index, read on first use and kept until refresh()
        self.refresh()

    # -- creation and identity ---------------------------------------------------------
    @classmethod
    def open_or_create(cls, root: str, config: dict, backend: str = "zarr") -> "FeatureStore":
        """Open the store at root, creating it for this encoder config if absent.
        A store of another encoder is refused, naming the fields that differ."""
        if backend not in BACKENDS:
            raise StoreError(f"unknown backend {backend!r}; use one of {sorted(BACKENDS)}")
        root = os.path.abspath(root)
        meta_path = os.path.join(root, "store.json")
        if not os.path.exists(meta_path):
            os.makedirs(os.path.join(root, "segments"), exist_ok=True)
            os.makedirs(os.path.join(root, "failures"), exist_ok=True)
            meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "backend": backend,
                    "fingerprint": fingerprint_of(config), "encoder": config,
                    "dim": config["model_cfg"]["embed_dim"], "num_patches": config["num_patches"]}
            tmp = os.path.join(root, f".store.json.{uuid.uuid4().hex}")
            with open(tmp, "w") as f:
                json.dump(meta, f, indent=1, sort_keys=True)
            try:
                os.link(tmp, meta_path)     # fails if another process created it first
            except FileExistsError:
                pass
            finally:
                os.remove(tmp)
        store = cls(root)
        store.check_fingerprint(config)
        return store

    @property
    def fingerprint(self) -> str:
        return self.meta["fingerprint"]

    @property
    def encoder_config(self) -> dict:
        return self.meta["encoder"]

    def check_fingerprint(self, config: dict) -> None:
        if fingerprint_of(config) != self.fingerprint:
            diffs = diff_configs(self.encoder_config, config)
            raise FingerprintMismatch(
                f"{self.root} holds features of another encoder configuration; differing fields:\n  "
                + "\n  ".join(diffs) + "\nUse another --store for this encoder.")

    # -- segments ----------------------------------------------------------------------
    @property
    def segment_dir(self) -> str:
        return os.path.join(self.root, "segments")

    def refresh(self) -> None:
        """Rescan committed segments and rebuild the key index."""
        segs = []
        for name in sorted(os.listdir(self.segment_dir)):
            if name.startswith(".") or not name.endswith(self.backend.suffix):
                continue
            kind = name[:3]
            if kind not in ARRAYS:
                continue
            path = os.path.join(self.segment_dir, name)
            keys = self.backend.read(path, ["keys"])["keys"]
            segs.append((Segment(kind, name, path, len(keys)), keys))
        self.segments = [s for s, _ in segs]
        self._segment_keys = [k for _, k in segs]          # kept: keys() needs no second read
        self._paths = None
        for kind in (IMAGE, CAPTION):
            self._index[kind].build([(i, k) for i, (s, k) in enumerate(segs) if s.kind == kind])

    def count(self, kind: str) -> int:
        return len(self._index[kind].keys)

    def has(self, kind: str, keys: list[str]) -> np.ndarray:
        return self._index[kind].find(hex_to_fixed(keys)) >= 0

    def write_segment(self, kind: str, keys: list[str], arrays: dict[str, np.ndarray]) -> Segment | None:
        """Commit one immutable segment; returns None for an empty one."""
        if not keys:
            return None
        kb = keys_to_bytes(keys)
        data = {"keys": kb, **arrays}
        if set(data) != set(ARRAYS[kind]):
            raise ValueError(f"a {kind} segment holds {ARRAYS[kind]}, got {sorted(data)}")
        import hashlib
        seg_id = hashlib.sha256(kb.tobytes()).hexdigest()[:24]
        name = f"{kind}-{seg_id}{self.backend.suffix}"
        final = os.path.join(self.segment_dir, name)
        tmp = os.path.join(self.segment_dir, f".tmp-{os.getpid()}-{uuid.uuid4().hex}{self.backend.suffix}")
        self.backend.write(tmp, data, {"kind": kind, "rows": len(keys), "format_version": FORMAT_VERSION})
        try:
            if os.path.exists(final):
                raise FileExistsError(final)
            os.rename(tmp, final)
            fsync_dir(self.segment_dir)
        except (FileExistsError, OSError) as e:
            # Another writer committed the same keys; its segment stands, ours is dropped.
            self.backend.remove(tmp)
            if not os.path.exists(final):
                raise StoreError(f"could not commit segment {final}: {e}") from e
        return Segment(kind, name, final, len(keys))

    # -- reading -----------------------------------------------------------------------
    def _locate(self, kind: str, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
        idx = self._index[kind]
        pos = idx.find(hex_to_fixed(keys))
        if (pos < 0).any():
            raise MissingFeatures(kind, [k for k, p in zip(keys, pos) if p < 0])
        return idx.seg[pos], idx.row[pos]

    def keys(self, kind: str) -> list[str]:
        """Every key of a kind, in storage order (segment by segment): loading these is
        one sequential read with no reordering."""
        out = []
        for s, k in zip(self.segments, self._segment_keys):
            if s.kind == kind:
                out += bytes_to_keys(k)
        return out

    def _plan_read(self, kind: str, keys: list[str]):
        """Which rows of which segments to read, and where each requested key lands.

        Returns (parts, pos): parts = [(segment, rows or None for all, start in buffer)],
        pos[i] = buffer row of keys[i]. A segment more than half needed is read whole
        (one sequential read); otherwise only its needed rows."""
        seg, row = self._locate(kind, keys)
        pos = np.empty(len(keys), np.int64)
        parts, start = [], 0
        order = np.argsort(seg, kind="stable")
        bounds = np.flatnonzero(np.diff(seg[order])) + 1
        for group in np.split(order, bounds) if len(order) else []:
            s = int(seg[group[0]])
            need = np.unique(row[group])
            if 2 * len(need) >= self.segments[s].rows:
                parts.append((s, None, start))
                pos[group] = start + row[group]
                start += self.segments[s].rows
            else:
                parts.append((s, need, start))
                pos[group] = start + np.searchsorted(need, row[group])
                start += len(need)
        return parts, pos, start

    def _read_rows(self, seg: int, name: str, rows, out: np.ndarray) -> None:
        path = self.segments[seg].path
        if rows is None:
            self.backend.read_into(path, name, out)
        else:
            out[...] = self.backend.read_rows(path, name, rows)

    def load_images(self, keys: list[str]) -> ImageFeatures:
        """Every requested image row, in the order asked, as two contiguous arrays."""
        d, P = self.meta["dim"], self.meta["num_patches"]
        parts, pos, total = self._plan_read(IMAGE, keys)
        g = np.empty((total, d), np.float16)
        p = np.empty((total, P, d), np.float16)
        for s, rows, start in parts:
            n = self.segments[s].rows if rows is None else len(rows)
            self._read_rows(s, "global", rows, g[start:start + n])
            self._read_rows(s, "patches", rows, p[start:start + n])
        if len(pos) == total and (pos == np.arange(total)).all():
            return ImageFeatures(g, p)          # asked in storage order: no reordering copy
        return ImageFeatures(g[pos], np.take(p, pos, axis=0))

    def load_captions(self, keys: list[str]) -> CaptionFeatures:
        """Requested captions in order; tokens flat with offsets (no padding)."""
        d = self.meta["dim"]
        parts, pos, total = self._plan_read(CAPTION, keys)
        g = np.empty((total, d), np.float16)
        trunc = np.empty(total, np.uint8)
        lengths = np.empty(total, np.int64)
        tok_parts = []
        for s, rows, start in parts:
            path = self.segments[s].path
            off = self.backend.read(path, ["offsets"])["offsets"]
            n = self.segments[s].rows if rows is None else len(rows)
            self._read_rows(s, "global", rows, g[start:start + n])
            self._read_rows(s, "truncated", rows, trunc[start:start + n])
            r = np.arange(n) if rows is None else rows
            lengths[start:start + n] = off[r + 1] - off[r]
            tok_parts.append((s, rows, off, r))
        buf_off = np.zeros(total + 1, np.int64)
        np.cumsum(lengths, out=buf_off[1:])
        tokens = np.empty((int(buf_off[-1]), d), np.float16)
        for (s, rows, off, r), (_, _, start) in zip(tok_parts, parts):
            dst = tokens[buf_off[start]:buf_off[start + len(r)]]
            if rows is None:
                self.backend.read_into(self.segments[s].path, "tokens", dst)
            else:
                dst[...] = self.backend.read_rows(self.segments[s].path, "tokens", _ranges(off[r], off[r + 1]))
        if len(pos) == total and (pos == np.arange(total)).all():
            return CaptionFeatures(g, tokens, buf_off, trunc.astype(bool))
        offsets = np.zeros(len(pos) + 1, np.int64)
        np.cumsum(lengths[pos], out=offsets[1:])
        return CaptionFeatures(g[pos], tokens[_ranges(buf_off[pos], buf_off[pos + 1])], offsets,
                               trunc[pos].astype(bool))

    # -- manifest paths -> image keys ----------------------------------------------------
    # Training and scoring never open images, yet manifests name images by path. Extract
    # records which key each (image root, path, crop) had, in small Parquet files.
    def path_index(self) -> dict[tuple[str, tuple | None], dict[str, str]]:
        """(path, crop) -> {image_root: key}; the latest record wins. Read once and kept
        (scoring maps every manifest through it) until refresh() or add_paths()."""
        if self._paths is None:
            import pyarrow.parquet as pq
            self._paths = {}
            pdir = os.path.join(self.root, "paths")
            for name in sorted(os.listdir(pdir)) if os.path.isdir(pdir) else []:
                if name.endswith(".parquet"):
                    t = pq.read_table(os.path.join(pdir, name)).to_pydict()
                    for root, path, crop, key in zip(t["image_root"], t["path"], t["crop"], t["key"]):
                        self._paths.setdefault((path, tuple(crop) if crop else None), {})[root] = key
        return self._paths

    def add_paths(self, rows: list[tuple[str, str, tuple | None, str]]) -> None:
        """Record (image_root, path, crop, key) rows not yet indexed."""
        import pyarrow as pa
        known = self.path_index()
        new = [r for r in rows if known.get((r[1], r[2]), {}).get(r[0]) != r[3]]
        if new:
            self._paths = None
            self._append_table("paths", pa.table({
                "image_root": [r[0] for r in new], "path": [r[1] for r in new],
                "crop": pa.array([list(r[2]) if r[2] else None for r in new], pa.list_(pa.float64())),
                "key": [r[3] for r in new]}))

    # -- file digests: an image file is read and hashed once, not on every extract ------
    def file_digests(self) -> dict[str, tuple[tuple[int, int, int], str]]:
        """realpath -> ((size, mtime_ns, inode), sha256 of its bytes) as last hashed."""
        import pyarrow.parquet as pq
        out: dict = {}
        hdir = os.path.join(self.root, "hashes")
        for name in sorted(os.listdir(hdir)) if os.path.isdir(hdir) else []:
            if name.endswith(".parquet"):
                t = pq.read_table(os.path.join(hdir, name)).to_pydict()
                for path, size, mtime, ino, digest in zip(t["path"], t["size"], t["mtime_ns"], t["inode"],
                                                          t["sha256"]):
                    out[path] = ((size, mtime, ino), digest)
        return out

    def add_file_digests(self, rows: list[tuple[str, tuple[int, int, int], str]]) -> None:
        """Record (realpath, (size, mtime_ns, inode), sha256) of files just hashed."""
        import pyarrow as pa
        if rows:
            self._append_table("hashes", pa.table({
                "path": [r[0] for r in rows], "size": pa.array([r[1][0] for r in rows], pa.int64()),
                "mtime_ns": pa.array([r[1][1] for r in rows], pa.int64()),
                "inode": pa.array([r[1][2] for r in rows], pa.uint64()), "sha256": [r[2] for r in rows]}))

    def _append_table(self, folder: str, table) -> None:
        """A new small Parquet file in folder, durable before it gets its name. Names sort
        by time of writing, so readers that go through them in name order let a later row
        (a file edited since) win over an earlier one."""
        import time

        import pyarrow.parquet as pq
        d = os.path.join(self.root, folder)
        os.makedirs(d, exist_ok=True)
        final = os.path.join(d, f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet")
        pq.write_table(table, final + ".tmp")
        fsync_tree(final + ".tmp")
        os.replace(final + ".tmp", final)
        fsync_dir(d)

    # -- inspection --------------------------------------------------------------------
    def size_on_disk(self) -> int:
        total = 0
        for dirpath, _, files in os.walk(self.root):
            for f in files:
                total += os.path.getsize(os.path.join(dirpath, f))
        return total

    def info(self) -> dict:
        n_tok = 0
        for s in self.segments:
            if s.kind == CAPTION:
                n_tok += self.backend.shapes(s.path)["tokens"][0][0]
        return {"root": self.root, "format_version": self.meta["version"], "backend": self.meta["backend"],
                "fingerprint": self.fingerprint, "model": self.encoder_config["model"],
                "weights": self.encoder_config["weights"], "dim": self.meta["dim"],
                "num_patches": self.meta["num_patches"], "token_mask": self.encoder_config["token_mask"],
                "images": self.count(IMAGE), "captions": self.count(CAPTION), "caption_tokens": n_tok,
                "segments": len(self.segments), "bytes_on_disk": self.size_on_disk(),
                "temporaries": len([n for n in os.listdir(self.segment_dir) if n.startswith(".tmp-")])}

    def verify(self) -> list[str]:
        """Read every committed segment in full; return the problems found (empty = good)."""
        problems = []
        d, P = self.meta["dim"], self.meta["num_patches"]
        seen: dict[str, dict[bytes, str]] = {IMAGE: {}, CAPTION: {}}
        for s in self.segments:
            where = f"segment {s.name}"
            try:
                a = self.backend.read(s.path)
            except Exception as e:
                problems.append(f"{where}: unreadable ({e})")
                continue
            if set(a) != set(ARRAYS[s.kind]):
                problems.append(f"{where}: arrays {sorted(a)}, expected {sorted(ARRAYS[s.kind])}")
                continue
            n = len(a["keys"])
            expect = {"keys": ((n, KEY_BYTES), np.uint8), "global": ((n, d), np.float16)}
            if s.kind == IMAGE:
                expect["patches"] = ((n, P, d), np.float16)
            else:
                off = a["offsets"]
                expect["offsets"] = ((n + 1,), np.int64)
                expect["truncated"] = ((n,), np.uint8)
                expect["tokens"] = ((int(off[-1]) if len(off) else 0, d), np.float16)
                if len(off) != n + 1 or off[0] != 0 or (np.diff(off) <= 0).any():
                    problems.append(f"{where}: offsets are not increasing from 0")
            for name, (shape, dtype) in expect.items():
                if a[name].shape != shape or a[name].dtype != dtype:
                    problems.append(f"{where}: {name} is {a[name].dtype}{list(a[name].shape)}, "
                                    f"expected {np.dtype(dtype)}{list(shape)}")
            for name in ("global", "patches", "tokens"):
                if name in a and not np.isfinite(a[name]).all():
                    problems.append(f"{where}: {name} holds NaN or inf")
            for k in bytes_to_keys(a["keys"]):
                if k in seen[s.kind]:
                    problems.append(f"{where}: key {k} also in {seen[s.kind][k]}")
                seen[s.kind][k] = s.name
        return problems


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Concatenation of arange(start, stop) for each pair, vectorised."""
    lengths = (stops - starts).astype(np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    first_out = np.cumsum(lengths) - lengths          # where each range begins in the output
    return np.arange(total, dtype=np.int64) + np.repeat(starts - first_out, lengths)
