"""EqBen (Wangt-CN/EqBen; Wang et al., ICCV 2023): groups of two video frames (or
generated images) and two captions, in seven subsets. The annotation of each subset is
read as the loader class of its src/eqben/eqben_utils.py reads it, from
<source>/<subset>.json (the subset names of evaluate_eqben_locally.py's
SUBSET_LENGTH_INFO):

    eqbenag           {video: {subject: [frame_info]}}, caption0/1 lists: the first (EqBenAG)
    eqbenyoucook2     {video: [frame_info]}, images .npy BGR frames (EqBenYoucook2)
    eqbengebc         {video: [frame_info]} (EqBenGEBC)
    eqbenkubric_loc / eqbenkubric_attr / eqbenkubric_cnt, eqbensd   [frame_info] (EqBenKubric, EqBenSD)

frame_info: image0, image1 (paths under the image root), caption0, caption1. A subset
whose file is absent is left out and named. Score: text, image and group per subset, by
cal_wino_score (strict `>`). Headline: vl_compo's EqBen figure, the mean of the group
score over ag, youcook2, gebc, kubric (the mean of its three parts) and sd (derived from
vl_compo's results.csv: docs/method.md)."""

import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, load_json, write_records

SUBSETS = ("eqbenag", "eqbenyoucook2", "eqbengebc", "eqbenkubric_loc", "eqbenkubric_attr", "eqbenkubric_cnt", "eqbensd")


def _frames(subset: str, data, path: str, errors: RowErrors) -> list[tuple[str, dict]]:
    """(where, frame_info) in the loader class's order."""
    if subset == "eqbenag":
        if not isinstance(data, dict):
            errors(path, "top level", "expected {video: {subject: [frame_info]}}")
            return []
        return [
            (f"{v}/{s}[{k}]", f)
            for v, subjects in data.items()
            for s, frames in (subjects.items() if isinstance(subjects, dict) else [])
            for k, f in enumerate(frames)
        ]
    if subset in ("eqbenyoucook2", "eqbengebc"):
        if not isinstance(data, dict):
            errors(path, "top level", "expected {video: [frame_info]}")
            return []
        return [(f"{v}[{k}]", f) for v, frames in data.items() for k, f in enumerate(frames)]
    if not isinstance(data, list):
        errors(path, "top level", "expected a list of frame_info")
        return []
    return [(f"[{k}]", f) for k, f in enumerate(data)]


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    rows, counts, missing = [], {}, []
    for subset in SUBSETS:
        path = os.path.join(source, f"{subset}.json")
        if not os.path.exists(path):
            missing.append(subset)
            continue
        n = 0
        for where, f in _frames(subset, load_json(path), path, errors):
            try:
                caps = [f["caption0"], f["caption1"]]
                if subset == "eqbenag":  # "only use the first caption in the caption list"
                    caps = [caps[0][0], caps[1][0]]
                images = [f["image0"], f["image1"]]
            except (KeyError, IndexError, TypeError) as e:
                errors(path, where, f"unreadable frame_info ({type(e).__name__}: {e})")
                continue
            if not all(isinstance(x, str) and x.strip() for x in caps + images):
                errors(path, where, "an empty or non-text caption or image path")
                continue
            rows.append({"record_id": f"{subset}/{n}", "images": images, "captions": caps, "subset": subset})
            n += 1
        counts[subset] = n
    report = BuildReport(len(rows), len({p for r in rows for p in r["images"]}), counts, errors.skipped)
    if missing:
        report.notes.append(f"no annotation file for {', '.join(missing)} (expected <subset>.json): left out")
    return write_records(out, rows, "groups", "eqben", report)


BENCHMARK = Benchmark(
    name="eqben",
    title="EqBen (7 subsets; text, image, group per subset)",
    kind="groups",
    build=build,
    scoring=Scoring(
        task="groups",
        tie_rule="wrong",
        aggregate="group_means",
        group_by="subset",
        groups=(
            ("ag", ("eqbenag",)),
            ("youcook2", ("eqbenyoucook2",)),
            ("gebc", ("eqbengebc",)),
            ("kubric", ("eqbenkubric_loc", "eqbenkubric_attr", "eqbenkubric_cnt")),
            ("sd", ("eqbensd",)),
        ),
        headline_groups=("ag", "youcook2", "gebc", "kubric", "sd"),
    ),
)
