"""One progress bar for every long loop (extract, train, score, pretrain): rate and ETA
on stderr when it is a terminal; nothing when it is not (logs, CI) or under --quiet."""

from __future__ import annotations

import os
import sys
import time


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
