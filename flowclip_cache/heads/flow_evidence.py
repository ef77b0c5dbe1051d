"""The refinement's own contribution, isolated (ours; docs/method.md, "The refinement on its
own"). Flow-CLIP's s_token subtracts the unrefined evidence, E(q~, P) - E(q, P), so it
cannot say whether *refining* the token queries adds binding evidence beyond the encoder's
own token-patch evidence. These two heads add the evidence itself to the calibrated global
score, refined or not, with everything else as Flow-CLIP has it (M, M_tok, tau_p, alpha):

    flow-evidence:            s = v . norm(M t) + alpha mean_l m_l E(qres_l, P)     (M, M_tok, W)
    flow-evidence-unrefined:  s = v . norm(M t) + alpha mean_l m_l E(q_l, P)        (M, M_tok; W = 0, frozen)

At W = 0 the first is the second exactly (qres = q), so a study of the two at matched
training is the refinement's contribution and nothing else. E is ICER's pooled evidence,
tau_p log mean_j exp(q . p_j / tau_p); q_l = norm(M_tok h_l). Neither is a head of the paper."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import masked_token_mean
from .flow import _pooled_evidence, token_scores
from .global_m import GlobalHead, global_scores


def unrefined_evidence(P, H, mask, M_tok, tau_p: float, paired: bool = False) -> torch.Tensor:
    """mean_l m_l E(q_l, P): P [I,N,d], H [T,L,d], mask [T,L] -> [I,T] (paired: P [T,N,d] -> [T])."""
    q = F.normalize(H @ M_tok.T, dim=-1)
    logits = torch.einsum("tld,tnd->tln", q, P) if paired else torch.einsum("tld,ind->itln", q, P)
    return masked_token_mean(_pooled_evidence(logits, tau_p), mask if paired else mask[None])


class FlowEvidenceUnrefinedHead(GlobalHead):
    """Global-M plus the unrefined token-patch evidence E(q, P) (W frozen at 0)."""

    kind = "flow-evidence-unrefined"
    title = "ours: Global-M + alpha mean_l E(q_l, P), the token-patch evidence unrefined (Flow-CLIP's W frozen at 0)"
    uses_tokens = True
    default_cimr = 0.1
    hparam_names = ("alpha", "tau_p")

    def __init__(self, dim: int, alpha: float = 1.0, tau_p: float = 0.05, **_):
        super().__init__(dim)
        self.alpha, self.tau_p = alpha, tau_p
        self.M_tok = nn.Parameter(torch.eye(dim))

    def evidence(self, P, H, mask, paired: bool = False) -> torch.Tensor:
        return unrefined_evidence(P, H, mask, self.M_tok, self.tau_p, paired)

    def forward_terms(self, v, P, t, H, mask):
        evidence = self.evidence(P, H, mask)
        return global_scores(v, t, self.M) + self.alpha * evidence, {"evidence": evidence}

    def score_matched(self, v, P, t, H, mask) -> torch.Tensor:
        return super().score_matched(v, P, t, H, mask) + self.alpha * self.evidence(P, H, mask, paired=True)

    def coarse(self, v, t):
        return global_scores(v, t, self.M)

    def caption_embedding(self, t):
        return None  # the evidence reads the image's patches: a pairwise score

    def pair_bytes(self, L: int, N: int, d: int) -> int:
        return 4 * 3 * L * N


class FlowEvidenceHead(FlowEvidenceUnrefinedHead):
    """Global-M plus the refined token-patch evidence E(q~, P): Flow-CLIP's refinement,
    without its subtraction of E(q, P)."""

    kind = "flow-evidence"
    title = "ours: Global-M + alpha mean_l E(qres_l, P), the token-patch evidence after Flow-CLIP's refinement"

    def __init__(self, dim: int, alpha: float = 1.0, tau_p: float = 0.05, **_):
        super().__init__(dim, alpha, tau_p)
        self.W = nn.Parameter(torch.zeros(dim, dim))

    def evidence(self, P, H, mask, paired: bool = False) -> torch.Tensor:
        # E(qres, P) = [E(qres, P) - E(q, P)] + E(q, P): ICER's s_token (its kernels) plus the unrefined evidence
        change = token_scores(P, H, mask, self.M_tok, self.W, self.tau_p, paired=paired)
        return change + unrefined_evidence(P, H, mask, self.M_tok, self.tau_p, paired)
