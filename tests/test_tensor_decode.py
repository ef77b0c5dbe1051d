"""`extract --decode cpu|gpu` (extraction/tensor_decode.py): torchvision's batched decode
and a tensor resize as their own preprocessing. Here the CPU half: its pixels against PIL's
(the same libjpeg-turbo decode; every EXIF orientation turned as PIL turns it), its model
input against open_clip's PIL transform, an image's input independent of its batch, its own
store fingerprint, and bad JPEGs refused. The CUDA half is in tests/test_cuda.py."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from PIL import Image

from flowclip_cache.errors import FlowclipError
from flowclip_cache.extraction.encoders import EncoderSpec, resolve
from flowclip_cache.extraction.images import BadImage, load_image
from flowclip_cache.extraction.tensor_decode import decode_batch, preprocess_tensor, read_raw, resized_size, to_inputs

PRE = resolve(EncoderSpec("ViT-B-32")).config["preprocess"]


def _photo(h: int, w: int, seed: int) -> np.ndarray:
    """A smooth image with edges (a JPEG of noise is no photograph)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    base = np.stack([np.sin(6 * x + c) * np.cos(4 * y - c) for c in rng.uniform(0, 3, 3)], -1)
    base[h // 3 : h // 2, w // 4 : w // 2] = rng.uniform(-1, 1, 3)
    return ((base + 1) * 127.5).clip(0, 255).astype(np.uint8)


def _jpeg(path, arr, orientation: int = 1, mode: str = "RGB") -> str:
    im = Image.fromarray(arr).convert(mode)
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    im.save(path, "JPEG", quality=90, exif=exif.tobytes())
    return str(path)


def _pil_pixels(path) -> np.ndarray:
    return np.asarray(load_image(str(path)))


def test_jpeg_pixels_are_pils_for_every_orientation_and_grey(tmp_path):
    arr = _photo(90, 140, 0)
    raws = [read_raw(_jpeg(tmp_path / f"o{o}.jpg", arr, o)) for o in range(1, 9)]
    raws.append(read_raw(_jpeg(tmp_path / "grey.jpg", arr, 6, "L")))
    assert all(r.jpeg is not None for r in raws)  # decoded by torchvision, not by PIL
    got = decode_batch(raws, "cpu")
    names = [f"o{o}.jpg" for o in range(1, 9)] + ["grey.jpg"]
    for name, x in zip(names, got):
        assert np.array_equal(x.permute(1, 2, 0).numpy(), _pil_pixels(tmp_path / name)), name


def test_other_formats_crops_and_frames_take_pils_pixels(tmp_path):
    arr = _photo(60, 80, 1)
    Image.fromarray(arr).save(tmp_path / "a.png")
    np.save(tmp_path / "f.npy", arr[:, :, ::-1].copy())
    jpg = _jpeg(tmp_path / "c.jpg", arr)
    for path, crop in ((tmp_path / "a.png", None), (tmp_path / "f.npy", None), (jpg, (5, 7, 30, 20))):
        raw = read_raw(str(path), crop)
        assert raw.jpeg is None
        assert np.array_equal(raw.pixels.permute(1, 2, 0).numpy(), np.asarray(load_image(str(path), crop)))


def test_model_input_follows_open_clips_transform(tmp_path):
    """Sizes, crop offsets and normalisation as open_clip's PIL transform: the inputs differ
    only by the resize's arithmetic (float here, 8-bit in PIL)."""
    import open_clip

    for h, w, mode in ((90, 140, "shortest"), (300, 211, "shortest"), (50, 77, "squash")):
        pre = PRE | {"resize_mode": mode}
        transform = open_clip.image_transform(224, is_train=False, resize_mode=mode)
        im = Image.fromarray(_photo(h, w, h))
        want = transform(im)
        got = preprocess_tensor(torch.from_numpy(np.asarray(im).copy()).permute(2, 0, 1), pre)
        assert got.shape == want.shape == (3, 224, 224)
        std = torch.tensor(pre["std"]).view(3, 1, 1)
        levels = (got * std + torch.tensor(pre["mean"]).view(3, 1, 1)) * 255
        assert (levels - levels.round()).abs().max() < 1e-3  # 8-bit values, as PIL's resize gives
        diff = ((got - want) * std * 255).abs()  # in 8-bit levels
        assert diff.mean() < 0.3 and diff.max() <= 4.01, (h, w, mode, float(diff.mean()), float(diff.max()))
    assert resized_size(90, 140, 224, "shortest") == (224, 348)
    assert resized_size(300, 211, 224, "shortest") == (318, 224)


def test_an_images_input_does_not_depend_on_its_batch(tmp_path):
    paths = [_jpeg(tmp_path / f"{i}.jpg", _photo(60 + 10 * i, 90, i)) for i in range(4)]
    alone = to_inputs([read_raw(paths[2])], PRE, "cpu")[0]
    together = to_inputs([read_raw(p) for p in paths], PRE, "cpu")[2]
    assert torch.equal(alone, together)


def test_bad_jpegs_are_refused_one_by_one(tmp_path):
    good = _jpeg(tmp_path / "good.jpg", _photo(60, 80, 2))
    data = open(good, "rb").read()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 2])
    with pytest.raises(BadImage, match="end marker"):
        read_raw(str(tmp_path / "cut.jpg"))
    (tmp_path / "empty.jpg").write_bytes(b"")
    with pytest.raises(BadImage, match="zero-byte"):
        read_raw(str(tmp_path / "empty.jpg"))
    (tmp_path / "text.jpg").write_bytes(b"not an image at all")
    with pytest.raises(BadImage, match="not an image"):
        read_raw(str(tmp_path / "text.jpg"))
    # a body torchvision refuses behind a valid header and end marker: that image fails alone
    broken = data[:400] + bytes(len(data) - 402) + b"\xff\xd9"
    (tmp_path / "broken.jpg").write_bytes(broken)
    out = to_inputs([read_raw(good), read_raw(str(tmp_path / "broken.jpg"))], PRE, "cpu")
    assert isinstance(out[0], torch.Tensor) and isinstance(out[1], str) and "cannot decode" in out[1]


