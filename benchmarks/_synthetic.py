"""The synthetic store the speed scripts share: random unit FP16 rows at ViT-B/32's shapes
(d 512, 49 patches, 14 tokens a caption), written directly, no encoder (every script
labels its figures synthetic)."""

from __future__ import annotations

import numpy as np

from flowclip_cache.store import CAPTION, IMAGE, FeatureStore

D, P, L = 512, 49, 14
CONFIG = {
    "model": "synthetic",
    "model_cfg": {"embed_dim": D},
    "num_patches": P,
    "token_mask": "nonpad",
    "weights": {"source": "random-init", "init_seed": 0},
}


def unit(rng, *shape):
    x = rng.standard_normal(shape, dtype=np.float32)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float16)


def synthetic_store(path: str, image_keys: list[str], caption_keys: list[str], backend: str = "zarr") -> FeatureStore:
    """A store of these keys: images in segments of 256, captions of 4,096 (seed 0)."""
    rng = np.random.default_rng(0)
    fs = FeatureStore.open_or_create(path, CONFIG, backend)
    for s in range(0, len(image_keys), 256):
        ks = image_keys[s : s + 256]
        fs.write_segment(IMAGE, ks, {"global": unit(rng, len(ks), D), "patches": unit(rng, len(ks), P, D)})
    for s in range(0, len(caption_keys), 4096):
        ks = caption_keys[s : s + 4096]
        fs.write_segment(
            CAPTION,
            ks,
            {
                "global": unit(rng, len(ks), D),
                "tokens": unit(rng, len(ks) * L, D),
                "offsets": np.arange(0, L * len(ks) + 1, L, dtype=np.int64),
                "truncated": np.zeros(len(ks), np.uint8),
            },
        )
    fs.release_writer()
    fs.refresh()
    return fs
