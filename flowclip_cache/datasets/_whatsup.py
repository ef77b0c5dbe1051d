"""Shared reading of What's Up (amitakamath/whatsup_vlms) files."""

from __future__ import annotations

import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, load_json, write_records


def qa_rows(source: str, files: dict[str, str], image_path, errors: RowErrors, prefix: str) -> list[dict]:
    """One- and two-object files: JSON lists of [image_id, gold caption, foil caption]."""
    rows = []
    for subset, name in files.items():
        path = os.path.join(source, name)
        for i, rec in enumerate(load_json(path)):
            if not (isinstance(rec, list) and len(rec) == 3 and all(isinstance(x, str) and x.strip() for x in rec[1:])):
                errors(path, f"item {i}", "expected [image_id, gold caption, foil caption]")
                continue
            rows.append(
                {
                    "record_id": f"{prefix}{subset}/{i}",
                    "image": image_path(rec[0]),
                    "captions": [rec[1], rec[2]],
                    "gold": 0,
                    "subset": subset,
                }
            )
    return rows


def controlled_rows(path: str, errors: RowErrors, prefix: str) -> list[dict]:
    """Controlled A/B: JSON list of {image_path, caption_options: [gold, 3 foils]}."""
    rows = []
    for i, rec in enumerate(load_json(path)):
        opts = rec.get("caption_options") if isinstance(rec, dict) else None
        img = rec.get("image_path") if isinstance(rec, dict) else None
        if (
            not isinstance(img, str)
            or not isinstance(opts, list)
            or len(opts) < 2
            or not all(isinstance(o, str) and o.strip() for o in opts)
        ):
            errors(path, f"item {i}", "expected {image_path, caption_options: [gold, foils...]}")
            continue
        # the preposition of the gold caption, e.g. "A mug on the left of a plate" -> "left"
        words = opts[0].lower().replace("_", " ").split()
        prep = next((w for w in ("left", "right", "on", "under", "front", "behind") if w in words), "other")
        rows.append({"record_id": f"{prefix}{i}", "image": img, "captions": opts, "gold": 0, "preposition": prep})
    return rows


def pair_and_set_accuracy(letter: str):
    """What's Up Controlled-A/B's pair and set accuracy as the official
    `Controlled_Images.evaluate_scores` (dataset_zoo/aro_datasets.py) counts them: images are
    grouped by object pair, the key (name.split('_')[0], name.split('_')[-1][:-5]) and the
    preposition name.split('_')[1]; a pair is right when left and right (and on and under
    for A, in-front and behind for B) are both right; a set when all four are. Pair accuracy
    = pairs right / (n / 2), set accuracy = sets right / (n / 4), as there."""
    second = ("on", "under") if letter == "a" else ("in-front", "behind")

    def extra(correct, cols: dict) -> dict:
        sets: dict = {}
        for ok, image in zip(correct, cols["image"]):
            parts = os.path.basename(image).split("_")
            sets.setdefault((parts[0], parts[-1][:-5]), {p: 0 for p in ("left", "right", *second)})[parts[1]] = ok
        pairs = sum(bool(d["left"] and d["right"]) + bool(d[second[0]] and d[second[1]]) for d in sets.values())
        full = sum(sum(map(bool, d.values())) == 4 for d in sets.values())
        n = len(correct)
        return {"pair": pairs / (n / 2), "set": full / (n / 4)} if n else {}

    return extra


def controlled_benchmark(letter: str, filename: str) -> Benchmark:
    """Controlled-A/B: a candidate set of 4, the gold must rank first (np.argmax: a tie goes
    to the earliest, the gold)."""
    name = f"whatsup-controlled-{letter}"

    def build(source: str, out: str, errors: RowErrors) -> BuildReport:
        path = source if os.path.isfile(source) else os.path.join(source, filename)
        rows = controlled_rows(path, errors, f"controlled-{letter}/")
        return write_records(
            out, rows, "candidates", name, BuildReport(len(rows), len({r["image"] for r in rows}), {}, errors.skipped)
        )

    return Benchmark(
        name=name,
        title=f"What's Up Controlled-{letter.upper()}",
        kind="candidates",
        build=build,
        scoring=Scoring(
            task="candidates",
            tie_rule="first",
            report_by=("preposition",),
            extra=pair_and_set_accuracy(letter),
            extra_title="pair and set accuracy (official evaluate_scores)",
        ),
    )


def spatial_benchmark(name: str, title: str, files: dict[str, str], image_path) -> Benchmark:
    """COCO-/GQA-Spatial: pairwise; the official score is the unweighted mean of the
    one- and two-object subsets; np.argmax, so a tie goes to the gold (index 0)."""

    def build(source: str, out: str, errors: RowErrors) -> BuildReport:
        rows = qa_rows(source, files, image_path, errors, name.split("-", 1)[1] + "/")
        counts = {s: sum(r["subset"] == s for r in rows) for s in files}
        return write_records(
            out,
            rows,
            "candidates",
            name,
            BuildReport(len(rows), len({r["image"] for r in rows}), counts, errors.skipped),
        )

    return Benchmark(
        name=name,
        title=title,
        kind="candidates",
        build=build,
        scoring=Scoring(
            task="pairwise",
            tie_rule="first",
            aggregate="subset_mean",
            group_by="subset",
            joins=(("binding7", ""), ("all11", ""), ("controls6", ""), ("binding5", "")),
        ),
    )