def test_decompression_bombs_are_refused_from_the_header(tmp_path, monkeypatch):
    path = _jpeg(tmp_path / "big.jpg", _photo(64, 64, 3))
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(BadImage, match="decompression bomb"):
        read_raw(path)


def test_each_decode_is_its_own_store_and_gpu_needs_a_gpu(tmp_path):
    from flowclip_cache.store.manifest_keys import extract_flags

    pil, cpu, gpu = (resolve(EncoderSpec("flowclip-tiny-clip", "synthetic", decode=d)) for d in ("pil", "cpu", "gpu"))
    assert "decode" not in pil.config  # every PIL store keeps its fingerprint
    assert len({pil.fingerprint, cpu.fingerprint, gpu.fingerprint}) == 3
    assert extract_flags(cpu.config)[-2:] == ["--decode", "cpu"]
    assert extract_flags(gpu.config)[-2:] == ["--decode", "gpu"]
    from flowclip_cache.extraction.tensor_decode import decode_config

    with pytest.raises(FlowclipError, match="use --decode pil"):
        decode_config("cpu", PRE | {"resize_mode": "longest"})  # open_clip's longest pads: not followed here
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "s"), n_images=3, fmt="JPEG")
    from click.testing import CliRunner

    from flowclip_cache.cli import main

    r = CliRunner().invoke(main, ["extract", "--store", str(tmp_path / "g"), "--model", "flowclip-tiny-clip",
                                  "--pretrained", "synthetic", "--manifest", s["candidates"], "--image-root",
                                  s["image_root"], "--decode", "gpu", "--device", "cpu"])  # fmt: skip
    assert r.exit_code == 2 and "pass --device cuda" in r.output and not os.path.exists(tmp_path / "g")
    from flowclip_cache.extraction.worker import extract_units

    with pytest.raises(FlowclipError, match="pass --device cuda"):  # the worker refuses before a store exists too
        extract_units(str(tmp_path / "w"), [s["candidates"]], ["image-0"], model="flowclip-tiny-clip",
                      pretrained="synthetic", image_root=s["image_root"], decode="gpu", device="cpu")  # fmt: skip
    assert not os.path.exists(tmp_path / "w")


def test_a_cpu_decode_store_is_close_to_pils_and_a_function_of_each_image(tmp_path):
    """The same JPEGs extracted with --decode cpu at two batch sizes (bit-identical) and with
    PIL (each feature within a cosine of 0.9999 of PIL's)."""
    from flowclip_cache.extraction.worker import extract_units, list_units
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "s"), n_images=9, fmt="JPEG", size=120)
    kw = {"model": "flowclip-tiny-clip", "pretrained": "synthetic", "image_root": s["image_root"]}
    stores = {}
    for name, decode, batch in (("pil", "pil", 64), ("cpu", "cpu", 64), ("cpu16", "cpu", 16)):
        out = str(tmp_path / name)
        units = list_units(out, [s["candidates"]], decode=decode, **kw)
        extract_units(out, [s["candidates"]], units, decode=decode, batch_size=batch, workers=1 if batch == 16 else 0,
                      **kw)  # fmt: skip
        stores[name] = FeatureStore(out)
    keys = sorted({k for roots in stores["pil"].path_index().values() for k in roots.values()})
    f = {n: st.load_images(keys) for n, st in stores.items()}
    assert np.array_equal(f["cpu"].global_, f["cpu16"].global_) and np.array_equal(f["cpu"].patches, f["cpu16"].patches)
    a, b = f["pil"].global_.astype(np.float32), f["cpu"].global_.astype(np.float32)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert len(keys) == 9 and cos.min() > 0.9999 and not np.array_equal(a, b), cos
