"""flowclip extract end to end on the tiny CLIP: once per key, bad input, safety."""

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from flowclip_cache.cli import main
from flowclip_cache.errors import FlowclipError, ManifestError
from flowclip_cache.extraction import extract as extract_mod
from flowclip_cache.extraction.features import encode_images, encode_texts
from flowclip_cache.extraction.images import load_image
from flowclip_cache.hashing import caption_key, file_sha256
from flowclip_cache.manifest import Manifest, write_manifest
from flowclip_cache.store import IMAGE, FeatureStore
from flowclip_cache.store.integrity import store_problems


def run(store_dir, enc, manifests, root, backend="zarr", **kw):
    fs = FeatureStore.open_or_create(str(store_dir), enc.config, backend)
    kw.setdefault("workers", 0)
    kw.setdefault("progress", False)
    kw.setdefault("on_error", "skip")  # (these tests read the failure rows: as --on-error skip)
    return fs, extract_mod.run_extract(fs, enc, manifests, root, **kw)


def candidates(path, rows):
    write_manifest(
        path,
        pa.Table.from_pylist(
            [{"record_id": f"r{i}", "image": img, "captions": caps, "gold": 0} for i, (img, caps) in enumerate(rows)]
        ),
        "candidates",
    )
    return str(path)


@pytest.mark.parametrize("backend", ["zarr", "hdf5"])
def test_extract_once_and_equal_to_direct_encoding(tmp_path, sample, tiny_encoder, tiny_model, backend):
    fs, s = run(
        tmp_path / "st", tiny_encoder, [sample["candidates"], sample["training"]], sample["image_root"], backend
    )
    m = Manifest.read(sample["candidates"])
    texts = {c.text for c in m.caption_refs()}
    assert s.images_new == 12 and s.captions_new == len(texts) and not s.failures
    fs.refresh()
    assert store_problems(fs.root) == []
    model, preprocess = tiny_model, tiny_model.preprocess
    # every stored row equals a direct encoding of the file / caption, rounded to FP16
    names = sorted(os.listdir(sample["image_root"]))[:3]
    x = torch.stack([preprocess(Image.open(os.path.join(sample["image_root"], n)).convert("RGB")) for n in names])
    g, p = encode_images(model, x)
    got = fs.load_images([file_sha256(os.path.join(sample["image_root"], n)) for n in names])
    np.testing.assert_allclose(got.global_.astype(np.float32), g.half().float().numpy(), atol=1e-3)
    np.testing.assert_allclose(got.patches.astype(np.float32), p.half().float().numpy(), atol=1e-3)
    cap = sorted(texts)[0]
    f = encode_texts(model, model.tokenize([cap]))
    c = fs.load_captions([caption_key(cap)])
    np.testing.assert_allclose(c.tokens.astype(np.float32), f.tokens[0][f.mask[0]].half().float().numpy(), atol=1e-3)
    assert c.offsets.tolist() == [0, int(f.mask.sum())]


def test_second_run_loads_no_model_and_new_manifest_adds_only_new(tmp_path, sample, tiny_encoder, monkeypatch):
    run(tmp_path / "st", tiny_encoder, [sample["candidates"]], sample["image_root"])
    import flowclip_cache.extraction.encoders as encoders

    def no_model(*a, **k):
        raise AssertionError("a run with nothing new must not load the model")

    monkeypatch.setattr(encoders, "load_model", no_model)
    fs, s = run(tmp_path / "st", tiny_encoder, [sample["candidates"]], sample["image_root"])
    assert (s.images_new, s.captions_new, s.images_stored) == (0, 0, 12)
    monkeypatch.undo()
    # the training manifest shares every image and adds nothing either (same captions)
    extra = candidates(tmp_path / "extra.parquet", [("scene_00000.png", ["a brand new caption", "another"])])
    fs, s = run(tmp_path / "st", tiny_encoder, [sample["candidates"], extra], sample["image_root"])
    assert (s.images_new, s.captions_new, s.images_stored) == (0, 2, 12)


