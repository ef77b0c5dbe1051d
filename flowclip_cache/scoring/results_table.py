"""`flowclip results FOLDER...`: every score output under the folders (a `score --out`, a
study's score/, a sweep's scores/<trial>/), read as data, as one table: a row per
(results, image control, scorer), the head's recorded training settings as columns, then
each benchmark's headline figure (%). A local leaderboard of an afternoon's runs.

Only folders that flowclip's score marked as its output (FLOWCLIP_OUTPUT.json, kind
score-results) are read, and only their results.json (JSON: nothing is executed)."""

from __future__ import annotations

import json
import math
import os

from ..errors import FlowclipError
from ..outputs import kind_of

FIXED = ("results", "control", "scorer", "method", "head", "identity")
GROUP_MATCH = "groupmatch:"  # a group task's GroupMatch (test-time matching; not its official score)
BLIND = "blind:"  # a scorer's accuracy where the blind audit's text probe fails (not an official score)
MEAN = "mean:"  # an axis's mean over the tasks every row has (scoring/tradeoff.py)
PER_TASK = "_per_task"  # a row's results per task, as results.json holds them


def find_results(folders: list[str]) -> list[str]:
    """The score outputs under the folders, in path order (symbolic links not followed)."""
    found = []
    for top in folders:
        if not os.path.isdir(top):
            raise FlowclipError(f"{top}: no such folder")
        for here, dirs, _ in os.walk(top):
            dirs.sort()
            if kind_of(here) == "score-results" and os.path.isfile(os.path.join(here, "results.json")):
                found.append(here)
    if not found:
        raise FlowclipError(f"no score outputs (folders `flowclip score` wrote) under {', '.join(folders)}")
    return found


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def result_rows(folder: str, base: str) -> list[dict]:
    """One row per (control, scorer) of one score output: its settings and figures (%)."""
    from .metrics import headline

    path = os.path.join(folder, "results.json")
    try:
        summary = json.load(open(path))
        scorers = {s["run"]: s for s in summary["scorers"]}
        results = summary["results"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FlowclipError(f"{path}: not a score results file ({type(e).__name__}: {e})") from None
    rows = []
    for key, per_task in results.items():
        control, _, run = key.partition("|")
        s = scorers.get(run, {})
        row = {"results": os.path.relpath(folder, base), "control": control, "scorer": run,
               "method": s.get("method", run), "head": s.get("kind", ""),
               "identity": s.get("identity", "")}  # fmt: skip
        train = {k: v for k, v in (s.get("train") or {}).items() if k != "head"}  # (the head: its own column)
        row.update(_flat(train, "train."))
        row[PER_TASK] = per_task  # (the axes' means read it; never a column)
        for task, res in per_task.items():
            v = headline(res) if isinstance(res, dict) else float("nan")
            row[f"score:{task}"] = 100 * v if isinstance(v, (int, float)) and math.isfinite(v) else None
            ttm = res.get("test_time_matching") if isinstance(res, dict) else None
            if isinstance(ttm, dict) and isinstance(ttm.get("group_match"), (int, float)):
                row[f"{GROUP_MATCH}{task}"] = 100 * ttm["group_match"]  # shown only when asked
            blind = res.get("blind_unsolved") if isinstance(res, dict) else None
            if isinstance(blind, (int, float)) and math.isfinite(blind):
                row[f"{BLIND}{task}"] = 100 * blind  # shown only when asked
        rows.append(row)
    return rows


def select(rows: list[dict], controls: list[str], where: list[str], sort: str | None) -> list[dict]:
    """Rows of the controls asked for, matching every KEY=VALUE (compared as text), sorted
    by a column (benchmarks and numbers high first; rows without it last)."""
    tests = []
    for w in where:
        key, sep, value = w.partition("=")
        if not sep:
            raise FlowclipError(f"--where {w!r}: expected COLUMN=VALUE (e.g. --where head=flow)")
        tests.append((key, value))
    known = {c for r in rows for c in r if c != PER_TASK}
    for key, _ in tests:
        if key not in known:
            raise FlowclipError(
                f"--where {key}=...: no such column in these results; the columns are "
                f"{', '.join(sorted(known)) or '(none: no results found)'}"
            )
    out = [r for r in rows if r["control"] in controls and all(str(r.get(k)) == v for k, v in tests)]
    if sort:
        col = sort if sort in {c for r in rows for c in r} else f"score:{sort}"
        if col not in {c for r in rows for c in r}:
            raise FlowclipError(f"--sort {sort}: no such column or benchmark")
        numeric = [r for r in out if isinstance(r.get(col), (int, float))]
        other = [r for r in out if not isinstance(r.get(col), (int, float))]
        out = sorted(numeric, key=lambda r: -r[col]) + sorted(other, key=lambda r: str(r.get(col, "")))
    return out


def columns(rows: list[dict], benchmarks: list[str], group_match: bool = False, blind: bool = False) -> list[str]:
    """The fixed columns, the settings that differ between the rows that have them, then
    the benchmarks (and, asked for, each group task's GroupMatch and each audited task's
    blind-unsolved accuracy after them)."""
    keys = [k for k in dict.fromkeys(k for r in rows for k in r) if k not in FIXED]
    differ = lambda k: len({str(r[k]) for r in rows if r.get(k) is not None}) > 1  # noqa: E731
    settings = [k for k in keys if k.startswith("train.") and differ(k)]
    means = [k for k in keys if k.startswith(MEAN)]
    scores = [k for k in keys if k.startswith("score:")]
    if benchmarks:
        missing = [b for b in benchmarks if f"score:{b}" not in scores]
        if missing:
            raise FlowclipError(f"--benchmark {', '.join(missing)}: in none of the results")
        scores = [f"score:{b}" for b in benchmarks]
    picked = {c.split(":", 1)[1] for c in scores}
    extra = ((GROUP_MATCH,) if group_match else ()) + ((BLIND,) if blind else ())
    asked = [k for k in keys if k.startswith(extra or ("\0",)) and k.split(":", 1)[1] in picked]
    return list(FIXED) + settings + means + scores + asked


def add_axis_means(rows: list[dict]) -> dict[str, list[str]]:
    """Each row's compositional, zero-shot and retrieval means (%) over the tasks every row
    has (scoring/tradeoff.py), as columns; returns those tasks per axis."""
    from .tradeoff import axis_means, axis_tasks

    tasks = axis_tasks([r[PER_TASK] for r in rows])
    for r in rows:
        for axis, v in axis_means(r[PER_TASK], tasks).items():
            if v is not None:
                r[f"{MEAN}{axis}"] = 100 * v
    return tasks


def render(rows: list[dict], cols: list[str], axis_counts: dict[str, int] | None = None) -> tuple[str, str]:
    """(Markdown, CSV) of the table; figures in percent, two decimals (settings as
    recorded); '–' where absent; a mean's header counts its tasks."""
    import csv
    import io

    from .tradeoff import AXES

    axis_counts = axis_counts or {}

    def name(c: str) -> str:
        if c.startswith(GROUP_MATCH):
            return f"{c.split(':', 1)[1]} GroupMatch (not official)"
        if c.startswith(BLIND):
            return f"{c.split(':', 1)[1]} blind-unsolved (not official)"
        if c.startswith(MEAN):
            return f"{AXES[c.split(':', 1)[1]]} ({axis_counts.get(c.split(':', 1)[1], 0)})"
        return c.split(":", 1)[1] if c.startswith("score:") else c.removeprefix("train.")

    def cell(c, v):
        return "–" if v is None else f"{v:.2f}" if c.startswith(("score:", MEAN, GROUP_MATCH, BLIND)) else str(v)

    md = ["| " + " | ".join(map(name, cols)) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(cell(c, r.get(c)) for c in cols) + " |" for r in rows]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([name(c) for c in cols])
    w.writerows([["" if r.get(c) is None else r.get(c) for c in cols] for r in rows])
    return "\n".join(md) + "\n", buf.getvalue()
