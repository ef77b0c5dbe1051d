"""A study's summary across seeds, written: summary.md (tables, bootstrap, controls, the
conclusions), summary.csv, summary.json and summary.png."""

from __future__ import annotations

import json
import os

import numpy as np

from ..progress import stage_line
from .answer import answer, overall


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
        *answer(summary),
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
    ("flowclip-tiny-clip-filip", "clearclip"): "3 of its 12 binding intervals were above 0",
}


def _binding_lab_pointer(encoder: dict | None) -> str:
    """Where the binding lab answers for this study's encoder and readout: the recorded
    figure where the project's run holds that pair, and only there."""
    said = (
        "How these synthetic-world figures read against the paper, and why a frozen tiny CLIP's patches limit "
        "what they can show: docs/results-synthetic.md in the flowclip repository; sections 8 and 9 (`flowclip "
        "run binding-lab`) ask under which encoder, readout and world Flow-CLIP's binding gain over Global-M appears, "
        "section 10 (`flowclip run binding-question`) whether it adds anything to the encoder's own token-patch "
        "evidence, and section 13 (`flowclip run refinement`) whether the refinement alone does."
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
        summary["bootstrap"],
        "## Paired image-cluster bootstrap, 95% intervals (points)",
        PARTIAL_NOTE,
        summary.get("bootstrap_family"),
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
