"""Benchmarks published as Hugging Face datasets, read from the copy a user holds: a
folder made by `datasets`' `save_to_disk` (Arrow files listed in state.json, one folder
per split under dataset_dict.json), or a hub snapshot (the `snapshots/<revision>`
folder of ~/.cache/huggingface/hub/datasets--owner--name, or the folder its files were
downloaded to) holding the split's Parquet files. Both are read with pyarrow alone:
nothing in them is executed or unpickled, and nothing is downloaded.

Images stored inside the dataset (an Image feature: {bytes, path}) are written, bytes
unchanged, to a folder the user names (`--option images_out=FOLDER`), which is then
the image root of `extract`; flowclip writes that folder whole or not at all. Every file
name written there is made by flowclip (the benchmark, the row number and the image's
place in the row, with the extension of the format its bytes are in); nothing in the
copy (an `id`, an Image's `path`) names a file, and bytes that are no image or larger
than MAX_IMAGE_BYTES are refused. The data files a state.json lists must be plain names
inside its own folder."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ManifestError
from ..shards import MAX_IMAGE_BYTES


def read_split(source: str, split: str, what: str, columns: tuple[str, ...] = ()) -> pa.Table:
    """The split's table from a save_to_disk folder or a hub snapshot, holding COLUMNS
    (a copy without one is refused, naming it and the columns the copy has)."""
    try:
        table = _read_split(source, split, what)
    except (pa.ArrowException, ValueError) as e:  # JSON's error is a ValueError
        raise ManifestError(f"{source}: not a readable copy of {what} ({str(e).splitlines()[0][:200]})") from None
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ManifestError(
            f"{source}: the {split!r} split of this {what} copy has no column {', '.join(map(repr, missing))} "
            f"(it has {', '.join(table.column_names)})"
        )
    return table


def _json(path: str) -> dict:
    value = json.load(open(path, encoding="utf-8"))
    if not isinstance(value, dict):
        raise ManifestError(f"{path}: expected a JSON object")
    return value


def _read_split(source: str, split: str, what: str) -> pa.Table:
    source = _snapshot(source)
    if os.path.isfile(os.path.join(source, "dataset_dict.json")):
        splits = _json(os.path.join(source, "dataset_dict.json")).get("splits", [])
        if not isinstance(splits, list) or split not in splits:
            raise ManifestError(f"{source}: no split {split!r} in this {what} copy (it has {str(splits)[:200]})")
        source = os.path.join(source, split)
    if os.path.isfile(os.path.join(source, "state.json")):
        state = _json(os.path.join(source, "state.json"))
        files = [os.path.join(source, _plain_name(f, source)) for f in state.get("_data_files", [])]
        if not files:
            raise ManifestError(f"{source}: state.json lists no data files")
        return pa.concat_tables([_arrow(f) for f in files])
    files = sorted(
        f
        for pattern in (f"**/{split}-*.parquet", f"**/{split}/*.parquet", f"**/{split}.parquet")
        for f in glob.glob(os.path.join(glob.escape(source), pattern), recursive=True)
    )
    if not files:
        raise ManifestError(
            f"{source}: neither a save_to_disk folder (state.json / dataset_dict.json) nor a hub snapshot "
            f"holding {split!r} Parquet files; point --source at your local copy of {what}"
        )
    return pa.concat_tables([pq.read_table(f) for f in dict.fromkeys(files)])


def _plain_name(entry, source: str) -> str:
    """A state.json data file's name: a file of the copy's own folder, never a path."""
    name = entry.get("filename") if isinstance(entry, dict) else None
    if not isinstance(name, str) or not name or name in (".", "..") or re.search(r"[/\\\x00]", name):
        raise ManifestError(
            f"{source}/state.json: data file {str(name)[:80]!r} is not a plain file name in the copy's own "
            f"folder; flowclip reads no file a copy names elsewhere"
        )
    return name


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


# the formats an embedded image may be in, told by their first bytes (never by the copy's path)
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", ".png"),
    (b"\xff\xd8\xff", ".jpg"),
    (b"GIF87a", ".gif"),
    (b"GIF89a", ".gif"),
    (b"BM", ".bmp"),
    (b"II*\x00", ".tif"),
    (b"MM\x00*", ".tif"),
)


def image_format(raw: bytes) -> str | None:
    """The extension of the image format the first bytes are in (None: no image format)."""
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return ".webp"
    return next((e for magic, e in _MAGIC if raw.startswith(magic)), None)


def image_bytes(value, where: str) -> tuple[bytes, str]:
    """An Image feature's stored value -> (the file's bytes, the extension of the format
    they are in); bytes in no image format, or over MAX_IMAGE_BYTES, are refused."""
    if not isinstance(value, dict) or not isinstance(value.get("bytes"), bytes) or not value["bytes"]:
        raise ManifestError(f"{where}: no image bytes (an Image feature stores {{bytes, path}})")
    raw = value["bytes"]
    if len(raw) > MAX_IMAGE_BYTES:
        raise ManifestError(
            f"{where}: an embedded image of {len(raw) / 2**20:.1f} MiB, over the "
            f"{MAX_IMAGE_BYTES // 2**20} MiB flowclip writes for one image"
        )
    ext = image_format(raw)
    if ext is None:
        raise ManifestError(f"{where}: the embedded bytes are not an image (PNG, JPEG, GIF, BMP, TIFF or WebP)")
    return raw, ext


_FLOWCLIP_NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}\Z")


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
        """Write one image as NAME (made by flowclip: letters, digits, - and _) plus the
        extension of its format; -> its path relative to the folder."""
        if not _FLOWCLIP_NAME.match(name):
            raise ValueError(f"{name!r}: an exported image's name is made by flowclip, never taken from a copy")
        raw, ext = image_bytes(value, where)
        rel = name + ext
        path = os.path.join(self.tmp, rel)
        with open(path, "xb") as f:
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
