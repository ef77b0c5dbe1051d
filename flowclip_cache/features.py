"""The features flowclip stores, computed from an open_clip model (METHOD.md, "Inputs").

Image: global = encode_image (normalised); patches = the patch tokens after the vision
post-LayerNorm and the visual projection (normalised per patch).
Caption: sentence = encode_text (normalised); token states = every position after the
final LayerNorm and the text projection (normalised per token), with a valid mask.
All in FP32 (TF32 off); the caller rounds to FP16 for storage.

The text tower is causal, so a batch cut to its longest caption gives the same states
as the full context: we never run padding positions that no valid token attends to.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from open_clip.transformer import text_global_pool


def disable_tf32() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


@torch.no_grad()
def encode_images(model, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """images [B,3,H,W] -> (global [B,d], patches [B,N,d]), both L2-normalised FP32."""
    pooled, tokens = image_forward(model, images)
    return F.normalize(pooled, dim=-1), F.normalize(tokens, dim=-1)


def image_forward(model, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(global [B,d], patches [B,N,d]) before normalisation; differentiable (pretraining
    uses it)."""
    visual = model.visual
    if getattr(visual, "attn_pool", None) is not None:
        raise ValueError("attention-pooled vision towers are not supported for patch features")
    x = visual._embeds(images)
    x = visual.transformer(x)
    pooled, tokens = visual._pool(x)
    if visual.final_ln_after_pool:      # _pool left the tokens without the post-LayerNorm
        tokens = visual.ln_post(tokens)
    if visual.proj is not None:
        pooled = pooled @ visual.proj
        tokens = tokens @ visual.proj
    return pooled, tokens


@dataclass
class TextFeatures:
    sentence: torch.Tensor     # [B, d]
    tokens: torch.Tensor       # [B, L, d], L = longest valid length in the batch
    mask: torch.Tensor         # [B, L] bool, valid tokens under the policy


def valid_mask(token_ids: torch.Tensor, policy: str = "nonpad") -> torch.Tensor:
    """nonpad: start token through end token inclusive; content: without those two."""
    mask = token_ids != 0
    if policy == "content":
        lengths = mask.sum(1)
        mask = mask.clone()
        mask[:, 0] = False
        mask[torch.arange(len(mask)), lengths - 1] = False
    return mask


@torch.no_grad()
def encode_texts(model, token_ids: torch.Tensor, policy: str = "nonpad", truncate: bool = True) -> TextFeatures:
    """token_ids [B, ctx] as the tokenizer returns them (0 = padding)."""
    pooled, x, ids = text_forward(model, token_ids, truncate)
    return TextFeatures(F.normalize(pooled, dim=-1), F.normalize(x, dim=-1), valid_mask(ids, policy))


def text_forward(model, token_ids: torch.Tensor, truncate: bool = True):
    """(pooled [B,d], states [B,L,d], ids [B,L]) before normalisation; differentiable
    (pretraining uses it). The causal tower lets a batch stop at its longest caption."""
    lengths = (token_ids != 0).sum(1)
    causal = model.attn_mask is not None
    L = int(lengths.max()) if (truncate and causal) else token_ids.shape[1]
    ids = token_ids[:, :L]
    cast = model.transformer.get_cast_dtype()
    x = model.token_embedding(ids).to(cast)
    x = x + model.positional_embedding[:L].to(cast)
    attn = model.attn_mask[:L, :L] if causal else None
    x = model.transformer(x, attn_mask=attn)
    x = model.ln_final(x)
    pooled = text_global_pool(x, ids, model.text_pool_type, eos_token_id=getattr(model, "text_eos_id", None))
    proj = model.text_projection
    if proj is not None:
        if isinstance(proj, torch.nn.Linear):
            pooled, x = proj(pooled), proj(x)
        else:
            pooled, x = pooled @ proj, x @ proj
    return pooled, x, ids
