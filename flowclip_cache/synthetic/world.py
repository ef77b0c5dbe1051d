"""The synthetic binding world: procedural scenes, captions, and controlled hard
negatives that mirror the paper's benchmark families. Deterministic per seed.

A scene holds 1-3 objects on a 3x3 grid of cells (so left/right/above/below are
unambiguous), each a shape (16 procedurally drawn glyphs), a colour (6) and a size (2),
over a lightly cluttered background (scenes.py draws it).

Families (one benchmark each; see datasets/_synthetic.py):
  swap-att   two objects trade colours          (CLEVR / ABC / PUG-style binding)
  swap-obj   two objects trade shapes           (SugarCrepe Swap-O)
  relation   the spatial relation flips         (What's Up)
  order      4 word-order shuffles, 5 candidates (ARO Order)
  add        an absent object is added           (SugarCrepe Add)
  replace    one object's colour is replaced     (SugarCrepe Replace-att)
  object     one of two named shapes is absent   (object recognition, for the CLIP profile)
Splits: pretraining scenes (captions only), head-training records with full-caption
negatives, disjoint evaluation scenes, and a held-out split whose scenes contain
colour-shape combinations never seen in head training.
"""

from __future__ import annotations

import json
import os
import random

import pyarrow as pa

from ..errors import FlowclipError
from ..manifest import write_manifest
from .scenes import COLOURS, GRID, SHAPES, SIZES, Obj, article, render

__all__ = ["COLOURS", "GRID", "SHAPES", "SIZES", "Obj", "article", "render"]  # the scene vocabulary, re-exported

FAMILIES = ("swap-att", "swap-obj", "relation", "order", "add", "replace", "object")
BINDING = ("swap-att", "swap-obj")  # the families whose negatives re-bind attributes or objects
OPPOSITE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}


def relation(a: Obj, b: Obj) -> str | None:
    """The unambiguous relation of a to b, or None."""
    dx, dy = a.cell[0] - b.cell[0], a.cell[1] - b.cell[1]
    if dy == 0 and dx:
        return "left of" if dx < 0 else "right of"
    if dx == 0 and dy:
        return "above" if dy < 0 else "below"
    return None


def sample_scene(rng: random.Random, n_objects: int, combos: list[tuple[str, str]]) -> list[Obj]:
    cells = rng.sample([(c, r) for c in range(GRID) for r in range(GRID)], n_objects)
    picks = rng.sample(combos, n_objects)
    return [Obj(s, c, rng.choice(SIZES), cell) for (c, s), cell in zip(picks, cells)]


def describe(objs: list[Obj], rng: random.Random, attribute_rate: float = 1.0) -> str:
    """A caption of the scene (all objects, in a random order; colours named at attribute_rate)."""
    order = rng.sample(objs, len(objs))
    if len(order) == 2 and rng.random() < 0.5 and relation(order[0], order[1]):
        return f"{order[0].phrase(True)} {relation(order[0], order[1])} {order[1].phrase(True)}"
    parts = [o.phrase(colour=rng.random() < attribute_rate, size=rng.random() < 0.2) for o in order]
    return " and ".join(parts)


def _pair_caption(a: Obj, b: Obj, rel: str | None = None, colours=None, shapes=None) -> str:
    ca, cb = colours or (a.colour, b.colour)
    sa, sb = shapes or (a.shape, b.shape)
    mid = rel if rel else "and"
    return f"{article(ca)} {ca} {sa} {mid} {article(cb)} {cb} {sb}"


