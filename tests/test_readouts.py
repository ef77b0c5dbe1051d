"""Patch readouts (--patch-readout) against a direct computation written here, in float64
and head by head, from the last block's weights and its input captured by a hook on
encode_image; the global never changes; refusals where the block is not open_clip's
default."""

import math

import pytest
import torch
import torch.nn.functional as F

from flowclip_cache.errors import FlowclipError
from flowclip_cache.extraction.encoders import EncoderSpec, load_model, resolve
from flowclip_cache.extraction.features import image_features
from flowclip_cache.extraction.patch_readouts import NACLIP_SIGMA, READOUTS


def direct_patches(visual, x_in: torch.Tensor, readout: str) -> torch.Tensor:
    """The readout by the released code's formulas, one head at a time, in float64: the
    attention below; MaskCLIP's and SCLIP's released code keep the block's residual and MLP
    around it (x + attn, then + mlp(ln_2 .)), the others (and the -reduced variants) drop both."""
    import copy

    block = visual.transformer.resblocks[-1]
    a = block.attn
    W, b = a.in_proj_weight.double(), a.in_proj_bias.double()
    D, H = W.shape[1], a.num_heads
    hd = D // H
    h = F.layer_norm(x_in.double(), (D,), block.ln_1.weight.double(), block.ln_1.bias.double(), block.ln_1.eps)
    q, k, v = h @ W[:D].T + b[:D], h @ W[D : 2 * D].T + b[D : 2 * D], h @ W[2 * D :].T + b[2 * D :]
    T = h.shape[1]
    gh, gw = visual.grid_size
    prefix = T - gh * gw
    bias = torch.zeros(T, T, dtype=torch.float64)
    for i in range(gh * gw):
        for j in range(gh * gw):
            dy, dx = i // gw - j // gw, i % gw - j % gw
            bias[prefix + i, prefix + j] = math.exp(-(dy * dy + dx * dx) / (2 * NACLIP_SIGMA**2))
    heads = []
    for n in range(H):
        s = slice(n * hd, (n + 1) * hd)
        qn, kn, vn = q[..., s], k[..., s], v[..., s]
        sim = lambda A, B: torch.einsum("btc,bsc->bts", A, B) / math.sqrt(hd)
        if readout.startswith("maskclip"):
            heads.append(vn)
        elif readout == "clearclip":
            heads.append(sim(qn, qn).softmax(-1) @ vn)
        elif readout.startswith("sclip"):
            heads.append((sim(qn, qn).softmax(-1) + sim(kn, kn).softmax(-1)) @ vn)
        elif readout == "naclip":
            heads.append((sim(kn, kn) + bias).softmax(-1) @ vn)
    o = torch.cat(heads, -1) @ a.out_proj.weight.double().T + a.out_proj.bias.double()
    if hasattr(block.ls_1, "gamma"):
        o = o * block.ls_1.gamma.double()
    if readout in ("maskclip", "sclip"):
        o = x_in.double() + o
        ln2 = block.ln_2
        m = copy.deepcopy(block.mlp).double()(F.layer_norm(o, (D,), ln2.weight.double(), ln2.bias.double(), ln2.eps))
        o = o + (m * block.ls_2.gamma.double() if hasattr(block.ls_2, "gamma") else m)
    ln = visual.ln_post
    o = F.layer_norm(o, (D,), ln.weight.double(), ln.bias.double(), ln.eps)
    return F.normalize(o[:, prefix:] @ visual.proj.double(), dim=-1)


def last_block_input_by_hook(model, x):
    seen = {}
    hook = model.visual.transformer.resblocks[-1].register_forward_pre_hook(
        lambda mod, args: seen.setdefault("x", args[0].detach())
    )
    try:
        model.encode_image(x)
    finally:
        hook.remove()
    return seen["x"]


