"""flowclip publish and hf:OWNER/NAME (docs/publish.md): a published head loads back from
a laid-out Hugging Face cache with no network and scores exactly as the run folder it
came from; the folder holds data only, and a plug-in head's code is never taken from it."""

import json
import os

import pytest
from click.testing import CliRunner
from conftest import doc_file

import flowclip_cache as fc
from flowclip_cache.cli import main

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def trained(lab, tmp_path_factory):
    """The session's sample store and a Flow-CLIP run trained on it."""
    out = str(tmp_path_factory.mktemp("sharing") / "flow")
    run = fc.train_head(lab["store"], lab["training"], out, head="flow", epochs=2, batch_size=4, lr=1e-2, quiet=True)
    return {**lab, "run": run.folder}


def lay_out_cache(cache, owner_name: str, folder) -> None:
    """What huggingface_hub leaves in its cache after a download: refs/main -> the commit,
    snapshots/<commit>/ the files."""
    repo = cache / f"models--{owner_name.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    for name in os.listdir(folder):
        (snap / name).write_bytes((folder / name).read_bytes())


def test_a_published_head_scores_as_its_run_from_an_offline_cache(trained, tmp_path, monkeypatch):
    score_args = ["score", "--store", trained["store"], "--manifests", trained["candidates"], "--bootstrap", "0",
                  "--quiet"]  # fmt: skip
    r = CliRunner().invoke(main, [*score_args, "--scorer", f"flow={trained['run']}", "--out", str(tmp_path / "res")])
    assert r.exit_code == 0, r.output
    pub = tmp_path / "pub"
    r = CliRunner().invoke(main, ["publish", trained["run"], "--out", str(pub), "--results", str(tmp_path / "res")])
    assert r.exit_code == 0, r.output
    assert sorted(os.listdir(pub)) == ["DONE", "FLOWCLIP_OUTPUT.json", "README.md", "config.json", "head.safetensors"]
    card, cfg = (pub / "README.md").read_text(), json.loads((pub / "config.json").read_text())
    store = json.load(open(os.path.join(trained["store"], "store.json")))
    assert f"store fingerprint: `{store['fingerprint']}`" in card and "model: `flowclip-tiny-clip`" in card
    assert f"weights: `{store['encoder']['weights']['source']}`" in card
    res = json.load(open(tmp_path / "res" / "results.json"))["results"]["real|flow"]
    assert f"| sample | {100 * res['sample']['score']:.2f} |" in card
    assert "store" not in cfg and "manifest" not in cfg  # no local paths of the publisher
    # laid out as huggingface_hub caches it; offline, nothing downloads
    cache = tmp_path / "hub"
    lay_out_cache(cache, "someone/flow-head", pub)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    r = CliRunner().invoke(main, [*score_args, "--scorer", "hf:someone/flow-head", "--out", str(tmp_path / "hub-res")])
    assert r.exit_code == 0, r.output
    import pyarrow.parquet as pq

    a = pq.read_table(tmp_path / "res" / "records.parquet").to_pydict()
    b = pq.read_table(tmp_path / "hub-res" / "records.parquet").to_pydict()
    assert a["scores"] == b["scores"] and set(b["scorer"]) == {"flow-head"}  # identical, labelled by NAME
    run = fc.load_run("hf:someone/flow-head")
    assert all(v.equal(fc.load_run(trained["run"]).weights[k]) for k, v in run.weights.items())
    # open_clip's spelling of a Hub name, hf-hub:, names the same head
    assert all(v.equal(run.weights[k]) for k, v in fc.load_run("hf-hub:someone/flow-head").weights.items())
    r = CliRunner().invoke(main, [*score_args, "--scorer", "hf-hub:someone/flow-head", "--out", str(tmp_path / "hh")])
    assert r.exit_code == 0 and pq.read_table(tmp_path / "hh" / "records.parquet").to_pydict()["scores"] == b["scores"]
    r = CliRunner().invoke(main, [*score_args, "--scorer", "hf:someone/absent", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "HF_HUB_OFFLINE is set and it is not in the local cache" in r.output
    # publish never replaces what it did not write; --overwrite replaces its own folder only
    r = CliRunner().invoke(main, ["publish", trained["run"], "--out", str(pub)])
    assert r.exit_code == 2 and "pass --overwrite" in r.output
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    r = CliRunner().invoke(main, ["publish", trained["run"], "--out", str(tmp_path / "mine"), "--overwrite"])
    assert r.exit_code == 2 and (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_a_published_plug_in_head_imports_nothing_from_the_folder(lab, tmp_path, monkeypatch):
    head = doc_file("plugins.md", "bilinear", "bilinear.py")
    (tmp_path / "bilinear.py").write_text(head)
    fc.load_plugin(str(tmp_path / "bilinear.py"))
    run = fc.train_head(lab["store"], lab["training"], str(tmp_path / "bil"), head="bilinear", epochs=1,
                        batch_size=4, quiet=True)  # fmt: skip
    r = CliRunner().invoke(main, ["publish", run.folder, "--out", str(tmp_path / "pub")])
    assert r.exit_code == 0, r.output
    card = (tmp_path / "pub" / "README.md").read_text()
    assert "the class `Bilinear` of the file `bilinear.py`" in card and "This folder holds no code" in card
    assert json.loads((tmp_path / "pub" / "config.json").read_text())["head"]["plugin"]["source"] == "bilinear.py"
    from flowclip_cache.heads import REGISTRY

    del REGISTRY["bilinear"]  # as on another machine: the head's code is not available
    cache = tmp_path / "hub"
    lay_out_cache(cache, "someone/bil", tmp_path / "pub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    sha = json.loads((tmp_path / "pub" / "config.json").read_text())["head"]["plugin"]["sha256"]
    # the hint names the class, the recorded file name and the sha256 the run expects of it
    with pytest.raises(fc.FlowclipError, match=rf"class Bilinear of the file bilinear.py \(sha256 {sha}\)"):
        fc.load_run("hf:someone/bil")
