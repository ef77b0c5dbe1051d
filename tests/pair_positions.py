"""A pair at every position of a block scores the bits it has alone, and the release's ties
tie, for every scorer (tests/test_pair_alone.py imports these; run as a script, it checks
them in a process whose BLAS takes another code path: `MKL_ENABLE_INSTRUCTIONS=AVX2 python
tests/pair_positions.py PLUGIN.py` exits 1 and names every failure)."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from flowclip_cache.heads import available_kinds, build_head
from flowclip_cache.heads.fixed_shapes import IMAGE_BLOCK, PAIR_BLOCK, TEXT_BLOCK, all_pair_scores, matched_scores

N = 49
DIMS = (16, 512)  # the widths checked: kernels differ with them (64 for all pairs, for time)


def _unit(g, *shape):
    return F.normalize(torch.randn(*shape, generator=g), dim=-1).to(DEVICE)


def _random(g, n: int, ell: int, D: int):
    """n random pairs of unit features: v, P, t, H (ell tokens each)."""
    return _unit(g, n, D), _unit(g, n, N, D), _unit(g, n, D), _unit(g, n, ell, D)


DEVICE = "cpu"  # tests/test_cuda.py sets "cuda"


def _head(kind: str, D: int):
    torch.manual_seed(1)
    head = build_head(kind, D).to(DEVICE)
    with torch.no_grad():
        for p in head.parameters():  # away from the identity start, so every term counts
            p.add_(0.05 * torch.randn_like(p))
    return head


def _pair_inputs(head, v, P, t, H, mask):
    tok = head.uses_tokens
    return v, P if tok else None, t, H if tok else None, mask if tok else None


def matched_positions(kind: str, D: int, ell: int = 13, seed: int = 0) -> list[str]:
    """One pair at each of the PAIR_BLOCK positions of its block, among random pairs of its
    token count, against the pair alone."""
    head, g = _head(kind, D), torch.Generator().manual_seed(seed)
    v, P, t, H = _random(g, PAIR_BLOCK, ell, D)
    mask = torch.ones(PAIR_BLOCK, ell, dtype=torch.bool, device=DEVICE)
    bad = []
    with torch.no_grad():
        alone = matched_scores(head, *_pair_inputs(head, v[:1], P[:1], t[:1], H[:1], mask[:1]))[0]
        for k in range(PAIR_BLOCK):
            order = torch.arange(PAIR_BLOCK, device=DEVICE)
            order[0], order[k] = k, 0  # the pair at position k, its neighbours random
            got = matched_scores(head, *_pair_inputs(head, v[order], P[order], t[order], H[order], mask[order]))
            if not torch.equal(got[k], alone):
                bad.append(f"{kind}, d={D}: matched pair at position {k}: {got[k].item()!r} alone {alone.item()!r}")
    return bad


def all_pair_positions(kind: str, D: int = 64, ell: int = 11, seed: int = 0) -> list[str]:
    """One image at every third position of an image block and one caption at every fourth
    of a text block, among random others of the caption's token count: every such entry of
    the grid is the pair's bits alone."""
    head, g = _head(kind, D), torch.Generator().manual_seed(seed)
    I, T = IMAGE_BLOCK, TEXT_BLOCK
    (v, P, _, _), (_, _, t, H) = _random(g, I, ell, D), _random(g, T, ell, D)
    mask = torch.ones(T, ell, dtype=torch.bool, device=DEVICE)
    rows, cols = torch.arange(0, I, 3, device=DEVICE), torch.arange(0, T, 4, device=DEVICE)
    v[rows], P[rows], t[cols], H[cols] = v[0].clone(), P[0].clone(), t[0].clone(), H[0].clone()
    with torch.no_grad():
        grid = all_pair_scores(head, *_pair_inputs(head, v, P, t, H, mask))[rows][:, cols]
        alone = all_pair_scores(head, *_pair_inputs(head, v[:1], P[:1], t[:1], H[:1], mask[:1]))[0, 0]
    n_bad = int((grid != alone).sum())
    return [f"{kind}, d={D}: {n_bad} of {grid.numel()} grid positions differ from the pair alone"] if n_bad else []


def planted_ties(D: int, seed: int = 0) -> list[str]:
    """FILIP's image-to-text score takes each patch's best token, so a caption with one of
    its tokens repeated ties the caption in the release; with the two captions at every
    position of their blocks, every engine ties them too."""
    head, g = build_head("filip-score-i2t", D).to(DEVICE), torch.Generator().manual_seed(seed)
    ell = 9
    v, P, t, H = _random(g, PAIR_BLOCK, ell + 1, D)
    H[:, ell] = H[:, 0]
    short = (torch.arange(ell + 1, device=DEVICE)[None] < ell).expand(PAIR_BLOCK, -1)  # no repeated token
    long = torch.ones(PAIR_BLOCK, ell + 1, dtype=torch.bool, device=DEVICE)
    bad = []
    with torch.no_grad():
        for k in range(PAIR_BLOCK):
            order = torch.arange(PAIR_BLOCK, device=DEVICE)
            order[0], order[k] = k, 0
            a = matched_scores(head, v[order], P[order], t[order], H[order, :ell], short[:, :ell])
            b = matched_scores(head, v[order], P[order], t[order], H[order], long)
            if not torch.equal(a[k], b[k]):
                bad.append(f"planted tie, d={D}, seed {seed}, matched, position {k}: {a[k].item()!r}, {b[k].item()!r}")
        padded = torch.cat([H[:, :ell], torch.zeros(PAIR_BLOCK, 1, D, device=DEVICE)], 1)  # the short captions
        grid = all_pair_scores(head, v, P, torch.cat([t, t]), torch.cat([padded, H]), torch.cat([short, long]))
    n_bad = int((grid[:, :PAIR_BLOCK] != grid[:, PAIR_BLOCK:]).sum())
    what = f"planted tie, d={D}, seed {seed}, all pairs: {n_bad} of {PAIR_BLOCK**2} pairs untied"
    return bad + ([what] if n_bad else [])


def every_failure(kinds) -> list[str]:
    bad = [f for D in DIMS for seed in range(3) for f in planted_ties(D, seed)]
    for kind in kinds:
        bad += [f for D in DIMS for f in matched_positions(kind, D)] + all_pair_positions(kind)
    return bad


if __name__ == "__main__":
    import flowclip_cache as fc

    for plugin in sys.argv[1:]:
        fc.load_plugin(plugin)
    failures = every_failure(available_kinds())
    print("\n".join(failures) or "every pair at every position: its bits alone")
    sys.exit(1 if failures else 0)
