"""FSC-CLIP's local score (Oh et al., EMNLP 2024) as a head, following the released code:
ytaek-oh/fsc-clip, src/training/losses/loss.py, `Local_HNLoss.get_per_token_visual_patches`
and `Local_HNLoss.get_aggregated_local_score`, with its defaults (sim_normalizer
"minmax", sim_sparsify False), and the token mask of src/open_clip/model.py
`CLIP.encode_text` (every non-pad token but the start token; the end token is kept):

    q_l = A h_l,  p_j = B p_j                                  states, not normalised
    m_lj = q_l . p_j                                            (detached in training, as released)
    w_lj = (m_lj - min_j m_lj) / (max_j - min_j),  w_l /= sum_j w_lj
    e_l  = norm(sum_j w_lj p_j)                                 patches pooled per token
    s    = logsumexp over valid l (but the first) of  logit_scale * e_l . norm(q_l)

A and B start as identities (the released code has none: its states are the encoder's
own); logit_scale is CLIP's, 100 (FSC-CLIP fine-tunes from OpenAI CLIP, whose scale
open_clip clamps at 100). Trained with HNB (CIMR 0) by default.

Where flowclip differs, and why (docs/method.md, "The head zoo"):
  - the store holds L2-normalised token and patch states (their norms are not kept), so at
    A = B = I the map is built from unit vectors, not from FSC's raw projections;
  - where all of a token's similarities are equal (max = min) the released code divides
    0 by 0 and returns NaN; here the token's weights are uniform (a NaN score would read
    as a missing candidate);
  - the start token is the first valid position of the mask: stores extracted with the
    default token mask (nonpad) give exactly FSC's mask. A `--token-mask content` store
    holds neither the start nor the end token's state (FSC keeps the end token), so the
    released mask cannot be formed from it: such a store is refused (store_token_masks).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import LearnedMapsHead

LOGIT_SCALE = 100.0


def alignment_weights(m: torch.Tensor) -> torch.Tensor:
    """FSC's minmax weights over the last (patch) axis, summing to one; uniform where all
    similarities are equal (the released code's 0/0)."""
    lo, hi = m.min(-1, keepdim=True).values, m.max(-1, keepdim=True).values
    flat = hi == lo
    w = torch.where(flat, torch.ones_like(m), (m - lo) / torch.where(flat, torch.ones_like(hi), hi - lo))
    return w / w.sum(-1, keepdim=True)


def fsc_token_mask(mask: torch.Tensor) -> torch.Tensor:
    """The valid tokens without the first (the start token under the nonpad mask)."""
    first = mask & (mask.long().cumsum(-1) == 1)
    return mask & ~first


def token_logits(P, H, mask, A, B, paired: bool = False, detach: bool = False) -> torch.Tensor:
    """logit_scale * e_l . norm(q_l): [I,T,L] (paired: P [T,N,d] -> [T,L]). detach: the
    weights pass no gradient (training, as the released loss's `.detach()`)."""
    q = H @ A.T
    p = P @ B.T
    m = torch.einsum("tld,tnd->tln", q, p) if paired else torch.einsum("tld,ind->itln", q, p)
    w = alignment_weights(m.detach() if detach else m)
    e = torch.einsum("tln,tnd->tld", w, p) if paired else torch.einsum("itln,ind->itld", w, p)
    return LOGIT_SCALE * (F.normalize(e, dim=-1) * F.normalize(q, dim=-1)).sum(-1)


def local_score(P, H, mask, A, B, paired: bool = False, detach: bool = False) -> torch.Tensor:
    """P [I,N,d], H [T,L,d], mask [T,L] -> [I,T] (paired: P [T,N,d] -> [T])."""
    c = token_logits(P, H, mask, A, B, paired, detach)
    keep = fsc_token_mask(mask)
    return torch.logsumexp(c.masked_fill(~keep, float("-inf")), dim=-1)


class FscLocalHead(LearnedMapsHead):
    kind = "fsc-local"
    store_token_masks = ("nonpad",)  # the released mask: every non-pad token but the start
    title = "FSC-CLIP's local score: minmax token-patch alignment, logsumexp over tokens (as released)"

    def pair_scores(self, P, H, mask, paired=False):
        return local_score(P, H, mask, self.A, self.B, paired, detach=self.training)

    def pair_bytes(self, L: int, N: int, d: int) -> int:
        return 4 * (4 * L * N + 3 * L * d)

    def token_maps(self, P, H, mask):
        """Each token's alignment weights over the patches (summing to one) and its share
        of the score: softmax over the scored tokens times the score (they sum to it)."""
        q, p = H @ self.A.T, P @ self.B.T
        w = alignment_weights(torch.einsum("tld,nd->tln", q, p))
        c = token_logits(P[None], H, mask, self.A, self.B)[0]
        keep = fsc_token_mask(mask)
        c = c.masked_fill(~keep, float("-inf"))
        s = torch.logsumexp(c, dim=-1, keepdim=True)
        return {"alignment": w}, torch.softmax(c, -1).nan_to_num(0.0) * s
