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
import torch.nn.functional as F
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
    training_free: bool = False  # a scorer of the encoder's own features with no parameters (--scorer KIND)
    # the stores' token masks (extract --token-mask) the method is defined on; None: any
    store_token_masks: tuple[str, ...] | None = None
    default_cimr: float = 0.0  # lambda_CIMR when a config does not set one (the paper's row)
    hparam_names: tuple[str, ...] = ()  # TrainConfig keys the head is built with (kept in the run config)
    train_defaults: dict = {}  # TrainConfig defaults of its published recipe (config keys override)
    # a plug-in head's own settings and their defaults (config `head_options:`; self.<name> holds each)
    options: dict[str, float | int] = {}
    # extra loss terms: name -> default weight (config `loss_weights:`); forward_terms returns each
    # among its parts as a scalar, and training adds weight * term to HNB + lambda_CIMR * CIMR
    loss_terms: dict[str, float] = {}

    def __init__(self, dim: int, **hparams):
        super().__init__()
        self.dim = dim
        for name, default in self.options.items():
            setattr(self, name, type(default)(hparams.get(name, default)))

    # -- scores ---------------------------------------------------------------------------
    def forward(self, v, P, t, H, mask) -> torch.Tensor:
        """All pairs: [I, T]."""
        return self.forward_terms(v, P, t, H, mask)[0]

    def forward_terms(self, v, P, t, H, mask) -> tuple[torch.Tensor, dict]:
        """All pairs [I, T] and named parts worth logging in training (e.g. s_token). A head
        may define forward alone (no parts) instead."""
        if type(self).forward is Head.forward:
            raise NotImplementedError(f"{type(self).__name__} defines neither forward nor forward_terms")
        return self.forward(v, P, t, H, mask), {}

    def score_matched(self, v, P, t, H, mask) -> torch.Tensor:
        """Matched pairs (row i of each input together): [n]. By default one all-pairs
        score per row; a head overrides it with a direct form."""
        row = lambda x, i: None if x is None else x[i : i + 1]  # noqa: E731
        return torch.stack(
            [self(row(v, i), row(P, i), row(t, i), row(H, i), row(mask, i))[0, 0] for i in range(len(v))]
        )

    def scores_as(self) -> "Head":
        """The head that scores for this one without autograd: itself, unless its weights
        reduce its method exactly to a simpler head's (Flow-CLIP with W = 0 is Global-M: its
        s_token is 0 by its equations, which its kernels compute only to round-off). Both
        scoring gateways (fixed_shapes.py) use it, so every engine gives such a head that
        simpler head's bits, and an evaluation is keyed by it: every head that starts as
        Global-M's identity shares one start evaluation (training_data.evaluation_key)."""
        return self

    def image_parts(self, v, P) -> tuple:
        """What every pair of an image shares: tensors whose row i is image i's
        (heads/fixed_shapes.py computes them once per image, in blocks of a fixed size), for
        all-pairs scoring and, unless matched_image_parts says otherwise, matched pairs. By
        default the image's own features; Flow-CLIP adds its projected patches."""
        return v, P

    def matched_image_parts(self, v, P) -> tuple:
        """What matched pairs sharing an image share (fixed_shapes.matched_scores computes it
        once per image): by default image_parts; a head whose matched form reads less says
        so (Flow-CLIP's reads the patches alone: matched_image_parts = Head.image_parts)."""
        return self.image_parts(v, P)

    def caption_parts(self, t, H, mask) -> tuple:
        """What all-pairs scoring computes once per caption (in blocks of a fixed size, one
        token count each): by default the caption's own features."""
        return t, H, mask

    def score_from_parts(self, image: tuple, caption: tuple) -> torch.Tensor:
        """All pairs [I, T] from image_parts' rows and caption_parts' rows."""
        (v, P), (t, H, mask) = image, caption
        return self(v, P, t, H, mask)

    def score_matched_parts(self, parts: tuple, t, H, mask) -> torch.Tensor:
        """score_matched from each pair's image parts (matched_image_parts' rows, one per pair)."""
        v, P = parts
        return self.score_matched(v, P, t, H, mask)

    def caption_embedding(self, t: torch.Tensor) -> torch.Tensor | None:
        """For a head whose score is v . e(t) (an embedding scorer): e(t) [T, d]. Zero-shot
        classification then ensembles prompts as CLIP does (mean of the normalised prompt
        embeddings, renormalised); None for pairwise heads, whose per-prompt scores are averaged."""
        return None

    def caption_similarity(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor | None:
        """A caption-caption similarity, row i of a [n, d] with row i of b [n, d] (caption
        globals): [n], for text-only tasks (SugarCrepe++'s TOT). By default the cosine of the
        head's caption embeddings where its score is v . e(t) (caption_embedding; CLIP's e(t)
        = t, as SugarCrepe++ computes it); None for a pairwise head, whose score has no caption
        embedding (TOT then reads "not defined for this scorer", never a number)."""
        ea, eb = self.caption_embedding(a), self.caption_embedding(b)
        if ea is None or eb is None:
            return None
        return (F.normalize(ea, dim=-1) * F.normalize(eb, dim=-1)).sum(-1)

    def decision_threshold(self) -> tuple[float, str] | None:
        """A calibrated match decision: (t, where t comes from), a pair matching when its
        score is > t (VALSE's p_c / p_f / acc). None for a similarity score with no
        calibrated match point; those figures then read "not defined"."""
        return None

    def coarse(self, v, t) -> torch.Tensor | None:
        """Cheap all-pairs scores for retrieval shortlists, or None (score exactly)."""
        return None

    def pair_bytes(self, L: int, N: int, d: int) -> int:
        """Bytes of intermediates one all-pairs score takes (sizes scoring blocks)."""
        return 8

    # -- run folders ------------------------------------------------------------------------
    def hparams(self) -> dict:
        """What a run folder records to build the head again: kind, width, settings, and a
        plug-in head's origin (module, class, sha256 of its source file)."""
        hp = {"kind": self.kind, "dim": self.dim, **{k: getattr(self, k) for k in self.hparam_names}}
        if self.options:
            hp["options"] = {k: getattr(self, k) for k in self.options}
        origin = type(self).__dict__.get("plugin_origin")
        if origin:
            hp["plugin"] = dict(origin)
        return hp

    @classmethod
    def check_hparams(cls, hp: dict, where: str) -> dict:
        """The head's hyper-parameters from a run config, checked: finite numbers; a
        malformed run folder is refused, never scored."""
        out: dict = {}
        for name in cls.hparam_names:
            v = hp.get(name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                raise FlowclipError(f"{where}: {name} = {v!r} must be a finite number")
            out[name] = float(v)
        if cls.options:
            out["head_options"] = cls.check_options(hp.get("options", {}), where)
        return out

    @classmethod
    def check_options(cls, values, where: str) -> dict:
        """head_options: names the head declares, finite numbers (whole ones where the
        default is an int); the declared defaults fill the rest."""
        if not isinstance(values, dict):
            raise FlowclipError(f"{where}: head_options must be a mapping, got {values!r}")
        unknown = sorted(set(values) - set(cls.options))
        if unknown:
            known = ", ".join(cls.options) or "none"
            raise FlowclipError(f"{where}: head_options {unknown} are not options of the {cls.kind} head ({known})")
        out = dict(cls.options)
        for name, v in values.items():
            whole = isinstance(cls.options[name], int)
            number = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            if not number or (whole and v != int(v)):
                what = "a finite whole number" if whole else "a finite number"
                raise FlowclipError(f"{where}: head_options.{name} = {v!r} must be {what}")
            out[name] = type(cls.options[name])(v)
        return out


# kind -> head class: the built-in heads (heads/__init__.py), then plug-ins (heads/plugins.py)
REGISTRY: dict[str, type[Head]] = {}


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

    def pair_bytes(self, L: int, N: int, d: int) -> int:
        return 4 * 4 * L * N  # a few [I, T, L, N] float intermediates

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


def check_token_mask(cls: type[Head], policy: str, where: str) -> None:
    """Refuse a store whose token mask the head's method is not defined on, in one line."""
    if cls.store_token_masks is not None and policy not in cls.store_token_masks:
        raise FlowclipError(
            f"{where}: the {cls.kind} head is defined on stores extracted with --token-mask "
            f"{' or '.join(cls.store_token_masks)}, and this store holds --token-mask {policy} tokens; "
            f"extract a store with --token-mask {cls.store_token_masks[0]} for it"
        )
