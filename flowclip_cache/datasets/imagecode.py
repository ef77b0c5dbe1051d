"""ImageCoDe (McGill-NLP/imagecode; Krojer et al., ACL 2022): a description chooses its
image among the ten of a set (video frames or static pictures). data/valid_data.json
maps each set's folder to {image index: description}; the images are
<set>/img<index>.jpg under the image root (the official code globs *.jpg and sorts by
the number after "img"). Read as baselines/clip/zero_shot.py reads it: the description
stripped, a set named "open-images..." static, every other set video. 1,039 sets and
2,302 descriptions in the validation file (1,872 video, 430 static). The test file has
no labels: it cannot be scored, and the converter says so.

Score: accuracy, overall (the headline, as vl_compo reports it) and per video/static.
Ties: the official ranking is numpy's argsort of the negated similarities, which for
ten candidates keeps index order among equals: the lowest-numbered tied image wins
(tie rule "first")."""

import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, load_json, write_records

SET_SIZE = 10


def build(source: str, out: str, errors: RowErrors, file: str = "valid_data.json") -> BuildReport:
    path = file if os.path.isabs(file) else os.path.join(source, file)
    data = load_json(path)
    if not isinstance(data, dict) or any(isinstance(v, list) for v in data.values()):
        raise_unlabelled(path, data)
    rows, counts = [], {"video": 0, "static": 0}
    for folder, described in data.items():
        if not isinstance(described, dict):
            errors(path, f"set {folder!r}", "expected {image index: description}")
            continue
        kind = "static" if "open-images" in folder else "video"
        images = [f"{folder}/img{i}.jpg" for i in range(SET_SIZE)]
        for idx, text in described.items():
            where = f"set {folder!r}, image {idx!r}"
            if not str(idx).isdigit() or not 0 <= int(idx) < SET_SIZE:
                errors(path, where, f"image index is not one of 0-{SET_SIZE - 1}")
                continue
            if not isinstance(text, str) or not text.strip():
                errors(path, where, "empty or non-text description")
                continue
            rows.append(
                {"record_id": f"{folder}/{idx}", "images": images, "caption": text.strip(), "gold": int(idx),
                 "set": folder, "split": kind}
            )  # fmt: skip
            counts[kind] += 1
    report = BuildReport(len(rows), len({p for r in rows for p in r["images"]}), counts, errors.skipped)
    return write_records(out, rows, "image_candidates", "imagecode", report)


def raise_unlabelled(path: str, data) -> None:
    from ..errors import ManifestError

    if isinstance(data, dict):
        raise ManifestError(
            f"{path}: sets holding lists of descriptions with no image index (the test file): ImageCoDe's test "
            f"labels are not public, so it cannot be scored; use data/valid_data.json"
        )
    raise ManifestError(f"{path}: expected {{set folder: {{image index: description}}}}")


BENCHMARK = Benchmark(
    name="imagecode",
    title="ImageCoDe validation (2,302 descriptions, 10 images each)",
    kind="image_candidates",
    build=build,
    scoring=Scoring(task="image_candidates", tie_rule="first", report_by=("split",)),
    options={"file": "the annotation file under --source (default valid_data.json)"},
)
