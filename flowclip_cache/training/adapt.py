"""flowclip adapt: the unfrozen path. Both encoders train together with a head (none =
NegCLIP-style fine-tuning, global = Global-M, flow = Flow-CLIP) under HNB and CIMR, from
the images themselves; everything downstream goes through the cache as for a frozen
encoder (the exported encoder is a new checkpoint: new fingerprint, new store).

    records   the training manifest as in train-head (same records, ids and negatives)
    order     train.epoch_order: the same batches and negatives as train-head
    features  features.image_features / text_features: extract's definitions, with grads
    loss      losses.batch_loss: the same HNB and CIMR on the same head code
    ranks     under torchrun the model is DistributedDataParallel; each rank encodes its
              slice of the global batch, features are gathered (with gradients) so negatives
              and CIMR donors span the global batch, and DDP averages the ranks' gradients:
              N ranks with B/N records each train what one process with B records trains
    outputs   OUT/encoder.safetensors (open_clip-loadable), OUT/head.safetensors and
              config.json (a head run folder whose store fingerprint is the exported
              encoder's), checkpoints ckpt-<n>/ (encoder, head, AdamW state) for --resume
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from .. import outputs
from ..config import build
from ..errors import FlowclipError
from ..manifest import Manifest
from . import checkpoint
from .adamw import AdamW
from .loop import TrainConfig, epoch_order, steps_per_epoch
from .losses import batch_loss
from .ranks import Ranks, init_ranks
from .run_folder import write_finished_head
from .train_config import with_head_defaults
from .training_data import caption_records


@dataclass
class AdaptConfig(TrainConfig):
    head: str = field(default="flow", metadata={"choices": ("clip", "global", "flow")})
    encoder_lr: float = field(default=1e-5, metadata={"min": 0.0})  # AdamW lr of both encoders (lr: the head's)
    precision: str = field(default="fp32", metadata={"choices": ("fp32", "bf16")})  # bf16: autocast, CUDA only
    grad_checkpointing: bool = False
    workers: int = field(default=2, metadata={"min": 0})  # image decoding processes

    @classmethod
    def from_dict(cls, d: dict, source: str = "config") -> "AdaptConfig":
        """head: none (NegCLIP-style: the encoders alone, stored as the 'clip' head), global or flow."""
        return build(cls, with_head_defaults(_none_is_clip(d), source), source)  # the choices refuse other heads

    @classmethod
    def precheck(cls, d: dict, source: str = "config") -> None:
        super().precheck(_none_is_clip(d), source)


# -- records: the training manifest, as train-head reads it ----------------------------------------
@dataclass
class AdaptRecords:
    images: list  # [U] (absolute path, crop) of each distinct image
    texts: list[str]  # [C] distinct captions
    rec_image: torch.Tensor  # [R] index into images
    rec_pos: torch.Tensor  # [R] index into texts
    rec_neg: torch.Tensor  # [R, K] index into texts, -1 = none
    split: np.ndarray


def read_records(manifest_path: str, image_root: str) -> AdaptRecords:
    from ..extraction.images import BadImage, resolve_image_path
    from ..hashing import file_sha256, image_key

    m = Manifest.read(manifest_path)
    t, texts, rec_pos, rec_neg = caption_records(m, "adapt")
    refs = list(m.image_refs())
    keys: list[str] = []
    where: dict[str, tuple] = {}
    for r in refs:  # images by content, as extract keys them: same image, same id
        try:
            path = resolve_image_path(image_root, r.path)
            key = image_key(file_sha256(path), r.crop)
        except (BadImage, OSError) as e:
            raise FlowclipError(f"{manifest_path}:{r.row}: image {r.path!r}: {e}") from None
        keys.append(key)
        where.setdefault(key, (path, r.crop))
    uimg = sorted(where)
    img_index = {k: i for i, k in enumerate(uimg)}
    return AdaptRecords(
        [where[k] for k in uimg],
        texts,
        torch.tensor([img_index[k] for k in keys]),
        rec_pos,
        rec_neg,
        np.array(t["split"]),
    )


class _Images(torch.utils.data.Dataset):
    """Decoded, preprocessed images of record indices (a DataLoader dataset)."""

    def __init__(self, recs: AdaptRecords, preprocess):
        self.recs, self.preprocess = recs, preprocess

    def __len__(self):
        return len(self.recs.rec_image)

    def __getitem__(self, r):
        from ..extraction.images import load_image

        path, crop = self.recs.images[int(self.recs.rec_image[r])]
        return self.preprocess(load_image(path, crop))


# -- the model: both encoders and the head, one module ----------------------------------------------
class Adapted(torch.nn.Module):
    def __init__(self, encoder, head):
        super().__init__()
        self.encoder_model, self.head = encoder.model, head
        self.encoder = encoder  # the family object (forwards, tokenizer); its model is above

    def forward(self, images, tokens, policy: str):
        from ..extraction.features import image_features, text_features

        v, P = image_features(self.encoder, images)
        f = text_features(self.encoder, tokens, policy)
        return v, P, f.sentence, f.tokens, f.mask


def _autocast(precision: str):
    return torch.autocast("cuda", torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()


def batch_features(model, ranks: Ranks, images, tokens, policy: str, precision: str, need_tokens: bool = True):
    """(v, P, t, H, mask) of the global batch: this rank's slice encoded, then gathered
    (patches and token states only for a head that reads them; else None). Captions come
    [this rank's positives, this rank's negatives]; the gathered batch is reordered to
    [all positives, all negatives] as train-head lays it out."""
    with _autocast(precision):
        v, P, t, H, mask = model(images, tokens, policy)
    b = len(v)
    captions = lambda x: torch.cat([ranks.gather(x[:b]), ranks.gather(x[b:])])
    v, t = ranks.gather(v.float()), captions(t.float())
    if not need_tokens:
        return v, None, t, None, None
    H = H.float()
    L = ranks.max(H.shape[1])  # causal cuts differ per rank: pad to one length
    if H.shape[1] < L:
        H = torch.nn.functional.pad(H, (0, 0, 0, L - H.shape[1]))
        mask = torch.nn.functional.pad(mask, (0, L - mask.shape[1]))
    return v, ranks.gather(P.float()), t, captions(H), captions(mask.to(torch.uint8)).bool()


# -- the run ---------------------------------------------------------------------------------------
def run_adapt(
    spec,
    manifest_path: str,
    image_root: str,
    out: str,
    cfg: AdaptConfig,
    *,
    device: str = "cpu",
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    stop_after: int | None = None,
    watch=None,
    log=print,
) -> dict:
    """Adapt the encoders of `spec` with cfg's head; returns the final state. watch(out,
    record): each step's loss and learning rates, and each epoch's mean loss (rank 0; tracking)."""
    from ..extraction.encoders import load_model, resolve

    ranks, device = init_ranks(device)
    if ranks.rank != 0:
        log = watch = lambda *_: None
    if cfg.precision == "bf16" and not device.startswith("cuda"):
        raise FlowclipError("precision bf16 runs on CUDA; use fp32 on the CPU")
    if cfg.batch_size % ranks.world:
        raise FlowclipError(
            f"batch_size {cfg.batch_size} is the global batch: it must be divisible by the {ranks.world} ranks"
        )
    enc = resolve(spec)
    _prepare_folder(out, enc, manifest_path, cfg, resume, overwrite, ranks)
    recs = read_records(manifest_path, image_root)
    train_rec = np.nonzero(recs.split == "train")[0]
    if len(train_rec) < 2:
        raise FlowclipError(f"{manifest_path}: fewer than 2 records with split == 'train'")
    torch.manual_seed(cfg.seed)
    encoder = load_model(enc, device)
    head = cfg.build_head(enc.dim).to(device)
    model = Adapted(encoder, head).to(device).train()
    if cfg.grad_checkpointing:
        encoder.set_grad_checkpointing()
    frozen = freeze_unreached(model, recs, cfg.precision, device)
    enc_params = [p for p in encoder.model.parameters() if p.requires_grad]
    head_params = list(head.parameters())
    groups = [{"params": enc_params, "lr": cfg.encoder_lr}] + (
        [{"params": head_params, "lr": cfg.lr}] if head_params else []
    )
    opt = AdamW(groups, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
    params = enc_params + head_params
    state = {"epoch": 0, "step_in_epoch": 0, "global_step": 0, "loss": [], "seconds": 0.0}
    if checkpoint.exists(out):
        weights, moments, state = checkpoint.load(out, device)
        model.load_state_dict(weights)
        checkpoint.load_optimizer(params, opt, moments)
        checkpoint.restore_rng(moments)
        log(f"resuming {out} at epoch {state['epoch']} step {state['step_in_epoch']}")
    forward = ranks.wrap(model, device)  # after loading: DDP broadcasts rank 0's weights
    log(
        f"adapt {enc.spec.model}: {len(train_rec)} training records, head {cfg.head} "
        f"({sum(p.numel() for p in head_params):,} parameters), encoders {sum(p.numel() for p in enc_params):,} "
        f"parameters"
        + (f" ({frozen:,} that no feature reaches left frozen)" if frozen else "")
        + f", {ranks.world} rank(s), global batch {cfg.batch_size}"
    )
    done = _epochs(
        model, forward, opt, params, recs, train_rec, cfg, state, ranks, device, out, progress, stop_after,
        watch or (lambda *_: None), log,
    )  # fmt: skip
    if done:
        _export(out, model, enc, cfg, state, ranks, log)
    return state


def freeze_unreached(model: Adapted, recs: AdaptRecords, precision: str, device: str) -> int:
    """Freeze the encoder parameters that the head's features never reach: the logit scale
    and bias (tau_c is fixed), BLIP's ITM head and text cross-attention, say: DDP would
    wait for their gradients, which never come. Found by one backward pass of one
    record's features; returns how many weights."""
    images = _Images(recs, model.encoder.preprocess)
    tokens = model.encoder.tokenize([recs.texts[int(recs.rec_pos[0])]]).to(device)
    with _autocast(precision):
        v, P, t, H, _ = model(images[0][None].to(device), tokens, model.encoder.config["token_mask"])
    reached = v.sum() + t.sum() + ((P.sum() + H.sum()) if model.head.uses_tokens else 0)
    reached.float().backward()
    unreached = [p for p in model.encoder_model.parameters() if p.requires_grad and p.grad is None]
    model.zero_grad(set_to_none=True)
    for p in unreached:
        p.requires_grad_(False)
    return sum(p.numel() for p in unreached)


