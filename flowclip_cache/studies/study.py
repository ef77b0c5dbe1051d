"""What every study shares: run folders named by their settings, skip what is done,
resume what is not, train with the features gathered once, score everything, and
summarise across seeds. A pipeline kind (ablation.py, sensitivity.py) only says which
runs make its grid."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

import numpy as np

from .. import checkpoint
from ..errors import FlowclipError
from ..store import FeatureStore
from ..train import train_heads
from ..training_data import load_training_data

DONE = "STUDY_DONE"


@dataclass
class RunSpec:
    method: str  # the row of the table (seeds of one method share it)
    seed: int
    train: dict  # TrainConfig keys

    @property
    def folder(self) -> str:
        keys = sorted(k for k in self.train if k != "seed")
        return "__".join(f"{k}-{self.train[k]}" for k in keys) + f"__seed-{self.seed}"


def claim_folder(out: str) -> None:
    """Make (or reuse) a study folder, marked as one; refuse a folder that is not."""
    from .. import outputs

    outputs.require_own(out, "study")
    os.makedirs(out, exist_ok=True)
    outputs.mark(out, "study")


def execute(
    *,
    store_path: str,
    train_manifest: str,
    eval_manifests: list[str],
    out: str,
    runs: list[RunSpec],
    base_train: dict,
    controls: list[str],
    bootstrap: int,
    compare: list[list[str]],
    dry_run: bool,
    jobs: int = 1,
    device: str = "cpu",
    side_by_side: bool = True,
    world=None,
    progress: bool = True,
    placement: str = "auto",
    log=print,
) -> dict | None:
    from .. import outputs
    from .checks import check_study, plan_lines

    run_dirs = {r.folder: os.path.join(out, "runs", r.folder) for r in runs}
    if len(run_dirs) != len(runs):
        raise FlowclipError("two runs of the grid have the same settings")
    outputs.require_own(out, "study")
    log(f"study {out}: {len(runs)} runs" + (" (dry run: nothing is created)" if dry_run else ""))
    checked = check_study(
        store_path=store_path,
        train_manifest=train_manifest,
        eval_manifests=eval_manifests,
        runs=runs,
        run_dirs=run_dirs,
        base_train=base_train,
        device=device,
        world=world,
        log=log,
    )
    for line in checked.lines:
        log(f"  {line}")
    plan_lines(runs, run_dirs, checked, log, measure=dry_run)
    what = done_key(runs, eval_manifests, controls, bootstrap, compare)
    finished = summary_is_current(out, what)
    if finished:
        log("  the study is finished (summary in place)")
    elif os.path.exists(os.path.join(out, DONE)):
        log(
            "  the summary in place was made for another grid (runs, manifests, controls or comparisons"
            " changed): finished runs are kept, the rest is trained and everything is scored again"
        )
    if checked.problems:
        raise FlowclipError(
            f"{len(checked.problems)} problems found before training:\n  " + "\n  ".join(checked.problems)
        )
    if dry_run:
        log("  dry run: every check passed")
        return None
    if finished:
        return json.load(open(os.path.join(out, "summary.json")))
    claim_folder(out)
    if os.path.exists(os.path.join(out, DONE)):
        os.remove(os.path.join(out, DONE))
    device = checked.device
    store = FeatureStore(store_path)
    t0 = time.perf_counter()
    train_missing(
        store,
        train_manifest,
        runs,
        run_dirs,
        checked.cfgs,
        device=device,
        jobs=jobs,
        side_by_side=side_by_side,
        placement=placement,
        progress=progress,
        log=log,
    )
    summary = score_and_summarise(
        store,
        eval_manifests,
        out,
        runs,
        run_dirs,
        controls=controls,
        bootstrap=bootstrap,
        compare=compare,
        device=device,
        progress=progress,
        t0=t0,
        log=log,
    )
    with open(os.path.join(out, DONE), "w") as f:
        json.dump(what, f, indent=1)
    return summary


def done_key(runs: list[RunSpec], eval_manifests: list[str], controls, bootstrap: int, compare) -> dict:
    """What a summary was made from: a study whose grid, manifests, controls or comparisons
    change (more seeds, say) is not finished just because an older summary is in place."""
    return {
        "runs": sorted(r.folder for r in runs),
        "eval_manifests": sorted(os.path.abspath(m) for m in eval_manifests),
        "controls": list(controls),
        "bootstrap": int(bootstrap),
        "compare": [list(p) for p in compare],
    }


def summary_is_current(out: str, what: dict) -> bool:
    path = os.path.join(out, DONE)
    if not os.path.exists(path):
        return False
    try:
        recorded = json.load(open(path))
    except ValueError:
        recorded = None  # a marker written before the key was recorded: its grid is unknown
    return recorded == what


def summarise(score: dict, runs: list[RunSpec], run_dirs: dict[str, str] | None = None) -> dict:
    """Mean +- sample std across seeds of each task's official score, per image control;
    change from CLIP; each head's pairwise accuracy on its own training records."""
    from ..score import headline

    by_method: dict[str, list[str]] = {}
    for r in runs:
        by_method.setdefault(r.method, []).append(r.folder)
    res, ctm = score["results"], score["cross_task_means"]
    controls = score["controls"]
    tasks = sorted({t for k, v in res.items() if k.startswith("real|") for t in v})
    means = sorted({m for k, v in ctm.items() if k.startswith("real|") for m in v})

    def value(control: str, run: str, col: str):
        if col in tasks:
            r = res.get(f"{control}|{run}", {}).get(col)
            return None if r is None else headline(r) * 100
        m = ctm.get(f"{control}|{run}", {}).get(col)
        return None if m is None else m["mean"] * 100

    tables = {}
    for control in controls:
        clip = {c: value(control, "clip", c) for c in tasks + means}
        table = {"clip": {c: {"mean": v, "std": 0.0, "n": 1, "delta": 0.0} for c, v in clip.items() if v is not None}}
        for method, folders in by_method.items():
            row = {}
            for col in tasks + means:
                vals = [v for v in (value(control, f, col) for f in folders) if v is not None]
                if vals:
                    row[col] = {**mean_std(vals), "delta": float(np.mean(vals)) - (clip.get(col) or float("nan"))}
            table[method] = row
        tables[control] = table
    own = {}
    for method, folders in by_method.items():
        per: dict = {}
        for f in folders:
            if run_dirs and checkpoint.exists(run_dirs[f]):
                last = checkpoint.read_state(run_dirs[f])["metrics"][-1]["train_sample"]
                for k, v in last.items():
                    if k != "pairs":
                        per.setdefault(k, []).append(v * 100)
        own[method] = {k: mean_std(v) for k, v in per.items()}
    return {
        "units": "percent (mean, std); points (delta, bootstrap)",
        "columns": tasks + means,
        "tasks": tasks,
        "table": tables["real"] if "real" in tables else {},
        "controls": tables,
        "own_training_accuracy": own,
        "bootstrap": score["bootstrap"],
        "decision_changes": score["decision_changes"],
        "store_fingerprint": score["store_fingerprint"],
        "git_revision": score["git_revision"],
    }


