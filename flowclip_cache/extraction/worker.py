"""The worker the field's engines call: a Ray task, Ray Data's `map_batches`, a Spark
`foreachPartition` or a Slurm array task hands it a store (a folder or a URL), the
manifests and the names of some units, and it encodes exactly those units and commits
each as extract does. Nothing global: the encoder is resolved and loaded in the call, the
device is the caller's. A unit's keys are fixed by the manifests alone (the plan depends
on the keys), so a retried or speculative task computes the same unit, and a unit already
committed writes nothing: running a unit twice is harmless.

    units = list_units(STORE, MANIFESTS, model="ViT-B-32", pretrained="openai", image_root=ROOT)
    # ... the engine runs, anywhere, for each share of `units`:
    extract_units(STORE, MANIFESTS, share, model="ViT-B-32", pretrained="openai", image_root=ROOT, device="cuda")
    # then, once: flowclip store verify STORE (docs/scale.md)"""

from __future__ import annotations

import os

from .plan import CAPTION_UNIT, IMAGE_UNIT


def _open(store: str, model: str, pretrained: str, device: str | None = None, **encoder):
    from ..store import FeatureStore
    from .encoders import EncoderSpec, resolve
    from .tensor_decode import check_decode_device

    enc = resolve(EncoderSpec(model, pretrained, **encoder))
    if device is not None:
        check_decode_device(enc.config, device)  # before a store exists
    return FeatureStore.open_or_create(store, enc.config), enc


def list_units(store: str, manifests: list[str], *, model: str, pretrained: str, image_root: str | None = None,
               features: str = "all", image_unit: int = IMAGE_UNIT, caption_unit: int = CAPTION_UNIT,
               **encoder) -> list[str]:  # fmt: skip
    """The units with work left (`image-N`, `caption-N`), for the driver to share out (the
    unit sizes must be the workers'). A store that does not exist yet is not created: its
    units are planned against an empty store in a temporary folder."""
    import tempfile

    from ..store.location import locate
    from .extract import plan_extract

    def units(fs, enc) -> list[str]:
        try:
            plan = plan_extract(fs, enc, list(manifests), image_root, image_unit=image_unit,
                                caption_unit=caption_unit, full=features == "all")[2]  # fmt: skip
            return plan.unit_names()
        finally:
            fs.release_writer()

    if locate(str(store)).exists("store.json"):
        return units(*_open(store, model, pretrained, **encoder))
    with tempfile.TemporaryDirectory() as empty:  # every unit has work left; nothing is written at `store`
        return units(*_open(os.path.join(empty, "store"), model, pretrained, **encoder))


def extract_units(store: str, manifests: list[str], units: list[str], *, model: str, pretrained: str,
                  image_root: str | None = None, device: str = "cpu", features: str = "all", batch_size: int = 64,
                  workers: int = 0, image_unit: int = IMAGE_UNIT, caption_unit: int = CAPTION_UNIT,
                  **encoder) -> dict:  # fmt: skip
    """Encode and commit exactly these units; returns what was stored (counts, seconds)."""
    from .extract import run_extract

    fs, enc = _open(store, model, pretrained, device, **encoder)
    s = run_extract(fs, enc, list(manifests), image_root, device=device, batch_size=batch_size, workers=workers,
                    progress=False, features=features, units=set(units), image_unit=image_unit,
                    caption_unit=caption_unit, log=lambda *_: None)  # fmt: skip
    return {"units": list(units), "images_new": s.images_new, "captions_new": s.captions_new, "seconds": s.seconds}
