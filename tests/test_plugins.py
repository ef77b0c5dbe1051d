"""Plug-in heads (docs/plugins.md): a head file outside the package trains, scores and
explains like a built-in head; a run folder never imports code; each contract rule
fails in one line before anything is written; the loss is a weighted sum of named terms."""

import json
import re

import pytest
import torch
from click.testing import CliRunner
from conftest import doc_file

import flowclip_cache as fc
from flowclip_cache.cli import main
from flowclip_cache.errors import FlowclipError
from flowclip_cache.hashing import file_sha256

HEAD = doc_file("plugins.md", "bilinear", "bilinear.py")
# the test's copy says when it is imported (a run folder must never cause that)
MARK = "import os\nimport torch\n\nopen(os.environ['PLUGIN_MARK'], 'a').write('x')\n"
MARKED = HEAD.replace("import torch\n", MARK, 1)


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def train_args(lab, out, head, *more):
    return ["train-head", "--store", lab["store"], "--train", lab["training"], "--out", out, "--head", head,
            "--epochs", "1", "--batch-size", "4", "--lr", "1e-2", "--quiet", *more]  # fmt: skip


def forget_plugins():
    """As in a fresh process: no plug-in registered, no plug-in file imported."""
    from flowclip_cache.heads import REGISTRY, plugins
    from flowclip_cache.heads.base import Head

    for kind in [k for k, c in REGISTRY.items() if "plugin_origin" in c.__dict__ and issubclass(c, Head)]:
        del REGISTRY[kind]
    plugins._files.clear()
    plugins._deferred.clear()


def test_a_head_file_trains_scores_and_a_run_folder_imports_nothing(lab, tmp_path, monkeypatch):
    head_file, mark = tmp_path / "bilinear.py", tmp_path / "imported"
    head_file.write_text(MARKED)
    monkeypatch.setenv("PLUGIN_MARK", str(mark))
    run = tmp_path / "run"
    r = cli(*train_args(lab, run, f"{head_file}:Bilinear"))
    assert r.exit_code == 0, r.output
    hp = json.loads((run / "config.json").read_text())["head"]
    assert hp["kind"] == "bilinear" and hp["options"] == {"rank": 32}
    assert hp["plugin"]["class"] == "Bilinear" and hp["plugin"]["sha256"] == file_sha256(str(head_file))
    mark.unlink()
    forget_plugins()
    score = ["score", "--store", lab["store"], "--manifests", lab["candidates"], "--scorer", f"bil={run}",
             "--bootstrap", "0", "--quiet"]  # fmt: skip
    r = cli(*score, "--out", tmp_path / "refused")
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    sha = file_sha256(str(head_file))
    assert f"class Bilinear of the file {head_file} (sha256 {sha})" in r.stderr and "pass --plugin FILE" in r.stderr
    assert not mark.exists() and not (tmp_path / "refused").exists()  # the recorded path was never imported
    r = cli(*score, "--plugin", head_file, "--out", tmp_path / "scored")
    scored = (tmp_path / "scored" / "results.md").read_text()
    assert r.exit_code == 0 and "| real | bil |" in scored and "warning" not in r.stderr, r.output
    assert mark.read_text() == "x"  # imported once, because --plugin named it
    head_file.write_text(MARKED + "# edited after training\n")
    forget_plugins()
    mark.unlink()
    r = cli(*score, "--plugin", head_file, "--out", tmp_path / "again")  # another sha256: refused, one line
    assert r.exit_code == 2 and "is not the one it was trained with" in r.stderr
    assert "--allow-changed-plugin" in r.stderr and "before importing it" in r.stderr
    assert not mark.exists()  # the changed file was refused by its sha256 before it ran
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "again").exists()
    r = cli(*score, "--plugin", head_file, "--allow-changed-plugin", "--out", tmp_path / "again")  # the user's word
    assert r.exit_code == 0 and "is not the one it was trained with" in r.stderr and "its scores may differ" in r.stderr


