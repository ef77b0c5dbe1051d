"""COCO Karpathy train+restval training records with full-caption hard negatives.

Two sources: NegCLIP's released TSVs (<source>/train_neg_clip.tsv, valid_neg_clip.tsv:
its own negatives), or Karpathy's dataset_coco.json (train + restval -> split train,
val -> split val; 113,287 + 5,000 images), each caption given flowclip's NegCLIP-style
full-caption negatives (`flowclip negatives` kinds: swap-obj, swap-att, shuffle-bigram)."""

import os

from ._karpathy import karpathy_images
from ._negclip import training_benchmark
from .base import Benchmark, BuildReport, RowErrors, write_records

_TSV = training_benchmark("coco-train", "COCO Karpathy train+restval (training)", "coco/")


def build(
    source: str,
    out: str,
    errors: RowErrors,
    strip_prefix: str = "coco/",
    kinds: str = "swap-obj,swap-att,shuffle-bigram",
    seed: str = "0",
) -> BuildReport:
    karpathy = source if source.endswith(".json") else os.path.join(source, "dataset_coco.json")
    if not os.path.isfile(karpathy):
        return _TSV.build(source, out, errors, strip_prefix=strip_prefix)
    from ..negatives import build_training

    items = karpathy_images(karpathy, {"train", "restval", "val"}, errors)
    caps = [
        {
            "image": image,
            "caption": c,
            "split": "val" if split == "val" else "train",
            "record_id": f"coco-train/{image}/{j}",
        }
        for image, cs, split in items
        for j, c in enumerate(cs)
    ]
    rows, missing = build_training(caps, kinds.split(","), int(seed))
    counts = {s: sum(r["split"] == s for r in rows) for s in ("train", "val")}
    counts["records_without_any_negative"] = len(caps) - len(rows)
    report = BuildReport(len(rows), len({r["image"] for r in rows}), counts, errors.skipped)
    return write_records(out, rows, "training", "coco-train", report, {"negatives": kinds, "seed": int(seed)})


BENCHMARK = Benchmark(
    name="coco-train",
    title=_TSV.title,
    kind="training",
    build=build,
    scoring=None,
    options={
        **_TSV.options,
        "kinds": "negative kinds for dataset_coco.json (default swap-obj,swap-att,shuffle-bigram)",
        "seed": "seed of the negatives (default 0)",
    },
)
