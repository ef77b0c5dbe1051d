"""Stand-ins for the paper's benchmarks and training sources, from the synthetic world
(the reduced run; docs/paper.md, "The reduced run"). `--option as=NAME` writes a
manifest that `flowclip score` reads as the paper's benchmark NAME (its registered
scoring, groups and cross-task means) but whose records are synthetic, each manifest
saying so in its metadata (`stand_in`). `--source` is the world folder, generated there
first if absent. Nothing here claims to measure the real benchmark: the point is that
every step of the paper's pipeline and every table runs on a laptop."""

from __future__ import annotations

import os
import random

import pyarrow.parquet as pq

from ..errors import ManifestError
from ..manifest import write_manifest
from .base import Benchmark, BuildReport, RowErrors, write_records

# paper benchmark -> (synthetic family, the official scoring's columns: name -> value or
# a function of the synthetic row). The families the paper benchmark tests the same way.
_RELATION = lambda r: next(w for w in ("left of", "right of", "above", "below") if w in r["captions"][0])
EVAL: dict[str, tuple[str, dict]] = {
    "aro-vg-relation": ("relation", {"relation": _RELATION, "excluded": False}),
    "aro-vg-attribution": ("swap-att", {"attribute_pair": "colours"}),
    "aro-coco-order": ("order", {}),
    "aro-flickr-order": ("order", {}),
    "abc6k": ("swap-att", {"identical": False}),
    "clevr-binding": ("swap-att", {"equivalent": False}),
    "clevr-binding-pool": ("swap-att", {"equivalent": False}),
    "pug-spar": ("swap-obj", {"world": "synthetic"}),
    "whatsup-coco-spatial": ("relation", {"subset": lambda r: "one" if len(r["objects"]) == 2 else "two"}),
    "whatsup-gqa-spatial": ("relation", {"subset": lambda r: "one" if len(r["objects"]) == 2 else "two"}),
    "crepe-productivity": (
        "order",
        {"foil_type": "swap", "complexity": lambda r: len(r["objects"]),
         "foil_complexity": lambda r: f"swap/{len(r['objects']):02d}"},
    ),
}  # fmt: skip
SUGARCREPE = {  # SugarCrepe's subsets: the family of each
    "add_att": "add", "add_obj": "add", "replace_att": "replace", "replace_obj": "object",
    "replace_rel": "relation", "swap_att": "swap-att", "swap_obj": "swap-obj",
}  # fmt: skip
RETRIEVAL = ("coco-retrieval", "flickr-retrieval")
CLASSIFICATION = {  # classes: an object's colour, its shape, or both
    "cifar10": ("colour", "a photo of a {} shape."),
    "cifar100": ("shape", "a photo of a {}."),
    "imagenetv2": ("both", "a photo of a {}."),
}
TRAINING = {"coco-train": 0, "cc3m-train": 1}  # the world's training records, by image index parity


def names() -> list[str]:
    return sorted([*EVAL, "sugarcrepe", *RETRIEVAL, *CLASSIFICATION, *TRAINING])


def build(
    source: str,
    out: str,
    errors: RowErrors,
    seed: str = "0",
    train_scenes: str = "2000",
    eval_scenes: str = "300",
    **kw,
) -> BuildReport:
    from ..synthetic.world import build_world

    name = kw.pop("as", "")
    if kw:
        raise ManifestError(f"paper-standin: unknown options {sorted(kw)}")
    if name not in names():
        raise ManifestError(f"paper-standin: as={name!r}; give one of {', '.join(names())}")
    paths = build_world(source, seed=int(seed), train_scenes=int(train_scenes), eval_scenes=int(eval_scenes))
    family = lambda fam: pq.read_table(paths[f"eval-{fam}"]).to_pylist()
    meta = {"stand_in": f"synthetic world {source} (seed {seed})", "as": name}
    if name in TRAINING:
        rows = [r for r in pq.read_table(paths["training"]).to_pylist() if _index(r["image"]) % 2 == TRAINING[name]]
        return write_records(out, rows, "training", name, _report(rows), {**meta, "stand_in_for": "training"})
    if name in EVAL:
        fam, columns = EVAL[name]
        rows = [_row(r, columns) for r in family(fam)]
        return write_records(out, rows, "candidates", name, _report(rows), {**meta, "family": fam})
    if name == "sugarcrepe":
        rows = [
            {**r, "record_id": f"{subset}/{r['record_id']}", "subset": subset}
            for subset, fam in SUGARCREPE.items()
            for r in family(fam)
        ]
        return write_records(out, rows, "candidates", name, _report(rows), {**meta, "subsets": SUGARCREPE})
    if name in RETRIEVAL:
        return _retrieval(out, name, [r for fam in ("swap-att", "relation", "order") for r in family(fam)], meta)
    return _classification(out, name, os.path.join(source, "images"), int(seed), meta)


