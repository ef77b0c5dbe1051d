"""What bounds extraction's image phase with decoding in the main process (--workers 0;
docs/performance.md, "Extraction"): one image phase under cProfile, split into the
model's forward, decoding and preprocessing, and everything else flowclip does; then
the forward at extract's fixed 16 images against the bare loop's one batch of 64,
alternated (ABAB), median [min, max] of the per-repetition ratios.

    python benchmarks/bench_extract_parts.py
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))
from _timing import alternate, ratio  # noqa: E402
from bench_extract import make_data  # noqa: E402

from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve  # noqa: E402
from flowclip_cache.extraction.extract import run_extract  # noqa: E402
from flowclip_cache.extraction.features import IMAGE_ROWS  # noqa: E402
from flowclip_cache.store import FeatureStore  # noqa: E402


def cumulative(stats: pstats.Stats, name: str) -> float:
    """Seconds spent in (and under) the functions called `name`, outermost calls only."""
    return max((v[3] for k, v in stats.stats.items() if k[2] == name), default=0.0)  # type: ignore[attr-defined]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.manual_seed(0)
    enc = resolve(EncoderSpec(args.model))
    loaded = load_model(enc)
    with tempfile.TemporaryDirectory() as root:
        make_data(root, args.images, args.images)
        fs = FeatureStore.open_or_create(f"{root}/store", enc.config)
        prof = cProfile.Profile()
        prof.enable()
        s = run_extract(fs, enc, [f"{root}/images.parquet"], f"{root}/images", batch_size=args.batch, workers=0,
                        progress=False, loaded=loaded)  # fmt: skip
        prof.disable()
        st = pstats.Stats(prof)
        total = s.image_seconds
        fwd, dec = cumulative(st, "forward_intermediates"), cumulative(st, "__getitem__")
        print(f"# {args.model}, random weights, {args.images} JPEG images 256 px, batch {args.batch}, workers 0, "
              f"torch threads {torch.get_num_threads()}")  # fmt: skip
        print(f"image phase {total:.2f} s: forward {fwd / total:.1%} | decode + preprocess {dec / total:.1%} | "
              f"everything else {(total - fwd - dec) / total:.1%} (one run under cProfile)")  # fmt: skip
    x = torch.randn(args.batch, 3, *loaded.model.visual.image_size)
    model = loaded.model.eval()

    def fixed():
        with torch.no_grad():
            for i in range(0, len(x), IMAGE_ROWS):
                model.visual.forward_intermediates(x[i : i + IMAGE_ROWS], indices=1, output_fmt="NLC")

    def bare():
        with torch.no_grad():
            model.encode_image(x)

    t = alternate({"fixed": fixed, "bare": bare}, args.reps)
    med, lo, hi = ratio(t["bare"], t["fixed"])
    print(f"forward  : {len(x) // IMAGE_ROWS} x {IMAGE_ROWS} images (extract) vs 1 x {len(x)} (bare loop): "
          f"bare time / fixed time {med:.2f} [{lo:.2f}, {hi:.2f}] ({args.reps} alternated repetitions)")  # fmt: skip


if __name__ == "__main__":
    main()
