"""Cola multi-object (arijitray1993/COLA; Ray et al., NeurIPS 2023):
data/COLA_multiobjects_matching_benchmark.json, a list of [image_1, caption_1, image_2,
caption_2] (210 records); images are URLs of Visual Genome / GQA images, named here by
their last two path parts (vg_gqa_images/<id>.jpg) under the image root.

Score: scripts/eval.py's `ColaMultiObjAcc` on preds[image, caption]: image_correct =
im0_c0 > im1_c0 and im1_c1 > im0_c1 (each caption prefers its own image, strict): the
image score of a group, the headline. Text and group are reported beside it."""

import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, load_json, write_records

FILE = "COLA_multiobjects_matching_benchmark.json"


def image_path(url: str) -> str:
    return "/".join(url.rstrip("/").split("/")[-2:])


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    path = source if os.path.isfile(source) else os.path.join(source, FILE)
    rows = []
    for i, rec in enumerate(load_json(path)):
        if not (isinstance(rec, list) and len(rec) == 4 and all(isinstance(x, str) and x.strip() for x in rec)):
            errors(path, f"record {i}", "expected [image_1, caption_1, image_2, caption_2], all text")
            continue
        im1, c1, im2, c2 = rec
        rows.append({"record_id": str(i), "images": [image_path(im1), image_path(im2)], "captions": [c1, c2]})
    report = BuildReport(len(rows), len({p for r in rows for p in r["images"]}), {}, errors.skipped)
    report.notes.append("images: Visual Genome / GQA, as vg_gqa_images/<id>.jpg under the image root")
    return write_records(out, rows, "groups", "cola-multiobj", report)


BENCHMARK = Benchmark(
    name="cola-multiobj",
    title="Cola multi-object (210 records; image-direction accuracy)",
    kind="groups",
    build=build,
    scoring=Scoring(task="groups", tie_rule="wrong", headline_metric="image"),
)
