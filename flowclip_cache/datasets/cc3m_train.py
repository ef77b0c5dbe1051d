"""CC3M-100K training records with full-caption hard negatives (the paper's CC3M source,
after FSC-CLIP's protocol).

The official release is FSC-CLIP's webdataset (Hugging Face ``ytaek-oh/cc3m-subset-100k``,
read by FSC-CLIP's ``training/data.py``): ``train_subset_100K/NNNNN.tar`` shards in
img2dataset's layout, one sample per key (``<key>.jpg``, ``<key>.txt`` the alt-text,
``<key>.json`` with ``"key"``), and ``coca_captions.tar.gz``, which unpacks to
``coca_captions/<key>.txt``: the CoCa captions FSC-CLIP (``--caption-key coca_captions``)
and the paper train on. FSC-CLIP draws its negatives on the fly, so the converter gives
each caption flowclip's full-caption negatives (``flowclip negatives`` kinds).

The shards hold images, which a manifest names by path: the converter writes each image
once to ``images_out``, a new folder published whole when the manifest is written (pass it
as ``--image-root``), under a name made from its content (``cc3m-<sha256>.<ext>``, the
extension of the format its first bytes say it is in: never a name or extension from the
archive). Members are read as bytes from the tar, each within a stated limit
(``_archives.py``); a sample whose image is not an image is a row error.

The paper's 4,096-record validation partition is not in FSC-CLIP's loader; pass its keys
(``val_keys``: a text file, one sample key per line) to mark those records ``val``.
Older NegCLIP-layout TSVs (``train_neg_clip.tsv`` / ``valid_neg_clip.tsv``) in ``source``
are still read as they are."""

from __future__ import annotations

import hashlib
import json
import os
import re

from ..errors import ManifestError
from . import _archives
from ._hf import MAX_IMAGE_BYTES, ImageExport, image_bytes
from ._negclip import training_benchmark
from .base import PLAIN_ID, Benchmark, BuildReport, RowErrors, read_text, write_records

_TSV = training_benchmark("cc3m-train", "CC3M-100K (training)", "")
IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")
_MEMBER = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)\Z")  # webdataset's key / extension split
_LIMITS = {
    **{e: MAX_IMAGE_BYTES for e in IMAGE_EXTS},
    "txt": _archives.MAX_TEXT_BYTES,
    "json": _archives.MAX_TEXT_BYTES,
}


def shard_folder(source: str) -> str:
    for cand in (source, os.path.join(source, "train_subset_100K")):
        if os.path.isdir(cand) and any(f.endswith(".tar") for f in os.listdir(cand)):
            return cand
    raise ManifestError(
        f"{source}: no webdataset shards (*.tar) here or in train_subset_100K/ (FSC-CLIP's cc3m-subset-100k layout)"
    )


def coca_captions(source: str, folder: str, errors: RowErrors) -> dict[str, str] | None:
    """key -> CoCa caption, from coca_captions/ or straight from coca_captions.tar.gz (each
    caption file read up to MAX_TEXT_BYTES)."""
    for root in (folder, source, os.path.dirname(folder)):
        d = os.path.join(root, "coca_captions")
        if os.path.isdir(d):
            out = {}
            for f in os.listdir(d):
                path = os.path.join(d, f)
                if not f.endswith(".txt") or not os.path.isfile(path):
                    continue
                if os.path.getsize(path) > _archives.MAX_TEXT_BYTES:
                    errors(path, "caption", f"over the {_archives.MAX_TEXT_BYTES:,} bytes flowclip reads")
                    continue
                out[f[:-4]] = open(path, encoding="utf-8", errors="replace").readline().strip()
            return out
        gz = os.path.join(root, "coca_captions.tar.gz")
        if os.path.isfile(gz):
            out = {}
            for tf, m in _archives.members(gz, "tar.gz"):
                if not m.name.endswith(".txt"):
                    continue
                try:
                    text = _read(tf, m, _archives.MAX_TEXT_BYTES, gz).decode("utf-8", "replace")
                except _archives.MemberTooLarge as e:
                    errors(gz, "caption", str(e))
                    continue
                out[os.path.basename(m.name)[:-4]] = text.split("\n", 1)[0].strip()
            return out
    return None


def _read(tf, m, limit: int, path: str) -> bytes:
    try:
        return _archives.read_member(tf, m, limit)
    except (OSError, EOFError, _archives.tarfile.TarError) as e:
        raise ManifestError(f"{path}: unreadable member {m.name[:120]!r} ({e})") from None


def read_shard(path: str, errors: RowErrors):
    """Samples of one shard in file order: (key, {extension: bytes}), a sample's members
    being consecutive (webdataset's rule); only the members flowclip reads are read, each
    within its limit. A sample with a member over its limit is a row error."""
    key: str | None = None
    parts: dict[str, bytes] = {}
    bad: str | None = None
    for tf, m in _archives.members(path, "tar"):
        hit = _MEMBER.match(m.name)
        if not hit:
            errors(path, f"member {m.name[:120]!r}", "not <key>.<extension>")
            continue
        k, ext = hit.group(1), hit.group(2).lower()
        if k != key:
            if key is not None and bad is None:
                yield key, parts
            elif bad is not None:
                errors(path, f"sample {key!r}", bad)
            key, parts, bad = k, {}, None
        if ext in _LIMITS and bad is None:
            try:
                parts[ext] = _read(tf, m, _LIMITS[ext], path)
            except _archives.MemberTooLarge as e:
                bad = str(e)
    if key is not None and bad is None:
        yield key, parts
    elif bad is not None:
        errors(path, f"sample {key!r}", bad)


