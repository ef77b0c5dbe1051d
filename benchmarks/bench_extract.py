"""Extraction speed and storage, side by side in one run (issue: stage one).

    python benchmarks/bench_extract.py [--images 300] [--captions 2000] [--model ViT-B-32]

Prints ratios; the absolute figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pyarrow as pa
import torch
from PIL import Image

from flowclip_cache.encoders import EncoderSpec, load_model, resolve
from flowclip_cache.extract import run_extract
from flowclip_cache.manifest import write_manifest
from flowclip_cache.sample import WORDS, draw_scene
from flowclip_cache.store import FeatureStore


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--captions", type=int, default=2000)
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
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
            f"torch threads {torch.get_num_threads()}, extract workers {args.workers}"
        )
        # warm both paths once
        bare_images(model, preprocess, paths[:4], 4)

        # images: flowclip vs a bare decode + encode_image loop, interleaved to share the noise
        def ours(workers, tag):
            # the bench's model, already warm, as the bare loop's is; the whole-run figure
            # below is a cold run that also hashes, plans and builds the model
            fs_ = FeatureStore.open_or_create(f"{root}/st-{tag}", enc.config)
            s_ = run_extract(
                fs_,
                enc,
                [f"{root}/images.parquet"],
                f"{root}/images",
                batch_size=args.batch_size,
                workers=workers,
                progress=False,
                loaded=loaded,
            )
            cold = FeatureStore.open_or_create(f"{root}/cold-{tag}", enc.config)
            s_cold = run_extract(
                cold,
                enc,
                [f"{root}/images.parquet"],
                f"{root}/images",
                batch_size=args.batch_size,
                workers=workers,
                progress=False,
            )
            return s_.image_seconds, s_cold.seconds

        t_bare, t_ours = [bare_images(model, preprocess, paths, args.batch_size)], {0: [], args.workers: []}
        for rep in range(2):
            for w in sorted(t_ours):
                t_ours[w].append(ours(w, f"{w}-{rep}"))
                t_bare.append(bare_images(model, preprocess, paths, args.batch_size))
        t_bare = float(np.mean(t_bare))
        for w, runs in t_ours.items():
            img_phase = float(np.mean([r[0] for r in runs]))
            whole = float(np.mean([r[1] for r in runs]))
            print(
                f"images   : flowclip (workers={w}) {len(paths) / img_phase:6.1f} img/s | bare loop "
                f"{len(paths) / t_bare:6.1f} img/s | ratio {t_bare / img_phase:.2f} (target >= 0.95; image phase)"
            )
            print(
                f"           cold whole run incl. hashing, planning and model build: {whole:.1f} s, "
                f"ratio {t_bare / whole:.2f}"
            )
        t_ours_img_all = whole
        fs = FeatureStore.open_or_create(f"{root}/st-{args.workers}-0", enc.config)
        # captions
        t_bare_c = bare_captions(model, loaded.tokenizer, caps, 256)
        fs.refresh()
        s = run_extract(fs, enc, [f"{root}/captions.parquet"], f"{root}/images", workers=0, progress=False)
        t_ours_c = s.caption_seconds
        print(
            f"captions : flowclip {len(caps) / t_ours_c:7.1f} cap/s | bare encode_text@77 "
            f"{len(caps) / t_bare_c:7.1f} cap/s | ratio {t_bare_c / t_ours_c:.2f} (target >= 2)"
        )
        print(
            f"           whole run incl. tokenising, planning and model load: {s.seconds:.1f} s, "
            f"ratio {t_bare_c / s.seconds:.2f}"
        )
        t_ours_c = s.seconds
        # second run: nothing new
        fs.refresh()
        s2 = run_extract(
            fs, enc, [f"{root}/images.parquet", f"{root}/captions.parquet"], f"{root}/images", progress=False
        )
        assert s2.images_new == 0 and s2.captions_new == 0
        first = t_ours_img_all + t_ours_c
        print(
            f"rerun    : {s2.seconds:.3f} s vs first run {first:.1f} s | ratio "
            f"{s2.seconds / first:.4f} (target <= 0.02; process start-up excluded from both)"
        )
        # bytes per caption
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
        t_load, t_mm = [], []
        for _ in range(5):  # interleaved, best of 5 each
            t = time.perf_counter()
            fs.load_images(ik), fs.load_captions(ck)
            t_load.append(time.perf_counter() - t)
            t = time.perf_counter()
            _ = {k: np.array(np.load(f"{root}/{k}.npy", mmap_mode="r")) for k in arrays}
            t_mm.append(time.perf_counter() - t)
        t_load, t_mm = min(t_load), min(t_mm)
        mb = sum(a.nbytes for a in arrays.values()) / 2**20
        print(
            f"load     : store {mb / t_load:7.0f} MiB/s | numpy memmap {mb / t_mm:7.0f} MiB/s | ratio "
            f"{t_mm / t_load:.2f} (target >= 0.5; {mb:.0f} MiB, both from the page cache, best of 5)"
        )


if __name__ == "__main__":
    sys.exit(main())
