"""The paper's Tab. 2: CLIP, Global-M, Global-M + CIMR, Flow-CLIP (HNB), Flow-CLIP
(HNB + CIMR), each trained with the same data and settings for every seed, then
scored on every benchmark manifest given; mean ± std across seeds, change from CLIP,
the binding and 11-task means, and paired bootstrap intervals for the compared pair.

With `world` set and no store, the study first builds the synthetic world and its
store with the configured encoder (the laptop-sized synthetic study)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..outputs import write_text
from .study import RunSpec, execute, study_tracking

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
    train: str | None = None  # training manifest
    eval: list[str] = field(default_factory=list)  # manifests or folders to score
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    heads: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(DEFAULT_HEADS))
    train_config: dict[str, Any] = field(default_factory=dict)  # TrainConfig keys shared by every run
    controls: list[str] = field(default_factory=lambda: ["real"])
    bootstrap: int = 10000
    compare: list[list[str]] = field(default_factory=lambda: [["global", "flow_hnb_cimr"]])
    world: dict[str, Any] | None = None  # build the synthetic world (build_world kwargs) and its store
    world_folder: str | None = None  # where that world is written (default OUT/world)
    encoder: dict[str, Any] = field(default_factory=lambda: {"model": "flowclip-tiny-clip", "pretrained": "synthetic"})
    device: str = "cpu"
    report_to: list[str] = field(default_factory=list)  # tensorboard, wandb (docs/tracking.md)
    wandb_project: str = "flowclip"
    wandb_group: str | None = None  # the runs' group (default: the study folder's name)
    data_placement: str = "auto"  # where training features live: auto | device | host | store
    # train on the records left when some rest on images or captions extract could not read
    allow_missing: bool = False
    side_by_side: bool = True  # heads sharing a data order train on the same batches
    stack: bool = False  # side-by-side heads of one class and settings take one batched step (stacked.py)
    figures: bool = True  # the scores' PNGs (margins, CREPE curves); false: results only
    suite: str | None = None  # score only a named suite's members among eval (flowclip score --suite)
    # training-free scorers scored beside CLIP and the runs, each a row of its own (filip-score:
    # the encoder's own token-patch evidence as FILIP's authors score it); compare may name them
    training_free: list[str] = field(default_factory=list)
    resample_seeds: bool = False  # the bootstrap draws each method's seeds too (not the paper's Sec. 4.3)


def plan(cfg: AblationConfig) -> list[RunSpec]:
    return [RunSpec(method, seed, dict(settings)) for method, settings in cfg.heads.items() for seed in cfg.seeds]


ENCODER_KEYS = {"model", "pretrained", "init_seed", "patch_readout", "token_mask", "tokenizer", "decode"}  # extract's


def encoder_spec(encoder: dict):
    """The study's `encoder:` mapping -> EncoderSpec (one patch readout)."""
    from ..errors import FlowclipError
    from ..extraction.encoders import EncoderSpec

    unknown = sorted(set(encoder) - ENCODER_KEYS)
    if unknown:
        raise FlowclipError(f"encoder: unknown keys {unknown}; known: {sorted(ENCODER_KEYS)}")
    return EncoderSpec(
        encoder.get("model", "flowclip-tiny-clip"),
        encoder.get("pretrained", "none"),
        int(encoder.get("init_seed", 0)),
        encoder.get("token_mask", "nonpad"),
        tokenizer=encoder.get("tokenizer"),
        patch_readout=encoder.get("patch_readout", "standard"),
        decode=encoder.get("decode", "pil"),
    )


def world_store(cfg: AblationConfig, log, progress: bool = True):
    """The synthetic world, extracted once with the configured encoder -> (store, paths, evals)."""
    from ..extraction.encoders import resolve
    from ..extraction.extract import run_extract
    from ..store import FeatureStore
    from ..synthetic.contrasts import build_contrasts, contrast_count
    from ..synthetic.world import FAMILIES, build_world
    from .study import claim_folder

    claim_folder(cfg.out)
    world = cfg.world_folder or os.path.join(cfg.out, "world")
    paths = build_world(world, **(cfg.world or {}))
    # the image-choice and group stand-ins (synthetic/contrasts.py), sized by the world
    w = cfg.world or {}
    n = contrast_count(w.get("eval_scenes", 300))
    paths.update(build_contrasts(world, seed=w.get("seed", 0), n=n, size=w.get("size", 64)))
    enc = resolve(encoder_spec(cfg.encoder))
    store = FeatureStore.open_or_create(os.path.join(cfg.out, "store"), enc.config, owner=cfg.out)
    evals = [paths[f"eval-{f}"] for f in FAMILIES] + [paths["eval-heldout-swap-att"]]
    evals += [paths["eval-groups"], paths["eval-image-choice"], paths["eval-paraphrases"]]
    s = run_extract(store, enc, [paths["training"], *evals], paths["image_root"], workers=0, progress=progress)
    log(f"  world: {s.images_new} new images, {s.images_stored} already stored")
    store.refresh()
    return store, paths, evals


