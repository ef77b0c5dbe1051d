"""flowclip train-head: train GCC / ICER heads from cached features.

Reads top to bottom: config -> data gathered into memory once -> model and optimiser
-> (resume) -> epochs of batches made by indexing -> evaluation -> checkpoint.
The run folder holds everything needed to resume and to score:

    FLOWCLIP_OUTPUT.json  marks the folder as a head run (what --overwrite may replace)
    config.json        the resolved TrainConfig, store fingerprint, manifest sha256, git revision
    checkpoint.json    names the latest whole checkpoint (checkpoint.py): ckpt-<n>/ holds the
                       weights, AdamW moments and state (epoch/step reached, metrics per epoch)
    log.jsonl          one JSON line per step and per evaluation
    head.safetensors   the trained head's weights, written when training ends
    DONE               written last; a finished run
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from . import checkpoint, outputs
from .banks import prefetch
from .config import build
from .errors import FlowclipError
from .hashing import file_sha256
from .heads import HEAD_KINDS, Head, build_head, head_class
from .losses import cimr_loss, donor_map, hnb_loss
from .manifest import Manifest
from .progress import bar as progress_bar
from .run_folder import git_revision, load_checkpoint, save_checkpoint, write_finished_head
from .store import FeatureStore
from .training_data import TrainingData, load_training_data, pairwise_accuracy


@dataclass
class TrainConfig:
    head: str = field(default="flow", metadata={"choices": HEAD_KINDS})  # clip | global | flow
    epochs: int = field(default=5, metadata={"min": 0})
    batch_size: int = field(default=32, metadata={"min": 1})  # records per batch (each brings one negative)
    lr: float = field(default=8e-5, metadata={"min": 0.0})
    weight_decay: float = field(default=1e-4, metadata={"min": 0.0})
    beta1: float = field(default=0.9, metadata={"min": 0.0})
    beta2: float = field(default=0.999, metadata={"min": 0.0})
    grad_clip: float = field(default=1.0, metadata={"gt": 0.0})
    tau_c: float = field(default=0.01, metadata={"gt": 0.0})
    tau_p: float = field(default=0.05, metadata={"gt": 0.0})
    alpha: float = 1.0
    cimr: float | None = field(default=None, metadata={"min": 0.0})  # lambda_CIMR; None: the head's paper default
    seed: int = field(default=0, metadata={"min": 0})
    checkpoint_every: int = field(default=500, metadata={"min": 1})  # steps between checkpoints (and every epoch end)
    train_eval_records: int = field(default=2000, metadata={"min": 0})  # fixed training sample scored each epoch

    def __post_init__(self):
        if self.cimr is None:  # each head kind's default: its row of the paper's Tab. 2
            self.cimr = head_class(self.head).default_cimr if self.head in HEAD_KINDS else 0.0

    def build_head(self, dim: int) -> Head:
        return build_head(self.head, dim, **dataclasses.asdict(self))

    @property
    def uses_tokens(self) -> bool:
        return head_class(self.head).uses_tokens

    @classmethod
    def from_dict(cls, d: dict, source: str = "config") -> "TrainConfig":
        """Unknown keys, wrong types, NaN and out-of-range values are refused (config.build).
        Keys the dict leaves out take the head's published defaults, then the dataclass's."""
        head = d.get("head", "flow") if isinstance(d, dict) else None
        if isinstance(head, str) and head in HEAD_KINDS:
            d = {**head_class(head).train_defaults, **d}
        return build(cls, d, source)

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(self).items())


# -- one step's loss: what train-head, studies and the dry run's timing share ---------------------
def batch_loss(head: Head, cfg: TrainConfig, img, pos, neg, feats):
    """(loss, HNB term, CIMR term, the head's named parts) of one batch whose features are gathered.
    The head scores all pairs itself; the loop never recombines a head's parts."""
    v, P, t, H, mask = feats
    S, terms = head.forward_terms(v, P if head.uses_tokens else None, t, H if head.uses_tokens else None, mask)
    l_hnb = hnb_loss(S, cfg.tau_c, img, pos, neg)
    weight = cfg.cimr or 0.0  # None was resolved to the head's default by TrainConfig
    l_cimr = cimr_loss(S, cfg.tau_c, donor_map(img)) if weight > 0 else S.new_zeros(())
    return l_hnb + weight * l_cimr, l_hnb, l_cimr, terms


def seconds_per_step(data: TrainingData, cfg: TrainConfig, device: str, repeats: int = 3) -> float:
    """A measured optimiser step of this head on the first batch of training records
    (the dry run's time estimate): best of a few, after one warm-up."""
    head = cfg.build_head(data.bank.dim).to(device)
    params = list(head.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr) if params else None
    rec = torch.as_tensor(np.nonzero(data.split == "train")[0][: cfg.batch_size], device=data.rec_image.device)
    img, pos, neg = data.rec_image[rec], data.rec_pos[rec], data.rec_neg[rec, 0]
    best = float("inf")
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        feats = data.features(img, torch.cat([pos, neg]), head.uses_tokens)
        loss = batch_loss(head, cfg, img, pos, neg, feats)[0]
        if opt is not None:
            opt.zero_grad()
            loss.backward()
            opt.step()
        if i:
            best = min(best, time.perf_counter() - t0)
    return best


def head_parameters(cfg: TrainConfig, dim: int) -> int:
    """Trainable parameters of the configured head at dimension `dim` (Flow-CLIP: 3d^2)."""
    return sum(p.numel() for p in cfg.build_head(dim).parameters())


# -- the run ------------------------------------------------------------------------------------
class HeadRun:
    """One run folder: its head, optimiser, state, log and evaluation."""

    @staticmethod
    def prepare_folder(
        store: FeatureStore, manifest_path: str, out: str, cfg: TrainConfig, device: str, resume: bool, overwrite: bool
    ) -> bool:
        """Check the run folder before any data are loaded: never mix two runs, never
        resume on another encoder or with other settings. Returns whether it had started."""
        started = checkpoint.claim_run(out, "head-run", "run", resume, overwrite, ", or score it: --scorer " + out)
        if not started and os.path.exists(os.path.join(out, "state.json")):
            raise FlowclipError(
                f"{out} is an unfinished run of an older flowclip (no {checkpoint.POINTER}); "
                f"pass --overwrite to start it again"
            )
        run_config = {
            "train": dataclasses.asdict(cfg),
            "store": store.root,
            "store_fingerprint": store.fingerprint,
            "encoder": store.encoder_config["model"],
            "manifest": os.path.abspath(manifest_path),
            "manifest_sha256": file_sha256(manifest_path),
            "git_revision": git_revision(),
            "head": cfg.build_head(store.meta["dim"]).hparams(),
            "dim": store.meta["dim"],
            "parameters": head_parameters(cfg, store.meta["dim"]),
            "torch": torch.__version__,
            "device": device,
        }
        if started:
            old = json.load(open(os.path.join(out, "config.json")))
            if old["store_fingerprint"] != store.fingerprint:
                raise FlowclipError(
                    f"{out} was trained on another encoder (store fingerprint "
                    f"{old['store_fingerprint'][:12]}, this store {store.fingerprint[:12]}); refused"
                )
            if old["train"] != run_config["train"] or old["manifest_sha256"] != run_config["manifest_sha256"]:
                raise FlowclipError(f"{out}: --resume with other settings or another manifest than the run began with")
        else:
            outputs.atomic_write(
                os.path.join(out, "config.json"), lambda p: json.dump(run_config, open(p, "w"), indent=1)
            )
        return started

    def __init__(
        self, store: FeatureStore, out: str, cfg: TrainConfig, data: TrainingData, device: str, started: bool, log
    ):
        if cfg.uses_tokens and not data.bank.has_patches:
            raise FlowclipError("the training data hold no patches, which a flow head needs")
        self.out, self.cfg, self.data, self.device, self.log = out, cfg, data, device, log
        self.head = cfg.build_head(store.meta["dim"]).to(device)
        self.params = list(self.head.parameters())
        log(f"{cfg.head} head at d={store.meta['dim']}: {sum(p.numel() for p in self.params):,} parameters")
        self.opt = (
            torch.optim.AdamW(self.params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
            if self.params
            else None
        )
        self.state: dict[str, Any] = {"epoch": 0, "step_in_epoch": 0, "global_step": 0, "metrics": []}
        if started:
            self.state = load_checkpoint(out, self.head, self.opt, device)
            log(f"resuming {out} at epoch {self.state['epoch']} step {self.state['step_in_epoch']}")
        outputs.own(out, "log.jsonl")
        self.logf = open(os.path.join(out, "log.jsonl"), "a")
        train_rec = np.nonzero(data.split == "train")[0]
        sample_rng = np.random.default_rng(cfg.seed)
        self.train_eval = np.sort(
            sample_rng.choice(train_rec, min(cfg.train_eval_records, len(train_rec)), replace=False)
        )
        self.val_rec = np.nonzero(data.split == "val")[0]
        self.seconds_before = self.state.get("seconds", 0.0)
        self.t_last = self.t_start = time.perf_counter()
        if not self.state["metrics"]:
            self.state["metrics"].append(self.evaluate(0))  # before training (the starting point)

    @property
    def position(self):
        return self.state["epoch"], self.state["step_in_epoch"]

    def evaluate(self, epoch: int) -> dict:
        self.head.eval()
        m: dict[str, Any] = {"epoch": epoch, "train_sample": pairwise_accuracy(self.head, self.data, self.train_eval)}
        if len(self.val_rec):
            m["val"] = pairwise_accuracy(self.head, self.data, self.val_rec)
        self.head.train()
        self.logf.write(json.dumps({"eval": m}) + "\n")
        self.logf.flush()
        what = (
            "start (before training; CLIP, Global-M and Flow-CLIP then score as the frozen encoder)"
            if epoch == 0
            else f"epoch {epoch}"
        )
        self.log(
            f"{what}: pairwise accuracy train-sample {m['train_sample']['all']:.4f}"
            + (f", val {m['val']['all']:.4f}" if "val" in m else "")
        )
        return m

    def step(self, img, pos, neg, feats) -> None:
        """One optimiser step on a batch whose features are already gathered."""
        cfg = self.cfg
        loss, l_hnb, l_cimr, terms = batch_loss(self.head, cfg, img, pos, neg, feats)
        epoch, step = self.position
        if not torch.isfinite(loss):
            raise FlowclipError(
                f"non-finite loss ({loss.item()}) at epoch {epoch} step {step}; "
                f"the last good checkpoint in {self.out} is kept (try a lower --lr)"
            )
        assert self.opt is not None, "a head without parameters takes no step"
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.grad_clip)
        self.opt.step()
        self.state["step_in_epoch"], self.state["global_step"] = step + 1, self.state["global_step"] + 1
        now = time.perf_counter()
        rec_log = {
            "step": self.state["global_step"],
            "epoch": epoch,
            "loss": loss.item(),
            "hnb": l_hnb.item(),
            "cimr": l_cimr.item(),
            "lr": self.opt.param_groups[0]["lr"],
            "grad_norm": grad_norm.item(),
            "steps_per_s": 1.0 / max(now - self.t_last, 1e-9),
        }
        self.t_last = now
        s_token = terms.get("s_token")
        rec_log.update({k: v.item() for k, v in terms.items() if v.numel() == 1})  # e.g. a learned temperature
        if s_token is not None:
            b = torch.arange(len(img), device=img.device)
            rec_log["mean_abs_s_token"] = s_token.detach().abs().mean().item()
            rec_log["token_margin"] = (s_token[b, b] - s_token[b, len(img) + b]).detach().mean().item()
        self.logf.write(json.dumps(rec_log) + "\n")
        if self.state["global_step"] % cfg.checkpoint_every == 0:
            self.save()

    def end_epoch(self) -> None:
        self.state["epoch"], self.state["step_in_epoch"] = self.state["epoch"] + 1, 0
        self.state["metrics"].append(self.evaluate(self.state["epoch"]))
        self.state["seconds"] = self.seconds_before + time.perf_counter() - self.t_start  # training wall time
        self.save()

    def save(self) -> None:
        self.logf.flush()
        save_checkpoint(self.out, self.head, self.opt, self.state)

    def finish(self) -> dict:
        """The scored weights (head.safetensors), then DONE, written last."""
        if not self.params:
            self.save()
        self.logf.close()
        write_finished_head(self.out, self.head, self.state["metrics"][-1])
        return self.state


def train_heads(
    store: FeatureStore,
    manifest_path: str,
    runs: list[tuple[str, TrainConfig]],
    *,
    device: str = "cpu",
    resume: bool = False,
    overwrite: bool = False,
    image_root: str | None = None,
    progress: bool = True,
    max_steps: int | None = None,
    data: TrainingData | None = None,
    placement: str = "auto",
    log=print,
) -> list[dict]:
    """Train several heads side by side on the same batches: each batch is gathered once
    and every head takes its own step on it. The runs must share seed, batch size and
    epochs (the data order); each ends exactly as it would alone."""
    cfgs = [c for _, c in runs]
    ref = cfgs[0]
    if any((c.seed, c.batch_size, c.epochs) != (ref.seed, ref.batch_size, ref.epochs) for c in cfgs):
        raise FlowclipError("side-by-side runs must share seed, batch size and epochs")
    finished = [out for out, _ in runs if resume and not overwrite and os.path.exists(os.path.join(out, "DONE"))]
    for out in finished:
        log(f"{out}: already finished (nothing to resume)")
    if finished and len(finished) == len(runs):
        return [checkpoint.read_state(out) for out, _ in runs]
    if finished:
        raise FlowclipError(f"{', '.join(finished)} already finished; resume the others without them")
    for out, cfg in runs:
        log(f"{os.path.basename(os.path.normpath(out))}: {cfg.describe()}")
    manifest = Manifest.read(manifest_path)
    new = {out: os.path.isdir(out) for out, _ in runs if not os.path.exists(out) or not os.listdir(out)}
    try:
        started_flags = [
            HeadRun.prepare_folder(store, manifest_path, out, cfg, device, resume, overwrite) for out, cfg in runs
        ]
        return _train(
            store,
            manifest,
            manifest_path,
            runs,
            started_flags,
            device,
            image_root,
            progress,
            max_steps,
            data,
            placement,
            log,
        )
    except BaseException:
        for out, existed in new.items():  # a failure leaves nothing behind but what --resume needs
            if not checkpoint.exists(out) and os.path.isdir(out):
                for name in os.listdir(out) if existed else []:  # the user's empty folder stays
                    path = os.path.join(out, name)
                    shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
                if not existed:
                    shutil.rmtree(out, ignore_errors=True)
        raise


def _train(
    store, manifest, manifest_path, runs, started_flags, device, image_root, progress, max_steps, data, placement, log
):
    cfgs = [c for _, c in runs]
    ref = cfgs[0]
    torch.manual_seed(ref.seed)
    if device == "cpu":
        torch.use_deterministic_algorithms(True, warn_only=True)
    # 1. data, once, on the device
    if data is None:
        data = load_training_data(store, manifest, any(c.uses_tokens for c in cfgs), device, image_root, placement, log)
    train_rec = np.nonzero(data.split == "train")[0]
    if len(train_rec) < 2:
        raise FlowclipError(f"{manifest_path}: fewer than 2 records with split == 'train'")
    # 2. one HeadRun per folder (resumed where it stopped)
    heads = [
        HeadRun(
            store,
            out,
            cfg,
            data,
            device,
            started,
            log if len(runs) == 1 else (lambda m, o=out: log(f"{os.path.basename(o)}: {m}")),
        )
        for (out, cfg), started in zip(runs, started_flags)
    ]
    trainable = [h for h in heads if h.params]
    groups: dict[tuple, list[HeadRun]] = {}
    for h in trainable:  # runs resumed at different points go side by side from where each stopped
        groups.setdefault(h.position, []).append(h)
    for group in groups.values():
        if not _lockstep(group, data, train_rec, ref, device, progress, max_steps):
            return [h.state for h in heads]  # stopped early (max_steps, for tests of resume)
    # 4. finished: the marker last
    return [h.finish() for h in heads]


def epoch_order(train_rec: np.ndarray, rec_neg: torch.Tensor, seed: int, epoch: int, device: str):
    """(record order, the negative drawn for each record) of one epoch: a function of
    (seed, epoch) only, so a resumed run and flowclip adapt see the same batches."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.as_tensor(train_rec)[torch.randperm(len(train_rec), generator=g)].to(device)
    n_neg = (rec_neg >= 0).sum(1)
    neg_pick = (torch.rand(len(rec_neg), generator=g).to(device) * n_neg.to(device)).long()
    return order, neg_pick


def steps_per_epoch(n_train: int, batch_size: int) -> int:
    return n_train // batch_size if n_train >= batch_size else 1


def _lockstep(
    group: list[HeadRun],
    data: TrainingData,
    train_rec: np.ndarray,
    ref: TrainConfig,
    device: str,
    progress: bool,
    max_steps: int | None,
) -> bool:
    """Epochs of batches for heads at the same position; False if max_steps cut it short."""
    B = ref.batch_size
    n_steps = steps_per_epoch(len(train_rec), B)
    need_tokens = any(h.head.uses_tokens for h in group)
    bar = progress_bar(n_steps * ref.epochs, "train", "step", progress, group[0].state["global_step"])
    steps_run = 0
    # the order and the negative drawn depend only on (seed, epoch)
    while group[0].state["epoch"] < ref.epochs:
        epoch, first_step = group[0].position
        order, neg_pick = epoch_order(train_rec, data.rec_neg, ref.seed, epoch, device)

        def batch(step):
            rec = order[step * B : (step + 1) * B]
            img = data.rec_image[rec]
            pos, neg = data.rec_pos[rec], data.rec_neg[rec, neg_pick[rec]]
            return img, pos, neg, data.features(img, torch.cat([pos, neg]), need_tokens)  # once for all heads

        steps = range(first_step, n_steps)
        # the in-device bank gathers in no time; the others read ahead on a worker thread
        batches = map(batch, steps) if data.placement == "device" else prefetch(batch, steps, 2, device)
        for img, pos, neg, feats in batches:
            for h in group:
                h.step(img, pos, neg, feats)
            bar.update(1)
            steps_run += 1
            if max_steps is not None and steps_run >= max_steps:
                for h in group:
                    h.save()
                bar.close()
                return False
        for h in group:
            h.end_epoch()
    bar.close()
    return True


def train_head(
    store: FeatureStore,
    manifest_path: str,
    out: str,
    cfg: TrainConfig,
    *,
    device: str = "cpu",
    resume: bool = False,
    overwrite: bool = False,
    image_root: str | None = None,
    progress: bool = True,
    max_steps: int | None = None,
    data: TrainingData | None = None,
    placement: str = "auto",
    log=print,
) -> dict:
    """One head. data: features already gathered for this manifest (a study shares one copy)."""
    return train_heads(
        store,
        manifest_path,
        [(out, cfg)],
        device=device,
        resume=resume,
        overwrite=overwrite,
        placement=placement,
        image_root=image_root,
        progress=progress,
        max_steps=max_steps,
        data=data,
        log=log,
    )[0]
