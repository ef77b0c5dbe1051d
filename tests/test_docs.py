"""The worked examples in docs/ run as written (in a fresh folder, on data they make)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from conftest import doc_examples as examples


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
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=ROOT)
    out = ""
    for lang, code in examples("python-api.md")["python-api"]:
        cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert r.returncode == 0, f"{lang} block failed:\n{code}\n{r.stdout}\n{r.stderr}"
        out += r.stdout
    assert "pairwise accuracy after training:" in out and "per-record rows" in out and "online: tensor(" in out
    assert "all pairs from the store: torch.Size([16," in out


def test_plugins_example(tmp_path):
    """docs/plugins.md: a head file of the user's, trained, scored and explained from the
    command line, then from Python, then in a study (the `# file:` block is saved, not run)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=ROOT)
    out = ""
    for lang, code in examples("plugins.md")["bilinear"]:
        if code.startswith("# file: "):
            (tmp_path / code.split("\n", 1)[0][len("# file: ") :]).write_text(code)
            continue
        cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert r.returncode == 0, f"{lang} block failed:\n{code}\n{r.stdout}\n{r.stderr}"
        out += r.stdout
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
