"""Per-record scores in the formats the benchmarks' own evaluators read, for any scorer
of a group task (`flowclip export`), from a score folder's records.parquet (each group's
scores there: image 0 with captions 0, 1, then image 1 with captions 0, 1).

    c0_i0            CSV id,c0_i0,c0_i1,c1_i0,c1_i1: the keys Winoground's evaluation and
                     Baiqi-Li/NaturalBench naturalbench_retrieval.py `get_retrieval_scores`
                     give each group (c<caption>_i<image>)
    vismin-csv       CSV id,T0_I0,T0_I1,T1_I0,T1_I1,category: the submission columns of
                     rabiulcste/vismin vismin-bench/README.md (T<text>_I<image>) and the category
                     metric.py `compute_contrastive_accuracy` groups by (eval.py's predictions
                     carry it: the release's ids restart in every category), records in the
                     copy's order
    naturalbench-npy the [groups, 2 images, 2 captions] float32 array naturalbench_retrieval.py
                     passes to `evaluate_scores` (scores_i2t), groups in index order

Scores are written in their own precision (the float32 each record holds, printed
exactly); a format that lays groups out by position refuses records left out."""

from __future__ import annotations

import os

import numpy as np

from ..errors import FlowclipError

FORMATS = {"c0_i0": "scores.csv", "vismin-csv": "vismin_submission.csv", "naturalbench-npy": "scores_i2t.npy"}


def group_scores(results: str, benchmark: str, scorer: str) -> tuple[list[str], np.ndarray]:
    """(record ids, scores [n, image, caption] float32) of a group task's real-image rows."""
    import pyarrow.parquet as pq

    path = os.path.join(results, "records.parquet")
    if not os.path.isfile(path):
        raise FlowclipError(f"{results}: no records.parquet (not a flowclip score folder, or it scored no records)")
    rows = pq.read_table(path).to_pylist()
    mine = [r for r in rows if r["benchmark"] == benchmark and r["scorer"] == scorer and r["control"] == "real"]
    if not mine:
        have = sorted({(r["benchmark"], r["scorer"]) for r in rows})
        raise FlowclipError(f"{path}: no rows of benchmark {benchmark!r} and scorer {scorer!r} (has {have[:8]})")
    bad = next((r for r in mine if len(r["scores"]) != 4 or r["gold"] is not None), None)
    if bad is not None:
        raise FlowclipError(
            f"{path}: record {bad['record_id']!r} of {benchmark} is not a 2x2 group; only groups export"
        )
    s = np.array([r["scores"] for r in mine], np.float32).reshape(-1, 2, 2)
    return [str(r["record_id"]) for r in mine], s


def _cell(x: np.float32) -> str:
    return repr(float(x))  # the float32's exact value, shortest round trip


def table(fmt: str, ids: list[str], s: np.ndarray) -> list[list[str]]:
    """The CSV rows (header first) of a CSV format; s [n, image, caption]."""
    if fmt == "c0_i0":
        head, cells = ["id", "c0_i0", "c0_i1", "c1_i0", "c1_i1"], (s[:, 0, 0], s[:, 1, 0], s[:, 0, 1], s[:, 1, 1])
    elif fmt == "vismin-csv":  # record ids are "<category>/<id>" (datasets/vismin.py)
        head, cells = ["id", "T0_I0", "T0_I1", "T1_I0", "T1_I1"], (s[:, 0, 0], s[:, 1, 0], s[:, 0, 1], s[:, 1, 1])
        split = [rid.rpartition("/") for rid in ids]
        rows = [[own, *map(_cell, vals), cat] for (cat, _, own), *vals in zip(split, *cells)]
        return [[*head, "category"], *rows]
    else:
        raise ValueError(fmt)
    return [head] + [[rid, *map(_cell, vals)] for rid, *vals in zip(ids, *cells)]


def by_position(ids: list[str], s: np.ndarray) -> np.ndarray:
    """naturalbench-npy: the groups in index order, refused unless record i is group i."""
    off = next((i for i, rid in enumerate(ids) if rid != str(i)), None)
    if off is not None:
        raise FlowclipError(
            f"naturalbench-npy lays groups out by position, and record {off} is {ids[off]!r}: a group is missing "
            f"(left out at extract?) or these are not NaturalBench's records; export c0_i0 instead"
        )
    return s


def write_export(results: str, benchmark: str, scorer: str, fmt: str, folder: str) -> str:
    """The export file written into folder (a staged output); its path."""
    from ..outputs import atomic_write, write_csv

    if fmt not in FORMATS:
        raise FlowclipError(f"--format {fmt}: unknown; one of {', '.join(FORMATS)}")
    ids, s = group_scores(results, benchmark, scorer)
    path = os.path.join(folder, FORMATS[fmt])
    if fmt == "naturalbench-npy":
        arr = by_position(ids, s)
        atomic_write(path, lambda tmp: np.save(open(tmp, "wb"), arr))
    else:
        write_csv(path, table(fmt, ids, s))
    return path