def _epochs(
    model, forward, opt, params, recs, train_rec, cfg, state, ranks, device, out, progress, stop_after, watch, log
) -> bool:
    from torch.utils.data import DataLoader

    from ..progress import bar as progress_bar

    B = cfg.batch_size
    n_steps = steps_per_epoch(len(train_rec), B)
    images = _Images(recs, model.encoder.preprocess)
    policy = model.encoder.config["token_mask"]
    bar = progress_bar(n_steps * cfg.epochs, "adapt", "step", progress and ranks.rank == 0, state["global_step"])
    t0, steps_run, before = time.perf_counter(), 0, state.get("seconds", 0.0)
    save = lambda: _save(out, model, opt, params, state, ranks, before + time.perf_counter() - t0)
    if cfg.max_steps is not None and state["global_step"] >= cfg.max_steps:
        return True  # resumed at its cap: nothing to train
    while state["epoch"] < cfg.epochs:
        order, neg_pick = epoch_order(train_rec, recs.rec_neg, cfg.seed, state["epoch"], "cpu")
        batches = [ranks.share(order[s * B : (s + 1) * B]) for s in range(state["step_in_epoch"], n_steps)]
        loader: DataLoader = DataLoader(
            images,
            batch_sampler=[b.tolist() for b in batches],
            num_workers=cfg.workers,
            prefetch_factor=2 if cfg.workers else None,  # its own generator: making a
            generator=torch.Generator().manual_seed(cfg.seed),
        )  # loader draws no global RNG
        for mine, x in zip(batches, loader):
            glob = order[state["step_in_epoch"] * B : (state["step_in_epoch"] + 1) * B]
            loss = step(model, forward, opt, params, recs, glob, mine, x, neg_pick, cfg, ranks, device, policy)
            state["loss"].append(loss)
            state["step_in_epoch"] += 1
            state["global_step"] += 1
            lrs = {"lr" if i else "encoder_lr": g["lr"] for i, g in enumerate(opt.param_groups)}
            watch(out, {"step": state["global_step"], "epoch": state["epoch"], "loss": loss, **lrs})
            bar.update(1)
            steps_run += 1
            capped = cfg.max_steps is not None and state["global_step"] >= cfg.max_steps
            if state["global_step"] % cfg.checkpoint_every == 0 or (stop_after and steps_run >= stop_after) or capped:
                save()
            if capped:  # max_steps: a finished run, exported as at the end of its epochs
                log(f"stopped at max_steps {cfg.max_steps} (epoch {state['epoch']}, step {state['step_in_epoch']})")
                bar.close()
                return True
            if stop_after and steps_run >= stop_after:
                bar.close()
                return False
        state["epoch"], state["step_in_epoch"] = state["epoch"] + 1, 0
        log(f"epoch {state['epoch']}: mean loss {np.mean(state['loss'][-n_steps:]):.4f}")
        save()
        watch(out, {"step": state["global_step"], "epoch_mean_loss": float(np.mean(state["loss"][-n_steps:]))})
    bar.close()
    return True


