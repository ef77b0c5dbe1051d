"""A pair's score as a function of the pair alone, whatever else a call holds.

A matrix product's rows, and a reduction's outputs, can come out in other bits when the
call's shapes change: a BLAS picks another kernel for a few rows than for many (MKL: a
one-row product differs from the same row among sixteen), and a sum over a caption's
tokens padded to another length associates in another order. So every score flowclip
computes goes through fixed shapes, as extract's forwards do (features.py):

- matched pairs (matched_scores): grouped by their caption's own token count, scored in
  blocks of exactly PAIR_BLOCK pairs (the last block filled with copies of a pair in it);
- all pairs (all_pair_scores): captions grouped by token count, in blocks of exactly
  TEXT_BLOCK captions, against images in blocks of exactly IMAGE_BLOCK (retrieval hands it
  captions in order of their token count, so its blocks are full).

Every reduction a pair meets then has the same shape wherever the pair is scored. Matrix
products are another matter: a BLAS may sum an entry in another order for another shape,
position or CPU, so both gateways score under exact.exact_products(), where every product's
entry is exact before it is rounded once (exact.py). A pair's bits then depend on the pair
alone, at any position of a block (tests/test_pair_alone.py, also under MKL's AVX2 and
SSE4.2 code paths, the ones it takes on AMD CPUs)."""

from __future__ import annotations

import torch

from .base import Head
from .exact import exact_products

PAIR_BLOCK = 32  # matched pairs per call of a head's score_matched
TEXT_BLOCK = 64  # captions per all-pairs call
IMAGE_BLOCK = 128  # images per all-pairs call (each image's and caption's own projections are
# computed once, in blocks of these sizes: heads' image_parts and caption_parts)


def _lengths(mask: torch.Tensor | None, n: int, device) -> torch.Tensor:
    """Each caption's own token count (its valid tokens come first), or 0 for every caption
    of a head that reads no tokens."""
    if mask is None:
        return torch.zeros(n, dtype=torch.long, device=device)
    return mask.sum(1)


def _groups(lengths: torch.Tensor, block: int):
    """(token count, its indices padded to whole blocks with copies of the last, how many
    are real) per token count, in increasing count."""
    for ell in torch.unique(lengths).tolist():
        idx = torch.nonzero(lengths == ell).flatten()
        pad = (-len(idx)) % block
        if pad:
            idx = torch.cat([idx, idx[-1:].expand(pad)])
        yield max(int(ell), 1), idx, len(idx) - pad


def _take(x, idx, ell=None):
    if x is None:
        return None
    x = x[idx]
    return x if ell is None else x[:, :ell].contiguous()


def _image_parts(head, v, P, name: str = "image_parts") -> tuple:
    """head.<name> (image_parts, or matched_image_parts) of every image, in blocks of exactly
    IMAGE_BLOCK (the last filled with copies): [I, ...] each."""
    parts = getattr(type(head), name)
    if parts is Head.image_parts or (parts is Head.matched_image_parts and type(head).image_parts is Head.image_parts):
        return v, P  # the features themselves: nothing to compute
    I = len(v)
    rows = torch.arange(I, device=v.device)
    pad = (-I) % IMAGE_BLOCK
    rows = torch.cat([rows, rows[-1:].expand(pad)]) if pad else rows
    blocks = [getattr(head, name)(v[r], _take(P, r)) for r in rows.split(IMAGE_BLOCK)]
    return tuple(None if x[0] is None else torch.cat(x)[:I] for x in zip(*blocks))


def matched_scores(head, v, P, t, H, mask, image_of: torch.Tensor | None = None) -> torch.Tensor:
    """head.score_matched over any number of pairs (row i of t, H, mask with image
    image_of[i] of v, P; row i's own image without image_of): [n], each pair's score the
    bits it has alone. What pairs share of an image (head.matched_image_parts) is computed once."""
    with exact_products():
        return _matched_scores(head.scores_as(), v, P, t, H, mask, image_of)


def _matched_scores(head, v, P, t, H, mask, image_of) -> torch.Tensor:
    n = len(t)
    parts = _image_parts(head, v, P, "matched_image_parts")
    if image_of is None:
        image_of = torch.arange(n, device=t.device)
    out = torch.empty(n, dtype=torch.float32, device=t.device)
    tok = mask is not None
    for ell, idx, real in _groups(_lengths(mask, n, t.device), PAIR_BLOCK):
        for b in range(0, len(idx), PAIR_BLOCK):
            k = idx[b : b + PAIR_BLOCK]
            own = tuple(_take(x, image_of[k]) for x in parts)
            s = head.score_matched_parts(
                own, t[k], _take(H, k, ell if tok else None), _take(mask, k, ell if tok else None)
            )
            keep = min(PAIR_BLOCK, real - b)
            if keep > 0:
                out[k[:keep]] = s[:keep].float()
    return out


def all_pair_scores(head, v, P, t, H, mask) -> torch.Tensor:
    """head(v, P, t, H, mask) over every image x caption: [I, T], each pair's score the
    bits it has in a gallery of that one image and that one caption. What a head computes
    once per image (image_parts) and once per caption (caption_parts) is computed once,
    in blocks of a fixed size."""
    with exact_products():
        return _all_pair_scores(head.scores_as(), v, P, t, H, mask)


def _all_pair_scores(head, v, P, t, H, mask) -> torch.Tensor:
    I, T = len(v), len(t)
    out = torch.empty(I, T, dtype=torch.float32, device=v.device)
    pad = (-I) % IMAGE_BLOCK
    rows = torch.arange(I, device=v.device)
    rows = torch.cat([rows, rows[-1:].expand(pad)]) if pad else rows
    images = _image_parts(head, v, P)
    tok = mask is not None
    for ell, idx, real in _groups(_lengths(mask, T, v.device), TEXT_BLOCK):
        for b in range(0, len(idx), TEXT_BLOCK):
            k = idx[b : b + TEXT_BLOCK]
            keep = min(TEXT_BLOCK, real - b)
            if keep <= 0:
                continue
            captions = head.caption_parts(t[k], _take(H, k, ell if tok else None), _take(mask, k, ell if tok else None))
            for i0 in range(0, len(rows), IMAGE_BLOCK):
                r = rows[i0 : i0 + IMAGE_BLOCK]
                s = head.score_from_parts(tuple(_take(x, r) for x in images), captions).float()
                n_r = min(IMAGE_BLOCK, I - i0)
                out[r[:n_r, None], k[None, :keep]] = s[:n_r, :keep]
    return out
