"""The paper plan's budget and its printout: what each step needs and whether it is there,
the disk each store takes (FP16 features, from the manifests' counts when they exist,
else from the catalogue's and the paper's counts) and the time each step takes on the
device, from costs measured here on random weights and random features of each encoder's
shape. Every figure not counted from a file is printed as an estimate."""

from __future__ import annotations

import functools
import os

from ..extraction.sizes import duration, encoder_shape, feature_bytes, manifest_counts
from .paths import TRAINING_SOURCES, manifest_path

PAPER_COUNTS = {  # (images, training records) of the training sources as §4.1 states them
    "coco-train": (113_287, 566_435),
    "cc3m-train": (101_830, 97_734),
}
CAPTIONS_PER_RECORD = {"aro-coco-order": 5, "aro-flickr-order": 5, "coco-retrieval": 5, "flickr-retrieval": 5}


@functools.lru_cache(maxsize=1)
def _catalogue() -> dict:
    """The catalogue, read once per process (the dry run asks it hundreds of times)."""
    from ..catalogue import load_catalogue

    return load_catalogue()


def counts(cfg, name: str) -> tuple[int, int, int, str] | None:
    """(images, captions, training records, where from) of a manifest: counted from its file
    when it exists, else estimated from the catalogue / the paper; None when unknown."""
    path = manifest_path(cfg, name)
    if os.path.exists(path):
        return (*manifest_counts(path), "counted")
    if cfg.standins is not None:
        return None  # a stand-in's size is the world's: known once built
    if name in TRAINING_SOURCES:
        images, records = PAPER_COUNTS[name]
        return images, 2 * records, records, "the paper's counts"
    entry = _catalogue().get(name, {})
    if not entry.get("records"):
        return None
    records = entry["records"]
    captions = 0 if name.startswith(("cifar", "imagenet")) else CAPTIONS_PER_RECORD.get(name, 2) * records
    return entry.get("images") or records, captions, 0, "the catalogue's counts"


def store_bytes(cfg, step, shape, needs=None) -> tuple[int | None, list[str]]:
    """FP16 bytes of the global + patch features of every image and the sentence + token
    features of every caption the step's manifests (or `needs`) hold (images shared across
    manifests counted once per manifest: an upper bound)."""
    total, unknown = 0, []
    for name in cfg.sources:
        if manifest_path(cfg, name) not in (step.needs if needs is None else needs):
            continue
        c = counts(cfg, name)
        if c is None:
            unknown.append(name)
            continue
        images, captions = c[0], c[1]
        total += feature_bytes(shape, images, captions)
    return total, unknown


def estimate(cfg, steps) -> None:
    """Fill each step's disk and seconds (measured costs x counts), or say why not."""
    from .costs import Costs

    shapes = {n: encoder_shape(e["model"]) for n, e in cfg.encoders.items()}
    main = next(iter(cfg.encoders), None)
    for name in cfg.checkpoints:  # a released checkpoint of the main encoder's architecture
        shapes[name] = shapes[main] if main else "no encoder"
    costs = Costs(cfg.device, cfg.measure and _device_here(cfg.device))
    # the biggest steps' measurements first (an encoder's forward prices every extraction and
    # adaptation of it), then the heads': on a slow device the measuring time runs out on these
    order = {"extract": 0, "adapt": 1, "study": 2, "explain": 3}
    for s in sorted(steps, key=lambda s: order.get(s.kind, 4)):
        if s.kind == "extract":
            _extract(cfg, s, shapes[s.name], costs, cfg.encoders.get(s.name, cfg.encoders.get(main, {})).get("model"))
        elif s.kind == "study" and s.train:
            _study(cfg, s, shapes, costs)
        elif s.kind == "adapt" and main:
            _adapt(cfg, s, shapes[main], costs, cfg.encoders[main]["model"])
        elif s.kind == "explain" and main:
            _explain(cfg, s, shapes[main], costs)
        elif s.kind == "score":
            s.how = "the CLIP scorer: dot products of stored features, seconds (not measured)"


def _add_note(s, text: str) -> None:
    s.note = f"{s.note}; " * bool(s.note) + text


def _extract(cfg, s, shape, costs, model) -> None:
    if isinstance(shape, str):
        _add_note(s, f"disk and time not estimated ({shape})")
        return
    s.disk, unknown = store_bytes(cfg, s, shape)
    if unknown:
        _add_note(s, f"disk without {', '.join(unknown)} (counts unknown until built)")
    cost = costs.forward(model)
    if isinstance(cost, str):
        s.how = cost
        return
    images, captions = _sum_counts(cfg, s.needs)
    s.seconds = images * cost[0] + captions * cost[1]
    s.how = f"encoder forward measured here on random weights ({cfg.device}); image decoding not counted"


