"""Extraction cost of each patch readout as a ratio to the standard readout, side by side.

    python benchmarks/bench_readouts.py [--model ViT-B-32] [--batch 32] [--repeats 5]

Encodes the same preprocessed batch (random weights) with every readout, the readouts in
turn within each repetition; each ratio is the median of the per-repetition ratios to the
standard readout's time with their min-max. A readout adds one attention pass over the
last block's weights.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve
from flowclip_cache.extraction.features import encode_images
from flowclip_cache.extraction.patch_readouts import READOUTS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternate, ratio  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    enc = load_model(resolve(EncoderSpec(args.model)))
    size = enc.model.visual.image_size[0]
    x = torch.randn(args.batch, 3, size, size, generator=torch.Generator().manual_seed(0))
    configs = {r: resolve(EncoderSpec(args.model, patch_readout=r)).config for r in READOUTS}

    def encode(readout):
        enc.config = configs[readout]
        encode_images(enc, x)

    times = alternate({r: (lambda r=r: encode(r)) for r in READOUTS}, args.repeats)
    print(
        f"# {args.model}, random weights, batch {args.batch} at {size} px, {args.repeats} alternated "
        f"repetitions, torch threads {torch.get_num_threads()}"
    )
    for r in READOUTS:
        med, lo, hi = ratio(times[r], times["standard"])
        rate = args.batch / statistics.median(times[r])
        print(f"{r:16s}: {rate:7.1f} img/s | time ratio to standard {med:.3f} [{lo:.3f}, {hi:.3f}]")


if __name__ == "__main__":
    main()
