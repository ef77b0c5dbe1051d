"""Zero-shot classification throughput of a pairwise head against the scoring kernel.

    python benchmarks/bench_zeroshot.py [--images 256] [--classes 100] [--templates 2] [--reps 7] [--device cpu]

A Flow-CLIP head (random weights, d 512) classifies a synthetic store's images (ViT-B/32
shapes, benchmarks/_synthetic.py) over classes x templates prompts through the engine
`score` runs (scoring/engines.py `classification_scores`: features read from the store,
each distinct prompt scored once per image, averaged per class), against the kernel alone
(`all_pair_scores` over the same images and prompt texts, features already in memory):
the same pairs. The two alternate repetition by repetition (ABAB); the printed fraction is
the median of the per-repetition kernel/engine time ratios with their min-max (target
>= 0.8: the engine adds the store read and the per-class mean, not a second pass). Then
what ImageNet-1k's validation set (50,000 images x 1,000 classes, one template) takes at
the engine's rate on this device, and Global-M's engine rate beside it (its classes are one
embedding each: a matrix product). With --toolkit (a checkout of ELEVATER's toolkit), the
21 sets vl_compo averages: their test images and prompts (class names x templates) from
the toolkit's own files, and the time each rate implies for the whole suite (a pairwise
head scores every image against every prompt; Global-M's time is its images x classes at
its rate, the prompts averaged into one embedding per class).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

import pyarrow as pa
import torch

from flowclip_cache.hashing import caption_key, image_key
from flowclip_cache.heads import build_head
from flowclip_cache.heads.fixed_shapes import all_pair_scores
from flowclip_cache.manifest import Manifest, write_manifest
from flowclip_cache.scoring.engines import classification_scores
from flowclip_cache.scoring.scorers import Scorer
from flowclip_cache.store.banks import FeatureBank

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _synthetic import D, synthetic_store  # noqa: E402
from _timing import alternate, ratio  # noqa: E402


def world(root: str, n_images: int, n_classes: int, n_templates: int):
    images = [image_key(f"{i:064x}") for i in range(n_images)]
    classes = [f"class {c}" for c in range(n_classes)]
    prompts = [[f"template {t} of a {c}." for t in range(n_templates)] for c in classes]
    texts = sorted({p for ps in prompts for p in ps})
    fs = synthetic_store(os.path.join(root, "store"), images, [caption_key(t) for t in texts])
    rows = [{"image": k, "image_key": k, "label": i % n_classes} for i, k in enumerate(images)]
    meta = {"benchmark": "cifar10", "classes": classes, "prompts": prompts}
    write_manifest(os.path.join(root, "zs.parquet"), pa.Table.from_pylist(rows), "classification", meta)
    return fs, Manifest.read(os.path.join(root, "zs.parquet")), images, texts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--templates", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--toolkit", help="an Elevater_Toolkit_IC checkout: the 21-task suite's time at these rates")
    args = ap.parse_args()
    dev = args.device
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as root:
        fs, m, images, texts = world(root, args.images, args.classes, args.templates)
        head = build_head("flow", D).eval().to(dev)
        with torch.no_grad():
            for p in head.parameters():  # away from the start (W = 0 skips the refinement's work)
                p.add_(0.02 * torch.randn_like(p))
        flow = Scorer("flow", "flow", head, "bench")
        glob = Scorer("global", "global", build_head("global", D).eval().to(dev), "bench")
        bank = FeatureBank.load(fs, images, texts, True, dev)
        every = bank.features(torch.arange(len(images), device=dev), torch.arange(len(texts), device=dev), True)

        def kernel():
            with torch.no_grad():
                all_pair_scores(flow.head, *every)

        sides = {
            "engine": lambda: classification_scores(fs, m, flow, dev),
            "kernel": kernel,
            "global": lambda: classification_scores(fs, m, glob, dev),
        }
        t = alternate(sides, args.reps)
    pairs = args.images * len(texts)
    med, lo, hi = ratio(t["kernel"], t["engine"])
    engine_rate = pairs / statistics.median(t["engine"])
    print(f"{args.images} images x {args.classes} classes x {args.templates} templates ({pairs:,} pairs), "
          f"{args.reps} repetitions, torch {torch.__version__}, {torch.get_num_threads()} threads")  # fmt: skip
    print(f"Flow-CLIP engine {engine_rate:,.0f} pairs/s, kernel {pairs / statistics.median(t['kernel']):,.0f} pairs/s")
    print(f"engine / kernel rate: {med:.2f} [{lo:.2f}, {hi:.2f}] (target >= 0.80)")
    print(f"Global-M engine {pairs / statistics.median(t['global']):,.0f} pairs/s (class embeddings: one product)")
    imagenet = 50_000 * 1_000
    print(f"ImageNet-1k val, one template ({imagenet:,} pairs) with Flow-CLIP at the engine's rate: "
          f"{imagenet / engine_rate / 60:,.0f} min on {dev}")  # fmt: skip
    if args.toolkit:
        # Global-M's work is images x classes (the prompts averaged first): its rate per image-class pair
        elevater_suite(args.toolkit, engine_rate, args.images * args.classes / statistics.median(t["global"]), dev)


def elevater_suite(toolkit: str, flow_rate: float, global_class_rate: float, dev: str) -> None:
    from flowclip_cache.datasets._elevater import VL_COMPO_TASKS, class_names, task_config, templates

    prompt_pairs = class_pairs = 0
    for task in VL_COMPO_TASKS:
        cfg = task_config(toolkit, task)
        n_classes = len(class_names(toolkit, cfg["hub"], ["?"]))  # every one of the 21 is in class_map
        prompt_pairs += cfg["images"] * n_classes * len(templates(toolkit, cfg["hub"]))
        class_pairs += cfg["images"] * n_classes
    flow_h, global_min = prompt_pairs / flow_rate / 3600, class_pairs / global_class_rate / 60
    print(f"ELEVATER's 21 sets: {prompt_pairs:,} image-prompt pairs ({class_pairs:,} image-class): Flow-CLIP "
          f"{flow_h:,.1f} h, Global-M {global_min:,.1f} min on {dev} (scoring only; extraction apart)")  # fmt: skip


if __name__ == "__main__":
    main()
