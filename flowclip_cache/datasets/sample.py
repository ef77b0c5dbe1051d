"""The generated sample (flowclip_cache.synthetic.sample): two coloured shapes per image, the
gold caption against its colour swap. Offline, for the demo and the tests."""

from ..synthetic.sample import make_sample
from .base import Benchmark, BuildReport, RowErrors, Scoring


def build(source: str, out: str, errors: RowErrors, images: str = "200", seed: str = "0") -> BuildReport:
    """source: the folder to generate into; out is unused beyond the report (the
    sample writes its own candidate and training manifests under source)."""
    paths = make_sample(source, n_images=int(images), seed=int(seed))
    import os
    import shutil

    if os.path.abspath(out) != os.path.abspath(paths["candidates"]):
        shutil.copyfile(paths["candidates"], out)
    return BuildReport(int(images), int(images), {"subset": "swap_att"})


BENCHMARK = Benchmark(
    name="sample",
    title="Generated sample (colour swaps of two shapes)",
    kind="candidates",
    build=build,
    scoring=Scoring(task="pairwise", tie_rule="wrong", group_by="subset"),
    options={"images": "number of scenes (default 200)", "seed": "generator seed (default 0)"},
)
