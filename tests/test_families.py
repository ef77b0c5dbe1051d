"""Encoder families (extraction/families/): each gives the store the same features, equal to
its library's own encode functions, with patches and tokens equal to an independent
computation written here, masks equal to the tokenizer's attention mask, and (non-causal
towers) features that do not depend on the batch they were encoded in. Random weights,
built offline from configs; the HF tokenizers and the BLIP config are built in conftest."""

import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from flowclip_cache.cli import main
from flowclip_cache.errors import FlowclipError
from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve
from flowclip_cache.extraction.features import encode_images, encode_texts, image_features
from flowclip_cache.store.integrity import store_problems

CAPTIONS = ["a red cube", "two blue spheres left of a large green cylinder on the table", "photo"]
EXACT = dict(rtol=0, atol=2e-6)  # FP32 round-off, before FP16 rounding


def _images(size, n=2, seed=0):
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


# -- OpenAI-style CLIP backbones (Tab. 6) ----------------------------------------------------
@pytest.mark.parametrize(
    "model,patches,dim",
    [("ViT-B-32", 49, 512), ("ViT-B-16", 196, 512), ("ViT-L-14", 256, 768), ("ViT-L-14-336", 576, 768)],
)
def test_clip_backbones_resolve_to_their_patch_counts(model, patches, dim):
    enc = resolve(EncoderSpec(model))
    assert (enc.num_patches, enc.dim, enc.family.name) == (patches, dim, "openai-clip")
    assert "adapter" not in enc.config  # stores made before families keep their fingerprint


def test_openai_fingerprints_are_those_of_stores_made_before_families():
    """Golden: the fingerprint (without library versions) printed by the code before
    encoder families existed; a change here orphans every existing store."""
    import copy

    from flowclip_cache.hashing import fingerprint_of

    golden = {
        ("flowclip-tiny-vit", "none"): "fab95d9d060b757afa83b82a5a207d0d816b0104f14c55bbaf142a474015e854",
        ("ViT-B-32", "none"): "61de68c54f82fd7b0329b50396d24cff2421e47253e575acc40a1b1987e2d009",
        ("ViT-L-14", "none"): "c22c513d41d852f11ff463638a352b9aafaa8b30b314cc2dfebecb9401f37e5a",
    }
    for (model, pretrained), want in golden.items():
        cfg = copy.deepcopy(resolve(EncoderSpec(model, pretrained)).config)
        cfg.pop("versions")
        assert fingerprint_of(cfg) == want, model


@torch.no_grad()
def test_vit_l14_336_features_match_open_clip():
    enc = load_model(resolve(EncoderSpec("ViT-L-14-336")))
    x = _images(336, n=1)
    # the family's forward itself (encode_images pads every forward to 16 images, a 16x cost
    # here; its padding is checked by the input-alone tests)
    g, p = image_features(enc, x)
    v = enc.model.visual
    v.output_tokens = True  # open_clip's own path (one forward: the pooled embedding and the tokens)
    try:
        pooled, tokens = v(x)
    finally:
        v.output_tokens = False
    torch.testing.assert_close(g, F.normalize(pooled, dim=-1), **EXACT)
    assert p.shape == (1, 576, 768)
    torch.testing.assert_close(p, F.normalize(tokens @ v.proj, dim=-1), **EXACT)


# -- SigLIP / SigLIP2 (open_clip, timm towers) ----------------------------------------------------
@pytest.fixture(scope="module", params=["ViT-B-16-SigLIP", "ViT-B-16-SigLIP2"])
def siglip(request, siglip_tokenizer):
    return load_model(resolve(EncoderSpec(request.param, tokenizer=siglip_tokenizer)))


@torch.no_grad()
def test_siglip_image_features(siglip):
    x = _images(224)
    g, p = image_features(siglip, x)  # the family's forward (extract pads it to 16 images)
    torch.testing.assert_close(g, F.normalize(siglip.model.encode_image(x), dim=-1), **EXACT)
    # independent: timm's forward_features (patch embed, blocks, final norm; no class token)
    visual = siglip.model.visual
    assert visual.trunk.num_prefix_tokens == 0
    direct = visual.head(visual.trunk.forward_features(x))
    assert p.shape == (2, 196, 768) == direct.shape
    torch.testing.assert_close(p, F.normalize(direct, dim=-1), **EXACT)


