"""The paper's Tab. 2: CLIP, Global-M, Global-M + CIMR, Flow-CLIP (HNB), Flow-CLIP
(HNB + CIMR), each trained with the same data and settings for every seed, then
scored on every benchmark manifest given; mean ± std across seeds, change from CLIP,
the binding and 11-task means, and paired bootstrap intervals for the compared pair.

With `sample_images` set and no store, the study first builds the generated sample
and its store with the tiny CLIP (the laptop-sized synthetic study)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .study import RunSpec, execute

DEFAULT_HEADS = {
    "global": {"head": "global", "cimr": 0.0},
    "global_cimr": {"head": "global", "cimr": 0.1},
    "flow_hnb": {"head": "flow", "cimr": 0.0},
    "flow_hnb_cimr": {"head": "flow", "cimr": 0.1},
}


@dataclass
class AblationConfig:
    kind: str
    out: str
    store: str | None = None
    train: str | None = None                  # training manifest
    eval: list[str] = field(default_factory=list)   # manifests or folders to score
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    heads: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(DEFAULT_HEADS))
    train_config: dict[str, Any] = field(default_factory=dict)   # TrainConfig keys shared by every run
    controls: list[str] = field(default_factory=lambda: ["real"])
    bootstrap: int = 10000
    compare: list[list[str]] = field(default_factory=lambda: [["global", "flow_hnb_cimr"]])
    sample_images: int | None = None          # build the generated sample + tiny-CLIP store first
    device: str = "cpu"


def plan(cfg: AblationConfig) -> list[RunSpec]:
    return [RunSpec(method, seed, dict(settings)) for method, settings in cfg.heads.items() for seed in cfg.seeds]


def prepare_sample(cfg: AblationConfig, log) -> AblationConfig:
    """The laptop-sized world: generated scenes, extracted once with the tiny CLIP."""
    from ..demo import DEMO_MODEL
    from ..encoders import EncoderSpec, resolve
    from ..extract import run_extract
    from ..sample import make_sample
    from ..store import FeatureStore
    world = os.path.join(cfg.out, "world")
    paths = {"candidates": os.path.join(world, "sample_candidates.parquet"),
             "training": os.path.join(world, "sample_training.parquet"), "image_root": os.path.join(world, "images")}
    if not os.path.exists(paths["training"]):
        make_sample(world, n_images=cfg.sample_images)
    enc = resolve(EncoderSpec(DEMO_MODEL))
    store = FeatureStore.open_or_create(os.path.join(cfg.out, "store"), enc.config)
    s = run_extract(store, enc, [paths["candidates"], paths["training"]], paths["image_root"], workers=0,
                    progress=False)
    log(f"  world: {s.images_new} new images, {s.images_stored} stored")
    cfg.store, cfg.train, cfg.eval = store.root, paths["training"], [paths["candidates"]]
    return cfg


def run(cfg: AblationConfig, dry_run: bool, jobs: int, log=print):
    if cfg.sample_images and not cfg.store and not dry_run:
        cfg = prepare_sample(cfg, log)
    if not dry_run:
        from ..errors import FlowclipError
        for key in ("store", "train"):
            if not getattr(cfg, key):
                raise FlowclipError(f"the ablation needs {key}=... (or sample_images=N for the synthetic world)")
        if not cfg.eval:
            raise FlowclipError("the ablation needs eval=[manifests or folders] to score")
    return execute(store_path=cfg.store, train_manifest=cfg.train, eval_manifests=cfg.eval, out=cfg.out,
                   runs=plan(cfg), base_train=cfg.train_config, controls=cfg.controls, bootstrap=cfg.bootstrap,
                   compare=cfg.compare, dry_run=dry_run, jobs=jobs, device=cfg.device, log=log)


CONFIG = AblationConfig
