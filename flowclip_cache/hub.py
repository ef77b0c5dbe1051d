"""hf:OWNER/NAME (or open_clip's hf-hub:OWNER/NAME): a published head (sharing/publish.py)
as a local run folder, through huggingface_hub's cache (HF_HUB_OFFLINE honoured). Only the published files are fetched:
never code, never pickles; the folder is then checked as any stranger's run folder."""

from __future__ import annotations

import os

from .errors import FlowclipError

PREFIX = "hf:"
PREFIXES = (PREFIX, "hf-hub:")  # flowclip's, and open_clip's spelling of the same thing
FILES = ("head.safetensors", "config.json", "DONE", "README.md")  # all a published folder holds, and the marker


def is_hub_spec(spec: str) -> bool:
    return spec.startswith(PREFIXES)


def _repo(spec: str) -> str:
    """OWNER/NAME[@REVISION] of an hf: or hf-hub: name."""
    return spec.split(":", 1)[1]


def hub_folder(spec: str, files: tuple[str, ...] = FILES) -> str:
    """hf:OWNER/NAME[@REVISION] -> the local snapshot folder (downloaded, or from the cache
    when HF_HUB_OFFLINE=1). Only `files` are fetched (a published head's: never code, never
    pickles; an open_clip model's config and safetensors weights)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError, RepositoryNotFoundError

    repo, _, revision = _repo(spec).partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise FlowclipError(f"{spec}: expected hf:OWNER/NAME (or hf:OWNER/NAME@REVISION)")
    try:
        return snapshot_download(repo, revision=revision or None, allow_patterns=list(files))
    except LocalEntryNotFoundError:
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0")
        why = "HF_HUB_OFFLINE is set and it is not in the local cache" if offline else "it could not be downloaded"
        raise FlowclipError(f"{spec}: {why} (cache: {_cache_dir()})") from None
    except (RepositoryNotFoundError, HFValidationError) as e:
        raise FlowclipError(f"{spec}: no such model repository ({type(e).__name__})") from None


def _cache_dir() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def run_folder(spec: str) -> str:
    """A run folder, or a published head named hf:OWNER/NAME (its local snapshot)."""
    return hub_folder(spec) if is_hub_spec(spec) else spec
