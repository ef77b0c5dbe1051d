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

import os
import shutil
import time

import numpy as np
import torch

from ..errors import FlowclipError
from ..heads import head_class
from ..heads.base import check_token_mask
from ..manifest import Manifest
from ..progress import bar as progress_bar
from ..progress import stage
from ..store import FeatureStore
from ..store.banks import prefetch
from . import checkpoint
from .adamw import AdamW
from .head_run import HeadRun, end_epoch_together, start_together, stop_together
from .losses import batch_loss
from .run_header import check_encoder, check_same_run, read_run_config
from .stacked import Stacker
from .train_config import TrainConfig
from .training_data import TrainingData, check_missing, load_training_data, training_records


def seconds_per_step(data: TrainingData, cfg: TrainConfig, device: str, repeats: int = 3) -> float:
    """A measured optimiser step of this head on the first batch of training records
    (the dry run's time estimate): best of a few, after one warm-up."""
    head = cfg.build_head(data.bank.dim).to(device)
    params = list(head.parameters())
    opt = AdamW(params, lr=cfg.lr) if params else None
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
    stop_after: int | None = None,
    data: TrainingData | None = None,
    placement: str = "auto",
    initial_weights: list[dict | None] | None = None,
    watch=None,
    stack: bool = False,
    allow_missing: bool = False,
    log=print,
) -> list[dict]:
    """Train several heads side by side on the same batches: each batch is gathered once
    and every head takes its own step on it. The runs must share seed, batch size and
    epochs (the data order); each ends exactly as it would alone. initial_weights: a
    state_dict per run that a new run starts from instead of its head's own initialisation
    (the Python API's train_head(head=instance)). watch(out, record): every record a run
    logs, as it is logged (tracking.py; a sweep's pruner). stack: runs that can stack take
    one batched step (stacked.py). allow_missing: train on the records left once those whose
    features extract could not make are dropped (refused otherwise: training_data.check_missing)."""
    cfgs = [c for _, c in runs]
    ref = cfgs[0]
    if any((c.seed, c.batch_size, c.epochs) != (ref.seed, ref.batch_size, ref.epochs) for c in cfgs):
        raise FlowclipError("side-by-side runs must share seed, batch size and epochs")
    finished = [out for out, _ in runs if resume and not overwrite and os.path.exists(os.path.join(out, "DONE"))]
    for out, cfg in runs:  # a finished run is these settings' run, or refused (never reported as done under them)
        if out in finished:
            check_same_run(read_run_config(out, out), HeadRun.run_config(store, manifest_path, cfg, device), out)
    for out, cfg in runs:  # a run that stopped at its max_steps goes on under a larger one
        if out in finished and HeadRun.reopen_past_max_steps(out, cfg, log):
            finished.remove(out)
    for out in finished:
        log(f"{out}: already finished (nothing to resume)")
    if finished and len(finished) == len(runs):
        return [checkpoint.read_state(out) for out, _ in runs]
    if finished:
        raise FlowclipError(f"{', '.join(finished)} already finished; resume the others without them")
    for out, cfg in runs:
        log(f"{os.path.basename(os.path.normpath(out))}: {cfg.describe()}")
        cfg.check_contract(store.meta["dim"])  # a broken head fails here, before any folder is written
    for out, _ in runs:  # a run resumed on another encoder, refused first (its config says which)
        if resume and os.path.isfile(os.path.join(out, "config.json")):
            check_encoder(read_run_config(out, out), store.meta, out)
    manifest = None  # (data: read by whoever loaded it)
    if data is None:  # the records, read and their missing features judged before any folder is written
        manifest = training_records(store, Manifest.read(manifest_path), image_root)
        check_missing(manifest, allow_missing)
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
            stop_after,
            data,
            placement,
            initial_weights or [None] * len(runs),
            watch,
            stack,
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
    store, manifest, manifest_path, runs, started_flags, device, image_root, progress, stop_after, data, placement,
    initial, watch, stack, log,
):  # fmt: skip
    cfgs = [c for _, c in runs]
    ref = cfgs[0]
    torch.manual_seed(ref.seed)
    if device == "cpu":
        # torch.use_deterministic_algorithms sets this same flag, and first imports the compiler
        # stack (torch._inductor, torch._dynamo: +1.8 s and +150 MiB a process) to set inductor's
        # own flag, which only compiled code reads: flowclip compiles nothing
        torch._C._set_deterministic_algorithms(True, warn_only=True)
    for out, c in runs:  # a head refuses a store its method is not defined on, before any loading
        check_token_mask(head_class(c.head), store.encoder_config["token_mask"], out)
    # 1. data, once, on the device
    if data is None:
        with stage("loading"):
            data = load_training_data(
                store, manifest, any(c.uses_tokens for c in cfgs), device, image_root, placement, log, True
            )
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
            weights,
            watch,
        )
        for (out, cfg), started, weights in zip(runs, started_flags, initial)
    ]
    start_together(heads)  # (new runs: where each starts, evaluated before any step)
    trainable = [h for h in heads if h.params]
    groups: dict[tuple, list[HeadRun]] = {}
    for h in trainable:  # runs resumed at different points go side by side from where each stopped
        groups.setdefault(h.position, []).append(h)
    stacker = Stacker(stack)
    for group in groups.values():
        if not _lockstep(group, data, train_rec, ref, device, progress, stop_after, stacker):
            return [h.state for h in heads]  # stopped early (stop_after, for tests of resume)
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
    stop_after: int | None,
    stacker: Stacker,
) -> bool:
    """Epochs of batches for heads at the same position; False if stop_after cut it short."""
    B = ref.batch_size
    n_steps = steps_per_epoch(len(train_rec), B)
    capped = [h for h in group if h.at_max_steps]  # resumed at (or past) its cap
    stop_together(capped)
    group = [h for h in group if h not in capped]
    if not group:
        return True
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
            with stage("steps"):
                stacker.step(group, img, pos, neg, feats)
            capped = [h for h in group if h.at_max_steps]  # max_steps reached: those runs are done
            stop_together(capped)
            group = [h for h in group if h not in capped]
            bar.update(1)
            if not group:
                bar.close()
                return True
            steps_run += 1
            if stop_after is not None and steps_run >= stop_after:
                for h in group:
                    h.save()
                bar.close()
                return False
        end_epoch_together(group)
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
    stop_after: int | None = None,
    data: TrainingData | None = None,
    placement: str = "auto",
    initial_weights: dict | None = None,
    watch=None,
    allow_missing: bool = False,
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
        stop_after=stop_after,
        data=data,
        initial_weights=[initial_weights],
        watch=watch,
        allow_missing=allow_missing,
        log=log,
    )[0]
