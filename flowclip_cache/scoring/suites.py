"""Named lists of benchmarks scored as one (`flowclip score --suite NAME`): which
manifests of the folders given belong to the suite, which members are absent (no
manifest, or no features in the store) and why, and the suite's table: each member's
figure and the mean over the members present, the members named.

    paper     the paper's Tab. 2: its 11 tasks under the paper's column names (ARO's four,
              SugarCrepe's Swap-A and Swap-O, ABC, CLEVR, PUG:SPAR, COCO- and GQA-Spatial);
              the suite's mean is the paper's "Avg. (11 tasks)"
    field     the paper's benchmarks and the field's image-choice and group tasks
    vl-compo  vl_compo's columns (ytaek-oh/vl_compo results.csv), each read as that file
              derives it from its individual_results.csv (docs/method.md): the 12
              compositional ones, whose mean is its comp_avg; COCO's and Flickr30k's R@1 each
              way, with i2t_avg and t2i_avg their means; imagenet; and 21_tasks_avg, the
              mean of ELEVATER's 21 zero-shot sets (datasets/elevater.py)

A member is (column, benchmark, figure): figure "score" is the benchmark's official
score; "metrics/<m>/score" a group task's text, image or group figure under the benchmark's
aggregation. A column several benchmarks make (vl_compo's ARO: its four subsets) is
the mean of their figures, named so."""

from __future__ import annotations

import numpy as np

from ..datasets._elevater import VL_COMPO_TASKS
from ..errors import FlowclipError

FIELD = [
    (b, b, "score")
    for b in (
        "sugarcrepe", "aro-vg-relation", "aro-vg-attribution", "aro-coco-order", "aro-flickr-order",
        "whatsup-controlled-a", "whatsup-controlled-b", "whatsup-coco-spatial", "whatsup-gqa-spatial",
        "crepe-productivity", "abc6k", "pug-spar", "clevr-binding", "winoground", "eqben", "colorswap", "mmvp-vlm",
        "bivlc", "imagecode", "spec-i2t", "spec-t2i", "cola-multiobj", "valse", "sugarcrepe-pp",
        "vl-checklist", "svo-probes", "crepe-systematicity",
        "naturalbench", "vismin", "hard-positives", "negbench-mcq", "negbench-retrieval",
        "countercurate", "countercurate-counting", "sdci-matching", "sdci-negatives",  # 2024-26
    )
]  # fmt: skip
VL_COMPO = [
    ("aro", "aro-vg-relation", "score"),
    ("aro", "aro-vg-attribution", "score"),
    ("aro", "aro-coco-order", "score"),
    ("aro", "aro-flickr-order", "score"),
    ("colorswap", "colorswap", "metrics/group/score"),
    ("crepe", "crepe-productivity", "by_foil_type/atom"),  # R@1 per foil type pooled over complexities; their mean
    ("crepe", "crepe-productivity", "by_foil_type/swap"),
    ("crepe", "crepe-productivity", "by_foil_type/negate"),
    ("eqben", "eqben", "score"),
    ("imagecode", "imagecode", "score"),
    ("mmvp_vlm", "mmvp-vlm", "metrics/group/score"),
    ("sugarcrepe", "sugarcrepe", "score"),
    ("svo_probes", "svo-probes", "score"),
    ("valse", "valse", "score"),
    ("vl_checklist", "vl-checklist", "score"),
    ("whatsup", "whatsup-controlled-a", "score"),  # the mean of six: A, B and each one/two-object subset
    ("whatsup", "whatsup-controlled-b", "score"),
    ("whatsup", "whatsup-coco-spatial", "by_subset/one"),
    ("whatsup", "whatsup-coco-spatial", "by_subset/two"),
    ("whatsup", "whatsup-gqa-spatial", "by_subset/one"),
    ("whatsup", "whatsup-gqa-spatial", "by_subset/two"),
    ("winoground", "winoground", "metrics/group/score"),
    ("coco_i2t", "coco-retrieval", "i2t_R@1"),
    ("coco_t2i", "coco-retrieval", "t2i_R@1"),
    ("flickr_i2t", "flickr-retrieval", "i2t_R@1"),
    ("flickr_t2i", "flickr-retrieval", "t2i_R@1"),
    ("imagenet", "elevater-imagenet-1k", "score"),
    *(("21_tasks_avg", f"elevater-{t}", "score") for t in VL_COMPO_TASKS),
]
VL_COMPO_RECOGNITION = ("coco_i2t", "coco_t2i", "flickr_i2t", "flickr_t2i", "imagenet", "21_tasks_avg")
PAPER = [
    ("VG-R", "aro-vg-relation", "score"), ("VG-A", "aro-vg-attribution", "score"),
    ("COCO Order", "aro-coco-order", "score"), ("Flickr Order", "aro-flickr-order", "score"),
    ("Swap-A", "sugarcrepe", "named_groups/Swap-A"), ("Swap-O", "sugarcrepe", "named_groups/Swap-O"),
    ("ABC", "abc6k", "score"), ("CLEVR", "clevr-binding", "score"), ("PUG:SPAR", "pug-spar", "score"),
    ("COCO-Spatial", "whatsup-coco-spatial", "score"), ("GQA-Spatial", "whatsup-gqa-spatial", "score"),
]  # fmt: skip
SUITES = {"paper": PAPER, "field": FIELD, "vl-compo": VL_COMPO}
# a suite's means: name -> the columns averaged (default: "mean" over every column). vl_compo's
# comp_avg (here "mean") is over its compositional columns alone, i2t_avg and t2i_avg over R@1
MEANS = {
    "vl-compo": {
        "mean": [c for c in dict.fromkeys(c for c, _, _ in VL_COMPO) if c not in VL_COMPO_RECOGNITION],
        "i2t_avg": ["coco_i2t", "flickr_i2t"],
        "t2i_avg": ["coco_t2i", "flickr_t2i"],
    }
}


