"""The synthetic world's evaluation families as benchmarks (flowclip_cache/synthetic/world.py).
`--source` is the world folder: it is generated there first if absent."""

from __future__ import annotations

from .base import Benchmark, BuildReport, RowErrors, Scoring, copy_manifest


def synthetic_benchmark(family: str, title: str, binding: bool) -> Benchmark:
    name = f"synthetic-{family}"

    def build(source: str, out: str, errors: RowErrors, seed: str = "0") -> BuildReport:
        import pyarrow.parquet as pq

        from ..synthetic.world import build_world

        paths = build_world(source, seed=int(seed))
        src = paths[f"eval-{family}"]
        copy_manifest(src, out)
        t = pq.read_table(src)
        return BuildReport(
            t.num_rows, len(set(t.column("image").to_pylist())), notes=[f"images under {paths['image_root']}"]
        )

    task = "candidates" if family == "order" else "pairwise"
    joins = (("synthetic", ""),) + ((("syn-binding", ""),) if binding else ())
    return Benchmark(
        name=name,
        title=title,
        kind="candidates",
        build=build,
        scoring=Scoring(task=task, tie_rule="wrong", joins=joins),
        options={"seed": "world seed (default 0)"},
    )
