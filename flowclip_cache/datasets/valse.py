"""VALSE (Heidelberg-NLP/VALSE; Parcalabescu et al., ACL 2022): 11 JSON files ("pieces")
{id: {image_file, caption, foil, mturk, dataset, ...}}, 8,782 records. Kept: the records
its README calls valid, `mturk.caption >= 2` (7,702), as lxmert_valse_eval.py keeps them.

Images: each piece's own dataset, under the image root by the record's `dataset` field
(IMAGE_FOLDERS): visual7w/, coco2017/, swig/, visdial/, coco-val2014/, then image_file.

Score: per piece, the pairwise accuracy acc_r (caption scored above its foil, strict: a
tie is wrong: lxmert_valse_eval.py's `cross_score[0, 1] > cross_score[1, 1]`); the
headline is vl_compo's VALSE column, the mean of the seven instruments, each the mean of
its pieces (existence, plurality, counting: 3 pieces, relations, actions: 2,
coreference: 2, foil-it). For a scorer that declares a match threshold, p_c, p_f and acc
as lxmert_valse_eval.py computes them (foil_detection); for others "not defined"."""

import os

import numpy as np

from ..manifest import image_path_problem
from .base import Benchmark, BuildReport, RowErrors, Scoring, load_json, pairwise_rows, text_field, write_records

PIECES = (
    "existence", "plurals", "counting-hard", "counting-small-quant", "counting-adversarial", "relations",
    "action-replacement", "actant-swap", "coreference-standard", "coreference-hard", "foil-it",
)  # fmt: skip
INSTRUMENTS = (
    ("existence", ("existence",)),
    ("plurality", ("plurals",)),
    ("counting", ("counting-hard", "counting-small-quant", "counting-adversarial")),
    ("relations", ("relations",)),
    ("actions", ("action-replacement", "actant-swap")),
    ("coreference", ("coreference-standard", "coreference-hard")),
    ("foil-it", ("foil-it",)),
)
IMAGE_FOLDERS = {
    "visual7w": "visual7w",
    "coco2017": "coco2017",
    "coco_2017": "coco2017",
    "SWiG": "swig",
    "VisDial_v1.0": "visdial",
    "FOIL dataset": "coco-val2014",
}
VALID = 2  # mturk.caption >= 2: at least two of three annotators chose the caption, not the foil


def foil_detection(s_caption: np.ndarray, s_foil: np.ndarray, threshold: float) -> dict:
    """lxmert_valse_eval.py's figures for a scorer with a match threshold t (LXMERT's is
    P(match) = 0.5, i.e. the two ITM logits equal): the caption fits when s > t (strict),
    the foil is detected when s <= t; a record whose foil scores exactly t is not counted
    (the script's `cross_score[1, 0] == cross_score[1, 1]` check); acc is the mean of p_c
    and p_f, acc_r the pairwise accuracy over the counted records."""
    skip = s_foil == threshold
    c, f = s_caption[~skip], s_foil[~skip]
    n = len(c)
    fits, detected = int((c > threshold).sum()), int((f <= threshold).sum())
    rate = lambda k: k / n if n else float("nan")  # noqa: E731
    return {
        "count": n,
        "skipped_foil_at_threshold": int(skip.sum()),
        "acc": rate(fits + detected) / 2,
        "p_c": rate(fits),
        "p_f": rate(detected),
        "acc_r": rate(int((c > f).sum())),
    }


def threshold_figures(s_caption: np.ndarray, s_foil: np.ndarray, threshold: float, cols: dict) -> dict:
    """foil_detection pooled over the kept records, and per piece."""
    piece = np.asarray(cols["piece"]).astype(str)
    out = {"pooled": foil_detection(s_caption, s_foil, threshold)}
    out["by_piece"] = {
        p: foil_detection(s_caption[piece == p], s_foil[piece == p], threshold) for p in np.unique(piece)
    }
    return out


def _valid(rec, path, where, errors: RowErrors) -> bool | None:
    votes = rec.get("mturk") if isinstance(rec, dict) else None
    n = votes.get("caption") if isinstance(votes, dict) else None
    if not isinstance(n, int) or isinstance(n, bool):
        errors(path, where, "missing or non-integer mturk.caption (the annotators' votes)")
        return None
    return n >= VALID


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    items, counts, images = [], {}, set()
    dropped: dict[str, int] = {}
    for piece in PIECES:
        path = os.path.join(source, f"{piece}.json")
        kept = 0
        for key, rec in load_json(path).items():
            where = f"record {key!r}"
            valid = _valid(rec, path, where, errors)
            if valid is None:
                continue
            if not valid:
                dropped[piece] = dropped.get(piece, 0) + 1
                continue
            texts = [text_field(rec, k, path, where, errors) for k in ("caption", "foil", "image_file")]
            folder = IMAGE_FOLDERS.get(rec.get("dataset"))
            if folder is None:
                errors(path, where, f"unknown dataset {rec.get('dataset')!r} (known: {', '.join(IMAGE_FOLDERS)})")
                continue
            if None in texts:
                continue
            gold, foil, fn = texts
            image = f"{folder}/{fn}"
            problem = image_path_problem(image)
            if problem:
                errors(path, where, f"image_file {image[:120]!r} {problem}")
                continue
            items.append((f"{piece}/{key}", image, gold, foil, {"piece": piece}))
            images.add(image)
            kept += 1
        counts[piece] = kept
    report = BuildReport(len(items), len(images), counts, errors.skipped)
    report.notes.append(
        "left out as VALSE's README says (mturk.caption < 2): "
        + ", ".join(f"{p} {n}" for p, n in dropped.items())
        + f"; {sum(dropped.values())} in all"
    )
    report.notes.append("images: " + ", ".join(f"{d} -> {f}/" for d, f in IMAGE_FOLDERS.items()))
    return write_records(out, pairwise_rows("", items), "candidates", "valse", report)


BENCHMARK = Benchmark(
    name="valse",
    title="VALSE (11 pieces, 7 instruments; pairwise acc_r)",
    kind="candidates",
    build=build,
    scoring=Scoring(
        task="pairwise",
        tie_rule="wrong",
        aggregate="group_means",
        group_by="piece",
        group_weighting="groups",
        groups=INSTRUMENTS,
        headline_groups=tuple(name for name, _ in INSTRUMENTS),
        threshold_figures=threshold_figures,
        threshold_title="p_c, p_f, acc (lxmert_valse_eval.py; needs a match threshold)",
    ),
)
