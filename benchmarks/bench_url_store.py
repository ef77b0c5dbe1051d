"""A store at a URL against the same store on the local disk : a train-head run
(its load and its epochs) from the URL through a warm chunk cache against the same run from
the disk, and a cold read's throughput (an empty cache: every object fetched).

    python benchmarks/bench_url_store.py [--images 2048] [--epochs 1] [--reps 5] [--placement device]

The URL is s3:// on moto's S3 server, started here on the loopback address (the test extra
installs it): a stand-in for a real service, in this process, so the cold figure is a
floor set by that Python server, not a cloud's throughput. Features are random unit FP16
rows at ViT-B/32's shapes (d 512, 49 patches, 14 tokens a caption; labelled synthetic),
two captions an image. The sides alternate run by run (ABAB); each ratio is the median of
the per-pair ratios with their min-max; speed ratios are disk time / URL time (1.0: as fast).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
import uuid

os.environ.setdefault("HF_HUB_OFFLINE", "1")


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _synthetic import synthetic_store  # noqa: E402
from _timing import alternate, ratio  # noqa: E402


def build(root: str, n: int) -> tuple[str, str]:
    """A disk store of n images and 2n captions, and a training manifest over them."""
    import pyarrow as pa

    from flowclip_cache.hashing import caption_key
    from flowclip_cache.manifest import write_manifest

    ikeys = [caption_key(f"img{i}") for i in range(n)]
    texts = [f"{kind} {i}" for i in range(n) for kind in ("gold", "foil")]
    fs = synthetic_store(os.path.join(root, "disk"), ikeys, [caption_key(t) for t in texts])
    man = os.path.join(root, "train.parquet")
    rows = [
        {"record_id": f"r{i}", "image": f"img{i}", "image_key": ikeys[i], "positive": f"gold {i}",
         "negatives": [f"foil {i}"], "split": "val" if i % 10 == 0 else "train"}
        for i in range(n)
    ]  # fmt: skip
    write_manifest(man, pa.Table.from_pylist(rows), "training")
    return fs.root, man


def s3_server() -> str:
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False).start()
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=endpoint, FSSPEC_S3_ENDPOINT_URL=endpoint,
    )  # fmt: skip
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench")
    return "s3://bench/store"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--placement", default="device", choices=["device", "host", "store"])
    a = ap.parse_args()
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    from flowclip_cache.store import CAPTION, IMAGE, FeatureStore
    from flowclip_cache.store.cache import ChunkCache
    from flowclip_cache.store.sync import sync
    from flowclip_cache.training.loop import TrainConfig, train_head

    with tempfile.TemporaryDirectory() as root:
        disk, man = build(root, a.images)
        url = s3_server()
        sync(disk, url, log=lambda *_: None)
        size = FeatureStore(disk).size_on_disk()
        cfg = TrainConfig(head="flow", epochs=a.epochs, batch_size=32, lr=1e-3, train_eval_records=64)
        warm = os.path.join(root, "cache")

        def train(store_of):
            def run():
                out = os.path.join(root, "runs", uuid.uuid4().hex)
                train_head(store_of(), man, out, cfg, placement=a.placement, progress=False, log=lambda *_: None)

            return run

        t = alternate(
            {
                "disk": train(lambda: FeatureStore(disk)),
                "url": train(lambda: FeatureStore(url, cache=ChunkCache(warm, 1 << 40))),
            },
            a.reps,
        )
        med, lo, hi = ratio(t["disk"], t["url"])
        print(f"store: {a.images} images, {2 * a.images} captions, {size / 2**20:.0f} MiB (synthetic ViT-B/32 shapes)")
        print(
            f"train-head ({a.epochs} epoch, placement {a.placement}): disk {statistics.median(t['disk']):.2f} s, "
            f"URL with a warm cache {statistics.median(t['url']):.2f} s; speed URL/disk {med:.3f} "
            f"(min {lo:.3f}, max {hi:.3f}; {a.reps} pairs)"
        )
        ik, ck = FeatureStore(disk).keys(IMAGE), FeatureStore(disk).keys(CAPTION)

        def load(store):
            store.load_images(ik), store.load_captions(ck)

        cold, local, fetched = [], [], 0
        for _ in range(a.reps):  # ABAB: a cold read (an empty cache each time), then the disk's
            fresh = ChunkCache(os.path.join(root, f"cold-{uuid.uuid4().hex}"), 1 << 40)
            t0 = time.perf_counter()
            store = FeatureStore(url, cache=fresh)
            load(store)
            cold.append(time.perf_counter() - t0)
            fetched = fresh.fetched
            t0 = time.perf_counter()
            load(FeatureStore(disk))
            local.append(time.perf_counter() - t0)
        med, lo, hi = ratio(local, cold)
        print(
            f"cold read (open + every feature, {fetched / 2**20:.0f} MiB fetched): "
            f"{fetched / 2**20 / statistics.median(cold):.0f} MiB/s from moto's server on the loopback; "
            f"disk (page cache) {statistics.median(local):.2f} s; speed URL/disk {med:.3f} (min {lo:.3f}, max {hi:.3f})"
        )


if __name__ == "__main__":
    main()
