"""FSC-CLIP's local score (Oh et al., EMNLP 2024) as a head. FSC-CLIP's local hard-negative
loss scores a caption by SPARC-style token-patch alignment (our reading of both papers):

    q_l = norm(A h_l),  p'_j = norm(B p_j),  m_lj = q_l . p'_j
    w_lj = (m_lj - min_j m_lj) / (max_j m_lj - min_j m_lj)      normalised over patches
    w_lj = 0 where w_lj < 1/N, then w_l = w_l / sum_j w_lj       small weights zeroed
    e_l  = norm(sum_j w_lj p'_j)                                 patches pooled per token
    s    = mean over valid l of  e_l . q_l                        pooled over tokens

A and B start as identities; trained with HNB (CIMR 0) by default."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import LearnedMapsHead, masked_token_mean, token_shares


def alignment_weights(m: torch.Tensor) -> torch.Tensor:
    """SPARC-style sparse weights over the last (patch) axis: min-max scaled, below 1/N
    zeroed, summing to one."""
    lo, hi = m.min(-1, keepdim=True).values, m.max(-1, keepdim=True).values
    w = (m - lo) / (hi - lo).clamp_min(1e-8)
    w = torch.where(w < 1.0 / m.shape[-1], torch.zeros_like(w), w)
    return w / w.sum(-1, keepdim=True).clamp_min(1e-8)


def local_score(P, H, mask, A, B, paired: bool = False) -> torch.Tensor:
    """P [I,N,d], H [T,L,d], mask [T,L] -> [I,T] (paired: P [T,N,d] -> [T])."""
    q = F.normalize(H @ A.T, dim=-1)
    p = F.normalize(P @ B.T, dim=-1)
    m = torch.einsum("tld,tnd->tln", q, p)[None] if paired else torch.einsum("tld,ind->itln", q, p)
    w = alignment_weights(m)
    if paired:
        e = F.normalize(torch.einsum("itln,tnd->itld", w, p), dim=-1)
    else:
        e = F.normalize(torch.einsum("itln,ind->itld", w, p), dim=-1)
    c = (e * q[None]).sum(-1)                                            # [I,T,L]
    out = masked_token_mean(c, mask[None])
    return out[0] if paired else out


class FscLocalHead(LearnedMapsHead):
    kind = "fsc-local"
    title = "FSC-CLIP's local score: SPARC-style token-patch alignment (sparse weights), pooled over tokens"

    def pair_scores(self, P, H, mask, paired=False):
        return local_score(P, H, mask, self.A, self.B, paired)

    def pair_bytes(self, L: int, N: int, d: int) -> int:
        return 4 * (4 * L * N + 2 * L * d)

    def token_maps(self, P, H, mask):
        """Each token's sparse alignment weights over the patches (summing to one) and its
        share c_l / (valid tokens) of the local score."""
        q, p = F.normalize(H @ self.A.T, dim=-1), F.normalize(P @ self.B.T, dim=-1)
        sim = torch.einsum("tld,nd->tln", q, p)
        w = alignment_weights(sim)
        c = (F.normalize(w @ p, dim=-1) * q).sum(-1)
        return {"alignment": w}, token_shares(c, mask)
