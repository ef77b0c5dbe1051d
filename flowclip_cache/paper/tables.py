"""The paper's tables in its layout, each cell ours over the published value (
docs/paper.md). Pure functions over numbers: a study's per-seed results go in, Markdown
lines come out. So far Tab. 7 (zero-shot top-1 and Recall@1, with the change from CLIP)."""

from __future__ import annotations

import re
import statistics

from .checkpoints import RELEASED
from .checkpoints import ROWS as CHECKPOINT_ROWS
from .numbers import Published, published_numbers

# Tab. 7's rows: (manifest, the metric of its results that the row reports)
TAB7_ROWS = {
    "CIFAR-10": ("cifar10", "top1"),
    "CIFAR-100": ("cifar100", "top1"),
    "ImageNetV2": ("imagenetv2", "top1"),
    "Flickr30k T2I": ("flickr-retrieval", "t2i_R@1"),
    "Flickr30k I2T": ("flickr-retrieval", "i2t_R@1"),
    "COCO T2I": ("coco-retrieval", "t2i_R@1"),
    "COCO I2T": ("coco-retrieval", "i2t_R@1"),
}
TAB7_COLUMNS = (
    "CLIP", "NegCLIP", "Global-M (COCO)", "Global-M (CC3M)", "Flow-CLIP (COCO)", "Flow-CLIP (CC3M)",
    "NegCLIP (released)",  # ours: NegCLIP's released checkpoint beside our retraining (docs/paper.md)
)  # fmt: skip
# a row or column of ours that the paper prints under another name: the published values it is set beside
PUBLISHED_AS = {"NegCLIP (released)": "NegCLIP"}
# rows and columns of ours, not the paper's: shown where the plan scores them (its `checkpoints:`),
# left out where it does not (a paper's row is never left out: it reads 'missing')
OURS_ONLY = ("NegCLIP (released)",)
WITH_CHANGE = ("Flow-CLIP (COCO)", "Flow-CLIP (CC3M)")  # the paper prints their change from CLIP


def published_cells(table: str, published: list[Published] | None = None) -> dict[tuple[str, str], Published]:
    """A table's published numbers by (row, column)."""
    return {(p.row, p.column): p for p in (published or published_numbers()) if p.table == table}


def _values(results: list[dict], task: str, metric: str) -> list[float]:
    """Percent, one per seed that measured it."""
    return [100 * r[task][metric] for r in results if metric in r.get(task, {})]


def paper_cell(ours: list[float], clip: list[float], paper: Published | None, change: Published | None) -> str:
    """'86.50 ± 0.20 (-1.80)<br>paper 86.5 (-1.8); ours -0.00': our mean ± sample std over
    seeds (with the change from CLIP where the paper prints one), then the published value
    and ours minus it. Nothing measured: 'missing', the published value still shown."""
    from ..studies.summary import mean_cell, mean_std  # the studies' own "mean ± sample std"

    top = "missing"
    if ours:
        top = mean_cell(mean_std(ours))
        if change is not None and clip:
            top += f" ({statistics.fmean(ours) - statistics.fmean(clip):+.2f})"
    if paper is None:
        return top
    bottom = f"paper {paper.text}" + (f" ({change.text})" if change is not None else "")
    if ours:
        bottom += f"; ours {statistics.fmean(ours) - paper.value:+.2f}"
    return f"{top}<br>{bottom}"


CELL = re.compile(
    r"^(?:missing|(?P<ours>[+-]?\d+\.\d+)(?: ± (?P<std>\d+\.\d+))?(?: \((?P<change>[+-]\d+\.\d+)\))?)"
    r"(?:<br>paper (?P<paper>[-\d.,]+)(?: \((?P<paper_change>[+-][\d.]+)\))?(?:; ours (?P<diff>[+-]\d+\.\d+))?)?$"
)


def parse_cell(cell: str) -> dict[str, str] | None:
    """paper_cell's text back into its numbers (ours, std, change, paper, paper_change,
    diff; '' where absent), for the CSV beside each table; None for a label cell."""
    m = CELL.match(cell.strip())
    return None if m is None else {k: v or "" for k, v in m.groupdict().items()}


