"""MMVP-VLM (tsb0601/MMVP; Tong et al., CVPR 2024; the Hugging Face dataset MMVP/MMVP_VLM):
Questions.csv (header, then rows qid, type, statement, paired by consecutive rows) and
the images "MLLM_VLM Images/<type of the pair's first row>/<qid>.jpg". Read as
scripts/evaluate_vlm.py's `benchmark_model` reads it: each statement prefixed
"a photo of ", a statement's own image the first of the pair when its qid is odd, else
the second; the pair's category assigned by row order (categories[pair // 15]).

Score: the official figure is the image direction (each statement picks its own image,
both right: "pair accuracy"), per category, a tie between the two images choosing the
second (`"img1" if p > 0.5 else "img2"`); its headline the mean over the 9 categories.
The text and group scores of the same 2x2 groups, under Winoground's strict rule, are
the split vl_compo reports (its MMVP-VLM figure is the mean of group over categories:
the vl-compo suite reads that one)."""

import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, read_csv, write_records

CATEGORIES = (
    "Orientation and Direction",
    "Presence of Specific Features",
    "State and Condition",
    "Quantity and Count",
    "Positional and Relational Context",
    "Color and Appearance",
    "Structural Characteristics",
    "Texts",
    "Viewpoint and Perspective",
)


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    path = os.path.join(source, "Questions.csv")
    lines = read_csv(path, header=False)[1:]  # the official reader skips the header and reads fields by position
    rows: list[dict] = []
    counts: dict[str, int] = {}
    for pair, k in enumerate(range(0, len(lines) - 1, 2)):  # an odd last row has no partner: dropped, as there
        (l1, r1), (l2, r2) = lines[k], lines[k + 1]
        try:
            (q1, type1, s1), (q2, _, s2) = r1, r2
            q1, q2 = int(q1), int(q2)
        except ValueError as e:
            errors(path, f"lines {l1}-{l2}", f"expected qid, type, statement with integer qids ({e})")
            continue
        if pair // 15 >= len(CATEGORIES):
            errors(path, f"lines {l1}-{l2}", f"pair {pair + 1}: beyond the 9 categories of 15 pairs the script assigns")
            continue
        own1, own2 = (0 if q1 % 2 == 1 else 1), (0 if q2 % 2 == 1 else 1)  # gt "img1" when the qid is odd
        if own1 == own2:
            errors(path, f"lines {l1}-{l2}", f"qids {q1} and {q2} name the same image as their own")
            continue
        caps = ["", ""]
        caps[own1], caps[own2] = "a photo of " + s1, "a photo of " + s2
        folder = f"MLLM_VLM Images/{type1}"
        cat = CATEGORIES[pair // 15]
        rows.append(
            {
                "record_id": f"{q1}-{q2}",
                "images": [f"{folder}/{q1}.jpg", f"{folder}/{q2}.jpg"],
                "captions": caps,
                "category": cat,
            }
        )
        counts[cat] = counts.get(cat, 0) + 1
    report = BuildReport(len(rows), len({p for r in rows for p in r["images"]}), counts, errors.skipped)
    report.notes.append("image root: the dataset folder holding 'MLLM_VLM Images'")
    return write_records(out, rows, "groups", "mmvp-vlm", report)


BENCHMARK = Benchmark(
    name="mmvp-vlm",
    title="MMVP-VLM (135 pairs, 9 categories; pair accuracy, with text/image/group)",
    kind="groups",
    build=build,
    scoring=Scoring(
        task="groups", tie_rule="second_image", aggregate="macro", group_by="category", headline_metric="image"
    ),
)
