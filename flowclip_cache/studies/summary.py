"""A study's summary across seeds, written: summary.md (tables, bootstrap, controls, the
conclusions), summary.csv, summary.json and summary.png."""

from __future__ import annotations

import json
import os

import numpy as np

from ..progress import stage_line


def mean_std(vals: list[float]) -> dict:
    """Mean and sample std over seeds (std 0 for one seed) and how many."""
    return {"mean": float(np.mean(vals)), "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0, "n": len(vals)}


def mean_cell(v: dict) -> str:
    """mean ± sample std; one seed shows no spread."""
    return f"{v['mean']:.2f}" + (f" ± {v['std']:.2f}" if v.get("n", 1) > 1 else "")


def _cell(v: dict) -> str:
    """mean ± sample std (change from CLIP); * where it rests on part of its records."""
    return f"{mean_cell(v)} ({v['delta']:+.2f})" + (" *" if v.get("partial") else "")


PARTIAL_NOTE = (
    "\\* rests on part of its records (in the bootstrap table: '(partial)'; rows extract recorded as failed "
    "were left out, or a cross-task mean lacks a member): the score's results.md says which."
)


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
        + _after_holm(comps)
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


def _after_holm(comps) -> str:
    """How many differences stand after Holm's correction over every comparison shown."""
    from ..scoring.stats import holm

    p = [v.get("p_two_sided", float("nan")) for _, _, v in comps]
    if all(x != x for x in p):  # no p recorded (a summary from before they were)
        return ""
    held = [f"{k} on {t}" for (t, k, _), q in zip(comps, holm(p)) if q < 0.05]
    return f" After Holm's correction over all {len(comps)}, {len(held)} stand (p < 0.05)" + (
        f": {'; '.join(held)}." if held else "."
    )


def _beyond_chance(k: int, n: int) -> str:
    """Whether k intervals of n excluding 0 are more than chance: the probability of k or
    more under n independent comparisons at 5% each (the study's intervals share records,
    so they are not independent: a guide, said so)."""
    if k == 0:
        return "None does."
    p = 1.0 if k == 0 else 1.0 - binomial_tail(k - 1, n, 0.05)
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


def conclusions(summary: dict) -> list[str]:
    """One line per bootstrap comparison and question, written from the numbers: the
    difference, its interval, and whether the interval excludes zero."""
    lines = []
    for task, d in summary["bootstrap"].items():
        for key, v in d.items():
            lo, hi = v["ci95_pts"]
            verdict = ("higher" if lo > 0 else "lower") if (lo > 0 or hi < 0) else "no difference shown"
            lines.append(
                f"- {task}: {key} = {v['mean_pts']:+.2f} points, 95% interval [{lo:.2f}, {hi:.2f}]: "
                + (
                    f"the interval excludes 0 ({verdict})."
                    if verdict != "no difference shown"
                    else "the interval includes 0 (no difference shown)."
                )
            )
    for control in ("shuffle", "fixed"):
        table = summary["controls"].get(control, {})
        for method, row in table.items():
            if method == "clip":
                continue
            tasks = summary.get("tasks", list(row))
            deltas = [row[t]["delta"] for t in tasks if t in row]
            if deltas:
                lines.append(
                    f"- {control.capitalize()} images (lower is better): {method}'s accuracy differs from "
                    f"CLIP's by {np.mean(deltas):+.2f} points on average over its {len(deltas)} tasks."
                )
    return lines


def write_summary(out: str, summary: dict) -> None:
    """summary.json, summary.md, summary.csv and summary.png of a study's summary."""
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    open(os.path.join(out, "summary.md"), "w").write("\n".join(summary_markdown(summary)) + "\n")
    open(os.path.join(out, "summary.csv"), "w").write("\n".join(summary_csv(summary)) + "\n")
    plot_summary(out, summary)


def seeds_of(summary: dict) -> int:
    return max((v["n"] for t in summary["controls"].values() for row in t.values() for v in row.values()), default=1)


def summary_markdown(summary: dict) -> list[str]:
    from ..scoring.profile import profile_table
    from ..scoring.report import CONTROLS_NOTE

    md = [
        "# Study summary",
        "",
        "Figures are percent (summary.json: the same, in percent; the score's results.json holds fractions).",
        "",
    ]
    if summary.get("training_records_left_out"):
        n = max(summary["training_records_left_out"].values())
        md += [
            f"**Partial training data:** the runs were trained without {n:,} records of the training manifest "
            "(extract could not read their image or caption; allow_missing: true). Each run's config.json lists "
            "them under excluded_failed.",
            "",
        ]
    if "encoder_profile" in summary:
        md += ["## The frozen encoder's profile", "", profile_table(summary["encoder_profile"], "frozen encoder"), ""]
    md += (
        _control_tables(summary)
        + _mean_members(summary)
        + [CONTROLS_NOTE, ""]
        + _own_accuracy(summary)
        + _bootstrap_table(summary)
    )
    md += [
        "## Conclusions",
        "",
        "Written from the numbers above: the overall reading first, then each comparison's interval and the "
        "image controls.",
        "",
        *overall(summary),
        *(conclusions(summary) or ["- no comparison was bootstrapped."]),
        "",
    ]
    if "encoder_profile" in summary:
        md += [_binding_lab_pointer(summary.get("encoder")), ""]
    if "timing" in summary:
        md += [_wall_time(summary["timing"])]
    return md


# what the project's binding-lab run recorded (docs/results-synthetic.md, section 9) for an encoder
# and patch readout: the binding intervals of Flow-CLIP (HNB + CIMR) minus Global-M above 0
LAB_RUNS = {
    ("flowclip-tiny-clip-filip", "standard"): "all 12 of its binding intervals were above 0",
    ("flowclip-tiny-clip-filip", "clearclip"): "4 of its 12 binding intervals were above 0",
}


def _binding_lab_pointer(encoder: dict | None) -> str:
    """Where the binding lab answers for this study's encoder and readout: the recorded
    figure where the project's run holds that pair, and only there."""
    said = (
        "How these synthetic-world figures read against the paper, and why a frozen tiny CLIP's patches limit "
        "what they can show: docs/results-synthetic.md in the flowclip repository; sections 8 and 9 (`flowclip "
        "run binding-lab`) ask under which encoder, readout and world Flow-CLIP's binding gain over Global-M appears."
    )
    if not encoder:
        return said
    key = (str(encoder.get("model")), str(encoder.get("patch_readout", "standard")))
    found = LAB_RUNS.get(key)
    if found is None:
        return said + f" The project's run holds no figures for {key[0]} with {key[1]} patches."
    return said + f" In the project's run with {key[0]} and {key[1]} patches (this study's), {found} (section 9)."


def _wall_time(timing: dict) -> str:
    """The invocation's wall time (from the process's start: the world, extraction and the
    profile before the study included), and the study's training and scoring within it."""
    per_run = [v for v in timing["train_seconds_per_run"].values() if v]
    study = timing.get("study_seconds")
    return (
        f"Wall time: {timing['this_invocation_seconds']:.0f} s for this invocation, from its start"
        + (f" (the study's training and scoring: {study:.0f} s of it)" if study is not None else "")
        + f"; each run's training wall time {np.mean(per_run) if per_run else 0:.1f} s on average (runs trained "
        f"side by side share theirs); scoring {timing['score_seconds']:.0f} s."
        + (" " + stage_line(timing["stage_seconds"], timing["study_wall_seconds"]) if "stage_seconds" in timing else "")
    )


def _control_tables(summary: dict) -> list[str]:
    from ..scoring.report import table

    cols = summary["columns"]
    spread = "mean ± sample std across seeds" if seeds_of(summary) > 1 else "one seed, so no spread across seeds"
    md: list[str] = []
    for control, tbl in summary["controls"].items():
        blank = "n/d" if control != "real" else ""  # a task Real alone scores (image choice, groups)
        rows = [[m] + [_cell(row[c]) if c in row else blank for c in cols] for m, row in tbl.items()]
        md += [
            f"## {control.capitalize()} images",
            "",
            f"Accuracy (%), {spread} (change from CLIP in points).",
            "",
            *table(["method"] + cols, rows),
            "",
        ]
        if control != "real" and any(c not in row for row in tbl.values() for c in cols):
            md += ["n/d: not defined: in image-choice and group tasks the images are the candidates, so no "
                   "image control is scored there (docs/method.md).", ""]  # fmt: skip
        if any(v.get("partial") for row in tbl.values() for v in row.values()):
            md += [PARTIAL_NOTE, ""]
    return md


def _mean_members(summary: dict) -> list[str]:
    members = summary.get("mean_members") or {}
    if not members:
        return []
    said = "; ".join(f"`{m}` = mean of {', '.join(v)}" for m, v in members.items())
    return [f"Cross-task columns: {said}.", ""]


def _own_accuracy(summary: dict) -> list[str]:
    from ..scoring.report import table

    own = summary["own_training_accuracy"]
    if not own:
        return []
    seeds = seeds_of(summary)
    kinds = sorted({k for v in own.values() for k in v})
    cell = lambda v: f"{v['mean']:.2f}" + (f" ± {v['std']:.2f}" if seeds > 1 else "")
    rows = [[m] + [cell(per[k]) if k in per else "" for k in kinds] for m, per in own.items()]
    return [
        "## Pairwise accuracy on each head's own training records (fixed sample, last epoch)",
        "",
        *table(["method"] + kinds, rows),
        "",
    ]


def _bootstrap_table(summary: dict) -> list[str]:
    from ..scoring.report import bootstrap_table

    return bootstrap_table(
        summary["bootstrap"], "## Paired image-cluster bootstrap, 95% intervals (points)", PARTIAL_NOTE
    )


def summary_csv(summary: dict) -> list[str]:
    csv = ["control,method,column,mean_percent,std_percent,n,delta_points,partial"]
    for control, tbl in summary["controls"].items():
        for method, row in tbl.items():
            for c, v in row.items():
                flag = "partial" if v.get("partial") else ""
                csv.append(f"{control},{method},{c},{v['mean']:.4f},{v['std']:.4f},{v['n']},{v['delta']:.4f},{flag}")
    return csv


def plot_summary(out: str, summary: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = summary_figure(summary)
    if fig is not None:
        fig.savefig(os.path.join(out, "summary.png"), dpi=100)
        plt.close(fig)


def summary_figure(summary: dict):
    """Bars: each method's change from CLIP per task (mean over seeds, whiskers the sample
    std); a dashed segment per task at chance (where the encoder's profile gives it),
    drawn relative to CLIP as the bars are; the cross-task means shaded and labelled."""
    import matplotlib.pyplot as plt

    cols = summary["columns"]
    methods = [m for m in summary["table"] if m != "clip"]
    if not methods or not cols:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(cols)), 4))
    width = 0.8 / len(methods)
    for i, m in enumerate(methods):
        row = summary["table"][m]
        xs = [j + i * width for j in range(len(cols))]
        several = any(row.get(c, {}).get("n", 1) > 1 for c in cols)  # one seed: no error bars
        ax.bar(
            xs,
            [row.get(c, {}).get("delta", 0) for c in cols],
            width,
            yerr=[row.get(c, {}).get("std", 0) for c in cols] if several else None,
            capsize=2,
            label=m,
        )
    ax.axhline(0, color="k", lw=0.8)
    chance = summary.get("encoder_profile", {}).get("chance", {})
    clip = summary["table"].get("clip", {})
    labelled = False
    for j, c in enumerate(cols):
        task = c.removeprefix("synthetic-")
        if task in chance and c in clip:
            y = 100 * chance[task] - clip[c]["mean"]
            ax.hlines(y, j - width / 2, j + 0.8 - width / 2, colors="grey", linestyles="--", lw=1,
                      label="_nolegend_" if labelled else "chance (relative to CLIP)")  # fmt: skip
            labelled = True
    means = [j for j, c in enumerate(cols) if c in summary.get("mean_members", {})]
    for j in means:
        ax.axvspan(j - width / 2 - 0.1, j + 0.8 - width / 2 + 0.1, color="0.92", zorder=0)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cols))])
    ax.set_xticklabels([c + (" (mean)" if j in means else "") for j, c in enumerate(cols)], rotation=30, ha="right",
                       fontsize=8)  # fmt: skip
    ax.set_ylabel("change from CLIP (points)")
    ax.set_title(
        "Real images: accuracy change from CLIP per task"
        + (
            " (bars: mean over seeds, whiskers: sample std)"
            if len(methods) and any(v.get("n", 1) > 1 for row in summary["table"].values() for v in row.values())
            else " (one seed)"
        )
        + ("; shaded: cross-task means" if means else ""),
        fontsize=9,
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
