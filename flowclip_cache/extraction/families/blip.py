"""BLIP's image–text contrastive (ITC) heads through Hugging Face transformers
(BlipForImageTextRetrieval, e.g. Salesforce/blip-itm-base-coco). Model name:
``blip:<repo id or local folder>`` (config.json, tokenizer, preprocessor_config.json).

global   = vision_proj(the vision model's class token), 256-d in the released models
patches  = vision_proj of the other tokens (576 at 384 px), the same projection
sentence = text_proj(the text encoder's [CLS] state): BLIP's own ITC text feature
tokens   = text_proj of every position's state
mask     = the tokenizer's attention mask; text at most 35 tokens (BLIP's retrieval setting)

The text encoder is bidirectional (BERT), so captions run at the full length.
Weights are read from safetensors only (a .bin is a pickle: convert it first).
"""

from __future__ import annotations

import json
import os

from ...errors import FlowclipError
from . import hf_common as hf
from .base import DTYPE_POLICY, Family

ADAPTER_VERSION = 1
PREFIX = "blip:"
TEXT_LENGTH = 35
MODEL_FILES = ["config.json", "preprocessor_config.json", "model.safetensors", *hf.TOKENIZER_FILES]
_DROP = ("transformers_version", "_name_or_path", "architectures", "torch_dtype", "dtype")