def table_csv(name: str, lines: list[str], leading: int) -> list[list[str]]:
    """The Markdown tables among `lines` in long form: one row per (row, column) cell,
    the row named by its first `leading` cells."""
    out: list[list[str]] = []
    header: list[str] = []
    for line in lines:
        if not line.startswith("|"):
            header = []
            continue
        cells = [c.strip() for c in line.strip()[1:-1].split(" | ")]
        if not header:
            header = cells
            continue
        if set(line) <= set("|-"):
            continue
        for col, cell in zip(header[leading:], cells[leading:]):
            nums = parse_cell(cell)
            if nums is not None:
                out.append([name, " | ".join(cells[:leading]), col, *nums.values()])
    return out


CSV_HEADER = [
    "table",
    "row",
    "column",
    "ours",
    "ours_std",
    "change_from_clip",
    "paper",
    "paper_change",
    "ours_minus_paper",
    "data",  # "stand-ins (the reduced run)" where the Markdown says so, else "" (a CSV is read alone)
]


def tab7(ours: dict[str, list[dict]], published: list[Published] | None = None) -> list[str]:
    """Tab. 7 as the paper lays it out (rows: datasets and retrieval directions; columns:
    CLIP, NegCLIP, Global-M and Flow-CLIP per training source). `ours`: column -> one
    results dict per seed ({manifest: {metric: fraction}}, as score's results.json holds
    them); a column not given is 'missing' beside its published values."""
    from ..scoring.report import table

    pub = published_cells("Tab. 7", published)
    rows = []
    columns = [c for c in TAB7_COLUMNS if c not in OURS_ONLY or c in ours]
    for row, (task, metric) in TAB7_ROWS.items():
        clip = _values(ours.get("CLIP", []), task, metric)
        cells = []
        for col in columns:
            change = pub.get((row, f"{col}, change from CLIP")) if col in WITH_CHANGE else None
            paper = pub.get((row, PUBLISHED_AS.get(col, col)))
            cells.append(paper_cell(_values(ours.get(col, []), task, metric), clip, paper, change))
        rows.append([row, *cells])
    return [
        "Tab. 7: zero-shot top-1 (class-name prompts) and Recall@1 (%). Each cell: ours, mean ± sample std "
        "over seeds (Flow-CLIP: change from CLIP in parentheses); below it the paper's value and ours minus it.",
        "",
        *table(["", *columns], rows),
    ]


# Tab. 4: columns (label, where a per-seed value is: a task's score, a named group of it, or a cross-task mean)
TAB4_COLUMNS = (
    ("VG-R", ("task", "aro-vg-relation")), ("VG-A", ("task", "aro-vg-attribution")),
    ("COCO Ord.", ("task", "aro-coco-order")), ("Flickr Ord.", ("task", "aro-flickr-order")),
    ("ARO Avg.", ("mean", "aro")),
    ("Add", ("group", "sugarcrepe/Add")), ("Replace", ("group", "sugarcrepe/Replace")),
    ("Swap", ("group", "sugarcrepe/Swap")), ("ABC", ("task", "abc6k")),
    ("COCO-Spatial", ("task", "whatsup-coco-spatial")), ("GQA-Spatial", ("task", "whatsup-gqa-spatial")),
    ("6-task Avg.", ("mean", "controls6")),
)  # fmt: skip
# the paper's Tab. 4 cites CLIP, NegCLIP and LABCLIP beside FSC-CLIP; NegCLIP's row is its released
# checkpoint (one checkpoint across the three conditions, as every row of the table)
TAB4_ROWS = ("CLIP", "NegCLIP (released)", "LABCLIP", "FSC-CLIP", "Global-M (HNB)", "Global-M+CIMR",
             "Flow-CLIP (HNB)", "Flow-CLIP+CIMR")  # fmt: skip
CONDITIONS = ("Real", "Shuffle", "Fixed")


