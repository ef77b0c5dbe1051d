"""From scores to the official numbers: each benchmark's aggregation (ties, groups,
breakdowns, recalls), the cross-task means, and the records each task gives the paired
bootstrap. The engines compute scores; this module only counts."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..datasets import all_benchmarks
from ..datasets.base import Scoring
from . import metrics


def aggregate(
    sc: Scoring, scores: np.ndarray, gold: np.ndarray, cols: dict, threshold: tuple[float, str] | None = None
) -> dict:
    """The official score of a candidate task (captions or images to choose from), with
    ties, groups and breakdowns; threshold: the scorer's match threshold and its source
    (Head.decision_threshold) for the figures that need one."""
    keep = _kept(sc, cols, len(gold))
    correct, tie = metrics.decisions(scores, gold, sc.tie_rule)
    c, t = correct[keep], tie[keep]
    res: dict[str, Any] = {"n": int(keep.sum()), "excluded": int((~keep).sum()), "ties": int(t.sum())}
    res.update(tie_rule=sc.tie_rule, **_official(sc, c, cols, keep))
    for col in sc.report_by:
        res["by_" + col] = _by_column(c, _objects(cols[col])[keep])
    kept_cols = {k: [v for v, kept in zip(vals, keep) if kept] for k, vals in cols.items()}
    if sc.extra is not None:
        res["extra"] = sc.extra(c, kept_cols)
    if sc.threshold_figures is not None:
        res["threshold_figures"] = _threshold_figures(sc, scores[keep], gold[keep], kept_cols, threshold)
    if sc.task in ("candidates", "image_candidates"):
        ranks = metrics.gold_rank(scores[keep], gold[keep], sc.tie_rule)
        res["recall"] = {f"R@{k}": metrics.recall_at(ranks, k) for k in sc.recall_at}
        for col in sc.report_by:
            vals = np.asarray(cols[col])[keep].astype(str)
            for k in sc.recall_at:  # R@1 under recall_by_<col> (its old name), R@k under recall_at<k>_by_<col>
                name = "recall_by_" + col if k == 1 else f"recall_at{k}_by_{col}"
                res[name] = {v: metrics.recall_at(ranks[vals == v], k) for v in np.unique(vals)}
            res["ties_by_" + col] = {v: int(t[vals == v].sum()) for v in np.unique(vals)}
    return res


NO_THRESHOLD = (
    "not defined for this scorer: its score is a similarity with no calibrated match/no-match point "
    "(a head declares one with decision_threshold; docs/plugins.md)"
)


def _threshold_figures(sc: Scoring, scores, gold, cols: dict, threshold) -> dict:
    """The figures that need a match decision (pairs: gold and its one foil), or why not."""
    if threshold is None:
        return {"defined": False, "reason": NO_THRESHOLD}
    if scores.shape[1] != 2:  # (a declaration error of a benchmark file, never a user's)
        raise ValueError(f"threshold figures are defined on pairs; this task has {scores.shape[1]} candidates")
    n = len(gold)
    s_gold, s_foil = scores[np.arange(n), gold], scores[np.arange(n), 1 - gold]
    t, source = threshold
    assert sc.threshold_figures is not None
    return {"defined": True, "threshold": float(t), "source": source, **sc.threshold_figures(s_gold, s_foil, t, cols)}


GROUP_METRICS = ("text", "image", "group")
SUB_SCORES = ("text_0", "text_1", "image_0", "image_1")


def aggregate_groups(sc: Scoring, scores: np.ndarray, cols: dict) -> dict:
    """The official scores of a 2x2 group task (scores [n, 2, 2], image x caption): text,
    image and group, each aggregated as the benchmark aggregates (pooled, macro over a
    column, or a mean of named groups), the headline metric as "score"; breakdowns per
    column as "<value> <metric>"; the four halves where the benchmark reports them."""
    keep = _kept(sc, cols, len(scores))
    d = {k: v[keep] for k, v in metrics.group_decisions(scores, sc.tie_rule).items()}
    names = dict(sc.metric_names)
    shown = {m: names.get(m, m) for m in GROUP_METRICS + (SUB_SCORES if sc.sub_scores else ())}
    ties = {"ties": int((d["text_tie"] | d["image_tie"]).sum()), "ties_text": int(d["text_tie"].sum()),
            "ties_image": int(d["image_tie"].sum())}  # fmt: skip
    res = aggregate_figures(sc, d, shown, names.get(sc.headline_metric, sc.headline_metric), cols, keep, ties)
    ttm = metrics.group_match_decisions(scores[keep])
    res["test_time_matching"] = {  # beside the official figures, never among them
        "group_match": metrics.mean_accuracy(ttm["group_match"]),
        "individual_match": metrics.mean_accuracy(ttm["individual_match"].ravel()),
        "n": int(keep.sum()),
        "source": TTM_SOURCE,
    }
    return res


TTM_SOURCE = "Zhu et al. 2025, Test-Time Matching (yinglunz/test-time-matching, evaluate.py): not the official metric"


def aggregate_figures(sc: Scoring, d: dict, shown: dict, headline: str, cols: dict, keep, ties: dict) -> dict:
    """A task of several named figures (group tasks' text/image/group, paraphrase tasks'
    ITT/TOT): each decision vector d[m] of the kept records aggregated as the benchmark
    aggregates, under its shown name; the headline's figures as the task's own ("score",
    "pooled", ...); breakdowns per column as "<value> <name>"."""
    res: dict[str, Any] = {"n": int(keep.sum()), "excluded": int((~keep).sum()), **ties, "tie_rule": sc.tie_rule,
                           "headline_metric": headline,
                           "metrics": {name: _official(sc, d[m], cols, keep) for m, name in shown.items()}}  # fmt: skip
    res.update(res["metrics"][headline])  # score, pooled, by_<group_by>, named_groups: the headline metric's
    for col in ([sc.group_by] if sc.group_by else []) + list(sc.report_by):
        values = _objects(cols[col])[keep]
        res["by_" + col] = {
            f"{g} {name}": acc for m, name in shown.items() for g, acc in _by_column(d[m], values).items()
        }
    return res


def _kept(sc: Scoring, cols: dict, n: int) -> np.ndarray:
    """The records the official score counts (exclude_column: those it leaves out)."""
    return ~np.asarray(cols[sc.exclude_column], bool) if sc.exclude_column else np.ones(n, bool)


def _official(sc: Scoring, c: np.ndarray, cols: dict, keep: np.ndarray) -> dict:
    """The benchmark's aggregation of one decision vector (the kept records'): pooled,
    per group_by value, named group means, and the official score."""
    res: dict[str, Any] = {"pooled": metrics.mean_accuracy(c)}
    if sc.group_by:
        g = np.asarray(cols[sc.group_by])[keep]
        res["by_" + sc.group_by] = metrics.group_accuracies(c, g)
        for name, members in sc.groups:
            res.setdefault("named_groups", {})[name] = _named_group(
                c, g, members, res["by_" + sc.group_by], sc.group_weighting
            )
    if sc.aggregate == "mean":
        res["score"] = res["pooled"]
    elif sc.aggregate == "nested":
        levels = [np.asarray(cols[col])[keep].astype(str) for col in sc.nest]
        res["score"], per_level = metrics.nested_means(c, levels, sc.finest_digits)
        res.update({f"nested_{col}": means for col, means in zip(sc.nest[:-1], per_level)})
    elif sc.aggregate == "group_means":  # a group with no record scored is left out, and named
        there = [n for n in sc.headline_groups if not np.isnan(res["named_groups"][n])]
        res["score"] = float(np.mean([res["named_groups"][n] for n in there])) if there else float("nan")
        if len(there) < len(sc.headline_groups):
            absent = ", ".join(n for n in sc.headline_groups if n not in there)
            res["partial"] = f"mean of {', '.join(there)} only: no record of {absent}"
    else:  # macro / subset_mean: unweighted over groups
        res["score"] = metrics.macro_accuracy(c, g, sc.min_group)
        res["groups_used"] = len(metrics.group_accuracies(c, g, sc.min_group))
    if sc.min_group:
        res["left_out_groups"] = sorted(str(x) for x, n in zip(*np.unique(g, return_counts=True)) if n < sc.min_group)
    return res


def _objects(values) -> np.ndarray:
    """A 1-D object array of a column's values (lists stay lists, whatever their lengths)."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _by_column(correct: np.ndarray, values: np.ndarray) -> dict:
    """Accuracy per value of a breakdown column; a record whose value is a list (Winoground's
    secondary tags) counts under each of its values, an empty list under "(none)"."""
    if not any(isinstance(v, (list, tuple, np.ndarray)) for v in values):
        return metrics.group_accuracies(correct, values.astype(str))
    rows = [(i, str(t)) for i, v in enumerate(values) for t in (list(v) if len(v) else ["(none)"])]
    idx = np.array([i for i, _ in rows], np.int64)
    return metrics.group_accuracies(correct[idx], np.array([t for _, t in rows]))


