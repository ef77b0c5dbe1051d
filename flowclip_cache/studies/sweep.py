"""flowclip sweep's search (docs/sweep.md): the Optuna study in the sweep folder, its
sampler, pruner and direction, the trials until enough are finished (or the timeout), the
best trial by a stated rule, and the study YAML that reports it on manifests the sweep did
not select on. sweep_trial.py holds the configuration and what one trial does."""

from __future__ import annotations

import json
import os
import time

from .. import outputs
from ..errors import FlowclipError
from ..hashing import file_sha256
from .sweep_trial import (
    SweepConfig,
    claim_folder,
    folder_name,
    prepare,
    run_generation,
    run_trial,
    trial_runs,
    trial_settings,
)

TIE_RULE = "equal objectives: the smaller spread across trial_seeds, then the earlier trial"


def report_manifests(cfg: SweepConfig) -> tuple[list[str], bool]:
    """(what best.yaml's study scores, whether that is the split the sweep selected on).
    A manifest the sweep selects on reports a best that is biased upward: refused unless
    eval_on_selection: true, and then labelled."""
    for key, path in (
        ("store", cfg.store),
        ("train", cfg.train),
        ("validation", cfg.validation),
        *(("eval", e) for e in cfg.eval),
    ):  # every file a trial or best.yaml reads, before the first trial trains
        if path is not None and "://" not in path and not os.path.exists(path):
            raise FlowclipError(f"{key}: {path} does not exist")
    if cfg.validation is not None:
        from ..scoring.manifest_specs import checked_manifests

        checked_manifests([cfg.validation])
    selection = cfg.validation or cfg.train
    where = f"validation: {cfg.validation}" if cfg.validation else f"the val split of train: {cfg.train}"
    if not cfg.eval:
        if cfg.eval_on_selection and cfg.validation:
            return [cfg.validation], True
        raise FlowclipError(
            f"give eval: [MANIFEST...], what the best settings are reported on: manifests the sweep does not "
            f"select on (it selects on {where}); eval_on_selection: true reports on that split, labelled"
        )
    same = [e for e in cfg.eval if _holds(e, selection)]
    if same and not cfg.eval_on_selection:
        raise FlowclipError(
            f"eval: {same[0]} is what the sweep selects on ({where}): the best score reported there is biased "
            f"upward; give a manifest it does not select on (or eval_on_selection: true, labelled)"
        )
    return list(cfg.eval), bool(same)


def _holds(path: str, manifest: str) -> bool:
    """Whether `path` is the manifest's file (same bytes), or a folder holding it."""
    if not os.path.exists(path) or not os.path.exists(manifest):
        return False
    want = file_sha256(manifest)
    if os.path.isfile(path):
        return os.path.samefile(path, manifest) or file_sha256(path) == want
    size = os.path.getsize(manifest)
    for folder, _, names in os.walk(path):
        for n in names:
            f = os.path.join(folder, n)
            if os.path.getsize(f) == size and file_sha256(f) == want:
                return True
    return False


def _sampler(cfg: SweepConfig, space: dict, made: int):
    import optuna

    seed = cfg.seed + made  # seeded by the trials already made: a resumed sweep goes on
    if cfg.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if cfg.sampler == "grid":  # the points are enqueued one by one (next_grid_point); the rest is random
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def grid(space: dict) -> dict:
    """The grid sampler's points: choices, or every integer of an int range."""
    out = {}
    for key, d in space.items():
        if hasattr(d, "choices"):
            out[key] = list(d.choices)
        elif type(d).__name__ == "IntDistribution" and not d.log:
            out[key] = list(range(d.low, d.high + 1))
        else:
            raise FlowclipError(f"space.{key}: sampler: grid needs {{choices: [...]}} or an int range, not floats")
    return out


def next_grid_point(study, space: dict, seed: int) -> None:
    """Enqueue the next grid point no finished trial has taken, in an order shuffled by the
    seed (Optuna's GridSampler stops the study when the grid is done, which ask-and-tell cannot
    take), unless a trial already waits (an interrupted one, tried again first)."""
    import itertools
    import random

    from optuna.trial import TrialState

    if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        return
    points = grid(space)
    combos = [dict(zip(points, values)) for values in itertools.product(*points.values())]
    random.Random(seed).shuffle(combos)
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))  # asked in this generation
    taken = [t.params for t in finished(study) + running]
    left = [c for c in combos if c not in taken]
    if left:
        study.enqueue_trial(left[0])


