"""Features equal open_clip's own encode_image / encode_text, and the patch and token
paths equal a direct computation."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve
from flowclip_cache.extraction.features import encode_images, encode_texts, valid_mask


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
    assert int((ids != 0).sum(1).max()) <= L < ids.shape[1]  # each caption cut to its length bucket
    direct = direct_token_states(model, ids)[:, :L]
    v = f.mask  # the valid tokens: what is stored
    torch.testing.assert_close(f.tokens[v], direct[v], rtol=0, atol=2e-6)
    f, direct = f.__class__(f.sentence, f.tokens[v], f.mask), direct[v]
    # what is stored: FP16 of the same numbers. Rounding each adds at most half an FP16 step,
    # so the stored values differ by at most the FP32 difference plus one step (values that
    # differ by round-off can round either way; how often depends on the BLAS)
    step = torch.clamp(direct.abs(), min=2**-14) * 2**-10
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
    from flowclip_cache.hashing import diff_configs

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


# -- the same input gives the same bits, whatever else is in the batch -----------------------
def _invariance(enc, n_caps=70, n_img=20, trials=3):
    """Encode captions and images whole, then in random subsets and orders: every one must
    come out bit-identical in FP16 (what the store keeps)."""
    import random

    from flowclip_cache.extraction.features import encode_images, encode_texts

    words = "a red cube left of blue sphere on the large small green metal rubber cylinder behind".split()
    rng = random.Random(0)
    caps = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 30))) for _ in range(n_caps)]
    tok = enc.tokenize(caps)
    ref = encode_texts(enc, tok)
    size = enc.config["preprocess"]["image_size"]
    size = size[0] if isinstance(size, (tuple, list)) else size
    X = torch.randn(n_img, 3, size, size, generator=torch.Generator().manual_seed(0))
    g0, p0 = encode_images(enc, X)
    for _ in range(trials):
        idx = rng.sample(range(n_caps), rng.randint(1, n_caps))
        f = encode_texts(enc, tok[torch.tensor(idx)])
        for j, i in enumerate(idx):
            assert torch.equal(f.sentence[j].half(), ref.sentence[i].half()), caps[i]
            assert torch.equal(f.tokens[j][f.mask[j]].half(), ref.tokens[i][ref.mask[i]].half()), caps[i]
        idx = rng.sample(range(n_img), rng.randint(1, n_img))
        g, p = encode_images(enc, X[idx])
        assert torch.equal(g.half(), g0[idx].half()) and torch.equal(p.half(), p0[idx].half())


@torch.no_grad()
def test_bidirectional_tiny_tower_is_open_clips_encode_text_at_full_context():
    """flowclip-tiny-clip-bidir (open_clip's no_causal_mask): the features are encode_text's,
    never cut to a batch's longest caption, and an attribute's state sees its noun (the
    causal tower's does not). Mutation checked: slicing a None mask, or cutting the batch
    as the causal tower does, fails here."""
    enc = load_model(resolve(EncoderSpec("flowclip-tiny-clip-bidir")))
    assert not enc.causal_text and enc.model.attn_mask is None
    caps = ["a red cube", "a red sphere left of a blue cube", "x"]
    ids = enc.tokenizer(caps)
    f = encode_texts(enc, enc.tokenize(caps))
    torch.testing.assert_close(f.sentence, F.normalize(enc.model.encode_text(ids), dim=-1), rtol=0, atol=2e-6)
    assert f.tokens.shape[1] == ids.shape[1] == 32
    torch.testing.assert_close(f.tokens[f.mask], direct_token_states(enc.model, ids)[f.mask], rtol=0, atol=2e-6)
    causal = load_model(resolve(EncoderSpec("flowclip-tiny-clip")))
    for tower, sees in ((enc, True), (causal, False)):
        red = [encode_texts(tower, tower.tokenize([c])).tokens[0, 2] for c in caps[:2]]  # "red" before its noun
        assert bool((red[0] - red[1]).abs().max() > 1e-3) is sees  # not rounding: a causal one is within 1e-6
    planned = resolve(EncoderSpec("flowclip-tiny-clip-bidir"))
    assert not planned.family.text_only(planned).causal_text  # planning (no model) knows it too


@pytest.mark.parametrize("model", ["flowclip-tiny-clip", "flowclip-tiny-clip-bidir", "ViT-B-16"])
def test_features_depend_on_their_input_alone(model):
    """Before fixed shapes, a ViT-B/16 caption changed by 1-2 FP16 ulp with its batch (27-36
    of 36 captions across text batch sizes). Mutation checked: the old encode_texts (one
    forward cut to the batch's longest caption) fails here. (ViT-B/16's images: one padded
    forward of 16 and two trials, the costly part; the tiny towers also cover a second,
    zero-padded image forward.)"""
    big = model == "ViT-B-16"
    _invariance(load_model(resolve(EncoderSpec(model))), n_img=16 if big else 20, trials=2 if big else 3)


def test_siglip_features_depend_on_their_input_alone(siglip_tokenizer):
    _invariance(
        load_model(resolve(EncoderSpec("ViT-B-16-SigLIP", tokenizer=siglip_tokenizer))), n_caps=40, n_img=6, trials=2
    )


def test_blip_features_depend_on_their_input_alone(blip_folder):
    _invariance(load_model(resolve(EncoderSpec(f"blip:{blip_folder}"))), n_caps=70, n_img=20)


@pytest.mark.parametrize(
    "model,backend",
    [("flowclip-tiny-clip", "zarr"), ("flowclip-tiny-clip", "hdf5"), ("ViT-B-16", "zarr"), ("ViT-B-16-SigLIP", "hdf5")],
)
def test_two_stores_of_one_encoder_are_bit_identical(tmp_path, backend, model, request):
    """The same captions and images extracted with other batch sizes and from other
    manifests (a subset, in another order) give bit-identical stored features, for the
    tiny CLIP on both backends, a random ViT-B/16 (zarr) and a random SigLIP (HDF5). (The
    large encoders take one backend each: the backends store the same FP16 arrays, which
    test_store checks; the encoder's batch invariance is what differs between models.)"""
    import pyarrow as pa

    from flowclip_cache.extraction.extract import run_extract
    from flowclip_cache.manifest import Manifest, write_manifest
    from flowclip_cache.store import CAPTION, IMAGE, FeatureStore
    from flowclip_cache.synthetic.sample import make_sample

    tokenizer = request.getfixturevalue("siglip_tokenizer") if "SigLIP" in model else None
    enc = resolve(EncoderSpec(model, tokenizer=tokenizer))
    s = make_sample(str(tmp_path / "s"), n_images=24 if model == "flowclip-tiny-clip" else 8)
    rows = Manifest.read(s["candidates"]).table.to_pylist()
    sub = tmp_path / "sub.parquet"
    write_manifest(sub, pa.Table.from_pylist(rows[::-2]), "candidates")

    def extract(store, manifest, images, captions):
        run_extract(
            store,
            enc,
            [manifest],
            s["image_root"],
            workers=0,
            progress=False,
            batch_size=images,
            text_batch_size=captions,
            log=lambda *_: None,
            loaded=loaded,  # one model for the three runs (building it is most of the time)
        )

    loaded = load_model(enc)
    a = FeatureStore.open_or_create(str(tmp_path / "a"), enc.config, backend)
    extract(a, s["candidates"], 64, 256)
    b = FeatureStore.open_or_create(str(tmp_path / "b"), enc.config, backend)
    extract(b, str(sub), 3, 5)
    extract(b, s["candidates"], 7, 11)
    a.refresh()
    b.refresh()
    ik, ck = sorted(a.keys(IMAGE)), sorted(a.keys(CAPTION))
    assert ik == sorted(b.keys(IMAGE)) and ck == sorted(b.keys(CAPTION))
    ia, ib = a.load_images(ik), b.load_images(ik)
    ca, cb = a.load_captions(ck), b.load_captions(ck)
    assert np.array_equal(ia.global_, ib.global_) and np.array_equal(ia.patches, ib.patches)
    assert np.array_equal(ca.global_, cb.global_) and np.array_equal(ca.tokens, cb.tokens)


def test_every_forward_runs_at_a_fixed_shape_whatever_the_batch(tiny_model, monkeypatch):
    """The mechanism behind "same input, same bits": every image
    forward takes exactly IMAGE_ROWS images, and every text forward TEXT_ROWS captions at a
    width from LENGTH_BUCKETS (the tiny CLIP's tower is causal), whether 1, 5 or 70
    captions of mixed lengths are encoded. Mutation checked: dropping the text padding (a
    last chunk of len(idx) rows) fails here."""
    from flowclip_cache.extraction import features

    shapes = {"image": [], "text": []}
    image_forward, text_forward = tiny_model.image_forward, tiny_model.text_forward
    monkeypatch.setattr(
        tiny_model, "image_forward", lambda x: (shapes["image"].append(tuple(x.shape)), image_forward(x))[1]
    )
    monkeypatch.setattr(
        tiny_model,
        "text_forward",
        lambda tok, truncate=True: (shapes["text"].append(tuple(tok.ids.shape)), text_forward(tok, truncate))[1],
    )
    words = "a red circle left of a blue square under a green triangle beside a small yellow star".split()
    for n in (1, 5, 70):
        texts = [" ".join(words[: 2 + (i * 7) % len(words)]) for i in range(n)]
        encode_texts(tiny_model, tiny_model.tokenize(texts))
        encode_images(tiny_model, torch.rand(n % 20 + 1, 3, *tiny_model.model.visual.image_size))
    assert shapes["text"] and shapes["image"]
    assert all(rows == features.TEXT_ROWS and width in features.LENGTH_BUCKETS for rows, width in shapes["text"])
    assert all(s[0] == features.IMAGE_ROWS for s in shapes["image"])
    assert len({w for _, w in shapes["text"]}) > 1  # captions of several buckets were met
