"""The worker API the field's engines call (extraction/worker.py): the driver lists the
units, workers in other processes encode their shares, one of them killed after its first
commit and run again; the store equals a one-process extract's, bit for bit, and a second
call with the same units writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from flowclip_cache.extraction.worker import extract_units, list_units
from flowclip_cache.store import FeatureStore

KW = {"model": "flowclip-tiny-clip", "pretrained": "synthetic", "image_unit": 4, "caption_unit": 8}  # several units

# a worker process that dies (os._exit, as a killed task does) right after its first commit
DIES_AFTER_FIRST_COMMIT = """
import os, sys
from flowclip_cache.store import FeatureStore
real = FeatureStore.write_segment
def once(self, *a, **k):
    seg = real(self, *a, **k)
    os._exit(137)
FeatureStore.write_segment = once
from flowclip_cache.extraction.worker import extract_units
extract_units(sys.argv[1], [sys.argv[2]], sys.argv[3].split(","), image_root=sys.argv[4],
              model="flowclip-tiny-clip", pretrained="synthetic", image_unit=4, caption_unit=8)
"""


def same_store(a: FeatureStore, b: FeatureStore, manifest: str) -> None:
    """The same segments, and every image's and caption's features bit for bit (the Ray and
    Spark tests compare their stores with this too)."""
    from flowclip_cache.hashing import caption_key
    from flowclip_cache.manifest import Manifest

    assert sorted(os.listdir(a.segment_dir)) == sorted(os.listdir(b.segment_dir))
    keys = sorted({k for roots in a.path_index().values() for k in roots.values()})
    assert keys == sorted({k for roots in b.path_index().values() for k in roots.values()})
    fa, fb = a.load_images(keys), b.load_images(keys)
    assert np.array_equal(fa.global_, fb.global_) and np.array_equal(fa.patches, fb.patches)
    texts = sorted({t for cs in Manifest.read(manifest).table.column("captions").to_pylist() for t in cs})
    ca, cb = a.load_captions([caption_key(t) for t in texts]), b.load_captions([caption_key(t) for t in texts])
    assert np.array_equal(ca.global_, cb.global_) and np.array_equal(ca.tokens, cb.tokens)


def test_shares_a_killed_and_retried_worker_and_one_process_give_the_same_store(tmp_path):
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "sample"), n_images=10)
    args = ([s["candidates"]],)
    one = str(tmp_path / "one")
    units = list_units(one, *args, image_root=s["image_root"], **KW)
    extract_units(one, *args, units, image_root=s["image_root"], **KW)  # everything in one call

    many = str(tmp_path / "many")
    units = list_units(many, *args, image_root=s["image_root"], **KW)
    assert not os.path.exists(many)  # a driver's listing creates no store
    images, captions = [u for u in units if u.startswith("image-")], [u for u in units if u.startswith("caption-")]
    assert len(images) == 3 and len(captions) > 1  # 10 images in units of 4; captions in units of 8
    # worker A takes the image units and dies after its first commit; worker B takes the captions
    r = subprocess.run([sys.executable, "-c", DIES_AFTER_FIRST_COMMIT, many, s["candidates"], ",".join(images),
                        s["image_root"]], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 137, r.stderr
    extract_units(many, *args, captions, image_root=s["image_root"], **KW)
    left = list_units(many, *args, image_root=s["image_root"], **KW)
    assert left == images[1:]  # A's first unit is committed; the others are left whole
    done = extract_units(many, *args, images, image_root=s["image_root"], **KW)  # A's task, retried whole
    assert done["images_new"] == 10 - 4 and list_units(many, *args, image_root=s["image_root"], **KW) == []
    again = extract_units(many, *args, units, image_root=s["image_root"], **KW)  # a speculative duplicate
    assert again["images_new"] == again["captions_new"] == 0

    same_store(FeatureStore(one), FeatureStore(many), s["candidates"])
