"""Karpathy-split files in either common form: Karpathy's dataset_*.json
({"images": [{filepath?, filename, split, sentences: [{raw}]}]}) or the BLIP/ARO test
lists ([{image, caption: [...]}])."""

from __future__ import annotations

import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, load_json, write_records


def karpathy_images(path: str, splits: set[str], errors: RowErrors) -> list[tuple[str, list[str], str]]:
    """(image path, captions, split) for the images of the given splits."""
    data = load_json(path)
    out = []
    if isinstance(data, dict) and "images" in data:
        for i, im in enumerate(data["images"]):
            split = im.get("split", "")
            if split not in splits:
                continue
            image = "/".join(p for p in (im.get("filepath", ""), im.get("filename", "")) if p)
            caps = [s.get("raw", "").strip() for s in im.get("sentences", [])]
            if not image or not caps or not all(caps):
                errors(path, f"image {i}", "missing filename or an empty sentence")
                continue
            out.append((image, caps, split))
    elif isinstance(data, list):
        for i, ann in enumerate(data):
            listed = ann.get("caption") if isinstance(ann, dict) else None
            if (
                not isinstance(ann, dict)
                or not isinstance(ann.get("image"), str)
                or not isinstance(listed, list)
                or not listed
                or not all(isinstance(c, str) and c.strip() for c in listed)
            ):
                errors(path, f"item {i}", "expected {image, caption: [non-empty captions]}")
                continue
            out.append((ann["image"], [c.strip() for c in listed], "test"))
    else:
        errors(path, "-", "neither Karpathy's {images: [...]} nor a list of {image, caption}")
    return out


def retrieval_benchmark(name: str, title: str, filename: str) -> Benchmark:
    """Karpathy test split as a gallery: image->text and text->image Recall@1/5/10, decided
    as CLIP_benchmark's zeroshot_retrieval.evaluate decides them (tie_rule topk: a query
    counts when one of its right answers is among the k torch.topk keeps)."""

    def build(source: str, out: str, errors: RowErrors) -> BuildReport:
        path = source if os.path.isfile(source) else os.path.join(source, filename)
        rows = [{"image": image, "captions": caps} for image, caps, _ in karpathy_images(path, {"test"}, errors)]
        report = BuildReport(len(rows), len(rows), {"captions": sum(len(r["captions"]) for r in rows)}, errors.skipped)
        return write_records(out, rows, "retrieval", name, report)

    scoring = Scoring(task="retrieval", tie_rule="topk", recall_at=(1, 5, 10))
    return Benchmark(name=name, title=title, kind="retrieval", build=build, scoring=scoring)
