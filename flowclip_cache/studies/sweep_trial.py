"""flowclip sweep, one trial: its configuration, search space, run folders (one per seed)
and objective; sweep.py runs the search (Optuna, the `sweep` extra), resumable through
Optuna's own SQLite storage in the sweep folder (docs/sweep.md).

    OUT/optuna.db            the Optuna study (trials, parameters, values)
    OUT/trials/<settings>/   each trial: a normal train-head run folder, named by its settings
                             (<settings>__seed-<s>, one per seed, with several trial_seeds)
    OUT/scores/<settings>/   its validation score (a flowclip score results folder), when a
                             validation manifest is given
    OUT/best.yaml            the best trial's settings as a study `flowclip run` accepts
    OUT/best.json            the best trial, its run folders and what it was selected on (publish reads it)

A killed or interrupted trial is tried again with the same settings on the next run of
the command (its run folder resumes from its checkpoint); a finished trial never is."""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass, field
from typing import Any

from .. import outputs
from ..errors import FlowclipError
from ..training import checkpoint

SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("none", "median")


@dataclass
class SweepConfig:
    out: str
    store: str
    train: str  # training manifest
    # a candidates/pairwise manifest whose benchmark's official score is the objective; None:
    # pairwise accuracy on the training manifest's split == 'val' records
    validation: str | None = None
    # what best.yaml's study scores: manifests the sweep did not select on (checked)
    eval: list[str] = field(default_factory=list)
    eval_on_selection: bool = False  # allow eval to be the selection split (labelled: biased upward)
    trials: int = field(default=20, metadata={"min": 1})
    seed: int = field(default=0, metadata={"min": 0})  # the sampler's
    direction: str = field(default="maximize", metadata={"choices": ("maximize", "minimize")})
    sampler: str = field(default="tpe", metadata={"choices": SAMPLERS})
    pruner: str = field(default="none", metadata={"choices": PRUNERS})  # median: on the per-epoch val accuracy
    pruner_options: dict[str, int] = field(default_factory=dict)  # MedianPruner's n_startup_trials, n_warmup_steps
    timeout: float | None = field(default=None, metadata={"gt": 0})  # seconds: no trial starts after
    trial_seeds: list[int] = field(default_factory=lambda: [0])  # each trial: the mean over these seeds
    train_config: dict[str, Any] = field(default_factory=dict)  # TrainConfig keys every trial shares
    # KEY: {low, high, log?, int?} or {choices: [...]}; head_options.NAME and loss_weights.NAME reach inside
    space: dict[str, dict[str, Any]] = field(default_factory=dict)
    plugins: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # best.yaml's seeds
    report_to: list[str] = field(default_factory=list)  # tensorboard, wandb (training/tracking.py)
    wandb_project: str = "flowclip"
    device: str = "cpu"
    # trials asked of the sampler together (a generation): their runs train side by side on
    # the same batches where they share a data order, and take one batched step with stack
    jobs: int = field(default=1, metadata={"min": 1})
    stack: bool = False
    # train on the records left when some rest on images or captions extract could not read
    allow_missing: bool = False


def distributions(space: dict) -> dict:
    """Optuna distributions of the search space, each entry checked."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, Any] = {}
    for key, spec in space.items():
        where = f"space.{key}"
        if not isinstance(spec, dict):
            raise FlowclipError(f"{where}: expected {{low, high}} or {{choices: [...]}}, got {spec!r}")
        unknown = sorted(set(spec) - {"low", "high", "log", "int", "choices"})
        if unknown:
            raise FlowclipError(f"{where}: unknown keys {unknown}; known: choices, high, int, log, low")
        if "choices" in spec:
            if not isinstance(spec["choices"], list) or not spec["choices"]:
                raise FlowclipError(f"{where}.choices: expected a non-empty list")
            out[key] = CategoricalDistribution(spec["choices"])
            continue
        low, high = spec.get("low"), spec.get("high")
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (low, high)):
            raise FlowclipError(f"{where}: needs numbers low < high, got {low!r}, {high!r}")
        lo, hi, log = float(low), float(high), bool(spec.get("log"))  # type: ignore[arg-type]
        if not lo < hi or (log and lo <= 0):
            raise FlowclipError(f"{where}: needs numbers low < high (and low > 0 with log), got {low!r}, {high!r}")
        out[key] = IntDistribution(int(lo), int(hi), log=log) if spec.get("int") else FloatDistribution(lo, hi, log=log)
    if not out:
        raise FlowclipError("space: nothing to search (give at least one KEY: {low, high} or {choices: [...]})")
    return out


def trial_settings(cfg: SweepConfig, params: dict) -> dict:
    """The TrainConfig keys of one trial: the shared ones, then its parameters (a dotted
    key sets one entry of head_options or loss_weights)."""
    out = json.loads(json.dumps(cfg.train_config))
    for key, value in params.items():
        group, dot, name = key.partition(".")
        if dot:
            out[group] = {**(out.get(group) or {}), name: value}
        else:
            out[key] = value
    return out


def folder_name(params: dict) -> str:
    """A trial's run folder, named by its settings (a retried trial resumes its own)."""
    show = lambda v: f"{v:.6g}" if isinstance(v, float) else str(v)  # noqa: E731
    return "__".join(f"{k}-{show(params[k])}" for k in sorted(params))


