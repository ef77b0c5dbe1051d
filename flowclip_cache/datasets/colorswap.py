"""ColorSwap (stanfordnlp/colorswap on the Hugging Face hub; Burapacheep et al., 2024):
groups of two images and two captions that swap a colour between two objects. Read
from the user's copy of the dataset (save_to_disk or the hub's Parquet files), split
"test" (300 groups), fields id, image_1, image_2, caption_1, caption_2; the embedded
images go to images_out as colorswap-<row>-<0|1> (names flowclip makes).

Score: text, image and group under Winoground's strict rule (the authors' evaluation
code was not available to read: their paper defines the three scores as Winoground's);
the headline is group, as vl_compo reports it."""

from ._groups import build_groups
from .base import Benchmark, BuildReport, RowErrors, Scoring


def build(source: str, out: str, errors: RowErrors, images_out: str | None = None) -> BuildReport:
    return build_groups(
        source, out, errors, name="colorswap", what="ColorSwap (stanfordnlp/colorswap)", split="test",
        images_out=images_out, columns=("id", "image_1", "image_2", "caption_1", "caption_2"),
        row=lambda i, r: (r["id"], [r["image_1"], r["image_2"]], [r["caption_1"], r["caption_2"]], {}),
    )  # fmt: skip


BENCHMARK = Benchmark(
    name="colorswap",
    title="ColorSwap (300 test groups; text, image, group)",
    kind="groups",
    build=build,
    scoring=Scoring(task="groups", tie_rule="wrong"),
    options={"images_out": "a new folder for the images the dataset embeds (then extract's --image-root)"},
)
