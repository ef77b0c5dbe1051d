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
    row_bytes = max(1, int(np.prod(shape[1:], dtype=np.int64)) * itemsize)
    rows = max(1, min(shape[0] or 1, ROW_CHUNK_BYTES // row_bytes))
    return (rows,) + tuple(shape[1:])


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

    def read(self, path: str, names=None) -> dict[str, np.ndarray]:
        import zarr
        g = zarr.open_group(path, mode="r")
        names = names or list(g.array_keys())
        return {n: g[n][...] for n in names}

    def attrs(self, path: str) -> dict:
        import zarr
        return dict(zarr.open_group(path, mode="r").attrs)

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
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())

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

    def attrs(self, path: str) -> dict:
        import h5py
        import json
        with h5py.File(path, "r") as f:
            return json.loads(f.attrs["flowclip"])

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
