"""The dry run's closing tables, the real data at a glance: each image folder the paper
reads (which manifests read it, how many images the catalogue counts, its size on disk:
measured when the folder is here, else the size its publisher states for the download,
where we have one), then each encoder's store (disk) and its extraction time on the
dry run's device (the plan's own estimates, from steps' figures)."""

from __future__ import annotations

import os
import time

from ..extraction.sizes import duration, human_bytes
from .budget import counts

# The download sizes their publishers state, for folders not yet here (a folder that is
# here is measured instead). Only the sizes a publisher's page states; other folders say so.
PUBLISHED_SIZES = {
    "coco": "train2014 13 GB + val2014 6 GB (cocodataset.org/#download)",
    "coco/val2017": "1 GB (cocodataset.org/#download)",
    "cifar10": "162 MB, binary version (cs.toronto.edu/~kriz/cifar.html)",
    "cifar100": "161 MB, binary version (cs.toronto.edu/~kriz/cifar.html)",
}
WALK_SECONDS = 20.0  # a folder's size is counted for at most this long (a network file system may be slow)


def folder_bytes(path: str, budget: float = WALK_SECONDS) -> tuple[int, int, bool]:
    """(bytes, files, complete) of the regular files under path, counted for at most
    `budget` seconds (complete False: it stopped counting, or met a folder it may not read;
    the figures are then a lower bound)."""
    total = files = 0
    complete = True
    deadline = time.monotonic() + budget
    stack = [path]
    while stack:
        if time.monotonic() > deadline:
            return total, files, False
        try:
            with os.scandir(stack.pop()) as entries:
                for e in entries:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.is_file(follow_symlinks=False):
                        total, files = total + e.stat(follow_symlinks=False).st_size, files + 1
        except OSError:  # a folder it may not read: the count is a lower bound, said so
            complete = False
    return total, files, complete


def image_folders(cfg) -> dict[str, list[str]]:
    """image folder (relative to data) -> the sources whose images are under it."""
    out: dict[str, list[str]] = {}
    for name, src in cfg.sources.items():
        out.setdefault(src["images"], []).append(name)
    return out


def _on_disk(cfg, folder: str) -> str:
    path = os.path.join(cfg.data, folder)
    if os.path.isdir(path):
        n_bytes, files, complete = folder_bytes(path)
        size = f"{human_bytes(n_bytes)} in {files:,} files (measured)"
        partial = f"not every file counted (unreadable, or past {WALK_SECONDS:.0f} s)"
        return size if complete else f"at least {size}: {partial}"
    return f"not here; download {PUBLISHED_SIZES[folder]}" if folder in PUBLISHED_SIZES else "not here"


def print_sizes(cfg, steps, log) -> None:
    """The two tables (after the plan; the steps carry their estimates)."""
    if cfg.standins is not None:
        return  # the reduced run's images are the synthetic world's
    log(f"\nimage folders (under {cfg.data}):")
    for folder, names in image_folders(cfg).items():
        known = [c[0] for c in (counts(cfg, n) for n in names) if c]
        # sources may share images (COCO's): the sum is an upper bound
        images = f"<= {sum(known):,} images" if known else "images: counted once built"
        images += " (of the sources counted)" * (0 < len(known) < len(names))
        log(f"  {folder:32s} {images:44s} {_on_disk(cfg, folder)}; read by {', '.join(names)}")
    log(f"stores (under {cfg.cache}; disk: FP16 features, estimates; time: on {cfg.device}, measured here):")
    _step_lines([s for s in steps if s.kind == "extract"], log, "extraction")
    log(f"training and adapting (time on {cfg.device}, measured here on random features and weights):")
    _step_lines([s for s in steps if s.kind in ("study", "adapt")], log, "")
    log("  (time on another device: the same dry run there; with device=cpu, on this CPU)")


def _step_lines(steps, log, what: str) -> None:
    for s in steps:
        disk = f"~{s.disk / 2**30:.1f} GiB" if s.disk is not None else ""
        if s.seconds is not None:
            time_text = f"~{duration(s.seconds)} {what}".rstrip()
        else:  # why (the plan's line says it too): the device not here, or the measuring time spent
            time_text = s.how if s.how.startswith("not measured") else "time not measured"
        log(f"  {s.name:32s} {disk:12s} {time_text}")
