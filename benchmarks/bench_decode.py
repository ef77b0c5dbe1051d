"""Decoding and preprocessing images for extraction: PIL per image (open_clip's transform,
`extract`'s default) against torchvision's batched decode with the tensor resize
(`extract --decode cpu`; `--device cuda` adds nvJPEG, `--decode gpu`).

    python benchmarks/bench_decode.py [--images 64] [--size 480x640] [--reps 5] [--device cpu]

The JPEGs are photo-like synthetic images (smooth fields with edges, quality 90) at the
size given, plus any real photographs named with --jpeg (scikit-learn's two sample photos
when it is installed). Sides alternate repetition by repetition (ABAB); printed: images/s
per side and the median per-repetition speed ratio with its min-max. Then the difference
from PIL's model input on every image (8-bit levels, mean and max) and, through ViT-B/32
(random weights: its architecture's features, no trained encoder here), the cosine of
each image's global feature to PIL's. Last, the decisions that change: the package's
sample benchmark (--sample scenes saved as JPEGs, a gold and a swapped caption each)
extracted with the tiny CLIP (its trained synthetic weights) once per decode, and the CLIP
scorer's choice per record compared."""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile

import numpy as np
import torch
from PIL import Image

from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve
from flowclip_cache.extraction.features import encode_images
from flowclip_cache.extraction.images import load_image
from flowclip_cache.extraction.tensor_decode import read_raw, to_inputs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternate, ratio  # noqa: E402


def photo(h: int, w: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    f = rng.uniform(2, 12, 3)
    base = np.stack([np.sin(f[c] * x + c) * np.cos(f[2 - c] * y - c) for c in range(3)], -1)
    for _ in range(6):  # objects with hard edges
        t, l = rng.integers(0, h - h // 4), rng.integers(0, w - w // 4)
        base[t : t + h // 5, l : l + w // 5] = rng.uniform(-1, 1, 3)
    return Image.fromarray(((base + 1) * 127.5 + rng.normal(0, 4, base.shape)).clip(0, 255).astype(np.uint8))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--size", default="480x640", help="HxW of the synthetic JPEGs")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--jpeg", action="append", default=[], help="a real JPEG to compare (repeatable)")
    ap.add_argument("--sample", type=int, default=256, help="scenes of the decisions-changed check")
    a = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    h, w = (int(v) for v in a.size.split("x"))
    tmp = tempfile.mkdtemp()
    paths = []
    for i in range(a.images):
        paths.append(os.path.join(tmp, f"{i}.jpg"))
        photo(h, w, i).save(paths[-1], "JPEG", quality=90)
    try:
        import sklearn.datasets

        real = sorted(glob.glob(os.path.join(os.path.dirname(sklearn.datasets.__file__), "images", "*.jpg")))
    except ImportError:
        real = []
    real += a.jpeg
    model = load_model(resolve(EncoderSpec("ViT-B-32")), a.device)
    pre = model.config["preprocess"]

    def pil():
        return torch.stack([model.preprocess(load_image(p)) for p in paths])

    def tv(device):
        return lambda: torch.stack(to_inputs([read_raw(p) for p in paths], pre, device))

    sides = {"PIL per image": pil, "torchvision batched, cpu": tv("cpu")}
    if a.device.startswith("cuda"):
        sides["nvJPEG batched, cuda"] = tv(a.device)
    t = alternate(sides, a.reps)
    print(f"{a.images} JPEGs of {w}x{h}, {a.reps} repetitions ({torch.get_num_threads()} threads, one process)")
    base = t["PIL per image"]
    for name, ts in t.items():
        m, lo, hi = ratio(base, ts)
        print(f"  {name:26s} {a.images / statistics.median(ts):8.1f} images/s   x{m:.2f} of PIL [{lo:.2f}, {hi:.2f}]")
    check = real + paths[:8]
    with torch.no_grad():
        ref = torch.stack([model.preprocess(load_image(p)) for p in check]).to(a.device)
        g_ref = encode_images(model, ref)[0]
        std = torch.tensor(pre["std"], device=a.device).view(1, 3, 1, 1)
        for name, dev in (("cpu", "cpu"), ("cuda", a.device)) if a.device.startswith("cuda") else (("cpu", "cpu"),):
            x = torch.stack(to_inputs([read_raw(p) for p in check], pre, dev)).to(a.device)
            levels = ((x - ref) * std * 255).abs()
            cos = torch.nn.functional.cosine_similarity(encode_images(model, x)[0], g_ref)
            print(f"  --decode {name} vs PIL on {len(real)} real + {len(check) - len(real)} synthetic JPEGs: input "
                  f"mean {levels.mean():.3f} / max {levels.max():.0f} levels; ViT-B/32 (random) global cosine "
                  f"min {cos.min():.6f}, mean {cos.mean():.6f}")  # fmt: skip
    decisions(tmp, a.sample, ["pil", "cpu", "gpu"] if a.device.startswith("cuda") else ["pil", "cpu"], a.device)


def decisions(root: str, n: int, decodes: list[str], device: str) -> None:
    """The CLIP scorer's choice (gold over the swapped caption) per sample record, per decode."""
    from flowclip_cache.extraction.worker import extract_units, list_units
    from flowclip_cache.hashing import caption_key
    from flowclip_cache.manifest import Manifest
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(os.path.join(root, "sample"), n_images=n, fmt="JPEG", size=160)
    rows = Manifest.read(s["candidates"]).table.to_pylist()
    kw = {"model": "flowclip-tiny-clip", "pretrained": "synthetic", "image_root": s["image_root"]}
    right = {}
    for decode in decodes:
        out = os.path.join(root, f"sample-{decode}")
        units = list_units(out, [s["candidates"]], decode=decode, **kw)
        extract_units(out, [s["candidates"]], units, decode=decode, device=device if decode == "gpu" else "cpu", **kw)
        fs = FeatureStore(out)
        key = {path: next(iter(roots.values())) for (path, _), roots in fs.path_index().items()}
        img = fs.load_images([key[r["image"]] for r in rows]).global_.astype(np.float32)
        cap = [fs.load_captions([caption_key(c) for c in r["captions"]]).global_.astype(np.float32) for r in rows]
        right[decode] = np.array([float(c[0] @ i) > float(c[1] @ i) for i, c in zip(img, cap)])
    base = right["pil"]
    for decode in decodes[1:]:
        changed = int((right[decode] != base).sum())
        print(f"  sample benchmark, {n} records, CLIP scorer (tiny CLIP): PIL {base.mean():.3f}, --decode {decode} "
              f"{right[decode].mean():.3f}; {changed} decisions changed")  # fmt: skip


if __name__ == "__main__":
    main()