@torch.no_grad()
def test_siglip_text_features_and_mask(siglip):
    tok = siglip.tokenize(CAPTIONS)
    assert torch.equal(tok.ids, siglip.tokenizer(CAPTIONS))  # open_clip's own tokenizer's ids
    hf = siglip.tokenizer.tokenizer(
        [siglip.tokenizer.clean_fn(c) for c in CAPTIONS], max_length=64, padding="max_length", truncation=True
    )
    assert tok.mask.long().tolist() == hf["attention_mask"]
    pad = siglip.config["tokenizer"]["pad_id"]
    assert pad == 1 and (tok.ids[tok.mask] == pad).sum() == len(CAPTIONS)  # the real </s> shares the pad id
    f = encode_texts(siglip, tok)
    torch.testing.assert_close(f.sentence, F.normalize(siglip.model.encode_text(tok.ids), dim=-1), **EXACT)
    assert f.tokens.shape[1] == 64  # never cut: the tower is not causal
    text = siglip.model.text
    text.output_tokens = True  # open_clip's own token path, then the projection
    try:
        pooled, states = text(tok.ids)
    finally:
        text.output_tokens = False
    torch.testing.assert_close(f.tokens, F.normalize(text.text_projection(states), dim=-1), **EXACT)
    # projected the way the sentence is: the pooled (last) position's token is the sentence
    torch.testing.assert_close(f.tokens[:, -1], f.sentence, **EXACT)
    assert f.mask.tolist() == tok.mask.tolist()


@torch.no_grad()
def test_siglip_features_do_not_depend_on_the_batch(siglip):
    alone = encode_texts(siglip, siglip.tokenize(CAPTIONS[:1]))
    mixed = encode_texts(siglip, siglip.tokenize(CAPTIONS[1:] + CAPTIONS[:1]))
    torch.testing.assert_close(alone.sentence[0], mixed.sentence[-1], **EXACT)
    torch.testing.assert_close(alone.tokens[0], mixed.tokens[-1], **EXACT)


def test_siglip_fingerprint_records_adapter_tokenizer_and_logit_bias(siglip_tokenizer, tmp_path):
    from safetensors.torch import save_file

    enc = resolve(EncoderSpec("ViT-B-16-SigLIP", tokenizer=siglip_tokenizer))
    c = enc.config
    assert c["adapter"] == {"name": "siglip", "version": 2} and c["num_patches"] == 196
    assert c["tokenizer"]["name"] == "local" and len(c["tokenizer"]["sha256"]) == 64
    assert c["tokenizer"]["context_length"] == 64 and c["logit_bias"] == -10
    assert c["preprocess"]["mean"] == [0.5, 0.5, 0.5]  # SigLIP's tag, also for random weights
    # a checkpoint's logit bias is read from its file and changes the fingerprint
    model = load_model(enc).model
    with torch.no_grad():
        model.logit_bias.fill_(-7.5)
    path = tmp_path / "siglip.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    other = resolve(EncoderSpec("ViT-B-16-SigLIP", str(path), tokenizer=siglip_tokenizer))
    assert other.config["logit_bias"] == -7.5 and other.fingerprint != enc.fingerprint
    # another tokenizer's content is another fingerprint, whatever its folder is called
    import shutil

    copy = tmp_path / "tok-copy"
    shutil.copytree(siglip_tokenizer, copy)
    assert resolve(EncoderSpec("ViT-B-16-SigLIP", tokenizer=str(copy))).fingerprint == enc.fingerprint
    (copy / "tokenizer.json").write_text((copy / "tokenizer.json").read_text().replace('"cube"', '"cubes"'))
    assert resolve(EncoderSpec("ViT-B-16-SigLIP", tokenizer=str(copy))).fingerprint != enc.fingerprint