@pytest.mark.parametrize("model", ["flowclip-tiny-vit", "flowclip-tiny-clip", "ViT-B-32", "ViT-B-16"])
@torch.no_grad()
def test_each_readout_equals_the_direct_computation(model):
    # the family's forward itself: extract's padding of every forward to 16 images is
    # checked by test_features' input-alone tests, and would cost 8x here
    base = load_model(resolve(EncoderSpec(model)))
    size = base.model.visual.image_size[0]
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    x_in = last_block_input_by_hook(base.model, x)
    g_std, p_std = image_features(base, x)
    for readout in READOUTS[1:]:
        enc = resolve(EncoderSpec(model, patch_readout=readout))
        assert enc.config["patch_readout"] == readout and enc.fingerprint != resolve(EncoderSpec(model)).fingerprint
        base.config = enc.config  # same weights, this readout
        g, p = image_features(base, x)
        torch.testing.assert_close(g, g_std, rtol=0, atol=0)  # the global is encode_image's, unchanged
        torch.testing.assert_close(g, F.normalize(base.model.encode_image(x), dim=-1), rtol=0, atol=1e-6)
        torch.testing.assert_close(p.double(), direct_patches(base.model.visual, x_in, readout), rtol=0, atol=2e-5)
        assert p.shape == p_std.shape and not torch.allclose(p, p_std, atol=1e-3)


def test_released_and_reduced_differ_and_old_definitions_are_refused():
    """maskclip/sclip are the released (residual + MLP) readouts; -reduced are the old ones;
    the fingerprint records the revision so an old-definition store is never extended."""
    from flowclip_cache.cli import READOUT_NAMES

    assert tuple(READOUT_NAMES) == READOUTS
    for name in ("maskclip", "sclip"):
        new, red = (
            resolve(EncoderSpec("ViT-B-16", patch_readout=name)),
            resolve(EncoderSpec("ViT-B-16", patch_readout=f"{name}-reduced")),
        )
        assert new.config["patch_readout_revision"] == 2 and "patch_readout_revision" not in red.config
        old = {k: v for k, v in new.config.items() if k != "patch_readout_revision"}
        from flowclip_cache.hashing import fingerprint_of

        assert fingerprint_of(old) != new.fingerprint
    base = load_model(resolve(EncoderSpec("ViT-B-16")))
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    out = {}
    with torch.no_grad():
        for r in ("sclip", "sclip-reduced"):
            base.config = resolve(EncoderSpec("ViT-B-16", patch_readout=r)).config
            out[r] = image_features(base, x)[1]
    assert (out["sclip"] * out["sclip-reduced"]).sum(-1).mean() < 0.9


def test_standard_keeps_every_fingerprint_and_refusals():
    assert "patch_readout" not in resolve(EncoderSpec("ViT-B-32", patch_readout="standard")).config
    with pytest.raises(FlowclipError, match="timm tower"):
        resolve(EncoderSpec("ViT-B-16-SigLIP", patch_readout="sclip"))
    with pytest.raises(FlowclipError, match=r"not open_clip's default \(qk_norm"):
        from flowclip_cache.extraction.patch_readouts import check_readout

        check_readout("sclip", "x", {"vision_cfg": {"qk_norm": True}})
    with pytest.raises(FlowclipError, match="unknown patch readout"):
        resolve(EncoderSpec("ViT-B-32", patch_readout="dino"))


def test_extract_with_a_readout(tmp_path, sample):
    from click.testing import CliRunner

    from flowclip_cache.cli import main
    from flowclip_cache.store import FeatureStore

    stores = {}
    for readout in ("standard", "sclip"):
        stores[readout] = str(tmp_path / readout)
        r = CliRunner().invoke(
            main,
            [
                "extract",
                "--store",
                stores[readout],
                "--model",
                "flowclip-tiny-vit",
                "--pretrained",
                "none",
                "--patch-readout",
                readout,
                "--manifest",
                sample["candidates"],
                "--image-root",
                sample["image_root"],
                "--workers",
                "0",
                "--quiet",
            ],
        )
        assert r.exit_code == 0, r.output
    a, b = FeatureStore(stores["standard"]), FeatureStore(stores["sclip"])
    keys = a.keys("img")[:3]
    ia, ib = a.load_images(keys), b.load_images(keys)
    assert (ia.global_ == ib.global_).all() and not (ia.patches == ib.patches).all()
    assert b.encoder_config["patch_readout"] == "sclip" and "patch_readout" not in a.encoder_config
    # a store keeps its readout: extracting into it with another one is refused
    r = CliRunner().invoke(
        main,
        [
            "extract",
            "--store",
            stores["sclip"],
            "--model",
            "flowclip-tiny-vit",
            "--pretrained",
            "none",
            "--manifest",
            sample["candidates"],
            "--image-root",
            sample["image_root"],
            "--workers",
            "0",
            "--quiet",
        ],
    )
    assert r.exit_code != 0 and "patch_readout" in r.output
