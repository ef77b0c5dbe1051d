"""What an encoder's features take and what its forward costs, before anything is
extracted: the feature shape from its resolved configuration (no weights), the FP16 bytes
of a store's features for given counts, and the forward's seconds per image and per
caption measured on random weights of its architecture. The paper's dry run and the
encoders suite's print them as estimates."""

from __future__ import annotations

import functools
import os
import re
import time

TOKENS_PER_CAPTION = 16  # assumed for the disk estimate (valid tokens, with the special ones)


def feature_bytes(shape: tuple[int, int], images: int, captions: int, global_only: bool = False) -> int:
    """FP16 bytes of the global + patch features of `images` and the sentence + token
    features of `captions` (TOKENS_PER_CAPTION each) at shape (width, patches); with
    global_only, their global features alone (extract --features global)."""
    d, patches = shape
    if global_only:
        return 2 * d * (images + captions)
    return 2 * d * (images * (1 + patches) + captions * (1 + TOKENS_PER_CAPTION))


def duration(seconds: float) -> str:
    """'12 s', '3.4 min' or '2.10 h'."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.2f} h"


def human_bytes(n_bytes: int) -> str:
    """'12.34 MiB' below a GiB, else '1.23 GiB'."""
    return f"{n_bytes / 2**20:.2f} MiB" if n_bytes < 2**30 else f"{n_bytes / 2**30:.2f} GiB"


def manifest_counts(path: str) -> tuple[int, int, int]:
    """(distinct images, distinct caption texts, training records) of a manifest file,
    read once per version of the file (a dry run asks for many sources' counts)."""
    st = os.stat(path)
    return _counted(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _counted(path: str, mtime_ns: int, size: int) -> tuple[int, int, int]:
    from ..manifest import Manifest

    m = Manifest.read(path)
    texts: set[str] = set()
    for col in m.spec.text_columns:
        for v in m.table.column(col).to_pylist():
            texts.update(v if isinstance(v, list) else [v])
    train = sum(1 for s in m.table.column("split").to_pylist() if s == "train") if m.kind == "training" else 0
    return len({p for ps in m.row_images() for p in ps}), len(texts), train


def encoder_shape(model: str) -> tuple[int, int] | str:
    """(embedding width, patches) from the encoder's resolved configuration (no weights);
    where it does not resolve here (no transformers, a tokenizer not at hand), from its
    model config alone; else why not."""
    from ..extraction.encoders import EncoderSpec, resolve

    try:
        config = resolve(EncoderSpec(model, "none")).config
    except Exception as e:  # noqa: BLE001 - said in the plan, which goes on
        return _shape_from_config(model) or f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
    return config.get("dim") or config["model_cfg"]["embed_dim"], config["num_patches"]


def _shape_from_config(model: str) -> tuple[int, int] | None:
    """BLIP: the defaults its family reads a config with (256-d, 384 px in 16-px patches);
    open_clip: embed_dim, and the patches its vision config (or timm name) implies."""
    import open_clip

    from ..extraction.encoders import register_package_configs

    if model.startswith("blip:"):
        return 256, (384 // 16) ** 2
    register_package_configs()
    cfg = open_clip.get_model_config(model) or {}
    vision = cfg.get("vision_cfg", {})
    patch = vision.get("patch_size") or int((re.search(r"patch(\d+)", vision.get("timm_model_name", "")) or [0, 0])[1])
    size = vision.get("image_size", 224)
    h, w = (size, size) if isinstance(size, int) else size
    return (cfg["embed_dim"], (h // patch) * (w // patch)) if cfg and patch else None


def timed(f, device: str, slow: float = 1.0) -> float:
    """f's seconds: its first call when that took over `slow` seconds (on a slow device a
    second call would spend the dry run's time), else the best of two more."""
    import torch

    def once():
        t0 = time.perf_counter()
        f()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    first = once()
    return first if first > slow else min(once(), once())


def measure_forward(model: str, device: str) -> tuple[float, float] | str:
    """Seconds per image and per caption of the encoder's forward on `device` (random
    weights of the same architecture; batches of 2 images, 8 captions)."""
    import torch

    from ..extraction.encoders import EncoderSpec, load_model, resolve
    from ..extraction.features import encode_images, encode_texts

    try:
        enc = load_model(resolve(EncoderSpec(model, "none")), device)
    except Exception as e:  # noqa: BLE001 - say why, and go on with the plan
        return f"not measured ({type(e).__name__}: {str(e).splitlines()[0][:80]})"
    size = enc.config["preprocess"]["image_size"]
    size = size[0] if isinstance(size, (list, tuple)) else size
    x = torch.randn(2, 3, size, size, device=device)
    tok = enc.tokenize(["a red cube to the left of a small blue sphere on a wooden table"] * 8).to(device)
    with torch.no_grad():
        return timed(lambda: encode_images(enc, x), device) / 2, timed(lambda: encode_texts(enc, tok), device) / 8
