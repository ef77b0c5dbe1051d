"""`flowclip models` start to finish, as a user runs it: listed from open_clip's files read
as data (no torch) against the same listing through open_clip itself (imports torch), each
a fresh process, the two alternated repetition by repetition.

    python benchmarks/bench_models_listing.py [--reps 5]

The ratio is the median of the per-repetition ratios (torch-free / through open_clip) with
their min-max; a fresh process each time, since the cost is the imports."""

import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternate, ratio  # noqa: E402

LIST = "from flowclip_cache.extraction.families.listing import list_models; list_models(torch_free={})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    env = dict(os.environ, HF_HUB_OFFLINE="1")

    def command():  # the command itself, torch-free
        subprocess.run([sys.executable, "-m", "flowclip_cache", "models"], env=env, check=True, capture_output=True)

    def through_open_clip():
        subprocess.run([sys.executable, "-c", LIST.format(False)], env=env, check=True, capture_output=True)

    t = alternate({"command": command, "open_clip": through_open_clip}, args.reps)
    med, lo, hi = ratio(t["command"], t["open_clip"])
    print(f"# {os.cpu_count()} CPUs, a fresh process per listing")
    print(
        f"flowclip models: torch-free {statistics.median(t['command']):.2f} s | through open_clip "
        f"{statistics.median(t['open_clip']):.2f} s | ratio {med:.3f} [{lo:.3f}, {hi:.3f}] "
        f"({args.reps} alternated repetitions)"
    )


if __name__ == "__main__":
    sys.exit(main())
