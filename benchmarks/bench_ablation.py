"""The ablation engine's parts: stacked steps, matched-pair evaluation, imports.

    python benchmarks/bench_ablation.py [--reps 5] [--heads 8] [--device cpu]

ViT-B/32 shapes (d 512, 49 patches, 16 tokens), random unit features, batch 32 records x
64 candidates. Each comparison alternates its sides repetition by repetition (ABAB) and
prints the median of the per-repetition ratios with their [min, max]:

- stacked: --heads Global-M heads, then --heads Flow-CLIP heads (learning rates differing),
  one optimiser step each: side by side (each head its own forward, backward, clip and
  AdamW) against stacked (training/stacked.py: one vmap'd forward and backward, then each
  head's own clip and AdamW). Targets: >= 3x for Global-M, >= 2x for Flow-CLIP. Then,
  side by side, the forwards and backwards alone against the clips and AdamW steps alone
  (what a stack could remove, and what it leaves: every head's own optimiser step).
- matched: Flow-CLIP's matched-pair evaluation (heads/fixed_shapes.matched_scores, 4
  captions per image, pair by pair) against the all-pairs scoring kernel, in pairs/s.
  Target: >= 0.5 of the kernel's per-pair rate.
- end to end (--end-to-end ROOT): a 1/20-COCO store of ViT-B/32 shapes (5,664 images,
  28,321 records; bench_scale.py's generator, kept under ROOT) and a 250-image retrieval
  gallery; 8 variants (Tab. 2's four rows at two learning rates), 20 steps each, trained
  and scored as 16 commands, as one `flowclip run ablation` study, and as one stacked
  study (stack=true), alternated; beside them, every round, the arithmetic alone (the 8
  heads' 20 steps and their gallery scores, in-process, and apart from it their end
  evaluations, the 8 together as a study evaluates runs that end together: each round's
  median is used, as this machine's speed drifts), and where each study's wall went as it
  recorded it (summary.json's stage_seconds: imports, checks, loading, steps, evaluation,
  checkpoints, scoring, summary). Targets: overhead (wall - arithmetic) <= 15% of the
  study's wall; the study >= 2.5x faster than the 16 commands.
- paper estimate (--paper-estimate ROOT [--fraction F]): Tab. 2's ablation
  (pipelines/ablation.yaml) on a COCO training set of ViT-B/32 shapes (x F), as the study's
  dry run plans and times it on --device (the GPU suite's ablation line, at F = 1).
- gallery: a 250 x 1,250 Flow-CLIP gallery through all_pair_scores (each image's and
  caption's projections once) against the same fixed blocks calling the head on raw
  features (as before: projections again in every block).
- imports: a fresh process that builds training's AdamW and sets the deterministic flag,
  as train-head does, against the same with torch.optim.AdamW and
  torch.use_deterministic_algorithms (which import torch's compiler stack); then each
  command's own import cost (train-head, score, run ablation) and whether the compiler
  stack came with it.
"""

from __future__ import annotations

import argparse
import os
import statistics
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
from _timing import abab, alternate, ratio, timed  # noqa: E402

B, N, D, L = 32, 49, 512, 16


def features(g, images: int, captions: int, device):
    unit = lambda *s: F.normalize(torch.randn(*s, generator=g), dim=-1).to(device)  # noqa: E731
    mask = torch.ones(captions, L, dtype=torch.bool, device=device)
    return unit(images, D), unit(images, N, D), unit(captions, D), unit(captions, L, D), mask


def runs(kind: str, n: int, device):
    """n heads of one kind in a step's shape (a HeadRun's step without its folder)."""

    def run(i):
        cfg = TrainConfig(head=kind, lr=1e-4 * (i + 1))
        head = cfg.build_head(D).to(device).to(device)
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

    a, b, med, lo, hi = abab(lambda: stacked.apply(stacked.compute(img, pos, neg, feats), img), side_by_side, reps)
    target = 3 if kind == "global" else 2
    print(
        f"stacked  : {n} {kind} heads, one step each: side by side {1e3 * b:7.1f} ms | stacked {1e3 * a:7.1f} ms | "
        f"speed-up {med:.2f} [{lo:.2f}, {hi:.2f}] (target >= {target})"
    )
    # what a stack could remove: side by side, the forwards and backwards against the clips
    # and AdamW steps (each head's own, stacked or not), alternated
    last = {}

    def forward_backward():
        for r in group:
            loss, terms, parts = batch_loss(r.head, r.cfg, img, pos, neg, feats)
            r.opt.zero_grad(set_to_none=True)
            loss.backward()
            last[id(r)] = (loss, terms, parts)

    def optimiser():
        for r in group:
            r.take_step(img, *last[id(r)])

    forward_backward()
    t = alternate({"fb": forward_backward, "opt": optimiser}, reps)
    fb, opt = (1e3 * statistics.median(t[k]) for k in ("fb", "opt"))
    print(
        f"           side by side: forwards and backwards {fb:7.1f} ms | clips and AdamW steps {opt:7.1f} ms (medians)"
    )


