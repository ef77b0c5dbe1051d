"""SPEC (wjpoom/SPEC; Peng et al., CVPR 2024): six subsets (absolute_size,
relative_size, absolute_spatial, relative_spatial, existence, count), each a folder
holding image2text.json and text2image.json: lists of {query, keys, label}, image paths
relative to the subset's folder (named <subset>/<path> under the image root, the data
root). Read as spec/dataset.py's Image2TextDataset / Text2ImageDataset read them.

Score: accuracy per subset and the unweighted mean over subsets, per direction, as
spec/eval.py averages `BaseWrapper.evaluate`'s accuracies; a prediction is the argmax of
the candidates' scores (torch.argmax: the first of tied candidates wins, tie rule "first")."""

import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, load_json, write_records

SUBSETS = ("absolute_size", "relative_size", "absolute_spatial", "relative_spatial", "existence", "count")


def build_direction(source: str, out: str, errors: RowErrors, direction: str) -> BuildReport:
    i2t = direction == "i2t"
    fname = "image2text.json" if i2t else "text2image.json"
    rows: list[dict] = []
    counts: dict[str, int] = {}
    missing: list[str] = []
    for subset in SUBSETS:
        path = os.path.join(source, subset, fname)
        if not os.path.exists(path):
            missing.append(subset)
            continue
        loaded = load_json(path)
        data: list = loaded if isinstance(loaded, list) else []
        if not isinstance(loaded, list):
            errors(path, "top level", "expected a list of {query, keys, label}")
        n = 0
        for k, rec in enumerate(data):
            try:
                query, keys, label = rec["query"], list(rec["keys"]), int(rec["label"])
            except (KeyError, TypeError, ValueError) as e:
                errors(path, f"sample {k}", f"expected {{query, keys, label}} ({type(e).__name__}: {e})")
                continue
            if not 0 <= label < len(keys) or not all(isinstance(x, str) and x for x in [query, *keys]):
                errors(path, f"sample {k}", "label outside its keys, or an empty query or key")
                continue
            rid = f"{subset}/{k}"
            if i2t:
                rows.append({"record_id": rid, "image": f"{subset}/{query}", "captions": keys, "gold": label,
                             "subset": subset})  # fmt: skip
            else:
                rows.append({"record_id": rid, "images": [f"{subset}/{p}" for p in keys], "caption": query,
                             "gold": label, "subset": subset})  # fmt: skip
            n += 1
        counts[subset] = n
    images = {r["image"] for r in rows} if i2t else {p for r in rows for p in r["images"]}
    report = BuildReport(len(rows), len(images), counts, errors.skipped)
    if missing:
        report.notes.append(f"no {fname} for {', '.join(missing)}: left out")
    name = f"spec-{direction}"
    return write_records(out, rows, "candidates" if i2t else "image_candidates", name, report)


def benchmark(direction: str) -> Benchmark:
    i2t = direction == "i2t"
    return Benchmark(
        name=f"spec-{direction}",
        title=f"SPEC {'image-to-text' if i2t else 'text-to-image'} (6 subsets)",
        kind="candidates" if i2t else "image_candidates",
        build=lambda source, out, errors: build_direction(source, out, errors, direction),
        scoring=Scoring(
            task="candidates" if i2t else "image_candidates",
            tie_rule="first",
            aggregate="subset_mean",
            group_by="subset",
        ),
    )
