"""The worked examples in docs/ run as written (in a fresh folder, on data they make)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from conftest import doc_examples as examples


def run_example(doc: str, name: str, cwd) -> str:
    """Every block of docs/DOC's example NAME run in CWD in order (a `# file: NAME` block
    saved there instead); their stdout together."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=ROOT)
    out = ""
    for lang, code in examples(doc)[name]:
        if code.startswith("# file: "):
            (cwd / code.split("\n", 1)[0][len("# file: ") :]).write_text(code)
            continue
        cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
        assert r.returncode == 0, f"{lang} block failed:\n{code}\n{r.stdout}\n{r.stderr}"
        out += r.stdout
    return out


@pytest.mark.slow
def test_own_candidates_example(tmp_path):
    blocks = examples("manifests.md")["own-candidates"]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    for lang, code in blocks:
        cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert r.returncode == 0, f"{lang} block failed:\n{code}\n{r.stdout}\n{r.stderr}"
    md = (tmp_path / "myresults" / "results.md").read_text()
    assert "my-shapes" in md and "### my-shapes: per colour_count" in md
    assert "names no registered benchmark: scored as 'my-shapes' with the scoring its metadata declares" in r.stdout


def test_offline_families_example(tmp_path):
    pytest.importorskip("transformers", reason="the example needs transformers (pip install 'flowclip[hf]')")
    for lang, code in examples("encoders.md")["offline-families"]:
        r = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", code],
            cwd=tmp_path,
            env=dict(os.environ, HF_HUB_OFFLINE="1"),
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, f"{code}\n{r.stdout}\n{r.stderr}"
    assert "family          blip-itc" in r.stdout and "num_patches     16" in r.stdout


def test_python_api_example(tmp_path):
    out = run_example("python-api.md", "python-api", tmp_path)
    assert "pairwise accuracy after training:" in out and "per-record rows" in out and "online: tensor(" in out
    assert "all pairs from the store: torch.Size([16," in out


def test_plugins_example(tmp_path):
    """docs/plugins.md: a head file of the user's, trained, scored and explained from the
    command line, then from Python, then in a study (the `# file:` block is saved, not run)."""
    out = run_example("plugins.md", "bilinear", tmp_path)
    assert "| real | bilinear |" in (tmp_path / "results" / "results.md").read_text() and "explaining 2 records" in out
    assert "results: results/results.md" in out  # score --quiet says where, and prints no table
    assert "mine - global" in open(tmp_path / "flowclip-demo" / "summary.md").read()  # the first command's comparison
    assert "U: (128, 16) origin: Bilinear" in out and "sample benchmark:" in out
    assert "dry run: every check passed" in out and (tmp_path / "study" / "STUDY_DONE").exists()
    runs = sorted(os.listdir(tmp_path / "study" / "runs"))
    assert runs == ["head-bilinear__head_options.rank-16__seed-0", "head-global__seed-0"]
    explained = json.load(open(tmp_path / "explained" / "explain.json"))
    maps = explained["records"][0]["maps"]["bilinear"]["captions"][0]["maps"]
    assert list(maps) == ["bilinear"]  # the head's own token map, drawn by explain


def test_sweep_example(tmp_path):
    """docs/sweep.md: a two-trial search on the sample, then its best.yaml run as a study."""
    pytest.importorskip("optuna", reason="flowclip sweep needs Optuna (pip install 'flowclip[sweep]')")
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=ROOT)
    ((lang, code),) = examples("sweep.md")["sweep"]
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"{code}\n{r.stdout}\n{r.stderr}"
    trials = [line for line in r.stdout.splitlines() if line.startswith("trial ") and " -> " in line]
    assert len(trials) == 2 and "wrote sweeps/flow/best.yaml" in r.stdout
    assert "| best |" in r.stdout and (tmp_path / "sweeps" / "flow" / "best-study" / "STUDY_DONE").exists()
    # flowclip results: the two trials and the best study's scorers in one table
    assert r.stdout.count("| scores/") == 2 and "| best-study/" in r.stdout


def test_field_kinds_example(tmp_path):
    """manifests.md's offline path through the image-choice and group kinds."""
    for lang, code in examples("manifests.md")["field-kinds"]:
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path,
                           env=dict(os.environ, HF_HUB_OFFLINE="1"), capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 0, f"{code}\n{r.stdout}\n{r.stderr}"
    assert "| synthetic-groups | clip | text " in r.stdout
    res = json.load(open(tmp_path / "results" / "results.json"))["results"]["real|clip"]
    assert res["synthetic-image-choice"]["n"] == 100 and res["synthetic-groups"]["n"] == 100  # a third of 300 scenes


@pytest.mark.slow
def test_publish_example(tmp_path):
    """docs/publish.md opens with a head trained, scored and published on the sample; the
    published folder scores every record as its run does."""
    out = run_example("publish.md", "publish", tmp_path)
    assert "published runs/flow_s0 -> published/flow-sample" in out
    card = (tmp_path / "published" / "flow-sample" / "README.md").read_text()
    assert "library_name: flowclip" in card and "--pretrained synthetic" in card
    rows = json.load(open(tmp_path / "results" / "published" / "results.json"))["results"]["real|flow"]
    published = json.load(open(tmp_path / "results" / "published" / "results.json"))["results"]["real|published"]
    assert rows["sample"]["n"] == 16 and rows["sample"]["score"] == published["sample"]["score"]


@pytest.mark.slow
def test_studies_example(tmp_path):
    """docs/studies.md: the ablation study shared by two torchrun processes on the sample,
    each run claimed by one rank, both ranks training; then the stacked train-head with the
    two config files the page shows."""
    out = run_example("studies.md", "two-ranks", tmp_path)
    claims = [json.loads(p.read_text()) for p in (tmp_path / "studies" / "ablation" / "runs").glob("*.claim")]
    assert len(claims) == 8 and {c["rank"] for c in claims} == {0, 1} and '"world": 2' in out
    assert (tmp_path / "studies" / "ablation" / "STUDY_DONE").exists()
    run_example("studies.md", "stacked", tmp_path)
    configs = {p: json.load(open(tmp_path / "runs" / p / "config.json")) for p in ("g", "f")}
    assert configs["g"]["head"]["kind"] == "global" and configs["f"]["head"]["kind"] == "flow"
    assert configs["f"]["train"]["cimr"] == 0.1 and configs["g"]["train"]["cimr"] == 0.0


def test_suites_listed(tmp_path):
    """docs/manifests.md lists every suite's members as `flowclip manifest list --suite`
    prints them (a member added to a suite and not to the page fails here)."""
    from click.testing import CliRunner

    from flowclip_cache.cli import main
    from flowclip_cache.scoring.suites import SUITES

    page = open(os.path.join(ROOT, "docs", "manifests.md")).read()
    for name in SUITES:
        r = CliRunner().invoke(main, ["manifest", "list", "--suite", name])
        assert r.exit_code == 0 and f"$ flowclip manifest list --suite {name}\n{r.output}```" in page, name
