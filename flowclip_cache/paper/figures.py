"""The paper's Fig. 3 (CREPE Recall@1 against complexity, Flow-CLIP and LABCLIP, per
training source) and Fig. 7 (the cross-model margin atlas on ARO) from the plan's scores
(docs/paper.md, "Figures"). Each gives Markdown lines (the numbers drawn, ours beside the
published ones) and draws its PNG from the same numbers.

Fig. 3's "HNB-trained Flow-CLIP configurations shown" are read as the complete Flow-CLIP
(HNB + CIMR), the configuration trained on both sources. Fig. 7's eight examples are
chosen by a rule (the paper picked illustrative cases): per ARO task, the two records
whose Flow-CLIP margin gains most over CLIP's (seed 0's runs; ties by record id); the
patches Flow-CLIP's sensitivity selects are in the explorer (`flowclip explain`)."""

from __future__ import annotations

import statistics

from .numbers import Published, published_numbers

FOILS = {"atom": "atomic", "swap": "swap"}  # CREPE's foil types the figure shows, as the paper names them
CREPE = "crepe-productivity"


def crepe_curves(runs: list[dict]) -> dict[tuple[str, int], float]:
    """(foil type, complexity) -> Recall@1 in percent, the mean over seeds that have it."""
    points: dict[tuple[str, int], list[float]] = {}
    for r in runs:
        for key, v in r.get(CREPE, {}).get("recall_by_foil_complexity", {}).items():
            foil, _, n = key.partition("/")
            if foil in FOILS:
                points.setdefault((foil, int(n)), []).append(100 * v)
    return {k: statistics.fmean(v) for k, v in sorted(points.items())}


FIG3_FLOW = "Flow-CLIP (HNB + CIMR)"  # the configuration Fig. 3's curves and quoted lines are ours of
PAPER_FIG3_FLOW = "Flow-CLIP (HNB)"  # how the paper's text labels it


def fig3(ours: dict[str, dict[str, list[dict]]], published: list[Published] | None = None):
    """`ours`: block (COCO, CC3M-100K) -> row (LABCLIP, Flow-CLIP) -> one results dict per
    seed. Returns (Markdown lines, curves: (block, row) -> {(foil, complexity): R@1})."""
    from ..scoring.report import table
    from .tables import paper_cell

    curves = {(block, row): crepe_curves(runs) for block, rows in ours.items() for row, runs in rows.items()}
    ns = sorted({n for c in curves.values() for _, n in c})
    rows = []
    for (block, row), c in curves.items():
        for foil, name in FOILS.items():
            rows.append([block, row, name, *[f"{c[(foil, n)]:.2f}" if (foil, n) in c else "" for n in ns]])
    lines = ["Figures the paper's text quotes (Recall@1 points):", ""]
    for p in (p for p in (published or published_numbers()) if p.table == "Fig. 3"):
        block = p.row.rsplit(", ", 1)[1]
        foil = next(f for f, name in FOILS.items() if f"CREPE {name}," in p.column)
        flow, lab = curves.get((block, "Flow-CLIP"), {}), curves.get((block, "LABCLIP"), {})
        got = [flow[(foil, 12)] - lab[(foil, 12)]] if (foil, 12) in flow and (foil, 12) in lab else []
        ours_row = p.row.replace(PAPER_FIG3_FLOW, FIG3_FLOW)
        lines.append(f"- {ours_row}, {p.column} (the paper's {p.row}): " + paper_cell(got, [], p, None))
    md = [
        f"Fig. 3: CREPE productivity Recall@1 (%) against complexity, {FIG3_FLOW} and LABCLIP, per "
        f"training source; mean over seeds (fig3.png draws these numbers). The paper's '{PAPER_FIG3_FLOW}' "
        f"(its 'HNB-trained Flow-CLIP configurations') is read as this complete configuration (docs/paper.md).",
        "",
        *table(["source", "scorer", "foils", *[str(n) for n in ns]], rows),
        "",
        *lines,
    ]
    return md, curves


def draw_fig3(curves: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    blocks = list(dict.fromkeys(b for b, _ in curves))
    fig, axes = plt.subplots(1, 2 * max(len(blocks), 1), figsize=(4 * 2 * max(len(blocks), 1), 3.2), squeeze=False)
    for i, (block, foil) in enumerate((b, f) for b in blocks for f in FOILS):
        ax = axes[0][i]
        for (b, row), c in curves.items():
            pts = sorted((n, v) for (f, n), v in c.items() if b == block and f == foil)
            if pts:
                ax.plot([n for n, _ in pts], [v for _, v in pts], marker="o", label=row)
        ax.set_title(f"{block}, {FOILS[foil]} foils", fontsize=9)
        ax.set_xlabel("complexity")
        ax.set_ylabel("Recall@1 (%)")
        if ax.get_lines():
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)


ARO_TASKS = ("aro-vg-attribution", "aro-vg-relation", "aro-flickr-order", "aro-coco-order")
ATLAS_MODELS = ("CLIP", "NegCLIP", "LABCLIP", "Flow-CLIP")


def atlas(margins: dict[str, dict[tuple[str, str], float]], per_task: int = 2) -> list[dict]:
    """Fig. 7's examples: `margins`: model -> (task, record id) -> gold minus hardest foil.
    Per ARO task, the `per_task` records Flow-CLIP's margin gains most on over CLIP's, each
    with every model's margin (None where the model did not score it)."""
    flow, clip = margins.get("Flow-CLIP", {}), margins.get("CLIP", {})
    chosen = []
    for task in ARO_TASKS:
        keys = [k for k in flow if k[0] == task and k in clip]
        keys.sort(key=lambda k: (-(flow[k] - clip[k]), k[1]))
        for k in keys[:per_task]:
            each = {m: margins.get(m, {}).get(k) for m in ATLAS_MODELS}
            chosen.append({"task": task, "record": k[1], "margins": each})
    return chosen


def fig7(examples: list[dict], explorer: str = "") -> list[str]:
    from ..scoring.report import table

    rows = [
        [e["task"], e["record"], *["" if e["margins"][m] is None else f"{e['margins'][m]:+.4f}" for m in ATLAS_MODELS]]
        for e in examples
    ]
    return [
        "Fig. 7: the cross-model margin atlas on ARO: per task, the two records Flow-CLIP's gold minus hardest-foil "
        "margin gains most on over CLIP's (seed 0), with each model's margin on its own scale (> 0: ranked right). "
        + (f"Flow-CLIP's patch sensitivity for every record: {explorer}." if explorer else ""),
        "",
        *table(["task", "record", *ATLAS_MODELS], rows),
    ]


def draw_fig7(examples: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(13, 5.5), squeeze=False)
    for ax, e in zip([a for row in axes for a in row], examples):
        vals = [e["margins"][m] if e["margins"][m] is not None else 0.0 for m in ATLAS_MODELS]
        ax.barh(list(ATLAS_MODELS), vals, color=["tab:green" if v > 0 else "tab:red" for v in vals])
        ax.axvline(0, color="k", lw=0.8)
        ax.set_title(f"{e['task']} {e['record']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
