"""The paper's tables in its layout (paper_tables.py), on hand-made numbers: each cell is
ours (mean ± sample std, change from CLIP) over the published value, nothing published is
dropped, and a column we did not measure says so."""

import pytest

from flowclip_cache.paper_numbers import published_numbers
from flowclip_cache.paper_tables import TAB7_COLUMNS, TAB7_ROWS, tab7, tab7_cell


def _results(top1: float, t2i: float, i2t: float) -> dict:
    retrieval = {"t2i_R@1": t2i, "i2t_R@1": i2t, "t2i_R@5": 0.9}
    return {
        "cifar10": {"top1": top1}, "cifar100": {"top1": top1 - 0.2}, "imagenetv2": {"top1": top1 - 0.3},
        "flickr-retrieval": retrieval, "coco-retrieval": {"t2i_R@1": t2i - 0.02, "i2t_R@1": i2t - 0.02},
    }  # fmt: skip


def test_a_tab7_cell_by_hand():
    pub = {(p.row, p.column): p for p in published_numbers() if p.table == "Tab. 7"}
    flow, change = pub[("COCO T2I", "Flow-CLIP (COCO)")], pub[("COCO T2I", "Flow-CLIP (COCO), change from CLIP")]
    # seeds 38.0 and 39.0: mean 38.50, sample std 0.71 (n - 1); CLIP 30.0 -> +8.50; paper 38.3 (+8.1)
    cell = tab7_cell([38.0, 39.0], [30.0], flow, change)
    assert cell == "38.50 ± 0.71 (+8.50)<br>paper 38.3 (+8.1); ours +0.20"
    assert tab7_cell([], [30.0], flow, change) == "missing<br>paper 38.3 (+8.1)"
    assert tab7_cell([31.0], [], pub[("COCO T2I", "CLIP")], None) == "31.00<br>paper 30.2; ours +0.80"


def test_tab7_in_the_papers_layout_with_every_published_number():
    ours = {
        "CLIP": [_results(0.88, 0.30, 0.50)],
        "Flow-CLIP (COCO)": [_results(0.86, 0.38, 0.49), _results(0.87, 0.39, 0.51)],
    }
    lines = tab7(ours)
    header, rows = lines[2], lines[4:]
    assert header == "|  | " + " | ".join(TAB7_COLUMNS) + " |"
    assert [r.split(" | ")[0].lstrip("| ") for r in rows] == list(TAB7_ROWS)
    coco_t2i = next(r for r in rows if r.startswith("| COCO T2I |")).split(" | ")
    # Flow-CLIP (COCO): (36.0, 37.0) against CLIP 28.0; T2I, not I2T (a swapped direction fails)
    assert coco_t2i[5] == "36.50 ± 0.71 (+8.50)<br>paper 38.3 (+8.1); ours -1.80"
    assert coco_t2i[2] == "missing<br>paper 45.0"  # NegCLIP not measured: said, not dropped
    text = "\n".join(lines)
    for p in published_numbers():
        if p.table == "Tab. 7":
            assert f"paper {p.text}" in text or f"({p.text})" in text, p.id
    assert text.count("paper ") == len(TAB7_ROWS) * len(TAB7_COLUMNS)


@pytest.mark.parametrize("column", TAB7_COLUMNS)
def test_every_tab7_column_has_its_published_row(column):
    pub = {(p.row, p.column) for p in published_numbers() if p.table == "Tab. 7"}
    assert all((row, column) in pub for row in TAB7_ROWS)
