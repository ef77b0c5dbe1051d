"""The encoders suite's dry run: the benchmarks it scores (each manifest found with its
counts, or absent and why), then per encoder its store's disk and its extraction time,
estimates from the manifests' counts, the encoder's feature shape (its configuration, no
weights) and its forward measured here on random weights of its architecture."""

from __future__ import annotations

import os

from ..extraction.sizes import duration, encoder_shape, feature_bytes, human_bytes, manifest_counts, measure_forward


def benchmark_lines(cfg, found: dict[str, str], absent: dict[str, str]) -> tuple[list[str], tuple[int, int] | None]:
    """One line per benchmark, and the summed (images, captions) of those found (None
    while a stand-in is still to be built: its counts are the world's)."""
    lines, images, captions, unknown = [], 0, 0, False
    for bench, path in found.items():
        if os.path.exists(path):
            n_img, n_cap, _ = manifest_counts(path)
            images, captions = images + n_img, captions + n_cap
            lines.append(f"  {bench:26s} {path}: {n_img:,} images, {n_cap:,} captions")
        else:
            unknown = True
            lines.append(f"  {bench:26s} a synthetic stand-in, built by the run ({path})")
    lines += [f"  {bench:26s} absent: {why}" for bench, why in absent.items()]
    return lines, None if unknown else (images, captions)


def encoder_line(entry: dict, counted: tuple[int, int] | None, device: str | None) -> str:
    """The store's disk and the extraction's time for one encoder, or why not."""
    shape = encoder_shape(entry["model"])
    if isinstance(shape, str):
        return f"disk and time not estimated ({shape})"
    if counted is None:
        return f"{shape[0]}-d, {shape[1]} patches; disk and time once the stand-ins are built"
    images, captions = counted
    global_only = entry.get("features", "global") == "global"
    n_bytes = feature_bytes(shape, images, captions, global_only)
    text = f"~{human_bytes(n_bytes)} ({'global features' if global_only else 'every feature'}, {shape[0]}-d, FP16)"
    if device is None:
        return text + "; time not measured (the device is not on this machine: run the dry run there)"
    cost = measure_forward(entry["model"], device)
    if isinstance(cost, str):
        return f"{text}; time {cost}"
    seconds = images * cost[0] + captions * cost[1]
    return f"{text}; ~{duration(seconds)} of forward on {device}"


def print_plan(cfg, found: dict[str, str], absent: dict[str, str], log) -> None:
    """The dry run's printout (nothing is created)."""
    from ..devices import resolve_device
    from ..errors import FlowclipError

    log(f"encoders-suite: suite {cfg.suite}, recognition {', '.join(cfg.recognition) or 'none'}; "
        f"{len(found)} of {len(found) + len(absent)} benchmarks found")  # fmt: skip
    lines, counted = benchmark_lines(cfg, found, absent)
    for line in lines:
        log(line)
    try:
        device: str | None = resolve_device(cfg.device, "device")
    except FlowclipError:  # a CUDA device not on this machine: nothing to measure here
        device = None
    log("encoders (estimates: disk from the counts above and each encoder's feature shape; time from its forward "
        "measured here on random weights, per image and caption, x the counts):")  # fmt: skip
    for name, entry in cfg.encoders.items():
        state = "done" if os.path.exists(os.path.join(cfg.out, "scores", name, "results.json")) else "todo"
        log(f"  [{state:4s}] {name}: {entry['model']} ({entry.get('pretrained', 'none')}) -> {cfg.cache}/{name}; "
            + encoder_line({"features": cfg.features, **entry}, counted, device))  # fmt: skip
