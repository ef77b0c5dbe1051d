"""The compute device a command runs on, checked the same way by every command."""

from __future__ import annotations

import os

from .errors import FlowclipError


def rank_device(device: str) -> str:
    """A CUDA device without an index becomes this process's own (LOCAL_RANK) under torchrun."""
    local = os.environ.get("LOCAL_RANK")
    return f"cuda:{local}" if device == "cuda" and local is not None else device


def resolve_device(name: str, flag: str = "--device") -> str:
    """auto -> cuda when there is one, else cpu; a CUDA device that is not there is an
    error naming the option, never a torch traceback later."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise FlowclipError(f"{flag} {name}: CUDA is not available on this machine (use cpu or auto)")
        index = name.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise FlowclipError(f"{flag} {name}: this machine has {torch.cuda.device_count()} CUDA devices")
        return name
    if name != "cpu":
        raise FlowclipError(f"{flag} {name}: use auto, cpu, cuda or cuda:N")
    return name
