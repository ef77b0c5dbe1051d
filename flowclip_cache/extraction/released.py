"""Released checkpoints in the forms their authors published, made into what extract loads.

FORMS, by the code that wrote them:

- ``open_clip``: a state dict open_clip's own loader reads, bare or as its training
  checkpoint ``{"epoch", "name", "state_dict": {"module.…": …}, "optimizer"}`` (NegCLIP,
  FSC-CLIP, CE-CLIP). ``extract --pretrained FILE`` takes it as it is.
- ``tsvlc-lora``: TSVLC's and DAC's training checkpoints (github.com/SivanDoveh/TSVLC and
  github.com/SivanDoveh/DAC, ``src/open_clip/loralib/layers.py``; both train with ``--lora 4
  --pretrained openai``): the whole model's state dict, frozen weights and low-rank deltas
  beside them: ``X.lora_A``/``X.lora_B`` of their ``Linear`` and ``Conv2d`` layers, and
  ``attn.in_proj_weight_lora_A``/``_lora_B`` of their ``MultiheadAttention``. Their forward
  adds ``(x @ A.T @ B.T) * lora_alpha / r`` (``lora_alpha`` 1), which is what their
  ``Linear.eval()`` and ``Conv2d.eval()`` fold into the weight: ``W += (B @ A).view(W.shape)
  * lora_alpha / r`` (for ``Conv2d``, ``A`` is ``(r·k, in·k)``). ``merge_lora`` folds every
  delta that way, giving one open_clip state dict that ``flowclip checkpoint merge-lora``
  writes as safetensors, with the activation and preprocessing the authors' model was built
  with (their ``load_openai_model``: QuickGELU, OpenAI's mean and std).

Files are read with ``torch.load(weights_only=True)``: tensors and plain containers only,
never a stranger's pickled objects.
"""

from __future__ import annotations

import json
import os

from ..errors import FlowclipError

FORMS = ("open_clip", "tsvlc-lora")
LORA_ALPHA = 1.0  # loralib's default, which TSVLC's and DAC's layers keep
MERGED_KEY = "flowclip.merged_from"
_EXISTS = "{out} exists: remove it or name another (flowclip replaces no file it cannot prove it wrote)"


def read_state_dict(path: str) -> dict:
    """The tensors of a checkpoint: its "state_dict" when it is a training checkpoint,
    DistributedDataParallel's "module." prefix removed."""
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 (torch raises many kinds for a file that is not a checkpoint)
        raise FlowclipError(
            f"{path}: not a checkpoint torch reads with weights_only=True ({str(e).splitlines()[0][:200]}); "
            "flowclip never unpickles arbitrary objects"
        ) from None
    sd = obj.get("state_dict", obj) if isinstance(obj, dict) else obj
    if not isinstance(sd, dict) or not sd or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise FlowclipError(f"{path}: no state dict of tensors in it (a dict, or one under 'state_dict')")
    if all(k.startswith("module.") for k in sd):
        sd = {k[len("module.") :]: v for k, v in sd.items()}
    return sd


def _pairs(sd: dict) -> dict[str, tuple[str, str]]:
    """weight key -> (its lora_A key, its lora_B key), by loralib's two naming schemes."""
    out = {}
    for a in sd:
        if a.endswith(".lora_A"):
            base = a[: -len("lora_A")]
            out[base + "weight"] = (a, base + "lora_B")
        elif a.endswith("_lora_A"):  # MultiheadAttention's in_proj_weight_lora_A
            out[a[: -len("_lora_A")]] = (a, a[: -len("A")] + "B")
    return out


def merge_lora(sd: dict, alpha: float = LORA_ALPHA) -> tuple[dict, int]:
    """(the state dict with every low-rank delta folded into its weight and the delta keys
    gone, how many were folded). Refuses a delta without its weight or partner, or whose
    product does not have the weight's size."""
    pairs = _pairs(sd)
    used = {k for ab in pairs.values() for k in ab}
    stray = sorted(k for k in sd if "lora_" in k.rsplit(".", 1)[-1] and k not in used)
    if stray:
        raise FlowclipError(f"low-rank keys without a lora_A partner: {', '.join(stray[:5])}")
    merged = {k: v for k, v in sd.items() if k not in used}
    for w_key, (a_key, b_key) in sorted(pairs.items()):
        if w_key not in sd or b_key not in sd:
            raise FlowclipError(f"{a_key}: no {w_key if w_key not in sd else b_key} in the checkpoint")
        w, a, b = sd[w_key], sd[a_key].double(), sd[b_key].double()
        kernel = w.shape[-1] if w.ndim == 4 else 1  # loralib's Conv2d: A is (r*k, in*k)
        rank = a.shape[0] // kernel
        if a.ndim != 2 or b.ndim != 2 or b.shape[1] != a.shape[0] or (b @ a).numel() != w.numel() or rank < 1:
            raise FlowclipError(
                f"{w_key}: delta B{tuple(b.shape)} @ A{tuple(a.shape)} does not fit the weight {tuple(w.shape)}"
            )
        delta = (b @ a).view(w.shape) * (alpha / rank)
        merged[w_key] = (w.double() + delta).to(w.dtype)
    if not pairs:
        raise FlowclipError("no low-rank deltas (*lora_A / *lora_B) in the checkpoint: is it the open_clip form?")
    return merged, len(pairs)


