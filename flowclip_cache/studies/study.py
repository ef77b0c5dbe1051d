"""What every study shares: run folders named by their settings, skip what is done,
resume what is not, train with the features gathered once, score everything, and
summarise across seeds. A pipeline kind (ablation.py, sensitivity.py) only says which
runs make its grid."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import numpy as np

from ..devices import rank_device
from ..errors import FlowclipError
from ..progress import invocation_seconds, stage, stage_seconds
from ..store import FeatureStore
from ..training import checkpoint
from .checks import DONE, check_compare, check_names, done_key, place_runs, summary_is_current
from .spread import claim, my_groups, one_at_a_time, study_rank
from .summary import mean_std, write_summary


@dataclass
class RunSpec:
    method: str  # the row of the table (seeds of one method share it)
    seed: int
    train: dict  # TrainConfig keys

    @property
    def folder(self) -> str:
        flat = {}
        for k, v in self.train.items():  # a mapping (head_options, loss_weights) by its keys: k.name-value
            flat.update({f"{k}.{n}": x for n, x in v.items()} if isinstance(v, dict) else {k: v})
        keys = sorted(k for k in flat if k != "seed")
        return "__".join(f"{k}-{flat[k]}" for k in keys) + f"__seed-{self.seed}"


def claim_folder(out: str) -> None:
    """Make (or reuse) a study folder, marked as one; refuse a folder that is not."""
    from .. import outputs

    outputs.require_own(out, "study")
    os.makedirs(out, exist_ok=True)
    outputs.mark(out, "study")


def execute(
    *,
    store_path: str,
    train_manifest: str,
    eval_manifests: list[str],
    out: str,
    runs: list[RunSpec],
    base_train: dict,
    controls: list[str],
    bootstrap: int,
    compare: list[list[str]],
    dry_run: bool,
    jobs: int = 1,
    device: str = "cpu",
    side_by_side: bool | str = True,  # "stacked": side by side, batched where heads can stack
    world=None,
    feature_dims: tuple[int, int] | None = None,
    progress: bool = True,
    placement: str = "auto",
    figures: bool = True,
    suite: str | None = None,
    training_free=(),
    resample_seeds: bool = False,
    tracking=None,
    allow_missing: bool = False,
    log=print,
) -> dict | None:
    """suite: score only that suite's members among eval_manifests (flowclip score --suite).
    training_free: scorers with no parameters (filip-score, ...) scored beside CLIP, each a
    method of its own. resample_seeds: the bootstrap draws seeds too (stats.paired_bootstrap).
    tracking: a training.tracking.Tracking every run's records and final scores go to."""
    from .. import outputs

    clock = (time.perf_counter(), stage_seconds())  # this study's own wall time and stages
    check_names(suite, training_free)  # before any training
    check_compare(compare, runs, training_free)
    from .checks import check_study, plan_lines

    run_dirs = {r.folder: os.path.join(out, "runs", r.folder) for r in runs}
    if len(run_dirs) != len(runs):
        raise FlowclipError("two runs of the grid have the same settings")
    outputs.require_own(out, "study")
    log(f"study {out}: {len(runs)} runs" + (" (dry run: nothing is created)" if dry_run else ""))
    with stage("checks"):
        checked = check_study(
            store_path=store_path,
            train_manifest=train_manifest,
            eval_manifests=eval_manifests,
            runs=runs,
            run_dirs=run_dirs,
            base_train=base_train,
            device=device,
            world=world,
            feature_dims=feature_dims,
            allow_missing=allow_missing,
            log=log,
        )
    for line in checked.lines:
        log(f"  {line}")
    base_dirs = run_dirs
    run_dirs = place_runs(runs, run_dirs, checked, train_manifest, log)
    plan_lines(runs, run_dirs, checked, log, measure=dry_run, stacked=side_by_side == "stacked")
    moved = {r.folder: os.path.basename(run_dirs[r.folder]) for r in runs if run_dirs[r.folder] != base_dirs[r.folder]}
    what = done_key(runs, eval_manifests, controls, bootstrap, compare, suite, training_free, moved)
    finished = summary_is_current(out, what, log)
    checked.refuse_problems()
    if dry_run:
        log("  dry run: every check passed")
        return None
    if finished:
        return json.load(open(os.path.join(out, "summary.json")))
    claim_folder(out)
    rank, ranks = study_rank()
    if ranks == 1 and os.path.exists(os.path.join(out, DONE)):
        os.remove(os.path.join(out, DONE))
    device = rank_device(checked.device)
    store = FeatureStore(store_path)
    t0 = time.perf_counter()
    shared = dict(device=device, progress=progress, log=log, tracking=tracking)
    train_missing(
        store,
        train_manifest,
        runs,
        run_dirs,
        checked.cfgs,
        jobs=jobs,
        side_by_side=side_by_side,
        placement=placement,
        rank=(rank, ranks),
        records=checked.training,
        allow_missing=allow_missing,
        **shared,
    )
    scoring = {**shared, "figures": figures, "suite": suite, "training_free": list(training_free),
               "resample_seeds": resample_seeds, "clock": clock}  # fmt: skip
    summarise = lambda: _summarise(  # noqa: E731
        store, eval_manifests, out, runs, run_dirs, what, controls, bootstrap, compare, t0, scoring
    )
    return summarise() if ranks == 1 else _summarise_last_rank(rank, ranks, out, runs, run_dirs, what, summarise, log)