def test_the_module_and_entry_point_forms(lab, tmp_path, monkeypatch):
    from flowclip_cache.heads import plugins

    pkg = tmp_path / "site" / "myheads"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(HEAD)
    dist = tmp_path / "site" / "myheads-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myheads\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[flowclip.heads]\nbilinear = myheads:Bilinear\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))  # as if installed
    r = cli(*train_args(lab, tmp_path / "by-module", "myheads:Bilinear"))
    assert r.exit_code == 0, r.output
    forget_plugins()
    monkeypatch.setattr(plugins, "_entry_points_loaded", False)  # a fresh process reads them once
    r = cli(*train_args(lab, tmp_path / "by-kind", "bilinear"))  # the installed entry point, by its kind
    assert r.exit_code == 0, r.output
    assert (tmp_path / "by-module" / "head.safetensors").read_bytes() == (
        tmp_path / "by-kind" / "head.safetensors"
    ).read_bytes()
    forget_plugins()
    monkeypatch.setattr(plugins, "_entry_points_loaded", False)
    r = cli("score", "--store", lab["store"], "--manifests", lab["candidates"], "--scorer", tmp_path / "by-kind",
            "--bootstrap", "0", "--out", tmp_path / "s", "--quiet")  # fmt: skip
    assert r.exit_code == 0, r.output  # installed: no --plugin needed
    r = cli("train-head", "--help")
    assert "bilinear: frozen global" in " ".join(r.output.split())


BROKEN = {
    "shape": ("def forward(self, v, P, t, H, mask):\n        return (v @ t.T)[:, :1] + self.w",
              "scores must be a float tensor [images, captions] = [3, 4], got [3, 1]"),
    "nan": ("def forward(self, v, P, t, H, mask):\n        return v @ t.T * self.w / 0 * 0",
            "scores hold NaN or inf on random unit-norm features"),
    "plain": ("def forward(self, v, P, t, H, mask):\n        return v @ t.T * self.w\n\n"
              "    def __init__(self, dim, **o):\n        super().__init__(dim, **o)\n"
              "        self.w = torch.nn.Parameter(torch.ones(()))\n        self.extra = torch.zeros(3)",
              "extra is a plain tensor (make it an nn.Parameter, or register_buffer it)"),
    "detached": ("def forward(self, v, P, t, H, mask):\n        return v @ t.T * self.w.detach()",
                 "its scores do not depend on its parameters"),
    "matched": ("def forward(self, v, P, t, H, mask):\n        return v @ t.T * self.w\n\n"
                "    def score_matched(self, v, P, t, H, mask):\n        return (v * t).sum(-1) + 1",
                "score_matched(row i) must equal forward's [i, i]"),
    "term": ("loss_terms = {'reg': 0.1}\n\n    def forward(self, v, P, t, H, mask):\n        return v @ t.T * self.w",
             "its loss term 'reg' must be among forward_terms' parts as a finite scalar"),
    "coarse": ("def forward(self, v, P, t, H, mask):\n        return v @ t.T * self.w\n\n"
               "    def coarse(self, v, t):\n        return v @ t[:1].T",
               "coarse must return None or [I, T] = [3, 4]"),
    "embedding": ("def forward(self, v, P, t, H, mask):\n        return v @ t.T * self.w\n\n"
                  "    def caption_embedding(self, t):\n        return t @ self.missing",
                  "caption_embedding(t [T, d]) failed on random features (AttributeError"),
}  # fmt: skip


@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_each_broken_contract_rule_is_one_line_before_anything_is_written(lab, tmp_path, rule):
    body, message = BROKEN[rule]
    src = (
        "import torch\nimport flowclip_cache as fc\n\n\nclass Broken(fc.Head):\n    kind = 'broken'\n\n"
        "    def __init__(self, dim, **o):\n        super().__init__(dim, **o)\n"
        f"        self.w = torch.nn.Parameter(torch.ones(()))\n\n    {body}\n"
    )
    (tmp_path / "broken.py").write_text(src)
    r = cli(*train_args(lab, tmp_path / "run", f"{tmp_path / 'broken.py'}:Broken"))
    line = r.stderr.strip()
    assert r.exit_code == 2 and line.startswith(f"error: head broken: {message}") and "\n" not in line, r.stderr
    assert not (tmp_path / "run").exists()
    # the dry run of a study with that head lists the same rule and creates nothing
    r = cli("run", "ablation", f"store={lab['store']}", f"train={lab['training']}", f"eval=[{lab['candidates']}]",
            f"out={tmp_path}/study", "seeds=[0]", f"heads={{b: {{head: {tmp_path / 'broken.py'}:Broken}}}}",
            "compare=[]", "--dry-run")  # fmt: skip
    assert r.exit_code == 2 and f"head broken: {message}" in r.output + r.stderr
    assert not (tmp_path / "study").exists()


