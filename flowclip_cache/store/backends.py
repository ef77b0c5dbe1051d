"""Segment files: one immutable group of named arrays, in Zarr v3 or HDF5.

A segment is written under a temporary name and renamed into place when complete
(rename is atomic on POSIX), so a reader never sees a half-written segment and a
crash leaves at most a temporary to sweep. Arrays are stored uncompressed: FP16
features barely compress, and loading a store must run near memmap speed.

Readers never fill in what is not there: a missing chunk, a chunk of the wrong size
or an unreadable file raises SegmentDamaged naming the file. Checksums (the CRC-32 of
each array, in the segment's attributes) are checked by the store (core.py).
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from typing import Any

import numpy as np

from ..errors import SegmentDamaged

ROW_CHUNK_BYTES = 16 << 20  # target size of one chunk along the row axis


def crc32(a: np.ndarray) -> int:
    """CRC-32 of an array's bytes in C order (zlib's; about 2 GB/s)."""
    a = np.ascontiguousarray(a)
    return zlib.crc32(memoryview(a).cast("B")) if a.size else 0  # type: ignore[arg-type]  # numpy is a buffer


def read_blocks(flat: np.ndarray, bounds: list[tuple[int, int]], read_block) -> int:
    """Fill flat[a:b] for each (a, b) with read_block(i, view); return the CRC-32 of all
    of flat, chained block by block (zlib releases the GIL for both, so readers of
    several arrays run in parallel threads)."""
    crc = 0
    for i, (a, b) in enumerate(bounds):
        view = flat[a:b]
        read_block(i, view)
        crc = zlib.crc32(memoryview(view).cast("B"), crc)  # type: ignore[arg-type]
    return crc


def _row_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Equal chunks of at most ~ROW_CHUNK_BYTES: Zarr stores an edge chunk at full
    size, so chunks that divide the rows evenly waste at most a few rows."""
    n = shape[0] or 1
    row_bytes = max(1, int(np.prod(shape[1:], dtype=np.int64)) * itemsize)
    n_chunks = -(-n * row_bytes // ROW_CHUNK_BYTES)
    rows = -(-n // max(1, n_chunks))
    return (rows,) + tuple(shape[1:])


def fsync_tree(path: str) -> None:
    """Flush a file, or a folder's files and folders, to disk: a segment is renamed into
    place only once its bytes are durable, so a power loss (not just a killed process)
    cannot leave a committed name over missing data."""
    if os.path.isfile(path):
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())
        return
    for root, _, files in os.walk(path, topdown=False):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                os.fsync(fh.fileno())
        fsync_dir(root)


def fsync_dir(path: str) -> None:
    """Make a rename or new entry in this folder durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ZarrBackend:
    """Zarr v3 segments on the local disk, or (fs: an fsspec filesystem) at a URL, read
    the same way: the store's own layout, chunk by chunk, every chunk checked."""

    name = "zarr"
    suffix = ".zarr"

    def __init__(self, fs=None):
        self.fs = fs

    def _open(self, file: str):
        return open(file, "rb") if self.fs is None else self.fs.open(file, "rb")

    def write(self, path: str, arrays: dict[str, np.ndarray], attrs: dict) -> None:
        import zarr

        g = zarr.open_group(path, mode="w", zarr_format=3)
        g.attrs.update(attrs)
        # every chunk written, zeros too: an absent chunk can then only mean damage
        config: Any = {"write_empty_chunks": True}  # (zarr's TypedDict for it would want every key)
        for name, a in arrays.items():
            arr = g.create_array(
                name,
                shape=a.shape,
                dtype=a.dtype,
                chunks=_row_chunks(a.shape, a.dtype.itemsize),
                compressors=None,
                fill_value=0,
                config=config,
            )
            if a.size:
                arr[...] = a
        fsync_tree(path)

    def attrs(self, path: str) -> dict:
        meta = self._json(path, os.path.join(path, "zarr.json"))
        if meta.get("node_type") != "group":
            raise SegmentDamaged(path, "zarr.json is not a Zarr group")
        return meta.get("attributes", {})

    def array_names(self, path: str) -> list[str]:
        if self.fs is not None:
            inside = [e.rstrip("/").rsplit("/", 1)[-1] for e in self.fs.ls(path, detail=False)]
            return sorted(n for n in inside if self.fs.isfile(f"{path}/{n}/zarr.json"))
        return sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n, "zarr.json")))

    def _json(self, path: str, file: str) -> dict:
        try:
            with self._open(file) as f:
                meta = json.loads(f.read())
        except FileNotFoundError:
            raise SegmentDamaged(path, f"{os.path.relpath(file, path)} is missing") from None
        except (ValueError, OSError) as e:
            raise SegmentDamaged(path, f"{os.path.relpath(file, path)} is unreadable ({e})") from None
        if not isinstance(meta, dict):
            raise SegmentDamaged(path, f"{os.path.relpath(file, path)} is not a JSON object")
        return meta

    def _array_meta(self, path: str, name: str) -> dict:
        meta = self._json(path, os.path.join(path, name, "zarr.json"))
        try:
            codecs = meta.get("codecs", [])
            cke = meta["chunk_key_encoding"]
            ok = (
                len(codecs) == 1
                and codecs[0]["name"] == "bytes"
                and codecs[0].get("configuration", {}).get("endian", "little") == "little"
                and cke["name"] == "default"
                and cke.get("configuration", {}).get("separator", "/") == "/"
                and list(meta["chunk_grid"]["configuration"]["chunk_shape"][1:]) == list(meta["shape"][1:])
            )
            np.dtype(meta["data_type"])
        except (KeyError, TypeError, IndexError, AttributeError) as e:
            raise SegmentDamaged(path, f"{name}/zarr.json lacks a field ({e})") from None
        if not ok:
            raise SegmentDamaged(path, f"{name}: not the layout flowclip writes (uncompressed row chunks)")
        return meta

    def shape(self, path: str, name: str) -> tuple[tuple[int, ...], np.dtype]:
        meta = self._array_meta(path, name)
        return tuple(meta["shape"]), np.dtype(meta["data_type"])

    def _chunks(self, path: str, name: str, meta: dict):
        """(rows per chunk, bytes per row, fn(c, view) filling view from chunk c, checked)."""
        shape = meta["shape"]
        rows = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
        row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(meta["data_type"]).itemsize
        tail = (0,) * (len(shape) - 1)
        expect = rows * row_bytes  # Zarr stores an edge chunk at full size

        def read_chunk(c, view):
            key = os.path.join(path, name, "c", *map(str, (c,) + tail))
            try:
                with self._open(key) as f:
                    size = os.fstat(f.fileno()).st_size if self.fs is None else f.seek(0, 2)
                    f.seek(0)
                    if size != expect:
                        raise SegmentDamaged(path, f"{name}: chunk {c} holds {size} bytes, expected {expect}")
                    got = f.readinto(memoryview(view).cast("B"))
            except FileNotFoundError:
                raise SegmentDamaged(path, f"{name}: chunk {c} is missing") from None
            except OSError as e:
                raise SegmentDamaged(path, f"{name}: chunk {c} is unreadable ({e.strerror or e})") from None
            if got != view.nbytes:
                raise SegmentDamaged(path, f"{name}: chunk {c} read short ({got} bytes)")

        return rows, row_bytes, read_chunk

    def read_into(self, path: str, name: str, out: np.ndarray) -> int:
        """Fill out (the whole array) from the chunk files, which are the chunks' raw
        bytes (zarr's own path is ~10x slower here). Each chunk must be there, whole.
        Returns the CRC-32 of what was read."""
        meta = self._array_meta(path, name)
        if list(meta["shape"]) != list(out.shape) or np.dtype(meta["data_type"]) != out.dtype:
            raise SegmentDamaged(
                path, f"{name} is {meta['data_type']}{meta['shape']}, expected {out.dtype}{list(out.shape)}"
            )
        rows, _, read_chunk = self._chunks(path, name, meta)
        n = out.shape[0]
        flat = out.reshape(n, -1) if out.ndim > 1 else out.reshape(n, 1)
        return read_blocks(flat, [(a, min(n, a + rows)) for a in range(0, n, rows)], read_chunk)

    def stream_crc(self, path: str, name: str) -> int:
        """The CRC-32 read_into would return, one chunk in memory at a time (store sync
        checks what it copied without holding a whole array)."""
        meta = self._array_meta(path, name)
        rows, row_bytes, read_chunk = self._chunks(path, name, meta)
        n, crc = meta["shape"][0], 0
        buf = np.empty(rows * row_bytes, np.uint8)
        for c, a in enumerate(range(0, n, rows)):
            valid = (min(n, a + rows) - a) * row_bytes
            read_chunk(c, buf[:valid])
            crc = zlib.crc32(memoryview(buf[:valid]), crc)  # type: ignore[arg-type]  # numpy is a buffer
        return crc

    def row_locator(self, path: str, name: str):
        """fn(start, stop) -> [(file, byte offset, first row, end row)] covering rows
        [start, stop) of an array, split at chunk ends (for reading single rows)."""
        meta = self._array_meta(path, name)
        rows = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
        row_bytes = int(np.prod(meta["shape"][1:], dtype=np.int64)) * np.dtype(meta["data_type"]).itemsize
        tail = ["0"] * (len(meta["shape"]) - 1)

        def locate(start, stop):
            out = []
            while start < stop:
                c = start // rows
                end = min(stop, (c + 1) * rows)
                out.append((os.path.join(path, name, "c", str(c), *tail), (start - c * rows) * row_bytes, start, end))
                start = end
            return out

        return locate

    def read_legacy(self, path: str, name: str) -> np.ndarray:
        """Format 1 stores wrote no zero chunks: zarr's own reader fills them (upgrade only)."""
        import zarr

        return np.asarray(zarr.open_array(os.path.join(path, name), mode="r")[...])

    def remove(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)


