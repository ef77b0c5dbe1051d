"""A head run folder's files: checkpoints while training, head.safetensors and DONE when
it ends, and loading a finished run for scoring (refusing a malformed one)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import torch

from .. import outputs
from ..errors import FlowclipError
from ..head_specs import builtin_kinds
from ..heads import REGISTRY, Head, available_kinds, build_head, head_class
from . import checkpoint
from .run_header import check_published, read_run_config, weight_shapes


@functools.cache
def git_revision() -> str:
    """The code's revision, asked of git once per process (the code a process runs does not
    change under it)."""
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=os.path.dirname(__file__), timeout=5
            ).stdout.strip()
            or "unknown"
        )
    except Exception:
        return "unknown"


def write_finished_head(out: str, head: Head, done: dict) -> None:
    """A head run folder's last files: head.safetensors (the scored weights), then DONE,
    written last (a finished run). train-head and adapt both end with it."""
    from safetensors.torch import save_file

    weights = {k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}
    outputs.atomic_write(os.path.join(out, "head.safetensors"), lambda p: save_file(weights, p))
    outputs.atomic_write(os.path.join(out, "DONE"), lambda p: open(p, "w").write(json.dumps(done)))


def save_checkpoint(out: str, head: Head, opt, state: dict) -> None:
    checkpoint.save(out, head.state_dict(), checkpoint.optimizer_tensors(list(head.parameters()), opt), state)


def load_checkpoint(out: str, head: Head, opt, device: str) -> dict:
    weights, moments, state = checkpoint.load(out, device)
    head.load_state_dict(weights)
    if opt is not None:
        checkpoint.load_optimizer(list(head.parameters()), opt, moments)
    return state


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def load_head(run_dir: str, device: str = "cpu", warn=_stderr, store_dim: int | None = None) -> tuple[Head, dict]:
    """A trained head and its run config (for flowclip score); a malformed run folder
    is refused naming what is wrong, never scored. A plug-in head must be available
    already (installed, or loaded by --plugin): nothing the folder names is imported.
    store_dim: the dimension of the store the caller scores on, when it has one (_expected_weights)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from ..heads.plugins import check_deferred, check_origin, plugin_hint

    where = f"run folder {run_dir}"
    cfg = read_run_config(run_dir, where)
    hp = cfg["head"]
    kind, dim = hp["kind"], hp["dim"]
    origin = hp.get("plugin")
    if isinstance(origin, dict) and isinstance(kind, str) and kind not in REGISTRY:
        check_deferred(origin, where)  # before any --plugin file is imported
    if not isinstance(kind, str) or (kind not in REGISTRY and kind not in available_kinds()):
        hint = plugin_hint(kind, origin if isinstance(origin, dict) else None, available_kinds())
        raise FlowclipError(f"{where}: {hint}")
    if isinstance(origin, dict):
        check_origin(head_class(kind), origin, where, warn)
    if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
        raise FlowclipError(f"{where}: head dim {dim!r} is not a positive integer")
    hparams = head_class(kind).check_hparams(hp, where)
    path = os.path.join(run_dir, "head.safetensors")
    head, want = _expected_weights(kind, dim, hparams, origin, store_dim)
    _check_header(path, where, kind, {k: tuple(v.shape) for k, v in want.items()})
    check_published(cfg, path, where)
    if head is None:
        head = build_head(kind, dim, **hparams)
    try:
        weights = load_file(path, device=device)
    except (OSError, SafetensorError) as e:
        raise FlowclipError(f"{where}: head.safetensors is unreadable ({e})") from None
    for k, v in weights.items():
        if v.shape != want[k].shape or v.dtype != want[k].dtype:
            raise FlowclipError(
                f"{where}: {k} is {v.dtype}{list(v.shape)}, expected {want[k].dtype}{list(want[k].shape)}"
            )
        if not torch.isfinite(v).all():
            raise FlowclipError(f"{where}: {k} holds NaN or inf")
    head.load_state_dict(weights)
    return head.to(device).eval(), cfg


def _expected_weights(kind: str, dim: int, hparams: dict, origin, store_dim: int | None):
    """(the head, or None, and the state_dict the config describes). A built-in head at the
    caller's store's own dimension is built as it is: its size is a function of that trusted
    dimension alone (built-in heads take no size settings). Otherwise shapes only, on the meta
    device: a config naming a huge head allocates nothing (the meta build imports torch's
    compiler stack, which is why it is not the rule)."""
    if store_dim == dim and origin is None and kind in builtin_kinds():
        head = build_head(kind, dim, **hparams)
        return head, head.state_dict()
    with torch.device("meta"):
        return None, build_head(kind, dim, **hparams).state_dict()


def _check_header(path: str, where: str, kind: str, want: dict[str, tuple]) -> None:
    """The weights file's names and shapes, read from its header alone, against the head the
    config describes: a run folder whose config.json claims another size (a stranger's, say)
    is refused before a head of that size is built."""
    have = weight_shapes(path, where)
    if set(have) != set(want):
        raise FlowclipError(f"{where}: head.safetensors holds {sorted(have)}, a {kind} head needs {sorted(want)}")
    for k, shape in have.items():
        if shape != want[k]:
            raise FlowclipError(
                f"{where}: {k} is {list(shape)} in head.safetensors, but config.json describes {list(want[k])}; refused"
            )
