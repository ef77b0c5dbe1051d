"""Tabs. 2, 3, 5 and 6 in the paper's layout (the heads' ablation, their sensitivity, and
the frozen encoder families and backbones), each cell ours over the published value, as
tables.py does for Tabs. 1, 4 and 7 (docs/paper.md). Pure functions over numbers:
per-seed runs ({"results": {task: ...}, "means": {mean: ...}}) go in, Markdown comes out.

Where the text names a Tab. 2 row loosely, its "Global-M" is read as the HNB row (its
CLEVR 44.99% is the row Flow-CLIP (HNB) is compared with "under HNB") and its "Flow-CLIP"
as the complete configuration, the table's gray row (HNB + CIMR): 67.73 + 3.37 = 71.10
and 58.34 + 4.30 = 62.64 hold only so."""

from __future__ import annotations

import statistics

from .numbers import Published
from .tables import TAB4_COLUMNS, paper_cell, published_cells, quoted_differences, tab4_value

ARO = TAB4_COLUMNS[:5]  # the four ARO tasks and their mean
TAB2_COLUMNS = (
    *ARO[:4],
    ("Swap-A", ("group", "sugarcrepe/Swap-A")), ("Swap-O", ("group", "sugarcrepe/Swap-O")),
    ("ABC", ("task", "abc6k")), ("CLEVR (449 pairs)", ("task", "clevr-binding")),
    ("PUG:SPAR", ("task", "pug-spar")), ("COCO-Spatial", ("task", "whatsup-coco-spatial")),
    ("GQA-Spatial", ("task", "whatsup-gqa-spatial")),
    ("Avg. (11 tasks)", ("mean", "all11")), ("binding mean (7 tasks)", ("mean", "binding7")),
    ("CLEVR pool (4,449 pairs)", ("task", "clevr-binding-pool")),  # in the text only (§4.3), in no mean
)  # fmt: skip
COLUMN_ALIASES = {"CLEVR (449 pairs)": ("CLEVR",), "PUG:SPAR": ("PUG",)}  # as the text's differences name them
# (our row, the method in Tab. 2's scores, M, M_tok and W, CIMR, the published rows it is)
TAB2_ROWS = (
    ("CLIP", "clip", "", "", "", ("CLIP",)),
    ("Global-M (HNB)", "global", "✓", "", "", ("Global-M",)),
    ("Global-M+CIMR", "global_cimr", "✓", "", "✓", ("Global-M+CIMR",)),
    ("Flow-CLIP (HNB)", "flow_hnb", "✓", "✓", "", ("Flow-CLIP (HNB)",)),
    ("Flow-CLIP+CIMR", "flow_hnb_cimr", "✓", "✓", "✓", ("Flow-CLIP", "Flow-CLIP+CIMR")),
    # ours, not in the paper: the frozen encoder's own token-patch evidence as FILIP scores it
    # (heads/filip_score.py), no training: the cheapest strong baseline beside the heads
    ("FILIP score, frozen (ours; not in the paper)", "filip-score", "", "", "", ()),
)
FAMILY_COLUMNS = (  # Tabs. 5 and 6
    *ARO,
    *TAB2_COLUMNS[4:7], *TAB2_COLUMNS[9:11],
    ("binding Avg. (5 tasks)", ("mean", "binding5")),
    *TAB4_COLUMNS[5:8], ("Sugar Avg.", ("mean", "sugar3")),
    ("T2I", ("metric", "coco-retrieval/t2i_R@1")), ("I2T", ("metric", "coco-retrieval/i2t_R@1")),
)  # fmt: skip
ENCODER_NAMES = {"vit_b32": "ViT-B/32", "vit_b16": "ViT-B/16", "vit_l14": "ViT-L/14", "siglip_b16": "SigLIP",
                 "blip": "BLIP"}  # fmt: skip


def value(run: dict, where: tuple[str, str]) -> float | None:
    """Percent from one run: a task's score, a named group, a cross-task mean, or a metric."""
    kind, name = where
    if kind != "metric":
        return tab4_value(run, where)
    task, _, metric = name.partition("/")
    v = run["results"].get(task, {}).get(metric)
    return None if v is None else 100 * v


