"""What every encoder family gives the store: the same four features, whatever the
library underneath.

A family is a class with a name and a version (both in a non-OpenAI store's
fingerprint), a test of which model names it serves, a resolver that turns an
EncoderSpec into the fingerprinted configuration without building the model, and, once
loaded, three methods: tokenize, image_forward, text_forward. Forwards return FP32
tensors before normalisation and stay differentiable (pretraining trains through them);
features.py normalises and applies the token-mask policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Tokens:
    ids: torch.Tensor  # [B, ctx] long, as the family's tokenizer returns them
    mask: torch.Tensor  # [B, ctx] bool, the tokenizer's attention mask (True = a real token)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, rows) -> "Tokens":
        return Tokens(self.ids[rows], self.mask[rows])

    def to(self, device) -> "Tokens":
        return Tokens(self.ids.to(device), self.mask.to(device))

    @staticmethod
    def stack(rows: list["Tokens"]) -> "Tokens":
        return Tokens(torch.cat([r.ids for r in rows]), torch.cat([r.mask for r in rows]))


# how every family's features are computed and stored (part of every fingerprint)
DTYPE_POLICY = {"compute": "float32", "tf32": False, "storage": "float16", "l2_normalised": True}


class Family:
    name: str = ""
    version: int = 1
    causal_text: bool = False  # a causal text tower may cut a batch to its longest caption
    special_tokens: tuple[int, int] = (1, 1)  # (leading, trailing) specials of a valid span: 'content' drops them

    def __init__(self, model, preprocess, tokenizer, config: dict):
        self.model, self.preprocess, self.tokenizer, self.config = model, preprocess, tokenizer, config

    # -- what the resolver and the loader provide ------------------------------------------
    @classmethod
    def claims(cls, model: str) -> bool:
        raise NotImplementedError

    @classmethod
    def resolve_config(cls, spec) -> tuple[dict, str | None]:
        """(fingerprinted configuration, local weights file or None)."""
        raise NotImplementedError

    @classmethod
    def build(cls, enc, device: str = "cpu"):
        """(model in FP32 eval mode, image preprocessing) as the fingerprint describes them."""
        raise NotImplementedError

    @classmethod
    def make_tokenizer(cls, enc):
        raise NotImplementedError

    @classmethod
    def load(cls, enc, device: str = "cpu") -> "Family":
        model, preprocess = cls.build(enc, device)
        return cls(model, preprocess, cls.make_tokenizer(enc), enc.config)

    @classmethod
    def text_only(cls, enc) -> "Family":
        """The tokenizer without the model (planning an extraction needs token ids only)."""
        return cls(None, None, cls.make_tokenizer(enc), enc.config)

    def set_grad_checkpointing(self) -> None:
        """Recompute each transformer block's activations in the backward pass instead of
        keeping them (adapt --grad-checkpointing); open_clip's switch."""
        self.model.set_grad_checkpointing(True)

    # -- what a loaded encoder computes -----------------------------------------------------
    @property
    def context_length(self) -> int:
        return int(self.config["tokenizer"]["context_length"])

    def tokenize(self, texts: list[str]) -> Tokens:
        raise NotImplementedError

    def untruncated_length(self, text: str) -> int:
        """Tokens the caption would have without the context limit (for the truncated flag)."""
        raise NotImplementedError

    def token_strings(self, ids: list[int]) -> list[str]:
        """Readable text of each token id (flowclip explain's labels)."""
        raise NotImplementedError

    def image_forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """images [B,3,H,W] -> (global [B,d], patches [B,N,d]), not normalised."""
        raise NotImplementedError

    def text_forward(self, tokens: Tokens, truncate: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> (sentence [B,d], token states [B,L,d], attention mask [B,L]) not normalised;
        L < ctx only for a causal tower asked to truncate."""
        raise NotImplementedError

    def cut(self, tokens: Tokens, truncate: bool) -> Tokens:
        """A causal tower gives the same states for a batch cut to its longest caption."""
        if not (truncate and self.causal_text):
            return tokens
        L = int(tokens.mask.sum(1).max())
        return Tokens(tokens.ids[:, :L], tokens.mask[:, :L])


def project(x: torch.Tensor, proj) -> torch.Tensor:
    """A projection held as a matrix (open_clip's CLIP) or a Linear (with its bias)."""
    if proj is None:
        return x
    return proj(x) if isinstance(proj, torch.nn.Module) else x @ proj
