"""ImageNetV2 (matched-frequency): class-index folders 0..999 of images. Class names
are the ones open_clip ships (open_clip.zero_shot_metadata.IMAGENET_CLASSNAMES)."""

import os

from ._zeroshot import templates_option, write_classification
from .base import Benchmark, RowErrors, Scoring


def build(source: str, out: str, errors: RowErrors, templates: str = ""):
    from open_clip.zero_shot_metadata import IMAGENET_CLASSNAMES

    paths, labels = [], []
    for d in sorted(os.listdir(source), key=lambda x: (not x.isdigit(), int(x) if x.isdigit() else 0, x)):
        full = os.path.join(source, d)
        if not os.path.isdir(full):
            continue
        if not d.isdigit() or int(d) >= len(IMAGENET_CLASSNAMES):
            errors(source, d, "not a class-index folder (0..999)")
            continue
        for f in sorted(os.listdir(full)):
            paths.append(f"{d}/{f}")
            labels.append(int(d))
    return write_classification(
        out, "imagenetv2", None, labels, list(IMAGENET_CLASSNAMES), templates_option(templates), image_paths=paths
    )


BENCHMARK = Benchmark(
    name="imagenetv2",
    title="ImageNetV2 zero-shot",
    kind="classification",
    build=build,
    scoring=Scoring(task="classification", recall_at=(1, 5)),
    options={"templates": "prompt templates separated by '|' (default: 'a photo of a {}.')"},
)
