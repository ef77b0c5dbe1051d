"""The encoder-update ablation (paper §4.4): Flow-CLIP on frozen encoders against
Flow-CLIP with both encoders adapted (flowclip adapt), on one training source, for each
seed; the adapted runs go through the cache like any encoder (extract the exported
weights, score). Both sides score the same records of the same images, so the paired
image-cluster bootstrap compares them directly.

    OUT/frozen/              an ablation study of the head on the frozen encoder's store
    OUT/adapted/seed-<s>/    run/ (flowclip adapt), store/ (its encoder), score/
    OUT/summary.md           both side by side, with the bootstrap of adapted - frozen
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import FlowclipError
from ..outputs import write_text
from .ablation import AblationConfig, encoder_spec
from .ablation import run as run_ablation
from .study import claim_folder, study_tracking, track_scores
from .summary import mean_cell, mean_std


@dataclass
class AdaptationConfig:
    kind: str
    out: str
    world: dict[str, Any] | None = None  # the synthetic world; else store, train, eval, image_root
    store: str | None = None  # the frozen encoder's store (real data)
    train: str | None = None
    eval: list[str] = field(default_factory=list)
    image_root: str | None = None  # the training and eval manifests' images (real data)
    encoder: dict[str, Any] = field(default_factory=lambda: {"model": "flowclip-tiny-clip", "pretrained": "synthetic"})
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    head: dict[str, Any] = field(default_factory=lambda: {"head": "flow", "cimr": 0.1})
    train_config: dict[str, Any] = field(default_factory=dict)  # shared by both sides
    adapt_config: dict[str, Any] = field(default_factory=lambda: {"encoder_lr": 1e-5})  # the adapted side's own
    controls: list[str] = field(default_factory=lambda: ["real"])
    bootstrap: int = 2000
    device: str = "cpu"
    report_to: list[str] = field(default_factory=list)  # tensorboard, wandb (docs/tracking.md)
    wandb_project: str = "flowclip"


def frozen_study(cfg: AdaptationConfig) -> AblationConfig:
    return AblationConfig(
        kind="ablation",
        out=os.path.join(cfg.out, "frozen"),
        store=cfg.store,
        train=cfg.train,
        eval=list(cfg.eval),
        world=cfg.world,
        world_folder=os.path.join(cfg.out, "world"),
        encoder=dict(cfg.encoder),
        seeds=list(cfg.seeds),
        heads={"frozen": dict(cfg.head)},
        train_config=dict(cfg.train_config),
        controls=list(cfg.controls),
        bootstrap=0,
        compare=[],
        device=cfg.device,
        report_to=list(cfg.report_to),
        wandb_project=cfg.wandb_project,
        wandb_group=os.path.basename(os.path.normpath(cfg.out)),  # both sides under the study's name
    )


def adapt_config(cfg: AdaptationConfig, seed: int):
    from ..training.adapt import AdaptConfig

    return AdaptConfig.from_dict(
        {**cfg.train_config, **cfg.adapt_config, **cfg.head, "seed": seed},
        f"{cfg.kind} (train_config + adapt_config + head)",
    )


def run(cfg: AdaptationConfig, dry_run: bool, jobs: int, log=print, progress: bool = True):
    spec = encoder_spec(cfg.encoder)
    for s in cfg.seeds:
        adapt_config(cfg, s)  # every setting checked before anything runs
    if cfg.world is None and not (cfg.store and cfg.train and cfg.eval and cfg.image_root):
        raise FlowclipError("the adaptation study needs world={...}, or store, train, eval and image_root")
    if not dry_run:
        claim_folder(cfg.out)
    log("frozen encoder:")
    frozen = run_ablation(frozen_study(cfg), dry_run, jobs, log=lambda m: log(f"  {m}"), progress=progress)
    for s in cfg.seeds:
        where = os.path.join(cfg.out, "adapted", f"seed-{s}")
        state = "done" if os.path.exists(os.path.join(where, "score", "results.json")) else "todo"
        log(f"  [{state:7s}] adapted encoder + head, seed {s}: {where}")
    if dry_run:
        return None
    sub = frozen_study(cfg)
    world = sub.world_folder or os.path.join(sub.out, "world")
    train = cfg.train or os.path.join(world, "train.parquet")
    evals = list(cfg.eval) or _world_evals(world)
    root = cfg.image_root or os.path.join(world, "images")
    with study_tracking(cfg, log) as tracking:
        adapted = {s: adapt_seed(cfg, spec, s, train, evals, root, log, progress, tracking) for s in cfg.seeds}
    summary = combine(cfg, frozen, adapted, evals, root)
    write(cfg.out, summary)
    return summary


def _world_evals(world: str) -> list[str]:
    from ..synthetic.world import FAMILIES

    return [os.path.join(world, f"eval_{f}.parquet") for f in FAMILIES] + [
        os.path.join(world, "eval_heldout_swap-att.parquet")
    ]


def adapt_seed(cfg, spec, seed, train, evals, root, log, progress, tracking=None) -> dict:
    """adapt -> extract the adapted encoder -> score it (its own CLIP and the adapted head);
    the adapt run's records and the adapted head's scores go to `tracking` when given."""
    from ..extraction.encoders import resolve
    from ..extraction.extract import run_extract
    from ..scoring.score import run_score
    from ..store import FeatureStore
    from ..training.adapt import run_adapt
    from ..training.checkpoint import exists

    where = os.path.join(cfg.out, "adapted", f"seed-{seed}")
    run_dir, score_dir = os.path.join(where, "run"), os.path.join(where, "score")
    if os.path.exists(os.path.join(score_dir, "results.json")):
        return json.load(open(os.path.join(score_dir, "results.json")))
    if not os.path.exists(os.path.join(run_dir, "DONE")):
        log(f"adapting, seed {seed}")
        run_adapt(
            spec,
            train,
            root,
            run_dir,
            adapt_config(cfg, seed),
            device=cfg.device,
            resume=exists(run_dir),
            progress=progress,
            watch=tracking.watch if tracking else None,
            log=lambda m: log(f"  {m}"),
        )
    enc = resolve(dataclasses.replace(spec, pretrained=os.path.join(run_dir, "encoder.safetensors")))
    store = FeatureStore.open_or_create(os.path.join(where, "store"), enc.config, owner=cfg.out)
    run_extract(store, enc, evals, root, workers=0, progress=progress)
    store.refresh()
    score = run_score(
        store,
        evals,
        ["adapted_clip=clip", f"adapted={run_dir}"],
        score_dir,
        controls=tuple(cfg.controls),
        device=cfg.device,
        bootstrap_draws=0,
        overwrite=True,
        progress=progress,
        log=lambda m: log(f"  {m}"),
    )
    if tracking:
        track_scores(tracking, run_dir, score["results"]["real|adapted"])
    return score


def combine(cfg, frozen: dict, adapted: dict, evals, root) -> dict:
    """Real-image accuracy per task (mean ± std over seeds) of the frozen and adapted
    heads and the adapted encoder's own CLIP, and the paired bootstrap of adapted - frozen."""
    from ..scoring.score import headline

    tasks = frozen["tasks"]
    rows = {"frozen": {t: frozen["table"]["frozen"][t] for t in tasks if t in frozen["table"]["frozen"]}}
    for name in ("adapted_clip", "adapted"):  # score's labels: the names given to its two scorers
        rows[name] = {}
        for t in tasks:
            vals = [
                headline(a["results"][f"real|{name}"][t]) * 100
                for a in adapted.values()
                if t in a["results"].get(f"real|{name}", {})
            ]
            if vals:
                rows[name][t] = mean_std(vals)
    boot = bootstrap(cfg, evals, root) if cfg.bootstrap else {}
    return {
        "tasks": tasks,
        "table": rows,
        "bootstrap": boot,
        "seeds": list(cfg.seeds),
        "frozen_store": frozen["store_fingerprint"],
        "adapted_stores": {s: a["store_fingerprint"] for s, a in adapted.items()},
    }