def test_siglip_tokenizer_offline_fails_fast(monkeypatch):
    import time

    from flowclip_cache.errors import WeightsUnavailable

    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t = time.perf_counter()
    with pytest.raises(WeightsUnavailable, match="or pass a local folder"):
        resolve(EncoderSpec("ViT-B-16-SigLIP"))  # timm/ViT-B-16-SigLIP is not in the cache
    with pytest.raises(WeightsUnavailable, match="huggingface-cli download Salesforce/blip-itm-base-coco"):
        resolve(EncoderSpec("blip:Salesforce/blip-itm-base-coco"))
    assert time.perf_counter() - t < 5


# -- BLIP ITC (transformers) ----------------------------------------------------------------
@pytest.fixture(scope="module")
def blip(blip_folder):
    return load_model(resolve(EncoderSpec(f"blip:{blip_folder}")))


@torch.no_grad()
def test_blip_features_equal_its_itc_and_an_independent_path(blip):
    x = _images(64)
    tok = blip.tokenize(CAPTIONS)
    g, p = encode_images(blip, x)
    f = encode_texts(blip, tok)
    # the library's own ITC similarity (BlipForImageTextRetrieval, use_itm_head=False)
    itc = blip.model(input_ids=tok.ids, attention_mask=tok.mask.long(), pixel_values=x, use_itm_head=False).itm_score
    torch.testing.assert_close(g @ f.sentence.T, itc, **EXACT)
    # independent: the vision encoder's last hidden state through post_layernorm by hand
    vm = blip.model.vision_model
    hidden = vm(pixel_values=x, output_hidden_states=True).hidden_states[-1]
    direct = blip.model.vision_proj(vm.post_layernorm(hidden))
    torch.testing.assert_close(g, F.normalize(direct[:, 0], dim=-1), **EXACT)
    torch.testing.assert_close(p, F.normalize(direct[:, 1:], dim=-1), **EXACT)
    assert p.shape == (2, 16, 32) and blip.config["num_patches"] == 16
    states = blip.model.text_encoder(
        input_ids=tok.ids, attention_mask=tok.mask.long(), output_hidden_states=True
    ).hidden_states[-1]
    torch.testing.assert_close(f.tokens, F.normalize(blip.model.text_proj(states), dim=-1), **EXACT)
    hf = blip.tokenizer(CAPTIONS, max_length=35, padding="max_length", truncation=True)
    assert f.mask.long().tolist() == hf["attention_mask"] and f.tokens.shape[1] == 35


@torch.no_grad()
def test_blip_features_do_not_depend_on_the_batch(blip):
    alone = encode_texts(blip, blip.tokenize(CAPTIONS[:1]))
    mixed = encode_texts(blip, blip.tokenize(CAPTIONS[1:] + CAPTIONS[:1]))
    torch.testing.assert_close(alone.sentence[0], mixed.sentence[-1], **EXACT)
    torch.testing.assert_close(alone.tokens[0][alone.mask[0]], mixed.tokens[-1][mixed.mask[-1]], **EXACT)


def test_blip_weights_from_safetensors_only(blip, blip_folder, tmp_path):
    import shutil

    folder = tmp_path / "blip-weights"
    shutil.copytree(blip_folder, folder)
    with torch.no_grad():
        blip.model.vision_proj.weight.mul_(2)
    blip.model.save_pretrained(str(folder), safe_serialization=True)
    enc = resolve(EncoderSpec(f"blip:{folder}", "hf"))
    assert enc.config["weights"]["source"] == "file" and enc.config["model"] == "local"
    loaded = load_model(enc)
    x = _images(64)
    torch.testing.assert_close(encode_images(loaded, x)[1], encode_images(blip, x)[1], **EXACT)
    (folder / "pytorch_model.bin").write_bytes(b"not opened")
    with pytest.raises(FlowclipError, match="pickles flowclip does not open"):
        resolve(EncoderSpec(f"blip:{folder}", str(folder / "pytorch_model.bin")))