def _index(image: str) -> int:
    return int(os.path.splitext(os.path.basename(image))[0])


def _row(r: dict, columns: dict) -> dict:
    return {**r, **{k: v(r) if callable(v) else v for k, v in columns.items()}}


def _report(rows: list[dict]) -> BuildReport:
    return BuildReport(len(rows), len({r["image"] for r in rows}))


def _retrieval(out: str, name: str, records: list[dict], meta: dict) -> BuildReport:
    """An image with the gold captions its records describe it by (as Karpathy's test split
    holds five per image)."""
    import pyarrow as pa

    captions: dict[str, list[str]] = {}
    for r in records:
        caps = captions.setdefault(r["image"], [])
        caps += [r["captions"][r["gold"]]] * (r["captions"][r["gold"]] not in caps)
    rows = [{"image": image, "captions": caps} for image, caps in sorted(captions.items())]
    report = BuildReport(len(rows), len(rows), {"captions": sum(len(c) for c in captions.values())})
    write_manifest(out, pa.Table.from_pylist(rows), "retrieval", {"benchmark": name, **meta})
    return report


def _classification(out: str, name: str, image_root: str, seed: int, meta: dict) -> BuildReport:
    """One-object scenes rendered under IMAGES/standin-NAME/, labelled by colour, shape or both."""
    from ..synthetic.world import COLOURS, SHAPES, Obj, render
    from ._zeroshot import write_classification

    by, template = CLASSIFICATION[name]
    classes = {"colour": list(COLOURS), "shape": list(SHAPES)}.get(by) or [f"{c} {s}" for c in COLOURS for s in SHAPES]
    folder = os.path.join(image_root, f"standin-{name}")
    os.makedirs(folder, exist_ok=True)
    rng, paths, labels = random.Random(f"{seed}:standin:{name}"), [], []
    for i in range(2 * len(classes)):
        o = Obj(rng.choice(SHAPES), rng.choice(list(COLOURS)), rng.choice(("small", "large")), (1, 1))
        label = {"colour": o.colour, "shape": o.shape}.get(by) or f"{o.colour} {o.shape}"
        paths.append(f"standin-{name}/{i:05d}.png")
        render([o], rng).save(os.path.join(image_root, paths[-1]))
        labels.append(classes.index(label))
    report = write_classification(out, name, None, labels, classes, [template], paths)
    _add_meta(out, meta)
    return report


def _add_meta(path: str, meta: dict) -> None:
    from ..manifest import Manifest

    m = Manifest.read(path)
    write_manifest(path, m.table, m.kind, {**m.meta, **meta})


BENCHMARK = Benchmark(
    name="paper-standin",
    title="Synthetic stand-ins for the paper's benchmarks and training sources",
    kind="stand-ins",  # its manifests are scored as the benchmark each stands in for
    build=build,
    scoring=None,
    options={
        "as": f"the paper benchmark or training source it stands in for ({', '.join(names())})",
        "seed": "world seed (default 0)",
        "train_scenes": "the world's training scenes (default 2000)",
        "eval_scenes": "the world's evaluation scenes (default 300)",
    },
)
