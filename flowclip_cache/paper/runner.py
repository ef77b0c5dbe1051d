"""Running the paper plan's steps (`flowclip run paper`; docs/paper.md, "Running it"):
each step's commands in order, in this process, skipping what is done, resuming what a
crash cut short, and going past a step whose raw inputs are missing (and every step that
waits on it) with what it lacks named.

Many processes (torchrun, or a Slurm job array; spread.py): every rank walks the same
plan. A study is run by every rank (the study spreads its runs, spread.py); any other
step belongs to one rank (i = r mod N among them), which runs it single-process and then
writes its done-marker OUT/.paper-steps/<step>.done; a rank that needs another's output
waits for that marker (or its .failed one). The tables are written by the rank that
finds every step done, the last to finish (or by any rerun)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import time

from ..devices import rank_device
from ..errors import FlowclipError
from ..studies.spread import study_rank

MARKERS = ".paper-steps"
RANK_VARIABLES = (
    *("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    *("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"),
)
POLL_SECONDS = 2.0


class Steps:
    """The plan's steps with their done-markers and who runs each."""

    def __init__(self, cfg, steps, rank: int, world: int):
        self.cfg, self.steps, self.rank, self.world = cfg, steps, rank, world
        self.producer = {s.makes: s for s in steps if s.makes and s.kind != "tables"}
        single = [s for s in steps if s.kind not in ("study", "tables")]
        self.owner = {id(s): i % world for i, s in enumerate(single)}
        self.blocked: dict[int, list[str]] = {}

    def marker(self, step, suffix: str) -> str:
        return os.path.join(self.cfg.out, MARKERS, f"{step.kind}-{step.name}.{suffix}")

    def fingerprint(self, step) -> str:
        """The step's commands as the plan states them on `cfg.device` (a rank's own device
        index is not part of them), so a changed plan reruns the step."""
        return hashlib.sha256("\n".join(step.commands).encode()).hexdigest()[:16]

    def done(self, step) -> bool:
        """A step with an output of its own is done when that output is whole (a lost one is
        made again); a store, which extract only ever adds to, when its marker says so."""
        if step.kind == "tables":
            return False
        if step.kind != "extract":
            return step.finished
        try:
            return json.load(open(self.marker(step, "done")))["commands"] == self.fingerprint(step)
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def lacks(self, step) -> list[str]:
        """What the step needs that nothing will provide: raw inputs not there, with how to
        get them, or outputs of steps that are themselves blocked."""
        out = []
        for path in step.needs:
            src = self.producer.get(path)
            if os.path.exists(path) and (src is None or self.done(src) or src.kind == "manifest"):
                continue
            if src is None:
                out.append(f"{path}: {step.raw.get(path, 'not made by any step')}")
            elif id(src) in self.blocked:
                out.append(f"{path}: from step {src.kind} {src.name}, which cannot run")
        return out

    def wait_for(self, step, log) -> None:
        """Until every step making this one's inputs is done (another rank's, or a study: a
        rank reaches a later step only after its own share of every study before it)."""
        waiting = [self.producer[p] for p in step.needs if p in self.producer]
        said = False
        for src in waiting:
            while not self.done(src):
                if os.path.exists(self.marker(src, "failed")):
                    why = open(self.marker(src, "failed")).read().strip()
                    raise FlowclipError(f"step {src.kind} {src.name} failed ({why}); fix it and rerun")
                if not said:
                    log(f"rank {self.rank}: waiting for step {src.kind} {src.name} (rank {self.owner.get(id(src))})")
                    said = True
                time.sleep(POLL_SECONDS)


@contextlib.contextmanager
def one_process():
    """A step that is not a study runs in this process alone: extract and adapt would
    otherwise split their work with ranks that are not running it."""
    saved = {k: os.environ.pop(k) for k in RANK_VARIABLES if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def run_command(cmd: str) -> None:
    """One `flowclip ...` command in this process; its failure raised with its message
    (click prints a FlowclipError's one line and exits 2)."""
    import click

    from ..cli import main

    argv = shlex.split(cmd)
    try:
        main.main(args=argv[1:], prog_name="flowclip", standalone_mode=False)
    except SystemExit as e:
        if e.code not in (0, None):
            raise FlowclipError(f"`flowclip {argv[1]}` exited with status {e.code} (its error is above)") from None
    except click.ClickException as e:
        raise FlowclipError(f"`flowclip {argv[1]}`: {e.format_message()}") from None


def run_step(plan: Steps, step, local, log) -> None:
    """A step's commands, those a path says have run skipped; its done-marker after."""
    from .. import outputs

    if step.mkdir:
        os.makedirs(step.mkdir, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(plan.marker(step, "failed"))
    done_when = step.done_when or [""] * len(step.commands)
    t0 = time.perf_counter()
    try:
        for cmd, done in zip(local.commands, done_when):
            if done and os.path.exists(done):
                log(f"    (done: {done})")
                continue
            log(f"    $ {cmd}")
            if step.kind == "study":
                run_command(cmd)
            else:
                with one_process():
                    run_command(cmd)
    except (FlowclipError, OSError) as e:
        if step.kind != "study":
            outputs.write_text(plan.marker(step, "failed"), f"rank {plan.rank}: {e}\n")
        raise FlowclipError(f"step {step.kind} {step.name}: {e}; fix it and rerun (what is done is skipped)") from None
    if step.kind != "study":
        marker = {"commands": plan.fingerprint(step), "rank": plan.rank, "seconds": round(time.perf_counter() - t0, 1)}
        outputs.write_text(plan.marker(step, "done"), json.dumps(marker) + "\n")
    log(f"    {step.kind} {step.name}: {time.perf_counter() - t0:.1f} s")


def execute(cfg, steps_of, log) -> bool:
    """Every step this rank takes, in the plan's order; True when every step that can run
    is done (then the caller writes the tables)."""
    from dataclasses import replace

    rank, world = study_rank()
    os.makedirs(os.path.join(cfg.out, MARKERS), exist_ok=True)
    plan = Steps(cfg, steps_of(cfg), rank, world)
    local = steps_of(replace(cfg, device=rank_device(cfg.device)))  # this rank's device in its commands
    todo = [s for s in plan.steps if s.kind != "tables"]
    log(f"paper: {len(todo)} steps" + (f"; rank {rank} of {world}" if world > 1 else ""))
    for i, (step, mine) in enumerate(zip(todo, local)):
        head = f"[{i + 1}/{len(todo)}] {step.kind} {step.name}"
        if plan.done(step):
            log(f"{head}: done")
            continue
        lacks = plan.lacks(step)
        if lacks:
            plan.blocked[id(step)] = lacks
            log(f"{head}: cannot run, it lacks " + "; ".join(lacks))
            continue
        if step.kind != "study" and plan.owner[id(step)] != rank:
            continue  # another rank's
        plan.wait_for(step, log)
        log(f"{head}: running")
        run_step(plan, step, mine, log)
    open_steps = [s for s in todo if id(s) not in plan.blocked and not plan.done(s)]
    if open_steps:
        log(
            f"rank {rank}: {len(open_steps)} steps still running on other ranks ("
            + ", ".join(f"{s.kind} {s.name}" for s in open_steps[:5])
            + "); the rank that finishes last writes the tables (or rerun this command)"
        )
    if plan.blocked:
        log(f"{len(plan.blocked)} steps could not run for missing inputs (listed above); their rows read 'missing'")
    return not open_steps
