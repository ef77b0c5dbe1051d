"""flowclip demo: the whole pipeline, offline, on a generated sample and the tiny CLIP.

    sample images + manifests -> extract (tiny CLIP) -> train Global-M and Flow-CLIP heads
"""
from __future__ import annotations

import os

from .encoders import EncoderSpec, resolve
from .extract import run_extract
from .sample import make_sample
from .store import FeatureStore
from .train import TrainConfig, train_head

DEMO_MODEL = "flowclip-tiny-vit"


def run_demo(out: str, n_images: int = 200, epochs: int = 2, progress: bool = True, log=print) -> dict:
    os.makedirs(out, exist_ok=True)
    sample_dir = os.path.join(out, "sample")
    if not os.path.exists(os.path.join(sample_dir, "sample_training.parquet")):
        log(f"[1/3] generating {n_images} scenes in {sample_dir}")
        make_sample(sample_dir, n_images=n_images)
    paths = {"candidates": os.path.join(sample_dir, "sample_candidates.parquet"),
             "training": os.path.join(sample_dir, "sample_training.parquet"),
             "image_root": os.path.join(sample_dir, "images")}
    enc = resolve(EncoderSpec(DEMO_MODEL))
    store = FeatureStore.open_or_create(os.path.join(out, "store"), enc.config)
    log(f"[2/3] extracting features with {DEMO_MODEL} into {store.root}")
    s = run_extract(store, enc, [paths["candidates"], paths["training"]], paths["image_root"], workers=0,
                    progress=progress)
    for line in s.lines():
        log("      " + line)
    store.refresh()
    results = {}
    for head in ("global", "flow"):
        run = os.path.join(out, "runs", head)
        log(f"[3/3] training head {head!r} -> {run}")
        state = train_head(store, paths["training"], run, TrainConfig(head=head, epochs=epochs, lr=1e-3),
                           overwrite=True, progress=progress, log=lambda m: log("      " + m))
        results[head] = state["metrics"][-1]
    results = {"clip": state["metrics"][0], **results}     # epoch 0 = the untrained head = frozen CLIP
    log("pairwise accuracy (positive vs its negative):")
    log(f"  {'scorer':10s} {'train-sample':>12s} {'val':>8s}")
    for head, m in results.items():
        log(f"  {head:10s} {m['train_sample']['all']:12.4f} {m['val']['all']:8.4f}")
    return results
