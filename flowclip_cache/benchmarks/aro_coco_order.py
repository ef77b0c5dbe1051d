"""ARO COCO-Order: built from the Karpathy test split (coco_karpathy_test.json: a list
of {image, caption: [5]}), each caption with ARO's four shuffles; precision@1 over the
five candidates. Tagging needs spaCy's en_core_web_sm (optional dependency)."""
from ._aro import karpathy_file, order_rows
from .base import Benchmark, BuildReport, RowErrors, Scoring, write_records


def build(source: str, out: str, errors: RowErrors, seed: str = "0", tagger=None) -> BuildReport:
    rows = order_rows(karpathy_file(source, "coco_karpathy_test.json"), errors, tagger, int(seed), "coco-order/")
    report = BuildReport(len(rows), len({r["image"] for r in rows}), {}, errors.skipped)
    return write_records(out, rows, "candidates", "aro-coco-order", report, {"seed": int(seed)})


BENCHMARK = Benchmark(
    name="aro-coco-order", title="ARO COCO-Order", kind="candidates", build=build,
    scoring=Scoring(task="candidates", tie_rule="correct", joins=(("aro", ""), ("all11", ""))),
    options={"seed": "seed of the shuffles (default 0)"})
