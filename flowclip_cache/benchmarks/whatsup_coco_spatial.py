"""What's Up COCO-Spatial: coco_qa_one_obj.json and coco_qa_two_obj.json, JSON lists of
[image_id, gold, foil]; images val2017/<id, 12 digits>.jpg. Official score: the
unweighted mean of the one- and two-object subset accuracies."""
from ._whatsup import qa_rows
from .base import Benchmark, BuildReport, RowErrors, Scoring, write_records

FILES = {"one": "coco_qa_one_obj.json", "two": "coco_qa_two_obj.json"}


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    rows = qa_rows(source, FILES, lambda i: f"val2017/{str(i).zfill(12)}.jpg", errors, "coco-spatial/")
    counts = {s: sum(r["subset"] == s for r in rows) for s in FILES}
    return write_records(out, rows, "candidates", "whatsup-coco-spatial",
                         BuildReport(len(rows), len({r["image"] for r in rows}), counts, errors.skipped))


BENCHMARK = Benchmark(
    name="whatsup-coco-spatial", title="What's Up COCO-Spatial", kind="candidates", build=build,
    scoring=Scoring(task="pairwise", tie_rule="correct", aggregate="subset_mean", group_by="subset",
                    joins=(("binding7", ""), ("all11", ""), ("controls6", ""))))
