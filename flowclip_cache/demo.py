"""flowclip demo: the whole pipeline, offline, on a generated sample and the tiny CLIP.

    sample images + manifests -> extract (tiny CLIP) -> train Global-M, Flow-CLIP (HNB),
    Flow-CLIP (HNB + CIMR) -> score with Real / Shuffle / Fixed controls -> report folder

The tiny CLIP has random weights until the synthetic world's pretrained weights ship
(see docs/results-synthetic.md): the demo proves the pipeline, not the method.
"""
from __future__ import annotations

import os

from .encoders import EncoderSpec, resolve
from .extract import run_extract
from .sample import make_sample
from .score import run_score
from .store import FeatureStore
from .train import TrainConfig, train_head

DEMO_MODEL = "flowclip-tiny-vit"
HEADS = {"global": dict(head="global", cimr=0.0), "flow_hnb": dict(head="flow", cimr=0.0),
         "flow_hnb_cimr": dict(head="flow", cimr=0.1)}


def run_demo(out: str, n_images: int = 200, epochs: int = 2, progress: bool = True, log=print,
             bootstrap_draws: int = 2000) -> dict:
    os.makedirs(out, exist_ok=True)
    sample_dir = os.path.join(out, "sample")
    if not os.path.exists(os.path.join(sample_dir, "sample_training.parquet")):
        log(f"[1/4] generating {n_images} scenes in {sample_dir}")
        make_sample(sample_dir, n_images=n_images)
    paths = {"candidates": os.path.join(sample_dir, "sample_candidates.parquet"),
             "training": os.path.join(sample_dir, "sample_training.parquet"),
             "image_root": os.path.join(sample_dir, "images")}
    enc = resolve(EncoderSpec(DEMO_MODEL))
    store = FeatureStore.open_or_create(os.path.join(out, "store"), enc.config)
    log(f"[2/4] extracting features with {DEMO_MODEL} into {store.root}")
    s = run_extract(store, enc, [paths["candidates"], paths["training"]], paths["image_root"], workers=0,
                    progress=progress)
    for line in s.lines():
        log("      " + line)
    store.refresh()
    runs = []
    for name, kw in HEADS.items():
        run = os.path.join(out, "runs", name)
        log(f"[3/4] training {name} -> {run}")
        train_head(store, paths["training"], run, TrainConfig(epochs=epochs, lr=1e-3, **kw), overwrite=True,
                   progress=progress, log=lambda m: log("      " + m))
        runs.append(run)
    log("[4/4] scoring with Real / Shuffle / Fixed controls")
    summary = run_score(store, [paths["candidates"]], ["clip"] + runs, os.path.join(out, "report"),
                        controls=("real", "shuffle", "fixed"), bootstrap_draws=bootstrap_draws, overwrite=True,
                        log=lambda m: log("      " + m))
    log(open(os.path.join(out, "report", "results.md")).read())
    return summary
