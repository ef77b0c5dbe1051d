"""What fixed shapes cost (the same input gives the same bits: docs/store-format.md).

    python benchmarks/bench_fixed_shapes.py [--model ViT-B-32] [--images 64] [--captions 256] [--reps 7]

Images: extract's encode_images (forwards of exactly 16, padded) against one bare
encode_image forward of the whole batch. Captions: encode_texts (forwards of exactly 64,
each caption at its own length bucket) against the bare encode_text at 77 tokens, and
against the batch cut to its longest caption (the rule before fixed shapes). Sides
alternate repetition by repetition (ABAB); the ratios printed are the median of the
per-pair ratios with their min-max, so load that moves during the run widens the spread
instead of moving the ratio.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve
from flowclip_cache.extraction.features import encode_images, encode_texts, text_features

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import abab  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--captions", type=int, default=256)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    torch.manual_seed(0)
    enc = load_model(resolve(EncoderSpec(args.model)))
    size = enc.model.visual.image_size
    size = size[0] if isinstance(size, (tuple, list)) else size
    x = torch.randn(args.images, 3, size, size)
    rng = random.Random(0)
    words = "a red cube left of blue sphere on the large small green metal rubber cylinder behind".split()
    caps = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 20))) for _ in range(args.captions)]
    tok = enc.tokenize(caps)
    print(
        f"# {args.model}, random weights, {args.images} images, {args.captions} captions (4-20 words), "
        f"torch threads {torch.get_num_threads()}, {args.reps} interleaved pairs; ratio = other / flowclip time"
    )

    with torch.no_grad():
        ta, tb, med, lo, hi = abab(lambda: encode_images(enc, x), lambda: enc.model.encode_image(x), args.reps)
        print(
            f"images   : fixed shapes {args.images / ta:7.1f} img/s | one bare forward {args.images / tb:7.1f} img/s"
            f" | bare/fixed time {med:.3f} [{lo:.3f}, {hi:.3f}] (fixed keeps >= 0.95 of the bare rate when this "
            f"is >= 0.95)"
        )
        ta, tb, med, lo, hi = abab(lambda: encode_texts(enc, tok), lambda: enc.model.encode_text(tok.ids), args.reps)
        print(
            f"captions : fixed shapes {args.captions / ta:7.1f} cap/s | bare encode_text@77 "
            f"{args.captions / tb:7.1f} cap/s | speed-up {med:.2f} [{lo:.2f}, {hi:.2f}] (target >= 2)"
        )
        ta, tb, med, lo, hi = abab(lambda: encode_texts(enc, tok), lambda: text_features(enc, tok), args.reps)
        print(
            f"captions : fixed shapes vs one forward cut to the longest caption (the rule before): "
            f"{med:.2f} [{lo:.2f}, {hi:.2f}]"
        )


if __name__ == "__main__":
    sys.exit(main())
