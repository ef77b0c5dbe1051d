"""NegCLIP-style training TSVs (as NegCLIP's released train_neg_clip.tsv and
valid_neg_clip.tsv): an index column, title (the positive caption), filepath,
neg_caption (a Python-literal list of full-caption hard negatives), neg_image."""

from __future__ import annotations

import ast
import csv
import io
import os

from .base import Benchmark, BuildReport, RowErrors, read_text, write_records

csv.field_size_limit(1 << 24)


def negclip_rows(path: str, split: str, errors: RowErrors, prefix: str, strip_prefix: str = "") -> list[dict]:
    reader = csv.reader(io.StringIO(read_text(path)), delimiter="\t")
    head = next(reader, None)
    if not head or not {"title", "filepath", "neg_caption"} <= set(head):
        errors(path, "line 1", "header must name title, filepath and neg_caption")
        return []
    col = {c: i for i, c in enumerate(head)}
    rows = []
    for line, r in enumerate(reader, start=2):
        if not r:
            continue
        if len(r) != len(head):
            errors(path, f"line {line}", f"{len(r)} fields, the header has {len(head)}")
            continue
        title, image = r[col["title"]].strip(), r[col["filepath"]].strip()
        try:
            negs = ast.literal_eval(r[col["neg_caption"]])  # a literal parser, never eval
        except (ValueError, SyntaxError):
            errors(path, f"line {line}", "neg_caption is not a Python-literal list")
            continue
        negs = (
            [n.strip() for n in negs if isinstance(n, str) and n.strip() and n.strip() != title]
            if isinstance(negs, list)
            else []
        )
        if not title or not image:
            errors(path, f"line {line}", "empty title or filepath")
            continue
        if not negs:
            errors(path, f"line {line}", "no negative that differs from the positive")
            continue
        if strip_prefix and image.startswith(strip_prefix):
            image = image[len(strip_prefix) :]
        rows.append(
            {
                "record_id": f"{prefix}{split}/{line}",
                "image": image,
                "positive": title,
                "negatives": negs,
                "split": split,
            }
        )
    return rows


def training_benchmark(name: str, title: str, default_prefix: str) -> Benchmark:
    """<source>/train_neg_clip.tsv (split train) and <source>/valid_neg_clip.tsv (split val)."""

    def build(source: str, out: str, errors: RowErrors, strip_prefix: str = default_prefix) -> BuildReport:
        rows = []
        for fname, split in (("train_neg_clip.tsv", "train"), ("valid_neg_clip.tsv", "val")):
            path = os.path.join(source, fname)
            if os.path.exists(path):
                rows += negclip_rows(path, split, errors, f"{name}/", strip_prefix)
        counts = {s: sum(r["split"] == s for r in rows) for s in ("train", "val")}
        return write_records(
            out, rows, "training", name, BuildReport(len(rows), len({r["image"] for r in rows}), counts, errors.skipped)
        )

    return Benchmark(
        name=name,
        title=title,
        kind="training",
        build=build,
        scoring=None,
        options={
            "strip_prefix": f"prefix removed from filepath so paths are relative to "
            f"--image-root (default {default_prefix!r})"
        },
    )
