"""SVO-Probes (google-deepmind/svo_probes; Hendricks and Nematzadeh, 2021): svo_probes.csv,
each row a sentence with a positive image and a negative one that differs in its subject,
verb or object (columns sentence, pos_image_id, neg_image_id, subj_neg, verb_neg,
obj_neg; pos_url / neg_url). Images are web URLs (image_urls.txt): the converter takes a
folder of the images the user could fetch, each named by its id (<image_id>.<any
extension>), and skips a record whose image is absent, counting it (never guessed).

Two rules, each labelled:
  pairwise (the score): the sentence scores its positive image above its negative
      (strict), per negative type, as CLIP-style evaluations (vl_compo) report it; the
      one number is the mean of the three types, vl_compo's column;
  official (probing_image_text_models.ipynb, `accuracy`): a match decision per (sentence,
      image); positive accuracy (positives judged a match), negative accuracy (negatives
      judged no match) over the distinct pairs, and their mean; only for a scorer that
      declares a match threshold (decisions: match when the score is > t).
Either way the notebook keeps the rows with exactly one negative type."""

import os

import numpy as np

from .base import Benchmark, BuildReport, RowErrors, Scoring, read_csv, text_field, write_records

TYPES = ("subj_neg", "verb_neg", "obj_neg")
TRUE, FALSE = ("true", "1"), ("false", "0")


def notebook_accuracy(pos: np.ndarray, neg: np.ndarray, sentence, pos_id, neg_id) -> dict:
    """The notebook's `accuracy(frame)`: decisions (1 = match) of the positive and negative
    pairs, each counted once per distinct (sentence, image) pair (its drop_duplicates)."""
    ps = {(s, i): d for s, i, d in zip(sentence, pos_id, pos)}
    ns = {(s, i): d for s, i, d in zip(sentence, neg_id, neg)}
    pos_acc = float(np.mean([d == 1 for d in ps.values()])) if ps else float("nan")
    neg_acc = float(np.mean([d == 0 for d in ns.values()])) if ns else float("nan")
    return {"acc": (pos_acc + neg_acc) / 2, "pos_acc": pos_acc, "neg_acc": neg_acc, "pairs": len(ps) + len(ns)}


def threshold_figures(s_pos: np.ndarray, s_neg: np.ndarray, threshold: float, cols: dict) -> dict:
    pos, neg = (s_pos > threshold).astype(int), (s_neg > threshold).astype(int)
    kind = np.asarray(cols["neg_type"]).astype(str)
    keys = [np.asarray(cols[c]).astype(str) for c in ("caption", "pos_image_id", "neg_image_id")]
    out = {"pooled": notebook_accuracy(pos, neg, *keys)}
    out["by_neg_type"] = {t: notebook_accuracy(pos[kind == t], neg[kind == t], *(k[kind == t] for k in keys))
                          for t in TYPES if (kind == t).any()}  # fmt: skip
    return out


def _flag(v, path, line, col, errors: RowErrors):
    s = str(v).strip().lower()
    if s in TRUE or s in FALSE:
        return s in TRUE
    errors(path, f"line {line}", f"{col} {v!r} is not True or False")
    return None


def _image_files(images: str, path: str) -> dict[str, list[str]]:
    from ..errors import ManifestError

    if not images or not os.path.isdir(images):
        raise ManifestError(
            "svo-probes: --option images=<folder> is needed: the images you fetched from image_urls.txt, each "
            "named by its id (<image_id>.jpg, .png, ...)" + (f"; {images} is not a folder" if images else "")
        )
    by_id: dict[str, list[str]] = {}
    for f in sorted(os.listdir(images)):
        by_id.setdefault(os.path.splitext(f)[0], []).append(f)
    return by_id


def build(source: str, out: str, errors: RowErrors, images: str | None = None) -> BuildReport:
    path = source if os.path.isfile(source) else os.path.join(source, "svo_probes.csv")
    files = _image_files(images or "", path)
    rows: list[dict] = []
    absent, counts = 0, {t: 0 for t in TYPES + ("more than one type",)}
    for line, rec in read_csv(path):
        if not isinstance(rec, dict):
            errors(path, f"line {line}", "wrong number of fields")
            continue
        sentence = text_field(rec, "sentence", path, f"line {line}", errors)
        ids = [str(rec.get(c, "")).strip() for c in ("pos_image_id", "neg_image_id")]
        flags = [_flag(rec.get(t), path, line, t, errors) for t in TYPES]
        if sentence is None or None in flags or not all(ids):
            if sentence is not None and None not in flags:
                errors(path, f"line {line}", "empty pos_image_id or neg_image_id")
            continue
        if not all(i in files for i in ids):
            absent += 1
            continue
        twice = next((i for i in ids if len(files[i]) > 1), None)
        if twice is not None:  # never guessed: which of two files is the image?
            errors(path, f"line {line}", f"two files for image id {twice} ({', '.join(files[twice])}); keep one")
            continue
        single = sum(flags) == 1  # the notebook keeps the rows with exactly one negative type
        kind = TYPES[flags.index(True)] if single else "more than one type"
        counts[kind] += 1
        ids_cols = {"pos_image_id": ids[0], "neg_image_id": ids[1]}
        rows.append({"record_id": f"line{line}", "images": [files[i][0] for i in ids], "caption": sentence, "gold": 0,
                     "neg_type": kind, "excluded": not single, **ids_cols})  # fmt: skip
    report = BuildReport(len(rows), len({p for r in rows for p in r["images"]}), counts, errors.skipped)
    report.notes.append(
        f"{absent} records skipped: an image not among those under {images} (each named by its id); "
        f"{counts['more than one type']} kept but outside the score (more than one negative type, as the notebook)"
    )
    return write_records(out, rows, "image_candidates", "svo-probes", report, {"absent_images": absent})


BENCHMARK = Benchmark(
    name="svo-probes",
    title="SVO-Probes (pairwise per negative type; the notebook's accuracy where a threshold is declared)",
    kind="image_candidates",
    build=build,
    scoring=Scoring(
        task="image_candidates",
        tie_rule="wrong",
        aggregate="macro",
        group_by="neg_type",
        exclude_column="excluded",
        threshold_figures=threshold_figures,
        threshold_title="pos_acc, neg_acc, acc (probing_image_text_models.ipynb; needs a match threshold)",
    ),
    options={"images": "the folder of the images fetched from image_urls.txt, named <image_id>.<ext>; required"},
)