def test_blip_without_transformers_says_how_to_install(blip_folder, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_transformers(name, *a, **k):
        if name == "transformers" or name.startswith("transformers."):
            raise ImportError("no transformers")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_transformers)
    with pytest.raises(FlowclipError, match=r"pip install 'flowclip\[hf\]'"):
        resolve(EncoderSpec(f"blip:{blip_folder}"))


def test_unknown_family_names_the_supported_ones():
    with pytest.raises(FlowclipError, match="unknown model config"):
        resolve(EncoderSpec("ViT-Q-99"))
    with pytest.raises(FlowclipError, match="no encoder family serves 'RN50'.*SigLIP.*blip:"):
        resolve(EncoderSpec("RN50"))


# -- every dimension; one path from extract to score -----------------------------------------
@pytest.mark.parametrize("d", [256, 512, 768, 1024])
def test_flow_head_has_3d2_parameters_at_every_dimension(d):
    from flowclip_cache.training.head_run import head_parameters
    from flowclip_cache.training.loop import TrainConfig

    assert head_parameters(TrainConfig(head="flow"), d) == 3 * d * d
    assert head_parameters(TrainConfig(head="global"), d) == d * d


FAMILY_RUNS = {
    "siglip": lambda fx: ["--model", "ViT-B-16-SigLIP", "--pretrained", "none", "--tokenizer", fx["siglip_tokenizer"]],
    "clip-l14": lambda fx: ["--model", "ViT-L-14", "--pretrained", "none"],
    "blip": lambda fx: ["--model", f"blip:{fx['blip_folder']}", "--pretrained", "none"],
}


@pytest.mark.parametrize("family", list(FAMILY_RUNS))
def test_family_extract_train_score_end_to_end(family, tmp_path, siglip_tokenizer, blip_folder):
    from flowclip_cache.store import IMAGE, FeatureStore
    from flowclip_cache.synthetic.sample import make_sample

    s = make_sample(str(tmp_path / "sample"), n_images=6)
    store, run, res = (str(tmp_path / n) for n in ("store", "run", "res"))
    args = FAMILY_RUNS[family]({"siglip_tokenizer": siglip_tokenizer, "blip_folder": blip_folder})
    r = CliRunner().invoke(
        main,
        [
            "extract",
            "--store",
            store,
            *args,
            "--manifest",
            s["training"],
            "--manifest",
            s["candidates"],
            "--image-root",
            s["image_root"],
            "--workers",
            "0",
            "--batch-size",
            "6",  # one forward (each is padded to 16 images: a second would double the cost)
            "--quiet",
        ],
    )
    assert r.exit_code == 0, r.output
    fs = FeatureStore(store)
    assert store_problems(fs.root) == [] and fs.count(IMAGE) == 6
    r = CliRunner().invoke(
        main,
        [
            "train-head",
            "--store",
            store,
            "--train",
            s["training"],
            "--out",
            run,
            "--epochs",
            "1",
            "--batch-size",
            "4",
            "--quiet",
        ],
    )
    assert r.exit_code == 0, r.output
    d = fs.meta["dim"]
    assert f"flow head at d={d}: {3 * d * d:,} parameters" in r.output
    import json

    assert json.load(open(os.path.join(run, "config.json")))["parameters"] == 3 * d * d
    r = CliRunner().invoke(
        main,
        [
            "score",
            "--store",
            store,
            "--manifests",
            s["candidates"],
            "--scorer",
            "clip",
            "--scorer",
            f"flow={run}",
            "--out",
            res,
            "--bootstrap",
            "0",
            "--quiet",
        ],
    )
    assert r.exit_code == 0, r.output
    assert os.path.exists(os.path.join(res, "records.parquet"))
    # a head from another encoder is refused
    other = str(tmp_path / "other")
    r = CliRunner().invoke(
        main,
        [
            "extract",
            "--store",
            other,
            "--model",
            "flowclip-tiny-vit",
            "--pretrained",
            "none",
            "--manifest",
            s["candidates"],
            "--image-root",
            s["image_root"],
            "--workers",
            "0",
            "--quiet",
        ],
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        main,
        [
            "score",
            "--store",
            other,
            "--manifests",
            s["candidates"],
            "--scorer",
            run,
            "--out",
            str(tmp_path / "res2"),
            "--bootstrap",
            "0",
            "--quiet",
        ],
    )
    assert r.exit_code != 0 and "encoder" in r.output.lower()
    np.testing.assert_array_equal(fs.load_images(fs.keys(IMAGE)[:1]).patches.shape[1:], (fs.meta["num_patches"], d))