def trial_runs(params: dict, seeds: list[int]) -> list[tuple[str, int]]:
    """(folder name, seed) of each run of a trial: one seed keeps the settings' name."""
    name = folder_name(params)
    return [(name, seeds[0])] if len(seeds) == 1 else [(f"{name}__seed-{s}", s) for s in seeds]


def objective(cfg: SweepConfig, store, name: str, settings: dict, watch=None) -> float:
    """Train one run folder of a trial (resuming it if it began) and score it on the objective."""
    from ..training.loop import TrainConfig, train_head

    run = os.path.join(cfg.out, "trials", name)
    tc = TrainConfig.from_dict(settings, f"trial {name}")
    state = train_head(store, cfg.train, run, tc, device=cfg.device, resume=checkpoint.exists(run),
                       progress=False, watch=watch, log=lambda *_: None)  # fmt: skip
    return objective_value(cfg, store, name, state)


def objective_value(cfg: SweepConfig, store, name: str, state: dict) -> float:
    """A finished run's objective: its last val pairwise accuracy, or its official score on
    the validation manifest (scored once: its results folder is kept)."""
    from ..scoring.score import headline, run_score

    if cfg.validation is None:
        val = state["metrics"][-1].get("val")
        if val is None:
            raise FlowclipError(f"{cfg.train}: no records with split == 'val'; give validation=MANIFEST")
        return float(val["all"])
    run, folder = os.path.join(cfg.out, "trials", name), os.path.join(cfg.out, "scores", name)
    if not os.path.exists(os.path.join(folder, "results.json")):
        run_score(store, [cfg.validation], [f"trial={run}"], folder, bootstrap_draws=0, device=cfg.device,
                  progress=False, log=lambda *_: None)  # fmt: skip
    results = json.load(open(os.path.join(folder, "results.json")))["results"]["real|trial"]
    if len(results) != 1:
        raise FlowclipError(f"validation={cfg.validation}: expected one benchmark, it holds {sorted(results)}")
    return float(headline(next(iter(results.values()))))


def run_generation(cfg: SweepConfig, store, trials: list, tracking=None) -> dict:
    """Trials asked together (jobs > 1): every run of them trains side by side with the
    runs that share its data order (seed, batch size, epochs), stacked with cfg.stack, then
    each is scored. {trial number: its objective (values and spread set on the trial), or
    the FlowclipError that failed it (and the runs it trained beside)}. Two trials of the
    same settings share their runs."""
    from ..training.head_run import HeadRun
    from ..training.loop import TrainConfig, train_heads
    from ..training.run_header import check_same_run, read_run_config

    runs: dict[str, tuple[dict, list[int]]] = {}  # folder name -> (settings, the trials it serves)
    for t in trials:
        for name, seed in trial_runs(t.params, cfg.trial_seeds):
            runs.setdefault(name, ({**trial_settings(cfg, t.params), "seed": seed}, []))[1].append(t.number)
    folder = lambda name: os.path.join(cfg.out, "trials", name)  # noqa: E731
    failed: dict[int, FlowclipError] = {}
    values: dict[str, float] = {}
    groups: dict[tuple, list[tuple[str, Any]]] = {}
    for name, (settings, numbers) in runs.items():
        try:
            tc = TrainConfig.from_dict(settings, f"trial {name}")
        except FlowclipError as e:
            failed.update(dict.fromkeys(numbers, e))
            continue
        groups.setdefault((tc.seed, tc.batch_size, tc.epochs), []).append((name, tc))
    for group in groups.values():
        for n, tc in group:  # a finished trial is these settings' run, or the sweep is refused (never reused)
            if os.path.exists(os.path.join(folder(n), "DONE")):
                check_same_run(read_run_config(folder(n), folder(n)),
                               HeadRun.run_config(store, cfg.train, tc, cfg.device), folder(n))  # fmt: skip
        todo = [(folder(n), tc) for n, tc in group if not os.path.exists(os.path.join(folder(n), "DONE"))]
        try:
            if todo:
                train_heads(store, cfg.train, todo, device=cfg.device, resume=True, progress=False, stack=cfg.stack,
                            watch=tracking.watch if tracking else None, allow_missing=cfg.allow_missing,
                            log=lambda *_: None)  # fmt: skip
            for n, _ in group:
                values[n] = objective_value(cfg, store, n, checkpoint.read_state(folder(n)))
        except FlowclipError as e:
            failed.update({num: e for n, _ in group for num in runs[n][1]})
    out: dict[int, Any] = {}
    for t in trials:
        if t.number in failed:
            out[t.number] = failed[t.number]
            continue
        names = [name for name, _ in trial_runs(t.params, cfg.trial_seeds)]
        for name in names if tracking else []:
            tracking.summary(folder(name), {"objective": values[name]})
        t.set_user_attr("values", [values[n] for n in names])
        t.set_user_attr("spread", spread([values[n] for n in names]))
        out[t.number] = sum(values[n] for n in names) / len(names)
    return out