def tab4_value(run: dict, where: tuple[str, str]) -> float | None:
    """Percent from one run's results under one control: {"results": {task: ...},
    "means": {mean: {"mean": ...}}}, as score's results.json holds them per control|run."""
    kind, name = where
    if kind == "mean":
        m = run["means"].get(name)
        return None if m is None or m.get("partial") else 100 * m["mean"]
    task, _, group = name.partition("/")
    r = run["results"].get(task)
    if r is None:
        return None
    return 100 * (r.get("named_groups", {}).get(group) if group else r["score"])


def tab4(ours: dict[str, dict[str, list[dict]]], published: list[Published] | None = None) -> list[str]:
    """Tab. 4 as the paper lays it out: each scorer (FSC-CLIP's checkpoint and the four matched
    scoring controls of Tab. 2) under Real, Shuffle and Fixed images, one checkpoint per
    scorer across the three. `ours`: row -> condition -> one run per seed ({"results",
    "means"}); a row or condition not given reads 'missing'. A mean missing a member (partial)
    is left empty rather than averaged over fewer tasks."""
    from ..scoring.report import table

    pub = published_cells("Tab. 4", published)
    rows, means = [], {}
    for row in [r for r in TAB4_ROWS if r not in OURS_ONLY or r in ours]:
        for cond in CONDITIONS:
            runs = ours.get(row, {}).get(cond, [])
            cells = []
            for col, where in TAB4_COLUMNS:
                vals = [v for v in (tab4_value(r, where) for r in runs) if v is not None]
                paper = pub.get((row, f"{col}, {cond}"))
                cells.append(paper_cell(vals, [], paper, None))
                if vals:
                    means[(row, f"{col}, {cond}")] = statistics.fmean(vals)
            rows.append([row, cond, *cells])
    return [
        "Tab. 4: image-replacement controls (%), one checkpoint per scorer across the three conditions. "
        "Each cell: ours, mean ± sample std over seeds; below it, where the paper's text gives the value, "
        "the paper's and ours minus it.",
        "",
        *table(["scorer", "images", *[c for c, _ in TAB4_COLUMNS]], rows),
        "",
        *quoted_differences([p for key, p in pub.items() if key[0] not in TAB4_ROWS], means),
    ]


def quoted_differences(
    entries: list[Published], means: dict[tuple[str, str], float], intervals: dict | None = None
) -> list[str]:
    """The differences the text quotes ("A minus B", column "C, condition", stated positive
    when it says "(a decrease)"), from our means of the same cells; where our paired
    bootstrap has A minus B on that column (intervals: (row, column) -> (lo, hi) points),
    whether the published value lies inside our 95% interval."""
    lines = ["Differences the paper's text quotes (points):", ""] if entries else []
    for p in entries:
        a, _, b = p.row.partition(" minus ")
        column = p.column.removesuffix(" (a decrease)")
        sign = -1 if p.column.endswith("(a decrease)") else 1
        ours = None
        if (a, column) in means and (b, column) in means:
            ours = sign * (means[(a, column)] - means[(b, column)])
        got = "ours missing" if ours is None else f"ours {ours:.2f} ({ours - p.value:+.2f})"
        ci = (intervals or {}).get((p.row, column))
        if ci is not None:
            lo, hi = sorted((sign * ci[0], sign * ci[1]))
            got += f"; {'inside' if lo <= p.value <= hi else 'outside'} our 95% interval [{lo:.2f}, {hi:.2f}]"
        lines.append(f"- {p.row}, {p.column}: paper {p.text}; {got}")
    return lines


