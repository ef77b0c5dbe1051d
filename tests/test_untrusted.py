"""Input a stranger hands us: refused per row or in one clear line, never a traceback,
never a file outside the folder the user named, never a hang."""

import io
import json
import os
import signal

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner
from PIL import Image
from test_benchmarks import _tar, build

from flowclip_cache.cli import main
from flowclip_cache.errors import FlowclipError
from flowclip_cache.extraction import extract as extract_mod
from flowclip_cache.extraction.images import load_image
from flowclip_cache.manifest import Manifest, write_manifest
from flowclip_cache.store import FeatureStore


def _jpeg() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(buf, "JPEG")
    return buf.getvalue()


def _sample(name, key, image=None, text=b"a red car next to a blue bus"):
    return [(f"{name}.jpg", _jpeg() if image is None else image), (f"{name}.txt", text),
            (f"{name}.json", json.dumps({"key": key}).encode())]  # fmt: skip


def test_cc3m_keys_never_become_paths(tmp_path):
    """Keys are record ids only (a plain id, the whole string: one ending in a newline is
    refused too); the images are named by their content."""
    src = tmp_path / "cc3m" / "train_subset_100K"
    src.mkdir(parents=True)
    _tar(
        src / "00000.tar",
        _sample("000000001", "../../pwned_by_tar")
        + _sample("000000002", "/tmp/pwned_abs")
        + _sample("000000003", "..")
        + _sample("000000005", "x\n")
        + _sample("000000004", "good_key-1"),
    )
    out = tmp_path / "m" / "cc3m.parquet"
    out.parent.mkdir()
    report, m = build("cc3m-train", src.parent, out, on_error="skip", caption="alt", kinds="shuffle-bigram")
    images = tmp_path / "m" / "cc3m-100k-images"
    assert [f.startswith("cc3m-") and f.endswith(".jpg") for f in os.listdir(images)] == [True]
    assert not (tmp_path / "pwned_by_tar.jpg").exists() and not os.path.exists("/tmp/pwned_abs.jpg")
    assert not [p for p in tmp_path.rglob("*pwned*")] and not [p for p in tmp_path.rglob("x\n*")]
    assert sum("is not a plain id" in s[2] for s in report.skipped) == 4
    assert [r["record_id"] for r in m.table.to_pylist()] == ["cc3m-train/good_key-1"]
    with pytest.raises(FlowclipError, match="is not a plain id"):
        build("cc3m-train", src.parent, tmp_path / "m" / "x.parquet", caption="alt", kinds="shuffle-bigram",
              images_out=str(tmp_path / "other"))  # fmt: skip
    assert not (tmp_path / "other").exists() and not list((tmp_path / "m").glob("other*"))


def test_cc3m_members_are_bounded_checked_images_and_a_failed_build_leaves_nothing(tmp_path):
    """A member over its limit is refused from its header (a 1 GiB caption in a 1 MiB gzip
    is never read), bytes that are not an image are a row error, and a build that fails
    after writing images removes them."""
    import tarfile

    src = tmp_path / "cc3m" / "train_subset_100K"
    src.mkdir(parents=True)
    _tar(src / "00000.tar", _sample("000000001", "a", image=b"<html>not an image</html>") + _sample("000000002", "b"))
    gz = src / "coca_captions.tar.gz"
    with tarfile.open(gz, "w:gz") as tf:
        info = tarfile.TarInfo("coca_captions/b.txt")
        info.size = 1 << 30  # a 1 GiB caption of zeros: about 1 MiB compressed

        class Zeros:
            left = info.size

            def read(self, n):
                n = min(n, self.left)
                self.left -= n
                return bytes(n)

        tf.addfile(info, Zeros())
    assert gz.stat().st_size < 2 << 20
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = tmp_path / "m" / "cc3m.parquet"
    out.parent.mkdir()
    with pytest.raises(FlowclipError, match="over the 1,048,576 flowclip reads"):
        build("cc3m-train", src.parent, out, kinds="shuffle-bigram")
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 < 200 << 20  # never read whole
    with pytest.raises(FlowclipError, match="000000001.*not an image"):
        build("cc3m-train", src.parent, out, kinds="shuffle-bigram", caption="alt")
    # sample 2's image is written, then no record has a negative ("car" has no bigram to shuffle): nothing stays
    _tar(src / "00000.tar", _sample("000000001", "a", image=b"GIF8") + _sample("000000002", "b", text=b"car"))
    with pytest.raises(FlowclipError, match="no records could be built"):
        build("cc3m-train", src.parent, out, kinds="shuffle-bigram", caption="alt", on_error="skip")
    assert sorted(os.listdir(tmp_path / "m")) == [] and not out.exists()


