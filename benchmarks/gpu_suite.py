"""The GPU rows of docs/performance.md in one command, on one CUDA device, in at most 13.5
minutes (each step a process with its own time limit; the limits add to that):

    python benchmarks/gpu_suite.py             # on a machine with CUDA
    python benchmarks/gpu_suite.py --dry-run   # anywhere: the plan, each script's flags checked

1. tests/test_cuda.py, first: the CUDA paths are right before anything is timed;
2. extraction: ViT-B/32 images/s with JPEG decoding included, decode workers 0, 2, 4, 8;
3. head training: Flow-CLIP ms/step with the features on the device and in pinned host
   memory, and the COCO epoch they imply (bench_scale.py at a tenth of COCO's shapes);
4. exact Flow-CLIP scoring: pairs/s, the share of the device's FP32 matmul rate, and the
   COCO-5k gallery time (bench_score.py); zero-shot classification through the engine
   against the kernel, and ImageNet-1k's time (bench_zeroshot.py);
5. an adapt step against bare open_clip (bench_adapt.py);
6. the ablation engine: 8 Global-M and 8 Flow-CLIP heads stacked against side by side,
   matched-pair evaluation against the all-pairs kernel, and Tab. 2's ablation on a COCO
   training set of ViT-B/32 shapes (113k images, ~20 GiB written under the step's temporary
   folder) as its dry run plans and times it on the device (bench_ablation.py).

Each step's lines are printed under its heading as they come; a step that fails or runs
past its limit says so and the suite goes on; a table of the steps ends it. Without CUDA
(and without --dry-run) it says so and exits 0.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = sys.executable


def steps(device: str) -> list[tuple[str, list[str], int]]:
    """(heading, command, seconds allowed) of each step."""
    bench = lambda name: os.path.join(HERE, name)  # noqa: E731
    return [
        ("CUDA tests (tests/test_cuda.py)", [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cuda.py"],
         60),
        ("extraction: ViT-B/32 images/s, decoding included",
         [PY, bench("gpu_suite.py"), "--extract", "--device", device, "--images", "512", "--workers", "0,2,4,8"], 120),
        ("head training: Flow-CLIP ms/step, device and host placements, the COCO epoch",
         [PY, bench("bench_scale.py"), "--device", device, "--fractions", "0.1", "--steps", "30", "--no-scoring",
          "--root", "{tmp}/scale"], 150),
        ("exact Flow-CLIP scoring: pairs/s, share of the FP32 matmul rate, COCO-5k gallery",
         [PY, bench("bench_score.py"), "--device", device, "--images", "256", "--captions", "1280", "--reps", "5"], 60),
        ("zero-shot classification: Flow-CLIP engine against the kernel, ImageNet-1k's time",
         [PY, bench("bench_zeroshot.py"), "--device", device, "--images", "2048", "--classes", "100", "--reps", "3"],
         30),
        ("adapt step against bare open_clip", [PY, bench("bench_adapt.py"), "--device", device, "--batch", "64",
                                               "--repeats", "5"], 90),
        ("ablation engine: stacked steps of 8 heads against side by side",
         [PY, bench("bench_ablation.py"), "--device", device, "--reps", "5", "--only", "stacked"], 60),
        ("ablation engine: matched-pair evaluation against the all-pairs kernel",
         [PY, bench("bench_ablation.py"), "--device", device, "--reps", "5", "--only", "matched"], 30),
        ("ablation engine: Tab. 2's ablation on COCO training shapes, the dry run's estimate",
         [PY, bench("bench_ablation.py"), "--device", device, "--only", "paper", "--paper-estimate", "{tmp}/paper",
          "--fraction", "1"], 210),
    ]  # fmt: skip


def extract_rates(device: str, images: int, workers: list[int], model: str = "ViT-B-32") -> None:
    """Images/s of run_extract (decode, preprocess, encode, FP16, write) per decode-worker count."""
    sys.path.insert(0, HERE)
    from bench_extract import make_data

    from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve
    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.store import FeatureStore

    enc = resolve(EncoderSpec(model))
    loaded = load_model(enc, device)
    with tempfile.TemporaryDirectory() as root:
        make_data(root, images, 1)
        for w in workers:
            fs = FeatureStore.open_or_create(f"{root}/st-{w}", enc.config)
            s = run_extract(fs, enc, [f"{root}/images.parquet"], f"{root}/images", workers=w, progress=False,
                            device=device, loaded=loaded)  # fmt: skip
            print(f"extract {model} on {device}, decode workers {w}: {images / s.image_seconds:8.1f} img/s")


def flags_accepted(cmd: list[str]) -> list[str]:
    """The flags of a step that its script's --help does not name (a step out of date)."""
    script = cmd[1] if cmd[1] != "-m" else None
    if script is None:
        return []
    help_text = subprocess.run([PY, script, "--help"], capture_output=True, text=True, cwd=ROOT).stdout
    return [a for a in cmd[2:] if a.startswith("--") and a not in help_text]


def run_steps(device: str, dry: bool) -> list[tuple[str, str, float]]:
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        for heading, cmd, limit in steps(device):
            cmd = [a.replace("{tmp}", tmp) for a in cmd]
            print(f"\n## {heading} (at most {limit} s)\n$ {' '.join(cmd[1:])}", flush=True)
            if dry:
                missing = flags_accepted(cmd)
                table.append((heading, f"flags unknown to the script: {missing}" if missing else "planned", 0.0))
                continue
            t = time.perf_counter()
            try:
                r = subprocess.run(cmd, cwd=ROOT, timeout=limit, text=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT)  # fmt: skip
                print(r.stdout, end="", flush=True)
                status = "ok" if r.returncode == 0 else f"failed (exit {r.returncode})"
            except subprocess.TimeoutExpired as e:
                print(e.stdout or "", end="")
                status = f"stopped at its {limit} s limit"
            table.append((heading, status, time.perf_counter() - t))
    return table


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dry-run", action="store_true", help="Print the plan and check each step's flags; time nothing.")
    ap.add_argument("--extract", action="store_true", help="(a step of the suite) extraction rates only")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--workers", default="0,2,4,8")
    args = ap.parse_args()
    if args.extract:
        return extract_rates(args.device, args.images, [int(w) for w in args.workers.split(",")])
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device here: the GPU suite measures nothing (run it where one is; --dry-run shows the plan)")
        return
    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name() if device == "cuda" else "no CUDA device"
    dry = " (dry run: nothing timed)" if args.dry_run else ""
    print(f"# flowclip GPU suite: {name}, torch {torch.__version__}{dry}")
    table = run_steps("cuda", args.dry_run)
    if args.dry_run:  # the suite's own step, at toy size on this machine (its code path, not a figure)
        print("\n## the extraction step's code at toy size here (2 images, the tiny CLIP, not a figure)")
        extract_rates(device, 2, [0], model="flowclip-tiny-clip")
    print("\n| step | status | seconds |\n|---|---|---|")
    for heading, status, seconds in table:
        print(f"| {heading} | {status} | {seconds:.0f} |")
    if any(s.startswith("flags unknown") for _, s, _ in table):
        sys.exit(1)


if __name__ == "__main__":
    main()
