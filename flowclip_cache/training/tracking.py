"""Tracking, as open_clip_train's `--report-to tensorboard,wandb` does it: every record a
run logs (log.jsonl: each step's loss terms, learning rate, gradient norm; each epoch's
pairwise accuracy) also goes to TensorBoard and/or Weights & Biases as it is logged, with
the run's settings as hyper-parameters and its final scores as summary metrics. Needs the
`track` extra (pip install "flowclip[track]"); docs/tracking.md.

    RUN/tensorboard/   TensorBoard's event files (tensorboard --logdir RUN/tensorboard)
    RUN/wandb/         W&B's run folder: offline unless the user is logged in
    RUN/tracking.json  the W&B run id, so a resumed run or its scores join the same run

A study's runs are grouped under the study's name, a sweep's trials under the sweep's."""

from __future__ import annotations

import json
import netrc
import os
import secrets
from dataclasses import dataclass, field
from typing import Any

from .. import outputs
from ..errors import FlowclipError

KINDS = ("tensorboard", "wandb")
NEEDS = {"tensorboard": "tensorboard", "wandb": "wandb"}  # kind -> the package it imports


def parse_report_to(value) -> list[str]:
    """'tensorboard,wandb' (or a list, or 'all', or '') -> the kinds, each checked and importable."""
    items = value if isinstance(value, list) else str(value or "").split(",")
    kinds = [k.strip() for k in items if k and k.strip()]
    kinds = list(KINDS) if kinds == ["all"] else kinds
    for k in kinds:
        if k not in KINDS:
            raise FlowclipError(f"report_to: unknown {k!r}; known: {', '.join(KINDS)} (or all)")
        try:
            __import__(NEEDS[k])
        except ImportError:
            raise FlowclipError(f"report_to {k} needs the {NEEDS[k]} package: pip install 'flowclip[track]'") from None
    return list(dict.fromkeys(kinds))


def wandb_mode() -> tuple[str, str]:
    """(mode, why): W&B uploads only for a user who is logged in; WANDB_MODE decides if set."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"], "WANDB_MODE is set"
    if os.environ.get("WANDB_API_KEY"):
        return "online", "WANDB_API_KEY is set"
    try:
        if netrc.netrc().authenticators("api.wandb.ai"):
            return "online", "logged in (wandb login)"
    except (OSError, netrc.NetrcParseError):
        pass
    return "offline", "not logged in: `wandb login`, then `wandb sync RUN/wandb/offline-run-*` uploads it"


def hyperparameters(config: dict) -> dict[str, Any]:
    """A run folder's config.json as flat scalar settings (what TensorBoard's HParams take)."""
    flat: dict[str, Any] = {}

    def put(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                put(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, (bool, int, float, str)):
            flat[prefix] = value
        elif value is not None:
            flat[prefix] = json.dumps(value)

    put("", config)
    return flat


def scalars(record: dict) -> tuple[int, dict[str, float]]:
    """(step, {name: value}) of one log.jsonl record, named as open_clip_train names them."""
    if "eval" in record:
        m = record["eval"]
        out = {"epoch": float(m["epoch"]), "train_sample/pairwise_accuracy": m["train_sample"]["all"]}
        if "val" in m:
            out["val/pairwise_accuracy"] = m["val"]["all"]
        return int(record["step"]), out
    skip = {"step", "epoch"}
    values = {f"train/{k}": float(v) for k, v in record.items() if k not in skip and isinstance(v, (int, float))}
    return int(record["step"]), values


class RunTracker:
    """One run folder's TensorBoard writer and W&B run."""

    def __init__(self, kinds: list[str], out: str, project: str, group: str | None, log):
        self.out, self.writer, self.wandb = out, None, None
        config_path = os.path.join(out, "config.json")
        self.hparams = hyperparameters(json.load(open(config_path))) if os.path.exists(config_path) else {}
        name = os.path.basename(os.path.normpath(out))
        if "tensorboard" in kinds:
            from torch.utils.tensorboard import SummaryWriter

            outputs.own(out, "tensorboard")
            self.writer = SummaryWriter(log_dir=os.path.join(out, "tensorboard"))
        if "wandb" in kinds:
            self.wandb = _wandb_run(out, name, project, group, self.hparams, log)

    def record(self, record: dict) -> None:
        step, values = scalars(record)
        if self.writer is not None:
            for k, v in values.items():
                self.writer.add_scalar(k, v, step)
        if self.wandb is not None:
            self.wandb.log(values, step=step)

    def summary(self, values: dict[str, float]) -> None:
        if self.writer is not None:  # the HParams dashboard: settings against the final figures
            self.writer.add_hparams(self.hparams, {f"summary/{k}": v for k, v in values.items()}, run_name=".")
        if self.wandb is not None:
            self.wandb.summary.update(values)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.wandb is not None:
            self.wandb.finish()
        # what TensorBoard and W&B wrote, listed in the run's marker: --overwrite may replace it
        outputs.own_tree(self.out, "tensorboard", "wandb")


def _wandb_run(out: str, name: str, project: str, group: str | None, hparams: dict, log):
    import wandb

    outputs.own(out, "wandb")
    outputs.own(out, "tracking.json")
    path = os.path.join(out, "tracking.json")
    known = json.load(open(path)) if os.path.exists(path) else {}
    run_id = known.get("wandb_id") or secrets.token_hex(4)  # W&B ids: lowercase letters and digits
    if not known:
        outputs.atomic_write(path, lambda p: json.dump({"wandb_id": run_id}, open(p, "w")))
    mode, why = wandb_mode()
    log(f"W&B {mode} ({why}): project {project}, run {name} ({run_id})")
    return wandb.init(
        project=project, name=name, group=group, id=run_id, resume="allow", dir=out, mode=mode,  # type: ignore[arg-type]
        config=hparams, reinit="create_new",
    )  # fmt: skip


@dataclass
class Tracking:
    """The trackers of a command: one RunTracker per run folder, opened on its first record
    (training's watch) or its summary, closed by close() (a `with` block)."""

    kinds: list[str]
    project: str = "flowclip"
    group: str | None = None  # the study's or sweep's name
    log: Any = print
    runs: dict[str, RunTracker] = field(default_factory=dict)

    def _run(self, out: str) -> RunTracker:
        if out not in self.runs:
            self.runs[out] = RunTracker(self.kinds, out, self.project, self.group, self.log)
        return self.runs[out]

    def watch(self, out: str, record: dict) -> None:
        """Training's watch(out, record): each record as it is logged."""
        if self.kinds:
            self._run(out).record(record)

    def summary(self, out: str, values: dict[str, float]) -> None:
        if self.kinds:
            self._run(out).summary(values)

    def close(self) -> None:
        for run in self.runs.values():
            run.close()
        self.runs.clear()

    def __enter__(self) -> "Tracking":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
