"""Training objectives over one batch's score matrix (docs/method.md).

A batch of B records gives S [B, 2B]: image i against the candidates
[T_1+ .. T_B+, T_1- .. T_B-]. Ids are small integers standing for content keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from ..heads import Head
    from .train_config import TrainConfig


def hnb_masks(image_ids: torch.Tensor, pos_ids: torch.Tensor, neg_ids: torch.Tensor):
    """Which entries are *not* negatives and must leave the softmax.

    i2t [B, 2B]: candidate j (j != i) is masked for image i when it is another record's
      positive of the same image, or has the same caption text as record i's positive.
    t2i [B, B]: image i (i != j) is masked for positive T_j when it is the same image as
      record j's, or record i's positive is the same text as T_j."""
    B = len(image_ids)
    cand = torch.cat([pos_ids, neg_ids])  # [2B]
    same_img = image_ids[:, None] == image_ids[None, :]  # [B,B]
    i2t = torch.zeros(B, 2 * B, dtype=torch.bool, device=image_ids.device)
    i2t[:, :B] = same_img
    i2t |= cand[None, :] == pos_ids[:, None]
    eye = torch.eye(B, dtype=torch.bool, device=image_ids.device)
    i2t[:, :B] &= ~eye  # the target stays
    t2i = (same_img | (pos_ids[:, None] == pos_ids[None, :])) & ~eye  # [image i, text j]
    return i2t, t2i


def hnb_loss(S: torch.Tensor, tau_c: float, image_ids, pos_ids, neg_ids) -> torch.Tensor:
    """Hard-negative batch loss: mean of the image->text and text->image cross-entropies."""
    B = S.shape[0]
    U = S / tau_c
    i2t_mask, t2i_mask = hnb_masks(image_ids, pos_ids, neg_ids)
    target = torch.arange(B, device=S.device)
    # the mean taken outside cross_entropy: its own reduction sums in another order under
    # vmap, and a stacked run's logged loss would differ from its solo run's in the last bit
    ce = lambda x: F.cross_entropy(x, target, reduction="none").mean()  # noqa: E731
    l_i2t = ce(U.masked_fill(i2t_mask, float("-inf")))
    l_t2i = ce(U[:, :B].T.masked_fill(t2i_mask.T, float("-inf")))
    return 0.5 * (l_i2t + l_t2i)


def donor_map(image_ids: torch.Tensor) -> torch.Tensor:
    """For each record i, a donor record whose image differs: the next such record
    after i in batch order (cyclic), so a batch in random order gives a fixed
    derangement. -1 where every record shows the same image."""
    B = len(image_ids)
    ids = image_ids.tolist()
    donors = []
    for i in range(B):
        d = next((j % B for j in range(i + 1, i + B) if ids[j % B] != ids[i]), -1)
        donors.append(d)
    return torch.tensor(donors, device=image_ids.device)


def cimr_loss(S: torch.Tensor, tau_c: float, donors: torch.Tensor) -> torch.Tensor:
    """Cross-image margin ranking: the margin m_i(I) = s(I,T_i+) - s(I,T_i-) should be
    larger on record i's image than on its donor's."""
    B = S.shape[0]
    ok = donors >= 0
    if not ok.any():
        return S.new_zeros(())
    i = torch.arange(B, device=S.device)[ok]
    d = donors[ok]
    own = S[i, i] - S[i, B + i]
    donor = S[d, i] - S[d, B + i]
    return F.softplus(-(own - donor) / tau_c).mean()


# -- one step's loss: what train-head, adapt, studies and the dry run's timing share -----------
def batch_loss(head: "Head", cfg: "TrainConfig", img, pos, neg, feats):
    """(loss, its named terms, the head's parts) of one batch whose features are gathered.
    The head scores all pairs itself; the loop never recombines a head's parts."""
    v, P, t, H, mask = feats
    S, parts = head.forward_terms(v, P if head.uses_tokens else None, t, H if head.uses_tokens else None, mask)
    cimr = cfg.cimr or 0.0  # None was resolved to the head's default by TrainConfig
    donors = donor_map(img) if cimr > 0 else None
    loss, terms = objective(head, S, parts, cfg.tau_c, cimr, cfg.loss_weights, img, pos, neg, donors)
    return loss, terms, parts


def objective(head: "Head", S, parts, tau_c, cimr, loss_weights: dict, img, pos, neg, donors):
    """(loss, its named terms) from a batch's scores S [B, 2B]: a weighted sum of HNB
    (weight 1), CIMR (weight lambda_CIMR = cimr; left out where donors is None) and each
    loss term the head declares (Head.loss_terms; its weight from loss_weights or the
    head's default), which the head returns among its parts. tau_c and cimr may be
    tensors (stacked training takes one per run)."""
    terms = {
        "hnb": hnb_loss(S, tau_c, img, pos, neg),
        "cimr": cimr_loss(S, tau_c, donors) if donors is not None else S.new_zeros(()),
    }
    weights = {"hnb": 1.0, "cimr": cimr}
    for name, default in head.loss_terms.items():
        terms[name] = parts[name]
        weights[name] = loss_weights.get(name, default)
    loss = terms["hnb"]
    for name in list(terms)[1:]:
        loss = loss + weights[name] * terms[name]
    return loss, terms
