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
    _check_other_methods(head, fail)
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


def _call(fail, what: str, fn, *args):
    try:
        return fn(*args)
    except Exception as e:
        raise fail(f"{what} failed on random features ({type(e).__name__}: {e})") from None


def _check_threshold(th, fail) -> None:
    import math

    ok = th is None or (
        isinstance(th, tuple)
        and len(th) == 2
        and isinstance(th[0], (int, float))
        and not isinstance(th[0], bool)
        and math.isfinite(th[0])
        and isinstance(th[1], str)
        and th[1].strip()
    )
    if not ok:
        raise fail(f"decision_threshold must return None or (a finite number, where it comes from), got {th!r}")


def _check_other_methods(head: Head, fail) -> None:
    """Every other method a command may call, run once on random features with the shapes
    docs/plugins.md states, so a bug there stops training in one line rather than
    surfacing as a traceback in score (retrieval, zero-shot) or explain."""
    v, P, t, H, mask = _inputs(head.dim, IMAGES, CAPTIONS)
    with torch.no_grad():
        z = _call(fail, "caption_embedding(t [T, d])", head.caption_embedding, t)
        if z is not None and (not isinstance(z, torch.Tensor) or tuple(z.shape) != (CAPTIONS, head.dim)):
            raise fail(f"caption_embedding must return None or [T, d] = [{CAPTIONS}, {head.dim}]")
        c = _call(fail, "coarse(v [I, d], t [T, d])", head.coarse, v, t)
        if c is not None and (not isinstance(c, torch.Tensor) or tuple(c.shape) != (IMAGES, CAPTIONS)):
            raise fail(f"coarse must return None or [I, T] = [{IMAGES}, {CAPTIONS}]")
        cs = _call(fail, "caption_similarity(a [n, d], b [n, d])", head.caption_similarity, t, t.flip(0))
        if cs is not None and (not isinstance(cs, torch.Tensor) or tuple(cs.shape) != (CAPTIONS,)):
            raise fail(f"caption_similarity must return None or [n] = [{CAPTIONS}]")
        _check_threshold(_call(fail, "decision_threshold()", head.decision_threshold), fail)
        b = _call(fail, "pair_bytes(L, N, d)", head.pair_bytes, TOKENS, PATCHES, head.dim)
        if not isinstance(b, int) or isinstance(b, bool) or b <= 0:
            raise fail("pair_bytes(L, N, d) must return a positive int (bytes of intermediates per pair)")
        if not hasattr(head, "token_evidence") or not head.uses_tokens:
            return
        ev = _call(fail, "token_maps(P [N, d], H [T, L, d], mask [T, L]) (flowclip explain)",
                   head.token_evidence, v[0], P[0], t, H, mask)  # fmt: skip
    maps, contrib = ev.get("maps"), ev.get("contrib")
    if (
        not isinstance(maps, dict)
        or not maps
        or not all(isinstance(m, torch.Tensor) and tuple(m.shape) == (CAPTIONS, TOKENS, PATCHES) for m in maps.values())
    ):
        raise fail(f"token_maps must return ({{name: [T, L, N] = [{CAPTIONS}, {TOKENS}, {PATCHES}]}}, [T, L])")
    if not isinstance(contrib, torch.Tensor) or tuple(contrib.shape) != (CAPTIONS, TOKENS):
        raise fail(f"token_maps' second value must be each token's share [T, L] = [{CAPTIONS}, {TOKENS}]")
    Pg = P[0].detach().clone().requires_grad_(True)
    with torch.enable_grad():
        delta = _call(fail, "token_margin(P [N, d], H, mask, gold, foil)", head.token_margin, Pg, H, mask, 0, 1)
        if not isinstance(delta, torch.Tensor) or delta.numel() != 1 or not delta.requires_grad:
            raise fail("token_margin must return one score difference, differentiable in P (explain's sensitivity)")
