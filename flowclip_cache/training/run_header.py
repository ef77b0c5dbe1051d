"""A head run folder's files read without torch: its config.json, its weights file's header
and length, the hash a published head was published with, and the encoder it was trained
on. Every command that takes a run folder checks these first, so a stranger's folder, a
truncated file or a run of another encoder is refused in one line before torch is
imported (run_folder.load_head then builds the head)."""

from __future__ import annotations

import json
import os

from ..errors import FlowclipError


def read_run_config(run_dir: str, where: str) -> dict:
    """config.json of a run folder, with its head entry and store fingerprint checked."""
    try:
        with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        hp = cfg["head"]
        hp["kind"], hp["dim"]
        if not isinstance(cfg["store_fingerprint"], str) or not isinstance(cfg["train"], dict):
            raise TypeError("store_fingerprint must be a string and train a mapping")
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        what = "nested too deeply to read" if isinstance(e, RecursionError) else f"{type(e).__name__}: {e}"
        raise FlowclipError(f"{where}: config.json is missing or malformed ({what})") from None
    return cfg


def weight_shapes(path: str, where: str) -> dict[str, tuple[int, ...]]:
    """The tensors head.safetensors holds, from its header, the file checked to hold every
    byte the header promises (a truncated or padded file is refused)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, "np") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except (OSError, SafetensorError) as e:
        raise FlowclipError(f"{where}: head.safetensors is unreadable ({e})") from None


def check_published(cfg: dict, path: str, where: str) -> None:
    """A published head's weights are the ones it was published with (the sha256 `flowclip
    publish` recorded in its config): weights changed since are refused, never scored under
    the published name."""
    published = cfg.get("published")
    if published is None:
        return
    want = published.get("head_sha256") if isinstance(published, dict) else None
    if not isinstance(want, str) or len(want) != 64:
        raise FlowclipError(f"{where}: config.json's `published` entry records no head_sha256; refused")
    from ..hashing import file_sha256

    have = file_sha256(path)
    if have != want:
        raise FlowclipError(
            f"{where}: head.safetensors has sha256 {have[:12]}, not the {want[:12]} it was published with "
            f"(its weights changed after publishing); refused"
        )


def check_encoder(cfg: dict, store_meta: dict, where: str, here: str = "this store holds") -> None:
    """The run was trained on this store's encoder (store_meta: store.json's fingerprint and
    encoder); refused otherwise, naming both."""
    from ..store.layout import describe_encoder

    if cfg["store_fingerprint"] == store_meta["fingerprint"]:
        return
    theirs = cfg.get("encoder_description") or str(cfg.get("encoder", "?"))
    raise FlowclipError(
        f"{where}: trained on the encoder {theirs} (store fingerprint {cfg['store_fingerprint'][:12]}), but {here} "
        f"{describe_encoder(store_meta['encoder'])} ({store_meta['fingerprint'][:12]}); refused"
    )


def check_run_files(run_dir: str, where: str, store_meta: dict | None = None) -> dict:
    """Everything about a finished run folder that can be checked without torch; -> its config."""
    cfg = read_run_config(run_dir, where)
    path = os.path.join(run_dir, "head.safetensors")
    weight_shapes(path, where)
    check_published(cfg, path, where)
    if store_meta is not None:
        check_encoder(cfg, store_meta, where)
    return cfg


def run_identity(config: dict) -> dict:
    """Everything that decides a run's weights, as its config.json records it: the resolved
    training settings (every default filled in; max_steps aside, as a larger cap continues
    the same run), the head (kind, width, settings, a plug-in's source sha256), the store's
    fingerprint and the training manifest's sha256."""
    from .train_config import recorded_settings

    train = {k: v for k, v in recorded_settings(config.get("train", {})).items() if k != "max_steps"}
    return {
        "train": train,
        "head": config.get("head"),
        "store_fingerprint": config.get("store_fingerprint"),
        "manifest_sha256": config.get("manifest_sha256"),
    }


def identity_digest(identity: dict) -> str:
    """A short name of an identity (the same settings give the same name)."""
    import hashlib

    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:12]


def identity_changes(old: dict, new: dict) -> list[str]:
    """'key: old -> new' for each setting two identities hold differently (nested keys dotted)."""

    def flat(d, prefix=""):
        out = {}
        for k, v in (d or {}).items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
        return out

    a, b = flat(old), flat(new)
    short = lambda v: f"{v[:12]}…" if isinstance(v, str) and len(v) > 16 else repr(v)  # noqa: E731
    return [f"{k}: {short(a.get(k))} -> {short(b.get(k))}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def check_same_run(old: dict, new: dict, out: str) -> None:
    """A run continued (--resume) or reported as done is the run these settings make:
    refused otherwise, naming each setting that differs and its two values."""
    changes = identity_changes(run_identity(old), run_identity(new))
    if changes:
        raise FlowclipError(
            f"{out} was trained with other settings than these ({'; '.join(changes[:6])}"
            f"{'; ...' if len(changes) > 6 else ''}): a run is never continued or reported under settings it was "
            f"not trained with; give another --out (or --overwrite to replace it)"
        )