def _pruner(cfg: SweepConfig):
    import optuna

    if cfg.pruner == "none":
        return optuna.pruners.NopPruner()
    unknown = sorted(set(cfg.pruner_options) - {"n_startup_trials", "n_warmup_steps"})
    if unknown:
        raise FlowclipError(f"pruner_options: unknown keys {unknown}; known: n_startup_trials, n_warmup_steps")
    return optuna.pruners.MedianPruner(**cfg.pruner_options)


def open_study(cfg: SweepConfig, space: dict, log):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    claim_folder(cfg.out)
    storage = f"sqlite:///{os.path.abspath(os.path.join(cfg.out, 'optuna.db'))}"
    study = optuna.create_study(
        study_name="flowclip-sweep", storage=storage, load_if_exists=True,
        direction="maximize" if cfg.direction == "maximize" else "minimize",
    )  # fmt: skip
    if study.direction.name.lower() != cfg.direction:
        raise FlowclipError(f"{cfg.out}: this sweep began with direction: {study.direction.name.lower()}; refused")
    study.sampler = _sampler(cfg, space, len(study.get_trials(deepcopy=False)))
    study.pruner = _pruner(cfg)
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):  # killed mid-trial
        log(f"trial {t.number} was interrupted: tried again with its settings")
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        study.enqueue_trial(t.params)
    return study


