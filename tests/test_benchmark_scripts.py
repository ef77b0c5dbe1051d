"""Every speed script in benchmarks/ runs to the end on tiny sizes (their figures are
measured by hand with the commands in docs/performance.md; this only keeps the scripts
working as the code under them changes: two had broken silently)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMALL = {
    "bench_ablation.py": None,  # None: gpu_suite.py --dry-run runs it, each of its steps at tiny sizes
    "bench_adapt.py": None,
    "bench_decode.py": ["--images", "4", "--size", "64x96", "--reps", "1", "--sample", "8"],
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
    "bench_score.py": None,
    "bench_train.py": ["--steps", "2", "--encode-steps", "1"],
    "bench_url_store.py": ["--images", "64", "--reps", "1"],
    "bench_zeroshot.py": None,
    "gpu_suite.py": ["--dry-run"],  # every step on the CPU at tiny sizes, with its own flags (CUDA: the suite)
}


def test_every_script_is_listed():
    scripts = [f for f in os.listdir(os.path.join(ROOT, "benchmarks")) if f.endswith(".py") and not f.startswith("_")]
    assert sorted(scripts) == sorted(SMALL)  # (_timing.py: what the scripts share, not a script)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(s for s, args in SMALL.items() if args is not None))
def test_script_runs_on_tiny_sizes(script, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in SMALL[script] or []]
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


def _gpu_suite():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import gpu_suite

    return gpu_suite


def test_the_gpu_suites_dry_run_runs_the_scripts_left_to_it_with_the_suites_own_flags():
    suite = _gpu_suite()
    assert {s for s, args in SMALL.items() if args is None} <= {step.script for step in suite.STEPS}
    for step in suite.STEPS:  # the dry run changes sizes and the device, never which flags a step passes
        full, tiny = suite.command(step, "cuda", "/t", False), suite.command(step, "cpu", "/t", True)
        assert {a for a in full if a.startswith("--")} <= {a for a in tiny if a.startswith("--")}, step.heading
        with_toolkit = suite.command(step, "cuda", "/t", False, "/elevater")
        assert ("--toolkit" in with_toolkit) == (step.script == "bench_zeroshot.py")
        flags = dict(zip(tiny, tiny[1:]))
        assert flags.get("--device", "cpu") == "cpu" and "gpu" not in flags.get("--decode", ""), tiny


def test_the_gpu_suite_reads_every_target_line_and_judges_it():
    suite = _gpu_suite()
    out = """flow-clip   :   3247 pairs/s = 10.4 GFLOP/s | 64% [60%, 70%] of the matmul rate (target >= 60%)
  commands : wall 113.7 s | overhead  42.0% of the wall (target <= 15%); 34.7% counting the rest
adapt step: flowclip 0.03 s | bare 0.03 s | overhead ratio 0.95 [0.95, 0.95] (bare / flowclip, target >= 0.9)
a line with no target 0.5 [0.1, 0.9]"""
    found = suite.targets_in(out)
    assert [(v, op, t) for _, v, op, t in found] == [(64, ">=", 60), (42.0, "<=", 15), (0.95, ">=", 0.9)]
    assert all("|" not in m for m, *_ in found)

    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        suite.report([], [("s", m, v, op, t) for m, v, op, t in found], dry=False)
    met = [line.rsplit("|", 2)[-2].strip() for line in buf.getvalue().splitlines() if line.startswith("| s |")]
    assert met == ["yes", "**no**", "yes"]
