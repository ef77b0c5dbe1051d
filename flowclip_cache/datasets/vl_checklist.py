"""VL-CheckList (om-ai-lab/VL-CheckList; Zhao et al., 2022): read from a user's checkout
(its repository has no licence file: flowclip ships none of its data). corpus/v1/<type>/
<source>.yaml names each annotation file (ANNO_PATH, under the checkout) and its image
folder (IMG_ROOT); a file is a list of [image, {"POS": [...], "NEG": [...]}].

As vl_checklist/data_loader.py's load_itc_samples and evaluate.py's `itc` task read it:
a record whose image is missing is skipped (here: counted per file and reported), then
the first MAX_NUM/2 records of each file are kept (configs/sample.yaml: MAX_NUM 2000);
each record compares its first POS with its first NEG (strict: a tie is wrong). Accuracy
per file, rounded to 4 decimals as evaluate.py writes it (total_acc = round(accuracy, 4));
each of the 13 categories as radar.py's generate_chart averages those rounded figures
(the mean over its sources of the mean over each source's files); vl_compo's column is the mean of Object (6
categories), Attribute (5) and Relation (2): the score, means of means down kind >
category > source > file."""

import os

from ..manifest import image_path_problem
from .base import Benchmark, BuildReport, RowErrors, Scoring, load_json, write_records

MAX_NUM = 2000  # configs/sample.yaml


def _corpus(source: str) -> list[tuple[str, str, str]]:
    """(type, source name, yaml path) of every corpus/v1 entry, sorted."""
    root = os.path.join(source, "corpus", "v1")
    if not os.path.isdir(root):
        from ..errors import ManifestError

        raise ManifestError(f"{source}: no corpus/v1 folder (--source is a VL-CheckList checkout)")
    out = []
    for folder, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if f.endswith(".yaml"):
                out.append((os.path.relpath(folder, root).replace(os.sep, "/"), f[:-5], os.path.join(folder, f)))
    return out


def _pair(rec, path: str, i: int, errors: RowErrors):
    """(image, first POS, first NEG) of one record, or None (reported)."""
    ok = isinstance(rec, list) and len(rec) == 2 and isinstance(rec[0], str) and isinstance(rec[1], dict)
    texts = rec[1] if ok else {}
    pos, neg = texts.get("POS"), texts.get("NEG")
    if not ok or not (isinstance(pos, list) and pos and isinstance(neg, list) and neg):
        errors(path, f"record {i}", 'expected [image, {"POS": [caption, ...], "NEG": [caption, ...]}]')
        return None
    if not all(isinstance(t, str) and t.strip() for t in (pos[0], neg[0])):
        errors(path, f"record {i}", "empty or non-text first POS or NEG caption")
        return None
    return rec[0], pos[0], neg[0]


def build(source: str, out: str, errors: RowErrors, images: str | None = None, max_num: str = str(MAX_NUM)):
    from ..config import load_yaml
    from ..errors import ManifestError

    if not images or not os.path.isdir(images):
        raise ManifestError(
            "vl-checklist: --option images=<folder> (holding each corpus entry's IMG_ROOT, e.g. vg/, swig/, "
            "hake/) is needed: the official loader keeps only the records whose image exists, then the first "
            "MAX_NUM/2 of each file" + (f"; {images} is not a folder" if images else "")
        )
    if not str(max_num).isdigit() or int(max_num) < 2:
        raise ManifestError(f"vl-checklist: max_num {max_num!r} must be a whole number >= 2")
    keep = int(int(max_num) / 2)  # evaluate.py: d.data[name][:int(max_number/2)]
    rows, counts, missing, seen = [], {}, {}, set()
    for kind_path, name, yml in _corpus(source):
        cfg = load_yaml(yml)
        if not isinstance(cfg.get("ANNO_PATH"), str) or not isinstance(cfg.get("IMG_ROOT"), str):
            raise ManifestError(f"{yml}: needs ANNO_PATH and IMG_ROOT (text)")
        anno = os.path.join(source, cfg["ANNO_PATH"])
        if os.path.commonpath([os.path.realpath(anno), os.path.realpath(source)]) != os.path.realpath(source):
            raise ManifestError(f"{yml}: ANNO_PATH {cfg['ANNO_PATH']!r} leads outside the checkout {source}")
        file = f"{kind_path.replace('/', '_')}_{name}"  # corpus.json's names: Object_Size_large_vg_obj
        kept, gone = 0, 0
        for i, rec in enumerate(load_json(anno)):
            pair = _pair(rec, anno, i, errors)
            if pair is None:
                continue
            image = os.path.normpath(os.path.join(cfg["IMG_ROOT"], pair[0])).replace(os.sep, "/")
            problem = image_path_problem(image)
            if problem:  # (an image is looked for under the image root only)
                errors(anno, f"record {i}", f"image {image[:120]!r} {problem}")
                continue
            if not os.path.exists(os.path.join(images, image)):
                gone += 1
                continue
            if kept == keep:  # (the rest still checked, so every missing image is counted)
                continue
            rows.append({"record_id": f"{file}/{i}", "image": image, "captions": [pair[1], pair[2]], "gold": 0,
                         "kind": kind_path.split("/")[0], "category": "_".join(kind_path.split("/")[:3]),
                         "source": name.split("_")[0], "file": file})  # fmt: skip
            seen.add(image)
            kept += 1
        counts[file], missing[file] = kept, gone
    report = BuildReport(len(rows), len(seen), counts, errors.skipped)
    report.notes.append(
        f"records whose image is missing under {images}, skipped as the official loader skips them: "
        f"{sum(missing.values())} (" + ", ".join(f"{f} {n}" for f, n in missing.items() if n) + ")"
        if any(missing.values())
        else f"every record's image found under {images} (before the first {keep} of each file were kept)"
    )
    return write_records(out, rows, "candidates", "vl-checklist", report, {"missing_images": missing})


BENCHMARK = Benchmark(
    name="vl-checklist",
    title="VL-CheckList (itc; 13 categories, Object / Attribute / Relation)",
    kind="candidates",
    build=build,
    scoring=Scoring(
        task="pairwise",
        tie_rule="wrong",
        aggregate="nested",
        group_by="file",
        nest=("kind", "category", "source", "file"),
        finest_digits=4,  # evaluate.py's total_acc = round(accuracy, 4), which radar.py averages
    ),  # fmt: skip
    options={
        "images": "the folder holding each corpus entry's IMG_ROOT (vg/, swig/, hake/, ...); required",
        "max_num": f"the config's MAX_NUM: the first MAX_NUM/2 records of each file are kept (default {MAX_NUM})",
    },
)