def write_profile(cfg: AblationConfig, store, paths, log, recompute: bool = False, overwrite: bool = False) -> dict:
    """The frozen encoder's profile (the gate before any head experiment) -> profile.json.
    An existing one is reused, or with recompute checked: a different one is replaced only
    with overwrite."""
    import json

    from ..errors import FlowclipError
    from ..scoring.profile import clip_profile

    prof_path = os.path.join(cfg.out, "profile.json")
    old = json.load(open(prof_path)) if os.path.exists(prof_path) else None
    if old is not None and not recompute:
        return old
    prof = clip_profile(store, paths)
    if old is not None and old != prof and not overwrite:
        raise FlowclipError(f"{prof_path} holds another profile; pass --overwrite to replace it")
    write_text(prof_path, json.dumps(prof, indent=1))
    from ..scoring.profile import profile_table

    log("  frozen encoder profile (%):\n" + profile_table(prof, "frozen encoder"))
    return prof


def prepare_world(cfg: AblationConfig, log, progress: bool = True) -> AblationConfig:
    """World, store and profile.json; then the study's store, training and eval manifests."""
    store, paths, evals = world_store(cfg, log, progress)
    write_profile(cfg, store, paths, log)
    cfg.store, cfg.train, cfg.eval = store.root, paths["training"], evals
    return cfg


def run(cfg: AblationConfig, dry_run: bool, jobs: int, log=print, progress: bool = True):
    from .grid import run_grid, study_grid

    grid = study_grid(cfg)  # a list in encoder.patch_readout or a world knob: one study each
    if len(grid) > 1 or grid[0][1] is not cfg:
        return run_grid(cfg, grid, run, dry_run, jobs, log, progress)
    spec = encoder_spec(cfg.encoder)  # unknown encoder keys fail before anything runs
    if cfg.world is not None and not cfg.store and not dry_run:
        from .spread import one_at_a_time, study_rank
        from .study import claim_folder

        if study_rank()[1] > 1:  # several ranks: the first builds the world, the others find it built
            claim_folder(cfg.out)
            with one_at_a_time(cfg.out, "world"):
                cfg = prepare_world(cfg, log, progress)
        else:
            cfg = prepare_world(cfg, log, progress)
    if not dry_run:
        from ..errors import FlowclipError

        for key in ("store", "train"):
            if not getattr(cfg, key):
                raise FlowclipError(f"the ablation needs {key}=... (or world={{...}} for the synthetic world)")
        if not cfg.eval:
            raise FlowclipError("the ablation needs eval=[manifests or folders] to score")
    with study_tracking(cfg, log) as tracking:
        return _execute(cfg, spec, dry_run, jobs, progress, tracking, log)


def _execute(cfg: AblationConfig, spec, dry_run: bool, jobs: int, progress: bool, tracking, log):
    return execute(
        store_path=cfg.store or "",
        train_manifest=cfg.train or "",
        eval_manifests=cfg.eval,
        out=cfg.out,
        runs=plan(cfg),
        base_train=cfg.train_config,
        controls=cfg.controls,
        bootstrap=cfg.bootstrap,
        compare=cfg.compare,
        dry_run=dry_run,
        jobs=jobs,
        device=cfg.device,
        side_by_side="stacked" if cfg.side_by_side and cfg.stack else cfg.side_by_side,
        placement=cfg.data_placement,
        allow_missing=cfg.allow_missing,
        world=cfg.world,
        feature_dims=_dims(spec) if cfg.world is not None and not cfg.store else None,
        progress=progress,
        figures=cfg.figures,
        suite=cfg.suite,
        training_free=cfg.training_free,
        resample_seeds=cfg.resample_seeds,
        tracking=tracking,
        log=log,
    )


def _dims(spec) -> tuple[int, int] | None:
    """(d, patches) of the configured encoder, for the dry run's timing; None if it does not resolve."""
    from ..errors import FlowclipError
    from ..extraction.encoders import resolve

    try:
        config = resolve(spec).config
    except FlowclipError:
        return None
    return config["model_cfg"]["embed_dim"], config["num_patches"]


CONFIG = AblationConfig
