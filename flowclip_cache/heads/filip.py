"""FILIP-style late interaction (Yao et al., ICLR 2022) as a head over cached features:
each valid caption token takes its best-matching patch, each patch its best-matching
valid token, and the score is the mean of the two directions' averages:

    q_l = norm(A h_l),  p'_j = norm(B p_j)
    s = 1/2 [ mean_{l valid} max_j q_l . p'_j  +  mean_j max_{l valid} q_l . p'_j ]

A and B (token and patch maps) start as identities. FILIP is a pretraining recipe, not a
head with a paper row here: it trains with HNB by default (CIMR 0)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import LearnedMapsHead, masked_token_mean, token_shares

NEG = -1e4  # below any cosine: masks padding out of a max


def late_interaction(P, H, mask, A, B, paired: bool = False) -> torch.Tensor:
    """P [I,N,d], H [T,L,d], mask [T,L] -> [I,T] (paired: P [T,N,d] -> [T])."""
    q = F.normalize(H @ A.T, dim=-1)
    p = F.normalize(P @ B.T, dim=-1)
    sim = torch.einsum("tld,tnd->tln", q, p)[None] if paired else torch.einsum("tld,ind->itln", q, p)
    t2i = masked_token_mean(sim.max(-1).values, mask[None])  # each token's best patch
    i2t = sim.masked_fill(~mask[None, :, :, None], NEG).max(-2).values.mean(-1)  # each patch's best valid token
    out = 0.5 * (t2i + i2t)
    return out[0] if paired else out


class FilipHead(LearnedMapsHead):
    kind = "filip"
    title = "FILIP-style late interaction: token-wise max over patches and back, learned token/patch maps"

    def pair_scores(self, P, H, mask, paired=False):
        return late_interaction(P, H, mask, self.A, self.B, paired)

    def pair_bytes(self, L: int, N: int, d: int) -> int:
        return 4 * 4 * L * N

    def token_maps(self, P, H, mask):
        """Each token's similarity to every patch; its share is the token-to-image half
        (half its best patch's similarity over the valid tokens; the image-to-token half
        belongs to patches, not tokens)."""
        q, p = F.normalize(H @ self.A.T, dim=-1), F.normalize(P @ self.B.T, dim=-1)
        sim = torch.einsum("tld,nd->tln", q, p)
        return {"similarity": sim}, token_shares(0.5 * sim.max(-1).values, mask)
