"""Hard positives (amitakamath/hard_positives; Kamath et al., "The Hard Positive Truth about
Vision-Language Compositionality", ECCV 2024): each record an image, its original caption
c, a hard positive c_p (a caption that still describes it, e.g. "strolling" for
"walking") and a hard negative c_n. Read from a checkout of the repository: data/<file>
holds (image, c, c_n) and swapped_data/<file> (image, c_p, c_n), record by record (the
two lists aligned by position, as run_eval.py pairs them), each entry {image_id,
true_caption, false_caption, image_path}; three subsets: swap
(visual_genome_attribution.json, SWAP), replace_att (vl_checklist_attributes.json) and
replace_rel (vl_checklist_relations.json, REPLACE). The image root is the folder the release
runs in (the checkout), and each subset's images are where its dataset class reads them
(dataset_zoo/aro_datasets.py): SWAP's `VG_Attribution` opens <root_dir>/images/<image_path>
(root_dir "data") and crops it to the record's bbox_x, bbox_y, bbox_w, bbox_h, as ARO does;
REPLACE's `VL_Checklist_Attribute` / `VL_Checklist_Relation` open image_path as it is, uncropped.

Score, as run_eval.py `main` computes it, every comparison strict (a tie is wrong):
**original** s(c) > s(c_n) (`orig_acc`), **hard positive** s(c_p) > s(c_n) (`mod_acc`),
and **augmented** s(c_n) below both s(c) and s(c_p) (the count it prints first, "(c, c'')
> c'"), per subset. The paper's Tab. 1 reports SWAP and REPLACE (the mean of its two
subsets); flowclip's headline is the augmented test's mean over SWAP and REPLACE (ours).
Read through the paraphrase engine: positives [c, c_p], negative c_n."""

import os

from .base import Benchmark, BuildReport, ManifestError, RowErrors, Scoring, load_json, text_field, write_records

FILES = {
    "swap": "visual_genome_attribution.json",
    "replace_att": "vl_checklist_attributes.json",
    "replace_rel": "vl_checklist_relations.json",
}
KEYS = ("true_caption", "false_caption", "image_path")


def _entries(path: str, errors: RowErrors) -> list:
    data = load_json(path)
    if not isinstance(data, list):
        raise ManifestError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
    return data


def _subset(source: str, subset: str, errors: RowErrors) -> list[dict]:
    orig_path, hp_path = (os.path.join(source, d, FILES[subset]) for d in ("data", "swapped_data"))
    orig, hp = _entries(orig_path, errors), _entries(hp_path, errors)
    if len(orig) != len(hp):
        raise ManifestError(
            f"{hp_path}: {len(hp)} records, {orig_path} {len(orig)}: run_eval.py pairs them by position"
        )
    rows = []
    for i, (a, b) in enumerate(zip(orig, hp)):
        fa = [text_field(a, k, orig_path, f"record {i}", errors) for k in KEYS]
        fb = [text_field(b, k, hp_path, f"record {i}", errors) for k in KEYS]
        if None in fa or None in fb:
            continue
        box = _box(a, orig_path, i, errors) if subset == "swap" else None
        if subset == "swap" and (box is None or _box(b, hp_path, i, errors) != box):
            if box is not None:
                errors(hp_path, f"record {i}", f"its bbox differs from {orig_path}'s record {i}")
            continue
        if fa[1:] != fb[1:]:
            errors(hp_path, f"record {i}", f"its image or hard negative differs from {orig_path}'s record {i}")
            continue
        row: dict = {"record_id": f"{subset}/{i}", "image": fa[2], "positives": [fa[0], fb[0]], "negative": fa[1],
               "subset": subset, "_at": f"{hp_path}: record {i}"}  # fmt: skip
        if subset == "swap":  # VG_Attribution: <root_dir>/images/<image_path>, cropped to the box
            row.update(image=f"data/images/{fa[2]}", crop=box)
        rows.append(row)
    return rows


def _box(rec: dict, path: str, i: int, errors: RowErrors) -> list[float] | None:
    """A SWAP record's bbox_x, bbox_y, bbox_w, bbox_h (PIL's crop box is x, y, x + w, y + h)."""
    try:
        return [float(rec[k]) for k in ("bbox_x", "bbox_y", "bbox_w", "bbox_h")]
    except (KeyError, TypeError, ValueError):
        errors(path, f"record {i}", "missing or non-numeric bbox_x/bbox_y/bbox_w/bbox_h (VG_Attribution crops to it)")
        return None


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    rows, counts = [], {}
    for subset in FILES:
        mine = _subset(source, subset, errors)
        rows += mine
        counts[subset] = len(mine)
    report = BuildReport(len(rows), len({r["image"] for r in rows}), counts, errors.skipped)
    report.notes.append(
        f"image root: the checkout ({source}), as the release runs: SWAP's images under data/images/ (cropped "
        f"to their boxes), REPLACE's at their image_path"
    )
    return write_records(out, rows, "paraphrases", "hard-positives", report)


BENCHMARK = Benchmark(
    name="hard-positives",
    title="Hard positives (SWAP, REPLACE; original, hard positive, augmented)",
    kind="paraphrases",
    build=build,
    scoring=Scoring(
        task="paraphrases", tie_rule="wrong", aggregate="group_means", group_by="subset",
        groups=(("SWAP", ("swap",)), ("REPLACE", ("replace_att", "replace_rel"))), group_weighting="groups",
        headline_groups=("SWAP", "REPLACE"),
        metric_names=(("ITT", "augmented"), ("Image-P1-Neg", "original"), ("Image-P2-Neg", "hard positive")),
        text_only_test=False,
    ),
)  # fmt: skip
