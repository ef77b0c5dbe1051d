"""NegBench, multiple-choice task (m1k2zoo/negbench; Alhamoud et al., CVPR 2025): each
record an image and four captions, one right, of three templates (positive, negative:
"no X", hybrid: "X but not Y"). Read from the user's folder of the evaluation CSVs
(datasets.md: data/images/, from the authors' Google Drive), every one of
COCO_val_mcq_llama3.1_rephrased.csv, VOC2007_mcq_llama3.1_rephrased.csv and
synthetic_mcq_llama3.1_rephrased.csv present, each a subset; columns as
benchmarks/src/training/data.py `CsvMCQDataset` reads them: image_path, caption_0 ...
caption_3, correct_answer, correct_answer_template. datasets.md has users rewrite
image_path to their own folders: option `image_prefix` names the leading part to remove
so that the rest is a path under extract's --image-root (rows not under it refused).

Score, per subset, as benchmarks/src/evaluation/mcq.py `evaluate_model` computes it:
`torch.argmax` over the four image-caption cosines (a tie goes to the first maximal
caption) equal to correct_answer; total_accuracy pooled over the file's records; the
accuracy per correct_answer_template beside it, within the file (the release evaluates
each CSV on its own: `file_template`, "coco hybrid", ...). The paper reports each file;
flowclip's one number is the mean over the files present, and its per-template figures
pooled over every file (`template`) are ours, named so."""

import os

from .base import Benchmark, BuildReport, ManifestError, RowErrors, Scoring, read_csv, strip_prefix, write_records

FILES = {
    "coco": "COCO_val_mcq_llama3.1_rephrased.csv",
    "voc2007": "VOC2007_mcq_llama3.1_rephrased.csv",
    "synthetic": "synthetic_mcq_llama3.1_rephrased.csv",
}
COLUMNS = ("image_path", *(f"caption_{i}" for i in range(4)), "correct_answer", "correct_answer_template")


def _row(path: str, subset: str, line: int, rec, prefix: str, errors: RowErrors) -> dict | None:
    where = f"line {line}"
    if not isinstance(rec, dict) or any(c not in rec for c in COLUMNS):
        errors(path, where, f"expected the columns {', '.join(COLUMNS)}")
        return None
    caps = [rec[f"caption_{i}"] for i in range(4)]
    if any(not c.strip() for c in caps):
        errors(path, where, "an empty caption")
        return None
    if rec["correct_answer"] not in ("0", "1", "2", "3"):
        errors(path, where, f"correct_answer {rec['correct_answer']!r:.40} is not 0-3")
        return None
    image = strip_prefix([rec["image_path"]], prefix, path, where, errors)
    if image is None:
        return None
    return {"record_id": f"{subset}/{line}", "image": image[0], "captions": caps,
            "gold": int(rec["correct_answer"]), "template": rec["correct_answer_template"], "subset": subset,
            "file_template": f"{subset} {rec['correct_answer_template']}", "_at": f"{path}: {where}"}  # fmt: skip


def build(source: str, out: str, errors: RowErrors, image_prefix: str = "") -> BuildReport:
    present = {s: os.path.join(source, f) for s, f in FILES.items() if os.path.isfile(os.path.join(source, f))}
    if not present:
        raise ManifestError(f"{source}: none of {', '.join(FILES.values())} (datasets.md: data/images/)")
    rows, counts = [], {}
    for subset, path in present.items():
        mine = [r for line, rec in read_csv(path) if (r := _row(path, subset, line, rec, image_prefix, errors))]
        rows += mine
        counts[subset] = len(mine)
    report = BuildReport(len(rows), len({r["image"] for r in rows}), counts, errors.skipped)
    report.notes.append(f"subsets read: {', '.join(present)}")
    return write_records(out, rows, "candidates", "negbench-mcq", report)


BENCHMARK = Benchmark(
    name="negbench-mcq",
    title="NegBench MCQ (COCO, VOC2007, synthetic; accuracy per template)",
    kind="candidates",
    build=build,
    scoring=Scoring(
        task="candidates",
        tie_rule="first",
        aggregate="subset_mean",
        group_by="subset",
        report_by=("file_template", "template"),
        report_titles=(
            ("file_template", "per file and template (as released: each CSV's accuracies)"),
            ("template", "per template, pooled over the files (ours, not the release's)"),
        ),
    ),  # fmt: skip
    options={"image_prefix": "the leading part of image_path to remove (the rest: a path under --image-root)"},
)
