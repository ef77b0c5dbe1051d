"""The worked examples in docs/ run as written (in a fresh folder, on data they make)."""

import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT


def examples(doc: str) -> dict[str, list[tuple[str, str]]]:
    """name -> [(language, code)] of each <!-- example: name --> ... <!-- end example --> block."""
    text = open(os.path.join(ROOT, "docs", doc)).read()
    out = {}
    for name, body in re.findall(r"<!-- example: ([\w-]+) -->(.*?)<!-- end example -->", text, re.S):
        out[name] = re.findall(r"```(\w+)\n(.*?)```", body, re.S)
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
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=ROOT)
    out = ""
    for lang, code in examples("python-api.md")["python-api"]:
        cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert r.returncode == 0, f"{lang} block failed:\n{code}\n{r.stdout}\n{r.stderr}"
        out += r.stdout
    assert "pairwise accuracy after training:" in out and "per-record rows" in out and "online: tensor(" in out
    assert "all pairs from the store: torch.Size([16," in out
