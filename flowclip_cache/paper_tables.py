"""The paper's tables in its layout, each cell ours over the published value (issue 27;
docs/paper.md). Pure functions over numbers: a study's per-seed results go in, Markdown
lines come out. So far Tab. 7 (zero-shot top-1 and Recall@1, with the change from CLIP)."""

from __future__ import annotations

import statistics

from .paper_numbers import Published, published_numbers

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
TAB7_COLUMNS = ("CLIP", "NegCLIP", "Global-M (COCO)", "Global-M (CC3M)", "Flow-CLIP (COCO)", "Flow-CLIP (CC3M)")
WITH_CHANGE = ("Flow-CLIP (COCO)", "Flow-CLIP (CC3M)")  # the paper prints their change from CLIP


def _values(results: list[dict], task: str, metric: str) -> list[float]:
    """Percent, one per seed that measured it."""
    return [100 * r[task][metric] for r in results if metric in r.get(task, {})]


def _spread(vals: list[float]) -> str:
    return f"{statistics.fmean(vals):.2f}" + (f" ± {statistics.stdev(vals):.2f}" if len(vals) > 1 else "")


def tab7_cell(ours: list[float], clip: list[float], paper: Published | None, change: Published | None) -> str:
    """'86.50 ± 0.20 (-1.80)<br>paper 86.5 (-1.8); ours -0.00': our mean ± sample std over
    seeds (with the change from CLIP where the paper prints one), then the published value
    and ours minus it. Nothing measured: 'missing', the published value still shown."""
    show_change = change is not None
    top = "missing"
    if ours:
        top = _spread(ours)
        if show_change and clip:
            top += f" ({statistics.fmean(ours) - statistics.fmean(clip):+.2f})"
    if paper is None:
        return top
    bottom = f"paper {paper.text}" + (f" ({change.text})" if change is not None else "")
    if ours:
        bottom += f"; ours {statistics.fmean(ours) - paper.value:+.2f}"
    return f"{top}<br>{bottom}"


def tab7(ours: dict[str, list[dict]], published: list[Published] | None = None) -> list[str]:
    """Tab. 7 as the paper lays it out (rows: datasets and retrieval directions; columns:
    CLIP, NegCLIP, Global-M and Flow-CLIP per training source). `ours`: column -> one
    results dict per seed ({manifest: {metric: fraction}}, as score's results.json holds
    them); a column not given is 'missing' beside its published values."""
    from .report import table

    pub = {(p.row, p.column): p for p in (published or published_numbers()) if p.table == "Tab. 7"}
    rows = []
    for row, (task, metric) in TAB7_ROWS.items():
        clip = _values(ours.get("CLIP", []), task, metric)
        cells = []
        for col in TAB7_COLUMNS:
            change = pub.get((row, f"{col}, change from CLIP")) if col in WITH_CHANGE else None
            cells.append(tab7_cell(_values(ours.get(col, []), task, metric), clip, pub.get((row, col)), change))
        rows.append([row, *cells])
    return [
        "Tab. 7: zero-shot top-1 (class-name prompts) and Recall@1 (%). Each cell: ours, mean ± sample std "
        "over seeds (Flow-CLIP: change from CLIP in parentheses); below it the paper's value and ours minus it.",
        "",
        *table(["", *TAB7_COLUMNS], rows),
    ]