def make_record(objs: list[Obj], family: str, rng: random.Random, combos_all: list) -> tuple[list[str], str] | None:
    """(candidates with the gold first, gold) for one family, or None when the scene cannot host it."""
    if family in ("swap-att", "swap-obj", "order", "add", "replace", "object") and len(objs) >= 2:
        a, b = rng.sample(objs, 2)
    elif family == "relation" and len(objs) >= 2:
        pairs = [(x, y) for x in objs for y in objs if x is not y and relation(x, y)]
        if not pairs:
            return None
        a, b = rng.choice(pairs)
    else:
        return None
    if family == "swap-att":
        if a.colour == b.colour:
            return None
        gold, foil = _pair_caption(a, b), _pair_caption(a, b, colours=(b.colour, a.colour))
        return [gold, foil], gold
    if family == "swap-obj":
        if a.shape == b.shape:
            return None
        gold, foil = _pair_caption(a, b), _pair_caption(a, b, shapes=(b.shape, a.shape))
        return [gold, foil], gold
    if family == "relation":
        rel = relation(a, b)
        assert rel is not None  # the pair was chosen among related ones
        gold, foil = _pair_caption(a, b, rel), _pair_caption(a, b, OPPOSITE[rel])
        return [gold, foil], gold
    if family == "add":
        present = {(o.colour, o.shape) for o in objs}
        absent = [cs for cs in combos_all if cs not in present and cs[1] not in {o.shape for o in objs}]
        c, s = rng.choice(absent)
        gold = _pair_caption(a, b)
        return [gold, f"{gold} and {article(c)} {c} {s}"], gold
    if family == "replace":
        others = [c for c in COLOURS if c not in {o.colour for o in objs}]
        if not others:
            return None
        gold = _pair_caption(a, b)
        return [gold, _pair_caption(a, b, colours=(rng.choice(others), b.colour))], gold
    if family == "object":  # which objects are present, no attributes
        absent = [x for x in SHAPES if x not in {o.shape for o in objs}]
        gold = f"{article(a.shape)} {a.shape} and {article(b.shape)} {b.shape}"
        other = rng.choice(absent)
        return [gold, f"{article(a.shape)} {a.shape} and {article(other)} {other}"], gold
    if family == "order":
        gold = _pair_caption(a, b)
        foils = _order_foils(gold, rng)
        return ([gold] + foils, gold) if foils else None
    raise ValueError(family)


def _order_foils(gold: str, rng: random.Random) -> list[str]:
    """Four word-order foils of "a C S and a C S" (ARO's perturbations: content words among
    themselves, the rest among themselves, within trigrams, trigrams), or [] if four
    distinct ones do not come up."""
    w = gold.split()
    content = [1, 2, 5, 6]  # colours and shapes of "a C S and a C S"
    foils: list[str] = []
    for k in range(40):
        if len(foils) == 4:
            break
        v = list(w)
        if k % 4 == 0:  # shuffle colours and shapes among themselves
            vals = [w[i] for i in content]
            rng.shuffle(vals)
            for i, x in zip(content, vals):
                v[i] = x
        elif k % 4 == 1:  # shuffle everything else
            rest = [i for i in range(len(w)) if i not in content]
            vals = [w[i] for i in rest]
            rng.shuffle(vals)
            for i, x in zip(rest, vals):
                v[i] = x
        elif k % 4 == 2:  # within trigrams
            v = [x for t in range(0, len(w), 3) for x in rng.sample(w[t : t + 3], len(w[t : t + 3]))]
        else:  # trigrams
            tri = [w[t : t + 3] for t in range(0, len(w), 3)]
            rng.shuffle(tri)
            v = [x for t in tri for x in t]
        cand = " ".join(v)
        if cand != gold and cand not in foils:
            foils.append(cand)
    return foils if len(foils) == 4 else []


def object_label(o: Obj) -> str:
    """'colour shape size column row': what grounding checks need, kept in the manifest."""
    return f"{o.colour} {o.shape} {o.size} {o.cell[0]} {o.cell[1]}"


def held_out_combos(seed: int, fraction: float = 0.2) -> set[tuple[str, str]]:
    combos = [(c, s) for c in COLOURS for s in SHAPES]
    rng = random.Random(f"heldout:{seed}")
    return set(rng.sample(combos, int(len(combos) * fraction)))


TRAIN_OBJECTS, EVAL_OBJECTS = (1, 2, 2, 3, 3), (2, 3)  # objects per scene, drawn from these (eval: a pair at least)