def _summarise_last_rank(rank: int, ranks: int, out, runs, run_dirs, what, summarise, log) -> dict | None:
    """Under several ranks: the rank that finds every run finished writes the summary, once."""
    from .checks import run_status

    left = [r.folder for r in runs if run_status(run_dirs[r.folder]) != "done"]
    if left:
        log(
            f"  rank {rank} of {ranks}: its runs are finished; {len(left)} of other ranks are not yet (the "
            "summary is written by the rank that finishes last, or by rerunning this command)"
        )
        return None
    with one_at_a_time(out, "summary"):
        if summary_is_current(out, what, log):
            return json.load(open(os.path.join(out, "summary.json")))
        return summarise()


def _summarise(store, eval_manifests, out, runs, run_dirs, what, controls, bootstrap, compare, t0, shared):
    kw = dict(controls=controls, bootstrap=bootstrap, compare=compare, t0=t0, **shared)
    summary = score_and_summarise(store, eval_manifests, out, runs, run_dirs, **kw)
    with open(os.path.join(out, DONE), "w") as f:
        json.dump(what, f, indent=1)
    return summary


def summarise(score: dict, runs: list[RunSpec], run_dirs: dict[str, str] | None = None, training_free=()) -> dict:
    """Mean +- sample std across seeds of each task's official score, per image control; change from
    CLIP; each head's own training accuracy. A training-free scorer: a method of one 'run'."""
    from ..scoring.score import headline
    from ..scoring.tradeoff import axis_columns, axis_percent

    by_method: dict[str, list[str]] = {k: [k] for k in training_free}
    for r in runs:
        by_method.setdefault(r.method, []).append(r.folder)
    res, ctm, controls = score["results"], score["cross_task_means"], score["controls"]
    tasks = sorted({t for k, v in res.items() if k.startswith("real|") for t in v})
    means = sorted({m for k, v in ctm.items() if k.startswith("real|") for m in v})
    axes = axis_columns(res)  # the compositional and recognition means, when recognition sets were scored
    means += list(axes)

    def value(control: str, run: str, col: str):
        if col in tasks:
            r = res.get(f"{control}|{run}", {}).get(col)
            return None if r is None else headline(r) * 100
        if col in axes:
            return axis_percent(res.get(f"{control}|{run}", {}), *axes[col])
        m = ctm.get(f"{control}|{run}", {}).get(col)
        return None if m is None else m["mean"] * 100

    def partial(control: str, run: str, col: str) -> bool:
        """Does the figure rest on part of its records (a row failed at extract, a mean missing a member)?"""
        if col in axes:
            return any(res.get(f"{control}|{run}", {}).get(t, {}).get("partial") for t in axes[col][1])
        r = (res if col in tasks else ctm).get(f"{control}|{run}", {}).get(col)
        return bool(r and r.get("partial"))

    tables = {c: _control_table(c, tasks + means, by_method, value, partial) for c in controls}
    own = own_accuracy(by_method, run_dirs)
    return {
        "units": "percent (mean, std); points (delta, bootstrap)",
        "columns": tasks + means,
        "tasks": tasks,
        "records": {t: r["n"] for t, r in res.get("real|clip", {}).items() if isinstance(r.get("n"), int)},
        # each cross-task column's members, as the score's results name them (a column such
        # as syn-binding says what it averages)
        "mean_members": {m: ctm["real|clip"][m]["members"] for m in means if m in ctm.get("real|clip", {})}
        | {c: t for c, (_, t) in axes.items()},
        "table": tables["real"] if "real" in tables else {},
        "controls": tables,
        "own_training_accuracy": own,
        "training_free": list(training_free),  # methods nothing trained (no 'learnt' said of them)
        "bootstrap": score["bootstrap"],
        "bootstrap_family": score.get("bootstrap_family"),
        # what decided each run's weights, named (run_header.run_identity: settings, head, store, manifest)
        "identities": {e["run"]: e.get("identity") for e in score.get("scorers", []) if e.get("identity")},
        "decision_changes": score["decision_changes"],
        "store_fingerprint": score["store_fingerprint"],
        "git_revision": score["git_revision"],
    }


