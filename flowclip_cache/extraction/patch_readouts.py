"""Grounded patch readouts: other ways to read the LAST block of an OpenAI-style ViT out
into patch features, from the block's own weights (one extra attention pass, no new
parameters). The global embedding never changes: it is encode_image's. Each readout
follows its authors' released code (docs/method.md, "Patch readouts", cites file and lines):

    name            attention of the last block         residual + MLP   released code
    standard        softmax(q kᵀ)  (the block as trained)    kept        open_clip
    maskclip        none: the value path, out_proj(v)         kept        chongzhou96/MaskCLIP vit.py (return_qkv)
    clearclip       softmax(q qᵀ)                             dropped     mc-lan/ClearCLIP (ignore_residual=True)
    sclip           softmax(q qᵀ) + softmax(k kᵀ)             kept        wangf3014/SCLIP clip/model.py
    naclip          softmax(k kᵀ + Gaussian neighbourhood)    dropped     sinahmr/NACLIP (arch='reduced')
    maskclip-reduced  as maskclip                             dropped     ClearCLIP's MaskCLIP baseline
    sclip-reduced     as sclip                                dropped     flowclip's variant: SCLIP's attention
                                                                          with ClearCLIP's removals

"kept": x + ls_1(out_proj(attention v)), then + ls_2(mlp(ln_2 .)), as the block does;
"dropped": out_proj(attention v) alone (ls_1 applied; identity for CLIP's weights). Then
ln_post and the visual projection, and the patch tokens are kept. Attention logits are
scaled by head_dim^-1/2. NACLIP's bias is exp(-|Δ|² / (2σ²)) between patch grid
positions with σ = 5 patches (NACLIP's kernel; none to or from the class token).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import FlowclipError

READOUTS = ("standard", "maskclip", "clearclip", "sclip", "naclip", "maskclip-reduced", "sclip-reduced")
KEEPS_RESIDUAL = {"maskclip", "sclip"}  # the released code keeps the block's residual and MLP
# Readouts whose definition changed (before: without residual and MLP): the fingerprint
# records the revision, so a store of the old definition is never extended with the new.
REVISION = {"maskclip": 2, "sclip": 2}
NACLIP_SIGMA = 5.0
_CUSTOM_BLOCK = ("qk_norm", "scaled_cosine_attn", "scale_heads", "scale_attn_inner", "scale_attn", "scale_fc")


def check_readout(readout: str, model: str, model_cfg: dict | None) -> None:
    """Refuse a readout flowclip cannot compute exactly for this model's config."""
    if readout not in READOUTS:
        raise FlowclipError(f"unknown patch readout {readout!r}; use one of {', '.join(READOUTS)}")
    if readout == "standard":
        return
    vision = (model_cfg or {}).get("vision_cfg", {})
    custom = [k for k in _CUSTOM_BLOCK if vision.get(k)] + (
        ["block_type"] if vision.get("block_type") == "custom" else []
    )
    if model_cfg is None or vision.get("timm_model_name") or custom:
        why = (
            "a timm tower"
            if vision.get("timm_model_name")
            else f"its last block is not open_clip's default ({', '.join(custom)})"
            if custom
            else "not an open_clip ViT"
        )
        raise FlowclipError(
            f"--patch-readout {readout}: {model} has {why}; the readouts are defined on open_clip's "
            f"default ViT block (ln_1, in_proj, out_proj, ls_1) and are not computed for others"
        )


def grid_bias(grid: tuple[int, int], sigma: float, prefix: int, device, dtype) -> torch.Tensor:
    """[T, T] additive attention bias: a Gaussian of the grid distance between patches."""
    ys, xs = torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij")
    pos = torch.stack([ys.flatten(), xs.flatten()], 1).to(dtype)
    d2 = torch.cdist(pos, pos).pow(2)
    n = prefix + len(pos)
    bias = torch.zeros(n, n, dtype=dtype)
    bias[prefix:, prefix:] = torch.exp(-d2 / (2 * sigma**2))
    return bias.to(device)


def last_block_input(visual, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(encode_image's global before normalisation, the last block's input [B, 1+N, width])
    through open_clip's forward_intermediates."""
    blocks = visual.transformer.resblocks
    if len(blocks) < 2:
        raise FlowclipError("patch readouts need a ViT of at least two blocks")
    out = visual.forward_intermediates(images, indices=2, output_fmt="NLC", output_extra_tokens=True)
    x = torch.cat([out["image_intermediates_prefix"][0], out["image_intermediates"][0]], dim=1)
    return out["image_features"], x


def readout_patches(visual, x: torch.Tensor, readout: str) -> torch.Tensor:
    """Patch features [B, N, d] of the last block read out by `readout` from its input x."""
    block = visual.transformer.resblocks[-1]
    attn = block.attn
    if not isinstance(attn, torch.nn.MultiheadAttention) or hasattr(block, "ln_1_kv"):
        raise FlowclipError(f"--patch-readout {readout}: the last block is not open_clip's default block")
    B, T, D = x.shape
    H = attn.num_heads
    q, k, v = (
        t.view(B, T, H, D // H).transpose(1, 2)
        for t in F.linear(block.ln_1(x), attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
    )
    scale = (D // H) ** -0.5
    attention = readout.removesuffix("-reduced")
    if attention == "maskclip":
        o = v
    elif attention == "clearclip":
        o = torch.softmax(q @ q.transpose(-1, -2) * scale, -1) @ v
    elif attention == "sclip":
        o = (
            torch.softmax(q @ q.transpose(-1, -2) * scale, -1) + torch.softmax(k @ k.transpose(-1, -2) * scale, -1)
        ) @ v
    elif attention == "naclip":
        g = visual.grid_size
        bias = grid_bias(g, NACLIP_SIGMA, T - g[0] * g[1], x.device, x.dtype)
        o = torch.softmax(k @ k.transpose(-1, -2) * scale + bias, -1) @ v
    else:
        raise FlowclipError(f"unknown patch readout {readout!r}")
    o = block.ls_1(attn.out_proj(o.transpose(1, 2).reshape(B, T, D)))
    if readout in KEEPS_RESIDUAL:
        o = x + o
        o = o + block.ls_2(block.mlp(block.ln_2(o)))
    tokens = visual.ln_post(o)[:, T - visual.grid_size[0] * visual.grid_size[1] :]
    return tokens @ visual.proj if visual.proj is not None else tokens
