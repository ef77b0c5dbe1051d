"""ARO VG-Relation: visual_genome_relation.json (image_path, bbox_x/y/w/h, true_caption,
false_caption, relation_name); images cropped to the bbox. Official score: accuracy per
relation, macro mean over relations not in the evaluation notebook's excluded list
(pass it as --option excluded_relations=.../vgr_excluded_relations.json)."""

import os

from ._aro import vg_items
from .base import Benchmark, BuildReport, RowErrors, Scoring, load_json, write_records


def build(source: str, out: str, errors: RowErrors, excluded_relations: str = "") -> BuildReport:
    path = source if os.path.isfile(source) else os.path.join(source, "visual_genome_relation.json")
    rows = vg_items(path, errors, lambda r: r.get("relation_name"))
    excluded = set(load_json(excluded_relations)) if excluded_relations else set()
    for r in rows:
        r["relation"] = r.pop("class")
        r["excluded"] = r["relation"] in excluded
    report = BuildReport(
        len(rows),
        len({r["image"] for r in rows}),
        {"relations": len({r["relation"] for r in rows}), "excluded_records": sum(r["excluded"] for r in rows)},
        errors.skipped,
    )
    if not excluded_relations:
        report.notes.append("no excluded_relations file: every relation enters the macro mean")
    return write_records(out, rows, "candidates", "aro-vg-relation", report)


BENCHMARK = Benchmark(
    name="aro-vg-relation",
    title="ARO VG-Relation",
    kind="candidates",
    build=build,
    scoring=Scoring(
        task="pairwise",
        tie_rule="wrong",
        aggregate="macro",
        group_by="relation",
        exclude_column="excluded",
        joins=(("aro", ""), ("all11", "")),
    ),
    options={"excluded_relations": "the relation list the official notebook drops (vgr_excluded_relations.json)"},
)
