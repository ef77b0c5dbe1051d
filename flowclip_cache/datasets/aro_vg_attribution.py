"""ARO VG-Attribution: visual_genome_attribution.json (as VG-Relation, with
`attributes`: a list of two). Official score: accuracy per attribute-pair class
"a0_a1", classes of fewer than 25 items dropped, macro mean."""

import os

from ._aro import vg_items
from .base import Benchmark, BuildReport, RowErrors, Scoring, write_records


def _pair(rec):
    a = rec.get("attributes")
    return f"{a[0]}_{a[1]}" if isinstance(a, list) and len(a) == 2 else None


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    path = source if os.path.isfile(source) else os.path.join(source, "visual_genome_attribution.json")
    rows = vg_items(path, errors, _pair)
    for r in rows:
        r["attribute_pair"] = r.pop("class")
    report = BuildReport(
        len(rows),
        len({r["image"] for r in rows}),
        {"attribute_pairs": len({r["attribute_pair"] for r in rows})},
        errors.skipped,
    )
    return write_records(out, rows, "candidates", "aro-vg-attribution", report)


BENCHMARK = Benchmark(
    name="aro-vg-attribution",
    title="ARO VG-Attribution",
    kind="candidates",
    build=build,
    scoring=Scoring(
        task="pairwise",
        tie_rule="wrong",
        aggregate="macro",
        group_by="attribute_pair",
        min_group=25,
        joins=(("aro", ""), ("all11", "")),
    ),
)
