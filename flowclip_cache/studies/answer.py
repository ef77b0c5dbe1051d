"""A study's reading, written from its figures: the answer first (the best scorer on each
cross-task mean, and whether a trained head beats the best training-free scorer, with its
interval), then the counts (intervals that exclude 0, against chance, after Holm's
correction) and what the image controls and chance say."""

from __future__ import annotations

QUESTIONS = (  # the overall conclusion's groups: a task joins the first whose words it holds
    ("binding", ("swap-att", "swap-obj", "binding", "abc", "spatial", "clevr", "pug")),
    ("word order", ("order",)),
)


def _question(task: str) -> str:
    return next((q for q, words in QUESTIONS if any(w in task.lower() for w in words)), "other tasks")


def overall(summary: dict) -> list[str]:
    """The conclusion first: how many intervals exclude 0 against how many would by chance,
    grouped by question (binding, word order, the rest); then what the image controls and
    chance say: accuracy under Fixed (one image for every record) above chance is a
    preference for the gold caption's text alone, and a trained head below chance on a task
    has learnt to prefer its foils."""
    comps = [(t, k, v) for t, d in summary["bootstrap"].items() for k, v in d.items()]
    if not comps:
        return []
    excl = [(t, k, v) for t, k, v in comps if v["ci95_pts"][0] > 0 or v["ci95_pts"][1] < 0]
    lines = [
        f"**Overall.** Of {len(comps)} paired comparisons, {len(excl)} {'has' if len(excl) == 1 else 'have'} a 95% "
        f"interval that excludes 0; about {len(comps) / 20:.1f} would by chance alone. "
        + _beyond_chance(len(excl), len(comps))
        + _after_holm(comps, summary.get("bootstrap_family"))
    ]
    for q in [q for q, _ in QUESTIONS] + ["other tasks"]:
        mine = [(t, k, v) for t, k, v in comps if _question(t) == q]
        if not mine:
            continue
        hits = [f"{k} on {t} {v['mean_pts']:+.2f} [{v['ci95_pts'][0]:.2f}, {v['ci95_pts'][1]:.2f}]"
                for t, k, v in excl if _question(t) == q]  # fmt: skip
        shown = f"{len(hits)} of {len(mine)} exclude{'s' if len(hits) == 1 else ''} 0"
        lines.append(
            f"- {q.capitalize()} ({len(mine)} comparison{'' if len(mine) == 1 else 's'}): "
            + (f"{shown}: " + "; ".join(hits) + (f"; the other {len(mine) - len(hits)} include 0." if len(hits) <
               len(mine) else ".") if hits else "no interval excludes 0: no difference shown.")
        )  # fmt: skip
    lines += _against_chance(summary)
    return lines + [""]


def _after_holm(comps, fam: dict | None = None) -> str:
    """How many differences stand after Holm's correction over every comparison shown, or
    that none could, for want of draws."""
    from ..scoring.stats import holm

    p = [v.get("p_two_sided", float("nan")) for _, _, v in comps]
    if all(x != x for x in p):  # no p recorded (a summary from before they were)
        return ""
    if fam and fam["smallest_holm_p"] >= fam["alpha"]:
        return (
            f" With {fam['draws']:,} draws, Holm's correction over all {len(comps)} cannot hold any below "
            f"{fam['alpha']:g} (its smallest p is {fam['smallest_holm_p']:.2g}): {fam['draws_to_resolve']:,} draws or "
            f"more could."
        )
    alpha = fam["alpha"] if fam else 0.05
    held = [f"{k} on {t}" for (t, k, _), q in zip(comps, holm(p)) if q < alpha]
    return f" After Holm's correction over all {len(comps)}, {len(held)} stand (p < {alpha:g})" + (
        f": {'; '.join(held)}." if held else "."
    )


def _beyond_chance(k: int, n: int) -> str:
    """Whether k intervals of n excluding 0 are more than chance: the probability of k or
    more under n independent comparisons at 5% each (the study's intervals share records,
    so they are not independent: a guide, said so)."""
    if k == 0:
        return "None does."
    p = 1.0 - binomial_tail(k - 1, n, 0.05)
    if p < 0.01:
        return (
            f"{k} or more by chance alone has probability {p:.2g} (were the comparisons independent, which they "
            "are not quite: they share records), so these are more than chance."
        )
    return (
        f"{k} or more by chance alone has probability {p:.2g} (were the comparisons independent): no more than "
        "chance would often give, so each is weak evidence."
    )


