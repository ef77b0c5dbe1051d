"""ELEVATER's zero-shot image classification (the 21 sets vl_compo averages as
`21_tasks_avg`), read from a vision-datasets copy as ELEVATER's toolkit reads it:

    --source   the set's folder as vision-datasets' DatasetHub lays it out: the test index
               (Iris text, `<zip>@<member> <label>[,<label>...]` a line, or COCO JSON,
               `images[].file_name` with `zip_file`, `annotations[].category_id`), the
               labelmap, and the image zips (read in place: nothing is unpacked)
    --option toolkit=  a checkout of ELEVATER's toolkit: the task's config, metric,
               class names and templates (datasets/_elevater.py; read, never run)
    --option task=     one of the 21 (caltech101, ..., voc2007classification)

Records follow vision-datasets' IrisManifestAdaptor (a line split at its last space, labels
split at commas) and its COCO adaptor (categories ordered by id, a label its category's
position). Each image is named in place, `<zip>/<member>` under --source (extract with
`--image-root` the same folder). The copy must hold the test split whole: its image count
is checked against vision_datasets.json's. The task's figure is its TEST.METRIC, scored as
scoring/elevater.py computes it."""

from __future__ import annotations

import json
import os

from ..errors import ManifestError
from ..shards import MAX_IMAGE_BYTES, read_member, split_member_path
from ._elevater import class_names, inside, task_config, templates
from ._hf import image_format
from .base import Benchmark, BuildReport, RowErrors, Scoring, read_text, write_records


def _image(source: str, entry: str, where: str, errors: RowErrors) -> str | None:
    """The manifest's path of an index entry (`a.zip@x/y.jpg` -> `a.zip/x/y.jpg`), checked
    to be an image member of the archive (or a file) under source."""
    path = entry.replace("@", "/", 1) if "@" in entry else entry
    if not inside(path):  # checked before anything is opened: nothing outside the copy is read
        errors(source, where, f"image {entry[:120]!r}: not a path inside the set's folder")
        return None
    in_zip = split_member_path(source, path) if "@" in entry else None
    try:
        if in_zip is not None:
            head = read_member(os.path.join(source, in_zip[0]), in_zip[1], MAX_IMAGE_BYTES, head=16)
        elif "@" in entry:
            raise ValueError(f"no archive {entry.split('@', 1)[0]!r} under the source")
        else:
            with open(os.path.join(source, path), "rb") as f:
                head = f.read(16)
    except (ValueError, OSError) as e:
        errors(source, where, f"image {entry[:120]!r}: {e}")
        return None
    if image_format(head) is None:
        errors(source, where, f"image {entry[:120]!r}: its bytes are not an image")
        return None
    return path


def iris_records(source: str, cfg: dict, errors: RowErrors) -> tuple[list, list[str]]:
    """((image entry, labels, where) per line, labelmap) of an Iris index."""
    index = os.path.join(source, cfg["index"])
    out = []
    for n, line in enumerate(read_text(index).splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        entry, _, labels = line.rpartition(" ")
        try:
            ids = [int(x) for x in labels.split(",")]
        except ValueError:
            errors(index, f"line {n}", f"labels {labels[:40]!r} are not integers separated by commas")
            continue
        out.append((entry, ids, f"{cfg['index']} line {n}"))
    labelmap = []
    if cfg["labelmap"]:
        labelmap = [x.strip() for x in read_text(os.path.join(source, cfg["labelmap"])).splitlines() if x.strip()]
    return out, labelmap


def coco_records(source: str, cfg: dict, errors: RowErrors) -> tuple[list, list[str]]:
    """((image entry, labels, where) per image, by id; category names by id) of a COCO index."""
    index = os.path.join(source, cfg["index"])
    try:
        coco = json.loads(read_text(index))
        cats = sorted((c["id"], c["name"]) for c in coco["categories"])
        pos = {cid: i for i, (cid, _) in enumerate(cats)}
        images = {im["id"]: (im.get("zip_file", ""), im["file_name"]) for im in coco["images"]}
        labels: dict = {i: [] for i in images}
        for a in coco["annotations"]:
            labels[a["image_id"]].append(pos[a["category_id"]])
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ManifestError(f"{index}: not vision-datasets' COCO classification index ({type(e).__name__}: {e})")
    out = []
    for i in sorted(images):
        z, name = images[i]
        out.append((f"{z}@{name}" if z else name, labels[i], f"{cfg['index']} image id {i}"))
    return out, [name for _, name in cats]


def build_elevater(source, out, errors: RowErrors, task="", toolkit="", allow_partial=""):
    if not task or not toolkit:
        raise ManifestError("elevater needs --option task=<one of the 21> and --option toolkit=<ELEVATER checkout>")
    cfg = task_config(toolkit, task)
    records, labelmap = (coco_records if cfg["coco"] else iris_records)(source, cfg, errors)
    names, temps = class_names(toolkit, cfg["hub"], labelmap), templates(toolkit, cfg["hub"])
    rows = []
    for entry, labels, where in records:
        if not labels or not all(0 <= c < len(names) for c in labels) or (len(labels) > 1 and not cfg["multilabel"]):
            errors(source, where, f"labels {labels} are not {'class indices' if cfg['multilabel'] else 'one class'} "
                                  f"below {len(names)}")  # fmt: skip
            continue
        path = _image(source, entry, where, errors)
        if path is not None:
            rows.append({"image": path, "label": labels[0], "labels": labels, "_at": f"{source}: {where}"})
    if cfg["images"] and len(records) != cfg["images"] and allow_partial != "yes":
        raise ManifestError(f"{source}: {len(records):,} test images; ELEVATER's vision_datasets.json states "
                            f"{cfg['images']:,} for {cfg['hub']}: a partial copy (or allow_partial=yes)")  # fmt: skip
    prompts = [[t.format(c) for t in temps] for c in names]
    meta = {"dataset": task, "hub": cfg["hub"], "classes": names, "templates": temps, "prompts": prompts,
            "metric": cfg["metric"], "multilabel": cfg["multilabel"]}  # fmt: skip
    if cfg["images"] and len(records) != cfg["images"]:
        meta["partial"] = f"{len(records)} of {cfg['images']} test images"
    report = BuildReport(len(rows), len(rows), {"classes": len(names)}, errors.skipped)
    report.notes.append(f"{cfg['metric']} (ELEVATER's TEST.METRIC); images read in place: extract with --image-root "
                        f"{source}")  # fmt: skip
    return write_records(out, rows, "classification", "elevater", report, meta)


BENCHMARK = Benchmark(
    name="elevater",
    title="ELEVATER zero-shot classification (vl_compo's 21 tasks)",
    kind="classification",
    build=build_elevater,
    scoring=Scoring(task="classification", recall_at=(1, 5)),
    task_name="elevater-{dataset}",
    options={
        "task": "the set: caltech101, cifar10, ..., voc2007classification (ELEVATER's resources/datasets/<task>.yaml)",
        "toolkit": "a checkout of github.com/Computer-Vision-in-the-Wild/Elevater_Toolkit_IC (read, never run)",
        "allow_partial": "yes: build from a copy holding fewer test images than ELEVATER states (marked partial)",
    },
)
