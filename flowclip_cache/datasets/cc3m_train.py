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
once to ``images_out`` (``<key>.<ext>``; pass that folder as ``--image-root``). Members
are read as bytes from the tar; nothing is extracted by the archive's own paths.

The paper's 4,096-record validation partition is not in FSC-CLIP's loader; pass its keys
(``val_keys``: a text file, one sample key per line) to mark those records ``val``.
Older NegCLIP-layout TSVs (``train_neg_clip.tsv`` / ``valid_neg_clip.tsv``) in ``source``
are still read as they are."""

from __future__ import annotations

import json
import os
import re
import tarfile

from ..errors import ManifestError
from ._hf import MAX_IMAGE_BYTES
from ._negclip import training_benchmark
from .base import PLAIN_ID, Benchmark, BuildReport, RowErrors, read_text, write_records

_TSV = training_benchmark("cc3m-train", "CC3M-100K (training)", "")
IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")
_MEMBER = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # webdataset's key / extension split


def _member_bytes(tf: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """A regular member's bytes (the callers checked isfile(), so extractfile gives a reader)."""
    f = tf.extractfile(member)
    if f is None:
        raise tarfile.TarError(f"{member.name}: not a regular file")
    return f.read()


def _write_once(dest: str, data: bytes) -> int:
    """An image written whole (temporary, then rename) unless there already: 1 if written."""
    if os.path.exists(dest):
        return 0
    with open(dest + ".tmp", "wb") as f:
        f.write(data)
    os.replace(dest + ".tmp", dest)
    return 1


def shard_folder(source: str) -> str:
    for cand in (source, os.path.join(source, "train_subset_100K")):
        if os.path.isdir(cand) and any(f.endswith(".tar") for f in os.listdir(cand)):
            return cand
    raise ManifestError(
        f"{source}: no webdataset shards (*.tar) here or in train_subset_100K/ (FSC-CLIP's cc3m-subset-100k layout)"
    )


def coca_captions(source: str, folder: str) -> dict[str, str] | None:
    """key -> CoCa caption, from coca_captions/ or straight from coca_captions.tar.gz."""
    for root in (folder, source, os.path.dirname(folder)):
        d = os.path.join(root, "coca_captions")
        if os.path.isdir(d):
            return {
                f[:-4]: open(os.path.join(d, f), encoding="utf-8").readline().strip()
                for f in os.listdir(d)
                if f.endswith(".txt")
            }
        gz = os.path.join(root, "coca_captions.tar.gz")
        if os.path.isfile(gz):
            out = {}
            with tarfile.open(gz, "r:gz") as tf:
                for m in tf:
                    if m.isfile() and m.name.endswith(".txt"):
                        text = _member_bytes(tf, m).decode("utf-8")
                        out[os.path.basename(m.name)[:-4]] = text.split("\n", 1)[0].strip()
            return out
    return None


def read_shard(path: str, errors: RowErrors):
    """Samples of one shard in file order: (key, {extension: bytes})."""
    samples: dict[str, dict[str, bytes]] = {}
    try:
        with tarfile.open(path, "r:*") as tf:
            for m in tf:
                if not m.isfile():
                    continue
                hit = _MEMBER.match(m.name)
                if not hit:
                    errors(path, f"member {m.name!r}", "not <key>.<extension>")
                    continue
                samples.setdefault(hit.group(1), {})[hit.group(2).lower()] = _member_bytes(tf, m)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ManifestError(f"{path}: unreadable tar shard ({e})") from e
    return samples.items()


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
    from ..negatives import build_training

    folder = shard_folder(source)
    coca = coca_captions(source, folder) if caption == "coca" else None
    if caption == "coca" and coca is None:
        raise ManifestError(
            f"{source}: no coca_captions/ or coca_captions.tar.gz (FSC-CLIP's positives); "
            f"unpack it there or pass --option caption=alt to train on the alt-texts"
        )
    val = set(read_text(val_keys).split()) if val_keys else set()
    images_out = images_out or os.path.join(os.path.dirname(os.path.abspath(out)), "cc3m-100k-images")
    os.makedirs(images_out, exist_ok=True)
    caps, seen_val, written = [], set(), 0
    for shard in sorted(f for f in os.listdir(folder) if f.endswith(".tar")):
        path = os.path.join(folder, shard)
        for key, parts in read_shard(path, errors):
            where = f"sample {key!r}"
            ext = next((e for e in IMAGE_EXTS if e in parts), None)
            if ext is None:
                errors(path, where, "no image (jpg/jpeg/png/webp)")
                continue
            try:
                sample_key = str(json.loads(parts["json"])["key"]) if "json" in parts else os.path.basename(key)
            except (ValueError, KeyError, TypeError):
                errors(path, where, "its .json has no 'key'")
                continue
            if len(parts[ext]) > MAX_IMAGE_BYTES:
                errors(path, where, f"an image over the {MAX_IMAGE_BYTES // 2**20} MiB flowclip writes for one image")
                continue
            if not PLAIN_ID.match(sample_key):  # the key names a file: never a path from the archive
                errors(path, where, f"key {sample_key[:80]!r} is not a plain file name (letters, digits, . _ -)")
                continue
            if coca is not None:
                text = coca.get(sample_key, "")
                if not text:
                    errors(path, where, f"no CoCa caption coca_captions/{sample_key}.txt")
                    continue
            else:
                text = parts.get("txt", b"").decode("utf-8", "replace").strip()
                if not text:
                    errors(path, where, "empty or missing .txt caption")
                    continue
            name = f"{sample_key}.{ext}"
            written += _write_once(os.path.join(images_out, name), parts[ext])
            split = "val" if sample_key in val else "train"
            if split == "val":
                seen_val.add(sample_key)
            caps.append({"image": name, "caption": text, "split": split, "record_id": f"cc3m-train/{sample_key}"})
    rows, missing = build_training(caps, kinds.split(","), int(seed))
    counts = {s: sum(r["split"] == s for r in rows) for s in ("train", "val")}
    counts["records_without_any_negative"] = len(caps) - len(rows)
    for kind in kinds.split(","):
        counts[f"valid_{kind}"] = len(caps) - sum(1 for _, k, _ in missing if k == kind)
    report = BuildReport(len(rows), len({r["image"] for r in rows}), counts, errors.skipped)
    report.notes.append(f"images written to {images_out} ({written} new): pass it as --image-root")
    if val - seen_val:
        report.notes.append(f"{len(val - seen_val)} val_keys are in no shard")
    return write_records(
        out, rows, "training", "cc3m-train", report, {"negatives": kinds, "seed": int(seed), "caption": caption}
    )


BENCHMARK = Benchmark(
    name="cc3m-train",
    title=_TSV.title,
    kind="training",
    build=build,
    scoring=None,
    options={
        "caption": "coca (FSC-CLIP's CoCa captions, default) or alt (the CC3M alt-texts)",
        "images_out": "where the shards' images are written (default: cc3m-100k-images beside --out)",
        "val_keys": "text file of the sample keys of the validation partition (one per line)",
        "kinds": "negative kinds (default swap-obj,swap-att,shuffle-bigram; add wordnet with nltk)",
        "seed": "seed of the negatives (default 0)",
    },
)
