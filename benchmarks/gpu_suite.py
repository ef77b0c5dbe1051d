"""The GPU rows of docs/performance.md in one command, on one CUDA device, in at most 13
minutes (each step a process with its own time limit; the limits add to that):

    python benchmarks/gpu_suite.py             # on a machine with CUDA
    python benchmarks/gpu_suite.py --dry-run   # anywhere: every step's code run on CPU at tiny sizes

1. tests/test_cuda.py, first: the CUDA paths are right before anything is timed;
2. extraction: ViT-B/32 images/s with PIL decoding (decode workers 0, 4, 8) and with nvJPEG
   (`--decode gpu`), features written, as a share of the device's dense FP16 bound for the
   image tower (its FLOPs per image counted by torch's FlopCounterMode);
3. head training: Flow-CLIP ms/step with the features on the device and in pinned host
   memory, and the COCO epoch they imply (bench_scale.py at a tenth of COCO's shapes);
4. exact Flow-CLIP scoring: pairs/s, the share of the device's FP32 matmul rate, and the
   COCO-5k gallery time (bench_score.py); zero-shot classification through the engine
   against the kernel, and ImageNet-1k's time (bench_zeroshot.py; with --toolkit, an
   ELEVATER toolkit checkout, also the 21-task suite's time for Flow-CLIP and Global-M);
5. an adapt step against bare open_clip (bench_adapt.py);
6. the ablation engine: 8 Global-M and 8 Flow-CLIP heads stacked against side by side,
   matched-pair evaluation against the all-pairs kernel, the ablation study against its 16
   commands, and Tab. 2's ablation on a COCO training set of ViT-B/32 shapes (113k images,
   ~20 GiB written under the step's temporary folder) as its dry run plans and times it.

Each step's lines are printed under its heading as they come; a step that fails or runs
past its limit says so and the suite goes on. It ends with two tables: the steps, and every
target a step printed (`(target >= X)`) with its value and whether it was met.

--dry-run runs the same steps with the same flags on the CPU, only their sizes made tiny
(each step's `tiny` below), so a step cannot fail on the device for a reason a CPU run
could have caught; its figures judge nothing. Without CUDA (and without --dry-run) it says
so and exits 0.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = sys.executable
PYTEST = "-m pytest -q -p no:cacheprovider -n 0 tests/test_cuda.py"
# dense FP16 tensor-core peaks (FLOP/s, no sparsity) from the vendors' data sheets
FP16_PEAK = {"H200": 989.4e12, "H100 NVL": 835.5e12, "H100 PCIe": 756.5e12, "H100": 989.4e12, "A100": 312e12,
             "L40S": 362.1e12, "L4": 121e12}  # fmt: skip


@dataclass(frozen=True)
class Step:
    heading: str
    script: str  # a file in benchmarks/, or PYTEST
    args: str  # {device} and {tmp} filled in
    seconds: int
    tiny: dict = field(default_factory=dict)  # the dry run's sizes: flag -> value, replaced or added
    targets: int = 0  # lines with `(target ...)` the step prints


STEPS = [
    Step("CUDA tests (tests/test_cuda.py)", PYTEST, "", 60),
    Step("extraction: ViT-B/32 images/s, PIL and nvJPEG decoding, share of the FP16 bound", "gpu_suite.py",
         "--extract --device {device} --images 2048 --workers 0,4,8 --decode pil,gpu", 110,
         {"--model": "flowclip-tiny-clip", "--images": "4", "--workers": "0"}, 1),
    Step("head training: Flow-CLIP ms/step, device and host placements, the COCO epoch", "bench_scale.py",
         "--device {device} --fractions 0.1 --steps 30 --no-scoring --root {tmp}/scale", 110,
         {"--fractions": "0.002", "--steps": "2"}),
    Step("exact Flow-CLIP scoring: pairs/s, share of the FP32 matmul rate, COCO-5k gallery", "bench_score.py",
         "--device {device} --images 256 --captions 1280 --reps 5", 40,
         {"--images": "8", "--captions": "16", "--reps": "1"}, 1),
    Step("zero-shot classification: Flow-CLIP engine against the kernel, ImageNet-1k's time", "bench_zeroshot.py",
         "--device {device} --images 2048 --classes 100 --reps 3", 30,
         {"--images": "8", "--classes": "5", "--reps": "1"}, 1),
    Step("adapt step against bare open_clip", "bench_adapt.py", "--device {device} --batch 64 --repeats 5", 50,
         {"--model": "flowclip-tiny-vit", "--batch": "4", "--repeats": "1"}, 1),
    Step("ablation engine: stacked steps of 8 heads against side by side", "bench_ablation.py",
         "--device {device} --reps 5 --only stacked", 40, {"--reps": "1", "--heads": "2"}, 2),
    Step("ablation engine: matched-pair evaluation against the all-pairs kernel", "bench_ablation.py",
         "--device {device} --reps 5 --only matched", 25, {"--reps": "1"}, 1),
    Step("ablation engine: the study of 8 variants against its 16 commands", "bench_ablation.py",
         "--device {device} --reps 1 --only end-to-end --end-to-end {tmp}/e2e", 150,
         {"--end-to-end-fraction": "0.002", "--heads": "2"}, 5),
    Step("ablation engine: Tab. 2's ablation on COCO training shapes, the dry run's estimate", "bench_ablation.py",
         "--device {device} --only paper --paper-estimate {tmp}/paper --fraction 1", 160, {"--fraction": "0.002"}),
]  # fmt: skip


def command(step: Step, device: str, tmp: str, tiny: bool, toolkit: str | None = None) -> list[str]:
    args = step.args.replace("{device}", device).replace("{tmp}", tmp).split()
    if toolkit and step.script == "bench_zeroshot.py":  # the 21 ELEVATER sets' time beside ImageNet's
        args += ["--toolkit", toolkit]
    if tiny:
        for flag, value in step.tiny.items():
            if flag in args:
                args[args.index(flag) + 1] = value
            else:
                args += [flag, value]
        args = ["pil,cpu" if a == "pil,gpu" else a for a in args]  # nvJPEG's code path on the CPU
    script = PYTEST.split() if step.script == PYTEST else [os.path.join(HERE, step.script)]
    return [PY, *script, *args]


def targets_in(text: str) -> list[tuple[str, float, str, float]]:
    """(measure, value, op, target) of each line with `(... target >= X)`: the value is the
    last number before the line's first spread `[lo, hi]`, or before the parenthesis."""
    found = []
    for line in text.splitlines():
        m = re.search(r"target (>=|<=) ([\d.]+)", line)
        if not m:
            continue
        head = line[: line.rfind("(", 0, m.start())]
        head = head.split("[")[0] if "[" in head else head
        numbers = re.findall(r"\d+(?:\.\d+)?", head)
        if numbers:
            measure = " ".join(head.replace("|", "/").split())  # one table cell
            found.append((measure[:90], float(numbers[-1]), m.group(1), float(m.group(2))))
    return found