class HDF5Backend:
    name = "hdf5"
    suffix = ".h5"

    def write(self, path: str, arrays: dict[str, np.ndarray], attrs: dict) -> None:
        import h5py

        with h5py.File(path, "w") as f:
            f.attrs["flowclip"] = json.dumps(attrs, sort_keys=True)
            for name, a in arrays.items():
                # contiguous layout: whole-array reads are one sequential read
                f.create_dataset(name, data=a)
            f.flush()
        fsync_tree(path)

    def _open(self, path: str):
        import h5py

        try:
            return h5py.File(path, "r")
        except FileNotFoundError:
            raise SegmentDamaged(path, "the file is missing") from None
        except OSError as e:  # HDF5 notices a truncated file when it opens it
            raise SegmentDamaged(path, f"not a readable HDF5 file ({str(e).splitlines()[0]})") from None

    def attrs(self, path: str) -> dict:
        with self._open(path) as f:
            raw = f.attrs.get("flowclip")
        try:
            out = json.loads(raw)
        except (TypeError, ValueError) as e:
            raise SegmentDamaged(path, f"its 'flowclip' attribute is not JSON ({e})") from None
        if not isinstance(out, dict):
            raise SegmentDamaged(path, "its 'flowclip' attribute is not a JSON object")
        return out

    def array_names(self, path: str) -> list[str]:
        with self._open(path) as f:
            return sorted(f.keys())

    def shape(self, path: str, name: str):
        with self._open(path) as f:
            if name not in f:
                raise SegmentDamaged(path, f"no array {name!r}")
            return tuple(f[name].shape), np.dtype(f[name].dtype)

    def read_into(self, path: str, name: str, out: np.ndarray) -> int:
        """Fill out from the dataset in row blocks of ~16 MiB; returns its CRC-32."""
        with self._open(path) as f:
            if name not in f:
                raise SegmentDamaged(path, f"no array {name!r}")
            ds = f[name]
            if ds.shape != out.shape or ds.dtype != out.dtype:
                raise SegmentDamaged(
                    path, f"{name} is {ds.dtype}{list(ds.shape)}, expected {out.dtype}{list(out.shape)}"
                )
            n = out.shape[0] if out.ndim else 0
            rows = _row_chunks(out.shape, out.itemsize)[0] if out.size else 1

            def read_rows(i, view):
                a = i * rows
                try:
                    ds.read_direct(out, np.s_[a : a + len(view)], np.s_[a : a + len(view)])
                except OSError as e:
                    raise SegmentDamaged(path, f"{name} is unreadable ({str(e).splitlines()[0]})") from None

            if not out.size:
                return 0
            return read_blocks(out, [(a, min(n, a + rows)) for a in range(0, n, rows)], read_rows)

    def row_locator(self, path: str, name: str):
        """As ZarrBackend's: a contiguous dataset is one run of bytes in the file."""
        with self._open(path) as f:
            ds = f[name]
            base = ds.id.get_offset()
            row_bytes = int(np.prod(ds.shape[1:], dtype=np.int64)) * ds.dtype.itemsize
        if base is None and ds.size:
            raise SegmentDamaged(path, f"{name} is not stored contiguously")
        return lambda start, stop: [(path, (base or 0) + start * row_bytes, start, stop)] if stop > start else []

    def read_legacy(self, path: str, name: str) -> np.ndarray:
        shape, dtype = self.shape(path, name)
        out = np.empty(shape, dtype)
        self.read_into(path, name, out)
        return out

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


BACKENDS: dict[str, ZarrBackend | HDF5Backend] = {"zarr": ZarrBackend(), "hdf5": HDF5Backend()}
