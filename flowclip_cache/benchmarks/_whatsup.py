"""Shared reading of What's Up (amitakamath/whatsup_vlms) files."""
from __future__ import annotations

import os

from .base import RowErrors, load_json


def qa_rows(source: str, files: dict[str, str], image_path, errors: RowErrors, prefix: str) -> list[dict]:
    """One- and two-object files: JSON lists of [image_id, gold caption, foil caption]."""
    rows = []
    for subset, name in files.items():
        path = os.path.join(source, name)
        for i, rec in enumerate(load_json(path)):
            if not (isinstance(rec, list) and len(rec) == 3 and all(isinstance(x, str) and x.strip()
                                                                    for x in rec[1:])):
                errors(path, f"item {i}", "expected [image_id, gold caption, foil caption]")
                continue
            rows.append({"record_id": f"{prefix}{subset}/{i}", "image": image_path(rec[0]),
                         "captions": [rec[1], rec[2]], "gold": 0, "subset": subset})
    return rows


def controlled_rows(path: str, errors: RowErrors, prefix: str) -> list[dict]:
    """Controlled A/B: JSON list of {image_path, caption_options: [gold, 3 foils]}."""
    rows = []
    for i, rec in enumerate(load_json(path)):
        opts = rec.get("caption_options") if isinstance(rec, dict) else None
        img = rec.get("image_path") if isinstance(rec, dict) else None
        if not isinstance(img, str) or not isinstance(opts, list) or len(opts) < 2 or \
                not all(isinstance(o, str) and o.strip() for o in opts):
            errors(path, f"item {i}", "expected {image_path, caption_options: [gold, foils...]}")
            continue
        # the preposition of the gold caption, e.g. "A mug on the left of a plate" -> "left"
        words = opts[0].lower().replace("_", " ").split()
        prep = next((w for w in ("left", "right", "on", "under", "front", "behind") if w in words), "other")
        rows.append({"record_id": f"{prefix}{i}", "image": img, "captions": opts, "gold": 0, "preposition": prep})
    return rows