def finished(study) -> list:
    """Trials that count: complete, pruned, or failed with an error of their own (not interrupted)."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    return [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED) or "error" in t.user_attrs]


def best_trial(study, direction: str):
    """The best complete trial by TIE_RULE (not Optuna's first-in-order), and those it tied with."""
    from optuna.trial import TrialState

    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not done:
        raise FlowclipError("no trial finished with a value: nothing to report (see each trial's error above)")
    sign = 1.0 if direction == "maximize" else -1.0
    best_value = max(sign * t.value for t in done)
    tied = [t for t in done if sign * t.value == best_value]
    best = min(tied, key=lambda t: (t.user_attrs.get("spread", 0.0), t.number))
    return best, [t for t in tied if t is not best]


def sweep(cfg: SweepConfig, log=print) -> dict:
    """Trials until `trials` are finished (or the timeout), then best.yaml. Each trial's runs
    report to cfg.report_to, grouped under the sweep's name."""
    from ..training.tracking import Tracking, parse_report_to

    report = report_manifests(cfg)  # refused before any trial trains
    name = os.path.basename(os.path.normpath(cfg.out))
    with Tracking(parse_report_to(cfg.report_to), cfg.wandb_project, name, log) as tracking:
        return _search(cfg, tracking, report, log)


def _search(cfg: SweepConfig, tracking, report: tuple[list[str], bool], log) -> dict:
    from optuna.trial import TrialState

    space, store = prepare(cfg)
    n_trials = cfg.trials
    if cfg.sampler == "grid":
        size = 1
        for values in grid(space).values():
            size *= len(values)
        if size < n_trials:
            log(f"sampler grid: {size} points, so {size} trials (not {n_trials})")
            n_trials = size
    study = open_study(cfg, space, log)
    t0, ran = time.monotonic(), False
    while len(finished(study)) < n_trials:
        # as Optuna's optimize(timeout=): checked between trials, so each invocation runs one at least
        if ran and cfg.timeout is not None and time.monotonic() - t0 >= cfg.timeout:
            log(f"timeout: {cfg.timeout:g} s passed; {len(finished(study))} trials finished (rerun to go on)")
            break
        asked = []
        for _ in range(min(cfg.jobs, n_trials - len(finished(study)))):  # a generation (jobs > 1)
            if cfg.sampler == "grid":
                next_grid_point(study, space, cfg.seed)
            asked.append(study.ask(space))
        ran = True
        for trial in asked:
            log(f"trial {trial.number}: training {folder_name(trial.params)}")
        try:
            if cfg.jobs == 1:
                results = {asked[0].number: _one_trial(cfg, store, asked[0], tracking)}
            else:
                results = run_generation(cfg, store, asked, tracking)
        except BaseException:
            for trial in asked:
                trial.set_user_attr("interrupted", True)
                study.enqueue_trial(trial.params)  # the next run of the sweep tries these settings again
                study.tell(trial, state=TrialState.FAIL)
            raise
        for trial in asked:
            _tell(study, trial, results[trial.number], cfg.direction, log)
    return write_best(cfg, study, report, log)


def _one_trial(cfg: SweepConfig, store, trial, tracking):
    """A trial's objective, or the TrialPruned / FlowclipError that ended it."""
    from optuna import TrialPruned

    try:
        return run_trial(cfg, store, trial, trial.params, tracking)
    except (TrialPruned, FlowclipError) as e:
        return e


def _tell(study, trial, result, direction: str, log) -> None:
    from optuna import TrialPruned
    from optuna.trial import TrialState

    if isinstance(result, TrialPruned):
        study.tell(trial, state=TrialState.PRUNED)
        log(f"trial {trial.number} pruned: {result}")
    elif isinstance(result, FlowclipError):
        trial.set_user_attr("error", str(result))
        study.tell(trial, state=TrialState.FAIL)
        log(f"trial {trial.number} failed: {result}")
    else:
        study.tell(trial, result)
        best, _ = best_trial(study, direction)
        best_text = f"best {best.value:.4f}, trial {best.number}"
        log(f"trial {trial.number}: {folder_name(trial.params)} -> {result:.4f}{_spread_text(trial)} ({best_text})")


def _spread_text(trial) -> str:
    values = trial.user_attrs.get("values", [])
    return f" (mean of {len(values)} seeds, spread {trial.user_attrs['spread']:.4f})" if len(values) > 1 else ""


def write_best(cfg: SweepConfig, study, report_on: tuple[list[str], bool], log) -> dict:
    import yaml

    best, tied = best_trial(study, cfg.direction)
    if tied:
        log(f"trials {', '.join(str(t.number) for t in tied)} tie with trial {best.number}; chosen by rule: {TIE_RULE}")
    report, on_selection = report_on  # report_manifests(cfg), found before the trials
    settings = trial_settings(cfg, best.params)
    shared = {k: v for k, v in cfg.train_config.items() if k != "head"}
    searched = {k: v for k, v in settings.items() if k == "head" or shared.get(k) != v}
    # the study's folder says so when it reports on the split the sweep selected on
    study_out = os.path.join(cfg.out, "best-study-on-selection-split" if on_selection else "best-study")
    study_yaml = {
        "kind": "ablation",
        "out": study_out,
        "store": cfg.store,
        "train": cfg.train,
        "eval": report,
        **({"plugins": cfg.plugins} if cfg.plugins else {}),
        "seeds": cfg.seeds,
        "heads": {"best": searched},
        "train_config": shared,
        "compare": [],
    }
    path = os.path.join(cfg.out, "best.yaml")
    selected_on = f"validation {cfg.validation}" if cfg.validation else f"the val split of {cfg.train}"
    header = (
        f"# flowclip run {path}\n# the best settings of the sweep {cfg.out}: trial {best.number}, "
        f"objective {best.value:.4f} on {selected_on} ({cfg.direction}; ties: {TIE_RULE})\n"
        + (
            "# eval is the split the sweep selected on (eval_on_selection: true): its scores are biased upward\n"
            if on_selection
            else "# eval: manifests the sweep did not select on\n"
        )
    )
    outputs.write_text(path, header + yaml.safe_dump(study_yaml, sort_keys=False))
    # what flowclip publish says of a run this sweep selected (its runs, on what, how)
    selection = {
        "trial": best.number, "value": best.value, "params": best.params, "direction": cfg.direction,
        "runs": [name for name, _ in trial_runs(best.params, cfg.trial_seeds)],
        "selected_on": os.path.basename(cfg.validation or "") or f"val split of {os.path.basename(cfg.train)}",
        "objective": "official score" if cfg.validation else "pairwise accuracy",
        "trials": len(finished(study)), "space": sorted(cfg.space),
    }  # fmt: skip
    outputs.write_text(os.path.join(cfg.out, "best.json"), json.dumps(selection, indent=1))
    log(f"best: trial {best.number}, {folder_name(best.params)} -> {best.value:.4f}; wrote {path}")
    if on_selection:
        log("note: best.yaml reports on the split the sweep selected on: its scores are biased upward")
    out = {"trial": best.number, "value": best.value, "params": best.params, "yaml": path}
    return {**out, "on_selection": on_selection}
