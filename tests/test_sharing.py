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


def test_a_published_head_whose_weights_changed_is_refused(trained, tmp_path):
    """The sha256 publish records is compared when the folder is loaded: weights changed
    after publishing are refused in one line, never scored under the published name."""
    pub = tmp_path / "pub"
    assert CliRunner().invoke(main, ["publish", trained["run"], "--out", str(pub)]).exit_code == 0
    fc.load_run(str(pub))  # as published: loads
    from safetensors.torch import load_file, save_file

    w = load_file(str(pub / "head.safetensors"))
    w["W"] = w["W"] + 1e-3
    save_file(w, str(pub / "head.safetensors"))
    with pytest.raises(fc.FlowclipError, match="not the .* it was published with"):
        fc.load_run(str(pub))
    r = CliRunner().invoke(main, ["score", "--store", trained["store"], "--manifests", trained["candidates"],
                                  "--scorer", f"pub={pub}", "--out", str(tmp_path / "s"), "--quiet"])  # fmt: skip
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "published with" in r.output
    assert not (tmp_path / "s").exists()


def test_a_run_whose_config_drops_its_plug_in_sha256_is_refused(lab, tmp_path):
    """The pre-import hash check cannot be switched off by removing the hash: a run folder
    recording no sha256 for its plug-in head is refused, unless --allow-changed-plugin."""
    (tmp_path / "bilinear.py").write_text(doc_file("plugins.md", "bilinear", "bilinear.py"))
    fc.load_plugin(str(tmp_path / "bilinear.py"))
    run = fc.train_head(lab["store"], lab["training"], str(tmp_path / "bil"), head="bilinear", epochs=1,
                        batch_size=4, quiet=True)  # fmt: skip
    cfg_path = os.path.join(run.folder, "config.json")
    cfg = json.load(open(cfg_path))
    for dropped in (None, "", "not-a-hash"):
        cfg["head"]["plugin"]["sha256"] = dropped
        json.dump(cfg, open(cfg_path, "w"))
        with pytest.raises(fc.FlowclipError, match="records no sha256 of its plug-in head"):
            fc.load_run(run.folder)
    del cfg["head"]["plugin"]["sha256"]
    json.dump(cfg, open(cfg_path, "w"))
    with pytest.raises(fc.FlowclipError, match="records no sha256"):
        fc.load_run(run.folder)


class HubStandIn:
    """huggingface_hub.HfApi's create_repo and upload_folder, by hand: the upload is a copy
    into a local folder (never the network); `fail` makes the upload raise as the Hub would."""

    calls: list = []
    fail: str | None = None
    root = ""

    def create_repo(self, repo_id, repo_type="model", private=False, exist_ok=False):
        self.calls.append(("create_repo", repo_id, repo_type, private, exist_ok))

    def upload_folder(self, repo_id, folder_path, repo_type="model", ignore_patterns=(), commit_message=""):
        import fnmatch
        import shutil

        self.calls.append(("upload_folder", repo_id, repo_type, commit_message))
        if self.fail:
            raise RuntimeError(self.fail)
        dest = os.path.join(self.root, repo_id)
        os.makedirs(dest, exist_ok=True)
        for name in os.listdir(folder_path):
            if not any(fnmatch.fnmatch(name, p) for p in ignore_patterns):
                shutil.copyfile(os.path.join(folder_path, name), os.path.join(dest, name))


