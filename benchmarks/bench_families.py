"""Image extraction per encoder family vs a bare library loop, side by side in one run.

    python benchmarks/bench_families.py [--images 24] [--repeats 3] [--families clip,siglip,blip]

For each family (random weights at the real shapes: ViT-B-32, ViT-B-16-SigLIP, BLIP base
at 384 px), the same JPEGs go through `run_extract` (decode, preprocess, encode global and
patches, FP16, write a segment) and through the library's own loop (decode, preprocess,
encode_image / BLIP's vision model + ITC projection of the class token), alternately;
the ratio is bare time / flowclip time (target >= 0.95), the median of the per-repetition
ratios with their min-max. Prints ratios; the absolute figures depend on the machine and
its load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(__file__))
from _timing import ratio  # noqa: E402
from bench_extract import make_data  # noqa: E402

from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve  # noqa: E402
from flowclip_cache.extraction.extract import run_extract  # noqa: E402
from flowclip_cache.store import FeatureStore  # noqa: E402


def bare_loop(enc, paths, batch):
    """The library's own image encoding of the same files, nothing stored."""
    t = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(paths), batch):
            x = torch.stack([enc.preprocess(Image.open(p).convert("RGB")) for p in paths[i : i + batch]])
            if enc.family_name == "blip-itc":
                h = enc.model.vision_model(pixel_values=x).last_hidden_state
                enc.model.vision_proj(h[:, 0])
            else:
                enc.model.encode_image(x)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=24)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--families", default="clip,siglip,blip", help="Comma-separated: clip, siglip, blip.")
    args = ap.parse_args()
    from flowclip_cache.extraction.families.offline import blip_folder, siglip_like_tokenizer

    with tempfile.TemporaryDirectory() as root:
        names, _ = make_data(root, args.images, args.images)
        paths = [f"{root}/images/{n}" for n in names]
        chosen = set(args.families.split(","))
        makers = {
            "clip": ("openai-clip ViT-B-32", lambda: EncoderSpec("ViT-B-32")),
            "siglip": (
                "siglip ViT-B-16-SigLIP",
                lambda: EncoderSpec("ViT-B-16-SigLIP", tokenizer=siglip_like_tokenizer(f"{root}/tok")),
            ),
            "blip": ("blip-itc base 384 px", lambda: EncoderSpec(f"blip:{blip_folder(f'{root}/blip', small=False)}")),
        }
        specs = {label: make() for key, (label, make) in makers.items() if key in chosen}
        print(
            f"# {len(paths)} JPEG images 256 px, batch {args.batch_size}, random weights, torch threads "
            f"{torch.get_num_threads()}, extract workers 0 (decoding in the main process, as the bare loop)"
        )
        for label, spec in specs.items():
            enc = resolve(spec)
            loaded = load_model(enc)
            loaded.family_name = enc.family.name
            bare_loop(loaded, paths[:2], 2)  # warm both paths
            t_bare, t_ours = [], []
            for rep in range(args.repeats):
                t_bare.append(bare_loop(loaded, paths, args.batch_size))
                fs = FeatureStore.open_or_create(f"{root}/st-{enc.family.name}-{rep}", enc.config)
                s = run_extract(
                    fs,
                    enc,
                    [f"{root}/images.parquet"],
                    f"{root}/images",
                    batch_size=args.batch_size,
                    workers=0,
                    progress=False,
                    loaded=loaded,
                )
                t_ours.append(s.image_seconds)
            bare, ours = statistics.median(t_bare), statistics.median(t_ours)
            r, lo, hi = ratio(t_bare, t_ours)  # per repetition: the sides alternate
            print(
                f"{label:24s}: flowclip {len(paths) / ours:6.2f} img/s | bare loop {len(paths) / bare:6.2f} img/s"
                f" | ratio {r:.2f} [{lo:.2f}, {hi:.2f}] (target >= 0.95; {enc.num_patches} patches, d={enc.dim})"
            )


if __name__ == "__main__":
    main()