def test_unchanged_image_files_are_not_read_again(tmp_path, sample, tiny_encoder, monkeypatch):
    root = tmp_path / "images"  # a copy, so one file can be edited
    shutil.copytree(sample["image_root"], root)
    run(tmp_path / "st", tiny_encoder, [sample["candidates"]], str(root))
    from flowclip_cache.extraction import plan as extract_plan  # where the keys are collected (files hashed)

    hashed, real = [], extract_plan.file_sha256
    monkeypatch.setattr(extract_plan, "file_sha256", lambda p: (hashed.append(os.path.basename(p)), real(p))[1])
    fs, s = run(tmp_path / "st", tiny_encoder, [sample["candidates"]], str(root))
    assert hashed == [] and (s.images_new, s.images_stored) == (0, 12)
    # an edited file (new bytes, new mtime) is hashed again, alone, and encoded under its new key
    Image.new("RGB", (40, 40), (1, 2, 3)).save(root / "scene_00000.png")
    fs, s = run(tmp_path / "st", tiny_encoder, [sample["candidates"]], str(root))
    assert hashed == ["scene_00000.png"] and s.images_new == 1
    assert fs.path_index()[("scene_00000.png", None)][os.path.realpath(root)] == real(str(root / "scene_00000.png"))
    hashed.clear()
    fs, s = run(tmp_path / "st", tiny_encoder, [sample["candidates"]], str(root), rehash=True)
    assert len(hashed) == 12 and s.images_new == 0


def test_ranks_split_the_plan(tmp_path, sample, tiny_encoder):
    kw = dict(image_unit=4, caption_unit=8)
    fs_a, _ = run(
        tmp_path / "a", tiny_encoder, [sample["candidates"]], sample["image_root"], rank=0, world_size=2, **kw
    )
    fs_b, _ = run(
        tmp_path / "a", tiny_encoder, [sample["candidates"]], sample["image_root"], rank=1, world_size=2, **kw
    )
    fs_a.refresh()
    fs_one, _ = run(tmp_path / "one", tiny_encoder, [sample["candidates"]], sample["image_root"], **kw)
    fs_one.refresh()
    assert sorted(s.name for s in fs_a.segments) == sorted(s.name for s in fs_one.segments)


