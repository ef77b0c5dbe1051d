"""SigLIP and SigLIP2 in open_clip: a timm ViT with learned (MAP) pooling and a
non-causal text transformer with a Hugging Face tokenizer (paper §4.1: the learned image
pooling and 196 patch embeddings kept, text at most 64 tokens).

global   = encode_image (the MAP-pooled embedding, through open_clip's head)
patches  = the trunk's final-normed tokens (there is no class token), through the same
           open_clip head as the global (identity for timm_proj 'none')
sentence = encode_text (the last position's state, ln_final, text projection)
tokens   = every position's state after ln_final and the same text projection, bias
           included, so the token at the pooled position equals the sentence embedding
mask     = the tokenizer's attention mask (SigLIP's tokenizer pads with </s>, its eos:
           comparing ids with the pad id would drop the real eos)

The text tower is not causal: padding changes every state, so captions always run at
exactly the model's context length and a batch is never cut to its longest caption.
"""

from __future__ import annotations

import re

from ...errors import FlowclipError
from . import claims
from . import hf_common as hf
from . import open_clip_common as oc
from .base import DTYPE_POLICY, project

# 2: the MAP pooling's attention runs timm's unfused (math) path; the fused CPU kernel gave
#    an image's global 1-ulp (FP16) differences with its position in the batch
ADAPTER_VERSION = 2


class SigLIP(oc.OpenClipFamily):
    name = "siglip"
    version = ADAPTER_VERSION
    causal_text = False
    special_tokens = (0, 1)  # no start token; </s> at the end

    @classmethod
    def claims(cls, model: str) -> bool:
        return claims.siglip(oc.model_config(model))

    @classmethod
    def resolve_config(cls, spec):
        hf.require_transformers("SigLIP")
        model_cfg = oc.model_config(spec.model)
        vision, text = model_cfg["vision_cfg"], model_cfg["text_cfg"]
        patch = re.search(r"patch(\d+)", vision["timm_model_name"])
        if not patch or text.get("cls_emb") or model_cfg.get("text_cfg", {}).get("embed_cls"):
            raise FlowclipError(
                f"{spec.model}: flowclip's SigLIP adapter needs a patch-size timm ViT "
                f"and a text tower without a class token"
            )
        size = vision["image_size"]
        h, w = (size, size) if isinstance(size, int) else size
        checkpoint, weights, tag_cfg = oc.weights(spec)
        if not tag_cfg:  # random or a file: the model's first tag's preprocessing
            import open_clip

            tags = [t for m, t in open_clip.list_pretrained() if m == spec.model]
            tag_cfg = open_clip.get_pretrained_cfg(spec.model, tags[0]) if tags else {}
        tok_source = spec.tokenizer or text["hf_tokenizer_name"]
        folder = hf.local_folder(tok_source, f"{spec.model}'s tokenizer", list(hf.TOKENIZER_FILES))
        tok = hf.hf_tokenizer(folder)
        config = {
            "feature_definition": 1,
            "adapter": {"name": cls.name, "version": cls.version},
            "model": spec.model,
            "model_cfg": model_cfg,
            "num_patches": (h // int(patch.group(1))) * (w // int(patch.group(1))),
            "preprocess": oc.preprocess(size, tag_cfg),
            "tokenizer": {
                "name": hf.source_name(tok_source),
                "sha256": hf.folder_digest(folder),
                "context_length": int(text.get("context_length", 64)),
                "pad_id": tok.pad_token_id,
                "clean": text.get("tokenizer_kwargs", {}).get("clean", "whitespace"),
            },
            "weights": weights,
            # rankings ignore it, but it is part of what the weights are
            "logit_bias": _logit_bias(checkpoint, model_cfg),
            "token_mask": spec.token_mask,
            "dtype": dict(DTYPE_POLICY),
            "versions": oc.versions("timm", "transformers"),
        }
        return config, checkpoint

    @classmethod
    def build(cls, enc, device="cpu"):
        model, transform = oc.build(enc, device)
        # torch's fused attention for the pool's one query (q_len 1) splits its work by batch
        # row on CPU, so an image's global moved by an ulp with its batch neighbours; timm's own
        # unfused path (the same formula) keeps every row a function of that image alone
        pool = getattr(model.visual.trunk, "attn_pool", None)
        if pool is not None and hasattr(pool, "fused_attn"):
            pool.fused_attn = False
        return model, transform

    @classmethod
    def make_tokenizer(cls, enc):
        from open_clip.tokenizer import HFTokenizer

        text = enc.config["model_cfg"]["text_cfg"]
        folder = hf.local_folder(enc.spec.tokenizer or text["hf_tokenizer_name"], "tokenizer", list(hf.TOKENIZER_FILES))
        kwargs = dict(text.get("tokenizer_kwargs", {}))
        return HFTokenizer(folder, context_length=int(text.get("context_length", 64)), **kwargs)

    def tokenize(self, texts):
        # open_clip's HFTokenizer, asked for the attention mask too (same ids: a test checks)
        return hf.hf_tokenize(
            self.tokenizer.tokenizer, [self.tokenizer.clean_fn(t) for t in texts], self.context_length
        )

    def token_strings(self, ids):
        return [t.replace("\u2581", "") for t in self.tokenizer.tokenizer.convert_ids_to_tokens([int(i) for i in ids])]

    def untruncated_length(self, text):
        return len(self.tokenizer.tokenizer(self.tokenizer.clean_fn(text))["input_ids"])

    def image_forward(self, images):
        visual = self.model.visual
        out = visual.forward_intermediates(images, indices=1, normalize_intermediates=True, output_fmt="NLC")
        return out["image_features"], visual.head(out["image_intermediates"][-1])

    def text_forward(self, tokens, truncate=True):
        text = self.model.text
        out = text.forward_intermediates(tokens.ids, indices=1, normalize_intermediates=True, output_fmt="NLC")
        return out["text_features"], project(out["text_intermediates"][-1], text.text_projection), tokens.mask


def _logit_bias(checkpoint: str | None, model_cfg: dict):
    if checkpoint is None:
        return model_cfg.get("init_logit_bias")
    if checkpoint.endswith(".safetensors"):
        from safetensors import safe_open

        with safe_open(checkpoint, "pt") as f:
            return float(f.get_tensor("logit_bias")) if "logit_bias" in f.keys() else None
    return "in the weights (not read: not a safetensors file)"
