"""VisMin (mair-lab/vismin-bench on the Hugging Face hub; Awal et al., 2024): 2,084 groups
of two images and two captions that differ by one minimal change, in four categories
(object 579, attribute 294, counting 589, relation 622: rabiulcste/vismin
vismin-bench/solutions/vqa_solution.csv). Read from the user's copy of the dataset
(save_to_disk, as vismin-bench/eval.py loads it, or the hub's Parquet files), split
"test", fields id, text_0, text_1, image_0, image_1, category (the fields eval.py reads);
the embedded images go to images_out as vismin-<row>-<0|1> (names flowclip makes). The
release's `id` restarts in every category (vqa_solution.csv: ids 0.. per category), so a
record is keyed by both: record_id "<category>/<id>", and `flowclip export --format
vismin-csv` writes the id and the category apart again.

Score: text, image and group per category as rabiulcste/vismin vismin-bench/metric.py
`compute_contrastive_accuracy` computes them (text: T0_I0 > T1_I0 and T1_I1 > T0_I1;
image: T0_I0 > T0_I1 and T1_I1 > T1_I0; strict, a tie is wrong), unrounded (the release
rounds each to two decimals of a percent). The release prints the four categories only;
the headline here, group, is their unweighted mean (flowclip's summary of its table)."""

from ._groups import build_groups
from .base import Benchmark, BuildReport, RowErrors, Scoring


def build(source: str, out: str, errors: RowErrors, images_out: str | None = None) -> BuildReport:
    return build_groups(
        source, out, errors, name="vismin", what="VisMin (mair-lab/vismin-bench)", split="test",
        images_out=images_out, count_by="category",
        columns=("id", "text_0", "text_1", "image_0", "image_1", "category"),
        row=lambda i, r: ((r["category"], r["id"]), [r["image_0"], r["image_1"]], [r["text_0"], r["text_1"]],
                          {"category": str(r["category"])}),
    )  # fmt: skip


BENCHMARK = Benchmark(
    name="vismin",
    title="VisMin (2,084 groups in 4 categories; text, image, group)",
    kind="groups",
    build=build,
    scoring=Scoring(task="groups", tie_rule="wrong", aggregate="macro", group_by="category"),
    options={"images_out": "a new folder for the images the dataset embeds (then extract's --image-root)"},
)
