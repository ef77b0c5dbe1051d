"""CounterCurate (HanSolo9682/CounterCurate; Zhang et al., ACL 2024 Findings): Flickr30k
images beside their counterfactuals (an object moved left/right or up/down, generated),
each with its caption. Read from the user's clone of the Hugging Face dataset
HanSolo9682/Flickr30k-Counterfactuals: its clip_sample_data/ folder, every test_*.csv in
it a subset (test_left_right_.csv: left_right), tab-separated with the columns
benchmark/CLIP_test_position.py reads: captions, images, neg_captions, neg_images. The
README says the files' image paths are relative to the authors' folders (../../train_data):
option `image_prefix` names the leading part to remove so that the rest is a path under
extract's --image-root (rows not under it refused).

Score, as benchmark/CLIP_test_position.py `test` computes it: each row gives two
single-image decisions, the image choosing its caption over the negative caption
(`text_probs[0] > text_probs[1]`) and the negative image choosing the negative caption
(`text_probs[0] < text_probs[1]`), strict (the softmax keeps the order of the scores; a
tie is wrong); the score is their count over twice the rows, pooled. Here each decision
is its own record (a row's two records share its id with /pos, /neg). The counting test
is countercurate_counting.py."""

import os
import re

from .base import (
    Benchmark,
    BuildReport,
    ManifestError,
    RowErrors,
    Scoring,
    plain_id,
    read_csv,
    strip_prefix,
    write_records,
)

COLUMNS = ("captions", "images", "neg_captions", "neg_images")


def _rows(path: str, subset: str, prefix: str, errors: RowErrors) -> list[dict]:
    out = []
    for line, rec in read_csv(path, delimiter="\t"):
        where = f"line {line}"
        if not isinstance(rec, dict) or any(not str(rec.get(c, "")).strip() for c in COLUMNS):
            errors(path, where, f"expected non-empty {', '.join(COLUMNS)} (tab-separated)")
            continue
        cap, img, neg_cap, neg_img = (rec[c] for c in COLUMNS)
        images = strip_prefix([img, neg_img], prefix, path, where, errors)
        if images is None:
            continue
        img, neg_img = images
        at = f"{path}: {where}"
        out += [
            {"record_id": f"{subset}/{line}/pos", "image": img, "captions": [cap, neg_cap], "gold": 0,
             "subset": subset, "_at": at},
            {"record_id": f"{subset}/{line}/neg", "image": neg_img, "captions": [cap, neg_cap], "gold": 1,
             "subset": subset, "_at": at},
        ]  # fmt: skip
    return out


def build(source: str, out: str, errors: RowErrors, image_prefix: str = "") -> BuildReport:
    folder = next((d for d in (os.path.join(source, "clip_sample_data"), source) if os.path.isdir(d)), source)
    files = sorted(f for f in os.listdir(folder) if re.fullmatch(r"test_.*\.csv", f)) if os.path.isdir(folder) else []
    if not files:
        raise ManifestError(f"{source}: no test_*.csv here or in clip_sample_data/ (clone Flickr30k-Counterfactuals)")
    rows, counts = [], {}
    for f in files:
        subset = plain_id(f[len("test_") : -len(".csv")].strip("_") or "test", os.path.join(folder, f))
        mine = _rows(os.path.join(folder, f), subset, image_prefix, errors)
        rows += mine
        counts[subset] = len(mine) // 2
    report = BuildReport(len(rows), len({r["image"] for r in rows}), counts, errors.skipped)
    report.notes.append(f"rows per subset (each two single-image records): {counts}")
    return write_records(out, rows, "candidates", "countercurate", report)


BENCHMARK = Benchmark(
    name="countercurate",
    title="CounterCurate positions (Flickr30k counterfactuals; single-image decisions)",
    kind="candidates",
    build=build,
    scoring=Scoring(task="candidates", tie_rule="wrong", report_by=("subset",)),
    options={"image_prefix": "the leading part of the files' image paths to remove (the rest: under --image-root)"},
)