def bench_matched(reps: int, device) -> None:
    """Matched pairs (4 captions an image, pair by pair: heads/flow.matched_token_scores)
    against the all-pairs kernel, and against the paired layout training differentiates
    (score_matched per block of 32 without autograd: Y = P~ W^T again for every pair)."""
    g = torch.Generator().manual_seed(1)
    images, per_image = 128, 4
    v, P, t, H, mask = features(g, images, images * per_image, device)
    head = TrainConfig(head="flow").build_head(D).to(device)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=g).to(device))
    image_of = torch.arange(images, device=device).repeat_interleave(per_image)
    blocks = torch.arange(len(t), device=device).split(32)
    T = 64  # the kernel's caption block
    with torch.no_grad():
        times = alternate(
            {
                "matched": lambda: matched_scores(head, v, P, t, H, mask, image_of=image_of),
                "kernel": lambda: all_pair_scores(head, v, P, t[:T], H[:T], mask[:T]),
                "paired": lambda: [head.score_matched(v[image_of[k]], P[image_of[k]], *(x[k] for x in (t, H, mask)))
                                   for k in blocks],
            },
            reps,
        )  # fmt: skip
    per_pair = {k: [x / (images * T if k == "kernel" else len(t)) for x in xs] for k, xs in times.items()}
    rate = lambda side: 1 / sorted(per_pair[side])[len(per_pair[side]) // 2]  # noqa: E731
    med, lo, hi = ratio(per_pair["kernel"], per_pair["matched"])  # matched rate / kernel rate
    print(
        f"matched  : Flow-CLIP matched pairs ({per_image} captions an image) {rate('matched'):8.0f} pairs/s | "
        f"all-pairs kernel {rate('kernel'):8.0f} pairs/s | ratio {med:.2f} [{lo:.2f}, {hi:.2f}] (target >= 0.5)"
    )
    med, lo, hi = ratio(per_pair["paired"], per_pair["matched"])
    print(f"           against the paired layout (Y for every pair): {rate('paired'):8.0f} pairs/s | "
          f"{med:.2f}x [{lo:.2f}, {hi:.2f}]")  # fmt: skip


def bench_gallery(reps: int, device) -> None:
    """A 250 x 1,250 gallery (8-18 tokens a caption) through all_pair_scores, which computes
    each image's and caption's projections once, against the same blocks each calling the
    head on raw features (what it did before: Y again for every 64 captions, q and w again
    for every 128 images)."""
    from flowclip_cache.heads.fixed_shapes import IMAGE_BLOCK, TEXT_BLOCK

    g = torch.Generator().manual_seed(2)
    images, captions = 250, 1250
    lens = torch.randint(8, 19, (captions,), generator=g).sort().values  # as retrieval orders them
    v, P, t, H, _ = features(g, images, captions, device)
    H = H[:, : int(lens.max())]
    mask = (torch.arange(H.shape[1])[None] < lens[:, None]).to(device)
    head = TrainConfig(head="flow").build_head(D).to(device)

    def per_block():
        for ell in lens.unique().tolist():
            idx = torch.nonzero(lens == ell).flatten()
            for b in range(0, len(idx), TEXT_BLOCK):
                k = idx[b : b + TEXT_BLOCK]
                for i0 in range(0, images, IMAGE_BLOCK):
                    r = torch.arange(i0, min(images, i0 + IMAGE_BLOCK))
                    head(v[r], P[r], t[k], H[k, :ell], mask[k, :ell])

    with torch.no_grad():
        a, b, med, lo, hi = abab(lambda: all_pair_scores(head, v, P, t, H, mask), per_block, reps)
    print(
        f"gallery  : Flow-CLIP {images} x {captions}: head per block {b:6.2f} s | parts once {a:6.2f} s | "
        f"speed-up {med:.2f} [{lo:.2f}, {hi:.2f}] ({images * captions / a:.0f} pairs/s)"
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


COMMAND_IMPORTS = {  # what each command imports before its work begins
    "train-head": "flowclip_cache.cli, flowclip_cache.training.loop",
    "score": "flowclip_cache.cli, flowclip_cache.scoring.score, flowclip_cache.training.run_folder",
    "run ablation": "flowclip_cache.cli, flowclip_cache.studies.ablation, flowclip_cache.training.loop, "
    "flowclip_cache.scoring.score",
}


def bench_command_imports(reps: int) -> None:
    """Each command's import cost: a fresh process importing what the command imports (median
    of reps), and whether torch's compiler stack came with it."""
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    out = []
    for name, modules in COMMAND_IMPORTS.items():
        code = (
            "import sys, time; t = time.perf_counter()\n"
            + "".join(f"import {m}\n" for m in modules.split(", "))
            + "print(time.perf_counter() - t, any(m.startswith('torch._dynamo') for m in sys.modules))"
        )
        runs = [subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True, text=True)
                for _ in range(reps)]  # fmt: skip
        seconds = sorted(float(r.stdout.split()[0]) for r in runs)[reps // 2]
        stack = "yes" if any(r.stdout.split()[1] == "True" for r in runs) else "no"
        out.append(f"{name} {seconds:.2f} s (compiler stack: {stack})")
    print("imports  : each command's own, fresh processes: " + ", ".join(out))


VARIANTS = {
    f"{name}_lr{i}": {"head": head, "cimr": cimr, "lr": lr}
    for name, head, cimr in [("global", "global", 0.0), ("global_cimr", "global", 0.1),
                             ("flow_hnb", "flow", 0.0), ("flow_hnb_cimr", "flow", 0.1)]
    for i, lr in enumerate((8e-5, 3e-4))
}  # fmt: skip
STEPS = 20


def _flowclip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "flowclip_cache", *args], check=True, stdout=subprocess.DEVNULL)