def _named_group(correct, groups, members, per_group: dict, weighting: str) -> float:
    """A named group's accuracy: pooled over its records, or the unweighted mean of its
    members' accuracies; NaN when none of its members was scored."""
    present = [m for m in members if m in per_group]
    if not present:
        return float("nan")
    if weighting == "records":
        return metrics.mean_accuracy(correct[np.isin(groups, present)])
    return float(np.mean([per_group[m] for m in present]))


def bootstrap_task(name: str, sc: Scoring, cols: dict, ikeys: np.ndarray, correct: dict, all_images: dict) -> dict:
    """One task's input to the paired bootstrap: the records its official score uses
    (excluded records and groups below min_group left out, as the official score leaves
    them), each record's image index into the study-wide list (all_images, grown here)
    and each run's decisions."""
    n = len(ikeys)
    keep = ~np.asarray(cols[sc.exclude_column], bool) if sc.exclude_column else np.ones(n, bool)
    keep_idx, levels = _bootstrap_levels(sc, cols, np.flatnonzero(keep))
    idx = np.array([all_images.setdefault(k, len(all_images)) for k in ikeys[keep_idx]], np.int64)
    return {"name": name, "image_index": idx, "groups": levels, "correct": {r: c[keep_idx] for r, c in correct.items()},
            "digits": sc.finest_digits}  # fmt: skip