class BlipITC(Family):
    name = "blip-itc"
    version = ADAPTER_VERSION
    causal_text = False
    special_tokens = (1, 1)  # [CLS] ... [SEP]

    @classmethod
    def claims(cls, model: str) -> bool:
        return model.startswith(PREFIX)

    @classmethod
    def folder(cls, spec, with_weights: bool = False) -> str:
        patterns = MODEL_FILES if with_weights else [p for p in MODEL_FILES if p != "model.safetensors"]
        return hf.local_folder(spec.model[len(PREFIX) :], "BLIP model", patterns)

    @classmethod
    def resolve_config(cls, spec):
        hf.require_transformers("BLIP")
        folder = cls.folder(spec)
        hf_cfg = _read_json(os.path.join(folder, "config.json"))
        if hf_cfg.get("model_type") != "blip":
            raise FlowclipError(f"{folder}/config.json: model_type {hf_cfg.get('model_type')!r}, not 'blip'")
        vision = hf_cfg.get("vision_config", {})
        size, patch = int(vision.get("image_size", 384)), int(vision.get("patch_size", 16))
        checkpoint, weights = cls._weights(spec)
        tok = hf.hf_tokenizer(folder)
        config = {
            "feature_definition": 1,
            "adapter": {"name": cls.name, "version": cls.version},
            "model": hf.source_name(spec.model[len(PREFIX) :]),
            "model_cfg": {
                "embed_dim": int(hf_cfg.get("image_text_hidden_size", 256)),
                "hf_config": {k: v for k, v in hf_cfg.items() if k not in _DROP},
            },
            "num_patches": (size // patch) ** 2,
            "preprocess": _preprocess(folder, size),
            "tokenizer": {
                "name": type(tok).__name__,
                "sha256": hf.folder_digest(folder),
                "context_length": TEXT_LENGTH,
                "pad_id": tok.pad_token_id,
            },
            "weights": weights,
            "token_mask": spec.token_mask,
            "dtype": dict(DTYPE_POLICY),
            "versions": _versions(),
        }
        return config, checkpoint

    @classmethod
    def _weights(cls, spec):
        from ...hashing import file_sha256

        p = spec.pretrained
        if p.lower() in ("none", "random", ""):
            return None, {"source": "random-init", "init_seed": spec.init_seed}
        if os.path.isdir(p):
            p = os.path.join(p, "model.safetensors")
        elif p.lower() in ("hf", "pretrained"):
            p = os.path.join(cls.folder(spec, with_weights=True), "model.safetensors")
        if not p.endswith(".safetensors") or not os.path.isfile(p):
            raise FlowclipError(
                f"BLIP weights {p!r}: give 'hf' (model.safetensors of the model's repo or "
                f"folder), a folder holding model.safetensors, or that file; .bin files are "
                f"pickles flowclip does not open"
            )
        return os.path.abspath(p), {"source": "file", "sha256": file_sha256(p)}

    @classmethod
    def build(cls, enc, device="cpu"):
        import torch
        from open_clip.transform import image_transform
        from transformers import BlipConfig, BlipForImageTextRetrieval

        cfg = BlipConfig.from_dict(enc.config["model_cfg"]["hf_config"])
        if enc.checkpoint is None:
            torch.manual_seed(enc.config["weights"]["init_seed"])
        model = BlipForImageTextRetrieval(cfg)
        if enc.checkpoint is not None:
            from safetensors.torch import load_file

            missing, _ = model.load_state_dict(load_file(enc.checkpoint), strict=False)
            needed = [
                k for k in missing if k.split(".")[0] in ("vision_model", "text_encoder", "vision_proj", "text_proj")
            ]
            if needed:
                raise FlowclipError(
                    f"{enc.checkpoint}: no weights for {len(needed)} ITC parameters "
                    f"(first: {needed[0]}); is it a BlipForImageTextRetrieval checkpoint?"
                )
        model.float().eval().to(device)
        pre = enc.config["preprocess"]
        transform = image_transform(
            pre["image_size"],
            is_train=False,
            mean=tuple(pre["mean"]),
            std=tuple(pre["std"]),
            resize_mode=pre["resize_mode"],
            interpolation=pre["interpolation"],
        )
        return model, transform

    @classmethod
    def make_tokenizer(cls, enc):
        return hf.hf_tokenizer(cls.folder(enc.spec))

    def set_grad_checkpointing(self):
        kwargs = {"use_reentrant": False}  # reentrant checkpoints and DDP do not mix
        if hasattr(self.model, "activation_checkpointing_enable"):  # transformers >= 5.x's name
            self.model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)

    def tokenize(self, texts):
        return hf.hf_tokenize(self.tokenizer, texts, self.context_length)

    def token_strings(self, ids):
        return self.tokenizer.convert_ids_to_tokens([int(i) for i in ids])

    def untruncated_length(self, text):
        return len(self.tokenizer(text)["input_ids"])

    def image_forward(self, images):
        h = self.model.vision_model(pixel_values=images).last_hidden_state  # post-LayerNorm
        proj = self.model.vision_proj
        return proj(h[:, 0]), proj(h[:, 1:])

    def text_forward(self, tokens, truncate=True):
        h = self.model.text_encoder(input_ids=tokens.ids, attention_mask=tokens.mask.long()).last_hidden_state
        proj = self.model.text_proj
        return proj(h[:, 0]), proj(h), tokens.mask


def _read_json(path: str) -> dict:
    try:
        return json.load(open(path))
    except FileNotFoundError:
        raise FlowclipError(f"{path} is missing: a BLIP folder needs config.json") from None
    except json.JSONDecodeError as e:
        raise FlowclipError(f"{path}: not JSON ({e})") from None


def _preprocess(folder: str, size: int) -> dict:
    """BlipImageProcessor's settings: resize to a square (squash), bicubic, then normalise."""
    from .locate import OPENAI_MEAN, OPENAI_STD

    path = os.path.join(folder, "preprocessor_config.json")
    p = _read_json(path) if os.path.isfile(path) else {}
    s = p.get("size", {"height": size, "width": size})
    side = s.get("height", size) if isinstance(s, dict) else int(s)
    if p.get("resample", 3) != 3:
        raise FlowclipError(f"{path}: resample {p['resample']} (flowclip reproduces BLIP's bicubic only)")
    return {
        "image_size": int(side),
        "mean": list(p.get("image_mean", OPENAI_MEAN)),
        "std": list(p.get("image_std", OPENAI_STD)),
        "interpolation": "bicubic",
        "resize_mode": "squash",
    }


def _versions() -> dict:
    import torch
    import transformers

    return {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]}
