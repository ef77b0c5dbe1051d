"""Paper scale: training from a store larger than RAM, and scoring a COCO-5k-sized gallery.

Writes stores of COCO-training size (113,287 images, 566,435 records each with one
full-caption negative, 1,132,870 captions of 8-18 tokens, ViT-B/32 shapes) with SYNTHETIC
random unit FP16 features (no encoder: drawn from a fixed pool of vectors), at the given
fractions, then measures each training-data placement in its own process: peak RSS, time
to the first step, step time and the epoch time it implies. The placements alternate
repetition by repetition (device, store, device, store, ...; --reps), and each ratio is the
median of the per-repetition ratios of step times with their min-max. --hold GIB runs
them all while a second process holds GIB of memory (memory pressure), and `auto` may be
one of the placements (--placements device,store,auto) to show what it chooses there.
Then scores a retrieval gallery with an (untrained) Flow-CLIP head, exact and with
--shortlist, with peak RSS against --max-memory.

    python benchmarks/bench_scale.py --root /tmp/scale                 # 1/10 and full size
    python benchmarks/bench_scale.py --root /tmp/scale --fractions 0.1 --steps 20
    python benchmarks/bench_scale.py --root /tmp/scale --fractions 0.1 --no-scoring \
        --hold 17 --placements device,store,auto                       # memory held elsewhere

Needs ~22 GB of disk for the full-size store (kept under --root for reruns).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

D, P = 512, 49
COCO_IMAGES, COCO_RECORDS = 113_287, 566_435


def pool(rng, n, shape=()):
    x = rng.standard_normal((n,) + shape + (D,), dtype=np.float32)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float16)


def write_store(root: str, fraction: float, log=print) -> tuple[str, str]:
    """(store, training manifest) of COCO-training size x fraction; reused when present."""
    import pyarrow as pa

    from flowclip_cache.hashing import caption_key
    from flowclip_cache.manifest import write_manifest
    from flowclip_cache.store import CAPTION, IMAGE, FeatureStore

    folder = os.path.join(root, f"coco-x{fraction:g}")
    store_dir, man = os.path.join(folder, "store"), os.path.join(folder, "train.parquet")
    if os.path.exists(os.path.join(folder, "DONE")):
        return store_dir, man
    n_img, n_rec = int(COCO_IMAGES * fraction), int(COCO_RECORDS * fraction)
    rng = np.random.default_rng(0)
    vec, patches = pool(rng, 4096), pool(rng, 512, (P,))
    cfg = {
        "model": "synthetic-scale",
        "model_cfg": {"embed_dim": D},
        "num_patches": P,
        "token_mask": "nonpad",
        "weights": {"source": "random-init", "init_seed": 0},
    }
    fs = FeatureStore.open_or_create(store_dir, cfg)
    t0 = time.perf_counter()
    ikeys = [caption_key(f"image {i}") for i in range(n_img)]
    for a in range(0, n_img, 256):
        ks = ikeys[a : a + 256]
        idx = rng.integers(0, len(patches), len(ks))
        fs.write_segment(IMAGE, ks, {"global": vec[idx % len(vec)], "patches": patches[idx]})
    texts = [f"caption {i}" for i in range(2 * n_rec)]
    lengths = rng.integers(8, 19, len(texts))
    for a in range(0, len(texts), 4096):
        ks = [caption_key(t) for t in texts[a : a + 4096]]
        ln = lengths[a : a + 4096]
        off = np.concatenate([[0], np.cumsum(ln)]).astype(np.int64)
        tok = vec[rng.integers(0, len(vec), int(off[-1]))]
        fs.write_segment(
            CAPTION,
            ks,
            {
                "global": vec[rng.integers(0, len(vec), len(ks))],
                "tokens": tok,
                "offsets": off,
                "truncated": np.zeros(len(ks), np.uint8),
            },
        )
    fs.release_writer()
    img_of = rng.integers(0, n_img, n_rec)
    write_manifest(
        man,
        pa.table(
            {
                "record_id": [f"r{i}" for i in range(n_rec)],
                "image": [f"{j}.jpg" for j in img_of],
                "image_key": [ikeys[j] for j in img_of],
                "positive": texts[:n_rec],
                "negatives": [[t] for t in texts[n_rec:]],
                "split": ["val" if i % 500 == 0 else "train" for i in range(n_rec)],
            }
        ),
        "training",
    )
    open(os.path.join(folder, "DONE"), "w").write("done\n")
    log(
        f"wrote {folder}: {n_img} images, {2 * n_rec} captions, {time.perf_counter() - t0:.0f} s "
        f"({FeatureStore(store_dir).size_on_disk() / 2**30:.1f} GiB)"
    )
    return store_dir, man


def worker(store: str, manifest: str, placement: str, steps: int, out: str, device: str = "cpu") -> dict:
    """One placement in this process: time to first step, step time, peak RSS."""
    import resource

    from flowclip_cache.store import FeatureStore
    from flowclip_cache.training.loop import TrainConfig, train_head

    t0 = time.perf_counter()
    cfg = TrainConfig(head="flow", epochs=1, batch_size=32, train_eval_records=256, checkpoint_every=10**9)
    said = []
    train_head(
        FeatureStore(store),
        manifest,
        out,
        cfg,
        placement=placement,
        progress=False,
        stop_after=steps,
        log=said.append,
        device=device,
    )
    wall = time.perf_counter() - t0
    rates = [json.loads(x)["steps_per_s"] for x in open(os.path.join(out, "log.jsonl")) if '"steps_per_s"' in x]
    step = float(np.median([1 / r for r in rates[1:]]))  # the first one includes data loading
    first = wall - step * (len(rates) - 1)
    return {
        "placement": placement,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "seconds_to_first_step": first,
        "seconds_per_step": step,
        "chosen": [s for s in said if "placement" in s],
    }


def gallery(root: str, store: str, n_images: int) -> str:
    """A retrieval manifest of n_images from the store, five of its captions each."""
    import pyarrow as pa

    from flowclip_cache.hashing import caption_key
    from flowclip_cache.manifest import write_manifest

    path = os.path.join(root, f"gallery-{n_images}.parquet")
    write_manifest(
        path,
        pa.table(
            {
                "image": [f"{i}.jpg" for i in range(n_images)],
                "image_key": [caption_key(f"image {i}") for i in range(n_images)],
                "captions": [[f"caption {5 * i + j}" for j in range(5)] for i in range(n_images)],
            }
        ),
        "retrieval",
        {"benchmark": "coco-retrieval"},
    )
    return path


def score_worker(store: str, manifest: str, run: str, max_memory: int, shortlist: int, out: str) -> dict:
    import resource

    from flowclip_cache.scoring.score import run_score
    from flowclip_cache.store import FeatureStore

    t0 = time.perf_counter()
    res = run_score(
        FeatureStore(store),
        [manifest],
        [run],
        out,
        bootstrap_draws=0,
        max_memory_mb=max_memory,
        shortlist=shortlist or None,
        progress=False,
        log=lambda *_: None,
    )
    r = next(iter(res["results"].values()))["coco-retrieval"]
    return {
        "seconds": time.perf_counter() - t0,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "i2t_R@1": r["i2t_R@1"],
    }


def scoring(
    root: str, store: str, man: str, max_memory: int, exact_images: int, shortlist: int, store_images: int
) -> bool:
    """Score an exact and a shortlisted gallery (COCO 5k, or as many images as a small
    store holds); False when a run failed."""
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.training.loop import TrainConfig, train_head

    run = os.path.join(root, "flow-untrained")
    if not os.path.exists(os.path.join(run, "DONE")):
        train_head(
            FeatureStore(store),
            man,
            run,
            TrainConfig(head="flow", epochs=0, train_eval_records=0),
            progress=False,
            log=lambda *_: None,
            placement="store",
        )
    ok = True
    for n, k in ((min(exact_images, store_images), 0), (min(5000, store_images), shortlist)):
        g = gallery(root, store, n)
        out = os.path.join(root, f"score-{n}-{k}-{time.time_ns()}")
        r = subprocess.run(
            [sys.executable, __file__, "--score-worker", store, g, run, str(max_memory), str(k), out],
            capture_output=True,
            text=True,
        )
        if r.returncode:
            print(f"score {n} images: failed\n{r.stderr[-2000:]}")
            ok = False
            continue
        res = json.loads(r.stdout.strip().splitlines()[-1])
        pairs = n * 5 * n if not k else None
        rate = (
            f" | {pairs / res['seconds']:8.0f} pairs/s; the 5k gallery exactly ~ "
            f"{5000 * 25000 / (pairs / res['seconds']) / 3600:.1f} h"
            if pairs
            else ""
        )
        print(
            f"score {n:5d} images x {5 * n} captions, {'exact' if not k else f'shortlist {k}'}: "
            f"{res['seconds']:7.1f} s | peak RSS {res['peak_rss_gib']:.2f} GiB (--max-memory {max_memory} MiB)" + rate
        )
    return ok


def mem_available_gib() -> float:
    with open("/proc/meminfo") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("MemAvailable:")) / 2**20


def hold_worker(gib: float) -> int:
    """Hold gib of touched anonymous memory until killed (another process's memory)."""
    block = np.ones(int(gib * 2**30) // 8, np.float64)  # np.ones writes every page
    print(f"holding {block.nbytes / 2**30:.1f} GiB", flush=True)
    while True:
        time.sleep(3600)


def start_hold(gib: float) -> subprocess.Popen:
    before = mem_available_gib()
    p = subprocess.Popen([sys.executable, __file__, "--hold-worker", str(gib)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    p.stdout.readline()  # it holds the memory once this line comes
    after = mem_available_gib()
    print(f"memory pressure: a second process holds {gib:g} GiB (MemAvailable {before:.1f} -> {after:.1f} GiB)")
    return p


def placements_side_by_side(a, f: float, store: str, man: str, placements: list[str], n_train: int) -> bool:
    """Each placement in its own process, alternated over a.reps repetitions; per placement
    the median [min, max] step time, and each one's step-time ratio to the first's."""
    res: dict[str, list[dict]] = {pl: [] for pl in placements}
    for rep in range(a.reps):
        for pl in placements:
            out = os.path.join(a.root, f"run-x{f:g}-{pl}-{time.time_ns()}")
            cmd = [
                sys.executable,
                __file__,
                "--steps",
                str(a.steps),
                "--device",
                a.device,
                "--worker",
                store,
                man,
                pl,
                out,
            ]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                print(f"x{f:g} {pl}: failed (repetition {rep + 1})\n{r.stderr[-2000:]}")
                return False
            res[pl].append(json.loads(r.stdout.strip().splitlines()[-1]))
    ms = lambda pl: [x["seconds_per_step"] * 1000 for x in res[pl]]
    for pl, runs in res.items():
        step = statistics.median(ms(pl))
        epoch = step * (n_train // 32) / 6e4
        print(
            f"x{f:g} {pl:6s}: peak RSS {max(x['peak_rss_gib'] for x in runs):5.2f} GiB | first step after "
            f"{statistics.median(x['seconds_to_first_step'] for x in runs):6.1f} s | {step:6.0f} ms/step "
            f"[{min(ms(pl)):.0f}, {max(ms(pl)):.0f}] | epoch of {n_train // 32} steps ~ {epoch:5.1f} min | "
            f"{runs[0]['chosen'][0] if runs[0]['chosen'] else ''}"
        )
    base = placements[0]
    for pl in placements[1:]:
        r = [x / y for x, y in zip(ms(base), ms(pl))]
        print(
            f"x{f:g} {base} / {pl} step time: {statistics.median(r):.2f} [{min(r):.2f}, {max(r):.2f}] "
            f"({a.reps} alternated repetitions; above 1: {pl} is faster)"
        )
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/tmp/flowclip-scale")
    ap.add_argument("--fractions", default="0.1,1")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda: then host placement is measured too")
    ap.add_argument("--max-memory", type=int, default=512)
    ap.add_argument("--exact-images", type=int, default=400, help="gallery size scored exactly")
    ap.add_argument("--shortlist", type=int, default=10)
    ap.add_argument("--no-scoring", action="store_true")
    ap.add_argument("--placements", help="Comma-separated, instead of the default (device,store; and host on CUDA).")
    ap.add_argument("--reps", type=int, default=3, help="Alternated repetitions of the placements.")
    ap.add_argument("--hold", type=float, default=0, help="GiB a second process holds meanwhile (memory pressure).")
    ap.add_argument("--hold-worker", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--worker", nargs=4, metavar=("STORE", "MANIFEST", "PLACEMENT", "OUT"))
    ap.add_argument("--score-worker", nargs=6)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker[0], a.worker[1], a.worker[2], a.steps, a.worker[3], a.device)))
        return
    if a.hold_worker:
        return hold_worker(a.hold_worker)
    if a.score_worker:
        st, man, run, mm, k, out = a.score_worker
        print(json.dumps(score_worker(st, man, run, int(mm), int(k), out)))
        return
    os.makedirs(a.root, exist_ok=True)
    print("SYNTHETIC features (random unit FP16 vectors), COCO-training shapes; CPU, one process per placement")
    ok = True
    for f in (float(x) for x in a.fractions.split(",")):
        store, man = write_store(a.root, f)
        n_train = int(COCO_RECORDS * f) - int(COCO_RECORDS * f) // 500 - 1
        placements = ["device", "store"] if f <= 0.25 else ["store"]  # full size does not fit in 24 GiB
        if a.device.startswith("cuda"):
            placements = ["device", "host", "store"] if f <= 0.25 else ["host", "store"]
        if a.placements:  # a chosen few (the smoke test takes one)
            placements = a.placements.split(",")
        hold = start_hold(a.hold) if a.hold else None
        try:
            ok &= placements_side_by_side(a, f, store, man, placements, n_train)
        finally:
            if hold:
                hold.kill()
        if f == min(float(x) for x in a.fractions.split(",")) and not a.no_scoring:
            ok &= scoring(a.root, store, man, a.max_memory, a.exact_images, a.shortlist, int(COCO_IMAGES * f))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