def means(name: str) -> dict[str, list[str]]:
    return MEANS.get(name, {"mean": list(dict.fromkeys(c for c, _, _ in members(name)))})


def members(name: str) -> list[tuple[str, str, str]]:
    if name not in SUITES:
        raise FlowclipError(f"--suite {name!r}: no such suite; known: {', '.join(SUITES)}")
    return SUITES[name]


def select(
    name: str, manifests: list, registered: set[str], store=None, image_root=None
) -> tuple[list, dict[str, str]]:
    """The manifests (Manifest objects) that are members of the suite and whose features
    the store holds, and each absent member with its reason."""
    from ..store.layout import IMAGE
    from ..store.manifest_keys import image_keys
    from .manifest_specs import task_of

    wanted = {b for _, b, _ in members(name)}
    chosen, absent, have = [], {}, set()
    for m in manifests:
        task = task_of(m)
        if task not in wanted:
            continue
        have.add(task)
        keys = image_keys(store, m, image_root) if store is not None else []
        if store is not None and (None in keys or not all(store.has(IMAGE, [k for k in keys if k], full=False))):
            absent[task] = f"no features in the store for {m.path} (run extract)"
        else:
            chosen.append(m)
    for b in sorted(wanted - have):
        known = b in registered or (b.startswith("elevater-") and "elevater" in registered)
        absent[b] = "no manifest among those given" if known else "not yet in flowclip (no converter)"
    return chosen, absent


def figure(result: dict, path: str) -> float | None:
    """The figure at `path`, or None: absent, or not a finite number (an official rule with
    nothing to aggregate scores NaN; a suite counts it missing rather than averaging it)."""
    v: object = result
    for part in path.split("/"):
        v = v.get(part) if isinstance(v, dict) else None
    return v if isinstance(v, float) and np.isfinite(v) else None


def suite_table(name: str, results: dict, absent: dict[str, str]) -> dict:
    """{control|run: {column: {value, members, missing}}, "mean": ...} for each scorer."""
    out = {}
    for key, per_task in results.items():
        cols: dict[str, dict] = {}
        for col, bench, path in members(name):
            c = cols.setdefault(col, {"values": [], "members": [], "missing": []})
            v = figure(per_task.get(bench, {}), path) if bench not in absent else None
            label = bench if path == "score" else f"{bench}:{path}"
            if v is None:
                c["missing"].append(label)
            else:
                c["values"].append(v)
                c["members"].append(label)
                if per_task[bench].get("partial"):  # a member resting on part of its records
                    c.setdefault("partial", []).append(bench)
        row = {
            col: {
                "value": float(np.mean(c["values"])) if c["values"] and not c["missing"] else None,
                "members": c["members"],
                "missing": c["missing"],
                "partial": sorted(set(c.get("partial", []))),
            }
            for col, c in cols.items()
        }
        for mean, over in means(name).items():
            parts = {c: row[c] for c in over}
            present = [r["value"] for r in parts.values() if r["value"] is not None]
            row[mean] = {
                "value": float(np.mean(present)) if present else None,
                "members": [c for c, r in parts.items() if r["value"] is not None],
                "missing": [c for c, r in parts.items() if r["value"] is None],
                "partial": sorted({b for r in parts.values() if r["value"] is not None for b in r["partial"]}),
            }
        out[key] = row
    return out


def breakdown_rows(name: str, results: dict, absent: dict[str, str]) -> tuple[list[str], list[list]]:
    """(scorer keys, rows) of the suite's breakdown table, Real images: per member present,
    each figure its results hold besides the headline (text/image/group, and every
    by_<column> value), as fractions; one column per scorer."""
    keys = [k for k in results if k.startswith("real|")]
    rows = []
    for bench in dict.fromkeys(b for _, b, _ in members(name)):
        if bench in absent:
            continue
        first = next((results[k][bench] for k in keys if bench in results[k]), None)
        if first is None:
            continue
        paths = [(f"{m}", f"metrics/{m}/score") for m in first.get("metrics", {})]
        paths += [(f"{col[3:]}={g}", f"{col}/{g}") for col, v in first.items() if col.startswith("by_") for g in v]
        for label, path in paths:
            rows.append([bench, label] + [_at(results[k].get(bench, {}), path) for k in keys])
    return keys, rows


def _at(result: dict, path: str):
    head, _, rest = path.partition("/")
    v = result.get(head)
    if "/" in rest and head == "metrics":
        m, _, leaf = rest.partition("/")
        v = v.get(m, {}).get(leaf) if isinstance(v, dict) else None
    elif rest:
        v = v.get(rest) if isinstance(v, dict) else None
    return v if isinstance(v, float) else None
