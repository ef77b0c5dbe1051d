"""flowclip sweep: a search over any head's settings on a validation objective, with
Optuna (the `sweep` extra), resumable through Optuna's own SQLite storage in the sweep
folder (docs/sweep.md).

    OUT/optuna.db            the Optuna study (trials, parameters, values)
    OUT/trials/<settings>/   each trial: a normal train-head run folder, named by its settings
    OUT/scores/<settings>/   its validation score (a flowclip score results folder), when a
                             validation manifest is given
    OUT/best.yaml            the best trial's settings as a study `flowclip run` accepts

A killed or interrupted trial is tried again with the same settings on the next run of
the command (its run folder resumes from its checkpoint); a finished trial never is."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from . import outputs
from .errors import FlowclipError
from .training import checkpoint


@dataclass
class SweepConfig:
    out: str
    store: str
    train: str  # training manifest
    # a candidates/pairwise manifest whose benchmark's official score is the objective; None:
    # pairwise accuracy on the training manifest's split == 'val' records
    validation: str | None = None
    trials: int = field(default=20, metadata={"min": 1})
    seed: int = field(default=0, metadata={"min": 0})
    train_config: dict[str, Any] = field(default_factory=dict)  # TrainConfig keys every trial shares
    # KEY: {low, high, log?, int?} or {choices: [...]}; head_options.NAME and loss_weights.NAME reach inside
    space: dict[str, dict[str, Any]] = field(default_factory=dict)
    plugins: list[str] = field(default_factory=list)
    eval: list[str] = field(default_factory=list)  # what best.yaml's study scores (default: the validation manifest)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # best.yaml's seeds
    device: str = "cpu"


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


def objective(cfg: SweepConfig, store, name: str, settings: dict) -> float:
    """Train one trial's run folder (resuming it if it began) and score it on the objective."""
    from .scoring.score import headline, run_score
    from .training.loop import TrainConfig, train_head

    run = os.path.join(cfg.out, "trials", name)
    tc = TrainConfig.from_dict(settings, f"trial {name}")
    state = train_head(store, cfg.train, run, tc, device=cfg.device, resume=checkpoint.exists(run),
                       progress=False, log=lambda *_: None)  # fmt: skip
    if cfg.validation is None:
        val = state["metrics"][-1].get("val")
        if val is None:
            raise FlowclipError(f"{cfg.train}: no records with split == 'val'; give validation=MANIFEST")
        return float(val["all"])
    folder = os.path.join(cfg.out, "scores", name)
    if not os.path.exists(os.path.join(folder, "results.json")):
        run_score(store, [cfg.validation], [f"trial={run}"], folder, bootstrap_draws=0, device=cfg.device,
                  progress=False, log=lambda *_: None)  # fmt: skip
    results = json.load(open(os.path.join(folder, "results.json")))["results"]["real|" + name]
    if len(results) != 1:
        raise FlowclipError(f"validation={cfg.validation}: expected one benchmark, it holds {sorted(results)}")
    return float(headline(next(iter(results.values()))))


def _open_study(cfg: SweepConfig, log):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    outputs.require_own(cfg.out, "sweep")
    os.makedirs(cfg.out, exist_ok=True)
    outputs.mark(cfg.out, "sweep", ["optuna.db", "trials", "scores", "best.yaml"])
    storage = f"sqlite:///{os.path.abspath(os.path.join(cfg.out, 'optuna.db'))}"
    study = optuna.create_study(
        study_name="flowclip-sweep", storage=storage, load_if_exists=True, direction="maximize"
    )  # fmt: skip
    # seeded by the trials already made: a resumed sweep goes on, not back to its first proposals
    study.sampler = optuna.samplers.TPESampler(seed=cfg.seed + len(study.get_trials(deepcopy=False)))
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):  # killed mid-trial
        log(f"trial {t.number} was interrupted: tried again with its settings")
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        study.enqueue_trial(t.params)
    return study


def finished(study) -> list:
    """Trials that count: complete, or failed with an error of their own (not interrupted)."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    return [t for t in trials if t.state == TrialState.COMPLETE or "error" in t.user_attrs]


def sweep(cfg: SweepConfig, log=print) -> dict:
    from optuna.trial import TrialState

    from .heads.plugins import load_plugin
    from .store import FeatureStore
    from .training.loop import TrainConfig

    for target in cfg.plugins:
        load_plugin(target)
    if not (cfg.eval or cfg.validation):
        raise FlowclipError("give eval=[...] (or validation=...): the manifests the best settings' study scores")
    space = distributions(cfg.space)
    for key, dist in space.items():  # every key reaches TrainConfig before any trial trains
        probe = dist.choices[0] if hasattr(dist, "choices") else dist.low
        TrainConfig.from_dict(trial_settings(cfg, {key: probe}), f"space.{key}")
    store = FeatureStore(cfg.store)
    study = _open_study(cfg, log)
    while len(finished(study)) < cfg.trials:
        trial = study.ask(space)
        name = folder_name(trial.params)
        log(f"trial {trial.number}: training {name}")
        try:
            value = objective(cfg, store, name, trial_settings(cfg, trial.params))
        except FlowclipError as e:
            trial.set_user_attr("error", str(e))
            study.tell(trial, state=TrialState.FAIL)
            log(f"trial {trial.number} failed: {e}")
            continue
        except BaseException:
            trial.set_user_attr("interrupted", True)
            study.enqueue_trial(trial.params)  # the next run of the sweep tries these settings again
            study.tell(trial, state=TrialState.FAIL)
            raise
        study.tell(trial, value)
        best = study.best_trial
        log(f"trial {trial.number}: {name} -> {value:.4f} (best {best.value:.4f}, trial {best.number})")
    return write_best(cfg, study, log)


def write_best(cfg: SweepConfig, study, log) -> dict:
    import yaml

    best = study.best_trial
    settings = trial_settings(cfg, best.params)
    shared = {k: v for k, v in cfg.train_config.items() if k != "head"}
    searched = {k: v for k, v in settings.items() if k == "head" or shared.get(k) != v}
    study_yaml = {
        "kind": "ablation",
        "out": os.path.join(cfg.out, "best-study"),
        "store": cfg.store,
        "train": cfg.train,
        "eval": cfg.eval or ([cfg.validation] if cfg.validation else []),
        **({"plugins": cfg.plugins} if cfg.plugins else {}),
        "seeds": cfg.seeds,
        "heads": {"best": searched},
        "train_config": shared,
        "compare": [],
    }
    path = os.path.join(cfg.out, "best.yaml")
    header = (
        f"# flowclip run {path}\n# the best settings of the sweep {cfg.out}: trial {best.number}, "
        f"objective {best.value:.4f} ({'validation ' + cfg.validation if cfg.validation else 'val split'})\n"
    )
    outputs.write_text(path, header + yaml.safe_dump(study_yaml, sort_keys=False))
    log(f"best: trial {best.number}, {folder_name(best.params)} -> {best.value:.4f}; wrote {path}")
    return {"trial": best.number, "value": best.value, "params": best.params, "yaml": path}
