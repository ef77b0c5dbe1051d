"""The Python API (docs/python-api.md): the same code paths as the command line, so the
same weights and the same result files; online scoring equals extract-then-score."""

import os

import pytest
import torch
from click.testing import CliRunner

import flowclip_cache as fc
from flowclip_cache.cli import main
from flowclip_cache.errors import FlowclipError


def test_the_package_exports_the_api_without_importing_torch_first():
    import subprocess
    import sys

    code = (
        "import sys, flowclip_cache as fc; print('torch' in sys.modules, sorted(fc.__all__) == sorted(set(fc.__all__)))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.split() == ["False", "True"], r.stderr
    assert all(getattr(fc, name) is not None for name in fc.__all__)
    with pytest.raises(AttributeError):
        fc.no_such_thing


def test_train_from_python_equals_train_head(lab, tmp_path, capsys):
    settings = ["--head", "flow", "--epochs", "2", "--batch-size", "4", "--lr", "1e-3", "--seed", "3"]
    cli_out = str(tmp_path / "cli")
    r = CliRunner().invoke(
        main,
        ["train-head", "--store", lab["store"], "--train", lab["training"], "--out", cli_out, *settings, "--quiet"],
    )
    assert r.exit_code == 0, r.output
    capsys.readouterr()
    settings = dict(head="flow", epochs=2, batch_size=4, lr=1e-3, seed=3)
    run = fc.train_head(lab["store"], lab["training"], str(tmp_path / "py"), quiet=True, **settings)
    assert capsys.readouterr() == ("", "")  # quiet: nothing printed
    assert (
        open(os.path.join(cli_out, "head.safetensors"), "rb").read()
        == open(os.path.join(run.folder, "head.safetensors"), "rb").read()
    )
    assert set(run.weights) == {"M", "M_tok", "W"} and [m["epoch"] for m in run.history] == [0, 1, 2]
    assert run.config["train"]["seed"] == 3 and fc.load_run(cli_out).config["train"] == run.config["train"]
    with pytest.raises(FlowclipError, match="unknown keys"):
        fc.train_head(lab["store"], lab["training"], str(tmp_path / "bad"), epochz=2, quiet=True)
    with pytest.raises(FlowclipError, match="not a finished head run"):
        fc.load_run(str(tmp_path))


def test_score_from_python_equals_flowclip_score(lab, tmp_path):
    run = fc.train_head(
        lab["store"], lab["training"], str(tmp_path / "flow"), head="flow", epochs=1, batch_size=4, quiet=True
    )
    scorers = ["clip", f"flow={run.folder}"]
    common = ["--controls", "real,fixed", "--bootstrap", "200", "--quiet"]
    cli = str(tmp_path / "cli")
    args = ["score", "--store", lab["store"], "--manifests", lab["candidates"], "--out", cli, *common]
    r = CliRunner().invoke(main, args + [a for s in scorers for a in ("--scorer", s)])
    assert r.exit_code == 0, r.output
    py = str(tmp_path / "py")
    res = fc.score_manifests(
        lab["store"], [lab["candidates"]], scorers, py, controls=("real", "fixed"), bootstrap=200, quiet=True
    )
    for name in ("results.csv", "records.parquet"):
        assert open(os.path.join(cli, name), "rb").read() == open(os.path.join(res.folder, name), "rb").read()
    bench = next(iter(res.summary["results"]["real|flow"]))
    assert res.score(bench, "flow") == res.summary["results"]["real|flow"][bench]["score"]
    assert res.result(bench, "clip", "fixed")["n"] > 0
    rec = res.records.to_pydict()
    assert set(rec["scorer"]) == {"clip", "flow"} and set(rec["control"]) == {"real", "fixed"}
    with pytest.raises(FlowclipError, match="no result"):
        res.score("nope", "flow")


def test_read_features_are_the_stores_rows(lab):
    from flowclip_cache.hashing import caption_key
    from flowclip_cache.store import FeatureStore

    f = fc.read_features(lab["store"], lab["candidates"])
    fs = FeatureStore(lab["store"])
    v = torch.from_numpy(fs.load_images(f.image_keys).global_).float()
    assert torch.allclose(f.image_global, v / v.norm(dim=-1, keepdim=True), atol=1e-6)
    cf = fs.load_captions([caption_key(c) for c in f.caption_texts])
    n0 = int(cf.offsets[1])
    assert int(f.caption_mask[0].sum()) == n0 and not f.caption_mask[0, n0:].any()
    t0 = torch.from_numpy(cf.tokens[:n0]).float()
    assert torch.allclose(f.caption_tokens[0, :n0], t0 / t0.norm(dim=-1, keepdim=True), atol=1e-6)
    assert len(f.row_image) == len(fc.read_features(lab["store"], lab["candidates"], tokens=False).row_image)


@pytest.mark.parametrize("model", ["flowclip-tiny-clip", "ViT-B-32"])
def test_online_scoring_equals_extract_then_score(lab, tmp_path, model):
    """PIL images and caption strings scored online against the same pairs scored by flowclip
    score from a store the same encoder filled: bit-identical (checked failing when the online
    path skips the store's FP16 rounding)."""
    from flowclip_cache.extraction.images import load_image
    from flowclip_cache.manifest import Manifest

    store = lab["store"]
    if model != "flowclip-tiny-clip":  # a random ViT-B/32: its own store of the sample's candidates
        store = str(tmp_path / "b32")
        r = CliRunner().invoke(main, ["extract", "--store", store, "--model", model, "--pretrained", "none",
                                      "--manifest", lab["candidates"],
                                      "--image-root", lab["image_root"], "--quiet"])  # fmt: skip
        assert r.exit_code == 0, r.output
    run = None  # the random ViT-B/32 is scored by its frozen encoder (CLIP), the tiny CLIP by a trained head
    if model == "flowclip-tiny-clip":
        run = fc.train_head(
            store, lab["training"], str(tmp_path / "run"), head="flow", epochs=1, batch_size=4, quiet=True
        )
    f = fc.read_features(store, lab["candidates"])
    head = run.head if run else fc.OnlineScorer(model).head
    with torch.no_grad():
        want = head(*f.as_head_inputs())
    rows = Manifest.read(lab["candidates"]).table.to_pylist()
    first = {}
    for r, i in zip(rows, f.row_image.tolist()):
        first.setdefault(i, r["image"])
    images = [load_image(os.path.join(lab["image_root"], first[i])) for i in range(len(f.image_keys))]
    online = fc.OnlineScorer(model, run.folder if run else None)
    got = online(images, f.caption_texts)
    assert got.shape == want.shape
    # the head's all-pairs forward sums in another order than a pair's own score: close, not bitwise
    assert torch.allclose(got, want, atol=1e-6, rtol=0), float((got - want).abs().max())
    # flowclip score's per-record scores: every bit (the store's FP16 rounding, pair by pair)
    scorer = f"s={run.folder}" if run else "clip"
    res = fc.score_manifests(store, [lab["candidates"]], [scorer], str(tmp_path / "sc"), bootstrap=0, quiet=True)
    caption = {c: k for k, c in enumerate(f.caption_texts)}
    recs = [r for r in res.records.to_pylist() if r["control"] == "real"]
    assert len(recs) == len(rows)
    for r, row, i in zip(recs, rows, f.row_image.tolist()):
        assert r["record_id"] == row["record_id"]
        assert r["scores"] == [got[i, caption[c]].item() for c in row["captions"]], r["record_id"]
    for r, row, i in list(zip(recs, rows, f.row_image.tolist()))[:4]:
        # one record at a time: the same bits
        alone = online([images[i]], row["captions"])[0].tolist()
        assert r["scores"] == alone, (r["record_id"], r["scores"], alone)
    if run:  # another encoder's run is refused
        with pytest.raises(FlowclipError, match="trained on .* but the encoder configured here is .*seed 5"):
            fc.OnlineScorer("flowclip-tiny-clip", run.folder, init_seed=5)
