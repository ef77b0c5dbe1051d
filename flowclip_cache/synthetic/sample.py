"""A small generated sample (images + manifests) for tests, benchmarks and the
first-run demo: coloured shapes on a background, with captions and foils."""

from __future__ import annotations

import os
import random

import pyarrow as pa
from PIL import Image, ImageDraw

from ..manifest import write_manifest

COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 70, 220),
    "yellow": (230, 210, 40),
    "purple": (140, 60, 180),
    "orange": (240, 140, 30),
}
SHAPES = ("square", "circle", "triangle")
WORDS = (
    "small",
    "large",
    "bright",
    "dark",
    "shiny",
    "matte",
    "wooden",
    "metal",
    "on",
    "the",
    "table",
    "near",
    "a",
    "picture",
    "of",
    "next",
    "to",
)


def draw_scene(rng: random.Random, size: int) -> tuple[Image.Image, list[tuple[str, str]]]:
    im = Image.new("RGB", (size, size), tuple(rng.randrange(200, 256) for _ in range(3)))
    d = ImageDraw.Draw(im)
    objs = []
    for _ in range(2):
        colour, shape = rng.choice(list(COLOURS)), rng.choice(SHAPES)
        r = rng.randrange(size // 8, size // 4)
        cx, cy = rng.randrange(r, size - r), rng.randrange(r, size - r)
        box = (cx - r, cy - r, cx + r, cy + r)
        if shape == "square":
            d.rectangle(box, fill=COLOURS[colour])
        elif shape == "circle":
            d.ellipse(box, fill=COLOURS[colour])
        else:
            d.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=COLOURS[colour])
        objs.append((colour, shape))
    return im, objs


def make_sample(
    root: str, n_images: int = 32, extra_captions: int = 0, seed: int = 0, size: int = 96, fmt: str = "PNG"
) -> dict[str, str]:
    """Write images under root/images and two manifests (candidates, training).
    extra_captions adds filler captions of ~14 tokens per image (for throughput tests)."""
    rng = random.Random(seed)
    img_dir = os.path.join(root, "images")
    os.makedirs(img_dir, exist_ok=True)
    rows, train = [], []
    for i in range(n_images):
        im, ((c1, s1), (c2, s2)) = draw_scene(rng, size)
        name = f"scene_{i:05d}.{fmt.lower()}"
        im.save(os.path.join(img_dir, name), format=fmt)
        gold = f"a {c1} {s1} and a {c2} {s2}"
        foil = f"a {c2} {s1} and a {c1} {s2}" if c1 != c2 else f"a {c1} {s2} and a {c2} {s1}"
        if foil == gold:
            foil = f"a {c1} {s1} and no {s2}"
        caps = [gold, foil]
        for _ in range(extra_captions):
            caps.append(" ".join(rng.choice(WORDS) for _ in range(12)))
        rows.append({"record_id": f"s{i}", "image": name, "captions": caps, "gold": 0, "subset": "swap_att"})
        train.append(
            {
                "record_id": f"t{i}",
                "image": name,
                "positive": gold,
                "negatives": [foil],
                "split": "val" if i % 5 == 0 else "train",
            }
        )
    paths = {
        "candidates": os.path.join(root, "sample_candidates.parquet"),
        "training": os.path.join(root, "sample_training.parquet"),
        "image_root": img_dir,
    }
    write_manifest(paths["candidates"], pa.Table.from_pylist(rows), "candidates", {"benchmark": "sample"})
    write_manifest(paths["training"], pa.Table.from_pylist(train), "training", {"benchmark": "sample"})
    return paths