def test_a_broken_token_map_stops_train_head_not_explain(lab, tmp_path):
    """token_maps is what explain calls: a plug-in whose token_maps breaks (here H taken as
    [L, d], where it is [T, L, d] for T captions) stops train-head with one line naming the
    method and its shapes."""
    buggy = (
        HEAD + "\n\nclass Buggy(Bilinear):\n    kind = 'buggy'\n\n"
        "    def token_maps(self, P, H, mask):\n        m = H @ P.T\n        return {'m': m[0]}, mask.float()\n"
    )
    (tmp_path / "buggy.py").write_text(buggy)
    r = cli(*train_args(lab, tmp_path / "run", f"{tmp_path / 'buggy.py'}:Buggy"))
    line = r.stderr.strip()
    assert r.exit_code == 2 and "\n" not in line and line.startswith("error: head buggy: token_maps must return"), line
    assert not (tmp_path / "run").exists()


def test_bad_references_are_one_line(lab, tmp_path):
    (tmp_path / "h.py").write_text(HEAD.replace('kind = "bilinear"', 'kind = "flow"'))
    (tmp_path / "err.py").write_text("import torch\n\nraise ValueError('boom')\n")
    for spec, message in [
        (f"{tmp_path}/nope.py:Bilinear", "no such file"),
        (f"{tmp_path}/h.py:Nope", "defines no 'Nope'"),
        (f"{tmp_path}/h.py:Bilinear", "kind 'flow' is already the head flowclip_cache.heads.flow.FlowHead"),
        (f"{tmp_path}/err.py:X", "err.py:3: ValueError: boom"),
        ("no_such_module_here:X", "no module named no_such_module_here"),
    ]:
        r = cli(*train_args(lab, tmp_path / "run", spec))
        assert r.exit_code == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, (spec, r.stderr)
    (tmp_path / "empty.py").write_text("import flowclip_cache as fc\n\nBase = fc.Head\n")
    with pytest.raises(FlowclipError, match="defines no Head subclass with a `kind`"):
        fc.load_plugin(str(tmp_path / "empty.py"))


def test_python_api_equals_the_command_line_with_options_and_terms(lab, tmp_path):
    (tmp_path / "bilinear.py").write_text(HEAD)
    settings = ["--seed", "3", "--config", tmp_path / "c.yaml"]
    (tmp_path / "c.yaml").write_text("head_options: {rank: 8}\nloss_weights: {uv_norm: 0.5}\n")
    r = cli(*train_args(lab, tmp_path / "cli", f"{tmp_path / 'bilinear.py'}:Bilinear", *settings))
    assert r.exit_code == 0, r.output + r.stderr
    cls = fc.load_plugin(str(tmp_path / "bilinear.py"))
    assert cls == ["bilinear"]
    options = dict(head_options={"rank": 8}, loss_weights={"uv_norm": 0.5})
    run = fc.train_head(
        lab["store"], lab["training"], str(tmp_path / "py"), head="bilinear", epochs=1, batch_size=4, lr=1e-2, seed=3,
        quiet=True, **options,
    )  # fmt: skip
    assert (tmp_path / "cli" / "head.safetensors").read_bytes() == (tmp_path / "py" / "head.safetensors").read_bytes()
    assert tuple(run.head.U.shape) == (128, 8)
    # the loss is HNB + lambda_CIMR CIMR + 0.5 uv_norm, each term logged by name
    steps = [json.loads(x) for x in open(tmp_path / "py" / "log.jsonl") if '"step"' in x]
    for s in steps:
        assert s["loss"] == pytest.approx(s["hnb"] + 0.0 * s["cimr"] + 0.5 * s["uv_norm"], rel=1e-6, abs=1e-7)
    assert max(s["uv_norm"] for s in steps) > 1e-4  # large enough that a dropped weight would show
    # an instance: training starts from its weights (an epoch at lr 0: they are the run's weights)
    head = fc.load_run(str(tmp_path / "py")).head
    start = fc.train_head(lab["store"], lab["training"], str(tmp_path / "inst"), head=head, epochs=1, lr=0.0,
                          weight_decay=0.0, batch_size=4, quiet=True)  # fmt: skip
    assert all(torch.equal(start.weights[k], v) for k, v in run.weights.items())
    assert start.config["head"]["options"] == {"rank": 8}
    for bad, message in [
        ({"head_options": {"rnak": 8}}, r"head_options \['rnak'\] are not options of the bilinear head \(rank\)"),
        ({"head_options": {"rank": 2.5}}, "head_options.rank = 2.5 must be a finite whole number"),
        ({"loss_weights": {"orth": 1.0}}, r"\['orth'\] are not loss terms of the bilinear head \(uv_norm\)"),
        ({"head": "flow", "head_options": {"rank": 8}}, "not options of the flow head"),
    ]:
        with pytest.raises(FlowclipError, match=message):
            fc.train_head(lab["store"], lab["training"], str(tmp_path / "bad"), **{"head": "bilinear", **bad})
    assert not (tmp_path / "bad").exists()


