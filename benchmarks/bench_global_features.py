"""`extract --features global` against a full extract: wall time and disk of the same
images and captions, each side a fresh store, the two alternated repetition by repetition.

    python benchmarks/bench_global_features.py [--model ViT-B-32] [--images 64] [--reps 3]

Prints each side's median seconds and bytes, and global / all as the median of the
per-repetition ratios with their min-max (random weights, the synthetic sample's images)."""

import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternate, ratio  # noqa: E402


def _size(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve
    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.synthetic.sample import make_sample

    work = tempfile.mkdtemp(prefix="bench-global-")
    sample = make_sample(os.path.join(work, "sample"), n_images=args.images)
    enc = resolve(EncoderSpec(args.model))
    model = load_model(enc)
    sizes: dict[str, list[int]] = {"global": [], "all": []}

    def side(features: str):
        def run():
            root = os.path.join(work, features)
            shutil.rmtree(root, ignore_errors=True)
            store = FeatureStore.open_or_create(root, enc.config)
            run_extract(store, enc, [sample["candidates"]], sample["image_root"], workers=0, progress=False,
                        loaded=model, features=features, log=lambda *a: None)  # fmt: skip
            sizes[features].append(_size(root))

        return run

    t = alternate({"global": side("global"), "all": side("all")}, args.reps)
    med, lo, hi = ratio(t["global"], t["all"])
    g, a = statistics.median(sizes["global"]), statistics.median(sizes["all"])
    print(f"# {args.model}, random weights, {args.images} images and their captions, {os.cpu_count()} CPUs")
    print(f"time: global {statistics.median(t['global']):.2f} s | all {statistics.median(t['all']):.2f} s | "
          f"ratio {med:.3f} [{lo:.3f}, {hi:.3f}] ({args.reps} alternated repetitions)")  # fmt: skip
    print(f"disk: global {g / 2**20:.2f} MiB | all {a / 2**20:.2f} MiB | ratio {g / a:.3f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
