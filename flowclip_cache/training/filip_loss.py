"""FILIP's token-wise contrastive loss (Yao et al., ICLR 2022), as its authors' group
released it: MindFormers (mindspore-lab/mindformers), mindformers/models/filip/filip.py,
classes FilipImgProcess, FilipTextProcess, FilipLogit and FilipLossCell, with their
defaults (top_token_percent (1, 1): every token; label smoothing 0.1; one learned logit
scale per direction, initialised at exp(3.8665097), logits clipped to +-100):

    p_j = norm(patch_j)                 (the class token dropped)
    q_l = norm(token_l) * [token_l is not padding]
    image->text  s_IT = mean_j   max_l q_l . p_j        (padding's zero rows take part, as released)
    text->image  s_TI = sum_l max_j q_l . p_j / #valid  (padding contributes 0)
    loss = 1/2 [CE_smooth(scale_I s_IT) + CE_smooth(scale_T s_TI)]

Ours differs in two ways, both forced by the synthetic world and named in the recipe
(`token_loss: filip`): captions repeat inside a batch, so every scene whose caption is
the same is a positive (the targets of `pretrain.soft_contrastive`, then smoothed); and
the term is *added*, with a weight, to the tiny CLIP's global InfoNCE instead of
replacing it (FILIP trains on the token-wise logits alone), so the global embedding the
method calibrates keeps its training. One more, of the recipe rather than the loss: the
tiny CLIP's gradient-norm clip (1.0) covers the CLIP's parameters, not the two logit
scales (MindFormers clips every gradient); the shipped weights were trained so.
The head of the same name (heads/filip.py) is a scoring head over cached features, not
this loss: it masks padding out of the maxima and averages the two directions into one
score."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

INIT_LOG_SCALE = 3.8665097  # FilipLogit's initial log logit scale
CLIP_LOGITS = 100.0


def filip_similarities(patches: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor):
    """patches [B,N,d], tokens [B,L,d], mask [B,L] bool -> (s_IT [images, texts],
    s_TI [texts, images]), FilipLogit's two token-wise similarities."""
    p = F.normalize(patches, dim=-1)
    q = F.normalize(tokens, dim=-1) * mask[..., None]
    sim = torch.einsum("ind,tld->intl", p, q)  # [images, patches, texts, tokens]
    s_it = sim.max(-1).values.mean(1)  # each patch's best token of the text, over patches
    s_ti = sim.max(1).values.sum(-1) / mask.sum(-1).clamp(min=1)[None]  # each token's best patch
    return s_it, s_ti.T


def smoothed_cross_entropy(logits: torch.Tensor, positives: torch.Tensor, smooth: float) -> torch.Tensor:
    """SoftCrossEntropyLoss's label smoothing over soft targets: the positives of a row
    share 1 - smooth, every column gets smooth / columns."""
    target = positives.float() / positives.sum(1, keepdim=True)
    target = (1 - smooth) * target + smooth / logits.shape[1]
    return torch.sum(-target * F.log_softmax(logits, 1), 1).mean()


class FilipLoss(nn.Module):
    def __init__(self, smooth: float = 0.1):
        super().__init__()
        self.log_scale_image = nn.Parameter(torch.tensor(INIT_LOG_SCALE))
        self.log_scale_text = nn.Parameter(torch.tensor(INIT_LOG_SCALE))
        self.smooth = smooth

    def forward(self, patches, tokens, mask, same: torch.Tensor) -> torch.Tensor:
        s_it, s_ti = filip_similarities(patches, tokens, mask)
        li = (self.log_scale_image.exp() * s_it).clamp(-CLIP_LOGITS, CLIP_LOGITS)
        lt = (self.log_scale_text.exp() * s_ti).clamp(-CLIP_LOGITS, CLIP_LOGITS)
        return 0.5 * (smoothed_cross_entropy(li, same, self.smooth) + smoothed_cross_entropy(lt, same.T, self.smooth))


TOKEN_LOSSES = {"none": None, "filip": FilipLoss}