def mean_std(vals: list[float]) -> dict:
    """Mean and sample std over seeds (std 0 for one seed) and how many."""
    return {"mean": float(np.mean(vals)), "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0, "n": len(vals)}


def mean_cell(v: dict) -> str:
    """mean ± sample std; one seed shows no spread."""
    return f"{v['mean']:.2f}" + (f" ± {v['std']:.2f}" if v.get("n", 1) > 1 else "")


def _cell(v: dict) -> str:
    """mean ± sample std (change from CLIP)."""
    return f"{mean_cell(v)} ({v['delta']:+.2f})"


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
    from ..clip_profile import profile_table
    from ..report import BOOTSTRAP_NOTE, CONTROLS_NOTE, interval_cell, table

    cols = summary["columns"]
    md = [
        "# Study summary",
        "",
        "Figures are percent (summary.json: the same, in percent; the score's results.json holds fractions).",
        "",
    ]
    if "encoder_profile" in summary:
        md += ["## The frozen encoder's profile", "", profile_table(summary["encoder_profile"], "frozen encoder"), ""]
    seeds = max((v["n"] for t in summary["controls"].values() for row in t.values() for v in row.values()), default=1)
    spread = "mean ± sample std across seeds" if seeds > 1 else "one seed, so no spread across seeds"
    for control, tbl in summary["controls"].items():
        md += [
            f"## {control.capitalize()} images",
            "",
            f"Accuracy (%), {spread} (change from CLIP in points).",
            "",
            *table(
                ["method"] + cols, [[m] + [_cell(row[c]) if c in row else "" for c in cols] for m, row in tbl.items()]
            ),
            "",
        ]
    md += [CONTROLS_NOTE, ""]
    if summary["own_training_accuracy"]:
        kinds = sorted({k for v in summary["own_training_accuracy"].values() for k in v})
        md += [
            "## Pairwise accuracy on each head's own training records (fixed sample, last epoch)",
            "",
            *table(
                ["method"] + kinds,
                [
                    [m]
                    + [
                        f"{per[k]['mean']:.2f}" + (f" ± {per[k]['std']:.2f}" if seeds > 1 else "") if k in per else ""
                        for k in kinds
                    ]
                    for m, per in summary["own_training_accuracy"].items()
                ],
            ),
            "",
        ]
    if summary["bootstrap"]:
        md += [
            "## Paired image-cluster bootstrap, 95% intervals (points)",
            "",
            BOOTSTRAP_NOTE,
            "",
            *table(
                ["task", "difference", "mean", "95% CI", "draws missing a group"],
                [
                    [t, k, f"{v['mean_pts']:.2f}", interval_cell(*v["ci95_pts"]), v["draws_missing_a_group"]]
                    for t, d in summary["bootstrap"].items()
                    for k, v in d.items()
                ],
            ),
            "",
        ]
    md += [
        "## Conclusions",
        "",
        "Written from the numbers above: each comparison's interval, and the image controls.",
        "",
        *(conclusions(summary) or ["- no comparison was bootstrapped."]),
        "",
    ]
    if "encoder_profile" in summary:
        md += [
            "How these synthetic-world figures read against the paper, and why the frozen tiny CLIP's "
            "patches limit what they can show: docs/results-synthetic.md in the flowclip repository.",
            "",
        ]
    if "timing" in summary:
        per_run = [v for v in summary["timing"]["train_seconds_per_run"].values() if v]
        md += [
            f"Wall time: {summary['timing']['this_invocation_seconds']:.0f} s for this invocation; "
            f"each run's training wall time {np.mean(per_run) if per_run else 0:.1f} s on average (runs trained "
            f"side by side share theirs); scoring {summary['timing']['score_seconds']:.0f} s."
        ]
    csv = ["control,method,column,mean_percent,std_percent,n,delta_points"]
    for control, tbl in summary["controls"].items():
        for method, row in tbl.items():
            for c, v in row.items():
                csv.append(f"{control},{method},{c},{v['mean']:.4f},{v['std']:.4f},{v['n']},{v['delta']:.4f}")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    open(os.path.join(out, "summary.md"), "w").write("\n".join(md) + "\n")
    open(os.path.join(out, "summary.csv"), "w").write("\n".join(csv) + "\n")
    plot_summary(out, summary)


def plot_summary(out: str, summary: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = summary["columns"]
    methods = [m for m in summary["table"] if m != "clip"]
    if not methods or not cols:
        return
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
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cols))])
    ax.set_xticklabels(cols, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("change from CLIP (points)")
    ax.set_title(
        "Real images: accuracy change from CLIP per task"
        + (
            " (bars: mean over seeds, whiskers: sample std)"
            if len(methods) and any(v.get("n", 1) > 1 for row in summary["table"].values() for v in row.values())
            else " (one seed)"
        ),
        fontsize=9,
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "summary.png"), dpi=100)
    plt.close(fig)