def _commands(store: str, train: str, gallery: str, out: str, device: str, variants: dict) -> None:
    """Each variant as train-head then score, one process each."""
    for name, v in variants.items():
        run = os.path.join(out, name)
        _flowclip("train-head", "--store", store, "--train", train, "--out", run, "--head", v["head"],
                  "--cimr", str(v["cimr"]), "--lr", str(v["lr"]), "--epochs", "1", "--max-steps", str(STEPS),
                  "--device", device, "--quiet")  # fmt: skip
        _flowclip("score", "--store", store, "--manifests", gallery, "--scorer", run, "--out", run + "-scores",
                  "--bootstrap", "0", "--no-figures", "--device", device, "--quiet")  # fmt: skip


def _study(store: str, train: str, gallery: str, out: str, stack: bool, device: str, variants: dict) -> None:
    heads = (
        "{"
        + ", ".join(f"{k}: {{head: {v['head']}, cimr: {v['cimr']}, lr: {v['lr']:.6f}}}" for k, v in variants.items())
        + "}"
    )
    _flowclip("run", "ablation", f"store={store}", f"train={train}", f"eval=[{gallery}]", f"out={out}", "seeds=[0]",
              f"heads={heads}", f"train_config={{epochs: 1, batch_size: 32, max_steps: {STEPS}}}", "bootstrap=0",
              "compare=[]", "figures=false", f"device={device}", f"stack={str(stack).lower()}")  # fmt: skip


