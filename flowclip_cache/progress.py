"""One progress bar for every long loop (extract, train, score, pretrain): rate and ETA
on stderr when it is a terminal; nothing when it is not (logs, CI) or under --quiet. And
where a long command's time went: its wall time from the process's start, and named stages."""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager


def bar(total: int, desc: str, unit: str, enabled: bool = True, initial: int = 0):
    from tqdm.autonotebook import tqdm  # a widget in a notebook, text on a terminal

    in_notebook = tqdm.__module__.startswith("tqdm.notebook")
    # disable=None: tqdm shows a text bar only when stderr is a terminal
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        dynamic_ncols=True,
        disable=(False if in_notebook else None) if enabled else True,
        leave=False,
    )


_IMPORTED = time.monotonic()


def invocation_seconds() -> float:
    """Seconds since this process started (a report's wall time for its whole invocation):
    from the kernel's start time where /proc has it, else since flowclip was imported."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, in clock ticks
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED


# -- where a long command's time goes: named stages, each timed exclusive of stages inside it -----
_STAGE_SECONDS: dict[str, float] = {}
_OPEN: list[list] = []  # [name, since] of the stages open on the main thread, innermost last


@contextmanager
def stage(name: str):
    """Count the time inside `with stage(name)` toward name, less what stages nested in it
    count toward theirs, so that a process's stages add up to at most its wall time
    (a study reports them: studies/study.py). Counted on the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    now = time.perf_counter()
    if _OPEN:
        _STAGE_SECONDS[_OPEN[-1][0]] = _STAGE_SECONDS.get(_OPEN[-1][0], 0.0) + now - _OPEN[-1][1]
    _OPEN.append([name, now])
    try:
        yield
    finally:
        end = time.perf_counter()
        own, since = _OPEN.pop()
        _STAGE_SECONDS[own] = _STAGE_SECONDS.get(own, 0.0) + end - since
        if _OPEN:
            _OPEN[-1][1] = end


def stage_seconds(since: dict[str, float] | None = None) -> dict[str, float]:
    """Seconds counted toward each stage in this process (stages still open included), or
    since an earlier stage_seconds() (one study's among others in a notebook)."""
    out = dict(_STAGE_SECONDS)
    if _OPEN:
        out[_OPEN[-1][0]] = out.get(_OPEN[-1][0], 0.0) + time.perf_counter() - _OPEN[-1][1]
    since = since or {}
    return {k: v - since.get(k, 0.0) for k, v in out.items() if v > since.get(k, 0.0)}


def stage_line(stages: dict[str, float], wall: float) -> str:
    """'Where the time went: ...' from stage_seconds() over a command whose wall time is wall."""
    split = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in stages.items())
    return f"Where the time went: {split}; the rest {wall - sum(stages.values()):.1f} s."
