"""What's Up GQA-Spatial: vg_qa_one_obj.json and vg_qa_two_obj.json ([image_id, gold,
foil]); images vg_images/<id>.jpg. Score: unweighted mean of the two subsets."""
from ._whatsup import qa_rows
from .base import Benchmark, BuildReport, RowErrors, Scoring, write_records

FILES = {"one": "vg_qa_one_obj.json", "two": "vg_qa_two_obj.json"}


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    rows = qa_rows(source, FILES, lambda i: f"vg_images/{i}.jpg", errors, "gqa-spatial/")
    counts = {s: sum(r["subset"] == s for r in rows) for s in FILES}
    return write_records(out, rows, "candidates", "whatsup-gqa-spatial",
                         BuildReport(len(rows), len({r["image"] for r in rows}), counts, errors.skipped))


BENCHMARK = Benchmark(
    name="whatsup-gqa-spatial", title="What's Up GQA-Spatial", kind="candidates", build=build,
    scoring=Scoring(task="pairwise", tie_rule="correct", aggregate="subset_mean", group_by="subset",
                    joins=(("binding7", ""), ("all11", ""), ("controls6", ""))))
