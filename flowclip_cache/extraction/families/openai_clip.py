"""OpenAI-style CLIP in open_clip (ViT-B/32, B/16, L/14, L/14@336 and the tiny CLIP):
open_clip's own ViT and text transformer, the SimpleTokenizer (pads with 0). The text
tower is causal unless its config says `no_causal_mask` (flowclip-tiny-clip-bidir): then
every token attends to the whole padded context, as open_clip's encode_text runs it.

global   = encode_image; patches = the last block's tokens after ln_post and the visual
           projection (visual.forward_intermediates, class token dropped)
sentence = encode_text;  tokens  = every position after ln_final and the text projection

This family's fingerprint has no 'adapter' entry: stores made before families existed
keep their fingerprint, and feature_definition 1 stands for this adapter's version 1.
"""

from __future__ import annotations

from open_clip.transformer import text_global_pool

from ...errors import FlowclipError
from . import claims
from . import open_clip_common as oc
from .base import DTYPE_POLICY, Tokens, project

FEATURE_DEFINITION_VERSION = 1


class OpenAIClip(oc.OpenClipFamily):
    name = "openai-clip"
    version = FEATURE_DEFINITION_VERSION
    causal_text = True
    special_tokens = (1, 1)  # <start_of_text> ... <end_of_text>
    pad_id = 0

    def __init__(self, model, preprocess, tokenizer, config: dict):
        super().__init__(model, preprocess, tokenizer, config)
        # a bidirectional tower's states depend on the whole context (its pads included),
        # so its batches always run the full context; planning has the config, not the model
        if model is not None:
            self.causal_text = getattr(model, "attn_mask", None) is not None
        else:
            self.causal_text = not config["model_cfg"].get("text_cfg", {}).get("no_causal_mask", False)

    @classmethod
    def claims(cls, model: str) -> bool:
        return claims.openai_clip(oc.model_config(model))

    @classmethod
    def resolve_config(cls, spec):
        model_cfg = oc.model_config(spec.model)
        vision = model_cfg["vision_cfg"]
        if vision.get("attentional_pool"):
            raise FlowclipError(f"{spec.model}: an attention-pooled ViT has no patch tokens in the global's space")
        checkpoint, weights, tag_cfg = oc.weights(spec)
        quick_gelu = spec.force_quick_gelu
        if quick_gelu is None:
            quick_gelu = bool(tag_cfg.get("quick_gelu", model_cfg.get("quick_gelu", False)))
        model_cfg["quick_gelu"] = quick_gelu
        size, patch = vision["image_size"], vision["patch_size"]
        h, w = (size, size) if isinstance(size, int) else size
        config = {
            "feature_definition": FEATURE_DEFINITION_VERSION,
            "model": spec.model,
            "model_cfg": model_cfg,
            "num_patches": (h // patch) * (w // patch),
            "preprocess": oc.preprocess(size, tag_cfg),
            "tokenizer": {
                "name": "open_clip.SimpleTokenizer",
                "context_length": model_cfg.get("text_cfg", {}).get("context_length", 77),
            },
            "weights": weights,
            "token_mask": spec.token_mask,
            "dtype": dict(DTYPE_POLICY),
            "versions": oc.versions(),
        }
        return config, checkpoint

    @classmethod
    def make_tokenizer(cls, enc):
        import open_clip

        from .locate import register_package_configs

        register_package_configs()  # flowclip's own configs (the tiny CLIP) name their tokenizer too
        return open_clip.get_tokenizer(enc.spec.model)

    def tokenize(self, texts):
        ids = self.tokenizer(texts, context_length=self.context_length)
        return Tokens(ids, ids != self.pad_id)

    def token_strings(self, ids):
        return [self.tokenizer.decoder.get(int(i), "?").replace("</w>", "") for i in ids]

    def untruncated_length(self, text: str) -> int:
        return len(self.tokenizer.encode(text)) + 2  # with <start_of_text> and <end_of_text>

    def image_forward(self, images):
        visual = self.model.visual
        if getattr(visual, "attn_pool", None) is not None:
            raise FlowclipError("attention-pooled vision towers have no patch tokens in the global's space")
        readout = self.config.get("patch_readout", "standard")
        if readout != "standard":  # the global as always; the patches from the last block read out anew
            from ..patch_readouts import last_block_input, readout_patches

            pooled, x = last_block_input(visual, images)
            return pooled, readout_patches(visual, x, readout)
        out = visual.forward_intermediates(images, indices=1, normalize_intermediates=True, output_fmt="NLC")
        # normalize_intermediates applies ln_post, as the pooled path does; the class token is split off
        return out["image_features"], project(out["image_intermediates"][-1], visual.proj)

    def text_forward(self, tokens, truncate=True):
        # encode_text step by step on its public modules: forward_intermediates always runs
        # the whole context, and a causal tower lets the batch stop at its longest caption
        t = self.cut(tokens, truncate)
        m, L = self.model, t.ids.shape[1]
        cast = m.transformer.get_cast_dtype()
        x = m.token_embedding(t.ids).to(cast) + m.positional_embedding[:L].to(cast)
        causal = m.attn_mask[:L, :L] if m.attn_mask is not None else None
        x = m.ln_final(m.transformer(x, attn_mask=causal))
        pooled = text_global_pool(x, t.ids, m.text_pool_type, eos_token_id=getattr(m, "text_eos_id", None))
        return project(pooled, m.text_projection), project(x, m.text_projection), t.mask