def run_steps(device: str, tiny: bool, toolkit: str | None = None) -> tuple[list, list]:
    steps, targets = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for step in STEPS:
            cmd = command(step, device, tmp, tiny, toolkit)
            # (a flag a script no longer takes fails its run at once; the dry run passes every flag)
            print(f"\n## {step.heading} (at most {step.seconds} s)\n$ {' '.join(cmd[1:])}", flush=True)
            t = time.perf_counter()
            try:
                r = subprocess.run(cmd, cwd=ROOT, timeout=step.seconds, text=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT)  # fmt: skip
                out, status = r.stdout, "ok" if r.returncode == 0 else f"failed (exit {r.returncode})"
            except subprocess.TimeoutExpired as e:  # its output so far (bytes, whatever text= said)
                out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
                status = f"stopped at its {step.seconds} s limit"
            print(out, end="", flush=True)
            found = targets_in(out)
            if status == "ok" and len(found) != step.targets:
                status = f"printed {len(found)} target lines, {step.targets} expected (its output changed)"
            steps.append((step.heading, status, time.perf_counter() - t))
            targets += [(step.heading.split(":")[0], *f) for f in found]
    return steps, targets


def image_tower_flops(model, size: int) -> float:
    """FLOPs of one image through the image tower (torch's FlopCounterMode, 2 per MAC)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.zeros(1, 3, size, size, device=next(model.model.parameters()).device)
    # with gradients on: without them nn.MultiheadAttention takes a fused fast path the
    # counter does not see (ViT-B/32 counts 5.93 instead of 8.76 GFLOP)
    with torch.enable_grad(), FlopCounterMode(display=False) as counter:
        model.image_forward(x)
    return float(counter.get_total_flops())


def fp16_peak(device: str) -> tuple[float, str]:
    """The device's dense FP16 peak from its data sheet, or (elsewhere) a measured half (CPU:
    float) matmul's rate, and where the figure comes from."""
    import torch

    if device.startswith("cuda"):
        name = torch.cuda.get_device_name()
        for key, peak in FP16_PEAK.items():
            if key in name:
                return peak, f"{name}'s data-sheet dense FP16 peak"
    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    n = 4096 if device.startswith("cuda") else 512
    a = torch.randn(n, n, device=device, dtype=dtype)
    sys.path.insert(0, HERE)
    from _timing import timed

    t = min(timed(lambda: a @ a) for _ in range(5))
    return 2 * n**3 / t, f"a measured {str(dtype).split('.')[-1]} {n}x{n} matmul on {device}"


