"""The ablation engine's parts (issue 54): stacked steps, matched-pair evaluation, imports.

    python benchmarks/bench_ablation.py [--reps 5] [--heads 8] [--device cpu]

ViT-B/32 shapes (d 512, 49 patches, 16 tokens), random unit features, batch 32 records x
64 candidates. Each comparison alternates its sides repetition by repetition (ABAB) and
prints the median of the per-repetition ratios with their [min, max]:

- stacked: --heads Global-M heads, then --heads Flow-CLIP heads (learning rates differing),
  one optimiser step each: side by side (each head its own forward, backward, clip and
  AdamW) against stacked (training/stacked.py: one vmap'd forward and backward, then each
  head's own clip and AdamW). Targets: >= 3x for Global-M, >= 2x for Flow-CLIP.
- matched: Flow-CLIP's matched-pair evaluation (heads/fixed_shapes.matched_scores, 4
  captions per image, each image's parts once) against the all-pairs scoring kernel, in
  pairs/s. Target: >= 0.5 of the kernel's per-pair rate.
- imports: a fresh process that builds training's AdamW and sets the deterministic flag,
  as train-head does, against the same with torch.optim.AdamW and
  torch.use_deterministic_algorithms (which import torch's compiler stack).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F

from flowclip_cache.heads.fixed_shapes import all_pair_scores, matched_scores
from flowclip_cache.training.adamw import AdamW
from flowclip_cache.training.losses import batch_loss
from flowclip_cache.training.stacked import StackedStep
from flowclip_cache.training.train_config import TrainConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import abab, alternate, ratio  # noqa: E402

B, N, D, L = 32, 49, 512, 16


def features(g, images: int, captions: int, device):
    unit = lambda *s: F.normalize(torch.randn(*s, generator=g), dim=-1).to(device)  # noqa: E731
    mask = torch.ones(captions, L, dtype=torch.bool, device=device)
    return unit(images, D), unit(images, N, D), unit(captions, D), unit(captions, L, D), mask


def runs(kind: str, n: int, device):
    """n heads of one kind in a step's shape (a HeadRun's step without its folder)."""

    def run(i):
        cfg = TrainConfig(head=kind, lr=1e-4 * (i + 1))
        head = cfg.build_head(D).to(device)
        params = list(head.parameters())
        opt = AdamW(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)

        def take_step(img, loss, terms, parts):
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()

        return SimpleNamespace(
            head=head, cfg=cfg, params=params, opt=opt, check_loss=lambda x: None, take_step=take_step
        )

    return [run(i) for i in range(n)]


def bench_stacked(kind: str, n: int, reps: int, device) -> None:
    g = torch.Generator().manual_seed(0)
    feats = features(g, B, 2 * B, device)
    img, pos, neg = (torch.arange(a, a + B, device=device) for a in (0, 0, B))
    group = runs(kind, n, device)
    stacked = StackedStep(group)

    def side_by_side():
        for r in group:
            loss, terms, parts = batch_loss(r.head, r.cfg, img, pos, neg, feats)
            r.opt.zero_grad(set_to_none=True)
            loss.backward()
            r.take_step(img, loss, terms, parts)

    a, b, med, lo, hi = abab(lambda: stacked.step(img, pos, neg, feats), side_by_side, reps)
    target = 3 if kind == "global" else 2
    print(
        f"stacked  : {n} {kind} heads, one step each: side by side {1e3 * b:7.1f} ms | stacked {1e3 * a:7.1f} ms | "
        f"speed-up {med:.2f} [{lo:.2f}, {hi:.2f}] (target >= {target})"
    )


def bench_matched(reps: int, device) -> None:
    g = torch.Generator().manual_seed(1)
    images, per_image = 128, 4
    v, P, t, H, mask = features(g, images, images * per_image, device)
    head = TrainConfig(head="flow").build_head(D).to(device)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g).to(device))
    image_of = torch.arange(images, device=device).repeat_interleave(per_image)
    T = 64  # the kernel's caption block
    with torch.no_grad():
        times = alternate(
            {
                "matched": lambda: matched_scores(head, v, P, t, H, mask, image_of=image_of),
                "kernel": lambda: all_pair_scores(head, v, P, t[:T], H[:T], mask[:T]),
            },
            reps,
        )
    per_pair = {
        "matched": [x / len(t) for x in times["matched"]],
        "kernel": [x / (images * T) for x in times["kernel"]],
    }
    med, lo, hi = ratio(per_pair["kernel"], per_pair["matched"])  # matched rate / kernel rate
    rate = lambda side: 1 / sorted(per_pair[side])[len(per_pair[side]) // 2]  # noqa: E731
    print(
        f"matched  : Flow-CLIP matched pairs ({per_image} captions an image) {rate('matched'):8.0f} pairs/s | "
        f"all-pairs kernel {rate('kernel'):8.0f} pairs/s | ratio {med:.2f} [{lo:.2f}, {hi:.2f}] (target >= 0.5)"
    )


IMPORTS = {
    "flowclip": "from flowclip_cache.training.adamw import AdamW as A; set_flag = "
    "lambda: torch._C._set_deterministic_algorithms(True, warn_only=True)",
    "torch.optim": "A = torch.optim.AdamW; set_flag = lambda: torch.use_deterministic_algorithms(True, warn_only=True)",
}


def bench_imports(reps: int) -> None:
    """A fresh process: import torch and training, build AdamW, set the flag, one step."""

    def proc(kind):
        code = (
            f"import sys, torch; {IMPORTS[kind]}\n"
            "import flowclip_cache.training.loop\n"
            "p = torch.nn.Parameter(torch.zeros(4)); o = A([p], lr=1e-3); set_flag()\n"
            "p.grad = torch.ones(4); o.step()\n"
            "assert ('torch._dynamo' in sys.modules) == (sys.argv[1] == 'torch.optim')\n"
        )
        env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
        return lambda: subprocess.run([sys.executable, "-c", code, kind], check=True, env=env)

    a, b, med, lo, hi = abab(proc("flowclip"), proc("torch.optim"), reps)
    print(
        f"imports  : a training process with torch.optim's AdamW and flag {b:5.2f} s | flowclip's {a:5.2f} s | "
        f"ratio {med:.2f} [{lo:.2f}, {hi:.2f}] (compiler stack imported: torch.optim yes, flowclip no)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", choices=["stacked", "matched", "imports"], default=None)
    a = ap.parse_args()
    threads = torch.get_num_threads()
    print(f"# d {D}, {N} patches, {L} tokens, batch {B}; torch threads {threads}; {a.reps} alternated reps")
    if a.only in (None, "stacked"):
        bench_stacked("global", a.heads, a.reps, a.device)
        bench_stacked("flow", a.heads, a.reps, a.device)
    if a.only in (None, "matched"):
        bench_matched(a.reps, a.device)
    if a.only in (None, "imports"):
        bench_imports(a.reps)


if __name__ == "__main__":
    main()
