"""Reading features out of committed segments: rows in the order asked, checksums
checked on every read, several segments at once (FeatureStore's reading half)."""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

import numpy as np

from ..errors import SegmentDamaged, StoreDamaged
from ..hashing import bytes_to_keys, hex_to_fixed
from .layout import (
    CAPTION,
    IMAGE,
    READ_THREADS,
    CaptionFeatures,
    GlobalOnly,
    ImageFeatures,
    KeyIndex,
    MissingFeatures,
    Segment,
)


class FeatureReads:
    """Mixed into FeatureStore, which provides what is declared here."""

    root: str
    meta: dict
    segments: list[Segment]
    _segment_keys: list[np.ndarray]
    _index: dict[str, KeyIndex]
    backend: Any
    cache: Any  # a ChunkCache for a store at a URL, else None
    rel: Callable[[str], str]

    def read_array(self, seg: Segment, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """A whole array of a segment, its checksum checked (SegmentDamaged otherwise)."""
        if out is None:
            shape, dtype = self.backend.shape(seg.path, name)
            out = np.empty(shape, dtype)
        for attempt in range(2 if self.cache is not None else 1):
            if attempt:  # a damaged cached copy is dropped and fetched again, once: this array's
                # files alone (the segment's other arrays may be read by other threads right now:
                # dropping them too made such a read report a chunk missing)
                self.cache.forget(f"{seg.path}/{name}")
            try:
                if self.backend.read_into(seg.path, name, out) == seg.crc[name]:
                    return out
                damage = SegmentDamaged(seg.path, f"{name} fails its checksum (the bytes changed since written)")
            except SegmentDamaged as e:
                damage = e
        raise damage

    def _locate(self, kind: str, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
        idx = self._index[kind]
        pos = idx.find(hex_to_fixed(keys))
        if (pos < 0).any():
            raise MissingFeatures(kind, [k for k, p in zip(keys, pos) if p < 0])
        return idx.seg[pos], idx.row[pos]

    def _refuse_global(self, kind: str, seg: np.ndarray) -> None:
        """GlobalOnly when any of these rows (their segments, one per row) has global features alone."""
        glob = np.array([s.features == "global" for s in self.segments], bool)
        n = int(glob[seg].sum()) if len(seg) else 0
        if n:
            raise GlobalOnly(self.root, kind, n)

    def load_global(self, kind: str, keys: list[str]) -> np.ndarray:
        """The global features [n, d] (FP16) of these keys, in the order asked, from full
        or global-only rows alike (a key's bits are the same in both)."""
        g = np.empty((len(keys), self.meta["dim"]), np.float16)
        with self._damage():
            self._run([lambda s=s, p=p, r=r: self._fill(s, "global", p, r, g) for s, p, r in self._groups(kind, keys)])
        return g

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
            self.read_array(self.segments[s], name, out[pos[0] : pos[0] + n])
        else:
            out[pos] = self.read_array(self.segments[s], name)[rows]

    def load_images(self, keys: list[str]) -> ImageFeatures:
        """Every requested image row, in the order asked, as two contiguous arrays."""
        d, P = self.meta["dim"], self.meta["num_patches"]
        g = np.empty((len(keys), d), np.float16)
        p = np.empty((len(keys), P, d), np.float16)
        groups = self._groups(IMAGE, keys)
        self._refuse_global(IMAGE, np.array([s for s, pos, _ in groups for _ in pos], np.int64))
        with self._damage():
            jobs = []
            for s, pos, rows in groups:
                jobs += [
                    lambda s=s, pos=pos, rows=rows: self._fill(s, "global", pos, rows, g),
                    lambda s=s, pos=pos, rows=rows: self._fill(s, "patches", pos, rows, p),
                ]
            self._run(jobs)
        return ImageFeatures(g, p)

    def load_captions(self, keys: list[str]) -> CaptionFeatures:
        """Requested captions in order; tokens flat with offsets (no padding)."""
        with self._damage():
            return self._load_captions(keys)

    def _load_captions(self, keys: list[str]) -> CaptionFeatures:
        d = self.meta["dim"]
        groups = self._groups(CAPTION, keys)
        self._refuse_global(CAPTION, np.array([s for s, pos, _ in groups for _ in pos], np.int64))
        offs = self._run([lambda s=s: self._offsets(s) for s, _, _ in groups])
        lengths = np.empty(len(keys), np.int64)
        for (s, pos, rows), off in zip(groups, offs):
            lengths[pos] = off[rows + 1] - off[rows]
        offsets = np.zeros(len(keys) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        g = np.empty((len(keys), d), np.float16)
        trunc = np.empty(len(keys), np.uint8)
        tokens = np.empty((int(offsets[-1]), d), np.float16)
        jobs: list[Callable[[], None]] = []
        for (s, pos, rows), off in zip(groups, offs):
            jobs += [
                functools.partial(self._fill, s, "global", pos, rows, g),
                functools.partial(self._fill, s, "truncated", pos, rows, trunc),
                functools.partial(self._fill_tokens, s, pos, rows, off, offsets, tokens),
            ]
        self._run(jobs)
        return CaptionFeatures(g, tokens, offsets, trunc.astype(bool))

    def _fill_tokens(self, s: int, pos, rows, off, offsets, tokens) -> None:
        """Each requested caption's token rows to its place in the flat output."""
        dst = _ranges(offsets[pos], offsets[pos + 1])
        n = self.segments[s].rows
        if len(rows) == n and (np.diff(pos) == 1).all() and (rows == np.arange(n)).all():
            self.read_array(self.segments[s], "tokens", tokens[offsets[pos[0]] : offsets[pos[-1] + 1]])
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
            raise StoreDamaged(self.root, [f"{self.rel(e.path)}: {e.reason}"]) from None


def _ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Concatenation of arange(start, stop) for each pair, vectorised."""
    lengths = (stops - starts).astype(np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    first_out = np.cumsum(lengths) - lengths  # where each range begins in the output
    return np.arange(total, dtype=np.int64) + np.repeat(starts - first_out, lengths)