def grid(rows, columns, pub: dict, means: dict) -> list[list[str]]:
    """Table rows: each (leading cells, runs, published row names, our key) gets one cell per
    column, ours over the published value; our means are kept under each name for the
    differences the text quotes."""
    out = []
    for lead, runs, names, key in rows:
        cells = []
        for col, where in columns:
            vals = [v for v in (value(r, where) for r in runs) if v is not None]
            paper = next((pub[(n, col)] for n in names if (n, col) in pub), None)
            cells.append(paper_cell(vals, [], paper, None))
            for name in (key, *names):
                for c in (col, *COLUMN_ALIASES.get(col, ())):
                    if vals:
                        means[(name, c)] = statistics.fmean(vals)
        out.append([*lead, *cells])
    return out


def change_rows(rows, columns, base: str, means: dict) -> list[list[str]]:
    """The paper's lower lines: each row's change from `base` in points (mean over seeds)."""
    out = []
    for lead, _, _, key in rows:
        if key == base:
            continue
        cells = []
        for col, _ in columns:
            a, b = means.get((key, col)), means.get((base, col))
            cells.append("" if a is None or b is None else f"{a - b:+.2f}")
        out.append([f"Δ {key}", *[""] * (len(lead) - 1), *cells])
    return out


def tab2_intervals(bootstrap: dict) -> dict[tuple[str, str], tuple[float, float]]:
    """Our paired bootstrap's 95% intervals ({task: {"b - a": {"ci95_pts": [lo, hi]}}}, as
    score writes them) keyed as the text names them: ("B minus A", column)."""
    names = {method: names for _, method, *_, names in TAB2_ROWS}
    columns = {name: col for col, (kind, name) in TAB2_COLUMNS if kind == "task"}
    out = {}
    for task, pairs in bootstrap.items():
        for pair, b in pairs.items():
            hi_m, _, lo_m = pair.partition(" - ")
            for x in names.get(hi_m, ()):
                for y in names.get(lo_m, ()):
                    for col in (columns.get(task), *COLUMN_ALIASES.get(columns.get(task, ""), ())):
                        if col:
                            out[(f"{x} minus {y}", col)] = tuple(b["ci95_pts"])
    return out


def tab2(ours: dict[str, list[dict]], published: list[Published] | None = None, intervals=None) -> list[str]:
    """Tab. 2: CLIP and the four HNB-trained scorers on the 11 tasks, their mean and the
    7-task binding mean, with each row's change from CLIP below. `ours`: method -> runs;
    `intervals`: tab2_intervals of the study's bootstrap."""
    from ..scoring.report import table

    means: dict[tuple, float] = {}
    pub = published_cells("Tab. 2", published)
    rows = [((label, m, tok, cimr), ours.get(method, []), names, label)
            for label, method, m, tok, cimr, names in TAB2_ROWS]  # fmt: skip
    body = grid(rows, TAB2_COLUMNS, pub, means) + change_rows(rows, TAB2_COLUMNS, "CLIP", means)
    quoted = [p for (row, _), p in pub.items() if " minus " in row]
    return [
        "Tab. 2: component and objective ablation on COCO (%); every trained row uses HNB. Each cell: ours, "
        "mean ± sample std over seeds; below it, where the paper's text gives the value, the paper's and ours "
        "minus it. Δ lines: change from CLIP (points). The text's 'Global-M' is the HNB row, its 'Flow-CLIP' the "
        "complete configuration (HNB + CIMR). The last row is ours, not the paper's: the frozen encoder scored by "
        "its own token-patch evidence (FILIP's released score), with no head and no training.",
        "",
        *table(["scorer", "M", "M_tok, W", "CIMR", *[c for c, _ in TAB2_COLUMNS]], body),
        "",
        *quoted_differences(quoted, means, intervals),
    ]