def build_world(
    root: str,
    *,
    seed: int = 0,
    size: int = 64,
    train_scenes: int = 2000,
    eval_scenes: int = 300,
    heldout_scenes: int = 300,
    pretrain_scenes: int = 0,
    scene_objects: int | None = None,
    binding_negatives: float | None = None,
    log=print,
) -> dict[str, str]:
    """Write images and manifests under root; returns the manifest paths. Idempotent.
    The binding lab's knobs (docs/results-synthetic.md): scene_objects, exactly that many
    objects (2 or 3) in every scene of every split, instead of the mixed default;
    binding_negatives, the share of training records whose negative is a binding one
    (swap-att or swap-obj) where the scene can host it, instead of every family in turn."""
    paths = world_paths(root)
    settings: dict[str, float] = {
        "seed": seed,
        "size": size,
        "train_scenes": train_scenes,
        "eval_scenes": eval_scenes,
        "heldout_scenes": heldout_scenes,
        "pretrain_scenes": pretrain_scenes,
        "version": 1,
    }
    knobs = {"scene_objects": scene_objects, "binding_negatives": binding_negatives}
    check_world({**{k: v for k, v in settings.items() if k != "version"}, **knobs}, "world")
    settings.update({k: v for k, v in knobs.items() if v is not None})  # a default world's marker as before
    marker = os.path.join(root, "WORLD_DONE")
    if os.path.exists(marker):
        built = json.load(open(marker))
        if built != settings:
            raise FlowclipError(
                f"{root} holds a world built with other settings ({built}); remove it or use another folder"
            )
        return paths
    os.makedirs(paths["image_root"], exist_ok=True)
    held = held_out_combos(seed)
    all_combos = [(c, s) for c in COLOURS for s in SHAPES]
    seen_combos = [cs for cs in all_combos if cs not in held]
    scenes = lambda split, n, combos, need_held=False: _scenes(
        paths["image_root"], seed, size, held, split, n, combos, need_held, scene_objects
    )
    train = _training_rows(scenes("train", train_scenes, seen_combos), all_combos, binding_negatives)
    write_manifest(paths["training"], pa.Table.from_pylist(train), "training", {"benchmark": "synthetic-train"})
    # evaluation: disjoint scenes (their own seed stream), one manifest per family
    ev = scenes("eval", eval_scenes, seen_combos)
    for fam in FAMILIES:
        rows = _eval_rows(ev, fam, f"{seed}:{fam}", all_combos)
        write_manifest(
            paths[f"eval-{fam}"], pa.Table.from_pylist(rows), "candidates", {"benchmark": f"synthetic-{fam}"}
        )
    # held-out colour-shape combinations, binding family
    ho = scenes("heldout", heldout_scenes, all_combos, need_held=True)
    rows = _eval_rows(ho, "swap-att", f"{seed}:heldout", all_combos, "heldout")
    meta = {"benchmark": "synthetic-heldout-swap-att"}
    write_manifest(paths["eval-heldout-swap-att"], pa.Table.from_pylist(rows), "candidates", meta)
    if pretrain_scenes:
        pre = scenes("pretrain", pretrain_scenes, all_combos)
        rows = [
            {"image": name, "captions": [describe(objs, random.Random(f"{seed}:cap:{i}:{j}"), 0.5) for j in range(4)]}
            for i, (name, objs, rng) in enumerate(pre)
        ]
        write_manifest(paths["pretrain"], pa.Table.from_pylist(rows), "retrieval", {"benchmark": "synthetic-pretrain"})
    with open(marker, "w") as f:
        json.dump(settings, f)
    log(f"world written to {root}")
    return paths


def world_paths(root: str) -> dict[str, str]:
    """Where a world's images and manifests are."""
    paths = {
        "image_root": os.path.join(root, "images"),
        "training": os.path.join(root, "train.parquet"),
        "pretrain": os.path.join(root, "pretrain.parquet"),
    }
    for fam in FAMILIES:
        paths[f"eval-{fam}"] = os.path.join(root, f"eval_{fam}.parquet")
    paths["eval-heldout-swap-att"] = os.path.join(root, "eval_heldout_swap-att.parquet")
    return paths


def _scenes(
    image_root: str,
    seed: int,
    size: int,
    held: set,
    split: str,
    n: int,
    combos,
    need_held: bool,
    scene_objects: int | None = None,
) -> list[tuple[str, list[Obj], random.Random]]:
    """n scenes of a split, rendered to image_root/<split>/, from the split's own seed stream
    (evaluation scenes hold two or three objects; need_held: each holds a held-out combination)."""
    rng = random.Random(f"{seed}:{split}")
    out: list[tuple[str, list[Obj], random.Random]] = []
    counts = (scene_objects,) if scene_objects else TRAIN_OBJECTS if split not in ("eval", "heldout") else EVAL_OBJECTS
    while len(out) < n:
        k = rng.choice(counts)
        objs = sample_scene(rng, k, combos)
        if need_held and not any((o.colour, o.shape) in held for o in objs):
            continue
        name = f"{split}/{len(out):06d}.png"
        os.makedirs(os.path.join(image_root, split), exist_ok=True)
        render(objs, rng, size).save(os.path.join(image_root, name))
        out.append((name, objs, rng))
    return out


