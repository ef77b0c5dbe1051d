"""A DCSM-style scorer (after Dense Cosine Similarity Maps): the pair's token x patch
cosine map, standardised over its valid entries, read by a small learned network:

    m_lj = h_l . p_j  (valid tokens l, patches j in grid order)
    z_lj = (m_lj - mean) / std          over the pair's valid entries
    s    = mean over valid l of  w2 . relu(W1 z_l + b1) + b2

Each token's row of the map is laid out on the patch grid and average-pooled to 7 x 7
(so the network sees the layout, at any patch count: 49 for B/32, 196 for B/16), then
W1 [hidden, 49] reads it, shared by all tokens. Our reading of the idea at the size of these features, not
DCSM's released network. Trained with HNB (CIMR 0) by default; hidden 64."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import TokenMapHead, masked_token_mean, token_shares

HIDDEN = 64
GRID = 7


def to_grid(z: torch.Tensor) -> torch.Tensor:
    """[..., N] rows on a g x g patch grid (row-major) -> [..., 49], average-pooled to 7 x 7."""
    N = z.shape[-1]
    g = int(round(N**0.5))
    if g * g != N:
        raise ValueError(f"the DCSM head needs a square patch grid, got {N} patches")
    lead = z.shape[:-1]
    pooled = F.adaptive_avg_pool2d(z.reshape(-1, 1, g, g), GRID)
    return pooled.reshape(*lead, GRID * GRID)


def standardise(m: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """m [..., T, L, N] standardised over each pair's valid entries (mask [..., T, L])."""
    mk = mask[..., None].to(m.dtype).expand_as(m)
    n = mk.sum((-1, -2), keepdim=True).clamp_min(1)
    mean = (m * mk).sum((-1, -2), keepdim=True) / n
    var = (((m - mean) * mk) ** 2).sum((-1, -2), keepdim=True) / n
    return (m - mean) / var.clamp_min(1e-12).sqrt()


def dcsm_score(P, H, mask, net: nn.Module, paired: bool = False) -> torch.Tensor:
    """P [I,N,d], H [T,L,d], mask [T,L] -> [I,T] (paired: P [T,N,d] -> [T])."""
    m = torch.einsum("tld,tnd->tln", H, P)[None] if paired else torch.einsum("tld,ind->itln", H, P)
    z = standardise(m, mask[None])
    per_token = net(to_grid(z)).squeeze(-1)  # [I,T,L]
    out = masked_token_mean(per_token, mask[None])
    return out[0] if paired else out


class DcsmHead(TokenMapHead):
    kind = "dcsm"
    title = "DCSM-style: the standardised token x patch cosine map read by a small learned network"

    def __init__(self, dim: int, **_):
        super().__init__(dim)
        g = torch.Generator().manual_seed(0)  # the same start whatever the global RNG holds
        self.net = nn.Sequential(nn.Linear(GRID * GRID, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))
        with torch.no_grad():
            for p in self.net.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / p.shape[-1] ** 0.5 if p.dim() > 1 else 0.0))

    def pair_scores(self, P, H, mask, paired=False):
        return dcsm_score(P, H, mask, self.net, paired)

    def pair_bytes(self, L: int, N: int, d: int) -> int:
        return 4 * L * (3 * N + GRID * GRID + 2 * HIDDEN)

    def token_maps(self, P, H, mask):
        """The standardised cosine map the network reads, and each valid token's share of
        the mean over tokens of its output."""
        z = standardise(torch.einsum("tld,nd->tln", H, P), mask)
        return {"standardised cosine": z}, token_shares(self.net(to_grid(z)).squeeze(-1), mask)