def test_publish_push_carries_the_hubs_metadata_and_how_the_head_was_made(lab, tmp_path, monkeypatch):
    """A sweep's best trial, scored on what the sweep did not select on, published with
    --push: the card's front matter parses with huggingface_hub's own ModelCard (its
    model-index as eval results equal to results.json), its extract command makes a store of
    the same fingerprint, and it says a sweep selected the head and on what."""
    import huggingface_hub
    import yaml
    from huggingface_hub import ModelCard

    from flowclip_cache.manifest import Manifest, split_by_image, write_manifest

    m = Manifest.read(lab["candidates"])
    for name, part in zip(("select", "report"), split_by_image(m, 0.5, 0)):
        write_manifest(tmp_path / f"{name}.parquet", part, m.kind, m.meta)
    fc.sweep(str(tmp_path / "sw"), lab["store"], lab["training"], {"lr": {"choices": [1e-3]}}, trials=1,
             validation=str(tmp_path / "select.parquet"), eval=[str(tmp_path / "report.parquet")],
             train_config={"head": "flow", "epochs": 1, "batch_size": 4}, quiet=True)  # fmt: skip
    best = json.load(open(tmp_path / "sw" / "best.json"))
    run = str(tmp_path / "sw" / "trials" / best["runs"][0])
    res = fc.score_manifests(lab["store"], [str(tmp_path / "report.parquet")], [f"best={run}"], str(tmp_path / "res"),
                             bootstrap=0, quiet=True)  # fmt: skip
    HubStandIn.root, HubStandIn.calls, HubStandIn.fail = str(tmp_path / "hub"), [], None
    monkeypatch.setattr(huggingface_hub, "HfApi", HubStandIn)
    args = ["publish", run, "--out", str(tmp_path / "pub"), "--results", res.folder, "--push", "me/flow-test",
            "--license", "mit", "--dataset", "me/sample-data"]  # fmt: skip
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "pushed" in r.output and "--scorer hf:me/flow-test" in r.output
    assert [c[0] for c in HubStandIn.calls] == ["create_repo", "upload_folder"] and HubStandIn.calls[0][1:3] == (
        "me/flow-test",
        "model",
    )
    up = tmp_path / "hub" / "me" / "flow-test"
    assert sorted(os.listdir(up)) == ["DONE", "README.md", "config.json", "head.safetensors"]  # the marker stays
    card = ModelCard((up / "README.md").read_text())
    assert (
        card.data.license == "mit" and card.data.datasets == ["me/sample-data"] and card.data.library_name == "flowclip"
    )
    assert "flowclip" in card.data.tags and "flowclip-head-flow" in card.data.tags
    got = {e.dataset_name: (e.metric_type, e.metric_value) for e in card.data.eval_results}
    want = {b: ("accuracy", round(100 * v["score"], 2)) for b, v in res.summary["results"]["real|best"].items()}
    assert got == want and want
    text = card.text
    assert f"a `flowclip sweep` as its best trial: trial {best['trial']} of 1" in text
    assert "select.parquet" in text and "biased upward" in text
    n = len(Manifest.read(lab["training"]))
    assert f"Trained on the manifest `sample_training.parquet` ({n:,} records" in text
    assert "--scorer mine=hf:me/flow-test" in text and 'fc.load_run("hf:me/flow-test")' in text
    # the card's extract command makes a store of the run's fingerprint
    command = text.split("```bash\n")[1].split("\n```")[0]
    command = command.replace("flowclip ", "", 1).replace("STORE", str(tmp_path / "again"))
    command = command.replace("MANIFEST", lab["candidates"]).replace("IMAGES", lab["image_root"])
    r = CliRunner().invoke(main, command.split() + ["--quiet"])
    assert r.exit_code == 0, r.output
    again = json.load(open(tmp_path / "again" / "store.json"))["fingerprint"]
    assert again == json.load(open(os.path.join(run, "config.json")))["store_fingerprint"]
    assert yaml.safe_load((up / "README.md").read_text().split("---")[1])["license"] == "mit"


def test_a_failed_push_is_one_line_and_leaves_the_folder_complete(trained, tmp_path, monkeypatch):
    import huggingface_hub

    HubStandIn.root, HubStandIn.calls, HubStandIn.fail = str(tmp_path / "hub"), [], "401 Client Error: Unauthorized"
    monkeypatch.setattr(huggingface_hub, "HfApi", HubStandIn)
    out = tmp_path / "pub"
    r = CliRunner().invoke(main, ["publish", trained["run"], "--out", str(out), "--push", "me/x"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 2, r.output  # published, then the one error
    assert "--push me/x: the upload failed (401 Client Error: Unauthorized)" in r.output
    assert (out / "head.safetensors").exists() and (out / "README.md").exists()
    r = CliRunner().invoke(main, ["publish", trained["run"], "--out", str(tmp_path / "p2"), "--push", "just-a-name"])
    assert r.exit_code == 2 and "expected a Hugging Face model repository, OWNER/NAME" in r.output
    assert not (tmp_path / "p2").exists()


def test_the_base_model_is_the_hub_repo_of_the_encoders_open_clip_tag():
    from flowclip_cache.sharing.publish import base_model

    enc = {"model": "ViT-B-32", "weights": {"source": "open_clip:openai"}}
    assert base_model(enc) == "timm/vit_base_patch32_clip_224.openai"
    assert base_model({"model": "flowclip-tiny-clip", "weights": {"source": "random-init"}}) is None


def test_the_cards_use_snippet_loads_a_plug_in_head_as_it_was_loaded():
    """A head from a file: --plugin FILE.py; from an installed module: --plugin its module."""
    from flowclip_cache.sharing.model_card import render

    base = {"name": "x", "license": "mit", "parameters": 10, "train": {}, "repo": "me/x",
            "encoder": {"model": "ViT-B-32", "fingerprint": "f" * 64}}  # fmt: skip
    plugins = [
        (
            {"module": "flowclip_plugin_ab12", "class": "Bilinear", "source": "bilinear.py", "sha256": "0"},
            "bilinear.py",
        ),
        ({"module": "my_pkg.heads", "class": "Bilinear", "source": "heads.py", "sha256": "0"}, "my_pkg.heads"),
    ]
    for plugin, target in plugins:
        text = render({**base, "head": {"kind": "bilinear", "plugin": plugin}})
        assert f"flowclip score --plugin {target} --store" in text and f'fc.load_plugin("{target}")' in text
    assert "--plugin" not in render({**base, "head": {"kind": "flow"}}).split("## Use")[1]
