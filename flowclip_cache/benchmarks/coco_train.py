"""COCO Karpathy train+restval training records with full-caption hard negatives, from NegCLIP-style TSVs:
<source>/train_neg_clip.tsv (split train) and <source>/valid_neg_clip.tsv (split val).
For your own captions, make such records with `flowclip negatives`."""
import os

from ._negclip import negclip_rows
from .base import Benchmark, BuildReport, RowErrors, write_records


def build(source: str, out: str, errors: RowErrors, strip_prefix: str = "coco/") -> BuildReport:
    rows = []
    for name, split in (("train_neg_clip.tsv", "train"), ("valid_neg_clip.tsv", "val")):
        path = os.path.join(source, name)
        if os.path.exists(path):
            rows += negclip_rows(path, split, errors, "coco-train/", strip_prefix)
    counts = {s: sum(r["split"] == s for r in rows) for s in ("train", "val")}
    return write_records(out, rows, "training", "coco-train",
                         BuildReport(len(rows), len({r["image"] for r in rows}), counts, errors.skipped))


BENCHMARK = Benchmark(
    name="coco-train", title="COCO Karpathy train+restval (training)", kind="training", build=build, scoring=None,
    options={"strip_prefix": "prefix removed from filepath so paths are relative to --image-root (default 'coco/')"})
