"""Training data placements: device, host and store give bit-identical
weights for the same seed; the estimate is exact; auto falls back to the store; a store
placement refuses damage like every other reader."""

import os

import pytest
import torch
from safetensors.torch import load_file
from test_learning import planted  # noqa: F401  (fixture: a store written directly, zarr)

from flowclip_cache.errors import StoreDamaged
from flowclip_cache.manifest import Manifest
from flowclip_cache.store import banks
from flowclip_cache.training.loop import TrainConfig, train_head
from flowclip_cache.training.training_data import load_training_data


def cfg(**kw):
    return TrainConfig(
        **{**dict(head="flow", epochs=2, batch_size=16, lr=1e-3, train_eval_records=64, checkpoint_every=7), **kw}
    )


def test_placements_train_bit_identical_weights(planted, tmp_path):
    fs, man = planted
    weights = {}
    for placement in ("device", "host", "store"):
        out = str(tmp_path / placement)
        train_head(fs, man, out, cfg(cimr=0.1), placement=placement, progress=False, log=lambda *_: None)
        weights[placement] = load_file(os.path.join(out, "head.safetensors"))
    for k, v in weights["device"].items():
        assert torch.equal(v, weights["host"][k]) and torch.equal(v, weights["store"][k]), k


def test_store_placement_resumes_exactly(planted, tmp_path):
    fs, man = planted
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    train_head(fs, man, full, cfg(), placement="device", progress=False, log=lambda *_: None)
    train_head(fs, man, part, cfg(), placement="store", progress=False, log=lambda *_: None, stop_after=5)
    train_head(fs, man, part, cfg(), placement="store", progress=False, log=lambda *_: None, resume=True)
    a, b = load_file(f"{full}/head.safetensors"), load_file(f"{part}/head.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_estimate_is_exact_and_auto_falls_back_to_the_store(planted, monkeypatch):
    fs, man = planted
    data = load_training_data(fs, Manifest.read(man), True, "cpu", placement="device", log=lambda *_: None)
    b = data.bank
    held = sum(
        t.numel() * t.element_size() for t in (b.img_global, b.img_patches, b.cap_global, b.cap_tokens, b.cap_offsets)
    )
    m = Manifest.read(man).table.to_pydict()
    texts = sorted(set(m["positive"]) | {n for ns in m["negatives"] for n in ns})
    assert banks.estimate_bytes(fs, m["image_key"], texts, True) == held
    said = []
    need = banks.memory_need(fs, m["image_key"], texts, True, len(m["positive"]), 1)
    assert need["features"] == held and need["loading"] > 0 and need["records"] > 0
    total = sum(need.values())
    # the old rule's edge (features at 70% of what is free) took the device and left the
    # machine short; the whole process's need plus the printed margin now goes to the store
    monkeypatch.setattr(banks, "available_bytes", lambda device: int(held / 0.7))
    assert banks.choose_placement("auto", need, "cpu", said.append) == "store"
    assert "placement 'store'" in said[0] and "GiB features" in said[0] and "GiB is kept free" in said[0]
    assert "this process holds" in said[0]
    enough = total + banks.MARGIN_BYTES + 1  # the 1 GiB floor of the margin is what decides at this size
    monkeypatch.setattr(banks, "available_bytes", lambda device: enough)
    assert banks.choose_placement("auto", need, "cpu", said.append) == "device"
    monkeypatch.setattr(banks, "available_bytes", lambda device: enough - 2)
    assert banks.choose_placement("auto", need, "cpu", said.append) == "store"
    big = 100 * 2**30  # at scale the margin is a tenth of what is free
    monkeypatch.setattr(banks, "available_bytes", lambda device: big)
    assert banks.margin_bytes(big) == 10 * 2**30
    assert banks.choose_placement("auto", {"features": 91 * 2**30}, "cpu", said.append) == "store"
    assert banks.choose_placement("auto", {"features": 90 * 2**30}, "cpu", said.append) == "device"
    assert banks.choose_placement("host", held, "cpu", said.append) == "device"  # on the CPU, host = device


def test_store_placement_refuses_damage(planted, tmp_path):
    import shutil

    from flowclip_cache.store import FeatureStore

    fs, man = planted
    copy = str(tmp_path / "copy")
    shutil.copytree(fs.root, copy)
    seg = next(s for s in FeatureStore(copy).segments if s.kind == "img")
    chunk = os.path.join(seg.path, "patches", "c", "0", "0", "0")
    with open(chunk, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(StoreDamaged, match="patches fails its checksum"):
        load_training_data(FeatureStore(copy), Manifest.read(man), True, "cpu", placement="store", log=lambda *_: None)


def test_store_placement_reads_hdf5_rows_too(planted, tmp_path):
    """The same planted store re-written with the HDF5 backend (contiguous datasets read
    row by row at their file offsets)."""
    import numpy as np

    from flowclip_cache.store import CAPTION, IMAGE, FeatureStore

    fs, man = planted
    h5 = FeatureStore.open_or_create(str(tmp_path / "h5"), fs.encoder_config, "hdf5")
    ik, ck = fs.keys(IMAGE), fs.keys(CAPTION)
    im, cp = fs.load_images(ik), fs.load_captions(ck)
    h5.write_segment(IMAGE, ik, {"global": im.global_, "patches": im.patches})
    h5.write_segment(
        CAPTION,
        ck,
        {"global": cp.global_, "tokens": cp.tokens, "offsets": cp.offsets, "truncated": cp.truncated.astype(np.uint8)},
    )
    h5.release_writer()
    h5.refresh()
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    train_head(fs, man, a, cfg(), placement="device", progress=False, log=lambda *_: None)
    train_head(h5, man, b, cfg(), placement="store", progress=False, log=lambda *_: None)
    wa, wb = load_file(f"{a}/head.safetensors"), load_file(f"{b}/head.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
