"""CREPE systematicity (RAIVNLab/CREPE, data/syst_hard_negatives.zip): for a pretraining
set (cc12m, yfcc, laion: the README says to evaluate only models pretrained on one of
them), syst_vg_hard_negs_<split>_in_<set>.csv for split seen_compounds and
unseen_compounds, columns image_id, caption, x, y, width, height and
valid_hard_negs_{atom,comp,combined} (Python-literal lists, read with ast.literal_eval).

As crepe_compo_eval_open_clip.py evaluates it (gather_params, evaluate): each row's image
cropped to (x, y, width, height) (TF.crop: top y, left x) retrieves among [caption] + the
row's valid hard negatives of one type; R@1, 3, 5, 10 (get_one2many_metrics) per (split,
type) file. A row with no valid negative of a type ranks its caption first: counted right,
as the official ranking of one candidate does (the build report counts them). Ties: the
gold first (torch.argsort keeps index 0 ahead of foils it ties, up to 16 candidates, as for
productivity). The one number is flowclip's: the unweighted mean of the six files' R@1."""

import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, read_csv, write_records
from .crepe_productivity import crepe_row

SETS = ("cc12m", "yfcc", "laion")
SPLITS = ("seen_compounds", "unseen_compounds")
TYPES = ("atom", "comp", "combined")


def build(source: str, out: str, errors: RowErrors, train_dataset: str = "") -> BuildReport:
    from ..errors import ManifestError

    if train_dataset not in SETS:
        raise ManifestError(
            f"crepe-systematicity: --option train_dataset= one of {', '.join(SETS)} (the set the model was "
            f"pretrained on: seen and unseen compounds are defined against it); got {train_dataset!r}"
        )
    rows, counts, alone = [], {}, {}
    for split in SPLITS:
        path = os.path.join(source, f"syst_vg_hard_negs_{split}_in_{train_dataset}.csv")
        records = read_csv(path)
        for kind in TYPES:
            file = f"{split}/{kind}"
            counts[file] = alone[file] = 0
            for line, rec in records:
                row = crepe_row(rec, path, line, f"valid_hard_negs_{kind}", errors, allow_none=True)
                if row is None:
                    continue
                image, caption, box, negs = row
                rows.append({"record_id": f"{file}/{line}", "image": f"{image}.jpg", "crop": box,
                             "captions": [caption] + negs, "gold": 0, "split": split, "hard_neg_type": kind,
                             "file": file})  # fmt: skip
                counts[file] += 1
                alone[file] += not negs
    report = BuildReport(len(rows), len({r["image"] for r in rows}), counts, errors.skipped)
    report.notes.append(
        "records with no valid hard negative (their caption alone: counted right, as the official ranking "
        "counts them): " + ", ".join(f"{f} {n}" for f, n in alone.items())
    )
    meta = {"train_dataset": train_dataset, "without_negatives": alone}
    return write_records(out, rows, "candidates", "crepe-systematicity", report, meta)


BENCHMARK = Benchmark(
    name="crepe-systematicity",
    title="CREPE systematicity (seen / unseen compounds; R@1, 3, 5, 10)",
    kind="candidates",
    build=build,
    scoring=Scoring(
        task="candidates",
        tie_rule="first",
        aggregate="macro",
        group_by="file",
        report_by=("file",),
        recall_at=(1, 3, 5, 10),
    ),  # fmt: skip
    options={"train_dataset": f"the model's pretraining set, one of {', '.join(SETS)}; required"},
)
