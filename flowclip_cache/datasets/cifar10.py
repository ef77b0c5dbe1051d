"""CIFAR-10 test set from the official binary version (cifar-10-batches-bin:
test_batch.bin, batches.meta.txt). No pickle: the Python version is not read."""

import os

from ._zeroshot import read_cifar_binary, templates_option, write_classification
from .base import Benchmark, RowErrors, Scoring, read_text


def build(source: str, out: str, errors: RowErrors, templates: str = ""):
    images, labels = read_cifar_binary(os.path.join(source, "test_batch.bin"), 1, 0, 10)
    classes = [c.strip() for c in read_text(os.path.join(source, "batches.meta.txt")).split("\n") if c.strip()]
    return write_classification(out, "cifar10", images, labels, classes, templates_option(templates))


BENCHMARK = Benchmark(
    name="cifar10",
    title="CIFAR-10 zero-shot",
    kind="classification",
    build=build,
    scoring=Scoring(task="classification", recall_at=(1, 5)),
    options={"templates": "prompt templates separated by '|' (default: 'a photo of a {}.')"},
)
