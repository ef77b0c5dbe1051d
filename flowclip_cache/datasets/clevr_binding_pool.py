"""The CLEVR two-object pool (the paper's §4.3: "the larger CLEVR evaluation pool contains
4,449 unambiguous pairs"): LABCLIP's whole two-object set, `output_2obj.csv` of its 2obj
download (jayn2u/CLIP-not-BoW-unimodally, data_loading/clevr.py, CLEVRLoader.FILE_IDS
"2obj"), of which clevr-binding's combination split is a part. The same rows, captions and
rule as clevr-binding (clevr_binding.py), under a name of its own so that both are scored
side by side; the pool joins no cross-task mean (the paper reports it in the text only)."""

from .base import Benchmark, BuildReport, RowErrors, Scoring
from .clevr_binding import build_pairs


def build(source: str, out: str, errors: RowErrors, csv_name: str = "") -> BuildReport:
    return build_pairs(source, out, errors, csv_name or "output_2obj.csv", "clevr-binding-pool")


BENCHMARK = Benchmark(
    name="clevr-binding-pool",
    title="CLEVR two-object pool (4,449 pairs)",
    kind="candidates",
    build=build,
    scoring=Scoring(task="pairwise", tie_rule="correct", exclude_column="equivalent"),
    options={"csv_name": "file name inside --source when it is a folder (default output_2obj.csv)"},
)
