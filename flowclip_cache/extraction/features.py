"""The features flowclip stores (METHOD.md, "Inputs"), from any encoder family
(families/): the family's forwards give global, patches, sentence and token
states; here they are L2-normalised and the token-mask policy is applied. All in FP32
(TF32 off); the caller rounds to FP16 for storage.

What extract stores is a function of each input alone: encode_images and encode_texts
run every forward at a fixed shape, IMAGE_ROWS images (the last chunk padded with
zeros) or TEXT_ROWS captions (padded with copies of the chunk's first) cut to the length
bucket of each caption's own length (causal towers; the others always run their whole
context). Matrix products are then the same kernels with the same blocking whatever
else was in the batch, so an image or a caption gets the same bits in any batch,
manifest or run (docs/store-format.md, "Same input, same bits").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .families.base import Tokens


def disable_tf32() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def image_features(encoder, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """images [B,3,H,W] -> (global [B,d], patches [B,N,d]), both L2-normalised FP32;
    differentiable (flowclip adapt trains through it)."""
    pooled, patches = encoder.image_forward(images)
    return F.normalize(pooled, dim=-1), F.normalize(patches, dim=-1)


IMAGE_ROWS = 16  # images per forward, always (padded)
TEXT_ROWS = 64  # captions per forward, always (padded)
LENGTH_BUCKETS = (8, 16, 24, 32, 48, 64, 77)  # a causal tower's widths (capped at its context)


@torch.no_grad()
def encode_images(encoder, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What extract stores: image_features in forwards of exactly IMAGE_ROWS images."""
    gs, ps = [], []
    for i in range(0, len(images), IMAGE_ROWS):
        chunk = images[i : i + IMAGE_ROWS]
        n = len(chunk)
        if n < IMAGE_ROWS:
            chunk = torch.cat([chunk, chunk.new_zeros((IMAGE_ROWS - n, *chunk.shape[1:]))])
        g, p = image_features(encoder, chunk)
        gs.append(g[:n])
        ps.append(p[:n])
    return torch.cat(gs), torch.cat(ps)


@dataclass
class TextFeatures:
    sentence: torch.Tensor  # [B, d]
    tokens: torch.Tensor  # [B, L, d]; L = the longest caption for a causal tower, else the context
    mask: torch.Tensor  # [B, L] bool, valid tokens under the policy


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
    return TextFeatures(
        F.normalize(pooled, dim=-1), F.normalize(states, dim=-1), valid_mask(attention, policy, encoder.special_tokens)
    )


def length_bucket(length: int, context: int) -> int:
    return next((b for b in LENGTH_BUCKETS if b >= length and b <= context), context)


@torch.no_grad()
def encode_texts(encoder, tokens: Tokens, policy: str = "nonpad") -> TextFeatures:
    """What extract stores: text_features in forwards of exactly TEXT_ROWS captions, each
    caption at its own length bucket (a causal tower's states do not depend on the
    padding after them; the bucket fixes the shapes, hence the rounding)."""
    n, ctx = tokens.ids.shape
    lengths = tokens.mask.sum(1).tolist()
    widths = [length_bucket(int(x), ctx) if encoder.causal_text else ctx for x in lengths]
    sentence: torch.Tensor | None = None
    states: torch.Tensor | None = None
    mask = torch.zeros(n, max(widths), dtype=torch.bool, device=tokens.ids.device)
    for w in sorted(set(widths)):
        rows = [i for i, x in enumerate(widths) if x == w]
        for c in range(0, len(rows), TEXT_ROWS):
            idx = torch.tensor(rows[c : c + TEXT_ROWS], device=tokens.ids.device)
            pad = idx[:1].expand(TEXT_ROWS - len(idx))
            chunk = tokens[torch.cat([idx, pad])]
            f = text_features(encoder, type(tokens)(chunk.ids[:, :w], chunk.mask[:, :w]), policy, truncate=False)
            if sentence is None:
                sentence = f.sentence.new_zeros(n, f.sentence.shape[1])
                states = f.tokens.new_zeros(n, max(widths), f.tokens.shape[2])
            assert sentence is not None and states is not None
            k = len(idx)
            sentence[idx], states[idx, :w], mask[idx, :w] = f.sentence[:k], f.tokens[:k], f.mask[:k]
    assert sentence is not None and states is not None, "no captions"
    return TextFeatures(sentence, states, mask)