def _control_table(control: str, cols: list[str], by_method: dict, value, partial) -> dict:
    """One image control's table: CLIP's figures, then each method's mean +- std across its
    runs and its change from CLIP."""
    clip = {c: value(control, "clip", c) for c in cols}
    table = {
        "clip": {
            c: {"mean": v, "std": 0.0, "n": 1, "delta": 0.0, "partial": partial(control, "clip", c)}
            for c, v in clip.items()
            if v is not None
        }
    }
    for method, folders in by_method.items():
        row = {}
        for col in cols:
            vals = [v for v in (value(control, f, col) for f in folders) if v is not None]
            if vals:
                row[col] = {
                    **mean_std(vals),
                    "delta": float(np.mean(vals)) - (clip.get(col) or float("nan")),
                    "partial": any(partial(control, f, col) for f in folders),
                }
        table[method] = row
    return table


def own_accuracy(by_method: dict, run_dirs: dict | None) -> dict:
    """Each method's own training-sample pairwise accuracy at its end, across its seeds."""
    own = {}
    for method, folders in by_method.items():
        per: dict = {}
        for f in folders:
            if run_dirs and f in run_dirs and checkpoint.exists(run_dirs[f]):
                last = checkpoint.read_state(run_dirs[f])["metrics"][-1]["train_sample"]
                for k, v in last.items():
                    if k != "pairs":
                        per.setdefault(k, []).append(v * 100)
        own[method] = {k: mean_std(v) for k, v in per.items()}
    return own


def train_missing(
    store,
    train_manifest: str,
    runs: list[RunSpec],
    run_dirs: dict,
    cfgs: dict,
    *,
    device: str,
    jobs: int,
    side_by_side: bool | str,
    placement: str,
    progress: bool,
    log,
    rank: tuple[int, int] = (0, 1),
    tracking=None,
    records=None,
    allow_missing: bool = False,
) -> None:
    """Train every run not finished (resuming partial ones), from one in-memory copy of the
    features (of records: train_manifest's TrainingRecords as the checks read them, else
    read here); runs that share a data order (seed, batch size, epochs) train side by side
    on the same batches ("stacked": batched where they can). Under several ranks
    (spread.py), this rank's share of the plan's groups, each run claimed."""
    from .checks import run_status

    order = lambda r: (cfgs[r.folder].seed, cfgs[r.folder].batch_size, cfgs[r.folder].epochs)  # noqa: E731
    key = order if side_by_side else (lambda r: r.folder)
    planned: dict = {}
    for r in runs:  # the whole plan, so that every rank splits it alike whatever is finished
        planned.setdefault(key(r), []).append(r)
    groups: dict = {}
    for i, group in enumerate(my_groups(list(planned.values()), *rank)):
        todo_group = [r for r in group if run_status(run_dirs[r.folder]) != "done"]
        if rank[1] > 1:
            todo_group = [r for r in todo_group if claim(run_dirs[r.folder], *rank)]
        if todo_group:
            groups[i] = todo_group
    todo = [r for g in groups.values() for r in g]
    if rank[1] > 1:
        log(f"  rank {rank[0]} of {rank[1]}: {len(todo)} runs to train here")
    if todo:
        from ..manifest import Manifest
        from ..training.loop import train_heads
        from ..training.training_data import load_training_data

        # one in-memory copy of the features serves every run (patches kept if any head needs them)
        need_patches = any(cfgs[r.folder].uses_tokens for r in todo)
        with stage("loading"):
            data = load_training_data(
                store,
                records if records is not None else Manifest.read(train_manifest),
                need_patches,
                device,
                placement=placement,
                log=lambda m: log(f"  {m}"),
                allow_missing=allow_missing,
            )

        def train_group(group: list[RunSpec]):
            train_heads(
                store,
                train_manifest,
                [(run_dirs[r.folder], cfgs[r.folder]) for r in group],
                device=device,
                resume=True,
                progress=progress,
                data=data,
                watch=tracking.watch if tracking else None,
                stack=side_by_side == "stacked",
                log=lambda m: log(f"  {m}"),
            )

        if jobs > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(jobs) as pool:
                list(pool.map(train_group, groups.values()))
        else:
            for group in groups.values():
                train_group(group)


