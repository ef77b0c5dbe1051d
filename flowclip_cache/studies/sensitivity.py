"""The paper's Tab. 3: Flow-CLIP (HNB + CIMR) over lambda_CIMR x tau_p x alpha
(default {0.05, 0.10} x {0.03, 0.05} x {0.75, 1.00}), each for every seed, scored on
every manifest given."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from .study import RunSpec, execute, study_tracking


@dataclass
class SensitivityConfig:
    kind: str
    out: str
    store: str | None = None
    train: str | None = None
    eval: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0])
    cimr: list[float] = field(default_factory=lambda: [0.05, 0.10])
    tau_p: list[float] = field(default_factory=lambda: [0.03, 0.05])
    alpha: list[float] = field(default_factory=lambda: [0.75, 1.00])
    train_config: dict[str, Any] = field(default_factory=dict)
    controls: list[str] = field(default_factory=lambda: ["real"])
    bootstrap: int = 0
    device: str = "cpu"
    report_to: list[str] = field(default_factory=list)  # tensorboard, wandb (docs/tracking.md)
    wandb_project: str = "flowclip"
    data_placement: str = "auto"  # where training features live: auto | device | host | store
    # train on the records left when some rest on images or captions extract could not read
    allow_missing: bool = False
    side_by_side: bool = True  # heads sharing a data order train on the same batches
    figures: bool = True  # the scores' PNGs (margins, CREPE curves); false: results only


def plan(cfg: SensitivityConfig) -> list[RunSpec]:
    # a row's name has no '=' (a scorer is given as NAME=FOLDER)
    return [
        RunSpec(f"cimr {c}, tau_p {t}, alpha {a}", seed, {"head": "flow", "cimr": c, "tau_p": t, "alpha": a})
        for c, t, a in itertools.product(cfg.cimr, cfg.tau_p, cfg.alpha)
        for seed in cfg.seeds
    ]


def run(cfg: SensitivityConfig, dry_run: bool, jobs: int, log=print, progress: bool = True):
    if not dry_run:
        from ..errors import FlowclipError

        for key in ("store", "train"):
            if not getattr(cfg, key):
                raise FlowclipError(f"the sensitivity study needs {key}=...")
    with study_tracking(cfg, log) as tracking:
        return execute(
            store_path=cfg.store or "",
            train_manifest=cfg.train or "",
            eval_manifests=cfg.eval,
            out=cfg.out,
            runs=plan(cfg),
            base_train=cfg.train_config,
            controls=cfg.controls,
            bootstrap=cfg.bootstrap,
            compare=[],
            dry_run=dry_run,
            jobs=jobs,
            device=cfg.device,
            side_by_side=cfg.side_by_side,
            placement=cfg.data_placement,
            allow_missing=cfg.allow_missing,
            progress=progress,
            figures=cfg.figures,
            tracking=tracking,
            log=log,
        )


CONFIG = SensitivityConfig