def pruning_watch(trial):
    """Report each epoch's val pairwise accuracy to the trial; stop the run when its pruner says so."""
    import optuna

    def watch(out, record):
        val = record.get("eval", {}).get("val")
        if val is None or not record["eval"]["epoch"]:
            return
        trial.report(float(val["all"]), record["eval"]["epoch"])
        if trial.should_prune():
            raise optuna.TrialPruned(f"epoch {record['eval']['epoch']}: val {val['all']:.4f}, stopped by the pruner")

    return watch


def run_trial(cfg: SweepConfig, store, trial, params: dict, tracking=None) -> float:
    """A trial's objective: the mean over its seeds' runs (the values and their spread are
    recorded on the trial). The first seed's per-epoch val accuracy is reported for pruning;
    every run's records and objective go to `tracking` (training/tracking.py) when given."""
    runs = trial_runs(params, cfg.trial_seeds)
    values = []
    for i, (name, seed) in enumerate(runs):
        watchers = ([tracking.watch] if tracking else []) + ([pruning_watch(trial)] if i == 0 else [])
        settings = {**trial_settings(cfg, params), "seed": seed}
        value = objective(cfg, store, name, settings, lambda out, rec: [w(out, rec) for w in watchers])
        if tracking:
            tracking.summary(os.path.join(cfg.out, "trials", name), {"objective": value})
        values.append(value)
    trial.set_user_attr("values", values)
    trial.set_user_attr("spread", spread(values))
    return sum(values) / len(values)


def spread(values: list[float]) -> float:
    """The sample standard deviation across seeds (0 for one)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def suggest(trial, space: dict) -> dict:
    """The trial's settings drawn through Optuna's public suggest API (a user's own study)."""
    out = {}
    for key, d in space.items():
        if hasattr(d, "choices"):
            out[key] = trial.suggest_categorical(key, list(d.choices))
        elif type(d).__name__ == "IntDistribution":
            out[key] = trial.suggest_int(key, d.low, d.high, log=d.log)
        else:
            out[key] = trial.suggest_float(key, d.low, d.high, log=d.log)
    return out


def prepare(cfg: SweepConfig) -> tuple[dict, Any]:
    """Every check before a trial trains -> (the space's distributions, the store)."""
    from ..heads.plugins import load_plugin
    from ..store import FeatureStore
    from ..training.loop import TrainConfig

    for target in cfg.plugins:
        load_plugin(target)
    if "seed" in cfg.train_config:
        raise FlowclipError("train_config.seed: give a trial's seeds as trial_seeds: [...] instead")
    space = distributions(cfg.space)
    for key, dist in space.items():  # every key reaches TrainConfig before any trial trains
        probe = dist.choices[0] if hasattr(dist, "choices") else dist.low
        TrainConfig.from_dict(trial_settings(cfg, {key: probe}), f"space.{key}")
    if cfg.pruner != "none" and cfg.jobs > 1:
        raise FlowclipError(f"pruner: {cfg.pruner} needs jobs: 1 (a pruned trial would stop the runs beside it)")
    if cfg.pruner != "none" and not _has_val_split(cfg.train):
        raise FlowclipError(f"pruner: {cfg.pruner} watches the val accuracy per epoch; {cfg.train} has no val split")
    store = FeatureStore(cfg.store)
    from ..manifest import Manifest
    from ..training.training_data import check_missing, training_records

    check_missing(training_records(store, Manifest.read(cfg.train)), cfg.allow_missing)  # before any trial
    return space, store


def _has_val_split(manifest: str) -> bool:
    from ..manifest import Manifest

    m = Manifest.read(manifest)
    return "split" in m.table.column_names and "val" in set(m.table.column("split").to_pylist())


def claim_folder(out: str) -> None:
    """The sweep folder, new or a sweep's (marked as flowclip's; never another's)."""
    outputs.require_own(out, "sweep")
    os.makedirs(out, exist_ok=True)
    outputs.mark(out, "sweep", ["optuna.db", "trials", "scores", "best.yaml", "best.json"])


def make_objective(cfg: SweepConfig):
    """objective(trial) -> float for a user's own optuna study: it draws the space's settings,
    trains the trial's runs under cfg.out and scores them exactly as flowclip sweep does."""
    space, store = prepare(cfg)
    claim_folder(cfg.out)
    return lambda trial: run_trial(cfg, store, trial, suggest(trial, space))