def bootstrap(cfg, evals, root) -> dict:
    """adapted - frozen over the same records: decisions from each side's records.parquet,
    image clusters by content key (the same images in every store)."""
    import pyarrow.parquet as pq

    from ..manifest import Manifest
    from ..scoring.aggregation import bootstrap_task
    from ..scoring.matrix_tasks import split_rows
    from ..scoring.scorers import scoring_of
    from ..scoring.stats import paired_bootstrap
    from ..store import FeatureStore
    from ..store.manifest_keys import image_keys

    store = FeatureStore(cfg.store or os.path.join(cfg.out, "frozen", "store"))
    decided: dict[tuple[str, str], dict] = {}
    frozen_rows = pq.read_table(os.path.join(cfg.out, "frozen", "score", "records.parquet")).to_pylist()
    for r in frozen_rows:
        decided.setdefault((r["benchmark"], r["scorer"]), {})[r["record_id"]] = r["correct"]
    for s in cfg.seeds:
        rows = pq.read_table(os.path.join(cfg.out, "adapted", f"seed-{s}", "score", "records.parquet")).to_pylist()
        for r in rows:
            if r["control"] == "real" and r["scorer"] == "adapted":  # the label adapt_seed gives the adapted head
                decided.setdefault((r["benchmark"], f"adapted-{s}"), {})[r["record_id"]] = r["correct"]
    frozen_runs = sorted({k[1] for k in decided if k[1] not in ("clip",) and not k[1].startswith("adapted-")})
    methods = {"frozen": frozen_runs, "adapted": [f"adapted-{s}" for s in cfg.seeds]}
    tasks: list[dict] = []
    all_images: dict[str, int] = {}
    for path in evals:
        m = Manifest.read(path)
        name, sc = scoring_of(m)
        cols = m.table.to_pydict()
        ids = [str(x) for x in cols["record_id"]]
        correct = {r: np.array([decided[(name, r)][i] for i in ids]) for rs in methods.values() for r in rs}
        first = [ks[0] for ks in split_rows(image_keys(store, m, root), m)]  # a record's cluster: its first image
        tasks.append(bootstrap_task(name, sc, cols, np.array(first), correct, all_images))
    return paired_bootstrap(tasks, methods, [("frozen", "adapted")], len(all_images), cfg.bootstrap, 0)


