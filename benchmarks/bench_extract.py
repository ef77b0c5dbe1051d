"""Extraction speed and storage, side by side in one run (stage one).

    python benchmarks/bench_extract.py [--images 300] [--captions 2000] [--model ViT-B-32] [--reps 3]

Prints ratios; the absolute figures depend on the machine and its load. Every timed
comparison alternates its sides within each repetition (flowclip, then the bare loop, in
fresh stores each time); a ratio is the median of the per-repetition ratios with their
min-max, so load that moves during the run widens the spread instead of moving the ratio.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pyarrow as pa
import torch
from PIL import Image

from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve
from flowclip_cache.extraction.extract import run_extract
from flowclip_cache.manifest import write_manifest
from flowclip_cache.store import FeatureStore
from flowclip_cache.synthetic.sample import WORDS, draw_scene

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import abab  # noqa: E402


def make_data(root, n_images, n_captions, size=256):
    rng = random.Random(0)
    os.makedirs(f"{root}/images", exist_ok=True)
    names = []
    for i in range(n_images):
        im, _ = draw_scene(rng, size)
        im = Image.blend(im, Image.effect_noise((size, size), 40).convert("RGB"), 0.3)
        names.append(f"im{i:05d}.jpg")
        im.save(f"{root}/images/{names[-1]}", quality=90)
    caps = [" ".join(rng.choice(WORDS) for _ in range(11)) + f" {i}" for i in range(n_captions)]
    per = max(1, n_captions // n_images)
    rows = [
        {"record_id": str(i), "image": names[i], "captions": caps[i * per : (i + 1) * per] or [caps[0]], "gold": 0}
        for i in range(n_images)
    ]
    write_manifest(
        f"{root}/images.parquet", pa.Table.from_pylist([{**r, "captions": [caps[0]]} for r in rows]), "candidates"
    )
    write_manifest(
        f"{root}/captions.parquet", pa.Table.from_pylist([{**r, "image": names[0]} for r in rows]), "candidates"
    )
    return names, [c for r in rows for c in r["captions"]]


def bare_images(model, preprocess, paths, batch):
    t = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(paths), batch):
            x = torch.stack([preprocess(Image.open(p).convert("RGB")) for p in paths[i : i + batch]])
            model.encode_image(x)
    return time.perf_counter() - t


def bare_captions(model, tok, caps, batch):
    t = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(caps), batch):
            model.encode_text(tok(caps[i : i + batch]))  # context 77, padded
    return time.perf_counter() - t


def spread(values) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--captions", type=int, default=2000)
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    enc = resolve(EncoderSpec(args.model))
    loaded = load_model(enc)
    model, preprocess = loaded.model, loaded.preprocess
    with tempfile.TemporaryDirectory() as root:
        names, caps = make_data(root, args.images, args.captions)
        paths = [f"{root}/images/{n}" for n in names]
        print(
            f"# {args.model}, random weights, {len(paths)} JPEG images 256 px, {len(caps)} captions, "
            f"torch threads {torch.get_num_threads()}, extract workers {args.workers}, {args.reps} alternated "
            f"repetitions: median [min, max] of the per-repetition ratios"
        )
        bare_images(model, preprocess, paths[:4], 4)  # warm both paths once

        def extract(store, manifest, workers=0, warm=True):
            fs_ = FeatureStore.open_or_create(f"{root}/{store}", enc.config)
            return run_extract(
                fs_, enc, [f"{root}/{manifest}.parquet"], f"{root}/images", batch_size=args.batch_size,
                workers=workers, progress=False, loaded=loaded if warm else None,
            )  # fmt: skip

        # images: flowclip's image phase on the bench's warm model (as the bare loop's), and a
        # cold whole run that also hashes, plans and builds the model; then the bare loop
        img = {w: {"phase": [], "cold": [], "t": []} for w in sorted({0, args.workers})}
        cap = {"ratio": [], "whole": [], "t": [], "t_bare": []}
        rerun, t_bare = [], []
        for rep in range(args.reps):
            for w, r in img.items():
                s_ = extract(f"st-{w}-{rep}", "images", w)
                cold = extract(f"cold-{w}-{rep}", "images", w, warm=False)
                t_bare.append(bare_images(model, preprocess, paths, args.batch_size))
                r["phase"].append(t_bare[-1] / s_.image_seconds)
                r["cold"].append(t_bare[-1] / cold.seconds)
                r["t"].append(s_.image_seconds)
            # captions into the cold store of this repetition, then the bare encode_text at 77
            s_c = extract(f"cold-{args.workers}-{rep}", "captions")
            tb = bare_captions(model, loaded.tokenizer, caps, 256)
            cap["ratio"].append(tb / s_c.caption_seconds)
            cap["whole"].append(tb / s_c.seconds)
            cap["t"].append(s_c.caption_seconds)
            cap["t_bare"].append(tb)
            # a second run over both manifests: nothing new
            fs = FeatureStore.open_or_create(f"{root}/cold-{args.workers}-{rep}", enc.config)
            s2 = run_extract(
                fs, enc, [f"{root}/images.parquet", f"{root}/captions.parquet"], f"{root}/images", progress=False
            )
            assert s2.images_new == 0 and s2.captions_new == 0
            rerun.append(s2.seconds / (cold.seconds + s_c.seconds))
        n = len(paths)
        for w, r in img.items():
            print(
                f"images   : flowclip (workers={w}) {n / statistics.median(r['t']):6.1f} img/s | bare loop "
                f"{n / statistics.median(t_bare):6.1f} img/s | ratio {spread(r['phase'])} (target >= 0.95; image phase)"
            )
            print(f"           cold whole run incl. hashing, planning and model build: ratio {spread(r['cold'])}")
        print(
            f"captions : flowclip {len(caps) / statistics.median(cap['t']):7.1f} cap/s | bare encode_text@77 "
            f"{len(caps) / statistics.median(cap['t_bare']):7.1f} cap/s | ratio {spread(cap['ratio'])} (target >= 2)"
        )
        print(f"           whole run incl. tokenising, planning and model load: ratio {spread(cap['whole'])}")
        print(
            f"rerun    : time over the first run's {median_ratio(rerun)} (target <= 0.02; process start-up "
            f"excluded from both)"
        )
        # bytes per caption (no timing: one figure)
        fs.refresh()
        info = fs.info()
        cap_bytes = sum(
            os.path.getsize(os.path.join(dp, f))
            for seg in fs.segments
            if seg.kind == "cap"
            for dp, _, fl in os.walk(seg.path)
            for f in fl
        )
        d = info["dim"]
        padded = (77 * d + d) * 2 + 32  # tokens at 77 + sentence, FP16, + key
        per_cap = cap_bytes / info["captions"]
        print(
            f"storage  : {per_cap:.0f} B/caption ({info['caption_tokens'] / info['captions']:.1f} tokens) vs "
            f"padded-77 {padded} B | ratio {per_cap / padded:.3f} (target <= 0.25)"
        )
        # load everything vs numpy memmap of the same arrays
        ik, ck = fs.keys("img"), fs.keys("cap")
        im, cp = fs.load_images(ik), fs.load_captions(ck)
        arrays = {"ig": im.global_, "ip": im.patches, "cg": cp.global_, "ct": cp.tokens}
        for k, a in arrays.items():
            np.save(f"{root}/{k}.npy", a)
        os.sync()
        memmap = lambda: {k: np.array(np.load(f"{root}/{k}.npy", mmap_mode="r")) for k in arrays}
        t_load, t_mm, med, lo, hi = abab(lambda: (fs.load_images(ik), fs.load_captions(ck)), memmap, 2 * args.reps + 1)
        mb = sum(a.nbytes for a in arrays.values()) / 2**20
        print(
            f"load     : store {mb / t_load:7.0f} MiB/s | numpy memmap {mb / t_mm:7.0f} MiB/s | ratio "
            f"{med:.2f} [{lo:.2f}, {hi:.2f}] (target >= 0.5; {mb:.0f} MiB, both from the page cache)"
        )


def median_ratio(values) -> str:
    return f"{statistics.median(values):.4f} [{min(values):.4f}, {max(values):.4f}]"


if __name__ == "__main__":
    sys.exit(main())
