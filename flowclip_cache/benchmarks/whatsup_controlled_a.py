"""What's Up Controlled-A: controlled_images_dataset.json, a JSON list of {image_path,
caption_options: [gold, 3 foils]}; candidate set of 4, gold must rank first."""
import os

from ._whatsup import controlled_rows
from .base import Benchmark, BuildReport, RowErrors, Scoring, write_records


def build(source: str, out: str, errors: RowErrors) -> BuildReport:
    path = source if os.path.isfile(source) else os.path.join(source, "controlled_images_dataset.json")
    rows = controlled_rows(path, errors, "controlled-a/")
    return write_records(out, rows, "candidates", "whatsup-controlled-a",
                         BuildReport(len(rows), len({r["image"] for r in rows}), {}, errors.skipped))


BENCHMARK = Benchmark(
    name="whatsup-controlled-a", title="What's Up Controlled-A", kind="candidates", build=build,
    scoring=Scoring(task="candidates", tie_rule="correct", report_by=("preposition",)))