def test_models_lists_families_tags_and_the_weights_found_here(tmp_path):
    """`flowclip models` offline: ViT-B-32's tags, the tiny CLIP's shipped weights, the BLIP
    line; a tag is starred only once its weights are in the (laid-out) Hugging Face cache."""
    import subprocess
    import sys

    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"))
    run = lambda: subprocess.run(
        [sys.executable, "-m", "flowclip_cache", "models"], env=env, capture_output=True, text=True
    )
    r = run()
    assert r.returncode == 0, r.stderr
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.startswith("  ")}
    assert "openai" in lines["ViT-B-32"] and "openai*" not in lines["ViT-B-32"]
    assert "synthetic*" in lines["flowclip-tiny-clip"] and "blip:<Hugging Face repo" in r.stdout
    # which tiny CLIP is which, read from its card
    assert "causal text tower, global InfoNCE alone" in lines["flowclip-tiny-clip"]
    assert "bidirectional text tower, global InfoNCE alone" in lines["flowclip-tiny-clip-bidir"]
    assert "grounded: global InfoNCE + FILIP's token-wise loss; colour words" in lines["flowclip-tiny-clip-filip"]
    #: the grounded twin pretrained without world 0's held-out pairs says so from its card
    clean = lines["flowclip-tiny-clip-filip-clean"]
    assert "synthetic*" in clean and "never saw synthetic world 0's held-out colour-shape pairs" in clean
    assert r.stdout.index("openai-clip:") < r.stdout.index("siglip:")
    snap = tmp_path / "hub" / "models--timm--vit_base_patch32_clip_224.openai"
    (snap / "snapshots" / "abc").mkdir(parents=True)
    (snap / "snapshots" / "abc" / "open_clip_model.safetensors").write_bytes(b"x")
    (snap / "refs").mkdir()
    (snap / "refs" / "main").write_text("abc")
    lines = {ln.split()[0]: ln for ln in run().stdout.splitlines() if ln.startswith("  ")}
    assert "openai*" in lines["ViT-B-32"] and "laion2b_s34b_b79k*" not in lines["ViT-B-32"]


def test_models_lists_without_torch_what_open_clip_itself_lists(monkeypatch):
    """open_clip's files read as data give the list open_clip gives (every config, every tag,
    each tag's weights source); `flowclip models` then imports no torch; a layout the reader
    does not expect falls back to open_clip itself."""
    import subprocess
    import sys

    from flowclip_cache.extraction.families import claims, listing, open_clip_tables
    from flowclip_cache.extraction.families.registry import FAMILIES

    assert [n for n, _ in claims.CONFIG_FAMILIES] == [f.name for f in FAMILIES if f.name != "blip-itc"]
    for tags_only in (True, False):
        assert listing.list_models(tags_only) == listing.list_models(tags_only, torch_free=False)
    import open_clip

    table = open_clip_tables.pretrained_table()
    assert [(m, t) for m in table for t in table[m]] == open_clip.list_pretrained()
    for m, tags in table.items():
        for t, cfg in tags.items():
            want = open_clip.get_pretrained_cfg(m, t)
            assert (cfg.get("hf_hub", ""), cfg.get("url", "")) == (want.get("hf_hub", ""), want.get("url", ""))
    code = "import sys; from flowclip_cache.cli import main; main(['models'], standalone_mode=False); " \
        "assert 'torch' not in sys.modules and 'open_clip' not in sys.modules, 'imported'"  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1")
    )
    assert r.returncode == 0 and "ViT-B-32" in r.stdout, r.stderr

    def unreadable():
        raise open_clip_tables.TableUnreadable("changed")

    monkeypatch.setattr(listing, "pretrained_table", unreadable)
    assert listing.list_models() == listing.list_models(torch_free=False)


