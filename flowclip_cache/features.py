"""The features flowclip stores (METHOD.md, "Inputs"), from any encoder family
(encoder_families/): the family's forwards give global, patches, sentence and token
states; here they are L2-normalised and the token-mask policy is applied. All in FP32
(TF32 off); the caller rounds to FP16 for storage.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .encoder_families.base import Tokens


def disable_tf32() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def image_features(encoder, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """images [B,3,H,W] -> (global [B,d], patches [B,N,d]), both L2-normalised FP32;
    differentiable (flowclip adapt trains through it)."""
    pooled, patches = encoder.image_forward(images)
    return F.normalize(pooled, dim=-1), F.normalize(patches, dim=-1)


encode_images = torch.no_grad()(image_features)       # what extract stores


@dataclass
class TextFeatures:
    sentence: torch.Tensor     # [B, d]
    tokens: torch.Tensor       # [B, L, d]; L = the longest caption for a causal tower, else the context
    mask: torch.Tensor         # [B, L] bool, valid tokens under the policy


def valid_mask(attention: torch.Tensor, policy: str = "nonpad", special: tuple[int, int] = (1, 1)) -> torch.Tensor:
    """attention [B,L] bool (right-padded). nonpad: every token the tokenizer marks as real
    (specials included); content: without the family's `special` (leading, trailing) ones."""
    mask = attention.bool()
    if policy == "content":
        lead, trail = special
        lengths = mask.sum(1)
        mask = mask.clone()
        rows = torch.arange(len(mask))
        for j in range(lead):
            mask[:, j] = False
        for j in range(1, trail + 1):
            mask[rows, (lengths - j).clamp(min=0)] = False
    return mask


def text_features(encoder, tokens: Tokens, policy: str = "nonpad", truncate: bool = True) -> TextFeatures:
    """Sentence, token states (L2-normalised FP32) and the valid mask; differentiable."""
    pooled, states, attention = encoder.text_forward(tokens, truncate)
    return TextFeatures(F.normalize(pooled, dim=-1), F.normalize(states, dim=-1),
                        valid_mask(attention, policy, encoder.special_tokens))


encode_texts = torch.no_grad()(text_features)         # what extract stores
