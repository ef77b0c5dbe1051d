"""A published number beside ours: the published value, our mean ± sample standard
deviation over seeds, the difference, and whether the published value lies inside our
bootstrap interval (docs/paper.md, "Reading the comparison"). Pure functions over
numbers: the tables that use them pass what a study measured."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .numbers import Published


@dataclass(frozen=True)
class Comparison:
    published: Published
    ours: tuple[float, ...]  # one value per seed, in the published number's unit
    interval: tuple[float, float] | None = None  # our 95% bootstrap interval of the same quantity

    @property
    def mean(self) -> float:
        return statistics.fmean(self.ours) if self.ours else math.nan

    @property
    def std(self) -> float:
        """Sample standard deviation over seeds (n - 1), as the paper's "± std"; NaN for one seed."""
        return statistics.stdev(self.ours) if len(self.ours) > 1 else math.nan

    @property
    def difference(self) -> float:
        """Ours minus published."""
        return self.mean - self.published.value

    @property
    def inside(self) -> bool | None:
        """Whether the published value lies in our interval (None: no interval, or no runs)."""
        if self.interval is None or not self.ours:
            return None
        lo, hi = self.interval
        return lo <= self.published.value <= hi

    def cell(self) -> str:
        """One table cell: 'paper 62.64 | ours 61.20 ± 0.80 (3 seeds) | -1.44 | inside [60.10, 62.90]'."""
        if not self.ours:
            return f"paper {self.published.text} | ours missing"
        spread = f" ± {self.std:.2f}" if len(self.ours) > 1 else ""
        seeds = f"{len(self.ours)} seed{'s' if len(self.ours) > 1 else ''}"
        out = f"paper {self.published.text} | ours {self.mean:.2f}{spread} ({seeds}) | {self.difference:+.2f}"
        if self.interval is not None:
            where = "inside" if self.inside else "outside"
            out += f" | {where} [{self.interval[0]:.2f}, {self.interval[1]:.2f}]"
        return out


def compare(
    published: list[Published],
    ours: dict[tuple[str, str, str], list[float]],
    intervals: dict[tuple[str, str, str], tuple[float, float]] | None = None,
) -> list[Comparison]:
    """Each published number beside ours, matched by (table, row, column); a published
    number we have not measured comes back with no runs (shown as missing, never dropped)."""
    intervals = intervals or {}
    key = lambda p: (p.table, p.row, p.column)
    return [Comparison(p, tuple(ours.get(key(p), ())), intervals.get(key(p))) for p in published]
