"""Pair-scoring throughput of the Flow-CLIP scorer (inference, all pairs of a block).

    python benchmarks/bench_score.py [--images 64] [--captions 256] [--device cpu]

Reports Flow-CLIP pairs/s, the FLOP rate that implies (counting the four pair
products {q, Wq} x {p, Y} = 4 L N d multiply-adds per pair, the irreducible work of
the factorised form) as a fraction of the FP32 matmul rate measured in the same run,
and the speed-up over the direct formula.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from flowclip_cache.heads import token_scores, token_scores_direct

N, D, L = 49, 512, 16


def best_of(fn, reps, device):
    fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--captions", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    dev, I, T = args.device, args.images, args.captions
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(0)
    P = F.normalize(torch.randn(I, N, D, generator=g), dim=-1).to(dev)
    H = F.normalize(torch.randn(T, L, D, generator=g), dim=-1).to(dev)
    mask = torch.ones(T, L, dtype=torch.bool, device=dev)
    Mt = (torch.eye(D) + 0.01 * torch.randn(D, D, generator=g)).to(dev)
    W = (0.02 * torch.randn(D, D, generator=g)).to(dev)
    A = torch.randn(2048, D, generator=g).to(dev)
    B = torch.randn(D, 4096, generator=g).to(dev)
    with torch.no_grad():
        t_mm = best_of(lambda: A @ B, args.reps, dev)
        mm_rate = 2 * 2048 * D * 4096 / t_mm
        t_fast = best_of(lambda: token_scores(P, H, mask, Mt, W, 0.05), args.reps, dev)
        small = slice(0, max(1, I // 4))
        t_direct = best_of(lambda: token_scores_direct(P[small], H, mask, Mt, W, 0.05), max(2, args.reps // 2), dev)
    pairs = I * T
    rate = pairs / t_fast
    direct_rate = (small.stop * T) / t_direct
    flops = rate * 4 * L * N * D * 2
    print(f"# {I} images x {T} captions, d={D}, N={N}, L={L}, device {dev}, torch threads {torch.get_num_threads()}")
    print(f"fp32 matmul : {mm_rate / 1e9:8.1f} GFLOP/s (2048x{D} @ {D}x4096)")
    print(
        f"flow-clip   : {rate:10.0f} pairs/s = {flops / 1e9:6.1f} GFLOP/s of pair products | "
        f"{flops / mm_rate:.0%} of the matmul rate (target >= 30%)"
    )
    print(f"direct      : {direct_rate:10.0f} pairs/s | factorised is {rate / direct_rate:.1f}x faster")


if __name__ == "__main__":
    main()