def extract_rates(device: str, images: int, workers: list[int], decodes: list[str], model: str) -> None:
    """Images/s of run_extract (decode, preprocess, encode, FP16, write), per decode and
    decode-worker count; the last decode's rate as a share of the FP16 bound."""
    sys.path.insert(0, HERE)
    from bench_extract import make_data

    from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve
    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.store import FeatureStore

    pil = resolve(EncoderSpec(model))
    flops = image_tower_flops(load_model(pil, device), int(pil.config["preprocess"]["image_size"]))
    peak, source = fp16_peak(device)
    with tempfile.TemporaryDirectory() as root:
        make_data(root, images, 1)
        for decode in decodes:
            enc = resolve(EncoderSpec(model, decode=decode))
            loaded = load_model(enc, device)
            for w in workers if decode == "pil" else [workers[-1]]:
                fs = FeatureStore.open_or_create(f"{root}/st-{decode}-{w}", enc.config)
                s = run_extract(fs, enc, [f"{root}/images.parquet"], f"{root}/images", workers=w, progress=False,
                                device=device, loaded=loaded)  # fmt: skip
                rate = images / s.image_seconds
                print(f"extract {model} on {device}, --decode {decode}, decode workers {w}: {rate:8.1f} img/s")
        share = 100 * rate * flops / peak
        print(f"--decode {decodes[-1]}: {rate:.0f} img/s x {flops / 1e9:.2f} GFLOP = {share:.1f}% "
              f"[bound {peak / flops:,.0f} img/s] of {source} (target >= 20%)")  # fmt: skip


def report(steps: list, targets: list, dry: bool) -> None:
    print("\n| step | status | seconds |\n|---|---|---|")
    for heading, status, seconds in steps:
        print(f"| {heading} | {status} | {seconds:.0f} |")
    judged = "not judged: a dry run's tiny sizes" if dry else None
    print("\n| step | measure | value | target | met |\n|---|---|---|---|---|")
    for step, measure, value, op, target in targets:
        met = judged or ("yes" if (value >= target if op == ">=" else value <= target) else "**no**")
        print(f"| {step} | {measure} | {value:g} | {op} {target:g} | {met} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dry-run", action="store_true", help="Every step's code on CPU at tiny sizes; judge nothing.")
    ap.add_argument("--extract", action="store_true", help="(a step of the suite) extraction rates only")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--workers", default="0,4,8")
    ap.add_argument("--decode", default="pil,gpu", help="(--extract) decodes to time, comma-separated")
    ap.add_argument("--toolkit", help="an Elevater_Toolkit_IC checkout: the zero-shot step adds the 21-task time")
    args = ap.parse_args()
    if args.extract:
        workers, decodes = [int(w) for w in args.workers.split(",")], args.decode.split(",")
        return extract_rates(args.device, args.images, workers, decodes, args.model)
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device here: the GPU suite measures nothing (run it where one is; --dry-run runs its code)")
        return
    name = torch.cuda.get_device_name() if not args.dry_run else "the CPU, tiny sizes (dry run: nothing judged)"
    print(f"# flowclip GPU suite: {name}, torch {torch.__version__}")
    steps, targets = run_steps("cpu" if args.dry_run else "cuda", args.dry_run, args.toolkit)
    report(steps, targets, args.dry_run)
    if args.dry_run and any(status != "ok" for _, status, _ in steps):
        sys.exit(1)


if __name__ == "__main__":
    main()