def _bootstrap_levels(sc: Scoring, cols: dict, keep_idx: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The records the official score uses and its levels of grouping, top first (stats'
    nested means): none (pooled), [group_by] (macro; groups below min_group left out),
    [headline group] or [headline group, group_by] (group means pooled over records, or
    means of their members), or the `nest` columns."""
    at = lambda col: np.asarray(cols[col]).astype(str)[keep_idx]  # noqa: E731
    if sc.aggregate == "mean":
        return keep_idx, []
    if sc.aggregate == "nested":
        return keep_idx, [at(col) for col in sc.nest]
    groups = at(sc.group_by)
    if sc.aggregate == "group_means":  # records labelled by their headline group; others left out
        label = {m: name for name, members in sc.groups if name in sc.headline_groups for m in members}
        top = np.array([label.get(g, "") for g in groups], dtype=object)
        sel = top != ""
        return keep_idx[sel], [top[sel]] + ([groups[sel]] if sc.group_weighting == "groups" else [])
    if sc.min_group:
        sizes = dict(zip(*np.unique(groups, return_counts=True)))
        sel = np.array([sizes[g] >= sc.min_group for g in groups], bool)
        keep_idx, groups = keep_idx[sel], groups[sel]
    return keep_idx, [groups]


def cross_task_means(
    results: dict, benches: dict[str, Scoring], runs: list[str], expected: dict[str, list[str]] | None = None
) -> dict:
    """binding7 / all11 / aro / controls6 / binding5 / sugar3 from each benchmark's joins declaration. With
    expected (mean -> every member the registry declares), a mean missing some members
    is marked partial and names what it used and what is missing."""
    out: dict[str, dict] = {}
    for (control, run), per_task in results.items():
        members: dict[str, list] = {}
        for bench, sc in benches.items():
            r = per_task.get(bench)
            if r is None:
                continue
            for mean_name, group in sc.joins:
                val = r["score"] if not group else r.get("named_groups", {}).get(group)
                members.setdefault(mean_name, []).append((f"{bench}/{group}" if group else bench, val))
        out[f"{control}|{run}"] = {}
        for k, vs in members.items():
            names = [n for n, _ in vs]
            entry: dict[str, Any] = {"mean": float(np.mean([v for _, v in vs])), "members": names}
            short = [n for n, _ in vs if "excluded_failed" in per_task.get(n.split("/")[0], {})]
            if expected is not None and k in expected:
                missing = [m for m in expected[k] if m not in names]
                entry.update(expected=len(expected[k]), partial=bool(missing), missing=missing)
            if short:
                entry.update(partial=True, members_with_excluded_records=short)
            out[f"{control}|{run}"][k] = entry
    return out


def expected_members() -> dict[str, list[str]]:
    """Every member of every cross-task mean, as the registry declares them."""
    out: dict[str, list[str]] = {}
    for name, b in all_benchmarks().items():
        for mean_name, group in b.scoring.joins if b.scoring else ():
            out.setdefault(mean_name, []).append(f"{name}/{group}" if group else name)
    return out
