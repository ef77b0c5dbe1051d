"""Extract's rerun cost in hashing: image files whose size, mtime and inode the store
recorded are not read again. Compares collect() (manifests -> keys) with the store's
digests against hashing every file (--rehash), interleaved in one run.

    python benchmarks/bench_rehash.py [--files 2000] [--kib 160] [--reps 5]

The files are random bytes of a COCO-like JPEG size, read from the page cache: hashing
is CPU-bound here, and a cold disk would make the difference larger. The sides alternate
repetition by repetition; the ratio is the median of the per-repetition ratios with
their min-max."""

import argparse
import os
import statistics
import sys
import tempfile

import numpy as np
import pyarrow as pa

from flowclip_cache.extraction.plan import collect
from flowclip_cache.manifest import write_manifest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternate, ratio  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--kib", type=int, default=160)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(f"{root}/images")
        for i in range(args.files):
            with open(f"{root}/images/{i:06d}.jpg", "wb") as f:
                f.write(rng.bytes(args.kib * 1024))
        manifest = f"{root}/m.parquet"
        write_manifest(
            manifest,
            pa.Table.from_pylist(
                [
                    {"record_id": str(i), "image": f"{i:06d}.jpg", "captions": ["a", "b"], "gold": 0}
                    for i in range(args.files)
                ]
            ),
            "candidates",
        )
        first = collect([manifest], f"{root}/images")
        known = {p: (sig, d) for p, sig, d in first.new_digests}

        def cached():
            c = collect([manifest], f"{root}/images", known_digests=known)
            assert not c.new_digests and c.images.keys() == first.images.keys()

        t = alternate({"cached": cached, "rehash": lambda: collect([manifest], f"{root}/images")}, args.reps)
        med, lo, hi = ratio(t["cached"], t["rehash"])
        mb = args.files * args.kib / 1024
        print(f"# {args.files} files of {args.kib} KiB ({mb:.0f} MiB, page cache), {os.cpu_count()} CPUs")
        print(
            f"rerun collect: recorded digests {statistics.median(t['cached']):.3f} s | hash every file "
            f"{statistics.median(t['rehash']):.3f} s | ratio {med:.3f} [{lo:.3f}, {hi:.3f}] "
            f"({args.reps} alternated repetitions)"
        )


if __name__ == "__main__":
    sys.exit(main())
