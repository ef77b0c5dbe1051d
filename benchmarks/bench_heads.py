"""All-pairs scoring cost of every registered head, as a ratio to Flow-CLIP's factorised
form, measured side by side in one run (inference, one block of images x captions).

    python benchmarks/bench_heads.py [--images 64] [--captions 256] [--reps 5] [--device cpu]

The heads run in turn within each repetition; each ratio is the median of the
per-repetition ratios to Flow-CLIP's time with their min-max.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F

from flowclip_cache.heads import REGISTRY, build_head

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternate, ratio  # noqa: E402

N, D, L = 49, 512, 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--captions", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = a.device
    v = F.normalize(torch.randn(a.images, D), dim=-1).to(dev)
    P = F.normalize(torch.randn(a.images, N, D), dim=-1).to(dev)
    t = F.normalize(torch.randn(a.captions, D), dim=-1).to(dev)
    H = F.normalize(torch.randn(a.captions, L, D), dim=-1).to(dev)
    mask = (torch.arange(L)[None] < torch.randint(6, L + 1, (a.captions, 1))).to(dev)
    pairs = a.images * a.captions
    heads = {kind: build_head(kind, D).to(dev).eval() for kind in REGISTRY}
    with torch.no_grad():
        times = alternate({k: (lambda h=h: h(v, P, t, H, mask)) for k, h in heads.items()}, a.reps)
    print(
        f"# {a.images} images x {a.captions} captions, d={D}, N={N}, L<={L}, device {dev}, "
        f"torch threads {torch.get_num_threads()}; all pairs, inference, {a.reps} alternated repetitions"
    )
    for kind, sec in times.items():
        med, lo, hi = ratio(sec, times["flow"])
        rate = pairs / statistics.median(sec)
        print(f"{kind:10s}: {rate:12.0f} pairs/s | {med:8.2g}x [{lo:.2g}, {hi:.2g}] Flow-CLIP's time")


if __name__ == "__main__":
    main()
