"""COCO 5K retrieval: the Karpathy test split (5,000 images / 25,000 captions) from dataset_coco.json (or the BLIP-style
test list). Image->text and text->image Recall@1/5/10; a query counts if any of its
positives is in the top k."""
import os

from ._karpathy import karpathy_images
from .base import Benchmark, BuildReport, RowErrors, Scoring, write_records


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    path = source if os.path.isfile(source) else os.path.join(source, "dataset_coco.json")
    items = karpathy_images(path, {"test"}, errors)
    rows = [{"image": image, "captions": caps} for image, caps, _ in items]
    report = BuildReport(len(rows), len(rows), {"captions": sum(len(r["captions"]) for r in rows)}, errors.skipped)
    return write_records(out, rows, "retrieval", "coco-retrieval", report)


BENCHMARK = Benchmark(
    name="coco-retrieval", title="COCO 5K retrieval", kind="retrieval", build=build,
    scoring=Scoring(task="retrieval", recall_at=(1, 5, 10)))
