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
At a URL (s3://, gs://, ...) the same layout holds; readers index the segments commit
records name, through a local chunk cache, and writers commit without locks (remote.py).
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from ..errors import FingerprintMismatch, SegmentDamaged, StoreDamaged, StoreError
from ..hashing import diff_configs, fingerprint_of, hex_to_fixed, keys_to_bytes
from . import remote
from .backends import BACKENDS, ZarrBackend, crc32, fsync_dir
from .cache import ChunkCache
from .creation import _url_store_json, create_store_json
from .layout import (
    ARRAYS,
    CAPTION,
    COMMITS,
    FORMAT_NAME,
    FORMAT_VERSION,
    GLOBAL_ARRAYS,
    IMAGE,
    RECORD_FOLDERS,
    SEGMENT_NAME,
    CaptionFeatures,
    ImageFeatures,
    KeyIndex,
    MissingFeatures,
    Segment,
    read_store_json,
)
from .location import locate
from .reading import FeatureReads, _ranges
from .records import RecordFiles
from .writer import WriterDir

__all__ = [
    "FeatureStore",
    "ImageFeatures",
    "CaptionFeatures",
    "MissingFeatures",
    "Segment",
    "IMAGE",
    "CAPTION",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "ARRAYS",
    "SEGMENT_NAME",
    "RECORD_FOLDERS",
    "COMMITS",
    "read_store_json",
    "_ranges",
]


class FeatureStore(FeatureReads, RecordFiles):
    def __init__(self, root: str, cache: "ChunkCache | bool | None" = None):
        """root: a folder, or a URL (s3://, gs://, any fsspec URL) read through a local
        chunk cache: `cache` (a ChunkCache; None: FLOWCLIP_CHUNK_CACHE's; False: none,
        every read goes to the service, as `store verify` reads)."""
        self.loc = locate(str(root))
        self.cache: ChunkCache | None = None
        if self.loc.local:
            self.root = self.loc.root
            self.meta = read_store_json(self.root)
            self.backend = BACKENDS[self.meta["backend"]]
        else:
            self.root = self.loc.text
            self.meta = _url_store_json(self.loc)
            if cache is not False:
                given = cache if isinstance(cache, ChunkCache) else ChunkCache.from_environment(self.root)
                self.cache = given.bind(self.loc.fs)
            self.backend = ZarrBackend(self.cache or self.loc.fs)
        self.segments: list[Segment] = []
        self._index = {IMAGE: KeyIndex(), CAPTION: KeyIndex()}
        self._token_index: KeyIndex | None = None
        self._paths = None  # path index, read on first use and kept until refresh()
        self._writer: WriterDir | None = None
        self.refresh()

    # -- creation and identity ---------------------------------------------------------
    @classmethod
    def open_or_create(
        cls, root: str, config: dict, backend: str = "zarr", owner: str | None = None, cache: "ChunkCache | None" = None
    ) -> "FeatureStore":
        """Open the store at root, creating it for this encoder config if absent, and
        sweep temporaries that dead writers left. A store of another encoder is
        refused, naming the fields that differ. A new store is never made in a folder
        holding other files, nor inside a command's output (`owner`: the output folder of
        the command creating it, a study's own store)."""
        root = create_store_json(root, config, backend, owner)
        store = cls(root, cache)
        store.check_fingerprint(config)
        WriterDir.sweep(store.scratch_root())
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
                + "\n  ".join(diffs)
                + "\nUse another --store for this encoder."
            )

    # -- segments ----------------------------------------------------------------------
    @property
    def segment_dir(self) -> str:
        return self.loc.path("segments")

    def rel(self, path: str) -> str:
        """A path inside the store, relative to its root (for messages)."""
        return self.loc.rel(path)

    def _entries(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(name, path) of each segment readers index: on a disk every entry of segments/
        not starting with '.'; at a URL the segments commit records name (remote.py)."""
        if not self.loc.local:
            return remote.committed(self)
        names = sorted(n for n in os.listdir(self.segment_dir) if not n.startswith("."))
        return [(n, os.path.join(self.segment_dir, n)) for n in names], []

    def scan(self) -> tuple[list[tuple[Segment, np.ndarray]], list[tuple[str, str]]]:
        """Every committed segment with its keys, checked against its name and checksums;
        and the problems found as (path, reason)."""
        found: list[tuple[Segment, np.ndarray]] = []
        entries, problems = self._entries()
        for name, path in entries:
            m = SEGMENT_NAME.match(name)
            if not m or m["suffix"] != self.backend.suffix:
                problems.append((path, f"stray entry {name!r} (not a {self.meta['backend']} segment name)"))
                continue
            try:
                seg = self._segment(m["kind"], name, path, "global" if m["g"] else "all")
                keys = self.read_array(seg, "keys")
                if hashlib.sha256(keys.tobytes()).hexdigest()[:24] != m["hash"]:
                    raise SegmentDamaged(path, "its keys do not hash to its name")
            except SegmentDamaged as e:
                problems.append((path, e.reason))
                continue
            found.append((seg, keys))
        found.sort(key=lambda f: f[0].features == "global")  # a key held both ways resolves to its full row
        return found, problems + self._missing_segments()

    def _missing_segments(self) -> list[tuple[str, str]]:
        """Commit records whose segment is gone (a deleted Zarr folder or .h5 file), as
        (the record's path, reason): quarantining the record lets extract redo the rows.
        (At a URL the records are what is indexed: a missing segment fails as it opens.)"""
        if not self.loc.local:
            return []
        d = os.path.join(self.root, COMMITS)
        out = []
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if name.startswith("."):
                continue
            seg = name[: -len(".json")] if name.endswith(".json") else ""
            if not SEGMENT_NAME.match(seg):
                out.append((os.path.join(d, name), f"stray entry {name!r} (not <segment name>.json)"))
            elif not os.path.exists(os.path.join(self.segment_dir, seg)):
                try:
                    rows = json.load(open(os.path.join(d, name))).get("rows", "?")
                except (OSError, ValueError, AttributeError):
                    rows = "?"
                out.append(
                    (
                        os.path.join(d, name),
                        f"segment {seg} is missing ({rows} rows): its commit record "
                        f"says it was committed; `flowclip store verify --quarantine` "
                        f"moves the record aside and the next extract re-encodes them",
                    )
                )
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

    def _segment(self, kind: str, name: str, path: str, features: str = "all") -> Segment:
        attrs = self.backend.attrs(path)
        crc, rows = attrs.get("crc32"), attrs.get("rows")
        seg = Segment(kind, name, path, rows, crc, features)
        if (
            attrs.get("kind") != kind
            or attrs.get("features", "all") != features
            or not isinstance(rows, int)
            or not isinstance(crc, dict)
            or set(crc) != set(seg.arrays())
        ):
            raise SegmentDamaged(
                path,
                f"its attributes are not a format-{FORMAT_VERSION} {kind} segment's "
                f"(kind, features {features}, rows, crc32 of {', '.join(seg.arrays())})",
            )
        return seg

    def refresh(self) -> None:
        """Rescan committed segments and rebuild the key index; a damaged one is refused."""
        found, problems = self.scan()
        if problems:
            raise StoreDamaged(self.root, [f"{self.rel(p)}: {r}" for p, r in problems])
        self.segments = [s for s, _ in found]
        self._segment_keys = [k for _, k in found]  # kept: keys() needs no second read
        self._paths = None
        self._token_index = None  # read on first use (extract alone needs it)
        for kind in (IMAGE, CAPTION):
            self._index[kind].build([(i, k) for i, (s, k) in enumerate(found) if s.kind == kind])

    def count(self, kind: str) -> int:
        """Distinct keys of a kind."""
        k = self._index[kind].keys
        return int(len(k) - self._index[kind].duplicates())

    def global_only(self, kind: str) -> int:
        """Distinct keys held with their global features alone (extract --features global)."""
        idx = self._index[kind]
        first = np.ones(len(idx.keys), bool)
        first[1:] = idx.keys[1:] != idx.keys[:-1]
        full = np.array([s.features == "all" for s in self.segments], bool)
        return int((first & ~full[idx.seg]).sum()) if len(idx.keys) else 0

    def duplicates(self, kind: str) -> int:
        return self._index[kind].duplicates()

    def has(self, kind: str, keys: list[str], full: bool = True) -> np.ndarray:
        """Which keys the store holds: with every feature (full), or at least the global one."""
        idx = self._index[kind]
        pos = idx.find(hex_to_fixed(keys))
        found = pos >= 0
        if full and found.any():  # a key's first row is a full one whenever it has one (scan's order)
            found[found] = [self.segments[s].features == "all" for s in idx.seg[pos[found]]]
        return found

    def count_tokens(self, caption_keys: list[str]) -> int:
        """Valid tokens of these captions, from the segments' offsets alone."""
        with self._damage():
            seg, row = self._locate(CAPTION, caption_keys)
            self._refuse_global(CAPTION, seg)
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
        out: list[str | None] = []
        for p in pos:
            if p < 0:
                out.append(None)
                continue
            s, r = int(idx.seg[p]), int(idx.row[p])
            out.append(bytes(self._segment_keys[s][self._token_rows[s][r]]).hex())
        return out

    def _token_keys_index(self) -> KeyIndex:
        """Token key -> (caption segment, row), skipping unknown (all-zero) token keys."""
        if self._token_index is None:
            with self._damage():
                parts, self._token_rows = [], {}
                for i, seg in enumerate(self.segments):
                    if seg.kind == CAPTION and seg.features == "all":
                        t = self.read_array(seg, "token_keys")
                        known = ~(t == 0).all(1)
                        self._token_rows[i] = np.flatnonzero(known)
                        parts.append((i, t[known]))
            self._token_index = KeyIndex()
            self._token_index.build(parts)
        return self._token_index

    # -- writing -----------------------------------------------------------------------
    def writer_dir(self) -> str:
        """This process's temporary folder, held by a lock while it lives: under segments/,
        or for a store at a URL under the chunk cache (its name is the writer's prefix there)."""
        if self._writer is None:
            self._writer = WriterDir.create(self.scratch_root())
        return self._writer.path

    def scratch_root(self) -> str:
        if self.loc.local:
            return self.segment_dir
        if self.cache is None:
            raise StoreError(f"{self.root}: writing to a store at a URL needs a chunk cache (its local temporaries)")
        return os.path.join(self.cache.folder, "writers")

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
        features = "global" if set(data) == set(GLOBAL_ARRAYS[kind]) else "all"
        if kind == CAPTION and "token_keys" not in data and features == "all":
            data["token_keys"] = np.zeros_like(kb)  # unknown token ids: no tie sharing
        if set(data) != set(ARRAYS[kind]) and features == "all":
            raise ValueError(f"a {kind} segment holds {ARRAYS[kind]} (or {GLOBAL_ARRAYS[kind]}), got {sorted(data)}")
        data = {k: np.ascontiguousarray(v) for k, v in data.items()}
        crc = {k: crc32(v) for k, v in data.items()}
        g = "g-" if features == "global" else ""
        name = f"{kind}-{g}{hashlib.sha256(kb.tobytes()).hexdigest()[:24]}{self.backend.suffix}"
        final = os.path.join(self.segment_dir, name)
        tmp = os.path.join(self.writer_dir(), name)
        attrs = {"kind": kind, "rows": len(keys), "format_version": FORMAT_VERSION, "crc32": crc}
        self.backend.write(tmp, data, attrs | ({"features": "global"} if g else {}))
        if not self.loc.local:
            final = remote.upload_segment(self, tmp, name, kind, len(keys))
            BACKENDS["zarr"].remove(tmp)
            return Segment(kind, name, final, len(keys), crc, features)
        if not _commit(tmp, final):
            self.backend.remove(tmp)  # another writer committed the same keys; its segment stands
        fsync_dir(self.segment_dir)
        self._record_commit(name, kind, len(keys))
        return Segment(kind, name, final, len(keys), crc, features)

    # -- inspection --------------------------------------------------------------------
    def size_on_disk(self) -> int:
        if not self.loc.local:
            return int(self.loc.fs.du(self.loc.root))
        total = 0
        for dirpath, _, files in os.walk(self.root):
            for f in files:
                total += os.path.getsize(os.path.join(dirpath, f))
        return total

    def failed_items(self) -> dict[str, int]:
        """Distinct images and captions an extract recorded it could not read (failures/, kept
        across runs: a manifest's rows on them are left out of scoring, and refused by training
        unless --allow-missing)."""
        seen: dict[str, set] = {"images": set(), "captions": set()}
        for _, t in self.read_records("failures", ("kind", "path_or_text")):
            for kind, item in zip(t.column("kind").to_pylist(), t.column("path_or_text").to_pylist()):
                seen["images" if kind == "image" else "captions"].add(item)
        return {k: len(v) for k, v in seen.items()}

    def info(self) -> dict:
        n_tok = 0
        for s in self.segments:
            if s.kind == CAPTION and s.features == "all":
                n_tok += self.backend.shape(s.path, "tokens")[0][0]
        return {
            "root": self.root,
            "format_version": self.meta["version"],
            "backend": self.meta["backend"],
            "fingerprint": self.fingerprint,
            "model": self.encoder_config["model"],
            "family": self.encoder_config.get("adapter", {}).get("name", "openai-clip"),
            "weights": self.encoder_config["weights"],
            "dim": self.meta["dim"],
            "num_patches": self.meta["num_patches"],
            "token_mask": self.encoder_config["token_mask"],
            "images": self.count(IMAGE),
            "captions": self.count(CAPTION),
            "caption_tokens": n_tok,
            "global_only": {k: self.global_only(kind) for k, kind in (("images", IMAGE), ("captions", CAPTION))},
            "failed_to_extract": self.failed_items(),
            "segments": len(self.segments),
            "duplicate_rows": self.duplicates(IMAGE) + self.duplicates(CAPTION),
            "bytes_on_disk": self.size_on_disk(),
            "temporaries": len(remote.uncommitted(self))
            if not self.loc.local
            else len([n for n in os.listdir(self.segment_dir) if n.startswith(".tmp-")]),
        }


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
        if os.path.exists(final):  # ENOTEMPTY / EEXIST: the other writer won
            return False
        raise StoreError(f"could not commit segment {final}: {e}") from e
