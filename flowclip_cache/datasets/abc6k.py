"""ABC-6K (weixi-feng/Structured-Diffusion-Guidance): a text file of alternating lines,
a COCO caption then the same caption with two colour words swapped. The file has
3,217 pairs; 100 are identical after normalisation (the swap changed only spacing):
kept, flagged ``identical`` so that score reports them as ties. Images are found by
looking each original caption up in COCO's caption annotations
(captions_train2014.json / captions_val2014.json); pairs whose image is not found are
reported, not silently dropped. The paper reports 3,213 pairs without saying how."""

import os
import re

from ..errors import ManifestError
from .base import Benchmark, BuildReport, RowErrors, Scoring, load_json, read_text, write_records


def normalise(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def coco_caption_index(paths: list[str]) -> dict[str, str]:
    """normalised caption -> image path relative to the COCO root (split/file_name);
    where a caption belongs to several images, the lowest image id wins."""
    index: dict[str, tuple[int, str]] = {}
    for path in paths:
        data = load_json(path)
        split = "train2014" if "train" in os.path.basename(path) else "val2014"
        files = {im["id"]: f"{split}/{im['file_name']}" for im in data["images"]}
        for ann in data["annotations"]:
            key = normalise(ann["caption"])
            cand = (ann["image_id"], files[ann["image_id"]])
            if key not in index or cand < index[key]:
                index[key] = cand
    return {k: v[1] for k, v in index.items()}


def build(source: str, out: str, errors: RowErrors, coco_captions: str = "") -> BuildReport:
    path = source if os.path.isfile(source) else os.path.join(source, "ABC-6K.txt")
    lines = read_text(path).split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    if len(lines) % 2:
        errors(path, f"line {len(lines)}", "odd number of lines: the last caption has no swapped partner")
        lines = lines[:-1]
    caption_files = [p for p in coco_captions.split(",") if p]
    if not caption_files:
        raise ManifestError(
            "abc6k finds each pair's image through COCO's caption annotations: pass "
            "--option coco_captions=captions_train2014.json,captions_val2014.json"
        )
    index = coco_caption_index(caption_files)
    rows, not_found, identical = [], [], 0
    for i in range(0, len(lines), 2):
        gold, foil = lines[i].strip(), lines[i + 1].strip()
        if not gold or not foil:
            errors(path, f"line {i + 1}", "empty caption")
            continue
        same = normalise(gold) == normalise(foil)
        identical += same
        image = index.get(normalise(gold))
        if image is None:
            not_found.append((path, f"line {i + 1}", f"no COCO image has the caption {gold!r}"))
            continue
        rows.append(
            {
                "record_id": f"abc/{i // 2}",
                "image": image,
                "captions": [gold, foil],
                "gold": 0,
                "identical": same,
                "line": i + 1,
            }
        )
    report = BuildReport(
        len(rows),
        len({r["image"] for r in rows}),
        {"pairs_in_file": len(lines) // 2, "image_not_found": len(not_found), "identical_in_file": identical},
        errors.skipped + not_found,
    )
    return write_records(out, rows, "candidates", "abc6k", report)


BENCHMARK = Benchmark(
    name="abc6k",
    title="ABC-6K colour swaps",
    kind="candidates",
    build=build,
    scoring=Scoring(
        task="pairwise",
        tie_rule="wrong",
        report_by=("identical",),
        joins=(("binding7", ""), ("all11", ""), ("controls6", ""), ("binding5", "")),
    ),
    options={"coco_captions": "comma-separated COCO caption JSONs (captions_train2014.json,captions_val2014.json)"},
)
