"""CIFAR-100 test set from the official binary version (cifar-100-binary: test.bin with
a coarse and a fine label byte per record; fine_label_names.txt). Fine labels."""

import os

from ._zeroshot import read_cifar_binary, templates_option, write_classification
from .base import Benchmark, RowErrors, Scoring, read_text


def build(source: str, out: str, errors: RowErrors, templates: str = ""):
    images, labels = read_cifar_binary(os.path.join(source, "test.bin"), 2, 1, 100)
    classes = [
        c.strip().replace("_", " ")
        for c in read_text(os.path.join(source, "fine_label_names.txt")).split("\n")
        if c.strip()
    ]
    return write_classification(out, "cifar100", images, labels, classes, templates_option(templates))


BENCHMARK = Benchmark(
    name="cifar100",
    title="CIFAR-100 zero-shot",
    kind="classification",
    build=build,
    scoring=Scoring(task="classification", recall_at=(1, 5)),
    options={"templates": "prompt templates separated by '|' (default: 'a photo of a {}.')"},
)
