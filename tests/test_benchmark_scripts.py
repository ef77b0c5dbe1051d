"""Every speed script in benchmarks/ runs to the end on tiny sizes (their figures are
measured by hand with the commands in docs/performance.md; this only keeps the scripts
working as the code under them changes: two had broken silently)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMALL = {
    "bench_ablation.py": [
        "--reps",
        "1",
        "--heads",
        "2",
        "--only",
        "stacked",
        "--paper-estimate",
        "{tmp}/paper",
        "--fraction",
        "0.002",
    ],  # fmt: skip
    "bench_adapt.py": ["--model", "flowclip-tiny-vit", "--batch", "4", "--repeats", "1"],
    "bench_extract.py": [
        "--images",
        "8",
        "--captions",
        "16",
        "--model",
        "flowclip-tiny-vit",
        "--workers",
        "0",
        "--batch-size",
        "4",
    ],
    "bench_extract_parts.py": ["--model", "flowclip-tiny-vit", "--images", "8", "--batch", "16", "--reps", "1"],
    "bench_families.py": ["--images", "2", "--batch-size", "2", "--repeats", "1", "--families", "clip"],
    "bench_fixed_shapes.py": ["--model", "flowclip-tiny-vit", "--images", "4", "--captions", "8", "--reps", "1"],
    "bench_global_features.py": ["--model", "flowclip-tiny-vit", "--images", "8", "--reps", "1"],
    "bench_grid.py": ["--scenes", "60", "--epochs", "1", "--reps", "1"],
    "bench_heads.py": ["--images", "8", "--captions", "16", "--reps", "1"],
    "bench_models_listing.py": ["--reps", "1"],
    "bench_load.py": ["--images", "50", "--captions", "200", "--reps", "1", "--parts"],
    "bench_readouts.py": ["--model", "flowclip-tiny-vit", "--batch", "4", "--repeats", "1"],
    "bench_rehash.py": ["--files", "20", "--kib", "4", "--reps", "1"],
    "bench_scale.py": [
        "--root",
        "{tmp}/scale",
        "--fractions",
        "0.002",
        "--steps",
        "2",
        "--exact-images",
        "20",
        "--shortlist",
        "5",
        "--placements",
        "store",  # the placement with the most code of its own; the others are the real run's
        "--reps",
        "1",
        "--hold",
        "0.05",  # the memory-pressure helper process
    ],
    "bench_score.py": ["--images", "8", "--captions", "16", "--reps", "1"],
    "bench_train.py": ["--steps", "2", "--encode-steps", "1"],
    "bench_url_store.py": ["--images", "64", "--reps", "1"],
    "bench_zeroshot.py": ["--images", "8", "--classes", "5", "--reps", "1"],
    "gpu_suite.py": ["--dry-run"],  # the plan, each step's flags checked against its script (CUDA: the suite)
}


def test_every_script_is_listed():
    scripts = [f for f in os.listdir(os.path.join(ROOT, "benchmarks")) if f.endswith(".py") and not f.startswith("_")]
    assert sorted(scripts) == sorted(SMALL)  # (_timing.py: what the scripts share, not a script)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMALL))
def test_script_runs_on_tiny_sizes(script, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in SMALL[script]]
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "failed" not in r.stdout and r.stdout.strip(), r.stdout[-2000:]
