"""The paper plan's budget and its printout: what each step needs and whether it is there,
the disk each store takes (FP16 features, from the manifests' counts when they exist,
else from the catalogue's and the paper's counts) and the time each step takes on the
device, from costs measured here on random weights and random features of each encoder's
shape. Every figure not counted from a file is printed as an estimate."""

from __future__ import annotations

import os
import time

from .paths import TRAINING_SOURCES, manifest_path

TOKENS_PER_CAPTION = 16  # assumed for the disk estimate (valid tokens, with the special ones)
PAPER_COUNTS = {  # (images, training records) of the training sources as §4.1 states them
    "coco-train": (113_287, 566_435),
    "cc3m-train": (101_830, 97_734),
}
CAPTIONS_PER_RECORD = {"aro-coco-order": 5, "aro-flickr-order": 5, "coco-retrieval": 5, "flickr-retrieval": 5}


def counts(cfg, name: str) -> tuple[int, int, int, str] | None:
    """(images, captions, training records, where from) of a manifest: counted from its file
    when it exists, else estimated from the catalogue / the paper; None when unknown."""
    from ..catalogue import load_catalogue
    from ..manifest import Manifest

    path = manifest_path(cfg, name)
    if os.path.exists(path):
        m = Manifest.read(path)
        texts: set[str] = set()
        for col in m.spec.text_columns:
            for v in m.table.column(col).to_pylist():
                texts.update(v if isinstance(v, list) else [v])
        train = sum(1 for s in m.table.column("split").to_pylist() if s == "train") if m.kind == "training" else 0
        return len({p for ps in m.row_images() for p in ps}), len(texts), train, "counted"
    if cfg.standins is not None:
        return None  # a stand-in's size is the world's: known once built
    if name in TRAINING_SOURCES:
        images, records = PAPER_COUNTS[name]
        return images, 2 * records, records, "the paper's counts"
    entry = load_catalogue().get(name, {})
    if not entry.get("records"):
        return None
    records = entry["records"]
    captions = 0 if name.startswith(("cifar", "imagenet")) else CAPTIONS_PER_RECORD.get(name, 2) * records
    return entry.get("images") or records, captions, 0, "the catalogue's counts"


def encoder_shape(model: str) -> tuple[int, int] | str:
    """(embedding width, patches) from the encoder's resolved configuration (no weights), or
    why it does not resolve here (no transformers, a tokenizer not at hand)."""
    from ..extraction.encoders import EncoderSpec, resolve

    try:
        config = resolve(EncoderSpec(model, "none")).config
    except Exception as e:  # noqa: BLE001 - said in the plan, which goes on
        return f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
    return config.get("dim") or config["model_cfg"]["embed_dim"], config["num_patches"]


def store_bytes(cfg, step, shape) -> tuple[int | None, list[str]]:
    """FP16 bytes of the global + patch features of every image and the sentence + token
    features of every caption the step's manifests hold (images shared across manifests
    counted once per manifest: an upper bound)."""
    d, patches = shape
    total, unknown = 0, []
    for name in cfg.sources:
        if manifest_path(cfg, name) not in step.needs:
            continue
        c = counts(cfg, name)
        if c is None:
            unknown.append(name)
            continue
        images, captions = c[0], c[1]
        total += 2 * d * (images * (1 + patches) + captions * (1 + TOKENS_PER_CAPTION))
    return total, unknown


def measure_forward(model: str, device: str) -> tuple[float, float] | str:
    """Seconds per image and per caption of the encoder's forward on `device` (random
    weights of the same architecture; batch 8 images, 32 captions; best of 2)."""
    import torch

    from ..extraction.encoders import EncoderSpec, load_model, resolve
    from ..extraction.features import encode_images, encode_texts

    try:
        enc = load_model(resolve(EncoderSpec(model, "none")), device)
    except Exception as e:  # noqa: BLE001 - say why, and go on with the plan
        return f"not measured ({type(e).__name__}: {str(e).splitlines()[0][:80]})"
    size = enc.config["preprocess"]["image_size"]
    size = size[0] if isinstance(size, (list, tuple)) else size
    x = torch.randn(8, 3, size, size, device=device)
    tok = enc.tokenize(["a red cube to the left of a small blue sphere on a wooden table"] * 32).to(device)
    best = [float("inf"), float("inf")]
    with torch.no_grad():
        for _ in range(2):
            for i, f in enumerate((lambda: encode_images(enc, x), lambda: encode_texts(enc, tok))):
                t0 = time.perf_counter()
                f()
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                best[i] = min(best[i], time.perf_counter() - t0)
    return best[0] / 8, best[1] / 32


def measure_step(shape, head: dict, device: str) -> float:
    from ..studies.checks import random_training_data
    from ..training.loop import seconds_per_step
    from ..training.train_config import TrainConfig

    cfg = TrainConfig.from_dict({k: v for k, v in head.items() if k != "epochs"} | {"epochs": 1}, "paper")
    d, patches = shape
    data = random_training_data(d, patches, 4 * cfg.batch_size, device)
    return seconds_per_step(data, cfg, device)


