"""A zero-shot set in CLIP_benchmark's webdataset layout, read as its
`build_wds_dataset` (clip_benchmark/datasets/builder.py) reads it:

    <source>/<split>/nshards.txt, <split>/0.tar .. <split>/<n-1>.tar
    <source>/classnames.txt, <source>/zeroshot_classification_templates.txt (classification)

A sample is the members sharing a key (webdataset's grouping); its image is the first of
its webp, png, jpg, jpeg members (the order of `to_tuple(["webp", "png", "jpg", "jpeg"],
...)`), its label the integer in `.cls`, its captions the lines of `.txt` (str.splitlines).
The manifest names each image in place, `<split>/<i>.tar/<member>`: extract reads it from
the shard with `--image-root <source>` (nothing is unpacked). `--option shards=PATTERN`
(a brace range relative to the source) replaces nshards.txt."""

from __future__ import annotations

import os
import re

from ..errors import FlowclipError, ManifestError
from ..shards import MAX_IMAGE_BYTES, is_url, join, read_member, read_small, samples, shard_paths
from ._hf import image_format
from .base import BuildReport, RowErrors, read_text, write_records

IMAGE_EXTS = ("webp", "png", "jpg", "jpeg")  # CLIP_benchmark's order of preference
DATASET_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}\Z")
MAX_LABEL_BYTES = 64


def dataset_name(source: str, name: str) -> str:
    """The set's name in results (`--option name=`, default the source folder's name
    without CLIP_benchmark's `wds_` prefix): lower-case letters, digits, . _ -."""
    name = name or os.path.basename(os.path.normpath(source.rstrip("/"))).lower().removeprefix("wds_")
    if not DATASET_NAME.match(name):
        raise ManifestError(f"{source}: dataset name {name!r}: use lower-case letters, digits, . _ - (--option name=)")
    return name


