"""What the group benchmarks published as Hugging Face datasets share (Winoground,
ColorSwap, BiVLC): each row two images and two captions, image i's own caption i,
read from the user's copy (_hf) and written as a `groups` manifest. The images of a
copy that embeds them go to images_out, named by flowclip from the row number
(<benchmark>-<row>-<0|1>), never by anything in the copy."""

from __future__ import annotations

from typing import Callable

from ._hf import ImageExport, read_split
from .base import BuildReport, RowErrors, plain_id, write_records

# a row of the split -> (record id as the copy has it, [image 0 value, image 1 value],
# [caption 0, caption 1], extra manifest columns)
RowFn = Callable[[int, dict], tuple[object, list, list, dict]]


def build_groups(
    source: str,
    out: str,
    errors: RowErrors,
    *,
    name: str,
    what: str,
    split: str,
    columns: tuple[str, ...],
    row: RowFn,
    images_out: str | None,
    count_by: str | None = None,
    meta: dict | None = None,
) -> BuildReport:
    """Read the split (refused without COLUMNS), export embedded images (or name the files
    a copy holds as paths), and write the groups manifest; an export is published only
    with its manifest."""
    table = read_split(source, split, what, columns)
    data = table.to_pylist()
    embedded = any(isinstance(v, dict) for v in data[0].values()) if data else False
    export = ImageExport(images_out, what) if embedded else None
    rows: list[dict] = []
    counts: dict[str, int] = {}
    images: set[str] = set()
    try:
        for i, rec in enumerate(data):
            where = f"{source}: {split} row {i}"
            rid, imgs, caps, extra = row(i, rec)
            # a copy's id is text of its own, never a path; a tuple: parts that together identify it
            rid = "/".join(plain_id(x, where) for x in rid) if isinstance(rid, tuple) else plain_id(rid, where)
            if any(not isinstance(c, str) or not c.strip() for c in caps):
                errors(source, f"{split} row {i}", "an empty, missing or non-text caption")
                continue
            if export is not None:
                imgs = [export.add(f"{name}-{i:06d}-{k}", v, where) for k, v in enumerate(imgs)]
            elif any(not isinstance(p, str) or not p for p in imgs):
                errors(source, f"{split} row {i}", "an image that is neither embedded nor a path")
                continue
            rows.append({"record_id": rid, "images": imgs, "captions": caps, **extra, "_at": where})
            images.update(imgs)
            if count_by:
                counts[str(extra[count_by])] = counts.get(str(extra[count_by]), 0) + 1
        report = BuildReport(len(rows), len(images), counts, errors.skipped)
        if export is not None:
            report.notes.append(f"images written to {images_out} (use it as extract's --image-root)")
        if export is not None:
            export.finish()  # the images first: a manifest never names images that are not there
        try:
            write_records(out, rows, "groups", name, report, meta)
        except BaseException:
            if export is not None:
                export.withdraw()  # the folder this build just published, and nothing else
            raise
    finally:
        if export is not None:
            export.abandon()  # (after finish() the temporary folder no longer exists)
    return report