def _arithmetic(store: str, train: str, gallery: str, device: str, variants: dict) -> dict[str, float]:
    """Seconds of the 8 variants' 20 steps, their end evaluations (the pairwise accuracy a
    run logs: 2,000 training-sample records and the val records; the 8 heads together, each
    chunk's features gathered once, as a study evaluates runs that end together) and gallery
    scores alone, on loaded data, steps and scores summed over the variants."""
    import time

    import numpy as np

    from flowclip_cache.manifest import Manifest
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.store.banks import FeatureBank
    from flowclip_cache.training.training_data import _pairwise_accuracies, load_training_data

    fs = FeatureStore(store)
    data = load_training_data(fs, Manifest.read(train), True, device, log=lambda *_: None)
    train_rec = np.nonzero(data.split == "train")[0]
    sample = np.sort(np.random.default_rng(0).choice(train_rec, min(2000, len(train_rec)), replace=False))
    val = np.nonzero(data.split == "val")[0]
    g = Manifest.read(gallery).table.to_pydict()
    texts = sorted({c for cs in g["captions"] for c in cs})
    n_images = len(set(g["image_key"]))
    bank = FeatureBank.load(fs, sorted(set(g["image_key"])), texts, True, device)
    total = {"steps": 0.0, "evaluation": 0.0, "gallery": 0.0}
    heads = []
    for v in variants.values():
        cfg = TrainConfig(head=v["head"], cimr=v["cimr"], lr=v["lr"])
        head = cfg.build_head(D).to(device)
        opt = AdamW(list(head.parameters()), lr=cfg.lr)
        rec = torch.arange(STEPS * 32)
        t0 = time.perf_counter()
        for s in range(STEPS):
            r = rec[s * 32 : (s + 1) * 32]
            img, pos, neg = data.rec_image[r], data.rec_pos[r], data.rec_neg[r, 0]
            loss = batch_loss(head, cfg, img, pos, neg, data.features(img, torch.cat([pos, neg]), head.uses_tokens))[0]
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(head.parameters()), cfg.grad_clip)
            opt.step()
        t1 = time.perf_counter()
        head.eval()
        heads.append(head)
        with torch.no_grad():
            order = torch.argsort(bank.token_lengths(), stable=True)  # as retrieval orders them
            all_pair_scores(head, *bank.features(torch.arange(n_images), order, head.uses_tokens))
        t2 = time.perf_counter()
        total["steps"] += t1 - t0
        total["gallery"] += t2 - t1
    t0 = time.perf_counter()  # the 8 heads end together in a study, evaluated together (head_run.evaluate_together)
    _pairwise_accuracies(heads, data, sample, 512)
    _pairwise_accuracies(heads, data, val, 512)
    total["evaluation"] = time.perf_counter() - t0
    return total