def test_head_options_and_loss_weights_from_flags(lab, tmp_path):
    """--head-option / --loss-weight (repeatable) give a plug-in head its settings without a
    YAML, over the config file's name by name, with the same weights as the file alone; the
    printed settings show the options in force, defaults filled in; a wrong name or value is
    one line and writes nothing."""
    (tmp_path / "bilinear.py").write_text(HEAD)
    head = f"{tmp_path / 'bilinear.py'}:Bilinear"
    (tmp_path / "c.yaml").write_text("head_options: {rank: 8}\nloss_weights: {uv_norm: 0.5}\n")
    r = cli(*train_args(lab, tmp_path / "file", head, "--config", tmp_path / "c.yaml"))
    assert r.exit_code == 0, r.output
    (tmp_path / "w.yaml").write_text("head_options: {rank: 4}\nloss_weights: {uv_norm: 0.5}\n")
    r = cli(*train_args(lab, tmp_path / "flags", head, "--config", tmp_path / "w.yaml", "--head-option", "rank=8"))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "flags" / "head.safetensors").read_bytes() == (
        tmp_path / "file" / "head.safetensors"
    ).read_bytes()
    cfg = json.load(open(tmp_path / "flags" / "config.json"))
    assert cfg["train"]["head_options"] == {"rank": 8} and cfg["train"]["loss_weights"] == {"uv_norm": 0.5}
    r = CliRunner().invoke(main, [str(a) for a in train_args(lab, tmp_path / "defaults", head)][:-1])  # not quiet
    assert r.exit_code == 0 and "head_options={'rank': 32}" in r.output  # the declared default, in force
    r = cli(*train_args(lab, tmp_path / "bad", str(tmp_path / "bilinear.py")))  # a file without its class
    assert r.exit_code == 2 and f"{tmp_path / 'bilinear.py'}:ClassName" in r.output and not (tmp_path / "bad").exists()
    for flag, message in [
        (["--head-option", "rnak=8"], r"\['rnak'\] are not options of the bilinear head"),
        (["--head-option", "rank"], "expected NAME=VALUE"),
        (["--head-option", "rank=big"], "'big' is not a number"),
        (["--head-option", "rank=2.5"], "must be a finite whole number"),
        (["--loss-weight", "orth=1"], r"\['orth'\] are not loss terms of the bilinear head"),
        (["--loss-weight", "uv_norm=-1"], "must be at least 0"),
    ]:
        r = cli(*train_args(lab, tmp_path / "bad", head, *flag))
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
        assert re.search(message, r.output), r.output
        assert not (tmp_path / "bad").exists()


def test_a_head_name_that_cannot_work_is_answered_before_torch_loads(tmp_path):
    """A missing head file, or a file without its class, is one line before torch is
    imported (it took seconds of CPU when the check ran after importing the heads)."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom flowclip_cache.cli import main\n"
        "for head in sys.argv[1:]:\n"
        "    r = CliRunner().invoke(main, ['train-head', '--store', '.', '--train', sys.argv[0], '--out', 'x',"
        " '--head', head])\n"
        "    print(r.exit_code, r.output.strip())\n"
        "print('torch' in sys.modules)\n"
    )
    (tmp_path / "probe.py").write_text(code)
    p = subprocess.run([sys.executable, str(tmp_path / "probe.py"), "none.py:Head", "mine.py"], cwd=tmp_path,
                       capture_output=True, text=True)  # fmt: skip
    lines = p.stdout.strip().splitlines()
    assert lines[0] == "2 error: flags: key 'head': head none.py:Head: no such file none.py", p.stdout + p.stderr
    assert "mine.py:ClassName" in lines[1] and lines[2] == "False", p.stdout
