"""Global-M: a learned map of the caption embedding (GCC alone), z = norm(M t), s = v . z."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import Head


def global_scores(v: torch.Tensor, t: torch.Tensor, M: torch.Tensor | None) -> torch.Tensor:
    """v [I,d], t [T,d] -> [I,T]. M None is the frozen encoder (v . t)."""
    z = t if M is None else F.normalize(t @ M.T, dim=-1)
    return v @ z.T


class GlobalHead(Head):
    kind = "global"
    title = "Global-M: a learned map M of the caption embedding (GCC)"
    default_cimr = 0.0  # the Global-M row of Tab. 2: HNB alone

    def __init__(self, dim: int, **_):
        super().__init__(dim)
        self.M = nn.Parameter(torch.eye(dim))

    def forward_terms(self, v, P, t, H, mask):
        return global_scores(v, t, self.M), {}

    def score_matched(self, v, P, t, H, mask) -> torch.Tensor:
        return (v * F.normalize(t @ self.M.T, dim=-1)).sum(-1)

    def coarse(self, v, t):
        return global_scores(v, t, self.M)

    def caption_embedding(self, t):
        return F.normalize(t @ self.M.T, dim=-1)
