"""Segment files: one immutable group of named arrays, in Zarr v3 or HDF5.

A segment is written under a temporary name and renamed into place when complete
(rename is atomic on POSIX), so a reader never sees a half-written segment and a
crash leaves at most a temporary to sweep. Arrays are stored uncompressed: FP16
features barely compress, and loading a store must run near memmap speed.
"""
from __future__ import annotations

import os
import shutil

import numpy as np

ROW_CHUNK_BYTES = 16 << 20   # target size of one chunk along the row axis


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
    name = "zarr"
    suffix = ".zarr"

    def write(self, path: str, arrays: dict[str, np.ndarray], attrs: dict) -> None:
        import zarr
        g = zarr.open_group(path, mode="w", zarr_format=3)
        g.attrs.update(attrs)
        for name, a in arrays.items():
            arr = g.create_array(name, shape=a.shape, dtype=a.dtype,
                                 chunks=_row_chunks(a.shape, a.dtype.itemsize),
                                 compressors=None, fill_value=0)
            if a.size:
                arr[...] = a
        fsync_tree(path)

    def read(self, path: str, names=None) -> dict[str, np.ndarray]:
        if names is None:
            names = sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n, "zarr.json")))
        out = {}
        for n in names:
            meta = self._meta(path, n)
            a = np.empty(meta["shape"], np.dtype(meta["data_type"]))
            self.read_into(path, n, a, meta)
            out[n] = a
        return out

    @staticmethod
    def _meta(path: str, name: str) -> dict:
        import json
        meta_path = os.path.join(path, name, "zarr.json")
        if not os.path.isfile(meta_path):
            raise KeyError(f"{path}: no array {name!r}")
        return json.load(open(meta_path))

    def read_into(self, path: str, name: str, out: np.ndarray, meta: dict | None = None) -> None:
        """Fill out (the whole array) from the file. Our arrays are uncompressed with
        the default chunk key encoding, so each chunk file is the chunk's raw bytes:
        read them straight into place (zarr's own path is ~10x slower here)."""
        meta = meta or self._meta(path, name)
        if list(meta["shape"]) != list(out.shape) or np.dtype(meta["data_type"]) != out.dtype:
            raise ValueError(f"{path}/{name}: {meta['data_type']}{meta['shape']} does not fit "
                             f"{out.dtype}{list(out.shape)}")
        codecs = meta.get("codecs", [])
        simple = (len(codecs) == 1 and codecs[0]["name"] == "bytes"
                  and codecs[0].get("configuration", {}).get("endian", "little") == "little"
                  and meta.get("chunk_key_encoding", {}).get("name") == "default"
                  and meta.get("chunk_key_encoding", {}).get("configuration", {}).get("separator", "/") == "/"
                  and all(c == s for c, s in zip(meta["chunk_grid"]["configuration"]["chunk_shape"][1:],
                                                 meta["shape"][1:]))
                  and out.dtype.byteorder in ("<", "=", "|") and out.flags.c_contiguous)
        if not simple:
            import zarr
            out[...] = zarr.open_array(os.path.join(path, name), mode="r")[...]
            return
        rows = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
        n = out.shape[0]
        tail = (0,) * (out.ndim - 1)
        flat = out.reshape(n, -1) if out.ndim > 1 else out.reshape(n, 1)
        for c, start in enumerate(range(0, n, rows)):
            stop = min(n, start + rows)
            key = os.path.join(path, name, "c", *map(str, (c,) + tail))
            try:
                with open(key, "rb") as f:
                    f.readinto(memoryview(flat[start:stop]).cast("B"))
            except FileNotFoundError:       # an absent chunk holds the fill value
                flat[start:stop] = 0

    def read_rows(self, path: str, name: str, rows: np.ndarray) -> np.ndarray:
        import zarr
        return zarr.open_array(os.path.join(path, name), mode="r").oindex[rows]

    def shapes(self, path: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        import zarr
        g = zarr.open_group(path, mode="r")
        return {n: (tuple(g[n].shape), np.dtype(g[n].dtype)) for n in g.array_keys()}

    def remove(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)


class HDF5Backend:
    name = "hdf5"
    suffix = ".h5"

    def write(self, path: str, arrays: dict[str, np.ndarray], attrs: dict) -> None:
        import h5py
        import json
        with h5py.File(path, "w") as f:
            f.attrs["flowclip"] = json.dumps(attrs, sort_keys=True)
            for name, a in arrays.items():
                # contiguous layout: whole-array reads are one sequential read
                f.create_dataset(name, data=a)
            f.flush()
        fsync_tree(path)

    def read(self, path: str, names=None) -> dict[str, np.ndarray]:
        import h5py
        with h5py.File(path, "r") as f:
            names = names or list(f.keys())
            out = {}
            for n in names:
                ds = f[n]
                a = np.empty(ds.shape, ds.dtype)
                if a.size:
                    ds.read_direct(a)
                out[n] = a
            return out

    def read_into(self, path: str, name: str, out: np.ndarray) -> None:
        import h5py
        with h5py.File(path, "r") as f:
            if out.size:
                f[name].read_direct(out)

    def read_rows(self, path: str, name: str, rows: np.ndarray) -> np.ndarray:
        import h5py
        with h5py.File(path, "r") as f:
            return f[name][np.asarray(rows)]      # h5py needs increasing indices

    def shapes(self, path: str):
        import h5py
        with h5py.File(path, "r") as f:
            return {n: (tuple(f[n].shape), np.dtype(f[n].dtype)) for n in f.keys()}

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


BACKENDS = {"zarr": ZarrBackend(), "hdf5": HDF5Backend()}
