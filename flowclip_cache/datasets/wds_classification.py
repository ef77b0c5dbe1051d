"""A zero-shot classification set in CLIP_benchmark's webdataset layout (its
`clip-benchmark/wds_<name>` sets), images read in place from the shards (datasets/_wds.py)."""

from ._wds import OPTIONS, build_classification
from .base import Benchmark, Scoring

BENCHMARK = Benchmark(
    name="wds-classification",
    title="Zero-shot classification, CLIP_benchmark webdataset layout",
    kind="classification",
    build=build_classification,
    scoring=Scoring(task="classification", recall_at=(1, 5)),
    task_name="wds-{dataset}",
    reads_urls=True,
    options={**OPTIONS, "templates": "templates with {c}, separated by '|' (default: the set's templates file)"},
)