def _sum_counts(cfg, needs) -> tuple[int, int]:
    """(images, captions) of the manifests among `needs` whose counts are known."""
    images = captions = 0
    for name in cfg.sources:
        c = counts(cfg, name) if manifest_path(cfg, name) in needs else None
        if c:
            images, captions = images + c[0], captions + c[1]
    return images, captions


def eval_pairs(cfg, needs) -> int:
    """The image-caption pairs scoring the benchmarks among `needs` takes: each caption of
    a candidate set with its image; every image with every caption of a retrieval set;
    zero-shot sets (classes x prompts, unknown before they are built) not counted."""
    from ..datasets import get

    pairs = 0
    for name in cfg.sources:
        c = counts(cfg, name) if manifest_path(cfg, name) in needs and name not in TRAINING_SOURCES else None
        if c:
            kind = "candidates" if cfg.standins is not None else get(name).kind
            pairs += c[0] * c[1] if kind == "retrieval" else c[1]
    return pairs


def _per_pair(costs, shape, head: dict) -> float | str:
    """A head's scoring seconds per image-caption pair: a third of a measured training
    step's per-record time (forward only; the rule of thumb costs.TRAIN_OVER_FORWARD)."""
    from .costs import TRAIN_OVER_FORWARD

    step = costs.step(shape, head)
    return step if isinstance(step, str) else step / head["batch_size"] / TRAIN_OVER_FORWARD


def _study(cfg, s, shapes: dict, costs) -> None:
    c = counts(cfg, s.source)
    if not c or not c[2] or any(isinstance(shapes[enc], str) for enc, _, _ in s.train):
        return
    total, pairs = 0.0, eval_pairs(cfg, [manifest_path(cfg, n) for n in cfg.sources])
    for enc, head, runs in s.train:
        step, per_pair = costs.step(shapes[enc], head), _per_pair(costs, shapes[enc], head)
        if isinstance(step, str) or isinstance(per_pair, str):
            s.how = step if isinstance(step, str) else per_pair
            return
        total += runs * (head["epochs"] * (c[2] // head["batch_size"]) * step + pairs * per_pair)
    s.seconds = total
    s.how = (
        f"training: a step measured here on random features ({cfg.device}) x steps ({c[3]}); scoring: a third of "
        "a step's per-record time x the benchmarks' pairs (zero-shot sets not counted)"
    )


def _adapt(cfg, s, shape, costs, model) -> None:
    """Adaptation (3 x the measured forward of an image and two captions per record, per
    epoch), the adapted encoder's store of the benchmarks, and their scoring."""
    from .costs import TRAIN_OVER_FORWARD

    if isinstance(shape, str):
        return
    evals = [n for n in s.needs if os.path.basename(os.path.dirname(n)) == "eval"]
    s.disk, _ = store_bytes(cfg, s, shape, evals)
    src = next((n for n in TRAINING_SOURCES if manifest_path(cfg, n) in s.needs), None)
    c, fwd = counts(cfg, src) if src else None, costs.forward(model)
    if not c or isinstance(fwd, str):
        s.how = fwd if isinstance(fwd, str) else ""
        return
    train = TRAIN_OVER_FORWARD * cfg.recipe(src)["epochs"] * c[2] * (fwd[0] + 2 * fwd[1])
    images, captions = _sum_counts(cfg, evals)
    per_pair = _per_pair(costs, shape, {**cfg.recipe(src), "head": "flow"}) if s.name.startswith("flow") else 0.0
    score = eval_pairs(cfg, evals) * per_pair if isinstance(per_pair, float) else 0.0
    s.seconds = train + images * fwd[0] + captions * fwd[1] + score
    s.how = (
        f"adaptation: {TRAIN_OVER_FORWARD:g} x the encoder forward measured here ({cfg.device}) x records x epochs "
        f"({c[3]}); its store: the forward x the benchmarks; scoring as a study's"
    )


def _explain(cfg, s, shape, costs) -> None:
    """The explorer: per record, both scorers and the margin's gradient (a measured step)."""
    if isinstance(shape, str):
        return
    head = {**cfg.recipe("coco-train"), "head": "flow"}
    step = costs.step(shape, head)
    if isinstance(step, str):
        s.how = step
        return
    s.seconds = cfg.explorer_records * 2 * step / head["batch_size"]
    s.how = f"records x 2 scorers x a measured training step's per-record time ({cfg.device})"


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
            extra.append(f"~{duration(s.seconds)} (estimate: {s.how})")
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
