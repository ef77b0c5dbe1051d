"""The contract every scoring head meets (docs/architecture.md, "Adding a head").

A head scores images against captions from cached features:

    v [I, d]  image globals      P [I, N, d]  patches (None unless uses_tokens)
    t [T, d]  caption globals    H [T, L, d]  token states, mask [T, L] (None unless uses_tokens)

and declares what training, scoring and run folders need from it, so that nothing
outside its file knows which head it is.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import FlowclipError


def masked_token_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x [..., L] over the valid tokens (mask broadcastable to x): the pooling of
    every token-level score."""
    m = mask.to(x.dtype)
    return (x * m).sum(-1) / m.sum(-1).clamp_min(1)


def token_shares(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each valid token's share of masked_token_mean(x, mask) (they sum to it)."""
    m = mask.to(x.dtype)
    return x * m / m.sum(-1, keepdim=True).clamp_min(1)


class Head(nn.Module):
    kind: str = ""  # the registry name (train-head --head KIND)
    title: str = ""  # one line for --help and docs
    uses_tokens: bool = False  # needs patches and token states
    default_cimr: float = 0.0  # lambda_CIMR when a config does not set one (the paper's row)
    hparam_names: tuple[str, ...] = ()  # TrainConfig keys the head is built with (kept in the run config)
    train_defaults: dict = {}  # TrainConfig defaults of its published recipe (config keys override)

    def __init__(self, dim: int, **hparams):
        super().__init__()
        self.dim = dim

    # -- scores ---------------------------------------------------------------------------
    def forward(self, v, P, t, H, mask) -> torch.Tensor:
        """All pairs: [I, T]."""
        return self.forward_terms(v, P, t, H, mask)[0]

    def forward_terms(self, v, P, t, H, mask) -> tuple[torch.Tensor, dict]:
        """All pairs [I, T] and named parts worth logging in training (e.g. s_token)."""
        raise NotImplementedError

    def score_matched(self, v, P, t, H, mask) -> torch.Tensor:
        """Matched pairs (row i of each input together): [n]."""
        raise NotImplementedError

    def caption_embedding(self, t: torch.Tensor) -> torch.Tensor | None:
        """For a head whose score is v . e(t) (an embedding scorer): e(t) [T, d]. Zero-shot
        classification then ensembles prompts as CLIP does (mean of the normalised prompt
        embeddings, renormalised); None for pairwise heads, whose per-prompt scores are averaged."""
        return None

    def coarse(self, v, t) -> torch.Tensor | None:
        """Cheap all-pairs scores for retrieval shortlists, or None (score exactly)."""
        return None

    def pair_bytes(self, L: int, N: int, d: int) -> int:
        """Bytes of intermediates one all-pairs score takes (sizes scoring blocks)."""
        return 8

    # -- run folders ------------------------------------------------------------------------
    def hparams(self) -> dict:
        return {"kind": self.kind, "dim": self.dim, **{k: getattr(self, k) for k in self.hparam_names}}

    @classmethod
    def check_hparams(cls, hp: dict, where: str) -> dict:
        """The head's hyper-parameters from a run config, checked: finite numbers; a
        malformed run folder is refused, never scored."""
        out = {}
        for name in cls.hparam_names:
            v = hp.get(name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                raise FlowclipError(f"{where}: {name} = {v!r} must be a finite number")
            out[name] = float(v)
        return out


class TokenMapHead(Head):
    """A head scored from the token x patch interactions alone (FILIP-style, FSC local,
    DCSM-style): subclasses give `pair_scores(P, H, mask, paired)`; the frozen global
    score shortlists for them."""

    uses_tokens = True

    def pair_scores(self, P, H, mask, paired: bool = False) -> torch.Tensor:
        raise NotImplementedError

    def forward_terms(self, v, P, t, H, mask):
        return self.pair_scores(P, H, mask), {}

    def score_matched(self, v, P, t, H, mask):
        return self.pair_scores(P, H, mask, paired=True)

    def coarse(self, v, t):
        return v @ t.T

    def token_maps(self, P, H, mask) -> tuple[dict, torch.Tensor]:
        """For flowclip explain, one image P [N,d] and T captions: ({name: [T,L,N] token x
        patch map the head reads}, [T,L] each valid token's share of the score)."""
        raise NotImplementedError

    def token_evidence(self, v, P, t, H, mask) -> dict:
        maps, contrib = self.token_maps(P, H, mask)
        return {"maps": maps, "contrib": contrib, "s": self.pair_scores(P[None], H, mask)[0]}

    def token_margin(self, P, H, mask, gold: int, foil: int) -> torch.Tensor:
        """score(gold) - score(foil) of one image P [N,d] (differentiable in P)."""
        s = self.pair_scores(P[None], H[[gold, foil]], mask[[gold, foil]])[0]
        return s[0] - s[1]


class LearnedMapsHead(TokenMapHead):
    """A token-map head with learned token (A) and patch (B) maps, both starting as the identity."""

    def __init__(self, dim: int, **_):
        super().__init__(dim)
        self.A = nn.Parameter(torch.eye(dim))
        self.B = nn.Parameter(torch.eye(dim))