def bench_end_to_end(root: str, reps: int, device: str = "cpu", fraction: float = 0.05, n_variants: int = 8) -> None:
    import json
    import shutil
    import tempfile

    from bench_scale import COCO_IMAGES, write_store
    from bench_scale import gallery as make_gallery

    variants = dict(list(VARIANTS.items())[:n_variants])
    store, train = write_store(root, fraction)
    n_gallery = min(250, int(COCO_IMAGES * fraction) // 10)  # 250 from 5% of COCO on
    gallery = make_gallery(root, store, n_gallery)
    arithmetic: list[dict[str, float]] = []  # measured every round too: this machine's speed drifts
    stages: dict[str, list[dict]] = {"study": [], "stacked": []}

    def fresh(fn, side=None):
        def run():
            out = tempfile.mkdtemp(dir=root)
            try:
                fn(out)
                if side:  # where the study's time went, as it recorded it (progress.stage)
                    summary = json.load(open(os.path.join(out, "s", "summary.json")))
                    stages[side].append(summary["timing"]["stage_seconds"])
            finally:
                shutil.rmtree(out)

        return run

    sides = {
        "commands": fresh(lambda o: _commands(store, train, gallery, o, device, variants)),
        "study": fresh(lambda o: _study(store, train, gallery, os.path.join(o, "s"), False, device, variants), "study"),
        "stacked": fresh(
            lambda o: _study(store, train, gallery, os.path.join(o, "s"), True, device, variants), "stacked"
        ),
    }
    times: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(reps):  # fresh processes every time: no warm-up round
        arithmetic.append(_arithmetic(store, train, gallery, device, variants))
        for side, fn in sides.items():
            times[side].append(timed(fn))
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    arith = {k: med([a[k] for a in arithmetic]) for k in arithmetic[0]}
    alone = arith["steps"] + arith["gallery"]
    print(f"end-to-end: {len(variants)} variants x {STEPS} steps + {n_gallery}-image gallery; arithmetic alone "
          f"{alone:.1f} s, median "
          f"(steps {arith['steps']:.1f} s, gallery scores {arith['gallery']:.1f} s); "
          f"the {len(variants)} end evaluations alone (together) {arith['evaluation']:.1f} s")  # fmt: skip
    for side in times:
        wall = med(times[side])
        share = 100 * (wall - alone) / wall
        with_eval = 100 * (wall - alone - arith["evaluation"]) / wall
        print(f"  {side:9s}: wall {wall:6.1f} s | overhead {share:5.1f}% of the wall (target <= 15%); "
              f"{with_eval:4.1f}% counting the end evaluations as arithmetic")  # fmt: skip
        if side in stages:
            split = {k: med([s.get(k, 0.0) for s in stages[side]]) for k in stages[side][0]}
            rest = wall - sum(split.values())
            print("             " + ", ".join(f"{k} {v:.1f}" for k, v in split.items())
                  + f", before the study and the rest {rest:.1f} (s, median)")  # fmt: skip
    for side in ("study", "stacked"):
        m, lo, hi = ratio(times["commands"], times[side])
        print(f"  {side} vs the {2 * len(variants)} commands: {m:.2f}x [{lo:.2f}, {hi:.2f}] (target >= 2.5)")
    # a study takes at least its arithmetic: the ratio a study of no overhead would have
    ceiling = med(times["commands"]) / alone
    print(f"  ceiling: the {2 * len(variants)} commands / the arithmetic alone = {ceiling:.2f}x (medians)")


def bench_paper_estimate(root: str, fraction: float, device: str) -> None:
    """Tab. 2's ablation (pipelines/ablation.yaml: 4 heads x 3 seeds, 5 epochs, batch 32) on
    a COCO training set of ViT-B/32 shapes x fraction (bench_scale.py's store): the plan's
    time estimate as `flowclip run ablation --dry-run` measures it on device."""
    from bench_scale import COCO_IMAGES, write_store
    from bench_scale import gallery as make_gallery

    store, train = write_store(root, fraction)
    gallery = make_gallery(root, store, min(250, int(COCO_IMAGES * fraction)))
    out = os.path.join(root, "paper-ablation")
    cmd = [sys.executable, "-m", "flowclip_cache", "run", "ablation", f"store={store}", f"train={train}",
           f"eval=[{gallery}]", f"out={out}", f"device={device}", "--dry-run"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"paper    : the dry run failed: {(r.stdout + r.stderr)[-1000:]}")
    lines = [x.strip() for x in r.stdout.splitlines() if "time left" in x or "dry run:" in x]
    print(f"paper    : Tab. 2's ablation on COCO training x {fraction:g}, on {device}: " + " | ".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--heads", type=int, default=8, help="heads stacked; --end-to-end's variants (at most 8)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", choices=["stacked", "matched", "gallery", "imports", "paper", "end-to-end"], default=None,
                    help="one part alone (paper: --paper-estimate's alone)")  # fmt: skip
    ap.add_argument("--end-to-end", metavar="ROOT", help="also the commands-vs-study comparison, its store under ROOT")
    ap.add_argument("--paper-estimate", metavar="ROOT", help="also Tab. 2's dry-run estimate, its store under ROOT")
    ap.add_argument("--fraction", type=float, default=1.0, help="--paper-estimate's share of COCO training (1: all)")
    ap.add_argument("--end-to-end-fraction", type=float, default=0.05, help="--end-to-end's share of COCO training")
    a = ap.parse_args()
    threads = torch.get_num_threads()
    print(f"# d {D}, {N} patches, {L} tokens, batch {B}; torch threads {threads}; {a.reps} alternated reps")
    if a.only in (None, "stacked"):
        bench_stacked("global", a.heads, a.reps, a.device)
        bench_stacked("flow", a.heads, a.reps, a.device)
    if a.only in (None, "matched"):
        bench_matched(a.reps, a.device)
    if a.only in (None, "gallery"):
        bench_gallery(a.reps, a.device)
    if a.only in (None, "imports"):
        bench_imports(a.reps)
        bench_command_imports(a.reps)
    if a.end_to_end:
        bench_end_to_end(a.end_to_end, a.reps, a.device, a.end_to_end_fraction, a.heads)
    if a.paper_estimate:
        bench_paper_estimate(a.paper_estimate, a.fraction, a.device)


if __name__ == "__main__":
    main()
