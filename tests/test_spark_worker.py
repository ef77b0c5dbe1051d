"""The worker under Spark (docs/scale.md): the units shared out by `foreachPartition` on a
local Spark with task retries on, the task that holds the first image unit killed after its
first commit and retried by Spark; the store equals a one-process extract's bit for bit.

pyspark is not a test extra (a 456 MB download, and a Java 17 runtime): where it is not
installed the test says so. `pip install pyspark` runs it."""

from __future__ import annotations

import os

import pytest
from test_worker import same_store

from flowclip_cache.extraction.worker import extract_units, list_units

pyspark = pytest.importorskip(
    "pyspark", reason="pyspark is not installed (456 MB and a Java runtime, not a test extra): pip install pyspark"
)

KW = {"model": "flowclip-tiny-clip", "pretrained": "synthetic", "image_unit": 4, "caption_unit": 8}


def test_spark_partitions_with_a_killed_and_retried_task_give_one_process_store(tmp_path):
    from pyspark.sql import SparkSession

    from flowclip_cache.store import FeatureStore
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "sample"), n_images=10)
    manifests, root = [s["candidates"]], s["image_root"]
    one = str(tmp_path / "one")
    extract_units(one, manifests, list_units(one, manifests, image_root=root, **KW), image_root=root, **KW)
    store, marker = str(tmp_path / "spark"), str(tmp_path / "first-try")
    units = list_units(store, manifests, image_root=root, **KW)

    def encode(rows):  # docs/scale.md's function, dying once after its first commit
        share = [r.unit for r in rows]
        if "image-0" in share and not os.path.exists(marker):
            open(marker, "w").close()
            real = FeatureStore.write_segment

            def die_after(self, *a, **k):
                real(self, *a, **k)
                os._exit(137)

            FeatureStore.write_segment = die_after
        if share:
            extract_units(store, manifests, share, image_root=root, **KW)

    builder = SparkSession.builder.master("local[2,3]")  # 2 threads, a task tried up to 3 times
    spark = builder.config("spark.ui.enabled", "false").config("spark.python.worker.reuse", "false").getOrCreate()
    try:
        spark.createDataFrame([(u,) for u in units], ["unit"]).repartition(3).foreachPartition(encode)
    finally:
        spark.stop()
    assert os.path.exists(marker)  # the task did die once, and Spark ran it again
    assert list_units(store, manifests, image_root=root, **KW) == []
    same_store(FeatureStore(one), FeatureStore(store), s["candidates"])
