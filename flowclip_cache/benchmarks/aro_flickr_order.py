"""ARO Flickr30k-Order: as COCO-Order, from flickr30k_test.json (Karpathy test split)."""
from ._aro import karpathy_file, order_rows
from .base import Benchmark, BuildReport, RowErrors, Scoring, write_records


def build(source: str, out: str, errors: RowErrors, seed: str = "0", tagger=None) -> BuildReport:
    rows = order_rows(karpathy_file(source, "flickr30k_test.json"), errors, tagger, int(seed), "flickr-order/")
    report = BuildReport(len(rows), len({r["image"] for r in rows}), {}, errors.skipped)
    return write_records(out, rows, "candidates", "aro-flickr-order", report, {"seed": int(seed)})


BENCHMARK = Benchmark(
    name="aro-flickr-order", title="ARO Flickr30k-Order", kind="candidates", build=build,
    scoring=Scoring(task="candidates", tie_rule="correct", joins=(("aro", ""), ("all11", ""))),
    options={"seed": "seed of the shuffles (default 0)"})
