"""What a synthetic scene is and how it is drawn: the vocabulary (colours, sizes, shapes,
the grid), an object, and the renderer (drawn at 4x and downsampled, anti-aliased).
world.py builds captions, records and splits on top of it."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from PIL import Image, ImageDraw

COLOURS = {
    "red": (215, 40, 40),
    "green": (40, 160, 60),
    "blue": (45, 80, 220),
    "yellow": (225, 205, 35),
    "purple": (135, 55, 175),
    "orange": (240, 135, 25),
}
SIZES = ("small", "large")
SHAPES = (
    "circle",
    "square",
    "triangle",
    "diamond",
    "pentagon",
    "hexagon",
    "star",
    "cross",
    "ring",
    "heart",
    "arrow",
    "crescent",
    "bar",
    "trapezoid",
    "octagon",
    "cone",
)
GRID = 3


@dataclass(frozen=True)
class Obj:
    shape: str
    colour: str
    size: str
    cell: tuple[int, int]  # (column, row) on the grid

    def phrase(self, colour=True, size=False) -> str:
        words = ([self.size] if size else []) + ([self.colour] if colour else []) + [self.shape]
        return f"{article(words[0])} " + " ".join(words)


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _polygon(cx, cy, r, n, rot=0.0):
    return [
        (cx + r * math.cos(rot + 2 * math.pi * k / n), cy + r * math.sin(rot + 2 * math.pi * k / n)) for k in range(n)
    ]


def draw_shape(d: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float, fill, bg) -> None:
    box = (cx - r, cy - r, cx + r, cy + r)
    if shape == "circle":
        d.ellipse(box, fill=fill)
    elif shape == "square":
        d.rectangle((cx - 0.8 * r, cy - 0.8 * r, cx + 0.8 * r, cy + 0.8 * r), fill=fill)
    elif shape == "triangle":
        d.polygon(_polygon(cx, cy + 0.15 * r, r, 3, -math.pi / 2), fill=fill)
    elif shape == "diamond":
        d.polygon(_polygon(cx, cy, r, 4), fill=fill)
    elif shape == "pentagon":
        d.polygon(_polygon(cx, cy, r, 5, -math.pi / 2), fill=fill)
    elif shape == "hexagon":
        d.polygon(_polygon(cx, cy, r, 6), fill=fill)
    elif shape == "octagon":
        d.polygon(_polygon(cx, cy, r, 8, math.pi / 8), fill=fill)
    elif shape == "star":
        pts = []
        for k in range(10):
            rr = r if k % 2 == 0 else 0.45 * r
            a = -math.pi / 2 + math.pi * k / 5
            pts.append((cx + rr * math.cos(a), cy + rr * math.sin(a)))
        d.polygon(pts, fill=fill)
    elif shape == "cross":
        w = 0.33 * r
        d.rectangle((cx - r, cy - w, cx + r, cy + w), fill=fill)
        d.rectangle((cx - w, cy - r, cx + w, cy + r), fill=fill)
    elif shape == "ring":
        d.ellipse(box, fill=fill)
        d.ellipse((cx - 0.5 * r, cy - 0.5 * r, cx + 0.5 * r, cy + 0.5 * r), fill=bg)
    elif shape == "heart":
        d.ellipse((cx - r, cy - 0.8 * r, cx, cy + 0.2 * r), fill=fill)
        d.ellipse((cx, cy - 0.8 * r, cx + r, cy + 0.2 * r), fill=fill)
        d.polygon([(cx - 0.97 * r, cy - 0.15 * r), (cx + 0.97 * r, cy - 0.15 * r), (cx, cy + r)], fill=fill)
    elif shape == "arrow":
        d.rectangle((cx - r, cy - 0.25 * r, cx + 0.1 * r, cy + 0.25 * r), fill=fill)
        d.polygon([(cx + 0.1 * r, cy - 0.7 * r), (cx + r, cy), (cx + 0.1 * r, cy + 0.7 * r)], fill=fill)
    elif shape == "crescent":
        d.ellipse(box, fill=fill)
        d.ellipse((cx - 0.4 * r, cy - r, cx + 1.4 * r, cy + r), fill=bg)
    elif shape == "bar":
        d.rectangle((cx - r, cy - 0.35 * r, cx + r, cy + 0.35 * r), fill=fill)
    elif shape == "trapezoid":
        d.polygon(
            [
                (cx - 0.5 * r, cy - 0.7 * r),
                (cx + 0.5 * r, cy - 0.7 * r),
                (cx + r, cy + 0.7 * r),
                (cx - r, cy + 0.7 * r),
            ],
            fill=fill,
        )
    elif shape == "cone":
        d.polygon([(cx, cy - r), (cx + 0.7 * r, cy + 0.6 * r), (cx - 0.7 * r, cy + 0.6 * r)], fill=fill)
        d.ellipse((cx - 0.7 * r, cy + 0.35 * r, cx + 0.7 * r, cy + 0.85 * r), fill=fill)
    else:
        raise ValueError(shape)


def render(objs: list[Obj], rng: random.Random, size: int = 64, scale: int = 4) -> Image.Image:
    S = size * scale
    bg = tuple(rng.randrange(200, 246) for _ in range(3))
    im = Image.new("RGB", (S, S), bg)
    d = ImageDraw.Draw(im)
    for _ in range(rng.randrange(3, 8)):  # clutter: faint lines and dots
        g = tuple(min(255, c + rng.randrange(-30, 10)) for c in bg)
        x0, y0 = rng.randrange(S), rng.randrange(S)
        d.line((x0, y0, x0 + rng.randrange(-S // 3, S // 3), y0 + rng.randrange(-S // 3, S // 3)), fill=g, width=scale)
    cell = S / GRID
    for o in objs:
        r = cell * (0.42 if o.size == "large" else 0.26)
        cx = (o.cell[0] + 0.5) * cell + rng.uniform(-0.06, 0.06) * cell
        cy = (o.cell[1] + 0.5) * cell + rng.uniform(-0.06, 0.06) * cell
        draw_shape(d, o.shape, cx, cy, r, COLOURS[o.colour], bg)
    return im.resize((size, size), Image.Resampling.LANCZOS)