def step(model, forward, opt, params, recs, glob, mine, x, neg_pick, cfg, ranks, device, policy) -> float:
    """One optimiser step on the global batch `glob` (this rank holds `mine`); `forward` is
    the model itself or its DDP wrapper."""
    img = recs.rec_image[glob].to(device)
    pos, neg = recs.rec_pos[glob].to(device), recs.rec_neg[glob, neg_pick[glob]].to(device)
    mine_pos, mine_neg = recs.rec_pos[mine], recs.rec_neg[mine, neg_pick[mine]]
    enc = model.encoder
    tokens = enc.tokenize([recs.texts[int(i)] for i in torch.cat([mine_pos, mine_neg])]).to(device)
    feats = batch_features(forward, ranks, x.to(device), tokens, policy, cfg.precision, model.head.uses_tokens)
    loss = batch_loss(model.head, cfg, img, pos, neg, feats)[0]
    if not torch.isfinite(loss):
        raise FlowclipError(f"non-finite loss ({loss.item()}); the last good checkpoint is kept (try a lower lr)")
    opt.zero_grad(set_to_none=True)
    loss.backward()  # under DDP: the ranks' gradients averaged on return
    torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
    opt.step()
    return loss.item()


def _save(out, model, opt, params, state, ranks, seconds: float) -> None:
    if ranks.rank == 0:
        state["seconds"] = seconds
        checkpoint.save(
            out, model.state_dict(), checkpoint.optimizer_tensors(params, opt) | checkpoint.rng_tensors(), state
        )
    if ranks.distributed:
        import torch.distributed as dist

        dist.barrier()