def write(out: str, summary: dict) -> None:
    from ..scoring.report import table

    tasks = summary["tasks"]
    md = [
        "# Frozen vs adapted encoders (§4.4)",
        "",
        f"Real images; accuracy (%), mean ± sample std over seeds {summary['seeds']}. frozen: the head on the "
        "frozen encoder's features; adapted: both encoders and the head trained together (flowclip adapt), "
        "scored from a store of the adapted encoder; adapted_clip: the adapted encoder alone.",
        "",
        *table(
            ["method", *tasks],
            [[m, *(mean_cell(row[t]) if t in row else "" for t in tasks)] for m, row in summary["table"].items()],
        ),
        "",
    ]
    if summary["bootstrap"]:
        md += [
            "## Paired image-cluster bootstrap, adapted - frozen (points, 95% interval)",
            "",
            *table(
                ["task", "observed", "95% CI"],
                [
                    [t, f"{v['mean_pts']:.2f}", f"[{v['ci95_pts'][0]:.2f}, {v['ci95_pts'][1]:.2f}]"]
                    for t, d in summary["bootstrap"].items()
                    for v in d.values()
                ],
            ),
            "",
        ]
    write_text(os.path.join(out, "summary.json"), json.dumps(summary, indent=1))
    write_text(os.path.join(out, "summary.md"), "\n".join(md))


CONFIG = AdaptationConfig