def estimate(cfg, steps) -> None:
    """Fill each step's disk and seconds (measured costs x counts), or say why not."""
    shapes = {n: encoder_shape(e["model"]) for n, e in cfg.encoders.items()}
    main = next(iter(cfg.encoders), None)
    for name in cfg.checkpoints:  # a released checkpoint of the main encoder's architecture
        shapes[name] = shapes[main] if main else "no encoder"
    forward: dict[str, tuple[float, float] | str] = {}
    step_cost: dict[tuple, float] = {}
    measure = cfg.measure and _device_here(cfg.device)
    for s in steps:
        if s.kind == "extract":
            shape = shapes[s.name]
            if isinstance(shape, str):
                s.note = f"{s.note}; " * bool(s.note) + f"disk and time not estimated ({shape})"
                continue
            s.disk, unknown = store_bytes(cfg, s, shape)
            if unknown:
                without = f"disk without {', '.join(unknown)} (counts unknown until built)"
                s.note = f"{s.note}; " * bool(s.note) + without
            if measure:
                model = cfg.encoders.get(s.name, cfg.encoders.get(main, {})).get("model")
                _time_extract(cfg, s, forward.setdefault(model, measure_forward(model, cfg.device)))
        elif s.kind == "study" and s.train and measure:
            _time_study(cfg, s, shapes, step_cost)


def _time_extract(cfg, s, cost: tuple[float, float] | str) -> None:
    if isinstance(cost, str):
        s.how = cost
        return
    images = captions = 0
    for name in cfg.sources:
        c = counts(cfg, name) if manifest_path(cfg, name) in s.needs else None
        if c:
            images, captions = images + c[0], captions + c[1]
    s.seconds = images * cost[0] + captions * cost[1]
    s.how = "encoder forward measured here on random weights; image decoding not counted"


def _time_study(cfg, s, shapes: dict, step_cost: dict) -> None:
    c = counts(cfg, s.source)
    if not c or not c[2] or any(isinstance(shapes[enc], str) for enc, _, _ in s.train):
        return
    total = 0.0
    for enc, head, runs in s.train:
        key = (shapes[enc], tuple(sorted(head.items())))
        if key not in step_cost:
            step_cost[key] = measure_step(shapes[enc], head, cfg.device)
        total += runs * head["epochs"] * (c[2] // head["batch_size"]) * step_cost[key]
    s.seconds = total
    s.how = f"a step measured here on random features x steps ({c[3]}); scoring not counted"


def _device_here(device: str) -> bool:
    import torch

    return not device.startswith("cuda") or torch.cuda.is_available()


def status(step, made: set[str]) -> tuple[str, list[str]]:
    """(done | ready | waits | missing, the missing inputs' lines)."""
    if step.finished:
        return "done", []
    missing = [f"{p}: {step.raw[p]}" for p in step.needs if p in step.raw and not os.path.exists(p)]
    if missing:
        return "missing", missing
    waits = [p for p in step.needs if not os.path.exists(p)]
    if waits:
        return ("waits" if all(p in made for p in waits) else "missing"), [
            f"{p}: not made by any step" for p in waits if p not in made
        ]
    return "ready", []


def print_plan(cfg, steps, log) -> None:
    estimate(cfg, steps)
    made: set[str] = set()
    totals = {"disk": 0, "seconds": 0.0}
    counts_by: dict[str, int] = {}
    log(f"paper plan: {len(steps)} steps, device {cfg.device}" + ("" if _device_here(cfg.device) else
        " (not on this machine: no time measured; run the dry run where the work will run)"))  # fmt: skip
    for s in steps:
        state, why = status(s, made)
        counts_by[state] = counts_by.get(state, 0) + 1
        extra = []
        if s.disk is not None:
            extra.append(f"~{s.disk / 2**30:.1f} GiB (estimate)")
            totals["disk"] += s.disk
        if s.seconds is not None:
            extra.append(f"~{s.seconds / 3600:.2f} h (estimate: {s.how})")
            totals["seconds"] += s.seconds
        elif s.how:
            extra.append(s.how)
        log(
            f"[{state:9s}] {s.kind} {s.name} -> {s.makes or '-'}  ({s.feeds})"
            + ("; " + "; ".join(extra) if extra else "")
        )
        for line in why:
            log(f"    missing {line}")
        for c in s.commands:
            log(f"    $ {c}")
        if s.note:
            log(f"    note: {s.note}")
        if s.makes:
            made.add(s.makes)
    log(
        "steps: " + ", ".join(f"{v} {k}" for k, v in counts_by.items())
        + f"; disk of the stores ~{totals['disk'] / 2**30:.0f} GiB (estimate)"
        + (f"; measured steps ~{totals['seconds'] / 3600:.1f} h on {cfg.device} (estimate)" * bool(totals["seconds"]))
    )  # fmt: skip
    log("dry run: nothing was created; the commands above run (and resume) one by one")