def _caption(parts: dict, sample_key: str, coca: dict | None, path: str, where: str, errors: RowErrors) -> str:
    if coca is not None:
        text = coca.get(sample_key, "")
        if not text:
            errors(path, where, f"no CoCa caption coca_captions/{sample_key}.txt")
        return text
    text = parts.get("txt", b"").decode("utf-8", "replace").strip()
    if not text:
        errors(path, where, "empty or missing .txt caption")
    return text


def _sample_key(parts: dict, key: str, path: str, where: str, errors: RowErrors) -> str | None:
    try:
        sample_key = str(json.loads(parts["json"])["key"]) if "json" in parts else os.path.basename(key)
    except (ValueError, KeyError, TypeError, RecursionError):
        errors(path, where, "its .json has no 'key'")
        return None
    if not PLAIN_ID.match(sample_key):  # an id of the record only; image files are named by their content
        errors(path, where, f"key {sample_key[:80]!r} is not a plain id (letters, digits, . _ -)")
        return None
    return sample_key


def build(
    source: str,
    out: str,
    errors: RowErrors,
    caption: str = "coca",
    images_out: str = "",
    val_keys: str = "",
    kinds: str = "swap-obj,swap-att,shuffle-bigram",
    seed: str = "0",
) -> BuildReport:
    if not os.path.isdir(source):
        raise ManifestError(f"{source}: not a folder (check --source)")
    if any(os.path.isfile(os.path.join(source, f)) for f in ("train_neg_clip.tsv", "valid_neg_clip.tsv")):
        return _TSV.build(source, out, errors)
    if caption not in ("coca", "alt"):
        raise ManifestError(f"cc3m-train: caption must be 'coca' or 'alt', got {caption!r}")
    folder = shard_folder(source)
    coca = coca_captions(source, folder, errors) if caption == "coca" else None
    if caption == "coca" and coca is None:
        raise ManifestError(
            f"{source}: no coca_captions/ or coca_captions.tar.gz (FSC-CLIP's positives); "
            f"unpack it there or pass --option caption=alt to train on the alt-texts"
        )
    val = set(read_text(val_keys).split()) if val_keys else set()
    images_out = images_out or os.path.join(os.path.dirname(os.path.abspath(out)), "cc3m-100k-images")
    export = ImageExport(images_out, "cc3m-train")
    try:
        caps, seen_val, names = _samples(folder, coca, val, export, errors)
        report = _write(out, caps, kinds, int(seed), caption, len(names), images_out, export, errors)
    finally:
        export.abandon()  # a failed build leaves no image behind (after finish(): nothing left to remove)
    if val - seen_val:
        report.notes.append(f"{len(val - seen_val)} val_keys are in no shard")
    return report


def _samples(folder: str, coca, val: set, export: ImageExport, errors: RowErrors):
    """The caption records of every shard, each image written once under a name made from its
    content (never from the archive)."""
    caps, seen_val, names = [], set(), {}
    for shard in sorted(f for f in os.listdir(folder) if f.endswith(".tar")):
        path = os.path.join(folder, shard)
        for key, parts in read_shard(path, errors):
            where = f"sample {key!r}"
            ext = next((e for e in IMAGE_EXTS if e in parts), None)
            if ext is None:
                errors(path, where, "no image (jpg/jpeg/png/webp)")
                continue
            sample_key = _sample_key(parts, key, path, where, errors)
            if sample_key is None:
                continue
            try:
                image_bytes({"bytes": parts[ext]}, f"{path}: {where}")  # its first bytes say it is an image
            except ManifestError as e:
                errors(path, where, str(e).split(": ", 2)[-1])
                continue
            text = _caption(parts, sample_key, coca, path, where, errors)
            if not text:
                continue
            digest = hashlib.sha256(parts[ext]).hexdigest()[:24]
            if digest not in names:
                names[digest] = export.add(f"cc3m-{digest}", {"bytes": parts[ext]}, f"{path}: {where}")
            split = "val" if sample_key in val else "train"
            if split == "val":
                seen_val.add(sample_key)
            caps.append(
                {"image": names[digest], "caption": text, "split": split, "record_id": f"cc3m-train/{sample_key}"}
            )
    return caps, seen_val, names


def _write(out, caps, kinds, seed, caption, n_images, images_out, export, errors) -> BuildReport:
    from ..negatives import build_training

    rows, missing = build_training(caps, kinds.split(","), seed)
    counts = {s: sum(r["split"] == s for r in rows) for s in ("train", "val")}
    counts["records_without_any_negative"] = len(caps) - len(rows)
    for kind in kinds.split(","):
        counts[f"valid_{kind}"] = len(caps) - sum(1 for _, k, _ in missing if k == kind)
    report = BuildReport(len(rows), len({r["image"] for r in rows}), counts, errors.skipped)
    report.notes.append(f"{n_images} images written to {images_out}: pass it as --image-root")
    export.finish()  # the images first: a manifest never names images that are not there
    try:
        return write_records(out, rows, "training", "cc3m-train", report, {"negatives": kinds, "seed": seed,
                                                                             "caption": caption})  # fmt: skip
    except BaseException:
        export.withdraw()
        raise


BENCHMARK = Benchmark(
    name="cc3m-train",
    title=_TSV.title,
    kind="training",
    build=build,
    scoring=None,
    options={
        "caption": "coca (FSC-CLIP's CoCa captions, default) or alt (the CC3M alt-texts)",
        "images_out": "a new folder the shards' images are written to (default: cc3m-100k-images beside --out)",
        "val_keys": "text file of the sample keys of the validation partition (one per line)",
        "kinds": "negative kinds (default swap-obj,swap-att,shuffle-bigram; add wordnet with nltk)",
        "seed": "seed of the negatives (default 0)",
    },
)
