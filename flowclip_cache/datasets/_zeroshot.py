"""Zero-shot classification sets: images written out as PNG beside the manifest
(the binary CIFAR files hold raw pixels), class names and prompt templates in the
manifest's metadata."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
from PIL import Image

from ..errors import ManifestError
from ..manifest import write_manifest
from .base import BuildReport

DEFAULT_TEMPLATES = ("a photo of a {}.",)


def templates_option(templates: str) -> list[str]:
    t = [x for x in templates.split("|") if x] if templates else list(DEFAULT_TEMPLATES)
    bad = [x for x in t if "{}" not in x]
    if bad:
        raise ManifestError(f"prompt templates need a '{{}}' for the class name: {bad}")
    return t


def read_cifar_binary(path: str, label_bytes: int, label_index: int, n_classes: int):
    """CIFAR binary records: label byte(s), then 3072 bytes (R, G, B planes of 32x32)."""
    if not os.path.isfile(path):
        raise ManifestError(f"{path}: file not found (check --source)")
    raw = np.fromfile(path, dtype=np.uint8)
    rec = label_bytes + 3072
    if raw.size % rec:
        raise ManifestError(f"{path}: size {raw.size} is not a multiple of the {rec}-byte CIFAR record")
    raw = raw.reshape(-1, rec)
    labels = raw[:, label_index].astype(int)
    if labels.max() >= n_classes:
        bad = int(np.argmax(labels >= n_classes))
        raise ManifestError(f"{path}: record {bad}: label {labels[bad]} >= {n_classes} classes")
    images = raw[:, label_bytes:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return images, labels


def write_classification(
    out: str, name: str, images, labels, classes: list[str], templates: list[str], image_paths: list[str] | None = None
) -> BuildReport:
    """Write PNGs (when pixels are given) under <out>.images/ and the manifest."""
    rows = []
    if image_paths is None:
        img_dir = out + ".images"
        os.makedirs(img_dir, exist_ok=True)
        image_paths = []
        for i, arr in enumerate(images):
            p = f"{i:05d}.png"
            Image.fromarray(arr).save(os.path.join(img_dir, p))
            image_paths.append(p)
    for p, lab in zip(image_paths, labels):
        rows.append({"image": p, "label": int(lab)})
    prompts = [[t.format(c) for t in templates] for c in classes]
    write_manifest(
        out,
        pa.Table.from_pylist(rows),
        "classification",
        {"benchmark": name, "classes": classes, "templates": templates, "prompts": prompts, "records": len(rows)},
    )
    report = BuildReport(len(rows), len(rows), {"classes": len(classes)})
    if images is not None:
        report.notes.append(f"images written to {out}.images (pass it as --image-root to extract)")
    return report
