"""An image-text retrieval set in CLIP_benchmark's webdataset layout (`.txt`: one caption
a line), images read in place from the shards (datasets/_wds.py); recall@k decided as
CLIP_benchmark's zeroshot_retrieval decides it (torch.topk)."""

from ._wds import OPTIONS, build_retrieval
from .base import Benchmark, Scoring

BENCHMARK = Benchmark(
    name="wds-retrieval",
    title="Image-text retrieval, CLIP_benchmark webdataset layout",
    kind="retrieval",
    build=build_retrieval,
    scoring=Scoring(task="retrieval", tie_rule="topk", recall_at=(1, 5, 10)),
    task_name="wds-{dataset}",
    reads_urls=True,
    options=OPTIONS,
)