def _training_rows(train: list, all_combos: list, binding_negatives: float | None = None) -> list[dict]:
    """Head training: every family's negatives, seen combinations only; up to two records
    per scene (as COCO has several captions per image), each with the full-caption
    negative of one family: the families in a random order, or (binding_negatives) the
    binding families first with that probability, the others first otherwise."""
    rows: list[dict] = []
    for i, (name, objs, rng) in enumerate(train):
        for fam in _family_order(rng, binding_negatives):
            rec = make_record(objs, fam, rng, all_combos)
            if rec is None:
                continue
            rows.append(
                {
                    "record_id": f"train/{i}/{fam}",
                    "image": name,
                    "positive": rec[1],
                    "negatives": [rng.choice(rec[0][1:])],
                    "negative_kinds": [fam],
                    "split": "val" if i % 10 == 0 else "train",
                }
            )
            if sum(r["image"] == name for r in rows[-2:]) == 2:
                break
    return rows


def _family_order(rng: random.Random, binding_negatives: float | None) -> list[str]:
    if binding_negatives is None:
        return rng.sample(FAMILIES, len(FAMILIES))
    binding, other = list(BINDING), [f for f in FAMILIES if f not in BINDING]
    first, then = (binding, other) if rng.random() < binding_negatives else (other, binding)
    return rng.sample(first, len(first)) + rng.sample(then, len(then))


WORLD_TYPES = {
    "seed": int,
    "size": int,
    "train_scenes": int,
    "eval_scenes": int,
    "heldout_scenes": int,
    "pretrain_scenes": int,
    "scene_objects": int,
    "binding_negatives": float,
}


def check_world(world: dict, where: str) -> None:
    """Refuse an unknown key or a value of the wrong kind in a world's settings, by name."""
    for key, value in world.items():
        if key not in WORLD_TYPES:
            raise FlowclipError(f"{where}: unknown key {key!r}; known: {', '.join(sorted(WORLD_TYPES))}")
        want = WORLD_TYPES[key]
        ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
        if ok and want is int and value is not None and value != int(value):
            ok = False
        if not ok:
            raise FlowclipError(f"{where}: {key} = {value!r} is not {'an integer' if want is int else 'a number'}")
    if world.get("scene_objects") not in (None, 2, 3):
        n = world["scene_objects"]
        raise FlowclipError(f"{where}: scene_objects = {n!r}: use 2 or 3 (evaluation needs a pair)")
    share = world.get("binding_negatives")
    if share is not None and not 0 <= share <= 1:
        raise FlowclipError(f"{where}: binding_negatives = {share!r} is a share: between 0 and 1")


def _eval_rows(scenes: list, fam: str, stream: str, all_combos: list, prefix: str | None = None) -> list[dict]:
    """One candidate record of family `fam` per scene that has one (each from its own
    seed stream `stream:i`)."""
    rows = []
    for i, (name, objs, _) in enumerate(scenes):
        rec = make_record(objs, fam, random.Random(f"{stream}:{i}"), all_combos)
        if rec:
            rows.append(
                {
                    "record_id": f"{prefix or fam}/{i}",
                    "image": name,
                    "captions": rec[0],
                    "gold": 0,
                    "family": fam,
                    "objects": [object_label(o) for o in objs],
                }
            )
    return rows


def estimate_training_records(
    train_scenes: int,
    seed: int = 0,
    sample: int = 400,
    scene_objects: int | None = None,
    binding_negatives: float | None = None,
) -> int:
    """About how many split == 'train' records a world of train_scenes training scenes
    holds, from `sample` scenes drawn (not rendered) with the same generator: what a dry
    run plans with before the world exists."""
    held = held_out_combos(seed)
    seen = [(c, s) for c in COLOURS for s in SHAPES if (c, s) not in held]
    all_combos = [(c, s) for c in COLOURS for s in SHAPES]
    rng = random.Random(f"{seed}:estimate")
    scenes = []
    for i in range(sample):
        objs = sample_scene(rng, scene_objects or rng.choice(TRAIN_OBJECTS), seen)
        scenes.append((f"{i}", objs, random.Random(f"{seed}:estimate:{i}")))
    rows = _training_rows(scenes, all_combos, binding_negatives)
    return round(sum(r["split"] == "train" for r in rows) * train_scenes / sample)
