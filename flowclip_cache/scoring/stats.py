"""Paired image-cluster bootstrap (paper Sec. 4.3).

Each draw resamples *images* (not records) with replacement; a record's weight is
the number of times its image was drawn. The same weights serve every scorer, task
and seed; the runs of one method are averaged inside each draw. Statistics follow
each task's official aggregation (pooled mean, or a macro mean over groups); a group
that a draw leaves without weight cannot be represented: the statistic is then taken
over the groups that remain, and how many draws lost a group is reported.
"""

from __future__ import annotations

import numpy as np

from . import metrics


def image_weights(n_images: int, draws: int, seed: int, chunk: int = 500):
    """Yield [c, n_images] draw-count matrices, chunk by chunk (deterministic by seed)."""
    rng = np.random.default_rng(seed)
    done = 0
    while done < draws:
        c = min(chunk, draws - done)
        yield rng.multinomial(n_images, np.full(n_images, 1.0 / n_images), size=c).astype(np.float32)
        done += c


def levels_of(groups) -> tuple[list[np.ndarray], np.ndarray]:
    """A task's levels of grouping (None or [] pooled; one array or [labels]: a macro mean;
    several: nested means) and each record's finest group as an index."""
    levels = [] if groups is None else list(groups) if isinstance(groups, list) else [groups]
    if not levels:
        return levels, np.zeros(0, np.int64)
    finest = np.unique(np.stack([np.asarray(lv).astype(str) for lv in levels], 1), axis=0, return_inverse=True)[1]
    return levels, finest.ravel()


def weighted_stat(correct: np.ndarray, W: np.ndarray, groups, finest: np.ndarray | None = None, digits=None):
    """correct [n], W [D, n] record weights, groups: levels_of's levels (or what it takes)
    -> ([D] statistic (metrics.nested_mean), [D] bool lost-a-group: some group of the
    finest level had no weight in the draw)."""
    if finest is None:
        groups, finest = levels_of(groups)
    stat = metrics.nested_mean(correct, W, groups, digits)
    if not len(groups):
        return stat, W.sum(1) == 0
    onehot = np.zeros((len(finest), int(finest.max()) + 1), W.dtype)
    onehot[np.arange(len(finest)), finest] = 1
    return stat, ((W @ onehot) == 0).any(1)


def seed_picks(draws: int, k: int, seed: int, chunk: int = 500):
    """Yield [c, k] indices into a method's k runs, k drawn with replacement per draw
    (deterministic by seed; every method with k runs gets the same picks: paired by seed)."""
    rng = np.random.default_rng([seed, k, 1])
    done = 0
    while done < draws:
        c = min(chunk, draws - done)
        yield rng.integers(0, k, size=(c, k))
        done += c


def two_sided_p(d: np.ndarray) -> float:
    """The bootstrap's two-sided p-value of 'no difference' from B draws: twice (k + 1) / (B + 1),
    k the draws on the smaller side of 0 (ties with 0 counted on both), at most 1. Never 0:
    B draws cannot show a p below 2 / (B + 1) (p_floor; Davison and Hinkley 1997, eq. 4.11)."""
    if not len(d):
        return float("nan")
    k = min(int(np.sum(d <= 0)), int(np.sum(d >= 0)))
    return float(min(1.0, 2 * (k + 1) / (len(d) + 1)))


def p_floor(draws: int) -> float:
    """The smallest two-sided p B draws can give (every draw on one side of 0)."""
    return 2.0 / (draws + 1)


def draws_to_resolve(m: int, alpha: float = 0.05) -> int:
    """The fewest draws with which Holm over m comparisons can hold one below alpha: its
    smallest adjusted p, m * p_floor(B), must be under alpha (B + 1 > 2 m / alpha)."""
    return int(np.floor(2 * m / alpha))