def _run(store, enc, manifests, root, **kw):
    fs = FeatureStore.open_or_create(str(store), enc.config)
    kw.setdefault("on_error", "skip")  # (these tests read the failure rows: as --on-error skip)
    return fs, extract_mod.run_extract(fs, enc, manifests, root, workers=0, progress=False, **kw)


def test_a_fifo_among_images_is_a_failure_row_not_a_hang(tmp_path, tiny_encoder):
    root = tmp_path / "img"
    root.mkdir()
    Image.new("RGB", (32, 32), (9, 9, 9)).save(root / "ok.png")
    os.mkfifo(root / "pipe.png")
    man = tmp_path / "m.parquet"
    write_manifest(
        man,
        pa.Table.from_pylist(
            [
                {"record_id": "a", "image": "ok.png", "captions": ["x", "y"], "gold": 0},
                {"record_id": "b", "image": "pipe.png", "captions": ["x", "y"], "gold": 0},
            ]
        ),
        "candidates",
    )
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("extract hung on the FIFO")))
    signal.alarm(60)
    try:
        fs, s = _run(tmp_path / "st", tiny_encoder, [str(man)], str(root))
    finally:
        signal.alarm(0)
    assert s.images_new == 1 and [f.reason for f in s.failures] == [
        "not a regular file (a folder, FIFO, socket or device)"
    ]
    assert s.failures[0].source.endswith(":1")


def test_a_caption_without_content_tokens_is_an_error_row(tmp_path, tiny_encoder, sample):
    from flowclip_cache.extraction.encoders import EncoderSpec, resolve

    enc = resolve(EncoderSpec("flowclip-tiny-vit", token_mask="content"))
    man = tmp_path / "m.parquet"
    rows = Manifest.read(sample["candidates"]).table.to_pylist()[:2]
    rows[1]["captions"] = [rows[1]["captions"][0], "\ufeff"]  # a BOM: not blank to Python, no token to CLIP
    write_manifest(man, pa.Table.from_pylist(rows), "candidates")
    fs, s = _run(tmp_path / "st", enc, [str(man)], sample["image_root"])
    bad = [f for f in s.failures if f.kind == "caption"]
    assert [f.reason for f in bad] == ["no content tokens under --token-mask content"]
    assert bad[0].source == f"{man}:1:captions"
    fs2, s2 = _run(tmp_path / "st", enc, [str(man)], sample["image_root"])  # a rerun is fine too
    assert s2.captions_new == 0 and len(s2.failures) == 1


