"""`flowclip manifest list --sizes`: each catalogue entry's images, store and forward time,
on a manifest built from the real SugarCrepe files; every figure recomputed here directly."""

from __future__ import annotations

import os
import re

from click.testing import CliRunner
from conftest import SHARED_BENCHMARKS, TINY, needs_shared

from flowclip_cache.cli import main
from flowclip_cache.datasets import get
from flowclip_cache.datasets.base import RowErrors
from flowclip_cache.manifest import Manifest


def _section(output: str, name: str) -> list[str]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {name} ("))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return lines[start:end]


@needs_shared("sugarcrepe")
def test_sizes_of_a_built_manifest_and_its_images(tmp_path):
    built = tmp_path / "built"
    built.mkdir()
    source = os.path.join(SHARED_BENCHMARKS, "sugarcrepe")
    get("sugarcrepe").build(source, str(built / "sugarcrepe.parquet"), RowErrors("fail"))
    m = Manifest.read(built / "sugarcrepe.parquet")
    images = sorted({p for ps in m.row_images() for p in ps})
    texts = {t for row in m.table.column("captions").to_pylist() for t in row}
    root = tmp_path / "images"
    for p in images[:3]:  # three of its images here, 1 MiB each; the rest missing
        os.makedirs(os.path.dirname(root / p), exist_ok=True)
        with open(root / p, "wb") as f:
            f.truncate(2**20)
    r = CliRunner().invoke(main, ["manifest", "list", "--sizes", "--model", TINY, "--built", str(built),
                                  "--image-root", str(root)])  # fmt: skip
    assert r.exit_code == 0, r.output
    section = _section(r.output, "sugarcrepe")
    counts = f"{len(images):,} images, {len(texts):,} caption texts"
    assert f"1,560 images (catalogue); built {built}/sugarcrepe.parquet: {counts}" in section[1]
    disk = f"3.00 MiB in 3 files (measured under {root}); {len(images) - 3:,} not found there"
    assert f"images on disk: {disk}" in section[2]
    # the store: FP16 (global + 49 patches) per image and (sentence + 16 tokens) per caption, at the tiny ViT's width
    from flowclip_cache.extraction.encoders import EncoderSpec, resolve

    cfg = resolve(EncoderSpec(TINY, "none")).config
    d, patches = cfg.get("dim") or cfg["model_cfg"]["embed_dim"], cfg["num_patches"]
    n_bytes = 2 * d * (len(images) * (1 + patches) + len(texts) * 17)
    assert re.search(rf"{TINY}: store ~{n_bytes / 2**20:.2f} MiB; ~[0-9.]+ (s|min|h) of forward on cpu", section[3])
    # an entry not built: the catalogue's image count alone; the synthetic world's entries are not listed
    assert "    5,000 images (catalogue); captions counted once built" in _section(r.output, "aro-coco-order")[1]
    assert "  synthetic-order (" not in r.output and "time on a GPU: run the same command there" in r.output
    assert "  wds-classification (" not in r.output  # a layout of many sets: sized per set, once built
