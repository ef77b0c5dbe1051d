"""Pair-scoring throughput of the Flow-CLIP scorer (inference, all pairs of a block).

    python benchmarks/bench_score.py [--images 64] [--captions 256] [--reps 9] [--device cpu]

Reports Flow-CLIP pairs/s and the FLOP rate that implies (counting the four pair
products {q, Wq} x {p, Y} = 4 L N d multiply-adds per pair, the irreducible work of
the factorised form) as a fraction of the FP32 matmul rate measured in the same run.
The matmul and every scorer alternate repetition by repetition (ABAB...); each fraction
and ratio is the median of the per-repetition values with their min-max, so load that
moves during the run widens the spread instead of moving the figure. Sides: the
inference kernel (what `score` runs), the layout autograd differentiates (training), and
the direct formula on a quarter of the images. Then the price of fixed shapes
(heads/fixed_shapes.py: every pair's bits the same alone as in any gallery): the
Flow-CLIP head over IMAGE_BLOCK images x the captions, in one call and through
all_pair_scores (blocks of IMAGE_BLOCK images x TEXT_BLOCK captions of one token count).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F

from flowclip_cache.heads import build_head
from flowclip_cache.heads.exact import exact_products
from flowclip_cache.heads.fixed_shapes import IMAGE_BLOCK, all_pair_scores
from flowclip_cache.heads.flow import _token_scores_autograd, _token_scores_inference, token_scores_direct

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternate, ratio  # noqa: E402

N, D, L = 49, 512, 16
MM = (2048, D, 4096)  # the reference matmul: [2048, 512] @ [512, 4096]


def exact_kernel(P, H, mask, Mt, W):
    """The kernel as scoring runs it: every product exact (heads/exact.py)."""
    with exact_products():
        return _token_scores_inference(P, H, mask, Mt, W, 0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--captions", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    dev, I, T = args.device, args.images, args.captions
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(0)
    P = F.normalize(torch.randn(I, N, D, generator=g), dim=-1).to(dev)
    H = F.normalize(torch.randn(T, L, D, generator=g), dim=-1).to(dev)
    mask = torch.ones(T, L, dtype=torch.bool, device=dev)
    Mt = (torch.eye(D) + 0.01 * torch.randn(D, D, generator=g)).to(dev)
    W = (0.02 * torch.randn(D, D, generator=g)).to(dev)
    A = torch.randn(MM[0], MM[1], generator=g).to(dev)
    B = torch.randn(MM[1], MM[2], generator=g).to(dev)
    quarter = max(1, I // 4)
    head = build_head("flow", D).to(dev)
    with torch.no_grad():
        head.M_tok.copy_(Mt), head.W.copy_(W)
    P2 = F.normalize(torch.randn(IMAGE_BLOCK, N, D, generator=g), dim=-1).to(dev)
    v2, t2 = P2.mean(1), H.mean(1)
    with torch.no_grad():
        t = alternate(
            {
                "matmul": lambda: A @ B,
                "kernel": lambda: _token_scores_inference(P, H, mask, Mt, W, 0.05),
                "exact": lambda: exact_kernel(P, H, mask, Mt, W),
                "autograd": lambda: _token_scores_autograd(P, H, mask, Mt, W, 0.05),
                "direct": lambda: token_scores_direct(P[:quarter], H, mask, Mt, W, 0.05),
                "one call": lambda: head(v2, P2, t2, H, mask),
                "fixed shapes": lambda: all_pair_scores(head, v2, P2, t2, H, mask),
            },
            args.reps,
        )
    mm_flop, pair_flop = 2 * MM[0] * MM[1] * MM[2], 2 * 4 * L * N * D
    # the share of the matmul rate, per repetition: (pairs x FLOP / t_side) / (matmul FLOP / t_matmul)
    share = lambda side, pairs: ratio([tm * pairs * pair_flop / mm_flop for tm in t["matmul"]], t[side])
    med = lambda side: statistics.median(t[side])
    print(
        f"# {I} images x {T} captions, d={D}, N={N}, L={L}, device {dev}, torch threads {torch.get_num_threads()}, "
        f"{args.reps} alternated repetitions: median [min, max] of the per-repetition values"
    )
    print(f"fp32 matmul : {mm_flop / med('matmul') / 1e9:8.1f} GFLOP/s ({MM[0]}x{MM[1]} @ {MM[1]}x{MM[2]})")
    for side, name in (("kernel", "flow-clip  "), ("autograd", "autograd   ")):
        m, lo, hi = share(side, I * T)
        rate = I * T / med(side)
        print(
            f"{name} : {rate:10.0f} pairs/s = {rate * pair_flop / 1e9:6.1f} GFLOP/s of pair products | "
            f"{m:.0%} [{lo:.0%}, {hi:.0%}] of the matmul rate"
            + (" (target >= 60%)" if side == "kernel" else " (the layout training differentiates)")
        )
    m, lo, hi = ratio(t["kernel"], t["exact"])
    print(
        f"exact       : {I * T / med('exact'):10.0f} pairs/s, the kernel under exact products (as every score "
        f"runs) | {m:.2f} [{lo:.2f}, {hi:.2f}] of its float32 GEMMs' rate"
    )
    m, lo, hi = ratio([x * I / quarter for x in t["direct"]], t["kernel"])
    rate = quarter * T / med("direct")
    print(f"direct      : {rate:10.0f} pairs/s | the kernel is {m:.1f}x [{lo:.1f}, {hi:.1f}] faster")
    m, lo, hi = ratio(t["one call"], t["fixed shapes"])
    print(
        f"fixed shapes: {IMAGE_BLOCK * T / med('fixed shapes'):10.0f} pairs/s through all_pair_scores | "
        f"{m:.2f} [{lo:.2f}, {hi:.2f}] of the head's one float32 call over the same {IMAGE_BLOCK} x {T} pairs "
        "(fixed blocks and exact products together)"
    )
    coco = 5000 * 25000 / (I * T / med("exact"))
    print(
        f"coco-5k     : 5,000 images x 25,000 captions at the exact kernel's median rate ~ {coco / 60:.1f} min "
        f"(all pairs scored exactly, at these shapes; the score's blocking, reading and memory bound aside)"
    )


if __name__ == "__main__":
    main()