def _bad_images(root):
    os.makedirs(root, exist_ok=True)
    ok = Image.new("RGB", (40, 20), (200, 10, 10))
    ok.save(f"{root}/ok.png")
    open(f"{root}/zero.png", "wb").close()
    data = open(f"{root}/ok.png", "rb").read()
    big = Image.effect_noise((64, 64), 50).convert("RGB")
    big.save(f"{root}/noise.jpg", quality=90)
    open(f"{root}/truncated.jpg", "wb").write(open(f"{root}/noise.jpg", "rb").read()[:600])
    open(f"{root}/text.jpg", "w").write("not an image")
    ok.convert("CMYK").save(f"{root}/cmyk.jpg")
    ok.convert("P").save(f"{root}/palette.png")
    Image.fromarray((np.arange(40 * 20).reshape(20, 40) * 70).astype(np.uint16)).save(f"{root}/sixteen.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° on display
    ok.save(f"{root}/rotated.jpg", exif=exif.tobytes())
    return data


def test_bad_items_are_reported_and_never_stored(tmp_path, tiny_encoder):
    root = str(tmp_path / "imgs")
    _bad_images(root)
    outside = tmp_path / "outside.png"
    Image.new("RGB", (8, 8)).save(outside)
    os.symlink(outside, f"{root}/link.png")
    rows = [
        (n, [f"caption {n}"])
        for n in [
            "ok.png",
            "zero.png",
            "truncated.jpg",
            "text.jpg",
            "cmyk.jpg",
            "palette.png",
            "sixteen.png",
            "rotated.jpg",
            "missing.png",
            "../outside.png",
            str(outside),
            "link.png",
        ]
    ]
    rows.append(("ok.png", ["", "word " * 100]))
    man = candidates(tmp_path / "m.parquet", rows)
    fs, s = run(tmp_path / "st", tiny_encoder, [man], root)
    reasons = {f.item: f.reason for f in s.failures}
    assert reasons["zero.png"] == "zero-byte file"
    assert reasons["text.jpg"] == "not an image PIL can read"
    assert reasons["truncated.jpg"].startswith("unreadable image")
    assert reasons["missing.png"] == "missing file"
    assert "escapes the image root" in reasons["../outside.png"]
    assert "escapes the image root" in reasons["link.png"]
    assert "absolute path refused" in reasons[str(outside)]
    assert reasons[""] == "empty caption"
    assert s.images_new == 5  # ok, cmyk, palette, sixteen, rotated
    assert s.captions_truncated == 1
    fs.refresh()
    assert fs.count(IMAGE) == 5 and store_problems(fs.root) == []
    assert not fs.has(IMAGE, [file_sha256(f"{root}/zero.png")])[0]
    import pyarrow.parquet as pq

    table = pq.read_table(s.failures_file)
    assert table.num_rows == len(s.failures) and set(table.column_names) >= {"key", "path_or_text", "reason"}
    assert load_image(f"{root}/rotated.jpg").size == (20, 40)
    # allowed outside the root when asked
    fs2, s2 = run(tmp_path / "st2", tiny_encoder, [man], root, allow_outside_root=True)
    assert "link.png" not in {f.item for f in s2.failures}


def test_decompression_bomb_is_reported(tmp_path, tiny_encoder, monkeypatch):
    root = tmp_path / "imgs"
    root.mkdir()
    Image.new("RGB", (300, 300)).save(root / "bomb.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10_000)
    man = candidates(tmp_path / "m.parquet", [("bomb.png", ["x"])])
    _, s = run(tmp_path / "st", tiny_encoder, [man], str(root))
    assert s.failures[0].reason.startswith("decompression bomb refused")


def test_on_error_fail_exits_non_zero(tmp_path, tiny_encoder):
    root = tmp_path / "imgs"
    root.mkdir()
    man = candidates(tmp_path / "m.parquet", [("missing.png", ["x"])])
    r = CliRunner().invoke(
        main,
        [
            "extract",
            "--store",
            str(tmp_path / "st"),
            "--model",
            "flowclip-tiny-vit",
            "--pretrained",
            "none",
            "--manifest",
            man,
            "--image-root",
            str(root),
            "--on-error",
            "fail",
            "--quiet",
        ],
    )
    # refused before any store is made, naming the image and the manifest
    assert r.exit_code == 2 and "none of the 1 images the manifests name exist" in r.output, r.output
    assert "'missing.png'" in r.output and not (tmp_path / "st").exists()


def test_manifest_errors_name_file_column_row(tmp_path, tiny_encoder):
    import pyarrow.parquet as pq

    empty = tmp_path / "empty.parquet"
    write_manifest(
        empty,
        pa.table(
            {
                "record_id": pa.array([], pa.string()),
                "image": pa.array([], pa.string()),
                "captions": pa.array([], pa.list_(pa.string())),
                "gold": pa.array([], pa.int32()),
            }
        ),
        "candidates",
    )
    with pytest.raises(ManifestError, match="empty.parquet: the manifest is empty"):
        Manifest.read(empty)
    nocol = tmp_path / "nocol.parquet"
    write_manifest(nocol, pa.table({"record_id": ["a"], "image": ["x.png"], "captions": [["c"]]}), "candidates")
    with pytest.raises(ManifestError, match="nocol.parquet: missing column 'gold'"):
        Manifest.read(nocol)
    bad = tmp_path / "bad.parquet"
    write_manifest(
        bad,
        pa.table(
            {
                "record_id": ["a", "b"],
                "image": ["x.png", "y.png"],
                "captions": pa.array([[b"ok"], [b"\xff\xfe"]], pa.list_(pa.binary())),
                "gold": [0, 0],
            }
        ),
        "candidates",
    )
    with pytest.raises(ManifestError, match="bad.parquet: row 1: column 'captions' is not valid UTF-8"):
        list(Manifest.read(bad).caption_refs())
    with pytest.raises(FlowclipError, match="image root .*nowhere does not exist"):
        extract_mod.collect([str(nocol).replace("nocol", "bad")], str(tmp_path / "nowhere"))
    pq.write_table(pa.table({"foo": [1]}), tmp_path / "unknown.parquet")
    with pytest.raises(ManifestError, match="cannot tell the manifest kind"):
        Manifest.read(tmp_path / "unknown.parquet")


def test_store_cli_info_and_verify(tmp_path, sample, tiny_encoder):
    fs, _ = run(tmp_path / "st", tiny_encoder, [sample["candidates"]], sample["image_root"])
    r = CliRunner().invoke(main, ["store", "info", fs.root, "--json"])
    info = json.loads(r.output)
    assert info["images"] == 12 and info["fingerprint"] == tiny_encoder.fingerprint and info["bytes_on_disk"] > 0
    r = CliRunner().invoke(main, ["store", "verify", fs.root])
    assert r.exit_code == 0 and r.output.startswith("ok:")
    seg = next(s for s in fs.segments if s.kind == "img")
    shutil.rmtree(os.path.join(seg.path, "patches"))  # damage a committed segment
    r = CliRunner().invoke(main, ["store", "verify", fs.root])
    assert r.exit_code == 2 and seg.name in r.output


def test_captions_with_equal_token_ids_get_identical_features(tmp_path, sample, tiny_encoder, tiny_model, monkeypatch):
    """ABC-6K's abc/1887: two captions whose token ids are equal, either side of a batch
    boundary, must score as a tie. Features are a function of the token ids: encoded
    once per distinct sequence in a run, and reused from the store by a later run."""
    tokenize = tiny_model.tokenize
    m = Manifest.read(sample["candidates"])
    rows = m.table.to_pylist()
    rows[0]["captions"] = [
        "A red square near a blue circle.",
        "a red square near a blue circle.",
    ]  # tokenizer lowercases
    man = tmp_path / "m.parquet"
    write_manifest(man, pa.Table.from_pylist(rows), "candidates")
    import flowclip_cache.extraction.features as features_mod

    encoded = []
    real = features_mod.encode_texts
    monkeypatch.setattr(
        features_mod, "encode_texts", lambda model, ids, *a: (encoded.append(ids), real(model, ids, *a))[1]
    )
    fs, s = run(tmp_path / "st", tiny_encoder, [str(man)], sample["image_root"], text_batch_size=3, caption_unit=3)
    t = tokenize([c.text for c in Manifest.read(man).caption_refs()])
    distinct = {tuple(r[m].tolist()) for r, m in zip(t.ids, t.mask)}
    assert sum(len(x) for x in encoded) == len(distinct) == s.captions_new - 1  # the pair encoded once
    a = fs.load_captions([caption_key(c) for c in rows[0]["captions"]])
    np.testing.assert_array_equal(a.global_[0], a.global_[1])
    np.testing.assert_array_equal(a.tokens[a.offsets[0] : a.offsets[1]], a.tokens[a.offsets[1] : a.offsets[2]])
    # a later run adds a third spelling: it gets the stored features, not a new encoding
    rows[1]["captions"] = ["A RED SQUARE NEAR A BLUE CIRCLE.", rows[1]["captions"][1]]
    write_manifest(man, pa.Table.from_pylist(rows), "candidates")
    encoded.clear()
    fs, s = run(tmp_path / "st", tiny_encoder, [str(man)], sample["image_root"], text_batch_size=7)
    assert s.captions_new == 1 and sum(len(x) for x in encoded) == 0
    c = fs.load_captions([caption_key(rows[0]["captions"][0]), caption_key(rows[1]["captions"][0])])
    np.testing.assert_array_equal(c.global_[0], c.global_[1])
    np.testing.assert_array_equal(c.tokens[c.offsets[0] : c.offsets[1]], c.tokens[c.offsets[1] : c.offsets[2]])


def test_a_partial_input_fails_unless_asked_and_the_store_says_so(tmp_path, sample):
    """extract's default is --on-error fail: images missing under --image-root (a folder of
    the data not given, as COCO's val2014 beside train2014) refuse the command in one line,
    naming how many, the first and their folders, before a store exists; --on-error skip
    extracts the rest, and `store info` counts what failed."""
    rows = Manifest.read(sample["candidates"]).table.to_pylist()
    rows[3]["image"] = "val2014/gone.png"
    man = tmp_path / "m.parquet"
    write_manifest(man, pa.Table.from_pylist(rows), "candidates")
    args = ["extract", "--store", str(tmp_path / "st"), "--model", "flowclip-tiny-clip", "--pretrained", "none",
                                      "--manifest", str(man),
            "--image-root", sample["image_root"], "--workers", "0", "--quiet"]  # fmt: skip
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "1 of the" in r.output and "'val2014/gone.png'" in r.output and "in val2014" in r.output
    assert "--on-error skip" in r.output and not (tmp_path / "st").exists()
    r = CliRunner().invoke(main, [*args, "--on-error", "skip"])
    assert r.exit_code == 0 and "failed:   1" in r.output, r.output
    r = CliRunner().invoke(main, ["store", "info", str(tmp_path / "st")])
    assert "failed_to_extract" in r.output and "'images': 1" in r.output, r.output
