"""A study grid trained side by side (each batch gathered once for every head of a seed)
against the same runs one after another; and the wall time of a whole synthetic grid.

    python benchmarks/bench_grid.py [--scenes 600] [--epochs 2] [--reps 3]

The two sides alternate repetition by repetition (each into fresh folders); the ratio is
the median of the per-repetition ratios with their min-max.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from safetensors.torch import load_file

from flowclip_cache.extraction.encoders import EncoderSpec, resolve
from flowclip_cache.extraction.extract import run_extract
from flowclip_cache.manifest import Manifest
from flowclip_cache.store import FeatureStore
from flowclip_cache.synthetic.world import build_world
from flowclip_cache.training.loop import TrainConfig, train_head, train_heads
from flowclip_cache.training.training_data import load_training_data

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternate, ratio  # noqa: E402

HEADS = {
    "global": dict(head="global", cimr=0.0),
    "global_cimr": dict(head="global", cimr=0.1),
    "flow_hnb": dict(head="flow", cimr=0.0),
    "flow_hnb_cimr": dict(head="flow", cimr=0.1),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenes", type=int, default=600)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--model", default="flowclip-tiny-clip")
    ap.add_argument("--pretrained", default="none")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        paths = build_world(
            f"{root}/world", train_scenes=args.scenes, eval_scenes=50, heldout_scenes=20, log=lambda *_: None
        )
        enc = resolve(EncoderSpec(args.model, args.pretrained))
        store = FeatureStore.open_or_create(f"{root}/store", enc.config)
        run_extract(store, enc, [paths["training"]], paths["image_root"], workers=0, progress=False)
        store.refresh()
        data = load_training_data(store, Manifest.read(paths["training"]), True, "cpu")
        cfgs = {k: TrainConfig(epochs=args.epochs, lr=1e-3, **v) for k, v in HEADS.items()}
        n_rec = int((data.split == "train").sum())
        print(
            f"# {args.model}, {n_rec} training records, {len(cfgs)} heads x 1 seed, {args.epochs} epochs, "
            f"batch 32, torch threads {torch.get_num_threads()}"
        )
        quiet = dict(data=data, progress=False, log=lambda *_: None)
        per_head: dict[str, list[float]] = {k: [] for k in cfgs}
        rep = itertools.count()

        def side_by_side():
            r = next(rep)
            train_heads(store, paths["training"], [(f"{root}/sbs{r}/{k}", c) for k, c in cfgs.items()], **quiet)

        def one_after_another():
            r = next(rep)
            for k, c in cfgs.items():
                t1 = time.perf_counter()
                train_head(store, paths["training"], f"{root}/one{r}/{k}", c, **quiet)
                per_head[k].append(time.perf_counter() - t1)

        t = alternate({"sbs": side_by_side, "one": one_after_another}, args.reps)
        weights = lambda folder, k: load_file(f"{root}/{folder}/{k}/head.safetensors")
        same = all(torch.equal(weights("sbs0", k)[n], weights("one1", k)[n]) for k in cfgs for n in weights("one1", k))
        med, lo, hi = ratio(t["one"], t["sbs"])
        print(
            f"grid       : side by side {statistics.median(t['sbs']):.1f} s | one after another "
            f"{statistics.median(t['one']):.1f} s | ratio {med:.2f}x [{lo:.2f}, {hi:.2f}] ({args.reps} alternated "
            f"repetitions) | identical weights: {same}"
        )
        print("one head   : " + ", ".join(f"{k} {statistics.median(v):.1f} s" for k, v in per_head.items()))


if __name__ == "__main__":
    main()
