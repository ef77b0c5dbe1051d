"""Every catalogue entry's real-data sizes before anything is extracted: the images it
reads (the catalogue's count; a built manifest's images and captions; the bytes those
images take under an image root, measured), each encoder's store (FP16, estimated from
the counts and the encoder's feature shape) and its extraction time (the forward measured
on this device on random weights, x the counts). `flowclip manifest list --sizes` prints it."""

from __future__ import annotations

import os
import time

from .sizes import duration, encoder_shape, feature_bytes, human_bytes, manifest_counts, measure_forward

STAT_SECONDS = 20.0  # a manifest's images are counted for at most this long (a network file system may be slow)


def images_bytes(paths: set[str], root: str, budget: float = STAT_SECONDS) -> tuple[int, int, int, bool]:
    """(bytes, found, missing, complete) of the image files `paths` name under root;
    complete False when the budget ran out (the figures are then a lower bound)."""
    total = found = missing = 0
    deadline = time.monotonic() + budget
    for p in sorted(paths):
        if time.monotonic() > deadline:
            return total, found, missing, False
        try:
            total, found = total + os.stat(os.path.join(root, p)).st_size, found + 1
        except OSError:
            missing += 1
    return total, found, missing, True


def _distinct_images(path: str) -> set[str]:
    from ..manifest import Manifest

    return {p for ps in Manifest.read(path).row_images() for p in ps}


def entry_lines(entry: dict, built: str, image_root: str | None) -> tuple[list[str], tuple[int, int] | None]:
    """The counts lines for one entry, and (images, captions) when a built manifest gives both."""
    stated = f"{entry['images']:,} images (catalogue)" if entry.get("images") else "images: not stated"
    if not os.path.exists(built):
        return [f"    {stated}; captions counted once built ({built} not here)"], None
    images, captions, _ = manifest_counts(built)
    lines = [f"    {stated}; built {built}: {images:,} images, {captions:,} caption texts"]
    if image_root:
        n_bytes, found, missing, complete = images_bytes(_distinct_images(built), image_root)
        text = f"{human_bytes(n_bytes)} in {found:,} files (measured under {image_root})"
        if missing:
            text += f"; {missing:,} not found there"
        if not complete:
            text = f"at least {text}: counting stopped after {STAT_SECONDS:.0f} s"
        lines.append(f"    images on disk: {text}")
    return lines, (images, captions)


def store_line(model: str, counted: tuple[int, int] | None, stated_images: int | None, global_only: bool,
               forward: tuple[float, float] | str, device: str) -> str:  # fmt: skip
    """The store's disk and the extraction's forward time for one encoder."""
    shape = encoder_shape(model)
    if isinstance(shape, str):
        return f"    {model}: not estimated ({shape})"
    if counted is None:
        if not stated_images:
            return f"    {model}: store and time once the manifest is built"
        text = f"    {model}: images' features ~{human_bytes(feature_bytes(shape, stated_images, 0, global_only))}"
        if not isinstance(forward, str):
            text += f", ~{duration(stated_images * forward[0])} of their forward on {device}"
        return text + " (the captions' once built)"
    images, captions = counted
    text = f"    {model}: store ~{human_bytes(feature_bytes(shape, images, captions, global_only))}"
    if isinstance(forward, str):
        return f"{text}; time {forward}"
    return f"{text}; ~{duration(images * forward[0] + captions * forward[1])} of forward on {device}"


def print_catalogue_sizes(catalogue: dict, kinds: dict, models: list[str], built_dir: str,
                          image_root: str | None, device: str, global_only: bool, log) -> None:  # fmt: skip
    """The table for every real-data entry (the synthetic world's are generated, not read)."""
    what = "global features" if global_only else "global + patch and sentence + token features"
    log(
        f"store: FP16 {what}, estimated from the counts; time: the encoder's forward measured here "
        f"on {device} on random weights, x the counts (decode, writes and the benchmark's own steps not counted)"
    )
    forwards = {m: measure_forward(m, device) for m in models}
    for name, entry in catalogue.items():
        if name not in kinds or "generated" in str(entry.get("source", "")):
            continue
        log(f"  {name} ({kinds[name]}): {entry.get('source')}")
        lines, counted = entry_lines(entry, os.path.join(built_dir, f"{name}.parquet"), image_root)
        for line in lines:
            log(line)
        for m in models:
            log(store_line(m, counted, entry.get("images"), global_only, forwards[m], device))
    if not device.startswith("cuda"):
        log("time on a GPU: run the same command there with --device cuda (this machine measures its own device only)")
