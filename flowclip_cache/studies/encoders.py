"""One study per encoder, the same heads, seeds and benchmarks for each (the paper's
Tab. 5 for SigLIP and BLIP, Tab. 6 for the CLIP backbones): each encoder's study runs in
OUT/<encoder name>/ exactly as an ablation on its store, and OUT/summary.md puts their
real-image tables side by side.

Each encoder names its store, extracted beforehand with `flowclip extract` (the YAML's
header gives the commands); the study refuses a store made by another model than the
one its row is labelled with."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import FlowclipError
from ..outputs import write_text
from ..store.location import is_url
from .study import RunSpec, claim_folder, execute, study_tracking
from .summary import mean_cell

DEFAULT_HEADS = {"global": {"head": "global", "cimr": 0.0}, "flow": {"head": "flow", "cimr": 0.1}}


@dataclass
class EncodersConfig:
    kind: str
    out: str
    encoders: dict[str, dict[str, Any]]  # name -> {model, store} (pretrained: for the record)
    train: str | None = None
    eval: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    heads: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(DEFAULT_HEADS))
    train_config: dict[str, Any] = field(default_factory=dict)
    controls: list[str] = field(default_factory=lambda: ["real"])
    bootstrap: int = 10000
    compare: list[list[str]] = field(default_factory=lambda: [["global", "flow"]])
    device: str = "cpu"
    report_to: list[str] = field(default_factory=list)  # tensorboard, wandb (docs/tracking.md)
    wandb_project: str = "flowclip"
    data_placement: str = "auto"
    # train on the records left when some rest on images or captions extract could not read
    allow_missing: bool = False
    side_by_side: bool = True
    figures: bool = True  # the scores' PNGs (margins, CREPE curves); false: results only


def plan(cfg: EncodersConfig) -> list[RunSpec]:
    return [RunSpec(method, seed, dict(settings)) for method, settings in cfg.heads.items() for seed in cfg.seeds]


def check_encoder(name: str, enc: dict) -> str:
    """The store path of one encoder row, after checking the row's keys and that the store
    was made by the model the row names."""
    from ..store import FeatureStore

    unknown = sorted(set(enc) - {"model", "pretrained", "store"})
    if unknown or "store" not in enc or "model" not in enc:
        raise FlowclipError(
            f"encoders.{name}: give model and store (and optionally pretrained)"
            + (f"; unknown keys {unknown}" if unknown else "")
        )
    if not is_url(enc["store"]) and not os.path.isdir(enc["store"]):
        raise FlowclipError(
            f"encoders.{name}: no store at {enc['store']}; build it with: flowclip extract "
            f"--store {enc['store']} --model {enc['model']} --pretrained "
            f"{enc.get('pretrained', '...')} --manifest ... --image-root ..."
        )
    made_by = FeatureStore(enc["store"]).encoder_config["model"]
    if made_by not in (enc["model"], enc["model"].split(":", 1)[-1]) and not (
        enc["model"].startswith("blip:") and made_by == "local"
    ):
        raise FlowclipError(f"encoders.{name}: {enc['store']} was made by {made_by}, not {enc['model']}")
    return enc["store"]


def run(cfg: EncodersConfig, dry_run: bool, jobs: int, log=print, progress: bool = True):
    if not cfg.encoders:
        raise FlowclipError("the encoders study needs encoders={name: {model: ..., store: ...}}")
    for key in ("train",):
        if not getattr(cfg, key):
            raise FlowclipError(f"the encoders study needs {key}=... (a training manifest)")
    if not cfg.eval:
        raise FlowclipError("the encoders study needs eval=[manifests or folders] to score")
    stores = {name: check_encoder(name, enc) for name, enc in cfg.encoders.items()}
    if not dry_run:
        claim_folder(cfg.out)
    summaries = {}
    with study_tracking(cfg, log) as tracking:
        for name, store in stores.items():
            log(f"encoder {name} ({cfg.encoders[name]['model']}):")
            summaries[name] = execute(
                store_path=store,
                train_manifest=cfg.train or "",
                eval_manifests=cfg.eval,
                out=os.path.join(cfg.out, name),
                runs=plan(cfg),
                base_train=cfg.train_config,
                controls=cfg.controls,
                bootstrap=cfg.bootstrap,
                compare=cfg.compare,
                dry_run=dry_run,
                jobs=jobs,
                device=cfg.device,
                side_by_side=cfg.side_by_side,
                placement=cfg.data_placement,
                allow_missing=cfg.allow_missing,
                progress=progress,
                figures=cfg.figures,
                tracking=tracking,
                log=lambda m: log(f"  {m}"),
            )
    if dry_run:
        return None
    # under many ranks an encoder's summary is written by whichever finished its runs last:
    # the side-by-side one, once every encoder's is there (by the last rank, or a rerun)
    for n in summaries:
        path = os.path.join(cfg.out, n, "summary.json")
        if summaries[n] is None and os.path.exists(path):
            summaries[n] = json.load(open(path))
    done = {n: s for n, s in summaries.items() if s is not None}
    if len(done) < len(summaries):
        log("the side-by-side summary is written once every encoder's study has finished (by the last rank)")
        return None
    combined = {
        "encoders": {
            n: {
                "model": cfg.encoders[n]["model"],
                "store_fingerprint": s["store_fingerprint"],
                "table": s["table"],
                "columns": s["columns"],
            }
            for n, s in done.items()
        }
    }
    write_combined(cfg.out, combined)
    return combined


def write_combined(out: str, combined: dict, label: str = "encoder", extra: tuple[str, ...] | list[str] = ()) -> None:
    """summary.json and summary.md of studies side by side; extra: more summary.md lines."""
    from ..scoring.profile import PROFILE_NOTE, profile_rows
    from ..scoring.report import table

    cols = next(iter(combined["encoders"].values()))["columns"]
    rows = []
    for name, e in combined["encoders"].items():
        for method, row in e["table"].items():
            rows.append([name, method] + [mean_cell(row[c]) if c in row else "" for c in cols])
    md = [
        "# Encoders side by side",
        "",
        "Real images; accuracy (%), mean ± sample std across seeds. Each "
        "encoder's own study (bootstrap, controls, conclusions): <encoder>/summary.md.",
        "",
        *table([label, "method"] + cols, rows),
        "",
    ]
    profiles = {n: e["encoder_profile"] for n, e in combined["encoders"].items() if e.get("encoder_profile")}
    if profiles:
        head, body = profile_rows(profiles)
        md += ["## The frozen encoders' profiles (%)", "", *table(head, body), "", PROFILE_NOTE, ""]
    write_text(os.path.join(out, "summary.json"), json.dumps(combined, indent=1))
    write_text(os.path.join(out, "summary.md"), "\n".join([*md, *extra]))


CONFIG = EncodersConfig
