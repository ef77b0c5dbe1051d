"""SugarCrepe++ (Sri-Harsha/scpp; Dumpala et al., NeurIPS 2024 Datasets and Benchmarks):
5 JSON files, each a list of {id, filename, caption, caption2, negative_caption} (4,757
records). caption and caption2 describe the image (P1, P2: paraphrases), negative_caption
does not (N). Images: COCO val2017, by file name.

Score (VLMs/test_Variants_CLIP.py, per file): ITT, the image scores P1 and P2 both above
N; Image-P1-Neg and Image-P2-Neg, each positive above N; TOT, sim(P1, P2) above sim(P1,
N) and sim(P2, N) (text only). Every comparison strict: a tie is wrong. The script
prints per file; flowclip's one number is the unweighted mean of the five files' ITT."""

import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, load_json, text_field, write_records

FILES = ("replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    rows, counts, images = [], {}, set()
    for subset in FILES:
        path = os.path.join(source, f"{subset}.json")
        data = load_json(path)
        if not isinstance(data, list):
            errors(path, "top level", "expected a list of records")
            continue
        kept = 0
        for i, rec in enumerate(data):
            where = f"record {i}"
            keys = ("caption", "caption2", "negative_caption", "filename")
            texts = [text_field(rec, k, path, where, errors) for k in keys]
            if None in texts:
                continue
            p1, p2, neg, fn = texts
            rid = rec.get("id", i)
            rows.append({"record_id": f"{subset}/{rid}", "image": fn, "positives": [p1, p2], "negative": neg,
                         "subset": subset, "_at": f"{path}: record {i}"})  # fmt: skip
            images.add(fn)
            kept += 1
        counts[subset] = kept
    report = BuildReport(len(rows), len(images), counts, errors.skipped)
    report.notes.append("images: COCO val2017, by file name under the image root")
    return write_records(out, rows, "paraphrases", "sugarcrepe-pp", report)


BENCHMARK = Benchmark(
    name="sugarcrepe-pp",
    title="SugarCrepe++ (5 files; ITT and TOT)",
    kind="paraphrases",
    build=build,
    scoring=Scoring(task="paraphrases", tie_rule="wrong", aggregate="subset_mean", group_by="subset"),
)