def _manifest_error(tmp_path, table, meta_bytes=None):
    import pyarrow.parquet as pq

    path = tmp_path / "bad.parquet"
    if meta_bytes is not None:
        table = table.replace_schema_metadata(meta_bytes)
    pq.write_table(table, path)
    r = CliRunner().invoke(main, ["manifest", "check", str(path)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    return r.output


def test_malformed_manifests_are_one_line_errors(tmp_path):
    ok = {"record_id": ["a"], "image": ["x.png"], "captions": [["p", "q"]], "gold": [0]}
    cases = [
        (dict(ok, image=[7]), None, "column 'image' is int64, expected text"),
        (dict(ok, image=["x\x00.png"]), None, "holds a NUL byte"),
        (dict(ok, image=[b"\xff\xfe.png"]), None, "is not valid UTF-8"),
        (ok, {b"flowclip.kind": b"candidates", b"flowclip.meta": b"{broken"}, "flowclip.meta is not valid JSON"),
        (ok, {b"flowclip.kind": b"candidates", b"flowclip.meta": b"[1, 2]"}, "must be a JSON object"),
        (ok, {b"flowclip.kind": b"candidates", b"flowclip.schema_version": b"one"}, "is not an integer"),
        (dict(ok, gold=[2]), None, "gold 2 is not the index of one of its 2 captions"),
        (dict(ok, gold=[-1]), None, "gold -1 is not the index"),
        (
            dict(ok, record_id=["a", "a"], image=["x", "y"], captions=[["p", "q"]] * 2, gold=[0, 0]),
            None,
            "record_id values appear more than once",
        ),
    ]
    for cols, meta, want in cases:
        assert want in _manifest_error(tmp_path, pa.table(cols), meta), want
    # the same bad bytes in a *string* column (and inside a list of strings): named, no traceback
    bad = pa.array([b"ok.png", b"\xff\xfe.png"], pa.binary()).view(pa.string())
    two = dict(record_id=["a", "b"], captions=[["p", "q"]] * 2, gold=[0, 0])
    assert "row 1, column 'image': text that is not valid UTF-8" in _manifest_error(
        tmp_path, pa.table(dict(two, image=bad))
    )
    caps = pa.ListArray.from_arrays([0, 2, 4], pa.array([b"p", b"q", b"r", b"\xc3("], pa.binary()).view(pa.string()))
    assert "row 1, column 'captions'" in _manifest_error(tmp_path, pa.table(dict(two, image=["x", "y"], captions=caps)))


def test_malformed_head_runs_are_refused_not_scored(tmp_path):
    import torch
    from safetensors.torch import save_file

    from flowclip_cache.training.run_folder import load_head

    run_keys = {"store_fingerprint": "f" * 64, "train": {"seed": 0}}
    good_cfg = {"head": {"kind": "global", "dim": 4, "alpha": 1.0, "tau_p": 0.05}, **run_keys}
    M = torch.eye(4)
    flow_cfg = {"kind": "flow", "dim": 4, "alpha": 1.0, "tau_p": 0.05}
    flow_w = {"M": M, "M_tok": M.clone(), "W": torch.zeros(4, 4)}
    cases = [
        ({"head": {**good_cfg["head"], "kind": "flwo"}, **run_keys}, {"M": M}, "is not one of"),
        ({"head": {**good_cfg["head"], "dim": -4}, **run_keys}, {"M": M}, "is not a positive integer"),
        ({"head": {**flow_cfg, "tau_p": 0.0}, **run_keys}, flow_w, "tau_p = 0.0 must be a finite number > 0"),
        ({"head": {**flow_cfg, "alpha": float("nan")}, **run_keys}, flow_w, "alpha = nan must be a finite"),
        ({"head": {"kind": "flow", "dim": 4}, **run_keys}, flow_w, "alpha = None must be a finite"),
        ({"head": good_cfg["head"], "train": {}}, {"M": M}, "KeyError: 'store_fingerprint'"),
        ({"head": good_cfg["head"], "store_fingerprint": "f", "train": [1]}, {"M": M}, "train a mapping"),
        (good_cfg, {"M": torch.eye(5)}, "M is [5, 5] in head.safetensors, but config.json describes [4, 4]"),
        (good_cfg, {"M": M.double()}, "expected torch.float32"),
        (good_cfg, {"M": M * float("inf")}, "holds NaN or inf"),
        (good_cfg, {"W": M}, "holds ['W'], a global head needs ['M']"),
        ({"nothing": 1}, {"M": M}, "config.json is missing or malformed"),
    ]
    for i, (cfg, weights, want) in enumerate(cases):
        run = tmp_path / f"r{i}"
        run.mkdir()
        (run / "config.json").write_text(json.dumps(cfg))
        save_file(weights, str(run / "head.safetensors"))
        with pytest.raises(FlowclipError) as e:
            load_head(str(run))
        assert want in str(e.value), (want, str(e.value))
    (tmp_path / "r0" / "head.safetensors").write_bytes(b"not safetensors")
    (tmp_path / "r0" / "config.json").write_text(json.dumps(good_cfg))
    with pytest.raises(FlowclipError, match="head.safetensors is unreadable"):
        load_head(str(tmp_path / "r0"))


def test_a_config_claiming_a_huge_head_allocates_nothing(tmp_path, monkeypatch):
    """config.json says head.dim 300000 beside real 4-wide weights: the weights file's header is checked
    against the described shapes on torch's meta device first, so no head of that size is
    ever built in memory. Mutation checked: building the head before the header check
    makes the recorded build devices include 'cpu'."""
    import torch
    from safetensors.torch import save_file

    from flowclip_cache.training import run_folder

    built = []
    real = run_folder.build_head
    monkeypatch.setattr(
        run_folder, "build_head", lambda *a, **k: (built.append(torch.empty(0).device.type), real(*a, **k))[1]
    )
    (tmp_path / "config.json").write_text(
        json.dumps({"head": {"kind": "flow", "dim": 300000, "alpha": 1.0, "tau_p": 0.05},
                    "store_fingerprint": "f" * 64, "train": {"seed": 0}})
    )  # fmt: skip
    save_file({"M": torch.eye(4), "M_tok": torch.eye(4), "W": torch.zeros(4, 4)}, str(tmp_path / "head.safetensors"))
    with pytest.raises(
        FlowclipError, match=r"M is \[4, 4\] in head.safetensors, but config.json describes \[300000, 300000\]"
    ):
        run_folder.load_head(str(tmp_path))
    assert built == ["meta"]


def test_float_tiff_in_unit_range_is_scaled_not_black(tmp_path):
    arr = np.linspace(0, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
    Image.fromarray(arr, mode="F").save(tmp_path / "f.tif")
    im = np.asarray(load_image(str(tmp_path / "f.tif")))
    assert im.max() == 255 and abs(im.mean() - 127.5) < 2
    Image.fromarray(arr * 255, mode="F").save(tmp_path / "g.tif")
    assert np.asarray(load_image(str(tmp_path / "g.tif"))).max() == 255
    Image.fromarray(arr * 1000, mode="F").save(tmp_path / "h.tif")
    from flowclip_cache.extraction.images import BadImage

    with pytest.raises(BadImage, match="outside"):
        load_image(str(tmp_path / "h.tif"))
