"""Extraction cost of each patch readout as a ratio to the standard readout, side by side.

    python benchmarks/bench_readouts.py [--model ViT-B-32] [--batch 32] [--repeats 5]

Encodes the same preprocessed batch (random weights) with every readout, interleaved, best
of --repeats each; a readout adds one attention pass over the last block's weights.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from flowclip_cache.encoders import EncoderSpec, load_model, resolve
from flowclip_cache.features import encode_images
from flowclip_cache.patch_readouts import READOUTS


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
    best = {r: float("inf") for r in READOUTS}
    for _ in range(args.repeats + 1):  # the first round warms up
        for r in READOUTS:
            enc.config = configs[r]
            t = time.perf_counter()
            encode_images(enc, x)
            best[r] = min(best[r], time.perf_counter() - t)
    print(
        f"# {args.model}, random weights, batch {args.batch} at {size} px, best of {args.repeats}, "
        f"torch threads {torch.get_num_threads()}"
    )
    for r in READOUTS:
        print(f"{r:10s}: {args.batch / best[r]:7.1f} img/s | ratio to standard {best[r] / best['standard']:.3f}")


if __name__ == "__main__":
    main()