def _prepare_folder(out, enc, manifest_path, cfg, resume, overwrite, ranks) -> None:
    if ranks.rank == 0:
        started = checkpoint.claim_run(out, "adapt-run", "adapt run", resume, overwrite)
        cfg_path = os.path.join(out, "adapt.json")
        run_cfg = {
            "adapt": dataclasses.asdict(cfg),
            "base_encoder": enc.config,
            "manifest": os.path.abspath(manifest_path),
        }
        if started:
            old = json.load(open(cfg_path))
            if old["adapt"] != run_cfg["adapt"] or old["base_encoder"] != enc.config:
                raise FlowclipError(f"{out}: --resume with other settings or another encoder than the run began with")
        else:
            outputs.atomic_write(cfg_path, lambda p: json.dump(run_cfg, open(p, "w"), indent=1))
    if ranks.distributed:
        import torch.distributed as dist

        dist.barrier()


def _export(out, model, enc, cfg, state, ranks, log) -> None:
    """encoder.safetensors (open_clip loads it), then the head run folder's files, DONE last."""
    from safetensors.torch import save_file

    from ..extraction.encoders import resolve
    from ..extraction.families.open_clip_common import TAG_SETTINGS_KEY, tag_settings

    if ranks.rank == 0:
        enc_path = os.path.join(out, "encoder.safetensors")
        weights = {k: v.detach().cpu().contiguous() for k, v in model.encoder_model.state_dict().items()}
        meta = {TAG_SETTINGS_KEY: json.dumps(tag_settings(enc.config))}  # so --pretrained FILE resolves as
        outputs.atomic_write(enc_path, lambda p: save_file(weights, p, metadata=meta))  # the base did
        adapted = resolve(dataclasses.replace(enc.spec, pretrained=enc_path))
        run_config = {
            "train": dataclasses.asdict(cfg),
            "store_fingerprint": adapted.fingerprint,
            "encoder": enc.spec.model,
            "head": model.head.hparams(),
            "dim": enc.dim,
            "parameters": sum(p.numel() for p in model.head.parameters()),
            "adapted_from": enc.fingerprint,
            "note": "extract with --pretrained OUT/encoder.safetensors to score this head",
        }
        outputs.atomic_write(os.path.join(out, "config.json"), lambda p: json.dump(run_config, open(p, "w"), indent=1))
        write_finished_head(out, model.head, {"global_step": state["global_step"], "final_loss": state["loss"][-1]})
        log(f"wrote {enc_path} (fingerprint {adapted.fingerprint[:16]}) and the head run folder {out}")
    if ranks.distributed:
        import torch.distributed as dist

        dist.barrier()


def _none_is_clip(d):
    """adapt's `head: none` (the encoders alone) is stored as the 'clip' head."""
    return {**d, "head": "clip"} if isinstance(d, dict) and d.get("head") == "none" else d
