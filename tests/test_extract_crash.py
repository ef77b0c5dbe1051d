"""SIGKILL extract at a random point, rerun, and get the store an uninterrupted run makes."""

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from flowclip_cache.store import CAPTION, IMAGE, FeatureStore
from flowclip_cache.store.integrity import store_problems
from flowclip_cache.synthetic.sample import make_sample


def extract_cmd(store, s, backend):
    return [
        sys.executable,
        "-m",
        "flowclip_cache.cli",
        "extract",
        "--store",
        store,
        "--model",
        "flowclip-tiny-vit",
        "--pretrained",
        "none",
        "--manifest",
        s["candidates"],
        "--manifest",
        s["training"],
        "--image-root",
        s["image_root"],
        "--backend",
        backend,
        "--workers",
        "1",
        "--batch-size",
        "4",
        "--text-batch-size",
        "8",
        "--image-unit",
        "8",
        "--caption-unit",
        "16",
        "--quiet",
    ]


def logical_content(root):
    fs = FeatureStore(root)
    ik = sorted(k.tobytes().hex() for k in fs._index[IMAGE].keys)
    ck = sorted(k.tobytes().hex() for k in fs._index[CAPTION].keys)
    return ik, ck, fs.load_images(ik), fs.load_captions(ck), fs


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["zarr", "hdf5"])
def test_sigkill_then_rerun_equals_uninterrupted(tmp_path, backend):
    seed = int(os.environ.get("FLOWCLIP_KILL_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    s = make_sample(str(tmp_path / "sample"), n_images=48, extra_captions=3)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    ref = str(tmp_path / "ref")
    subprocess.run(extract_cmd(ref, s, backend), check=True, env=env, capture_output=True)

    victim = str(tmp_path / "victim")
    proc = subprocess.Popen(
        extract_cmd(victim, s, backend), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    seg_dir = os.path.join(victim, "segments")
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:  # wait until work is under way
        if os.path.isdir(seg_dir) and any(not n.startswith(".") for n in os.listdir(seg_dir)):
            break
        time.sleep(0.01)
    time.sleep(rng.uniform(0, 0.3))
    killed_mid_run = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = FeatureStore(victim)
    assert store_problems(partial.root) == [], f"seed {seed}"
    subprocess.run(extract_cmd(victim, s, backend), check=True, env=env, capture_output=True)

    ik1, ck1, im1, cap1, fs1 = logical_content(ref)
    ik2, ck2, im2, cap2, fs2 = logical_content(victim)
    assert (ik1, ck1) == (ik2, ck2), f"seed {seed}"
    np.testing.assert_array_equal(im1.global_, im2.global_)
    np.testing.assert_array_equal(im1.patches, im2.patches)
    np.testing.assert_array_equal(cap1.tokens, cap2.tokens)
    np.testing.assert_array_equal(cap1.offsets, cap2.offsets)
    assert sorted(x.name for x in fs1.segments) == sorted(x.name for x in fs2.segments)
    assert store_problems(fs2.root) == []
    print(f"seed {seed}: killed mid-run: {killed_mid_run}, segments before kill: {len(partial.segments)}")
