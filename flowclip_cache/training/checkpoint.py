"""Resumable checkpoints that are whole or absent: the one writer of weights and
optimiser state (train-head and pretraining share it).

    <run>/checkpoint.json        names the current checkpoint folder and each file's sha256
    <run>/ckpt-<n>/weights.safetensors   model or head weights ("model.*"), AdamW moments ("opt.<i>.*"),
                                         torch RNG states ("rng.*", adapt)
    <run>/ckpt-<n>/state.json    position, metrics, RNG-free counters

A new checkpoint is written into a new folder and made durable; only then is
checkpoint.json replaced (one atomic rename) to name it, and older folders removed.
A crash at any point leaves checkpoint.json naming a folder that is complete: resume
sees all of the new checkpoint or all of the previous one. Nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from typing import TYPE_CHECKING

from ..errors import FlowclipError
from ..store.backends import fsync_dir, fsync_tree

if TYPE_CHECKING:  # (torch is imported where a tensor is made: reading a run's state needs none)
    import torch

POINTER = "checkpoint.json"


def check_claim(out: str, kind: str, noun: str, resume: bool, overwrite: bool, finished_hint: str = "") -> None:
    """Everything claim_run refuses, checked without changing anything (a command checks
    every --out before torch is imported, so a refusal is its first line)."""
    from .. import outputs

    outputs.require_own(out, kind)
    if os.path.exists(os.path.join(out, "DONE")) and not overwrite and not resume:
        raise FlowclipError(f"{out} holds a finished {noun}; pass --overwrite to replace it" + finished_hint)
    if overwrite and os.path.exists(out):
        outputs.refuse_foreign(out)
    elif exists(out) and not resume:
        raise FlowclipError(f"{out} holds an unfinished {noun}; pass --resume to continue it or --overwrite")


def claim_run(out: str, kind: str, noun: str, resume: bool, overwrite: bool, finished_hint: str = "") -> bool:
    """Make `out` this run's folder (train-head's, adapt's) and say whether the run had
    started: never another command's output, a finished run only with --overwrite (which
    replaces it), an unfinished one only with --resume."""
    from .. import outputs

    check_claim(out, kind, noun, resume, overwrite, finished_hint)
    if overwrite and os.path.exists(out):
        outputs.remove_own(out)  # only what the marker lists; anything else refused, named
    started = exists(out)
    if started and not resume:
        raise FlowclipError(f"{out} holds an unfinished {noun}; pass --resume to continue it or --overwrite")
    os.makedirs(out, exist_ok=True)
    outputs.mark(out, kind)
    return started


def optimizer_tensors(params, opt) -> dict[str, torch.Tensor]:
    import torch

    out = {}
    for i, p in enumerate(params):
        for name, v in (opt.state.get(p, {}) if opt is not None else {}).items():
            out[f"opt.{i}.{name}"] = torch.as_tensor(v).detach().cpu().contiguous()
    return out


def rng_tensors() -> dict[str, torch.Tensor]:
    """torch's RNG states (the CPU's, each initialised CUDA device's): whatever a run draws
    (dropout, say) resumes where it stopped."""
    import torch

    out = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out |= {f"rng.cuda.{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())}
    return out


def restore_rng(tensors: dict[str, torch.Tensor]) -> None:
    import torch

    if "rng.torch" in tensors:
        torch.set_rng_state(tensors["rng.torch"].cpu())
    cuda = sorted((k for k in tensors if k.startswith("rng.cuda.")), key=lambda k: int(k.rsplit(".", 1)[1]))
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors[k].cpu() for k in cuda])


def load_optimizer(params, opt, tensors: dict[str, torch.Tensor]) -> None:
    for i, p in enumerate(params):
        st = {k.split(".", 2)[2]: v for k, v in tensors.items() if k.startswith(f"opt.{i}.")}
        if st:
            if "step" in st:
                st["step"] = st["step"].cpu()  # AdamW keeps its step counter on the CPU
            opt.state[p] = st


def save(run: str, weights: dict[str, torch.Tensor], opt_tensors: dict[str, torch.Tensor], state: dict) -> None:
    from safetensors.torch import save_file

    prev = _pointer(run)
    n = int(prev["dir"].split("-")[1]) + 1 if prev else 0
    folder = os.path.join(run, f"ckpt-{n:08d}")
    shutil.rmtree(folder, ignore_errors=True)  # a crashed earlier attempt at this number
    os.makedirs(folder)
    from .. import outputs

    name = os.path.basename(folder)
    outputs.own(run, name, POINTER, f"{name}/weights.safetensors", f"{name}/state.json")
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in weights.items()} | opt_tensors
    save_file(tensors, os.path.join(folder, "weights.safetensors"))
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump(state, f, indent=1)
    fsync_tree(folder)
    pointer = {
        "dir": os.path.basename(folder),
        "sha256": {f: _sha(os.path.join(folder, f)) for f in ("weights.safetensors", "state.json")},
    }
    tmp = os.path.join(run, POINTER + ".tmp")
    with open(tmp, "w") as f:
        json.dump(pointer, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(run, POINTER))
    fsync_dir(run)
    # in a marked run, only the checkpoint folders its marker lists: never a look-alike of the user's
    mine = outputs.listed(run) if outputs.kind_of(run) else None
    old = [
        n
        for n in os.listdir(run)
        if re.fullmatch(r"ckpt-\d{8}", n) and n != pointer["dir"] and (mine is None or n in mine)
    ]
    for name in old:  # older checkpoints, now unreferenced
        shutil.rmtree(os.path.join(run, name), ignore_errors=True)
    outputs.disown(run, *old)


def exists(run: str) -> bool:
    return os.path.isfile(os.path.join(run, POINTER))


def load(run: str, device: str = "cpu") -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict]:
    """(weights, optimiser and RNG tensors, state) of the current checkpoint, checksums checked."""
    from safetensors.torch import load_file

    p = _pointer(run)
    if p is None:
        raise FlowclipError(f"{run}: no checkpoint to resume from ({POINTER} missing)")
    folder = os.path.join(run, p["dir"])
    for f, sha in p["sha256"].items():
        if not os.path.isfile(os.path.join(folder, f)) or _sha(os.path.join(folder, f)) != sha:
            raise FlowclipError(
                f"{run}: checkpoint file {p['dir']}/{f} is missing or damaged; rerun with --overwrite to start again"
            )
    t = load_file(os.path.join(folder, "weights.safetensors"), device=device)
    weights = {k[6:]: v for k, v in t.items() if k.startswith("model.")}
    opt = {k: v for k, v in t.items() if k.startswith(("opt.", "rng."))}
    return weights, opt, json.load(open(os.path.join(folder, "state.json")))


def read_state(run: str) -> dict:
    """The current checkpoint's state.json (position, metrics, seconds) without the weights."""
    p = _pointer(run)
    if p is None:
        raise FlowclipError(f"{run}: no checkpoint ({POINTER} missing)")
    return json.load(open(os.path.join(run, p["dir"], "state.json")))


def _pointer(run: str) -> dict | None:
    try:
        with open(os.path.join(run, POINTER)) as f:
            p = json.load(f)
        if not isinstance(p, dict) or not isinstance(p.get("dir"), str) or not isinstance(p.get("sha256"), dict):
            raise ValueError("not a checkpoint pointer")
        return p
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise FlowclipError(f"{run}/{POINTER} is damaged ({e}); rerun with --overwrite to start again") from None


def _sha(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
