"""NegBench, negated retrieval (m1k2zoo/negbench; Alhamoud et al., CVPR 2025): COCO val2017
images, each with captions that name what is in it and negate what is not ("a dog on a
sofa, no cat"). Read from the user's copy of COCO_val_negated_retrieval_llama3.1_rephrased_
affneg_true.csv (datasets.md: data/images/, from the authors' Google Drive), columns as
benchmarks/src/training/data.py `CsvImageCaptionDataset` reads them: filepath, and captions,
a Python list literal (read with ast.literal_eval, never evaluated as code: the release's
`eval` would run whatever a file holds). datasets.md has users rewrite filepath to their own
folders: option `image_prefix` names the leading part to remove so that the rest is a path
under extract's --image-root (rows not under it refused).

Score, as benchmarks/src/evaluation/retrieval.py `evaluate_model` computes it: the text x
image cosines, text-to-image recall@k (`image_retrieval_recall@k`, the figure NegBench
reports: a caption counts when its image is among `torch.topk(scores, k, dim=1)`'s k) and
image-to-text recall@k (`text_retrieval_recall@k`: an image counts when one of its captions
is among its top k); ties decided as torch.topk keeps them on CPU, for k = 1, 5 (and 10)."""

import ast
import os

from .base import Benchmark, BuildReport, ManifestError, RowErrors, Scoring, read_csv, strip_prefix, write_records

FILE = "COCO_val_negated_retrieval_llama3.1_rephrased_affneg_true.csv"


def _captions(value: str):
    try:
        caps = ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    ok = isinstance(caps, (list, tuple)) and caps and all(isinstance(c, str) and c.strip() for c in caps)
    return list(caps) if ok else None


def build(source: str, out: str, errors: RowErrors, image_prefix: str = "") -> BuildReport:
    path = source if os.path.isfile(source) else os.path.join(source, FILE)
    if not os.path.isfile(path):
        raise ManifestError(f"{source}: no {FILE} (datasets.md: data/images/)")
    rows = []
    for line, rec in read_csv(path):
        where = f"line {line}"
        if not isinstance(rec, dict) or "filepath" not in rec or "captions" not in rec:
            errors(path, where, "expected the columns filepath and captions")
            continue
        caps = _captions(rec["captions"])
        if caps is None:
            errors(path, where, "captions is not a list literal of non-empty texts")
            continue
        image = strip_prefix([rec["filepath"]], image_prefix, path, where, errors)
        if image is not None:
            rows.append({"image": image[0], "captions": caps, "_at": f"{path}: {where}"})
    captions = {"captions": sum(len(r["captions"]) for r in rows)}
    report = BuildReport(len(rows), len({r["image"] for r in rows}), captions, errors.skipped)
    return write_records(out, rows, "retrieval", "negbench-retrieval", report)


BENCHMARK = Benchmark(
    name="negbench-retrieval",
    title="NegBench negated retrieval (COCO val2017; recall@k both ways, ties as torch.topk keeps them)",
    kind="retrieval",
    build=build,
    scoring=Scoring(task="retrieval", tie_rule="topk", recall_at=(1, 5, 10)),
    options={"image_prefix": "the leading part of filepath to remove (the rest: a path under --image-root)"},
)
