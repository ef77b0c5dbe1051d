"""Loading a whole store: checked reads (CRC-32 of every array, format 2, computed on a
second thread while the next block is read) against a numpy memmap copy of the same
arrays, side by side in one run, all from the page cache. Random unit-norm FP16 features written directly (no
encoder; labelled synthetic).

    python benchmarks/bench_load.py [--images 2000] [--captions 20000] [--reps 7]

The two sides alternate repetition by repetition (ABAB); the ratio is the median of the
per-repetition ratios with their min-max.
"""

import argparse
import os
import sys
import tempfile

import numpy as np

from flowclip_cache.hashing import caption_key
from flowclip_cache.store import CAPTION, IMAGE

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _synthetic import synthetic_store  # noqa: E402
from _timing import abab  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--captions", type=int, default=20000)
    ap.add_argument("--backend", default="zarr")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--parts", action="store_true", help="also time the checked read's parts, one thread each")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        images = [caption_key(f"i{i}") for i in range(a.images)]
        fs = synthetic_store(f"{root}/s", images, [caption_key(f"c{i}") for i in range(a.captions)], a.backend)
        ik, ck = fs.keys(IMAGE), fs.keys(CAPTION)
        im, cp = fs.load_images(ik), fs.load_captions(ck)
        arrays = {"ig": im.global_, "ip": im.patches, "cg": cp.global_, "ct": cp.tokens}
        for k, arr in arrays.items():
            np.save(f"{root}/{k}.npy", arr)
        os.sync()
        checked = lambda: (fs.load_images(ik), fs.load_captions(ck))
        memmap = lambda: {k: np.array(np.load(f"{root}/{k}.npy", mmap_mode="r")) for k in arrays}
        t_checked, t_memmap, med, lo, hi = abab(checked, memmap, a.reps)
        mb = sum(arr.nbytes for arr in arrays.values()) / 2**20
        print(f"{a.backend}, {mb:.0f} MiB (synthetic features), {a.reps} alternated repetitions, page cache:")
        print(f"  checked    {mb / t_checked:7.0f} MiB/s (median)")
        print(f"  memmap     {mb / t_memmap:7.0f} MiB/s (median)")
        print(f"  ratio checked / memmap speed {med:.2f} [{lo:.2f}, {hi:.2f}] (target >= 0.5)")
        if a.parts:
            parts(fs, mb, a.reps)


def parts(fs, mb: float, reps: int) -> None:
    """What bounds the checked read: the backend's reads alone (its CRC-32 replaced by a
    no-op) and zlib's CRC-32 alone over the same bytes, each on one thread, alternated."""
    import time
    import zlib

    from flowclip_cache.store import backends

    jobs = [(seg.path, name) for seg in fs.segments for name in fs.backend.array_names(seg.path)]
    bufs = {job: np.empty(*fs.backend.shape(*job)) for job in jobs}

    class NoCrc:
        @staticmethod
        def crc32(data, value=0):
            return 0

    def read_only():
        backends.zlib = NoCrc
        try:
            for (path, name), out in bufs.items():
                fs.backend.read_into(path, name, out)
        finally:
            backends.zlib = zlib

    def crc_only():
        for out in bufs.values():
            zlib.crc32(memoryview(out.reshape(-1).view(np.uint8)))

    times: dict[str, list[float]] = {"read": [], "crc": []}
    for _ in range(reps):
        for name, fn in (("read", read_only), ("crc", crc_only)):
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    med = lambda k: sorted(times[k])[len(times[k]) // 2]  # noqa: E731
    print(f"  parts, one thread each ({reps} alternated repetitions, median):")
    print(f"    backend reads alone {mb / med('read'):7.0f} MiB/s")
    print(f"    CRC-32 alone        {mb / med('crc'):7.0f} MiB/s")
    print(f"    both in sequence    {mb / (med('read') + med('crc')):7.0f} MiB/s (the checked read on one thread)")


if __name__ == "__main__":
    sys.exit(main())
