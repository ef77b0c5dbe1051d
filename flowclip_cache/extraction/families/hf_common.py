"""Hugging Face files (tokenizers, BLIP configs and weights) from a local folder or the
local HF cache; downloaded only where a network is. Files are fingerprinted by content,
so a folder moved elsewhere keeps its stores."""

from __future__ import annotations

import hashlib
import os

from ...errors import FlowclipError, WeightsUnavailable

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
)


def require_transformers(family: str):
    try:
        import transformers

        return transformers
    except ImportError:
        raise FlowclipError(
            f"the {family} family needs Hugging Face transformers: pip install 'flowclip[hf]' "
            f"(or pip install transformers)"
        ) from None


def local_folder(source: str, what: str, patterns: list[str]) -> str:
    """A folder holding `source`'s files: `source` itself when it is a folder, else the HF
    cache's snapshot of the repo `source` (downloaded only when online)."""
    if os.path.isdir(source):
        return os.path.abspath(source)
    from huggingface_hub import snapshot_download

    from .locate import _network_reachable, _offline

    try:
        return snapshot_download(source, local_files_only=True, allow_patterns=patterns)
    except Exception:
        pass
    if _offline() or not _network_reachable():
        raise WeightsUnavailable(
            f"{what} {source!r} is neither a folder nor in the local Hugging Face cache, and cannot be "
            f"downloaded ({'HF_HUB_OFFLINE is set' if _offline() else 'no network'}). Download it where "
            f"there is a network (huggingface-cli download {source}) or pass a local folder."
        )
    try:
        return snapshot_download(source, allow_patterns=patterns)
    except Exception as e:
        raise WeightsUnavailable(f"could not download {what} {source!r}: {e}") from None


def folder_digest(folder: str, names=TOKENIZER_FILES) -> str:
    """sha256 over the named files present in the folder (name and content)."""
    from ...hashing import file_sha256

    h = hashlib.sha256()
    found = [n for n in sorted(names) if os.path.isfile(os.path.join(folder, n))]
    if not found:
        raise FlowclipError(f"{folder}: no tokenizer files ({', '.join(names)})")
    for n in found:
        h.update(f"{n}:{file_sha256(os.path.join(folder, n))}\n".encode())
    return h.hexdigest()


def source_name(source: str) -> str:
    """What the fingerprint calls a source: a repo id as given, a folder as 'local' (its
    content is fingerprinted instead of its path)."""
    return "local" if os.path.isdir(source) else source


def hf_tokenizer(folder: str):
    """A fast tokenizer from local files only; no remote code is ever run."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)


def hf_tokenize(tok, texts: list[str], ctx: int):
    from .base import Tokens

    out = tok(
        texts, return_tensors="pt", max_length=ctx, padding="max_length", truncation=True, return_attention_mask=True
    )
    return Tokens(out["input_ids"], out["attention_mask"].bool())
