"""The synthetic world's stand-ins for the field's image-choice and group tasks, rendered
beside a world (in <world>/images/contrast/, manifests <world>/eval_groups.parquet and
<world>/eval_image-choice.parquet), from their own seed stream: the world itself and its
other manifests are untouched.

    synthetic-groups        Winoground in miniature: scene A holds two objects; scene B
                            is A with the two colours exchanged (same shapes, places,
                            sizes, background and clutter). Captions "a red square and a
                            blue circle" / "a blue square and a red circle": the same words,
                            bound differently. Text, image and group scores.
    synthetic-image-choice  one caption chooses among four images: its scene, the
                            colour-swapped twin, the shape-swapped twin and the two objects
                            moved (another layout): only binding tells the first two apart.

Seen colour-shape combinations only (the held-out ones stay for the held-out family)."""

from __future__ import annotations

import json
import os
import random
from dataclasses import replace

import pyarrow as pa

from ..errors import FlowclipError
from ..manifest import write_manifest
from .scenes import COLOURS, GRID, SHAPES, SIZES, Obj, render
from .world import _pair_caption, held_out_combos

VERSION = 1


def contrast_count(eval_scenes: int) -> int:
    """How many groups a world of this many evaluation scenes gets: a third as many, 20 at
    least (100 in the default world of 300)."""
    return max(20, eval_scenes // 3)


def contrast_paths(root: str) -> dict[str, str]:
    return {
        "image_root": os.path.join(root, "images"),
        "eval-groups": os.path.join(root, "eval_groups.parquet"),
        "eval-image-choice": os.path.join(root, "eval_image-choice.parquet"),
        "eval-paraphrases": os.path.join(root, "eval_paraphrases.parquet"),
    }


def build_contrasts(root: str, seed: int = 0, n: int | None = None, size: int = 64) -> dict[str, str]:
    """Render the twins and write both manifests under a built world's root; idempotent
    (a marker records the settings; other settings are refused). n None: the sets already
    there, of any size, else the default world's count."""
    if not os.path.exists(os.path.join(root, "WORLD_DONE")):
        raise FlowclipError(f"{root} holds no synthetic world (WORLD_DONE): build the world first")
    paths = contrast_paths(root)
    marker = os.path.join(root, "CONTRASTS_DONE")
    if os.path.exists(marker) and n is None:
        n = json.load(open(marker)).get("n")
    n = contrast_count(300) if n is None else n
    settings = {"seed": seed, "n": n, "size": size, "version": VERSION}
    if os.path.exists(marker):
        if json.load(open(marker)) != settings:
            raise FlowclipError(f"{root} holds contrast sets built with other settings; use another world folder")
        _paraphrases(paths)  # (derived from the groups: added to contrast sets built before it existed)
        return paths
    held = held_out_combos(seed)
    combos = [(c, s) for c in COLOURS for s in SHAPES if (c, s) not in held]
    groups, choices = [], []
    os.makedirs(os.path.join(paths["image_root"], "contrast"), exist_ok=True)
    for i in range(n):
        rng = random.Random(f"{seed}:contrast:{i}")
        a, b = _distinct_pair(rng, combos)
        colour_swap = [replace(a, colour=b.colour), replace(b, colour=a.colour)]
        shape_swap = [replace(a, shape=b.shape), replace(b, shape=a.shape)]
        cells = rng.sample(
            [c for c in ((x, y) for x in range(GRID) for y in range(GRID)) if c not in (a.cell, b.cell)], 2
        )
        moved = [replace(a, cell=cells[0]), replace(b, cell=cells[1])]
        names = []
        for k, objs in enumerate(([a, b], colour_swap, shape_swap, moved)):
            name = f"contrast/{i:05d}_{k}.png"
            render(objs, random.Random(f"{seed}:contrast:{i}:render"), size).save(
                os.path.join(paths["image_root"], name)
            )
            names.append(name)
        caption, twin = _pair_caption(a, b), _pair_caption(colour_swap[0], colour_swap[1])
        groups.append({"record_id": f"groups/{i}", "images": names[:2], "captions": [caption, twin]})
        order = rng.sample(range(4), 4)  # the gold's place varies, so no position wins by itself
        choices.append(
            {"record_id": f"image-choice/{i}", "images": [names[k] for k in order], "caption": caption,
             "gold": order.index(0)}
        )  # fmt: skip
    write_manifest(paths["eval-groups"], pa.Table.from_pylist(groups), "groups", {"benchmark": "synthetic-groups"})
    meta = {"benchmark": "synthetic-image-choice"}
    write_manifest(paths["eval-image-choice"], pa.Table.from_pylist(choices), "image_candidates", meta)
    _paraphrases(paths)
    with open(marker, "w") as f:
        json.dump(settings, f)
    return paths


def _paraphrases(paths: dict[str, str]) -> None:
    """SugarCrepe++ in miniature, from the groups: a group's first scene with its caption
    (P1), the same two objects named in the other order (P2: "a blue circle and a red
    square"), and the colour-swapped twin's caption (N). All three hold the same words: only
    how they bind tells P2 from N, for the image (ITT) and for the text alone (TOT)."""
    if os.path.exists(paths["eval-paraphrases"]):
        return
    import pyarrow.parquet as pq

    rows = []
    for g in pq.read_table(paths["eval-groups"]).to_pylist():
        first, second = g["captions"][0].split(" and ")
        rid = g["record_id"].replace("groups/", "paraphrases/")
        pos = [g["captions"][0], f"{second} and {first}"]
        rows.append({"record_id": rid, "image": g["images"][0], "positives": pos, "negative": g["captions"][1]})
    meta = {"benchmark": "synthetic-paraphrases"}
    write_manifest(paths["eval-paraphrases"], pa.Table.from_pylist(rows), "paraphrases", meta)


def _distinct_pair(rng: random.Random, combos: list[tuple[str, str]]) -> tuple[Obj, Obj]:
    """Two objects of different colours and shapes whose swapped combinations are seen too."""
    seen = set(combos)
    while True:
        (ca, sa), (cb, sb) = rng.sample(combos, 2)
        if ca != cb and sa != sb and {(cb, sa), (ca, sb)} <= seen:
            cells = rng.sample([(x, y) for x in range(GRID) for y in range(GRID)], 2)
            return Obj(sa, ca, rng.choice(SIZES), cells[0]), Obj(sb, cb, rng.choice(SIZES), cells[1])
