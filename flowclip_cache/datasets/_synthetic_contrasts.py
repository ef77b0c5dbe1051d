"""The synthetic world's image-choice and group stand-ins as benchmarks
(flowclip_cache/synthetic/contrasts.py). `--source` is the world folder: a default world is
generated there first if absent (an existing world, of any settings, is used as it is),
then its contrast sets."""

from __future__ import annotations

import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, copy_manifest


def contrast_benchmark(which: str, title: str, kind: str, scoring: Scoring) -> Benchmark:
    def build(source: str, out: str, errors: RowErrors, seed: str = "0") -> BuildReport:
        import pyarrow.parquet as pq

        from ..synthetic.contrasts import build_contrasts
        from ..synthetic.world import build_world

        if not os.path.exists(os.path.join(source, "WORLD_DONE")):  # (a world of any settings is used as it is)
            build_world(source, seed=int(seed))
        paths = build_contrasts(source, seed=int(seed))
        src = paths[f"eval-{which}"]
        copy_manifest(src, out)
        t = pq.read_table(src)
        images = {p for ps in t.column("images").to_pylist() for p in ps}
        return BuildReport(t.num_rows, len(images), notes=[f"images under {paths['image_root']}"])

    return Benchmark(
        name=f"synthetic-{which}",
        title=title,
        kind=kind,
        build=build,
        scoring=scoring,
        options={"seed": "world seed (default 0)"},
    )
