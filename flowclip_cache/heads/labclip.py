"""LABCLIP (Koishigarina et al., ICLR 2026) as a head: a linear map of the pooled caption
embedding with a learned temperature, trained with hard-negative batches.

    z = norm(A t),  s = v . z,  A starts as the identity

The learned temperature tau (starting at the config's tau_c) takes tau_c's place in the
loss: the head hands the loop s * tau_c / tau, so HNB's logits are s / tau. Rankings are
those of s (a positive factor). Its published recipe is the head's training default:
batch 1024, lr 1e-3, 10 epochs (flags and config keys override it)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .base import Head


class LabclipHead(Head):
    kind = "labclip"
    title = "LABCLIP: a linear map of the caption embedding with a learned temperature"
    hparam_names = ("tau_c",)
    train_defaults = {"batch_size": 1024, "lr": 1e-3, "epochs": 10}

    def __init__(self, dim: int, tau_c: float = 0.01, **_):
        super().__init__(dim)
        self.tau_c = tau_c
        self.A = nn.Parameter(torch.eye(dim))
        self.log_tau = nn.Parameter(torch.tensor(math.log(tau_c)))

    def _scale(self):
        return self.tau_c / self.log_tau.exp()

    def forward_terms(self, v, P, t, H, mask):
        return (v @ F.normalize(t @ self.A.T, dim=-1).T) * self._scale(), {"temperature": self.log_tau.exp()}

    def score_matched(self, v, P, t, H, mask):
        return (v * F.normalize(t @ self.A.T, dim=-1)).sum(-1) * self._scale()

    def coarse(self, v, t):
        return v @ F.normalize(t @ self.A.T, dim=-1).T

    def caption_embedding(self, t):
        return F.normalize(t @ self.A.T, dim=-1)  # s = v . z up to a positive factor
