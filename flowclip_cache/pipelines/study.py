"""What every study shares: run folders named by their settings, skip what is done,
resume what is not, train with the features gathered once, score everything, and
summarise across seeds. A pipeline kind (ablation.py, sensitivity.py) only says which
runs make its grid."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from ..errors import FlowclipError
from ..store import FeatureStore
from ..train import TrainConfig, load_training_data, train_head

DONE = "STUDY_DONE"


@dataclass
class RunSpec:
    method: str          # the row of the table (seeds of one method share it)
    seed: int
    train: dict          # TrainConfig keys

    @property
    def folder(self) -> str:
        keys = sorted(k for k in self.train if k != "seed")
        return "__".join(f"{k}-{self.train[k]}" for k in keys) + f"__seed-{self.seed}"


def run_status(path: str) -> str:
    if os.path.exists(os.path.join(path, "DONE")):
        return "done"
    if os.path.exists(os.path.join(path, "state.json")):
        return "partial"
    return "todo"


def execute(*, store_path: str, train_manifest: str, eval_manifests: list[str], out: str, runs: list[RunSpec],
            base_train: dict, controls: list[str], bootstrap: int, compare: list[list[str]], dry_run: bool,
            jobs: int = 1, device: str = "cpu", log=print) -> dict | None:
    os.makedirs(out, exist_ok=True)
    run_dirs = {r.folder: os.path.join(out, "runs", r.folder) for r in runs}
    if len(run_dirs) != len(runs):
        raise FlowclipError("two runs of the grid have the same settings")
    log(f"study {out}: {len(runs)} runs")
    for r in runs:
        log(f"  [{run_status(run_dirs[r.folder]):7s}] {r.method:16s} {r.folder}")
    if os.path.exists(os.path.join(out, DONE)):
        log("  the study is finished (summary in place)")
    if dry_run:
        return None
    if os.path.exists(os.path.join(out, DONE)):
        return json.load(open(os.path.join(out, "summary.json")))
    store = FeatureStore(store_path)
    todo = [r for r in runs if run_status(run_dirs[r.folder]) != "done"]
    if todo:
        from ..manifest import Manifest
        # one in-memory copy of the features serves every run (patches kept if any head needs them)
        need_patches = any(TrainConfig.from_dict({**base_train, **r.train}).head == "flow" for r in todo)
        data = load_training_data(store, Manifest.read(train_manifest), need_patches, device)

        def one(r: RunSpec):
            cfg = TrainConfig.from_dict({**base_train, **r.train, "seed": r.seed}, f"run {r.folder}")
            d = run_dirs[r.folder]
            train_head(store, train_manifest, d, cfg, device=device, resume=run_status(d) == "partial",
                       progress=False, data=data, log=lambda m, f=r.folder: log(f"  {f}: {m}"))

        if jobs > 1:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(jobs) as pool:
                list(pool.map(one, todo))
        else:
            for r in todo:
                one(r)
    from ..score import run_score
    specs = ["clip"] + [f"{r.method}={run_dirs[r.folder]}" for r in runs]
    pairs = [tuple(p) for p in compare]
    score = run_score(store, eval_manifests, specs, os.path.join(out, "score"), controls=tuple(controls),
                      device=device, bootstrap_draws=bootstrap, overwrite=True, compare=pairs,
                      log=lambda m: log(f"  {m}"))
    summary = summarise(score, runs)
    write_summary(out, summary)
    with open(os.path.join(out, DONE), "w") as f:
        f.write("done\n")
    return summary


def summarise(score: dict, runs: list[RunSpec]) -> dict:
    """Mean +- sample std across seeds of each task's official score; change from CLIP."""
    from ..score import headline
    by_method: dict[str, list[str]] = {}
    for r in runs:
        by_method.setdefault(r.method, []).append(r.folder)
    res = score["results"]
    tasks = sorted({t for k, v in res.items() if k.startswith("real|") for t in v})
    means = sorted({m for k, v in score["cross_task_means"].items() if k.startswith("real|") for m in v})
    label = {s["run"]: s["run"] for s in score["scorers"]}
    clip = {t: headline(res["real|clip"][t]) * 100 for t in tasks if t in res.get("real|clip", {})}
    clip.update({m: score["cross_task_means"]["real|clip"][m]["mean"] * 100 for m in means
                 if m in score["cross_task_means"].get("real|clip", {})})
    table = {"clip": {k: {"mean": v, "std": 0.0, "n": 1, "delta": 0.0} for k, v in clip.items()}}
    for method, folders in by_method.items():
        row = {}
        for col in tasks + means:
            vals = []
            for f in folders:
                run = label.get(f, f)
                if col in tasks:
                    r = res.get(f"real|{run}", {}).get(col)
                    if r is not None:
                        vals.append(headline(r) * 100)
                else:
                    m = score["cross_task_means"].get(f"real|{run}", {}).get(col)
                    if m is not None:
                        vals.append(m["mean"] * 100)
            if vals:
                row[col] = {"mean": float(np.mean(vals)), "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0,
                            "n": len(vals), "delta": float(np.mean(vals)) - clip.get(col, float("nan"))}
        table[method] = row
    return {"columns": tasks + means, "table": table, "bootstrap": score["bootstrap"],
            "store_fingerprint": score["store_fingerprint"], "git_revision": score["git_revision"]}


def write_summary(out: str, summary: dict) -> None:
    cols = summary["columns"]
    md = ["# Study summary", "", "Accuracy (%), mean ± sample std across seeds; Δ = change from CLIP in points.", "",
          "| method | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    csv = ["method,column,mean,std,n,delta"]
    for method, row in summary["table"].items():
        cells = []
        for c in cols:
            v = row.get(c)
            cells.append("" if v is None else f"{v['mean']:.2f} ± {v['std']:.2f} (Δ {v['delta']:+.2f})")
            if v is not None:
                csv.append(f"{method},{c},{v['mean']:.4f},{v['std']:.4f},{v['n']},{v['delta']:.4f}")
        md.append(f"| {method} | " + " | ".join(cells) + " |")
    if summary["bootstrap"]:
        md += ["", "Paired image-cluster bootstrap, 95% intervals (points):", "", "| task | difference | mean | 95% CI |",
               "|---|---|---|---|"]
        for task, d in summary["bootstrap"].items():
            for k, v in d.items():
                md.append(f"| {task} | {k} | {v['mean_pts']:.2f} | [{v['ci95_pts'][0]:.2f}, {v['ci95_pts'][1]:.2f}] |")
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
        ax.bar(xs, [row.get(c, {}).get("delta", 0) for c in cols], width,
               yerr=[row.get(c, {}).get("std", 0) for c in cols], capsize=2, label=m)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cols))])
    ax.set_xticklabels(cols, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("change from CLIP (points)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "summary.png"), dpi=100)
    plt.close(fig)
