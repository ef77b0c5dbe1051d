import os

os.environ["HF_HUB_OFFLINE"] = "1"          # the suite never downloads
os.environ.setdefault("TQDM_DISABLE", "1")

import pytest  # noqa: E402

from flowclip_cache.encoders import EncoderSpec, load_model, register_package_configs, resolve  # noqa: E402

register_package_configs()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the official benchmark files (never copied into the repository); FLOWCLIP_BENCHMARK_FILES points elsewhere
SHARED_BENCHMARKS = os.environ.get("FLOWCLIP_BENCHMARK_FILES") or os.path.join(ROOT, "..", "shared", "benchmarks")
TINY = "flowclip-tiny-vit"


@pytest.fixture(scope="session")
def tiny_encoder():
    return resolve(EncoderSpec(TINY))


@pytest.fixture(scope="session")
def tiny_model(tiny_encoder):
    return load_model(tiny_encoder)


@pytest.fixture
def sample(tmp_path):
    from flowclip_cache.sample import make_sample
    return make_sample(str(tmp_path / "sample"), n_images=12)


def needs_shared(*parts):
    path = os.path.join(SHARED_BENCHMARKS, *parts)
    return pytest.mark.skipif(not os.path.exists(path),
                              reason=f"official benchmark files not present at {path}; set FLOWCLIP_BENCHMARK_FILES "
                                     f"to the folder holding sugarcrepe/, abc6k/, aro/ (default ../shared/benchmarks)")


# -- Hugging Face families, built offline: tokenizers from a word list, a small BLIP config --
HF_WORDS = ("a an the red green blue yellow purple orange cube sphere cylinder cone small large big tiny left right "
            "of to on in is and with near above below behind two three four photo picture scene square circle").split()


def _word_level(specials: dict, template: str, pairs):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    vocab = {**specials, **{w: i + len(specials) for i, w in enumerate(HF_WORDS)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token=[k for k in specials if "unk" in k.lower()][0]))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.post_processor = processors.TemplateProcessing(single=template, special_tokens=pairs)
    return tk


@pytest.fixture(scope="session")
def siglip_tokenizer(tmp_path_factory):
    """A SigLIP-like tokenizer: no start token, </s> at the end, and </s> (id 1) also the
    pad token, as in SigLIP's own: a mask from 'id != pad' would drop the real </s>."""
    pytest.importorskip("transformers", reason="the SigLIP family needs transformers (pip install 'flowclip[hf]')")
    from transformers import PreTrainedTokenizerFast
    folder = tmp_path_factory.mktemp("siglip-tokenizer")
    tk = _word_level({"<pad>": 0, "</s>": 1, "<unk>": 2}, "$A </s>", [("</s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="</s>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(str(folder))
    return str(folder)


@pytest.fixture(scope="session")
def blip_folder(tmp_path_factory):
    """A small BLIP ITC model folder (config, BERT-style tokenizer, preprocessor config):
    64 px images in 16 patches, 2-layer towers, 32-d ITC space."""
    import json
    pytest.importorskip("transformers", reason="the BLIP family needs transformers (pip install 'flowclip[hf]')")
    from transformers import BlipConfig, PreTrainedTokenizerFast
    folder = tmp_path_factory.mktemp("blip")
    specials = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    tk = _word_level(specials, "[CLS] $A [SEP]", [("[CLS]", 2), ("[SEP]", 3)])
    PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]").save_pretrained(str(folder))
    small = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
    BlipConfig(text_config=dict(vocab_size=len(specials) + len(HF_WORDS), max_position_embeddings=64,
                                encoder_hidden_size=64, bos_token_id=2, sep_token_id=3, pad_token_id=0, **small),
               vision_config=dict(image_size=64, patch_size=16, **small),
               image_text_hidden_size=32).save_pretrained(str(folder))
    json.dump({"size": {"height": 64, "width": 64}, "resample": 3, "image_mean": [0.48145466, 0.4578275, 0.40821073],
               "image_std": [0.26862954, 0.26130258, 0.27577711]}, open(folder / "preprocessor_config.json", "w"))
    return str(folder)
