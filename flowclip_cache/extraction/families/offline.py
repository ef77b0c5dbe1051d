"""Offline stand-ins for files that normally come from the Hugging Face hub: a tokenizer
built from a word list (SigLIP-like or BERT-like) and a BLIP model folder (config,
tokenizer, preprocessor config). Tests, benchmarks and a first try of the SigLIP and BLIP
families use them with random weights; real work uses the real files."""

from __future__ import annotations

import json
import os

WORDS = (
    "a an the red green blue yellow purple orange cube sphere cylinder cone small large big tiny left right "
    "of to on in is and with near above below behind two three four photo picture scene square circle"
).split()
BLIP_SPECIALS = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


def _word_level(specials: dict, template: str, pairs):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {**specials, **{w: i + len(specials) for i, w in enumerate(WORDS)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token=[k for k in specials if "unk" in k.lower()][0]))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(single=template, special_tokens=pairs)
    return tk


def siglip_like_tokenizer(folder: str) -> str:
    """No start token, </s> at the end, and </s> (id 1) also the pad token, as in SigLIP's
    own tokenizer: a mask from 'id != pad' would drop the real </s>."""
    from transformers import PreTrainedTokenizerFast

    tk = _word_level({"<pad>": 0, "</s>": 1, "<unk>": 2}, "$A </s>", [("</s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="</s>", eos_token="</s>", unk_token="<unk>").save_pretrained(
        folder
    )
    return folder


def blip_folder(folder: str, small: bool = True) -> str:
    """A BLIP ITC model folder. small: 64 px images in 16 patches, 2-layer towers, 32-d ITC
    space (tests); else BLIP base's shapes (384 px, 576 patches, ViT-B/16 and BERT-base,
    256-d ITC space: benchmarks)."""
    from transformers import BlipConfig, PreTrainedTokenizerFast

    os.makedirs(folder, exist_ok=True)
    tk = _word_level(BLIP_SPECIALS, "[CLS] $A [SEP]", [("[CLS]", 2), ("[SEP]", 3)])
    PreTrainedTokenizerFast(
        tokenizer_object=tk,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    ).save_pretrained(folder)
    text = dict(vocab_size=len(BLIP_SPECIALS) + len(WORDS), bos_token_id=2, sep_token_id=3, pad_token_id=0)
    if small:
        shape = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
        cfg = BlipConfig(
            text_config=dict(max_position_embeddings=64, encoder_hidden_size=64, **text, **shape),
            vision_config=dict(image_size=64, patch_size=16, **shape),
            image_text_hidden_size=32,
        )
        size = 64
    else:
        cfg = BlipConfig(
            text_config=text, vision_config=dict(image_size=384, patch_size=16), image_text_hidden_size=256
        )
        size = 384
    cfg.save_pretrained(folder)
    json.dump(
        {
            "size": {"height": size, "width": size},
            "resample": 3,
            "image_mean": [0.48145466, 0.4578275, 0.40821073],
            "image_std": [0.26862954, 0.26130258, 0.27577711],
        },
        open(os.path.join(folder, "preprocessor_config.json"), "w"),
    )
    return folder
