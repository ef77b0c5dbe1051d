"""The two axes every compositional paper reports: what a scorer gains on compositional
tasks and what it costs on recognition. Per scorer, over the tasks its results hold:

- compositional: the mean of every other task's headline (its official score);
- zero-shot: the mean over zero-shot classification sets of each set's figure: its own
  metric where it names one (ELEVATER's sets: accuracy, mean-per-class, 11-point mAP or
  ROC-AUC, as vl_compo's 21_tasks_avg averages them), else top-1;
- retrieval: the mean over retrieval galleries of the mean of image->text and text->image R@1.

A table of several scorers averages each axis over the tasks every scorer has (a mean over
different tasks compares nothing), and names them. The trade-off figure places each scorer
at (compositional, zero-shot) as vl_compo's figure places its 202 models (its `comp_avg`
against `21_tasks_avg`, drawn behind ours when its results.csv is given), with an arrow from
the frozen encoder to each head scored beside it."""

from __future__ import annotations

import math

AXES = {"compositional": "compositional mean", "zero_shot": "zero-shot mean", "retrieval": "retrieval R@1 mean"}


def task_axis(res: dict) -> str:
    """Which axis a task's results count on (told by the figures a task kind returns)."""
    if "prompt_ensemble" in res:  # every classification result (a multi-label set has no top-1)
        return "zero_shot"
    return "retrieval" if "i2t_R@1" in res and "t2i_R@1" in res else "compositional"


def axis_figure(res: dict, axis: str) -> float | None:
    """The fraction a task adds to its axis's mean (None when it has none)."""
    from .metrics import headline

    if axis == "zero_shot":
        v = res.get("score", res.get("top1"))  # a set's own metric, else top-1
    elif axis == "retrieval":
        v = (res["i2t_R@1"] + res["t2i_R@1"]) / 2
    else:
        v = headline(res)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def axis_tasks(per_task_of_rows: list[dict]) -> dict[str, list[str]]:
    """axis -> the tasks every row has a figure for, in first-seen order."""
    out: dict[str, list[str]] = {a: [] for a in AXES}
    if not per_task_of_rows:
        return out
    for task, res in per_task_of_rows[0].items():
        if not isinstance(res, dict):
            continue
        axis = task_axis(res)
        if all(isinstance(p.get(task), dict) and axis_figure(p[task], axis) is not None for p in per_task_of_rows):
            out[axis].append(task)
    return out


def axis_means(per_task: dict, tasks: dict[str, list[str]]) -> dict[str, float | None]:
    """axis -> mean (fraction) over its tasks, None when it has none."""
    out: dict[str, float | None] = {}
    for axis, names in tasks.items():
        vals = [axis_figure(per_task[t], axis) for t in names]
        out[axis] = math.fsum(v for v in vals if v is not None) / len(vals) if vals else None
    return out


def axis_columns(results: dict) -> dict[str, tuple[str, list[str]]]:
    """A study's axis columns (name -> (axis, tasks)) over the real-image rows of a score's
    results: none unless a recognition axis has a task (a study of compositional tasks
    alone already shows their means)."""
    tasks = axis_tasks([v for k, v in results.items() if k.startswith("real|")])
    if not tasks["zero_shot"] and not tasks["retrieval"]:
        return {}
    return {AXES[a]: (a, t) for a, t in tasks.items() if t}


def axis_percent(per_task: dict, axis: str, tasks: list[str]) -> float | None:
    """One row's mean on an axis, in percent (None when it lacks one of the tasks)."""
    if any(not isinstance(per_task.get(t), dict) for t in tasks):
        return None
    v = axis_means(per_task, {axis: tasks})[axis]
    return None if v is None else 100 * v


def plot_tradeoff(points: list[dict], tasks: dict[str, list[str]], path: str, backdrop=None) -> None:
    """The figure: points [{label, x, y, base}] in percent (base: the label of the frozen
    encoder's point an arrow starts from, or None); backdrop [(x, y)] from vl_compo."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=150)
    if backdrop:
        bx, by = zip(*backdrop)
        ax.scatter(bx, by, s=10, color="0.75", label=f"vl_compo's {len(backdrop)} models", zorder=1)
    where = {p["label"]: (p["x"], p["y"]) for p in points}
    for p in points:
        ax.scatter(p["x"], p["y"], s=36, zorder=3, color="black" if p["base"] is None else "tab:blue")
        ax.annotate(p["label"], (p["x"], p["y"]), textcoords="offset points", xytext=(4, 4), fontsize=7)
        if p["base"] in where:
            ax.annotate("", xy=(p["x"], p["y"]), xytext=where[p["base"]], zorder=2,
                        arrowprops={"arrowstyle": "->", "color": "tab:blue", "lw": 1})  # fmt: skip
    n_comp, n_zs = len(tasks["compositional"]), len(tasks["zero_shot"])
    ax.set_xlabel(f"{AXES['compositional']} (%, {n_comp} task{'s' * (n_comp != 1)})")
    ax.set_ylabel(f"{AXES['zero_shot']} (%, {n_zs} set{'s' * (n_zs != 1)})")
    ax.set_title("Compositional gain against recognition cost", fontsize=10)
    ax.grid(alpha=0.3)
    ax.scatter([], [], s=36, color="black", label="frozen encoder")
    ax.scatter([], [], s=36, color="tab:blue", label="scorer (arrow: from its frozen encoder)")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
