"""A study grid trained side by side (each batch gathered once for every head of a seed)
against the same runs one after another; and the wall time of a whole synthetic grid.

    python benchmarks/bench_grid.py [--scenes 600] [--epochs 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from safetensors.torch import load_file

from flowclip_cache.encoders import EncoderSpec, resolve
from flowclip_cache.extract import run_extract
from flowclip_cache.manifest import Manifest
from flowclip_cache.store import FeatureStore
from flowclip_cache.train import TrainConfig, train_head, train_heads
from flowclip_cache.training_data import load_training_data
from flowclip_cache.world import build_world

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
        t = time.perf_counter()
        train_heads(
            store,
            paths["training"],
            [(f"{root}/sbs/{k}", c) for k, c in cfgs.items()],
            data=data,
            progress=False,
            log=lambda *_: None,
        )
        t_sbs = time.perf_counter() - t
        per_head = {}
        t = time.perf_counter()
        for k, c in cfgs.items():
            t1 = time.perf_counter()
            train_head(store, paths["training"], f"{root}/one/{k}", c, data=data, progress=False, log=lambda *_: None)
            per_head[k] = time.perf_counter() - t1
        t_one = time.perf_counter() - t
        same = all(
            torch.equal(
                load_file(f"{root}/sbs/{k}/head.safetensors")[n], load_file(f"{root}/one/{k}/head.safetensors")[n]
            )
            for k in cfgs
            for n in load_file(f"{root}/one/{k}/head.safetensors")
        )
        print(
            f"grid       : side by side {t_sbs:.1f} s | one after another {t_one:.1f} s | "
            f"ratio {t_one / t_sbs:.2f}x | identical weights: {same}"
        )
        print("one head   : " + ", ".join(f"{k} {v:.1f} s" for k, v in per_head.items()))


if __name__ == "__main__":
    main()
