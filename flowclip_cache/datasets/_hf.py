"""Benchmarks published as Hugging Face datasets, read from the copy a user holds: a
folder made by `datasets`' `save_to_disk` (Arrow files listed in state.json, one folder
per split under dataset_dict.json), or a hub snapshot (the `snapshots/<revision>`
folder of ~/.cache/huggingface/hub/datasets--owner--name, or the folder its files were
downloaded to) holding the split's Parquet files. Both are read with pyarrow alone:
nothing in them is executed or unpickled, and nothing is downloaded.

Images stored inside the dataset (an Image feature: {bytes, path}) are written, bytes
unchanged, to a folder the user names (`--option images_out=FOLDER`), which is then
the image root of `extract`; flowclip writes that folder whole or not at all."""

from __future__ import annotations

import glob
import json
import os
import shutil
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ManifestError


def read_split(source: str, split: str, what: str) -> pa.Table:
    """The split's table from a save_to_disk folder or a hub snapshot."""
    source = _snapshot(source)
    if os.path.isfile(os.path.join(source, "dataset_dict.json")):
        splits = json.load(open(os.path.join(source, "dataset_dict.json"))).get("splits", [])
        if split not in splits:
            raise ManifestError(f"{source}: no split {split!r} in this {what} copy (it has {', '.join(splits)})")
        source = os.path.join(source, split)
    if os.path.isfile(os.path.join(source, "state.json")):
        state = json.load(open(os.path.join(source, "state.json")))
        files = [os.path.join(source, f["filename"]) for f in state.get("_data_files", [])]
        if not files:
            raise ManifestError(f"{source}: state.json lists no data files")
        return pa.concat_tables([_arrow(f) for f in files])
    files = sorted(
        f
        for pattern in (f"**/{split}-*.parquet", f"**/{split}/*.parquet", f"**/{split}.parquet")
        for f in glob.glob(os.path.join(source, pattern), recursive=True)
    )
    if not files:
        raise ManifestError(
            f"{source}: neither a save_to_disk folder (state.json / dataset_dict.json) nor a hub snapshot "
            f"holding {split!r} Parquet files; point --source at your local copy of {what}"
        )
    return pa.concat_tables([pq.read_table(f) for f in dict.fromkeys(files)])


def _snapshot(source: str) -> str:
    """A hub cache folder (datasets--owner--name) stands for its one snapshot."""
    snaps = os.path.join(source, "snapshots")
    if os.path.isdir(snaps):
        revs = sorted(os.listdir(snaps))
        if len(revs) != 1:
            raise ManifestError(f"{source}: {len(revs)} snapshots; point --source at one of {snaps}/<revision>")
        return os.path.join(snaps, revs[0])
    return source


def _arrow(path: str) -> pa.Table:
    try:
        with pa.memory_map(path) as f:
            return pa.ipc.open_stream(f).read_all()
    except (OSError, pa.ArrowInvalid) as e:
        raise ManifestError(f"{path}: not a readable Arrow file ({e})") from None


def image_bytes(value, where: str) -> tuple[bytes, str]:
    """An Image feature's stored value -> (the file's bytes, its extension)."""
    if not isinstance(value, dict) or not value.get("bytes"):
        raise ManifestError(f"{where}: no image bytes (an Image feature stores {{bytes, path}})")
    raw = value["bytes"]
    ext = os.path.splitext(value.get("path") or "")[1].lower()
    if raw[:8] == b"\x89PNG\r\n\x1a\n":
        ext = ".png"
    elif raw[:3] == b"\xff\xd8\xff":
        ext = ".jpg"
    return raw, ext or ".img"


class ImageExport:
    """Images written under a fresh folder, published whole when the converter finishes:
    an existing folder is never written into."""

    def __init__(self, folder: str | None, what: str):
        if not folder:
            raise ManifestError(
                f"{what} holds its images inside the dataset: pass --option images_out=FOLDER (a new folder) "
                f"to write them there, bytes unchanged, and give that folder to extract as --image-root"
            )
        if os.path.exists(folder):
            raise ManifestError(f"{folder} exists; images_out must name a new folder (nothing is written into one)")
        self.folder = folder
        self.tmp = f"{folder}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.makedirs(self.tmp)

    def add(self, name: str, value, where: str) -> str:
        """Write one image as NAME plus its extension; -> its path relative to the folder."""
        raw, ext = image_bytes(value, where)
        rel = name + ext
        path = os.path.join(self.tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(raw)
        return rel

    def finish(self) -> None:
        os.rename(self.tmp, self.folder)
        self.published = True

    def withdraw(self) -> None:
        """Remove the folder finish() published (when its manifest could not be written)."""
        if getattr(self, "published", False):
            shutil.rmtree(self.folder, ignore_errors=True)

    def abandon(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