def score_and_summarise(
    store,
    eval_manifests: list[str],
    out: str,
    runs: list[RunSpec],
    run_dirs: dict,
    *,
    controls,
    bootstrap: int,
    compare,
    device: str,
    progress: bool,
    t0: float,
    log,
    figures: bool = True,
    suite: str | None = None,
    training_free=(),
    resample_seeds: bool = False,
    tracking=None,
    clock: tuple,  # (perf_counter, stage_seconds()) at the study's start
) -> dict:
    """Score CLIP, the training-free scorers and every run on every manifest (or a suite's
    members among them); the summary across seeds with timings. Each run's official scores
    (Real) go to its tracking summary."""
    from ..scoring.score import run_score

    specs = ["clip", *training_free] + [f"{r.method}={run_dirs[r.folder]}" for r in runs]
    pairs = [tuple(p) for p in compare]
    with stage("scoring"):
        score = run_score(
            store,
            eval_manifests,
            specs,
            os.path.join(out, "score"),
            controls=tuple(controls),
            device=device,
            bootstrap_draws=bootstrap,
            overwrite=True,
            compare=pairs,
            progress=progress,
            figures=figures,
            suite=suite,
            labels="folder",  # a study's runs are its folders (the seeds of a method share its name)
            resample_seeds=resample_seeds,
            log=lambda m: log(f"  {m}"),
        )
    for r in runs if tracking else []:
        track_scores(tracking, run_dirs[r.folder], score["results"].get(f"real|{r.folder}", {}))
    with stage("summary"):
        return _write_summary(store, out, runs, run_dirs, score, training_free, t0, clock)


def _write_summary(store, out, runs, run_dirs, score, training_free, t0, clock) -> dict:
    summary = summarise(score, runs, run_dirs, training_free)
    summary["timing"] = {
        "this_invocation_seconds": invocation_seconds(),
        "study_seconds": time.perf_counter() - t0,
        "train_seconds_per_run": {r.folder: checkpoint.read_state(run_dirs[r.folder]).get("seconds") for r in runs},
        "score_seconds": score["seconds"],
        "stage_seconds": stage_seconds(clock[1]),  # each stage's own seconds in this study (progress.stage)
        "study_wall_seconds": time.perf_counter() - clock[0],  # from the study's first check
    }
    enc = store.encoder_config
    summary["encoder"] = {"model": enc.get("model"), "patch_readout": enc.get("patch_readout", "standard")}
    left_out = {  # runs trained on part of their manifest (allow_missing): said in the summary
        r.folder: len(json.load(open(os.path.join(run_dirs[r.folder], "config.json"))).get("excluded_failed", []))
        for r in runs
    }
    if any(left_out.values()):
        summary["training_records_left_out"] = left_out
    profile = os.path.join(out, "profile.json")
    if os.path.exists(profile):
        summary["encoder_profile"] = json.load(open(profile))
    write_summary(out, summary)
    return summary


def study_tracking(cfg, log):
    """A study's Tracking (its report_to: and wandb_project: keys): its runs grouped under its name."""
    from ..training.tracking import Tracking, parse_report_to

    name = getattr(cfg, "wandb_group", None) or os.path.basename(os.path.normpath(cfg.out))
    return Tracking(parse_report_to(cfg.report_to), cfg.wandb_project, name, log)


def track_scores(tracking, run: str, results: dict) -> None:
    """A run's official scores (one scorer's Real results) as its tracking summary: score/<benchmark>."""
    from ..scoring.score import headline

    tracking.summary(run, {f"score/{b}": headline(v) for b, v in results.items()})
