"""The synthetic world's image-choice and group stand-ins as benchmarks
(flowclip_cache/synthetic/contrasts.py). `--source` is the world folder: a default world is
generated there first if absent (an existing world, of any settings, is used as it is),
then its contrast sets."""

from __future__ import annotations

import os

from .base import Benchmark, BuildReport, RowErrors, Scoring, copy_manifest


def contrast_benchmark(which: str, title: str, kind: str, scoring: Scoring) -> Benchmark:
    def build(
        source: str, out: str, errors: RowErrors, seed: str = "0", train_scenes: str = "2000", eval_scenes: str = "300"
    ) -> BuildReport:
        import json

        import pyarrow.parquet as pq

        from ..synthetic.contrasts import build_contrasts, contrast_count
        from ..synthetic.world import build_world

        done = os.path.join(source, "WORLD_DONE")
        if not os.path.exists(done):  # (a world of any settings is used as it is)
            build_world(source, seed=int(seed), train_scenes=int(train_scenes), eval_scenes=int(eval_scenes))
        # contrast sets already there are used as they are; new ones are sized by the world's evaluation scenes
        there = os.path.exists(os.path.join(source, "CONTRASTS_DONE"))
        n = None if there else contrast_count(int(json.load(open(done)).get("eval_scenes", eval_scenes)))
        paths = build_contrasts(source, seed=int(seed), n=n)
        src = paths[f"eval-{which}"]
        copy_manifest(src, out)
        t = pq.read_table(src)
        column = "images" if "images" in t.column_names else "image"
        images = {p for ps in t.column(column).to_pylist() for p in (ps if isinstance(ps, list) else [ps])}
        return BuildReport(t.num_rows, len(images), notes=[f"images under {paths['image_root']}"])

    return Benchmark(
        name=f"synthetic-{which}",
        title=title,
        kind=kind,
        build=build,
        scoring=scoring,
        options={
            "seed": "world seed (default 0)",
            "train_scenes": "the world's training scenes, when it is built here (default 2000)",
            "eval_scenes": "its evaluation scenes (default 300); a third as many groups, 20 at least",
        },
    )
