"""NegCLIP-style training TSVs (as NegCLIP's released train_neg_clip.tsv and
valid_neg_clip.tsv): an index column, title (the positive caption), filepath,
neg_caption (a Python-literal list of full-caption hard negatives), neg_image."""
from __future__ import annotations

import ast
import csv
import io

from .base import RowErrors, read_text

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
            negs = ast.literal_eval(r[col["neg_caption"]])      # a literal parser, never eval
        except (ValueError, SyntaxError):
            errors(path, f"line {line}", "neg_caption is not a Python-literal list")
            continue
        negs = [n.strip() for n in negs if isinstance(n, str) and n.strip() and n.strip() != title] \
            if isinstance(negs, list) else []
        if not title or not image:
            errors(path, f"line {line}", "empty title or filepath")
            continue
        if not negs:
            errors(path, f"line {line}", "no negative that differs from the positive")
            continue
        if strip_prefix and image.startswith(strip_prefix):
            image = image[len(strip_prefix):]
        rows.append({"record_id": f"{prefix}{split}/{line}", "image": image, "positive": title,
                     "negatives": negs, "split": split})
    return rows
