"""The head contract, checked on random features before a head trains (docs/plugins.md):
a head that breaks a rule fails with one line naming the head and the rule, not
minutes later inside a training step or, worse, with wrong numbers."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..errors import FlowclipError
from .base import Head

# a small batch: 3 images with a 2 x 2 patch grid, 4 captions of up to 6 tokens (three padded)
IMAGES, PATCHES, CAPTIONS, TOKENS = 3, 4, 4, 6


def _inputs(dim: int, n_images: int, n_captions: int):
    g = torch.Generator().manual_seed(0)
    unit = lambda *shape: nn.functional.normalize(torch.randn(*shape, dim, generator=g), dim=-1)  # noqa: E731
    lengths = torch.tensor([TOKENS, TOKENS - 2, 3, TOKENS - 1])[:n_captions]
    mask = torch.arange(TOKENS)[None, :] < lengths[:, None]
    H = unit(n_captions, TOKENS) * mask[..., None]
    return unit(n_images), unit(n_images, PATCHES), unit(n_captions), H, mask


def _unregistered(head: nn.Module) -> list[str]:
    """Attributes holding tensors or modules that nn.Module does not track (not trained,
    not saved, not moved to the device)."""
    bad = []
    internal = set(vars(nn.Module()))  # _parameters, _buffers, _modules, hooks...
    for name, value in vars(head).items():
        if name in internal:
            continue
        if isinstance(value, torch.Tensor):
            bad.append(f"{name} is a plain tensor (make it an nn.Parameter, or register_buffer it)")
        elif isinstance(value, (list, tuple, dict)):
            items = value.values() if isinstance(value, dict) else value
            if any(isinstance(x, (torch.Tensor, nn.Module)) for x in items):
                kind = type(value).__name__
                bad.append(f"{name} is a {kind} of tensors or modules (use nn.ModuleList/ParameterList)")
    return bad


def check_head(make: Callable[[], Head], label: str, trainable: bool = True) -> None:
    """Build the head and score random unit features with it: each broken rule raises one
    FlowclipError "head LABEL: RULE". The caller's random state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        _check(make, f"head {label}", trainable)


def _check(make, where: str, trainable: bool) -> None:
    fail = lambda rule: FlowclipError(f"{where}: {rule}")  # noqa: E731
    try:
        head = make()
    except FlowclipError:
        raise
    except Exception as e:
        raise fail(f"building it failed ({type(e).__name__}: {e})") from None
    bad = _unregistered(head)
    if bad:
        raise fail(bad[0])
    params = [p for p in head.parameters() if p.requires_grad]
    if trainable and not params:
        raise fail("it has no trainable parameters (nn.Parameter attributes): nothing would train")
    head = head.float().train()
    v, P, t, H, mask = _inputs(head.dim, IMAGES, CAPTIONS)
    if not head.uses_tokens:
        P = H = mask = None
    try:
        out = head.forward_terms(v, P, t, H, mask)
    except Exception as e:
        hint = "" if head.uses_tokens else " (it gets no patches or tokens unless uses_tokens = True)"
        raise fail(f"scoring random features failed ({type(e).__name__}: {e}){hint}") from None
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        raise fail("forward_terms must return (scores [images, captions], a dict of named parts)")
    S, parts = out
    if not isinstance(S, torch.Tensor) or not S.is_floating_point() or tuple(S.shape) != (IMAGES, CAPTIONS):
        got = list(S.shape) if isinstance(S, torch.Tensor) else type(S).__name__
        raise fail(f"scores must be a float tensor [images, captions] = [{IMAGES}, {CAPTIONS}], got {got}")
    if not torch.isfinite(S).all():
        raise fail("scores hold NaN or inf on random unit-norm features")
    for name in head.loss_terms:
        term = parts.get(name)
        if not isinstance(term, torch.Tensor) or term.numel() != 1 or not torch.isfinite(term).all():
            raise fail(f"its loss term {name!r} must be among forward_terms' parts as a finite scalar")
    _check_matched(head, fail)
    if trainable:
        total = S.sum() + sum((parts[n].sum() for n in head.loss_terms), S.new_zeros(()))
        if not total.requires_grad:
            raise fail("its scores do not depend on its parameters (are they used, or detached?)")
        total.backward()
        if all(p.grad is None for p in params):
            raise fail("no parameter receives a gradient from its scores")


def _check_matched(head: Head, fail) -> None:
    """score_matched(row i of each input) equals forward's [i, i]."""
    v, P, t, H, mask = _inputs(head.dim, IMAGES, IMAGES)
    if not head.uses_tokens:
        P = H = mask = None
    with torch.no_grad():
        full = head(v, P, t, H, mask)
        try:
            matched = head.score_matched(v, P, t, H, mask)
        except Exception as e:
            raise fail(f"score_matched failed ({type(e).__name__}: {e})") from None
    if not isinstance(matched, torch.Tensor) or tuple(matched.shape) != (IMAGES,):
        got = list(matched.shape) if isinstance(matched, torch.Tensor) else type(matched).__name__
        raise fail(f"score_matched must return one score per row [{IMAGES}], got {got}")
    gap = (matched.float() - full.diagonal().float()).abs().max().item()
    if not gap <= 1e-4 * (1 + full.abs().max().item()):
        raise fail(f"score_matched(row i) must equal forward's [i, i]; they differ by {gap:.3g}")