def check_fits(sd: dict, model: str) -> None:
    """The state dict has exactly the keys and shapes of open_clip's `model` (so extract's
    strict load cannot fail later, far from here)."""
    import logging

    import open_clip
    import torch

    from .families.locate import register_package_configs

    register_package_configs()
    logging.disable(logging.WARNING)  # open_clip's "no pretrained weights loaded": none are wanted here
    try:
        with torch.device("meta"):  # keys and shapes only: nothing allocated, nothing loaded
            want = open_clip.create_model(model, pretrained=None, load_weights=False, device="meta").state_dict()
    finally:
        logging.disable(logging.NOTSET)
    missing, extra = sorted(set(want) - set(sd)), sorted(set(sd) - set(want))
    shapes = sorted(k for k in set(want) & set(sd) if tuple(want[k].shape) != tuple(sd[k].shape))
    for what, keys in (("missing", missing), ("not in the model", extra), ("of another shape", shapes)):
        if keys:
            raise FlowclipError(f"the merged weights do not fit open_clip's {model}: {len(keys)} keys {what}, "
                                f"e.g. {', '.join(keys[:4])}; is --model the checkpoint's architecture?")  # fmt: skip


def tag_settings_of(model: str, tag: str) -> dict:
    """The activation and preprocessing open_clip's pretrained tag sets (the model a release
    was fine-tuned from); {} for 'none'."""
    import open_clip

    from .families.locate import register_package_configs

    if tag.lower() == "none":
        return {}
    register_package_configs()
    cfg = open_clip.get_pretrained_cfg(model, tag)
    if not cfg:
        raise FlowclipError(f"--built-as {tag}: open_clip has no such pretrained tag for {model} (or use 'none')")
    out = {"quick_gelu": bool(cfg.get("quick_gelu", False))}
    return out | {k: cfg[k] for k in ("mean", "std", "interpolation", "resize_mode") if cfg.get(k) is not None}


def write_merged(src: str, out: str, model: str, built_as: str, alpha: float = LORA_ALPHA) -> int:
    """`src` (tsvlc-lora form) merged into open_clip weights at `out` (safetensors, written
    whole or not at all, with the tag settings and where it came from). -> deltas folded."""
    from safetensors.torch import save_file

    from .. import outputs
    from ..hashing import file_sha256
    from .families.open_clip_common import TAG_SETTINGS_KEY

    if os.path.exists(out):
        raise FlowclipError(_EXISTS.format(out=out))
    settings = tag_settings_of(model, built_as)
    merged, n = merge_lora(read_state_dict(src), alpha)
    check_fits(merged, model)
    meta = {
        TAG_SETTINGS_KEY: json.dumps(settings),
        MERGED_KEY: json.dumps({"file": os.path.basename(src), "sha256": file_sha256(src), "form": "tsvlc-lora",
                                "lora_alpha": alpha, "deltas": n, "model": model, "built_as": built_as}),
    }  # fmt: skip
    weights = {k: v.contiguous() for k, v in merged.items()}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    outputs.atomic_write(out, lambda p: save_file(weights, p, metadata=meta))
    return n


def write_standin(form: str, model: str, pretrained: str, seed: int, out: str, rank: int = 4) -> None:
    """A random stand-in for a release in `form` (tests and the paper's reduced run): the
    encoder `model`/`pretrained` as flowclip builds it, nudged by seeded noise (open_clip
    form), or given seeded low-rank deltas on every layer TSVLC's and DAC's code adapts
    (tsvlc-lora form); saved as their training code saves a checkpoint."""
    import torch

    from .. import outputs
    from .encoders import EncoderSpec, load_model, resolve

    if form not in FORMS:
        raise FlowclipError(f"--form {form}: one of {', '.join(FORMS)}")
    if os.path.exists(out):
        raise FlowclipError(_EXISTS.format(out=out))
    base = load_model(resolve(EncoderSpec(model, pretrained))).model
    sd = {k: v.detach().clone() for k, v in base.state_dict().items()}
    gen = torch.Generator().manual_seed(seed)
    if form == "open_clip":
        for v in sd.values():
            if v.is_floating_point() and v.numel() > 1:
                v += 0.05 * v.std() * torch.randn(v.shape, generator=gen, dtype=v.dtype)
    else:
        sd |= _random_deltas(sd, rank, gen)
    ckpt = {"epoch": 5, "name": "flowclip-standin", "state_dict": {f"module.{k}": v for k, v in sd.items()}}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    outputs.atomic_write(out, lambda p: torch.save(ckpt, p))


def _random_deltas(sd: dict, rank: int, gen) -> dict:
    """lora_A/lora_B as loralib names them, for the layers TSVLC's model gives a rank:
    attention in and out projections, both MLP layers, the ViT's patch embedding."""
    import torch

    def pair(out_dim, in_dim, r):
        return (0.2 * torch.randn(r, in_dim, generator=gen), 0.2 * torch.randn(out_dim, r, generator=gen))

    deltas = {}
    for k, w in sd.items():
        if k.endswith("attn.in_proj_weight"):
            deltas[k + "_lora_A"], deltas[k + "_lora_B"] = pair(w.shape[0], w.shape[1], rank)
        elif k.endswith(("attn.out_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")):
            base = k[: -len("weight")]
            deltas[base + "lora_A"], deltas[base + "lora_B"] = pair(w.shape[0], w.shape[1], rank)
        elif k == "visual.conv1.weight":
            kernel = w.shape[-1]
            a, b = pair(w.shape[0] * kernel, w.shape[1] * kernel, rank * kernel)
            deltas["visual.conv1.lora_A"], deltas["visual.conv1.lora_B"] = a, b
    return deltas
