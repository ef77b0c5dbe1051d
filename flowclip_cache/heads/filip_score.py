"""FILIP's token-wise late-interaction score as its authors released it, with no training:
the encoder's own local evidence (Yao et al., ICLR 2022; the released code is
mindspore-lab/mindformers, `mindformers/models/filip/filip.py`: `FilipLogit`, as
`FilipGather` calls it on the features `FilipImgProcess` and `FilipTextProcess` make),
over a store's L2-normalised patch and caption-token features, without parameters.

- `filip-score` (text to image: `FilipLogit(use_mask_flag=True)`, `logits_per_text`): each
  caption token's best patch, `max_j h_l . p_j`, summed over the tokens and divided by the
  number of valid ones. Padding tokens are zero vectors there, so they add nothing: the
  mean over the valid tokens of each one's best patch.
- `filip-score-i2t` (image to text: `FilipLogit()`, `logits_per_image`): each patch's best
  token, `max_l h_l . p_j`, averaged over the patches. The release takes that max over the
  caption's whole context, zeroed padding included, so a patch whose every token is below 0
  scores 0: `max(0, max_l ...)`. It pads every caption to its context; so does flowclip for
  every caption (one that fills its context exactly would have no padding in the release).

Both multiply by the release's logit scale (the exponential of a learned log-scale, which
starts at 3.8665) and clip at +-100: a positive constant for a score nothing trains, which
changes no decision (cosines stay far below the clip), so flowclip leaves it out. Ties are
decided by each benchmark's rule, as for every scorer."""

from __future__ import annotations

import torch

from .base import TokenMapHead, masked_token_mean, token_shares


def token_patch_similarity(P, H, paired: bool = False) -> torch.Tensor:
    """h_l . p_j of every token and patch: P [I,N,d], H [T,L,d] -> [I,T,L,N] (paired: [T,L,N])."""
    return torch.einsum("tld,tnd->tln", H, P) if paired else torch.einsum("tld,ind->itln", H, P)


class FilipScore(TokenMapHead):
    kind = "filip-score"
    title = "FILIP's released token-wise score, text to image, training-free: each token's best patch, averaged"
    training_free = True
    store_token_masks = ("nonpad",)  # the release's tokens: every one of the caption, start and end included

    def pair_scores(self, P, H, mask, paired=False):
        sim = token_patch_similarity(P, H, paired)
        return masked_token_mean(sim.max(-1).values, mask if paired else mask[None])

    def token_maps(self, P, H, mask):
        sim = torch.einsum("tld,nd->tln", H, P)
        return {"similarity": sim}, token_shares(sim.max(-1).values, mask)


class FilipScoreI2T(TokenMapHead):
    kind = "filip-score-i2t"
    title = (
        "FILIP's released token-wise score, image to text, training-free: each patch's best token (0 floor), averaged"
    )
    training_free = True
    store_token_masks = ("nonpad",)

    def pair_scores(self, P, H, mask, paired=False):
        sim = token_patch_similarity(P, H, paired)
        valid = (mask if paired else mask[None])[..., None]
        best = sim.masked_fill(~valid, float("-inf")).max(-2).values  # each patch's best valid token
        return best.clamp_min(0.0).mean(-1)  # the release's zeroed padding: a floor at 0

    def token_maps(self, P, H, mask):
        """Each token's similarity to every patch; a token's share is the patches it is the
        (positive) best token of, each a 1/N of the score."""
        sim = torch.einsum("tld,nd->tln", H, P)
        masked = sim.masked_fill(~mask[..., None], float("-inf"))
        best = masked.max(1, keepdim=True)
        won = (masked == best.values) & (best.values > 0)
        share = (sim * won).sum(-1) / sim.shape[-1]
        return {"similarity": sim}, share
