"""BiVLC (imirandam/BiVLC on the Hugging Face hub; Miranda et al., NeurIPS 2024 D&B):
2,933 test instances, each a COCO 2017 val image with its caption, a SugarCrepe negative
caption and an image generated from it. Read from the user's copy (save_to_disk or the
hub's Parquet files), split "test", fields image, caption, negative_caption,
negative_image, type, subtype; the embedded images go to images_out as
bivlc-<row>-0 (image) / bivlc-<row>-1 (negative_image).

Score: as IMirandaM/BiVLC's `evaluate_BiVLC` (src/CLIP_fine_tuning/CLIP_utils.py) counts
it, every comparison strict: Ipos_2T (the image prefers its caption), Ineg_2T (the
negative image prefers the negative caption), Tpos_2I, Tneg_2I (each caption prefers its
own image), I2T = both image-to-text, T2I = both text-to-image, group = all four; per
type (replace, swap, add) as main_evaluation_BiVLC.py prints them, and per subtype."""

from ._groups import build_groups
from .base import Benchmark, BuildReport, RowErrors, Scoring


def build(source: str, out: str, errors: RowErrors, images_out: str | None = None) -> BuildReport:
    return build_groups(
        source, out, errors, name="bivlc", what="BiVLC (imirandam/BiVLC)", split="test", images_out=images_out,
        count_by="type", columns=("image", "caption", "negative_caption", "negative_image"),
        row=lambda i, r: (str(i), [r["image"], r["negative_image"]], [r["caption"], r["negative_caption"]],
                          {"type": str(r.get("type", "")), "subtype": str(r.get("subtype", ""))}),
    )  # fmt: skip


BENCHMARK = Benchmark(
    name="bivlc",
    title="BiVLC (2,933 test instances; I2T, T2I, group)",
    kind="groups",
    build=build,
    scoring=Scoring(
        task="groups",
        tie_rule="wrong",
        report_by=("type", "subtype"),
        sub_scores=True,
        metric_names=(
            ("text", "I2T"),
            ("image", "T2I"),
            ("group", "group"),
            ("text_0", "Ipos_2T"),
            ("text_1", "Ineg_2T"),
            ("image_0", "Tpos_2I"),
            ("image_1", "Tneg_2I"),
        ),
    ),
    options={"images_out": "a new folder for the images the dataset embeds (then extract's --image-root)"},
)
