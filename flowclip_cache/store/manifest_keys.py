"""From a manifest to the cached features it needs: keys per row, and a clear error
(with the extract command to run) when some are missing."""

from __future__ import annotations

import os
import shlex

import numpy as np

from ..errors import FlowclipError
from ..hashing import caption_key
from ..manifest import Manifest
from .core import CAPTION, IMAGE, FeatureStore


def image_root_key(image_root: str | None) -> str:
    """How the store's path records name an image root: a folder's real path, a URL as given
    (without a trailing '/')."""
    from ..shards import is_url

    if not image_root:
        return ""
    return image_root.rstrip("/") if is_url(image_root) else os.path.realpath(image_root)


def image_keys(store: FeatureStore, manifest: Manifest, image_root: str | None = None) -> list[str | None]:
    """Image key of every image a row names, in image_refs() order: one per row for most
    kinds, a row's images in turn for image candidates and groups (None where extract
    never saw the image)."""
    if "image_key" in manifest.table.column_names:
        return manifest.table.column("image_key").to_pylist()
    index = store.path_index()
    root = image_root_key(image_root) if image_root else None
    out = []
    for ref in manifest.image_refs():
        by_root = index.get((ref.path, ref.crop), {})
        if root is not None:
            out.append(by_root.get(root))
        elif len(set(by_root.values())) <= 1:
            out.append(next(iter(by_root.values()), None))
        else:
            raise FlowclipError(
                f"{manifest.path}: row {ref.row}: image {ref.path!r} was extracted from several image roots "
                f"with different content ({', '.join(sorted(by_root))}); pass --image-root to choose"
            )
    return out


def manifest_keys(
    store: FeatureStore, manifest: Manifest, caption_texts: list[str], image_root: str | None = None
) -> list[str]:
    """The image key of every image reference (image_keys' order), once every image and caption the manifest needs is
    known to be stored (else the error naming what is missing and the extract command):
    the prelude of every reader of a manifest's features."""
    ikeys = image_keys(store, manifest, image_root)
    require_features(store, manifest, ikeys, caption_texts)
    return [k for k in ikeys if k is not None]  # all of them: require_features refused a None


def require_features(
    store: FeatureStore, manifest: Manifest, img_keys: list[str | None], caption_texts: list[str]
) -> None:
    """Raise, naming how many rows lack features, a few of them, and the fix."""
    refs = list(manifest.image_refs())
    known = [k for k in img_keys if k is not None]
    have = dict(zip(known, store.has(IMAGE, known, full=False))) if known else {}
    bad_img = [(r, k) for r, k in zip(refs, img_keys) if k is None or not have.get(k, False)]
    ckeys = [caption_key(t) for t in caption_texts]
    chave = store.has(CAPTION, ckeys, full=False) if ckeys else np.zeros(0, bool)
    bad_cap = [t for t, h in zip(caption_texts, chave) if not h]
    if not bad_img and not bad_cap:
        return
    lines = [f"{manifest.path}: features missing from the store {store.root}:"]
    if bad_img:
        lines.append(
            f"  {len(bad_img)} image rows, e.g. "
            + "; ".join(
                f"row {r.row} {r.path!r} (key {k[:12] + '...' if k else 'never extracted'})" for r, k in bad_img[:3]
            )
        )
    if bad_cap:
        lines.append(f"  {len(set(bad_cap))} captions, e.g. " + "; ".join(repr(t) for t in bad_cap[:3]))
    enc = store.encoder_config
    lines.append(
        "Run: "
        + " ".join(
            shlex.quote(x)
            for x in [
                "flowclip",
                "extract",
                "--store",
                store.root,
                *extract_flags(enc),
                "--manifest",
                manifest.path,
                "--image-root",
                "<image folder>",
            ]
        )
    )
    raise FlowclipError("\n".join(lines))


def extract_flags(enc: dict) -> list[str]:
    """extract's flags that make a store of this encoder configuration (store.json's
    `encoder`) again: the same fingerprint, given the same weights file or tokenizer folder."""
    flags = ["--model", enc["model"], *_weights_args(enc)]
    if enc.get("token_mask", "nonpad") != "nonpad":
        flags += ["--token-mask", enc["token_mask"]]
    if enc.get("patch_readout", "standard") != "standard":
        flags += ["--patch-readout", enc["patch_readout"]]
    if "decode" in enc:
        flags += ["--decode", "gpu" if enc["decode"]["device"] == "cuda" else "cpu"]
    return flags


def _weights_args(enc: dict) -> list[str]:
    """extract's flags that give this store's weights again."""
    w = enc["weights"]
    src = w["source"]
    if src.startswith("open_clip:"):
        return ["--pretrained", src.split(":", 1)[1]]
    if src == "flowclip:synthetic":
        return ["--pretrained", "synthetic"]
    if src.startswith("hf-hub:"):  # the repository's weights (its name is the --model)
        return ["--pretrained", "hf"]
    if src == "random-init":
        return ["--pretrained", "none"] + (["--init-seed", str(w["init_seed"])] if w.get("init_seed") else [])
    return ["--pretrained", "<checkpoint file>"]


def drop_failed_rows(
    store: FeatureStore, manifest: Manifest, image_root: str | None = None
) -> tuple[Manifest, list[dict]]:
    """The manifest without the rows whose image or caption extract recorded as failed
    (failures/: an unreadable image, an empty caption), and those rows as
    [{record, reason}]: scoring goes on without them and says so. Rows missing features
    for any other reason are left for require_features to refuse."""
    import pyarrow as pa

    img_fail: dict[str, tuple] = {}
    cap_fail: dict[str, tuple] = {}
    for _, t in store.read_records("failures", ("kind", "key", "path_or_text", "source", "reason")):
        for kind, key, item, reason in zip(
            *(t.column(c).to_pylist() for c in ("kind", "key", "path_or_text", "reason"))
        ):
            if kind == "image":
                img_fail.setdefault(item, reason)
                if key:
                    img_fail.setdefault(key, reason)
            else:
                cap_fail.setdefault(item, reason)
    if not img_fail and not cap_fail:
        return manifest, []
    keys = image_keys(store, manifest, image_root)
    known = [k for k in keys if k is not None]
    have = dict(zip(known, store.has(IMAGE, known, full=False))) if known else {}
    why: dict[int, str] = {}
    for ref, k in zip(manifest.image_refs(), keys):
        if (k is None or not have.get(k, False)) and (ref.path in img_fail or k in img_fail):
            why[ref.row] = f"image {ref.path!r}: {img_fail.get(ref.path) or img_fail.get(k or '')}"
    texts = [c for c in manifest.caption_refs() if c.row >= 0 and c.text in cap_fail]
    stored = (
        dict(
            zip(
                (caption_key(c.text) for c in texts),
                store.has(CAPTION, [caption_key(c.text) for c in texts], full=False),
            )
        )
        if texts
        else {}
    )
    for c in texts:
        if not stored[caption_key(c.text)]:
            why.setdefault(c.row, f"caption {c.text!r}: {cap_fail[c.text]}")
    if not why:
        return manifest, []
    ids = (
        manifest.table.column("record_id").to_pylist()
        if "record_id" in manifest.table.column_names
        else list(range(len(manifest)))
    )
    keep = pa.array([r not in why for r in range(len(manifest))])
    dropped = [{"record": str(ids[r]), "row": r, "reason": why[r]} for r in sorted(why)]
    return Manifest(manifest.path, manifest.kind, manifest.table.filter(keep), manifest.meta), dropped
