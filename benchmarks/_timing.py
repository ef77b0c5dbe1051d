"""Timing the speed scripts share: sides alternated repetition by repetition (ABAB...),
ratios as the median of the per-repetition ratios with their min-max, so load that moves
during a run widens the spread instead of moving the ratio (docs/performance.md)."""

from __future__ import annotations

import statistics
import time


def _sync() -> None:
    """Wait for queued CUDA work, so that a side's time is its own (nothing on CPU)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def timed(fn) -> float:
    _sync()
    t = time.perf_counter()
    fn()
    _sync()
    return time.perf_counter() - t


def alternate(sides: dict, reps: int) -> dict[str, list[float]]:
    """Seconds of each side per repetition, the sides run in turn within each repetition
    (after one warm-up round)."""
    for fn in sides.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(reps):
        for name, fn in sides.items():
            times[name].append(timed(fn))
    return times


def ratio(num: list[float], den: list[float]) -> tuple[float, float, float]:
    """(median, min, max) of num[i] / den[i] over the repetitions."""
    r = [a / b for a, b in zip(num, den)]
    return statistics.median(r), min(r), max(r)


def abab(a, b, reps: int) -> tuple[float, float, float, float, float]:
    """(median time a, median time b, median, min, max of b/a per pair), a and b alternating."""
    t = alternate({"a": a, "b": b}, reps)
    return (statistics.median(t["a"]), statistics.median(t["b"]), *ratio(t["b"], t["a"]))
