"""Winoground (facebook/winoground on the Hugging Face hub; Thrush et al., CVPR 2022):
400 groups of two images and two captions made of the same words. Read from the user's
copy: the hub repository's data/examples.jsonl (images from data/images.zip, unzipped:
<image_0>.png under the image root), or a copy `datasets` saved or converted to Parquet,
whose embedded images go to images_out as winoground-<row>-<0|1> (names flowclip makes).

Score: text, image and group, Winoground's text_correct / image_correct / group_correct
(strict `>`: a tie is wrong); the headline is group, as vl_compo reports it. Breakdown
by collapsed_tag (Object, Relation, Both) and by secondary_tag (Symbolic, Pragmatics,
Series, ...; a record may hold several, comma-separated, and counts under each)."""

import os

from ._groups import build_groups
from .base import Benchmark, BuildReport, RowErrors, Scoring, plain_id, read_text, write_records

WHAT = "Winoground (facebook/winoground)"


def _tags(value) -> list[str]:
    return [t.strip() for t in str(value or "").split(",") if t.strip()]


def _extra(rec: dict) -> dict:
    return {
        "collapsed_tag": str(rec.get("collapsed_tag", "")),
        "tag": str(rec.get("tag", "")),
        "secondary_tag": _tags(rec.get("secondary_tag")),
    }


def build(source: str, out: str, errors: RowErrors, images_out: str | None = None) -> BuildReport:
    jsonl = next(
        (p for p in (os.path.join(source, "data", "examples.jsonl"), os.path.join(source, "examples.jsonl"))
         if os.path.isfile(p)),
        None,
    )  # fmt: skip
    if jsonl is None:
        return build_groups(
            source, out, errors, name="winoground", what=WHAT, split="test", images_out=images_out,
            count_by="collapsed_tag", columns=("id", "image_0", "image_1", "caption_0", "caption_1"),
            row=lambda i, r: (r["id"], [r["image_0"], r["image_1"]], [r["caption_0"], r["caption_1"]], _extra(r)),
        )  # fmt: skip
    rows: list[dict] = []
    counts: dict[str, int] = {}
    for line_no, line in enumerate(read_text(jsonl).splitlines(), 1):
        if not line.strip():
            continue
        rec = load_json_line(jsonl, line_no, line, errors)
        if rec is None:
            continue
        missing = [k for k in ("id", "image_0", "image_1", "caption_0", "caption_1") if k not in rec]
        if missing:
            errors(jsonl, f"line {line_no}", f"missing key {missing[0]!r}")
            continue
        if not all(
            isinstance(rec[k], str) and rec[k].strip() for k in ("image_0", "image_1", "caption_0", "caption_1")
        ):
            errors(jsonl, f"line {line_no}", "image_0, image_1, caption_0 and caption_1 must be non-empty text")
            continue
        images = [f"{rec['image_0']}.png", f"{rec['image_1']}.png"]
        rid = plain_id(rec["id"], f"{jsonl}: line {line_no}")
        rows.append({"record_id": rid, "images": images, "captions": [rec["caption_0"], rec["caption_1"]],
                     **_extra(rec), "_at": f"{jsonl}: line {line_no}"})  # fmt: skip
        counts[rows[-1]["collapsed_tag"]] = counts.get(rows[-1]["collapsed_tag"], 0) + 1
    report = BuildReport(len(rows), len({p for r in rows for p in r["images"]}), counts, errors.skipped)
    report.notes.append("images: unzip data/images.zip; the folder holding ex_<id>_img_<k>.png is the image root")
    return write_records(out, rows, "groups", "winoground", report)


def load_json_line(path: str, line_no: int, line: str, errors: RowErrors):
    import json

    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        errors(path, f"line {line_no}", f"malformed JSON ({e.msg})")
        return None
    if not isinstance(rec, dict):
        errors(path, f"line {line_no}", "not a JSON object")
        return None
    return rec


BENCHMARK = Benchmark(
    name="winoground",
    title="Winoground (400 groups; text, image, group)",
    kind="groups",
    build=build,
    scoring=Scoring(task="groups", tie_rule="wrong", report_by=("collapsed_tag", "secondary_tag")),
    options={"images_out": "a new folder for the images a datasets copy embeds (then extract's --image-root)"},
)
