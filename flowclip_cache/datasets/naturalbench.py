"""NaturalBench, retrieval form (Li et al., NeurIPS 2024; BaiqiL/NaturalBench on the Hugging
Face hub, NaturalBench-Retrieval.zip): groups of two natural images and two captions,
each image's own caption known. Read from the user's unzipped copy, the folder
NaturalBench-Retrieval (or the folder holding it) with metadata.json, a list of
{index, image_0, image_1, caption_0, caption_1} whose image names are files under
NaturalBench-Retrieval/images: that folder's parent, NaturalBench-Retrieval, is the image
root (manifest images are images/<name>). As Baiqi-Li/NaturalBench naturalbench_retrieval.py
`NaturalBench_Retrieval.__getitem__` asserts, each entry's index is its position.

Score: text, image and group, pooled, as naturalbench_retrieval.py `get_retrieval_acc`
computes them (text: c0_i0 > c1_i0 and c1_i1 > c0_i1; image: c0_i0 > c0_i1 and c1_i1 >
c1_i0; strict, a tie is wrong), its scores laid out [group, image, caption] as
`get_retrieval_scores` reads them; the headline is group."""

import os

from .base import Benchmark, BuildReport, ManifestError, RowErrors, Scoring, load_json, plain_id, write_records

FIELDS = ("index", "image_0", "image_1", "caption_0", "caption_1")


def _folder(source: str) -> str:
    for d in (source, os.path.join(source, "NaturalBench-Retrieval")):
        if os.path.isfile(os.path.join(d, "metadata.json")):
            return d
    raise ManifestError(
        f"{source}: no metadata.json here or in NaturalBench-Retrieval/ (unzip NaturalBench-Retrieval.zip)"
    )


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    folder = _folder(source)
    path = os.path.join(folder, "metadata.json")
    data = load_json(path)
    if not isinstance(data, list):
        raise ManifestError(f"{path}: expected a JSON list of groups, got {type(data).__name__}")
    rows: list[dict] = []
    for pos, rec in enumerate(data):
        where = f"entry {pos}"
        if not isinstance(rec, dict) or any(k not in rec for k in FIELDS):
            errors(path, where, f"not an object with {', '.join(FIELDS)}")
            continue
        if rec["index"] != pos:
            errors(path, where, f"index {rec['index']!r} is not its position (the release's loader asserts it)")
            continue
        texts = [rec[k] for k in ("image_0", "image_1", "caption_0", "caption_1")]
        if not all(isinstance(t, str) and t.strip() for t in texts):
            errors(path, where, "image_0, image_1, caption_0 and caption_1 must be non-empty text")
            continue
        rid = plain_id(rec["index"], f"{path}: {where}")
        rows.append({"record_id": rid, "images": [f"images/{texts[0]}", f"images/{texts[1]}"],
                     "captions": texts[2:], "_at": f"{path}: {where}"})  # fmt: skip
    report = BuildReport(len(rows), len({p for r in rows for p in r["images"]}), {}, errors.skipped)
    report.notes.append(f"image root: {folder} (the folder holding images/)")
    return write_records(out, rows, "groups", "naturalbench", report)


BENCHMARK = Benchmark(
    name="naturalbench",
    title="NaturalBench, retrieval form (groups; text, image, group)",
    kind="groups",
    build=build,
    scoring=Scoring(task="groups", tie_rule="wrong"),
)
