"""All-pairs scoring cost of every registered head, as a ratio to Flow-CLIP's factorised
form, measured side by side in one run (inference, one block of images x captions).

    python benchmarks/bench_heads.py [--images 64] [--captions 256] [--device cpu]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from bench_score import best_of  # (this folder: run as python benchmarks/bench_heads.py)

from flowclip_cache.heads import REGISTRY, build_head

N, D, L = 49, 512, 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--captions", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = a.device
    v = F.normalize(torch.randn(a.images, D), dim=-1).to(dev)
    P = F.normalize(torch.randn(a.images, N, D), dim=-1).to(dev)
    t = F.normalize(torch.randn(a.captions, D), dim=-1).to(dev)
    H = F.normalize(torch.randn(a.captions, L, D), dim=-1).to(dev)
    mask = (torch.arange(L)[None] < torch.randint(6, L + 1, (a.captions, 1))).to(dev)
    pairs = a.images * a.captions
    times = {}
    with torch.no_grad():
        for kind in REGISTRY:
            head = build_head(kind, D).to(dev).eval()
            times[kind] = best_of(lambda: head(v, P, t, H, mask), a.reps, dev)
    print(
        f"# {a.images} images x {a.captions} captions, d={D}, N={N}, L<={L}, device {dev}, "
        f"torch threads {torch.get_num_threads()}; all pairs, inference, best of {a.reps}"
    )
    for kind, sec in times.items():
        print(f"{kind:10s}: {pairs / sec:12.0f} pairs/s | {sec / times['flow']:6.2f}x Flow-CLIP's time")


if __name__ == "__main__":
    main()