# Tab. 1: per training source, the comparison rows; columns as the caption names them
TAB1_COLUMNS = (
    *TAB4_COLUMNS[:5],
    ("Swap-A", ("group", "sugarcrepe/Swap-A")), ("Swap-O", ("group", "sugarcrepe/Swap-O")),
    ("ABC", ("task", "abc6k")), ("COCO-Spatial", ("task", "whatsup-coco-spatial")),
    ("GQA-Spatial", ("task", "whatsup-gqa-spatial")),
)  # fmt: skip
TAB1_ROWS = (  # (row, encoders frozen?)
    ("CLIP", "✓"), ("NegCLIP", "×"), ("NegCLIP (released)", "×"), ("LABCLIP", "✓"), ("FSC-CLIP", "×"),
    ("CE-CLIP", "×"), ("DAC-LLM", "×"), ("DAC-SAM", "×"), ("TSVLC", "×"), ("DCSM", "✓"),
    ("Flow-CLIP, frozen", "✓"), ("Flow-CLIP, adapted", "×"),
)  # fmt: skip
BLOCKS = ("COCO", "CC3M")
# a released checkpoint's row stands in the block of the source it was trained on (paper/checkpoints.py)
ONLY_IN = {
    row: blocks.pop()
    for row in CHECKPOINT_ROWS
    if len(blocks := {r.block for r in RELEASED.values() if r.row == row}) == 1
}
# the differences the text quotes: published id -> (row, row subtracted), both in the id's block
TAB1_DIFFERENCES = {
    "Flow-CLIP, frozen, COCO, minus FSC-CLIP": ("Flow-CLIP, frozen", "FSC-CLIP", "COCO"),
    "Flow-CLIP, adapted minus frozen, COCO": ("Flow-CLIP, adapted", "Flow-CLIP, frozen", "COCO"),
    "Flow-CLIP, adapted minus frozen, CC3M": ("Flow-CLIP, adapted", "Flow-CLIP, frozen", "CC3M"),
}


def tab1(ours: dict[str, dict[str, list[dict]]], published: list[Published] | None = None) -> list[str]:
    """Tab. 1 as the paper lays it out: a block per training source (COCO, CC3M-100K), each
    with CLIP, NegCLIP, LABCLIP, FSC-CLIP, DCSM and Flow-CLIP with frozen and with adapted
    encoders. `ours`: block -> row -> one run per seed ({"results", "means"}, real images);
    a row not given reads 'missing' beside its published values."""
    from ..scoring.report import table

    pub = published_cells("Tab. 1", published)
    rows, means = [], {}
    for block in BLOCKS:
        for row, frozen in TAB1_ROWS:
            if (row in OURS_ONLY and row not in ours.get(block, {})) or ONLY_IN.get(row, block) != block:
                continue
            runs = ours.get(block, {}).get(row, [])
            cells = []
            for col, where in TAB1_COLUMNS:
                vals = [v for v in (tab4_value(r, where) for r in runs) if v is not None]
                # a published row without a source (DCSM's, COCO-trained) belongs to the first block
                paper = pub.get((f"{row}, {block}", col)) or (pub.get((row, col)) if block == BLOCKS[0] else None)
                cells.append(paper_cell(vals, [], paper, None))
                if vals:
                    means[(f"{row}|{block}", col)] = statistics.fmean(vals)
            rows.append([block, row, frozen, *cells])
    diffs = ["Differences the paper's text quotes (points):", ""]
    for (prow, col), p in pub.items():
        if prow in TAB1_DIFFERENCES:
            a, b, block = TAB1_DIFFERENCES[prow]
            ka, kb = (f"{a}|{block}", col), (f"{b}|{block}", col)
            got = (
                f"ours {means[ka] - means[kb]:.2f} ({means[ka] - means[kb] - p.value:+.2f})"
                if ka in means and kb in means
                else "ours missing"
            )
            diffs.append(f"- {prow}, {col}: paper {p.text}; {got}")
    return [
        "Tab. 1: compositional matching and binding accuracy (%), real images; ✓ frozen encoders, × tuned. "
        "Each cell: ours, mean ± sample std over seeds; below it, where the paper's text gives the value, the "
        "paper's and ours minus it. DCSM is not in flowclip's plan: its row stays missing. A released "
        "checkpoint's row stands in the block of the source it was trained on.",
        "",
        *table(["source", "method", "frozen", *[c for c, _ in TAB1_COLUMNS]], rows),
        "",
        *diffs,
    ]