def tab3(ours: dict[tuple[float, float, float], list[dict]], published: list[Published] | None = None) -> list[str]:
    """Tab. 3: ARO accuracy over lambda_CIMR x tau_p x alpha; the reference (0.10, 0.05,
    1.00) marked; below, the range of the ARO mean across the configurations beside the
    paper's. `ours`: (cimr, tau_p, alpha) -> runs."""
    from ..scoring.report import table

    means: dict[tuple, float] = {}
    pub = published_cells("Tab. 3", published)
    rows = [((f"{c:.2f}", f"{t:.2f}", f"{a:.2f}" + " (reference)" * ((c, t, a) == (0.10, 0.05, 1.00))), runs, (),
             (c, t, a)) for (c, t, a), runs in sorted(ours.items())]  # fmt: skip
    body = grid(rows, ARO, pub, means)
    avgs = [means[(key, "ARO Avg.")] for *_, key in rows if (key, "ARO Avg.") in means]
    lines = ["ARO Avg. across the configurations (%):", ""]
    for end, ours_end in (("lowest", min(avgs, default=None)), ("highest", max(avgs, default=None))):
        paper = pub.get(("the eight configurations", f"ARO Avg., {end}"))
        lines.append(f"- {end}: " + paper_cell([ours_end] if ours_end is not None else [], [], paper, None))
    return [
        "Tab. 3: ARO accuracy across λ_CIMR, τ_p and α (%). Each cell: ours, mean ± sample std over seeds.",
        "",
        *table(["λ_CIMR", "τ_p", "α", *[c for c, _ in ARO]], body),
        "",
        *lines,
    ]


# the encoder blocks each table of the paper holds, in its order (its captions and text)
TABLE_ENCODERS = {"Tab. 5": ("SigLIP", "BLIP"), "Tab. 6": ("ViT-B/32", "ViT-B/16", "ViT-L/14")}


def families(table_name: str, ours: dict[str, dict[str, list[dict]]], published: list[Published] | None) -> list:
    """Tabs. 5 and 6: per encoder, Base (the encoder's own scoring), Global-M and Flow-CLIP."""
    from ..scoring.report import table

    means: dict[tuple, float] = {}
    pub = published_cells(table_name, published)
    # every encoder block the paper's table holds, in its order, whether the plan measured it
    # or not (a block no encoder gives reads 'missing', in the reduced run as in the real
    # plan), then any other encoder of ours
    paper_names = list(TABLE_ENCODERS[table_name])
    by_name = {ENCODER_NAMES.get(enc, enc): by_row for enc, by_row in ours.items()}
    names = paper_names + [n for n in by_name if n not in paper_names]
    rows = []
    for name in names:
        for row in ("Base", "Global-M", "Flow-CLIP"):
            rows.append(((name, row), by_name.get(name, {}).get(row, []), (f"{name}, {row}",), f"{name}, {row}"))
    body = grid(rows, FAMILY_COLUMNS, pub, means)
    for name in names:  # the text's "Flow-CLIP minus Global-M" per backbone
        for col, _ in FAMILY_COLUMNS:
            a, b = means.get((f"{name}, Flow-CLIP", col)), means.get((f"{name}, Global-M", col))
            if a is not None and b is not None:
                means[(f"{name}, Flow-CLIP minus Global-M", col)] = a - b
    lines = []
    for (row, col), p in pub.items():
        if row.endswith("minus Global-M"):
            got = means.get((row, col))
            lines.append(f"- {row}, {col}: " + paper_cell([got] if got is not None else [], [], p, None))
        elif col.endswith(("lowest", "highest")):  # a range over the table's backbones: all of them, or missing
            base = col.rsplit(", ", 1)[0]
            have = {r.rsplit(", ", 1)[0]: v for (r, c), v in means.items() if c == base and r.endswith(", Flow-CLIP")}
            lacking = [n for n in paper_names if n not in have]
            vals = [have[n] for n in paper_names if n in have]
            got = None if lacking or not vals else (min if col.endswith("lowest") else max)(vals)
            note = (
                f" (over {len(vals)} of the {len(paper_names)} backbones: {', '.join(lacking)} missing)"
                if lacking
                else ""
            )
            lines.append(f"- {row}, {col}: " + paper_cell([got] if got is not None else [], [], p, None) + note)
    caption = {
        "Tab. 5": "Tab. 5: frozen encoder families with COCO-trained scoring heads (%).",
        "Tab. 6": "Tab. 6: frozen CLIP backbones with COCO-trained scoring heads (%).",
    }[table_name]
    return [
        f"{caption} Base: the encoder's own scoring. binding Avg.: Swap-A, Swap-O, ABC, COCO- and GQA-Spatial; "
        "Sugar Avg.: Add, Replace, Swap; T2I/I2T: COCO Recall@1. Each cell: ours, mean ± sample std over seeds; "
        "below it, where the paper's text gives the value, the paper's and ours minus it.",
        "",
        *table(["encoder", "scorer", *[c for c, _ in FAMILY_COLUMNS]], body),
        *(["", "Figures the paper's text quotes (points or %):", "", *lines] if lines else []),
    ]
