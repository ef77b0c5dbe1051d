"""The feature store: content-addressed, append-only, one encoder per store.

Layout (docs/store-format.md is the specification):

    <root>/store.json                   format version, backend, encoder config + fingerprint
    <root>/segments/img-<id>.<ext>      image segments: keys, global, patches
    <root>/segments/cap-<id>.<ext>      caption segments: keys, token_keys, global, tokens, offsets, truncated
    <root>/segments/.tmp-<writer>/      a live (or crashed) writer's temporaries, under its lock
    <root>/paths|hashes|failures/*.parquet   small record files, named by their checksum
    <root>/commits/<segment name>.json  one per committed segment, written right after it

Segments are immutable and named by the hash of their keys; a writer writes a
temporary and renames it into place, so writers never share a file. Every array's
CRC-32 is in the segment's attributes and is checked on every read: damage is
refused (StoreDamaged), never read as zeros. A key may sit in several segments (two
writers at once): the first segment in name order is the one read, by every reader.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
import uuid
from dataclasses import dataclass

import numpy as np

from ..encoders import diff_configs, fingerprint_of
from ..errors import FingerprintMismatch, SegmentDamaged, StoreDamaged, StoreError
from ..hashing import KEY_BYTES, as_fixed, bytes_to_keys, hex_to_fixed, keys_to_bytes
from .backends import BACKENDS, crc32, fsync_dir
from .writer import WriterDir

FORMAT_NAME = "flowclip-feature-store"
FORMAT_VERSION = 2
IMAGE, CAPTION = "img", "cap"
ARRAYS = {
    IMAGE: ("keys", "global", "patches"),
    CAPTION: ("keys", "token_keys", "global", "tokens", "offsets", "truncated"),
}
SEGMENT_NAME = re.compile(r"^(img|cap)-([0-9a-f]{24})(\.zarr|\.h5)$")
RECORD_NAME = re.compile(r"^(\d{20})-([0-9a-f]{12})-([0-9a-f]{16})\.parquet$")
RECORD_FOLDERS = ("paths", "hashes", "failures")
COMMITS = "commits"           # commits/<segment>.json: the segment was committed; its absence is damage
READ_THREADS = min(4, os.cpu_count() or 1)     # segments read (and checksummed) at once


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
    crc: dict          # array name -> CRC-32 of its bytes, recorded at commit


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
    """Sorted keys -> (segment, row), searchable in bulk with numpy. Equal keys keep
    segment order (stable sort), so a key held twice resolves to its first segment."""

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


def read_store_json(root: str) -> dict:
    """store.json, checked; StoreError naming the fault."""
    meta_path = os.path.join(root, "store.json")
    if not os.path.isfile(meta_path):
        raise StoreError(f"{root}: not a flowclip store (no store.json); create one with "
                         f"`flowclip extract --store {root} ...`")
    try:
        with open(meta_path, "rb") as f:
            meta = json.loads(f.read())
    except (ValueError, OSError) as e:
        raise StoreDamaged(root, [f"store.json is not readable JSON ({e})"]) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise StoreError(f"{meta_path}: not a flowclip store file")
    version = meta.get("version")
    if not isinstance(version, int):
        raise StoreDamaged(root, [f"store.json: version {version!r} is not an integer"])
    if version > FORMAT_VERSION:
        raise StoreError(f"{root}: store format {version} is newer than this flowclip reads "
                         f"({FORMAT_VERSION}); upgrade flowclip")
    if version < FORMAT_VERSION:
        raise StoreError(f"{root}: store format {version} (this flowclip reads {FORMAT_VERSION}, which checksums "
                         f"every array); run `flowclip store upgrade {root}` once")
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


class FeatureStore:
    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.meta = read_store_json(self.root)
        self.backend = BACKENDS[self.meta["backend"]]
        self.segments: list[Segment] = []
        self._index = {IMAGE: _Index(), CAPTION: _Index()}
        self._token_index: _Index | None = None
        self._paths = None                 # path index, read on first use and kept until refresh()
        self._writer: WriterDir | None = None
        self.refresh()

    # -- creation and identity ---------------------------------------------------------
    @classmethod
    def open_or_create(cls, root: str, config: dict, backend: str = "zarr", owner: str | None = None) -> "FeatureStore":
        """Open the store at root, creating it for this encoder config if absent, and
        sweep temporaries that dead writers left. A store of another encoder is
        refused, naming the fields that differ. A new store is never made in a folder
        holding other files, nor inside a command's output (`owner`: the output folder of
        the command creating it, a study's own store)."""
        if backend not in BACKENDS:
            raise StoreError(f"unknown backend {backend!r}; use one of {sorted(BACKENDS)}")
        root = os.path.abspath(root)
        meta_path = os.path.join(root, "store.json")
        if not os.path.exists(meta_path):
            _check_new_store_place(root, owner)
            for d in ("segments", COMMITS) + RECORD_FOLDERS:
                os.makedirs(os.path.join(root, d), exist_ok=True)
            meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "backend": backend,
                    "fingerprint": fingerprint_of(config), "encoder": config,
                    "dim": config["model_cfg"]["embed_dim"], "num_patches": config["num_patches"]}
            tmp = os.path.join(root, f".store.json.{uuid.uuid4().hex}")
            with open(tmp, "w") as f:
                json.dump(meta, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, meta_path)     # fails if another process created it first
                fsync_dir(root)
            except FileExistsError:
                pass
            finally:
                os.remove(tmp)
        store = cls(root)
        store.check_fingerprint(config)
        WriterDir.sweep(store.segment_dir)
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

    def scan(self) -> tuple[list[tuple[Segment, np.ndarray]], list[tuple[str, str]]]:
        """Every committed segment with its keys, checked against its name and checksums;
        and the problems found as (path, reason)."""
        found, problems = [], []
        for name in sorted(os.listdir(self.segment_dir)):
            if name.startswith("."):
                continue
            path = os.path.join(self.segment_dir, name)
            m = SEGMENT_NAME.match(name)
            if not m or m.group(3) != self.backend.suffix:
                problems.append((path, f"stray entry {name!r} (not a {self.meta['backend']} segment name)"))
                continue
            try:
                seg = self._segment(m.group(1), name, path)
                keys = self.read_array(seg, "keys")
                if hashlib.sha256(keys.tobytes()).hexdigest()[:24] != m.group(2):
                    raise SegmentDamaged(path, "its keys do not hash to its name")
            except SegmentDamaged as e:
                problems.append((path, e.reason))
                continue
            found.append((seg, keys))
        return found, problems + self._missing_segments()

    def _missing_segments(self) -> list[tuple[str, str]]:
        """Commit records whose segment is gone (a deleted Zarr folder or .h5 file), as
        (the record's path, reason): quarantining the record lets extract redo the rows."""
        d = os.path.join(self.root, COMMITS)
        out = []
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if name.startswith("."):
                continue
            seg = name[:-len(".json")] if name.endswith(".json") else ""
            if not SEGMENT_NAME.match(seg):
                out.append((os.path.join(d, name), f"stray entry {name!r} (not <segment name>.json)"))
            elif not os.path.exists(os.path.join(self.segment_dir, seg)):
                try:
                    rows = json.load(open(os.path.join(d, name))).get("rows", "?")
                except (OSError, ValueError, AttributeError):
                    rows = "?"
                out.append((os.path.join(d, name), f"segment {seg} is missing ({rows} rows): its commit record "
                                                   f"says it was committed; `flowclip store verify --quarantine` "
                                                   f"moves the record aside and the next extract re-encodes them"))
        return out

    def commit_record(self, seg_name: str) -> str:
        return os.path.join(self.root, COMMITS, seg_name + ".json")

    def _record_commit(self, name: str, kind: str, rows: int) -> None:
        """commits/<name>.json, whole or absent, after the segment itself is in place (a
        crash between the two leaves a segment without a record: legal, as in older stores)."""
        final = self.commit_record(name)
        if os.path.exists(final):
            return
        os.makedirs(os.path.dirname(final), exist_ok=True)
        tmp = os.path.join(self.writer_dir(), name + ".commit.json")
        with open(tmp, "w") as f:
            json.dump({"segment": name, "kind": kind, "rows": rows}, f)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, final)
        except FileExistsError:
            pass
        finally:
            os.remove(tmp)
        fsync_dir(os.path.dirname(final))

    def _segment(self, kind: str, name: str, path: str) -> Segment:
        attrs = self.backend.attrs(path)
        crc, rows = attrs.get("crc32"), attrs.get("rows")
        if attrs.get("kind") != kind or not isinstance(rows, int) or not isinstance(crc, dict) \
                or set(crc) != set(ARRAYS[kind]):
            raise SegmentDamaged(path, f"its attributes are not a format-{FORMAT_VERSION} {kind} segment's "
                                       f"(kind, rows, crc32 of {', '.join(ARRAYS[kind])})")
        return Segment(kind, name, path, rows, crc)

    def refresh(self) -> None:
        """Rescan committed segments and rebuild the key index; a damaged one is refused."""
        found, problems = self.scan()
        if problems:
            raise StoreDamaged(self.root, [f"{os.path.relpath(p, self.root)}: {r}" for p, r in problems])
        self.segments = [s for s, _ in found]
        self._segment_keys = [k for _, k in found]          # kept: keys() needs no second read
        self._paths = None
        self._token_index = None                            # read on first use (extract alone needs it)
        for kind in (IMAGE, CAPTION):
            self._index[kind].build([(i, k) for i, (s, k) in enumerate(found) if s.kind == kind])

    def read_array(self, seg: Segment, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """A whole array of a segment, its checksum checked (SegmentDamaged otherwise)."""
        if out is None:
            shape, dtype = self.backend.shape(seg.path, name)
            out = np.empty(shape, dtype)
        if self.backend.read_into(seg.path, name, out) != seg.crc[name]:
            raise SegmentDamaged(seg.path, f"{name} fails its checksum (the bytes changed since they were written)")
        return out

    def count(self, kind: str) -> int:
        """Distinct keys of a kind."""
        k = self._index[kind].keys
        return int(len(k) - self._index[kind].duplicates())

    def duplicates(self, kind: str) -> int:
        return self._index[kind].duplicates()

    def has(self, kind: str, keys: list[str]) -> np.ndarray:
        return self._index[kind].find(hex_to_fixed(keys)) >= 0

    def count_tokens(self, caption_keys: list[str]) -> int:
        """Valid tokens of these captions, from the segments' offsets alone."""
        with self._damage():
            seg, row = self._locate(CAPTION, caption_keys)
            total = 0
            for s in np.unique(seg):
                off = self._offsets(int(s))
                r = row[seg == s]
                total += int((off[r + 1] - off[r]).sum())
            return total

    def caption_with_tokens(self, token_keys: list[str]) -> list[str | None]:
        """A stored caption key with these token ids, or None, for each token key: a new
        caption whose tokens are already encoded gets the same features (exact ties)."""
        idx = self._token_keys_index()
        pos = idx.find(hex_to_fixed(token_keys)) if token_keys else np.zeros(0, np.int64)
        out = []
        for p in pos:
            if p < 0:
                out.append(None)
                continue
            s, r = int(idx.seg[p]), int(idx.row[p])
            out.append(bytes(self._segment_keys[s][self._token_rows[s][r]]).hex())
        return out

    def _token_keys_index(self) -> _Index:
        """Token key -> (caption segment, row), skipping unknown (all-zero) token keys."""
        if self._token_index is None:
            with self._damage():
                parts, self._token_rows = [], {}
                for i, seg in enumerate(self.segments):
                    if seg.kind == CAPTION:
                        t = self.read_array(seg, "token_keys")
                        known = ~(t == 0).all(1)
                        self._token_rows[i] = np.flatnonzero(known)
                        parts.append((i, t[known]))
            self._token_index = _Index()
            self._token_index.build(parts)
        return self._token_index

    # -- writing -----------------------------------------------------------------------
    def writer_dir(self) -> str:
        """This process's temporary folder under segments/, held by a lock while it lives."""
        if self._writer is None:
            self._writer = WriterDir.create(self.segment_dir)
        return self._writer.path

    def release_writer(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None

    def write_segment(self, kind: str, keys: list[str], arrays: dict[str, np.ndarray]) -> Segment | None:
        """Commit one immutable segment; returns None for an empty one."""
        if not keys:
            return None
        kb = keys_to_bytes(keys)
        data = {"keys": kb, **arrays}
        if kind == CAPTION and "token_keys" not in data:
            data["token_keys"] = np.zeros_like(kb)           # unknown token ids: no tie sharing
        if set(data) != set(ARRAYS[kind]):
            raise ValueError(f"a {kind} segment holds {ARRAYS[kind]}, got {sorted(data)}")
        data = {k: np.ascontiguousarray(v) for k, v in data.items()}
        crc = {k: crc32(v) for k, v in data.items()}
        name = f"{kind}-{hashlib.sha256(kb.tobytes()).hexdigest()[:24]}{self.backend.suffix}"
        final = os.path.join(self.segment_dir, name)
        tmp = os.path.join(self.writer_dir(), name)
        self.backend.write(tmp, data, {"kind": kind, "rows": len(keys), "format_version": FORMAT_VERSION,
                                       "crc32": crc})
        if not _commit(tmp, final):
            self.backend.remove(tmp)      # another writer committed the same keys; its segment stands
        fsync_dir(self.segment_dir)
        self._record_commit(name, kind, len(keys))
        return Segment(kind, name, final, len(keys), crc)

    # -- reading -----------------------------------------------------------------------
    def _locate(self, kind: str, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
        idx = self._index[kind]
        pos = idx.find(hex_to_fixed(keys))
        if (pos < 0).any():
            raise MissingFeatures(kind, [k for k, p in zip(keys, pos) if p < 0])
        return idx.seg[pos], idx.row[pos]

    def keys(self, kind: str) -> list[str]:
        """Every key of a kind once, in storage order (segment by segment): loading these
        is one sequential read with no reordering."""
        out, seen = [], set()
        for s, k in zip(self.segments, self._segment_keys):
            if s.kind == kind:
                for key in bytes_to_keys(k):
                    if key not in seen:
                        seen.add(key)
                        out.append(key)
        return out

    def _groups(self, kind: str, keys: list[str]) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(segment, positions in the request, rows in the segment) for each segment the
        requested keys live in."""
        seg, row = self._locate(kind, keys)
        order = np.argsort(seg, kind="stable")
        bounds = np.flatnonzero(np.diff(seg[order])) + 1
        return [(int(seg[g[0]]), g, row[g]) for g in (np.split(order, bounds) if len(order) else [])]

    def _run(self, jobs: list) -> list:
        """Run read jobs (callables) on a few threads: reading and checksumming release
        the GIL, so arrays of several segments load in parallel."""
        if len(jobs) <= 1:
            return [j() for j in jobs]
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(min(len(jobs), READ_THREADS)) as pool:
            futures = [pool.submit(j) for j in jobs]
            return [f.result() for f in futures]

    def _fill(self, s: int, name: str, pos: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
        """out[pos] = the segment's rows. A whole segment asked in order is read straight
        into place; otherwise the array is read whole (its checksum covers it whole) and
        the rows are copied out, so memory holds one segment's array beyond the result."""
        n = self.segments[s].rows
        if len(rows) == n and pos[-1] - pos[0] == n - 1 and (np.diff(pos) == 1).all() and (rows == np.arange(n)).all():
            self.read_array(self.segments[s], name, out[pos[0]:pos[0] + n])
        else:
            out[pos] = self.read_array(self.segments[s], name)[rows]

    def load_images(self, keys: list[str]) -> ImageFeatures:
        """Every requested image row, in the order asked, as two contiguous arrays."""
        d, P = self.meta["dim"], self.meta["num_patches"]
        g = np.empty((len(keys), d), np.float16)
        p = np.empty((len(keys), P, d), np.float16)
        with self._damage():
            jobs = []
            for s, pos, rows in self._groups(IMAGE, keys):
                jobs += [lambda s=s, pos=pos, rows=rows: self._fill(s, "global", pos, rows, g),
                         lambda s=s, pos=pos, rows=rows: self._fill(s, "patches", pos, rows, p)]
            self._run(jobs)
        return ImageFeatures(g, p)

    def load_captions(self, keys: list[str]) -> CaptionFeatures:
        """Requested captions in order; tokens flat with offsets (no padding)."""
        with self._damage():
            return self._load_captions(keys)

    def _load_captions(self, keys: list[str]) -> CaptionFeatures:
        d = self.meta["dim"]
        groups = self._groups(CAPTION, keys)
        offs = self._run([lambda s=s: self._offsets(s) for s, _, _ in groups])
        lengths = np.empty(len(keys), np.int64)
        for (s, pos, rows), off in zip(groups, offs):
            lengths[pos] = off[rows + 1] - off[rows]
        offsets = np.zeros(len(keys) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        g = np.empty((len(keys), d), np.float16)
        trunc = np.empty(len(keys), np.uint8)
        tokens = np.empty((int(offsets[-1]), d), np.float16)
        jobs = []
        for (s, pos, rows), off in zip(groups, offs):
            jobs += [lambda s=s, pos=pos, rows=rows: self._fill(s, "global", pos, rows, g),
                     lambda s=s, pos=pos, rows=rows: self._fill(s, "truncated", pos, rows, trunc),
                     lambda s=s, pos=pos, rows=rows, off=off: self._fill_tokens(s, pos, rows, off, offsets, tokens)]
        self._run(jobs)
        return CaptionFeatures(g, tokens, offsets, trunc.astype(bool))

    def _fill_tokens(self, s: int, pos, rows, off, offsets, tokens) -> None:
        """Each requested caption's token rows to its place in the flat output."""
        dst = _ranges(offsets[pos], offsets[pos + 1])
        n = self.segments[s].rows
        if len(rows) == n and (np.diff(pos) == 1).all() and (rows == np.arange(n)).all():
            self.read_array(self.segments[s], "tokens", tokens[offsets[pos[0]]:offsets[pos[-1] + 1]])
        else:
            tokens[dst] = self.read_array(self.segments[s], "tokens")[_ranges(off[rows], off[rows + 1])]

    def _offsets(self, s: int) -> np.ndarray:
        seg = self.segments[s]
        off = self.read_array(seg, "offsets")
        if len(off) != seg.rows + 1 or off[0] != 0 or (np.diff(off) <= 0).any():
            raise SegmentDamaged(seg.path, "offsets are not increasing from 0")
        return off

    @contextlib.contextmanager
    def _damage(self):
        """Turn a damaged part met while reading into the store's one-line refusal."""
        try:
            yield
        except SegmentDamaged as e:
            raise StoreDamaged(self.root, [f"{os.path.relpath(e.path, self.root)}: {e.reason}"]) from None

    # -- small record files: paths, file digests, failures ---------------------------------
    def read_records(self, folder: str, columns: tuple[str, ...]):
        """(name, table) of each record file of a folder, in name (= time) order, each
        checked against the checksum in its name."""
        d = os.path.join(self.root, folder)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if not name.startswith("."):
                with self._damage():
                    yield name, self.read_record(folder, name, columns)

    def read_record(self, folder: str, name: str, columns: tuple[str, ...]):
        """One record file as a pyarrow table; SegmentDamaged if it fails a check."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        path = os.path.join(self.root, folder, name)
        m = RECORD_NAME.match(name)
        if not m:
            raise SegmentDamaged(path, "stray file (not <time>-<id>-<checksum>.parquet)")
        raw = open(path, "rb").read()
        if hashlib.sha256(raw).hexdigest()[:16] != m.group(3):
            raise SegmentDamaged(path, "fails its checksum (the bytes changed since they were written)")
        try:
            # ParquetFile, not read_table: read_table's dataset path lets an Arrow worker thread
            # drop the last reference to the Python bytes; at interpreter exit that thread then
            # needs the GIL, is killed, and the process aborts (rc 134). Here it stays ours.
            table = pq.ParquetFile(pa.BufferReader(raw)).read(use_threads=False)
        except Exception as e:         # pyarrow raises several kinds for a bad file
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
        d = os.path.join(self.root, folder)
        os.makedirs(d, exist_ok=True)
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}-{hashlib.sha256(raw).hexdigest()[:16]}.parquet"
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
            self.append_records("paths", pa.table({
                "image_root": [r[0] for r in new], "path": [r[1] for r in new],
                "crop": pa.array([list(r[2]) if r[2] else None for r in new], pa.list_(pa.float64())),
                "key": [r[3] for r in new]}))

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
            self.append_records("hashes", pa.table({
                "path": [r[0] for r in rows], "size": pa.array([r[1][0] for r in rows], pa.int64()),
                "mtime_ns": pa.array([r[1][1] for r in rows], pa.int64()),
                "inode": pa.array([r[1][2] for r in rows], pa.uint64()), "sha256": [r[2] for r in rows]}))

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
                n_tok += self.backend.shape(s.path, "tokens")[0][0]
        return {"root": self.root, "format_version": self.meta["version"], "backend": self.meta["backend"],
                "fingerprint": self.fingerprint, "model": self.encoder_config["model"],
                "family": self.encoder_config.get("adapter", {}).get("name", "openai-clip"),
                "weights": self.encoder_config["weights"], "dim": self.meta["dim"],
                "num_patches": self.meta["num_patches"], "token_mask": self.encoder_config["token_mask"],
                "images": self.count(IMAGE), "captions": self.count(CAPTION), "caption_tokens": n_tok,
                "segments": len(self.segments),
                "duplicate_rows": self.duplicates(IMAGE) + self.duplicates(CAPTION),
                "bytes_on_disk": self.size_on_disk(),
                "temporaries": len([n for n in os.listdir(self.segment_dir) if n.startswith(".tmp-")])}



def _check_new_store_place(root: str, owner: str | None) -> None:
    from ..outputs import KINDS, kind_of, output_at_or_above
    out = output_at_or_above(root)
    if out is not None and (owner is None or os.path.realpath(out) != os.path.realpath(owner)):
        raise StoreError(f"{root}: a new store would go inside {out}, {KINDS[kind_of(out)]}; stores never live "
                         f"inside a command's output (an --overwrite there would delete it). Choose another --store")
    if os.path.isdir(root):
        own = {"segments", COMMITS, *RECORD_FOLDERS}
        other = sorted(n for n in os.listdir(root) if n not in own and not n.startswith(".store.json."))
        if other:
            raise StoreError(f"{root} exists and holds other files ({', '.join(other[:5])}), not a store; create a "
                             f"store in an empty or new folder")


def _commit(tmp: str, final: str) -> bool:
    """Give tmp the name final unless a segment holds that name already (never replace
    one: for a file, link then unlink; a folder cannot be renamed onto a non-empty one)."""
    try:
        if os.path.isdir(tmp):
            if os.path.exists(final):
                return False
            os.rename(tmp, final)
        else:
            os.link(tmp, final)
            os.remove(tmp)
        return True
    except FileExistsError:
        return False
    except OSError as e:
        if os.path.exists(final):        # ENOTEMPTY / EEXIST: the other writer won
            return False
        raise StoreError(f"could not commit segment {final}: {e}") from e


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Concatenation of arange(start, stop) for each pair, vectorised."""
    lengths = (stops - starts).astype(np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    first_out = np.cumsum(lengths) - lengths          # where each range begins in the output
    return np.arange(total, dtype=np.int64) + np.repeat(starts - first_out, lengths)