def holm(p: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the order given: the i-th
    smallest times (m - i + 1), made monotone, capped at 1. NaN stays NaN."""
    idx = [i for i in sorted(range(len(p)), key=lambda i: p[i]) if not np.isnan(p[i])]
    out, running = [float("nan")] * len(p), 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (len(idx) - rank) * p[i]))
        out[i] = running
    return out


def paired_bootstrap(
    tasks: list[dict],
    methods: dict[str, list[str]],
    pairs: list[tuple[str, str]],
    n_images: int,
    draws: int = 10_000,
    seed: int = 0,
    resample_seeds: bool = False,
    means: dict[str, list[str]] | None = None,
) -> dict:
    """tasks: [{name, image_index [n] (into the shared image list), groups [n] or None,
               correct: {run: [n] bool}}]
    methods: method -> its runs (seeds). Returns {task: {"b - a": {mean_pts: the observed difference
    (every record once), ci95_pts: the draws' 2.5 and 97.5 percentiles, bootstrap_mean_pts: the
    draws' mean, p_two_sided (two_sided_p), draws, draws_missing_a_group, seeds_resampled}}}.
    resample_seeds: each draw also draws a method's runs with replacement (the same picks
    for every method with as many runs: paired by seed), so the interval holds the spread
    over seeds as well as over images; False: the runs averaged in every draw (the paper's
    Sec. 4.3). means: a cross-task mean's name -> its member tasks (each among tasks): the
    unweighted mean of their statistics in each draw, compared as a task of its own."""
    means = {k: v for k, v in (means or {}).items() if v and all(m in {t["name"] for t in tasks} for m in v)}
    diffs: dict[str, dict[str, list]] = {
        n: {f"{b} - {a}": [] for a, b in pairs} for n in [t["name"] for t in tasks] + list(means)
    }
    grouping = {t["name"]: levels_of(t["groups"]) for t in tasks}
    lost = {t["name"]: 0 for t in tasks}
    sizes = sorted({len(r) for r in methods.values() if len(r) > 1}) if resample_seeds else []
    picks_of = {k: seed_picks(draws, k, seed) for k in sizes}
    for Wimg in image_weights(n_images, draws, seed):
        picks = {k: next(g) for k, g in picks_of.items()}
        per_task: dict[str, dict] = {}
        for t in tasks:
            W = Wimg[:, t["image_index"]]
            stat = {}
            for m, runs in methods.items():
                vals = []
                for r in runs:
                    v, missing = weighted_stat(t["correct"][r], W, *grouping[t["name"]], t.get("digits"))
                    vals.append(v)
                V, k = np.stack(vals), len(runs)  # [runs, draws of this chunk]
                stat[m] = V[picks[k].T, np.arange(V.shape[1])].mean(0) if k in picks else V.mean(0)
            lost[t["name"]] += int(missing.sum())
            per_task[t["name"]] = stat
            for a, b in pairs:
                diffs[t["name"]][f"{b} - {a}"].append(stat[b] - stat[a])
        for name, members in means.items():
            mean_of = lambda m: np.mean([per_task[x][m] for x in members], 0)  # noqa: E731
            for a, b in pairs:
                diffs[name][f"{b} - {a}"].append(mean_of(b) - mean_of(a))
    out: dict[str, dict] = {}
    observed_of: dict[str, dict] = {}
    for t in tasks:
        one = np.ones((1, len(t["image_index"])))
        observed_of[t["name"]] = {
            m: np.mean([weighted_stat(t["correct"][r], one, *grouping[t["name"]], t.get("digits"))[0][0] for r in runs])
            for m, runs in methods.items()
        }
    for name, members in means.items():
        observed_of[name] = {m: np.mean([observed_of[x][m] for x in members]) for m in methods}
    for name, observed in observed_of.items():
        out[name] = {}
        lost_here = lost.get(name, sum(lost[x] for x in means.get(name, ())))
        for (a, b), (key, chunks) in zip(pairs, diffs[name].items()):
            d = np.concatenate(chunks) * 100
            ok = d[~np.isnan(d)]
            out[name][key] = {
                "mean_pts": float(100 * (observed[b] - observed[a])),  # the observed difference, not the draws'
                "bootstrap_mean_pts": float(ok.mean()) if len(ok) else float("nan"),
                "ci95_pts": [float(np.percentile(ok, 2.5)), float(np.percentile(ok, 97.5))]
                if len(ok)
                else [float("nan")] * 2,
                "p_two_sided": two_sided_p(ok),
                "draws": draws,
                "draws_missing_a_group": lost_here,
                "seeds_resampled": bool(resample_seeds),
            }
    return out


def bootstrapped_means(benches: dict, tasks: list[str]) -> dict[str, list[str]]:
    """The cross-task means the bootstrap compares as tasks of their own ("mean: NAME"): those
    whose members (here) are whole tasks, each the unweighted mean of its members' scores as
    the summary's mean is; a mean of named groups (SugarCrepe's Add, ...) is left out."""
    members: dict[str, list[str]] = {}
    grouped: set[str] = set()
    for bench, sc in benches.items():
        for name, group in sc.joins if bench in tasks else ():
            (grouped.add(name) if group else members.setdefault(name, []).append(bench))
    return {f"mean: {k}": v for k, v in members.items() if k not in grouped and len(v) > 1}


def family(bootstrap: dict, pairs, *, preset: bool, draws: int, alpha: float = 0.05) -> dict:
    """The family the bootstrap's p-values are corrected over (Holm): every comparison the
    table shows, its contrasts named in advance (`compare`) or every pair of scorers, and
    what its draws can resolve: the smallest p is 2 / (B + 1), the smallest Holm p m times it."""
    m = sum(len(d) for d in bootstrap.values())
    return {
        "kind": "pre-set contrasts" if preset else "every pair of scorers",
        "contrasts": [f"{b} - {a}" for a, b in pairs],
        "comparisons": m,
        "draws": draws,
        "alpha": alpha,
        "p_floor": p_floor(draws),
        "smallest_holm_p": min(1.0, m * p_floor(draws)),
        "draws_to_resolve": draws_to_resolve(m, alpha),
    }