def source_text(source: str, *parts: str) -> str:
    """A text file of the set, in a folder or at a URL."""
    if not is_url(source):
        return read_text(os.path.join(source, *parts))
    path = join(source, *parts)
    try:
        raw = read_small(path)
    except (FileNotFoundError, OSError) as e:
        raise ManifestError(f"{path}: cannot read it ({type(e).__name__}: {e})") from None
    except FlowclipError as e:
        raise ManifestError(str(e)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ManifestError(f"{path}: not valid UTF-8 ({e.reason})") from None


def _is_image(head: bytes, ext: str) -> bool:
    """The member's first bytes are in the format its extension names."""
    return image_format(head) == (".jpg" if ext == "jpeg" else f".{ext}")


def wds_samples(source: str, split: str, shards: str, field: str, errors: RowErrors):
    """(image path under source, the field's member bytes, shard, sample) for each sample, in
    shard and file order; a sample lacking an image or the field is a row error."""
    if not is_url(source) and not os.path.isdir(source):
        raise ManifestError(f"{source}: not a folder (give the dataset's folder, holding {split}/)")
    if not shards:
        n_text = source_text(source, split, "nshards.txt").strip()
        if not n_text.isdigit() or int(n_text) < 1:
            raise ManifestError(f"{join(source, split, 'nshards.txt')}: {n_text[:40]!r} is not a shard count")
        shards = f"{split}/{{0..{int(n_text) - 1}}}.tar"
    try:
        paths = shard_paths(shards, source)
    except FlowclipError as e:
        raise ManifestError(str(e)) from None
    for shard in paths:
        full = join(source, shard)
        try:
            grouped = samples(full)
        except FlowclipError as e:
            raise ManifestError(str(e)) from None
        for key, members in grouped:
            where = f"sample {key[:120]!r}"
            ext = next((e for e in IMAGE_EXTS if e in members), None)
            if ext is None or field not in members:
                lacking = f"image ({', '.join(IMAGE_EXTS)})" if ext is None else f".{field}"
                errors(full, where, f"no {lacking} member")
                continue
            try:
                head = read_member(full, members[ext], MAX_IMAGE_BYTES, head=16)  # (checked, not read whole)
                value = read_member(full, members[field], MAX_LABEL_BYTES if field == "cls" else 1 << 20)
            except ValueError as e:
                errors(full, where, str(e))
                continue
            if not _is_image(head, ext):
                errors(full, f"member {members[ext][:120]!r}", f"its bytes are not a {ext.upper()} image")
                continue
            yield f"{shard}/{members[ext]}", value, full, where


def class_names(source: str) -> list[str]:
    """classnames.txt, one per line, stripped (as CLIP_benchmark strips them)."""
    path = join(source, "classnames.txt")
    names = [line.strip() for line in source_text(source, "classnames.txt").splitlines()]
    if not names:
        raise ManifestError(f"{path}: no class names")
    if "" in names:
        raise ManifestError(f"{path}: line {names.index('') + 1}: an empty class name")
    return names


def read_templates(source: str, option: str) -> list[str]:
    """The templates (`{c}` for the class name, as CLIP_benchmark formats them): the
    option's ('|'-separated) or zeroshot_classification_templates.txt's lines."""
    path = join(source, "zeroshot_classification_templates.txt")
    lines = [t for t in option.split("|") if t] if option else [
        t.strip() for t in source_text(source, "zeroshot_classification_templates.txt").splitlines()]  # fmt: skip
    where = "--option templates" if option else path
    for i, t in enumerate(lines, 1):
        try:
            ok = "{c}" in t and t.format(c="x") is not None
        except (KeyError, IndexError, ValueError):
            ok = False
        if not ok:
            raise ManifestError(f"{where}: template {i} {t[:80]!r} needs '{{c}}' for the class name and no other field")
    if not lines:
        raise ManifestError(f"{where}: no templates")
    return lines


def build_classification(source, out, errors: RowErrors, split="test", shards="", name="", templates=""):
    names, temps = class_names(source), read_templates(source, templates)
    rows = []
    for image, value, shard, where in wds_samples(source, split, shards, "cls", errors):
        text = value.decode("utf-8", "replace").strip()
        if not (text.isdigit() and int(text) < len(names)):
            errors(shard, where, f".cls {text[:20]!r} is not a class index below {len(names)} (classnames.txt)")
            continue
        rows.append({"image": image, "label": int(text), "_at": f"{shard}: {where}"})
    prompts = [[t.format(c=c) for t in temps] for c in names]
    meta = {"dataset": dataset_name(source, name), "classes": names, "templates": temps, "prompts": prompts}
    report = BuildReport(len(rows), len(rows), {"classes": len(names)}, errors.skipped)
    report.notes.append(f"images read in place from the shards: extract with --image-root {source}")
    return write_records(out, rows, "classification", "wds-classification", report, meta)


def build_retrieval(source, out, errors: RowErrors, split="test", shards="", name=""):
    rows = []
    for image, value, shard, where in wds_samples(source, split, shards, "txt", errors):
        try:
            captions = value.decode("utf-8").splitlines()
        except UnicodeDecodeError as e:
            errors(shard, where, f".txt is not UTF-8 ({e})")
            continue
        rows.append({"image": image, "captions": captions, "_at": f"{shard}: {where}"})
    report = BuildReport(len(rows), len(rows), {"captions": sum(len(r["captions"]) for r in rows)}, errors.skipped)
    report.notes.append(f"images read in place from the shards: extract with --image-root {source}")
    return write_records(out, rows, "retrieval", "wds-retrieval", report, {"dataset": dataset_name(source, name)})


OPTIONS = {
    "split": "the split folder (default test)",
    "shards": "a brace pattern of shards relative to --source, e.g. 'test/{0..3}.tar' (default: from nshards.txt)",
    "name": "the set's name in results (default: the folder's name without 'wds_')",
}
