"""One head run folder while it trains: its head, optimiser, state, log, evaluation,
checkpoints, and the finished head (loop.py runs several side by side)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .. import outputs
from ..errors import FlowclipError
from ..hashing import unchanged_file_sha256
from ..progress import stage
from ..store import FeatureStore
from ..store.layout import describe_encoder
from . import checkpoint
from .adamw import AdamW
from .losses import batch_loss
from .run_folder import git_revision, load_checkpoint, save_checkpoint, write_finished_head
from .run_header import check_encoder, check_same_run
from .training_data import TrainingData, pairwise_accuracies

if TYPE_CHECKING:
    from .train_config import TrainConfig


def head_parameters(cfg: "TrainConfig", dim: int) -> int:
    """Trainable parameters of the configured head at dimension `dim` (Flow-CLIP: 3d^2)."""
    return sum(p.numel() for p in cfg.build_head(dim).parameters())


class HeadRun:
    """One run folder: its head, optimiser, state, log and evaluation."""

    @staticmethod
    def run_config(store: FeatureStore, manifest_path: str, cfg: TrainConfig, device: str) -> dict:
        """The config.json a run of these settings on this store and manifest records (its
        identity: run_header.run_identity)."""
        return {
            "train": dataclasses.asdict(cfg),
            "store": store.root,
            "store_fingerprint": store.fingerprint,
            "encoder": store.encoder_config["model"],
            "encoder_description": describe_encoder(store.encoder_config),
            "manifest": os.path.abspath(manifest_path),
            "manifest_sha256": unchanged_file_sha256(manifest_path),
            "git_revision": git_revision(),
            "head": cfg.build_head(store.meta["dim"]).hparams(),
            "dim": store.meta["dim"],
            "parameters": head_parameters(cfg, store.meta["dim"]),
            "torch": torch.__version__,
            "device": device,
        }

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
        run_config = HeadRun.run_config(store, manifest_path, cfg, device)
        if started:
            old = json.load(open(os.path.join(out, "config.json")))
            check_encoder(old, store.meta, out)
            check_same_run(old, run_config, out)  # (a run may be continued past its cap: max_steps aside)
            if old["train"].get("max_steps") != cfg.max_steps:
                old["train"]["max_steps"] = cfg.max_steps
                outputs.atomic_write(os.path.join(out, "config.json"), lambda p: json.dump(old, open(p, "w"), indent=1))
        else:
            outputs.atomic_write(
                os.path.join(out, "config.json"), lambda p: json.dump(run_config, open(p, "w"), indent=1)
            )
        return started

    def __init__(
        self,
        store: FeatureStore,
        out: str,
        cfg: TrainConfig,
        data: TrainingData,
        device: str,
        started: bool,
        log,
        initial_weights: dict | None = None,
        watch=None,
    ):
        if cfg.uses_tokens and not data.bank.has_patches:
            raise FlowclipError("the training data hold no patches, which a flow head needs")
        self.out, self.cfg, self.data, self.device, self.log = out, cfg, data, device, log
        # watch(out, record): each record of log.jsonl as it is written (tracking, a sweep's pruner);
        # an evaluation comes after its checkpoint, so a watcher that stops the run loses nothing
        self.watch = watch or (lambda out, record: None)
        if data.skipped:  # the records left out (failed at extract) are part of the run's record
            path = os.path.join(out, "config.json")
            conf = json.load(open(path))
            if conf.get("excluded_failed") != data.skipped:
                conf["excluded_failed"] = data.skipped
                outputs.atomic_write(path, lambda p: json.dump(conf, open(p, "w"), indent=1))
        self.head = cfg.build_head(store.meta["dim"])
        if initial_weights is not None and not started:
            try:
                self.head.load_state_dict(initial_weights)
            except RuntimeError as e:
                raise FlowclipError(f"the given {cfg.head} head does not fit this store's features: {e}") from None
        self.head = self.head.to(device)
        self.params = list(self.head.parameters())
        log(f"{cfg.head} head at d={store.meta['dim']}: {sum(p.numel() for p in self.params):,} parameters")
        self.opt = (
            AdamW(self.params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
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

    def start(self, measured: dict | None = None) -> None:
        """The evaluation before training (the starting point), for a run that has none."""
        self.state["metrics"].append(self.evaluate(0, measured))
        self.watch(self.out, {"eval": self.state["metrics"][-1], "step": 0})

    @property
    def position(self):
        return self.state["epoch"], self.state["step_in_epoch"]

    def evaluate(self, epoch: int, measured: dict | None = None) -> dict:
        """This run's evaluation at epoch, logged: measured (evaluate_together's), or measured here."""
        measured = measured if measured is not None else evaluate_together([self])[0]
        m: dict[str, Any] = {"epoch": epoch, **measured}
        self.logf.write(json.dumps({"eval": m}) + "\n")
        self.logf.flush()
        step = self.state["global_step"]
        if step == 0:
            what = "start (before training" + (  # (only the heads that start as the identity say so)
                "; a Global-M or Flow-CLIP head then scores as the frozen encoder)"
                if self.cfg.head in ("global", "flow")
                else ")"
            )
        elif self.state["step_in_epoch"]:  # mid-epoch: a run stopped at its max_steps
            what = f"step {step} (max_steps, {self.state['step_in_epoch']} steps into epoch {epoch + 1})"
        else:
            what = f"epoch {epoch}"
        self.log(
            f"{what}: pairwise accuracy train-sample {m['train_sample']['all']:.4f}"
            + (f", val {m['val']['all']:.4f}" if "val" in m else "")
        )
        return m

    def step(self, img, pos, neg, feats) -> None:
        """One optimiser step on a batch whose features are already gathered."""
        loss, terms, parts = batch_loss(self.head, self.cfg, img, pos, neg, feats)
        self.check_loss(loss)
        assert self.opt is not None, "a head without parameters takes no step"
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.take_step(img, loss, terms, parts)

    def check_loss(self, loss) -> None:
        if not torch.isfinite(loss):
            epoch, step = self.position
            raise FlowclipError(
                f"non-finite loss ({loss.item()}) at epoch {epoch} step {step}; "
                f"the last good checkpoint in {self.out} is kept (try a lower --lr)"
            )

    def take_step(self, img, loss, terms: dict, parts: dict) -> None:
        """Clip the gradients the parameters hold, step AdamW, log the step (stacked.py
        hands gradients it computed for several runs at once to each run's own here)."""
        cfg, (epoch, step) = self.cfg, self.position
        assert self.opt is not None
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.grad_clip)
        self.opt.step()
        self.state["step_in_epoch"], self.state["global_step"] = step + 1, self.state["global_step"] + 1
        now = time.perf_counter()
        rec_log = {
            "step": self.state["global_step"],
            "epoch": epoch,
            "loss": loss.item(),
            **{name: term.item() for name, term in terms.items()},  # hnb, cimr and the head's own terms
            "lr": self.opt.param_groups[0]["lr"],
            "grad_norm": grad_norm.item(),
            "steps_per_s": 1.0 / max(now - self.t_last, 1e-9),
        }
        self.t_last = now
        s_token = parts.get("s_token")
        rec_log.update({k: v.item() for k, v in parts.items() if v.numel() == 1})  # e.g. a learned temperature
        if s_token is not None:
            b = torch.arange(len(img), device=img.device)
            rec_log["mean_abs_s_token"] = s_token.detach().abs().mean().item()
            rec_log["token_margin"] = (s_token[b, b] - s_token[b, len(img) + b]).detach().mean().item()
        self.logf.write(json.dumps(rec_log) + "\n")
        if self.state["global_step"] % cfg.checkpoint_every == 0:
            self.save()
        self.watch(self.out, rec_log)

    @staticmethod
    def reopen_past_max_steps(out: str, cfg: TrainConfig, log) -> bool:
        """A finished run that stopped at its max_steps, resumed with a larger one (or
        none): its finished files go (DONE first) and training continues from the checkpoint."""
        if outputs.kind_of(out) != "head-run":  # only a run folder flowclip wrote (its marker) is reopened
            return False
        try:
            cap = json.load(open(os.path.join(out, "config.json")))["train"].get("max_steps")
            state = checkpoint.read_state(out)
        except (OSError, ValueError, KeyError, FlowclipError):
            return False
        step = state.get("global_step", 0)
        if cap is None or step < cap or state.get("epoch", 0) >= cfg.epochs:
            return False
        if cfg.max_steps is not None and cfg.max_steps <= step:
            return False
        log(f"{out}: finished at max_steps {cap}; continuing to {cfg.max_steps or 'the end of its epochs'}")
        for name in ("DONE", "head.safetensors"):
            if os.path.exists(os.path.join(out, name)):
                os.remove(os.path.join(out, name))
        return True

    @property
    def at_max_steps(self) -> bool:
        return self.cfg.max_steps is not None and self.state["global_step"] >= self.cfg.max_steps

    @property
    def evaluated_here(self) -> bool:
        """Evaluated at this very step already (a run resumed at its max_steps)."""
        return bool(self.state["metrics"]) and self.state["metrics"][-1].get("step") == self.state["global_step"]

    def stop_at_max_steps(self, measured: dict | None = None) -> None:
        """The run ends here, mid-epoch: evaluated and checkpointed like an epoch's end, so
        it is scored as finished and a larger max_steps resumes it from this very step."""
        if self.evaluated_here:
            return
        m = self.evaluate(self.state["epoch"], measured)
        m["step"] = self.state["global_step"]
        self.state["metrics"].append(m)
        self.state["seconds"] = self.seconds_before + time.perf_counter() - self.t_start
        self.save()
        self.watch(self.out, {"eval": m, "step": self.state["global_step"]})

    def end_epoch(self, measured: dict | None = None) -> None:
        self.state["epoch"], self.state["step_in_epoch"] = self.state["epoch"] + 1, 0
        self.state["metrics"].append(self.evaluate(self.state["epoch"], measured))
        self.state["seconds"] = self.seconds_before + time.perf_counter() - self.t_start  # training wall time
        self.save()
        self.watch(self.out, {"eval": self.state["metrics"][-1], "step": self.state["global_step"]})

    def save(self) -> None:
        with stage("checkpoints"):
            self.logf.flush()
            save_checkpoint(self.out, self.head, self.opt, self.state)

    def finish(self) -> dict:
        """The scored weights (head.safetensors), then DONE, written last."""
        if not self.params:
            self.save()
        self.logf.close()
        with stage("checkpoints"):
            write_finished_head(self.out, self.head, self.state["metrics"][-1])
        return self.state


