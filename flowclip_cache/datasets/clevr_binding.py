"""CLEVR two-object binding (LABCLIP): a headerless CSV of filename, obj1, attr1, obj2,
attr2. Gold "{attr1} {obj1} and {attr2} {obj2}", foil with the attributes swapped.
Pairs whose two captions are equivalent (same attribute, or same object) are kept,
flagged `equivalent`, and left out of the official score."""

import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, read_csv, write_records


def build(source: str, out: str, errors: RowErrors, csv_name: str = "") -> BuildReport:
    return build_pairs(source, out, errors, csv_name or "clevr_binding.csv", "clevr-binding")


def build_pairs(source: str, out: str, errors: RowErrors, csv_name: str, name: str) -> BuildReport:
    """LABCLIP's CSV (a file, or csv_name in a folder) as the manifest of benchmark `name`."""
    path = source if os.path.isfile(source) else os.path.join(source, csv_name)
    rows = []
    for line, rec in read_csv(path, header=False):
        if len(rec) != 5 or not all(x.strip() for x in rec):
            errors(path, f"line {line}", "expected 5 non-empty fields: filename, obj1, attr1, obj2, attr2")
            continue
        fn, o1, a1, o2, a2 = (x.strip() for x in rec)
        gold, foil = f"{a1} {o1} and {a2} {o2}", f"{a2} {o1} and {a1} {o2}"
        rows.append(
            {
                "record_id": f"clevr/{line}",
                "image": fn,
                "captions": [gold, foil],
                "gold": 0,
                "equivalent": a1 == a2 or o1 == o2 or gold == foil,
            }
        )
    eq = sum(r["equivalent"] for r in rows)
    report = BuildReport(
        len(rows), len({r["image"] for r in rows}), {"equivalent": eq, "scored": len(rows) - eq}, errors.skipped
    )
    return write_records(out, rows, "candidates", name, report)


BENCHMARK = Benchmark(
    name="clevr-binding",
    title="CLEVR two-object binding",
    kind="candidates",
    build=build,
    scoring=Scoring(
        task="pairwise", tie_rule="correct", exclude_column="equivalent", joins=(("binding7", ""), ("all11", ""))
    ),
    options={"csv_name": "file name inside --source when it is a folder"},
)