def _against_chance(summary: dict) -> list[str]:
    profile = summary.get("encoder_profile", {}).get("chance", {})
    # chance of a task in %, NaN when the profile has none (every comparison with NaN is false)
    chance = lambda t: 100 * profile.get(t.removeprefix("synthetic-"), float("nan"))  # noqa: E731
    out = []
    fixed = summary["controls"].get("fixed", {}).get("clip", {})
    text_only = [f"{t} {v['mean']:.2f} (chance {chance(t):.0f})" for t, v in fixed.items()
                 if v["mean"] > chance(t) + 10]  # fmt: skip
    if text_only:
        out.append(
            "- Text alone: under the Fixed control every record sees the same image, yet CLIP scores "
            + ", ".join(text_only)
            + ": there the gold caption wins on its text alone, so gains on these tasks need not come from the image."
        )
        out += _text_preference_of_heads(summary, [t for t, v in fixed.items() if v["mean"] > chance(t) + 10])
    return out + _below_chance(summary, chance)


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), exactly (log space): the one-sided p-value of k
    successes in n against a success rate p."""
    from math import exp, lgamma, log

    if not 0 < p < 1:
        return float("nan")
    logs = [lgamma(n + 1) - lgamma(i + 1) - lgamma(n - i + 1) + i * log(p) + (n - i) * log(1 - p) for i in range(k + 1)]
    top = max(logs)
    return min(1.0, exp(top) * sum(exp(x - top) for x in logs))


def _below_chance(summary: dict, chance) -> list[str]:
    """A head is said to be below chance on a task only when an exact binomial test says so
    (its mean accuracy's records against chance, one-sided p < 0.025), and its preference
    for the foils is called learnt only when the frozen encoder is not itself below chance
    and the head is clearly below it too (the same test against CLIP's accuracy)."""
    records = summary.get("records", {})
    table = summary["table"]
    out = []
    for m, row in table.items():
        for t, v in row.items():
            n, c = records.get(t), chance(t)
            if m == "clip" or m in summary.get("training_free", ()) or not n or not c == c or v["mean"] >= c:
                continue
            k = int(round(v["mean"] * n / 100))
            p = binomial_tail(k, n, c / 100)
            if not p < 0.025:
                continue
            clip = table.get("clip", {}).get(t, {}).get("mean")
            if clip is None:
                why = "the frozen encoder's accuracy there is not in the study"
            elif clip < c and binomial_tail(int(round(clip * n / 100)), n, c / 100) < 0.025:
                why = f"the frozen encoder is below chance there too ({clip:.2f}): the preference is the encoder's"
            elif binomial_tail(k, n, clip / 100) < 0.025:
                why = f"below the frozen encoder's {clip:.2f} as well: the head learnt to prefer the foils"
            else:
                why = f"the frozen encoder is at {clip:.2f}: not clearly below it, so not shown to be learnt"
            out.append(f"- Below chance: {m} {v['mean']:.2f} on {t} ({n} records, chance {c:.0f}; exact binomial "
                       f"one-sided p = {p:.3g}); {why}.")  # fmt: skip
    return out


def _text_preference_of_heads(summary: dict, tasks: list[str]) -> list[str]:
    """Where CLIP prefers the gold on its text alone, whether another scorer's gain with real
    images keeps that preference (a trained head's, or a training-free one's): its own Fixed
    accuracy beside CLIP's."""
    fixed, real = summary["controls"].get("fixed", {}), summary["table"]
    out = []
    for t in tasks:
        heads = [m for m in real if m != "clip" and t in fixed.get(m, {}) and t in real[m]]
        if not heads or t not in real.get("clip", {}):
            continue
        gain = lambda m: real[m][t]["mean"] - real["clip"][t]["mean"]  # noqa: E731
        kept = [m for m in heads if fixed[m][t]["mean"] >= fixed["clip"][t]["mean"]]
        said = "; ".join(f"{m} {gain(m):+.2f} with real images, {fixed[m][t]['mean']:.2f} under Fixed" for m in heads)
        verdict = (
            "each keeps less of the text-alone preference than CLIP, so its gain with real images rests on the image"
            if not kept
            else f"{', '.join(kept)} keep{'s' if len(kept) == 1 else ''} at least CLIP's text-alone preference, so "
            "part of a gain there may be the text's"
        )
        out.append(
            f"- {t}, the other scorers against CLIP's {fixed['clip'][t]['mean']:.2f} under Fixed: {said}: {verdict}."
        )
    return out


def answer(summary: dict) -> list[str]:
    """The answer a reader skims for, before any count: on each cross-task mean, the best
    scorer, and the best trained head against the best training-free scorer (CLIP, FILIP's
    released score, ...): their difference and its bootstrap interval where the study
    compared them, said plainly when a training-free scorer is ahead."""
    table, tasks = summary.get("table", {}), set(summary.get("tasks", []))
    means = [c for c in summary.get("columns", []) if c not in tasks]
    free = {"clip", *summary.get("training_free", [])}
    lines = []
    for mean in means:
        have = {m: row[mean]["mean"] for m, row in table.items() if mean in row}
        if not have:
            continue
        best = max(have, key=lambda m: have[m])
        n = len(summary.get("mean_members", {}).get(mean, []))
        line = f"- **{mean}** mean ({n} tasks): best {best}, {have[best]:.2f}."
        trained = {m: v for m, v in have.items() if m not in free}
        untrained = {m: v for m, v in have.items() if m in free}
        if trained and untrained:
            h, f = max(trained, key=lambda m: trained[m]), max(untrained, key=lambda m: untrained[m])
            d = have[h] - have[f]
            said = (
                f" The best trained head, {h} ({have[h]:.2f}), is {d:+.2f} points from the best training-free "
                f"scorer, {f} ({have[f]:.2f})"
            )
            line += said + _interval(summary.get("bootstrap", {}).get(f"mean: {mean}", {}), h, f)
            if d <= 0:
                line += f" **No trained head beats {f} here.**"
        lines.append(line)
    return ["## The answer", "", *lines, ""] if lines else []


def _interval(comps: dict, head: str, free: str) -> str:
    """', 95% interval [lo, hi] (p ...)' of head - free from the bootstrap (either sign), or
    how to get one."""
    for key, sign in ((f"{head} - {free}", 1), (f"{free} - {head}", -1)):
        v = comps.get(key)
        if v:
            lo, hi = sorted(sign * x for x in v["ci95_pts"])
            where = "excludes 0" if lo > 0 or hi < 0 else "includes 0"
            return f": 95% interval [{lo:.2f}, {hi:.2f}], which {where} (p {v['p_two_sided']:.2g})."
    return f" (not bootstrapped: name [{free}, {head}] in compare: for its interval)."