def evaluate_together(runs: list[HeadRun]) -> list[dict]:
    """Each run's pairwise accuracy now, on its training sample and (where there is one) the
    val records: runs whose records are the same are scored together, each chunk's features
    gathered once for them all (training_data.pairwise_accuracies)."""
    out: list[dict] = [{} for _ in runs]
    with stage("evaluation"):
        for name, records in (("train_sample", lambda r: r.train_eval), ("val", lambda r: r.val_rec)):
            same: dict[tuple, list[int]] = {}  # runs on the same data and records
            for i, r in enumerate(runs):
                if name == "train_sample" or len(records(r)):  # (the sample is logged even when empty)
                    same.setdefault((id(r.data), records(r).tobytes()), []).append(i)
            for idx in same.values():
                heads = [runs[i].head for i in idx]
                for h in heads:
                    h.eval()
                try:
                    got = pairwise_accuracies(heads, runs[idx[0]].data, records(runs[idx[0]]))
                finally:
                    for h in heads:
                        h.train()
                for i, m in zip(idx, got):
                    out[i][name] = m
    return out


def start_together(runs: list[HeadRun]) -> None:
    """Runs not yet evaluated (new ones): their starting points, evaluated together."""
    todo = [r for r in runs if not r.state["metrics"]]
    for r, m in zip(todo, evaluate_together(todo)):
        r.start(m)


def end_epoch_together(runs: list[HeadRun]) -> None:
    """Runs at an epoch's end: evaluated together, then each logs and checkpoints its own."""
    for r, m in zip(runs, evaluate_together(runs)):
        r.end_epoch(m)


def stop_together(runs: list[HeadRun]) -> None:
    """Runs at their max_steps: evaluated together (unless already here), each then ends."""
    todo = [r for r in runs if not r.evaluated_here]
    for r, m in zip(todo, evaluate_together(todo)):
        r.stop_at_max_steps(m)
