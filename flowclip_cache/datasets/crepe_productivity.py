"""CREPE productivity (RAIVNLab/CREPE): for each foil type (atom, swap, negate) and
complexity 4-12, <source>/<type>/prod_vg_hard_negs_<type>_complexity_<n>.csv with
columns image_id, caption, x, y, width, height, hard_negs (a Python-literal list,
parsed with ast.literal_eval, never eval). Images: Visual Genome <image_id>.jpg (one
flat folder; link VG_100K and VG_100K_2 into it), cropped to (x, y, width, height).
Score: Recall@1 (and @3/5/10) of the gold among [caption] + hard_negs, per foil type
and complexity. Ties: the official code ranks with torch.argsort(logits, descending=True),
which keeps the gold (index 0) ahead of foils it ties up to 16 candidates (tie rule
"first"; flowclip keeps it first above 16 too, where argsort does not always). The official
code reports per-file numbers only; the pooled headline and per-foil-type figures are
flowclip's pooling of the same records."""

import ast
import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, read_csv, write_records

FOIL_TYPES = ("atom", "swap", "negate")
COMPLEXITIES = range(4, 13)


def crepe_row(rec, path: str, line: int, negs_key: str, errors: RowErrors, allow_none: bool = False):
    """(image_id, caption, [x, y, w, h], negatives) of one CREPE CSV row, or None (reported):
    the negatives a Python-literal list read with ast.literal_eval (never eval); an empty one
    only where allow_none (systematicity's valid_hard_negs may hold none)."""
    if not isinstance(rec, dict):
        errors(path, f"line {line}", "wrong number of fields")
        return None
    try:
        negs = ast.literal_eval(rec[negs_key])
        box = [float(rec[k]) for k in ("x", "y", "width", "height")]
        caption, image = rec["caption"].strip(), rec["image_id"].strip()
    except (KeyError, ValueError, SyntaxError) as e:
        errors(path, f"line {line}", f"unreadable row ({type(e).__name__}: {e})")
        return None
    if not caption or not image or not isinstance(negs, list) or not (negs or allow_none):
        errors(path, f"line {line}", f"empty caption, image_id or {negs_key}")
        return None
    if not all(isinstance(x, str) and x.strip() for x in negs):
        errors(path, f"line {line}", f"{negs_key} holds an empty or non-text caption")
        return None
    return image, caption, box, negs


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    rows, counts = [], {}
    for foil in FOIL_TYPES:
        for n in COMPLEXITIES:
            path = os.path.join(source, foil, f"prod_vg_hard_negs_{foil}_complexity_{n}.csv")
            if not os.path.exists(path):
                continue
            got = 0
            for line, rec in read_csv(path):
                row = crepe_row(rec, path, line, "hard_negs", errors)
                if row is None:
                    continue
                image, caption, box, negs = row
                rows.append(
                    {
                        "record_id": f"{foil}/{n}/{line}",
                        "image": f"{image}.jpg",
                        "crop": box,
                        "captions": [caption] + negs,
                        "gold": 0,
                        "foil_type": foil,
                        "complexity": n,
                        "foil_complexity": f"{foil}/{n:02d}",
                    }
                )
                got += 1
            counts[f"{foil}/{n}"] = got
    if not counts:
        errors(source, "-", "no prod_vg_hard_negs_<type>_complexity_<n>.csv files found")
    return write_records(
        out,
        rows,
        "candidates",
        "crepe-productivity",
        BuildReport(len(rows), len({r["image"] for r in rows}), counts, errors.skipped),
    )


BENCHMARK = Benchmark(
    name="crepe-productivity",
    title="CREPE productivity",
    kind="candidates",
    build=build,
    scoring=Scoring(
        task="candidates",
        tie_rule="first",
        aggregate="mean",
        group_by="foil_type",
        report_by=("complexity", "foil_complexity"),
        recall_at=(1, 3, 5, 10),
    ),
)