def train_missing(
    store,
    train_manifest: str,
    runs: list[RunSpec],
    run_dirs: dict,
    cfgs: dict,
    *,
    device: str,
    jobs: int,
    side_by_side: bool,
    placement: str,
    progress: bool,
    log,
) -> None:
    """Train every run not finished (resuming partial ones), from one in-memory copy of the
    features; runs that share a data order train side by side on the same batches."""
    from .checks import run_status

    todo = [r for r in runs if run_status(run_dirs[r.folder]) != "done"]
    if todo:
        from ..manifest import Manifest

        # one in-memory copy of the features serves every run (patches kept if any head needs them)
        need_patches = any(cfgs[r.folder].uses_tokens for r in todo)
        data = load_training_data(
            store, Manifest.read(train_manifest), need_patches, device, placement=placement, log=lambda m: log(f"  {m}")
        )

        # side by side: runs that share a data order (seed, batch size, epochs) train on the same batches
        key = (
            (lambda r: (cfgs[r.folder].seed, cfgs[r.folder].batch_size, cfgs[r.folder].epochs))
            if side_by_side
            else (lambda r: r.folder)
        )
        groups: dict = {}
        for r in todo:
            groups.setdefault(key(r), []).append(r)

        def train_group(group: list[RunSpec]):
            train_heads(
                store,
                train_manifest,
                [(run_dirs[r.folder], cfgs[r.folder]) for r in group],
                device=device,
                resume=True,
                progress=progress,
                data=data,
                log=lambda m: log(f"  {m}"),
            )

        if jobs > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(jobs) as pool:
                list(pool.map(train_group, groups.values()))
        else:
            for group in groups.values():
                train_group(group)


def score_and_summarise(
    store,
    eval_manifests: list[str],
    out: str,
    runs: list[RunSpec],
    run_dirs: dict,
    *,
    controls,
    bootstrap: int,
    compare,
    device: str,
    progress: bool,
    t0: float,
    log,
) -> dict:
    """Score CLIP and every run on every manifest; the summary across seeds with timings."""
    from ..score import run_score

    specs = ["clip"] + [f"{r.method}={run_dirs[r.folder]}" for r in runs]
    pairs = [tuple(p) for p in compare]
    score = run_score(
        store,
        eval_manifests,
        specs,
        os.path.join(out, "score"),
        controls=tuple(controls),
        device=device,
        bootstrap_draws=bootstrap,
        overwrite=True,
        compare=pairs,
        progress=progress,
        log=lambda m: log(f"  {m}"),
    )
    summary = summarise(score, runs, run_dirs)
    summary["timing"] = {
        "this_invocation_seconds": time.perf_counter() - t0,
        "train_seconds_per_run": {r.folder: checkpoint.read_state(run_dirs[r.folder]).get("seconds") for r in runs},
        "score_seconds": score["seconds"],
    }
    profile = os.path.join(out, "profile.json")
    if os.path.exists(profile):
        summary["encoder_profile"] = json.load(open(profile))
    write_summary(out, summary)
    return summary
