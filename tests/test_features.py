"""Features equal open_clip's own encode_image / encode_text, and the patch and token
paths equal a direct computation."""
import pytest
import torch
import torch.nn.functional as F

from flowclip_cache.encoders import EncoderSpec, load_model, resolve
from flowclip_cache.features import encode_images, encode_texts, valid_mask


@pytest.fixture(scope="module", params=["flowclip-tiny-vit", "ViT-B-32"])
def model_and_tok(request):
    enc = load_model(resolve(EncoderSpec(request.param)))
    return enc.model, enc


def direct_patches(model, images):
    """open_clip's own tokens path: output_tokens=True, then the visual projection."""
    v = model.visual
    v.output_tokens = True
    try:
        pooled, tokens = v(images)
    finally:
        v.output_tokens = False
    return F.normalize(tokens @ v.proj, dim=-1)


def direct_token_states(model, ids):
    """encode_text at the full context, without pooling."""
    x = model.token_embedding(ids) + model.positional_embedding
    x = model.transformer(x, attn_mask=model.attn_mask)
    x = model.ln_final(x) @ model.text_projection
    return F.normalize(x, dim=-1)


@torch.no_grad()
def test_image_features_match_open_clip(model_and_tok):
    model, enc = model_and_tok
    size = model.visual.image_size[0]
    x = torch.randn(3, 3, size, size, generator=torch.Generator().manual_seed(0))
    g, p = encode_images(enc, x)
    torch.testing.assert_close(g, F.normalize(model.encode_image(x), dim=-1), rtol=0, atol=1e-6)
    torch.testing.assert_close(p, direct_patches(model, x), rtol=0, atol=1e-6)
    grid = size // model.visual.patch_size[0]
    assert p.shape == (3, grid * grid, g.shape[1])
    assert torch.allclose(p.norm(dim=-1), torch.ones(3, grid * grid), atol=1e-5)


@torch.no_grad()
def test_text_features_match_open_clip_with_truncated_batches(model_and_tok):
    model, enc = model_and_tok
    caps = ["a red cube", "two blue spheres to the left of a large green cylinder on a table", "x"]
    ids = enc.tokenizer(caps)
    f = encode_texts(enc, enc.tokenize(caps))
    full = model.encode_text(ids)
    torch.testing.assert_close(f.sentence, F.normalize(full, dim=-1), rtol=0, atol=2e-6)
    L = f.tokens.shape[1]
    assert L == int((ids != 0).sum(1).max()) < ids.shape[1]       # cut to the longest caption
    direct = direct_token_states(model, ids)[:, :L]
    torch.testing.assert_close(f.tokens, direct, rtol=0, atol=2e-6)
    # what is stored: FP16 of the same numbers. Rounding each adds at most half an FP16 step,
    # so the stored values differ by at most the FP32 difference plus one step (values that
    # differ by round-off can round either way; how often depends on the BLAS)
    step = torch.clamp(direct.abs(), min=2 ** -14) * 2 ** -10
    gap16 = (f.tokens.half().float() - direct.half().float()).abs()
    assert (gap16 <= (f.tokens - direct).abs() + step * 1.0001).all()
    assert f.mask.sum(1).tolist() == (ids != 0).sum(1).tolist()


def test_masks():
    ids = torch.tensor([[49406, 10, 11, 49407, 0, 0], [49406, 49407, 0, 0, 0, 0]])
    assert valid_mask(ids != 0, "nonpad").sum(1).tolist() == [4, 2]
    content = valid_mask(ids != 0, "content")
    assert content.tolist()[0] == [False, True, True, False, False, False]
    assert content.sum(1).tolist() == [2, 0]
    # a family without a start token (SigLIP: tokens then </s>) drops the end only
    siglip = valid_mask(torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]]).bool(), "content", (0, 1))
    assert siglip.tolist() == [[True, True, False, False], [False, False, False, False]]


def test_quick_gelu_is_part_of_the_fingerprint():
    a = resolve(EncoderSpec("flowclip-tiny-vit"))
    b = resolve(EncoderSpec("flowclip-tiny-vit", force_quick_gelu=True))
    assert a.fingerprint != b.fingerprint
    from flowclip_cache.encoders import diff_configs
    assert diff_configs(a.config, b.config) == ["model_cfg.quick_gelu: False != True"]


def test_weights_unavailable_fail_fast(monkeypatch):
    import time

    from flowclip_cache.errors import WeightsUnavailable
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t = time.perf_counter()
    with pytest.raises(WeightsUnavailable, match="--pretrained /path/to"):
        resolve(EncoderSpec("ViT-B-32", "openai"))
    assert time.perf_counter() - t < 5


def test_local_checkpoint_is_hashed_and_loads(tmp_path, tiny_model, tiny_encoder):
    from safetensors.torch import save_file
    model = tiny_model.model
    path = tmp_path / "tiny.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    enc = resolve(EncoderSpec("flowclip-tiny-vit", str(path)))
    assert enc.config["weights"]["source"] == "file" and len(enc.config["weights"]["sha256"]) == 64
    loaded = load_model(enc)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(encode_images(loaded, x)[0], encode_images(tiny_model, x)[0])
