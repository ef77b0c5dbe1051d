"""The frozen encoder as a scorer: s = v . t (no parameters)."""

from __future__ import annotations

from .base import Head


class ClipHead(Head):
    kind = "clip"
    title = "the frozen encoder: v . t (no parameters)"
    training_free = True

    def forward_terms(self, v, P, t, H, mask):
        return v @ t.T, {}

    def score_matched(self, v, P, t, H, mask):
        return (v * t).sum(-1)

    def coarse(self, v, t):
        return v @ t.T

    def caption_embedding(self, t):
        return t