def test_synthetic_weights_for_another_model_point_to_tags_not_the_tiny_recipe():
    from flowclip_cache.errors import WeightsUnavailable

    with pytest.raises(WeightsUnavailable) as e:
        resolve(EncoderSpec("ViT-B-32", pretrained="synthetic"))
    assert "flowclip models" in str(e.value) and "pretrain-tiny-clip" not in str(e.value)


def test_missing_tiny_weights_name_their_own_recipe(monkeypatch, tmp_path):
    """A tiny model with a packaged recipe is told that recipe (the bidirectional tower's is
    pretrain_tiny_clip_bidir); one without is told the shipped recipe with its model."""
    from flowclip_cache.errors import WeightsUnavailable
    from flowclip_cache.extraction.families import locate

    empty = tmp_path / "weights"
    empty.mkdir()
    monkeypatch.setattr(locate, "WEIGHTS_DIR", str(empty))
    for model, fix in (
        ("flowclip-tiny-clip-bidir", "pretrain-tiny-clip pretrain_tiny_clip_bidir"),
        ("flowclip-tiny-vit", "pretrain-tiny-clip pretrain_tiny_clip model=flowclip-tiny-vit"),
    ):
        with pytest.raises(WeightsUnavailable, match=fix):
            locate.shipped_weights(model)


def test_an_open_clip_hub_model_extracts_as_its_config_and_weights(lab, tmp_path, monkeypatch):
    """--model hf-hub:ORG/REPO (open_clip's schema) --pretrained hf: the repository's config
    and safetensors weights, read from the Hugging Face cache offline, give every bit the
    built-in config with the same weights gives; the store records the repository as the
    weights' source, and extract's flags for such a store name it again."""
    import json
    import shutil

    from click.testing import CliRunner

    import flowclip_cache as fc
    from flowclip_cache.cli import main
    from flowclip_cache.extraction.families.locate import shipped_weights
    from flowclip_cache.store import FeatureStore
    from flowclip_cache.store.manifest_keys import extract_flags

    cfg_dir = os.path.join(os.path.dirname(shipped_weights("flowclip-tiny-clip")), "..", "model_configs")
    model_cfg = json.load(open(os.path.join(cfg_dir, "flowclip-tiny-clip.json")))
    repo = tmp_path / "hub" / "models--me--tiny-clip"
    snap = repo / "snapshots" / "c0ffee"
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("c0ffee")
    (snap / "open_clip_config.json").write_text(json.dumps({"model_cfg": model_cfg, "preprocess_cfg": {}}))
    shutil.copyfile(shipped_weights("flowclip-tiny-clip"), snap / "open_clip_model.safetensors")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as test_sharing.py lays out a cache
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    stores = {}
    for name, model, pretrained in [
        ("hub", "hf-hub:me/tiny-clip", "hf"),
        ("builtin", "flowclip-tiny-clip", "synthetic"),
    ]:
        stores[name] = str(tmp_path / f"store-{name}")
        args = ["extract", "--store", stores[name], "--model", model, "--pretrained", pretrained,
                "--manifest", lab["candidates"], "--image-root", lab["image_root"], "--quiet"]  # fmt: skip
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
    hub, builtin = FeatureStore(stores["hub"]), FeatureStore(stores["builtin"])
    assert hub.encoder_config["weights"]["source"] == "hf-hub:me/tiny-clip"
    assert hub.encoder_config["weights"]["sha256"] == builtin.encoder_config["weights"]["sha256"]
    assert extract_flags(hub.encoder_config) == ["--model", "hf-hub:me/tiny-clip", "--pretrained", "hf"]
    a, b = (fc.read_features(s, lab["candidates"], image_root=lab["image_root"]) for s in (builtin, hub))
    for name in ("image_global", "image_patches", "caption_global", "caption_tokens"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    args = ["extract", "--store", str(tmp_path / "x"), "--model", "hf-hub:me/tiny-clip", "--pretrained", "openai",
            "--manifest", lab["candidates"], "--image-root", lab["image_root"]]  # fmt: skip
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "--pretrained hf (the repository's weights) or none" in r.output
