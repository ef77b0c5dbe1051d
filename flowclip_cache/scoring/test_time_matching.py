"""Test-time matching over a head: SimpleMatch-head and TTM-head (ours), `flowclip
test-time-match`.

Zhu, Zhang and Tang 2025 ("Test-Time Matching", arXiv 2510.07632; yinglunz/test-time-matching
at 0033953) adapt a model to a group benchmark's own test images and captions, without
labels. main.py `main` repeats, for each iteration: match.py `group_match` (each 2x2
group's margin s00 + s11 - s01 - s10 on the model's logits; margin >= threshold: the
identity matching is taken, else margin <= -threshold: the swapped one, else the group is
left out), then train.py `train_model` (epochs over the matched groups in shuffled batches
of groups, the model's own contrastive loss over a batch's images x captions, AdamW,
utils.get_lr_schedule_lambda per iteration, the learning rate restarted at lr * 0.95^k
with the optimiser's state kept), then evaluate.py `evaluate_model` (text, image and group
score; GroupMatch). SimpleMatch (the paper's section 3) is one such iteration at threshold
0: every group overfitted to its GroupMatch matching, scored by the standard metrics.
ttm.sh's settings are the defaults here (10 iterations, threshold 2.0 -> 0 linear, 30
epochs, 50 groups a batch, cosine schedule to 0.1, weight decay 0.05, seed 42).

Ours, and named so: the release fine-tunes the whole model; flowclip adapts a *head* on
the cached features (the encoders stay frozen): on a 2-core CPU, a Global-M head over 133
synthetic groups takes about 3 s for the whole command, a Flow-CLIP head 6 min (its
all-pairs step; docs/results-synthetic.md section 12). The logits are
the head's scores over its training temperature tau_c (1/tau_c = 100, CLIP's scale),
the loss CLIP's (HF CLIPModel's return_loss: the mean of the image->caption and
caption->image cross-entropies, diagonal targets), the learning rate by default the
run's own. `clip` adapts a Global-M head from the identity (which scores as the frozen
encoder does). A threshold-0 tie (margin exactly 0) takes the identity matching, as the
release's `>=` does: an exactly tied group trains toward its gold matching, a leak of the
release's that flowclip keeps (the official figures decide such a tie as wrong). Every
figure it prints is after adapting to the test set, labelled so, never an official score.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import FlowclipError
from .aggregation import aggregate_groups

SOURCE = (
    "test-time matching over a head (flowclip's SimpleMatch-head / TTM-head, after Zhu et al. 2025, "
    "yinglunz/test-time-matching main.py): adapted to the test set's own images and captions without "
    "labels; not an official score"
)


@dataclasses.dataclass(frozen=True)
class TTMConfig:
    """ttm.sh's settings; lr None: the head's own training learning rate."""

    iterations: int = 10
    threshold_start: float = 2.0
    threshold_end: float = 0.0
    threshold_schedule: str = "linear"
    epochs: int = 30
    batch_groups: int = 50
    lr: float | None = None
    lr_schedule: str = "cosine"
    min_lr_factor: float = 0.1
    lr_restart: float = 0.95
    weight_decay: float = 0.05
    seed: int = 42

    def check(self) -> None:
        if self.iterations < 1 or self.epochs < 1 or self.batch_groups < 1:
            raise FlowclipError("test-time matching: iterations, epochs and batch groups must each be at least 1")
        if self.threshold_schedule not in ("linear", "cosine", "constant"):
            raise FlowclipError(
                f"unknown threshold schedule {self.threshold_schedule!r}; use linear, cosine or constant"
            )
        if self.lr_schedule not in ("linear", "cosine", "constant"):
            raise FlowclipError(f"unknown lr schedule {self.lr_schedule!r}; use linear, cosine or constant")
        if self.lr is not None and not self.lr > 0:
            raise FlowclipError(f"test-time matching: the learning rate must be > 0, got {self.lr}")


RECIPES = {
    "simplematch": {"iterations": 1, "threshold_start": 0.0, "threshold_end": 0.0, "threshold_schedule": "constant"},
    "ttm": {},
}


def threshold_at(k: int, cfg: TTMConfig) -> float:
    """Iteration k's threshold (utils.get_threshold_schedule)."""
    if cfg.threshold_schedule == "linear":
        return float(np.linspace(cfg.threshold_start, cfg.threshold_end, cfg.iterations)[k])
    if cfg.threshold_schedule == "cosine":
        grid = np.linspace(0, np.pi, cfg.iterations)
        return float(cfg.threshold_end + 0.5 * (cfg.threshold_start - cfg.threshold_end) * (1 + np.cos(grid[k])))
    return cfg.threshold_start


def lr_factor(step: int, total: int, schedule: str, min_factor: float) -> float:
    """The learning rate's factor at a step of an iteration (utils.get_lr_schedule_lambda)."""
    if schedule == "linear":
        return max(1.0 - step / total, min_factor)
    if schedule == "cosine":
        return min_factor + 0.5 * (1.0 - min_factor) * (1 + math.cos(math.pi * min(step / total, 1.0)))
    return 1.0


def pseudo_matching(logits: torch.Tensor, threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [n, 2, 2] (image x caption) -> (the selected groups [k], whether each is
    matched swapped [k]): group_match's 2x2 branch, on the exact margin (metrics.group_margins,
    the one GroupMatch is decided on: an exactly tied group is a tie here too)."""
    from .metrics import group_margins

    margin = torch.from_numpy(group_margins(logits.detach().cpu().numpy()))
    identity = margin >= threshold
    swapped = ~identity & (margin <= -threshold)
    keep = identity | swapped
    return torch.nonzero(keep).ravel(), swapped[keep]


def clip_loss(S: torch.Tensor, tau: float) -> torch.Tensor:
    """CLIP's loss over a batch whose image i goes with caption i (S [B, B] scores)."""
    logits = S / tau
    target = torch.arange(len(S), device=S.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))


def group_batch(groups: torch.Tensor, swapped: torch.Tensor, img_idx: torch.Tensor, cap_idx: torch.Tensor):
    """The images [2B] and their matched captions [2B] of a batch of groups (collate_fn_group's
    order: each group's two images, each with the caption the matching gives it)."""
    imgs = img_idx[groups].reshape(-1)
    caps = cap_idx[groups]
    caps = torch.where(swapped[:, None], caps.flip(1), caps).reshape(-1)
    return imgs, caps


def fit(S: np.ndarray, groups: torch.Tensor, swapped: torch.Tensor) -> float:
    """The share of matched groups whose scores S [n, 2, 2] decide the matching they were
    given as Winoground's group score decides (every comparison strict)."""
    from .metrics import group_decisions

    g, sw = groups.numpy(), swapped.numpy()
    Sg = np.where(sw[:, None, None], S[g][:, :, ::-1], S[g])
    return float(group_decisions(Sg)["group"].mean())


class GroupScores:
    """Every 2x2 group's four scores under a head, from features loaded once."""

    def __init__(self, bank, img_idx: torch.Tensor, cap_idx: torch.Tensor):
        self.bank, self.img_idx, self.cap_idx = bank, img_idx, cap_idx

    def __call__(self, head) -> np.ndarray:
        from .engines import _chunked_matched

        n = len(self.img_idx)
        imgs = self.img_idx[:, :, None].expand(n, 2, 2).reshape(-1)  # [group, image, caption]
        caps = self.cap_idx[:, None, :].expand(n, 2, 2).reshape(-1)
        head.eval()
        return _chunked_matched(head, self.bank, imgs, caps).reshape(n, 2, 2)


def adapt(head, bank, img_idx, cap_idx, cfg: TTMConfig, tau: float, lr: float, evaluate, log=print) -> list[dict]:
    """Run the iterations on the head in place. evaluate(scores [n, 2, 2]) -> figures.
    -> one entry per evaluation: before any adaptation, then after each iteration."""
    from ..training.adamw import AdamW

    score = GroupScores(bank, img_idx, cap_idx)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = AdamW(params, lr=lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.999))
    S = score(head)
    history = [{"iteration": 0, **evaluate(S)}]
    for k in range(cfg.iterations):
        th = threshold_at(k, cfg)
        groups, swapped = pseudo_matching(torch.from_numpy(S) / tau, th)
        entry: dict = {"iteration": k + 1, "threshold": th, "selected": int(len(groups))}
        entry["pseudo_label_accuracy"] = float((~swapped).float().mean()) if len(groups) else None
        if len(groups):
            entry["fit_before"] = fit(S, groups, swapped)
            entry["mean_loss"] = _train(
                head, bank, groups, swapped, img_idx, cap_idx, cfg, opt, tau, lr * cfg.lr_restart**k, k
            )
        S = score(head)
        if len(groups):
            entry["fit"] = fit(S, groups, swapped)
        history.append({**entry, **evaluate(S)})
        log(f"  iteration {k + 1}/{cfg.iterations}: threshold {th:.3g}, {len(groups)} groups matched; "
            f"group {100 * history[-1]['group']:.2f}, GroupMatch {100 * history[-1]['group_match']:.2f}")  # fmt: skip
    return history


def _train(head, bank, groups, swapped, img_idx, cap_idx, cfg: TTMConfig, opt, tau, lr, k) -> float:
    """One iteration's epochs over the matched groups; the mean loss of its steps."""
    per_epoch = -(-len(groups) // cfg.batch_groups)
    total = cfg.epochs * per_epoch
    gen = torch.Generator().manual_seed(cfg.seed + k)
    head.train()
    losses, step = [], 0
    for _ in range(cfg.epochs):
        order = torch.randperm(len(groups), generator=gen)
        for a in range(0, len(groups), cfg.batch_groups):
            pick = order[a : a + cfg.batch_groups]
            imgs, caps = group_batch(groups[pick], swapped[pick], img_idx, cap_idx)
            for g in opt.param_groups:
                g["lr"] = lr * lr_factor(step, total, cfg.lr_schedule, cfg.min_lr_factor)
            v, P, t, H, mask = bank.features(imgs, caps, head.uses_tokens)
            loss = clip_loss(head.forward_terms(v, P, t, H, mask)[0], tau)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
    return float(np.mean(losses))


def group_figures(sc, cols: dict):
    """evaluate() of a group task: its official text, image and group figures under the
    benchmark's own rule and aggregation, and GroupMatch, from the scores [n, 2, 2]."""
    names = dict(sc.metric_names)

    def evaluate(S: np.ndarray) -> dict:
        res = aggregate_groups(sc, S, cols)
        out = {m: res["metrics"][names.get(m, m)]["score"] for m in ("text", "image", "group")}
        return {**out, "group_match": res["test_time_matching"]["group_match"], "headline": res["score"]}

    return evaluate


def run_test_time_matching(
    store, manifest: str, scorer: str, out: str, cfg: TTMConfig, recipe: str, *, device="cpu", image_root=None,
    overwrite: bool = False, log=print,
) -> dict:  # fmt: skip
    """Adapt the scorer's head to a group task's test set and write results.json and
    results.md to a new folder `out` (output kind "test-time-matching")."""
    import json

    from .. import outputs
    from ..manifest import Manifest
    from ..store.banks import FeatureBank
    from .manifest_specs import scoring_of

    cfg.check()
    outputs.check_replaceable(out, "test-time-matching", overwrite)
    m = Manifest.read(manifest)
    name, sc = scoring_of(m, log)
    if sc.task != "groups":
        raise FlowclipError(f"{manifest}: test-time matching takes a 2x2 group task; {name} is a {sc.task} task")
    head, tau, lr, label = _adaptable_head(store, scorer, device)
    img_keys, texts, img_idx, cap_idx = _group_indices(store, m, image_root)
    bank = FeatureBank.load(store, img_keys, texts, head.uses_tokens, device)
    lr = cfg.lr if cfg.lr is not None else lr
    log(f"{recipe} on {name} ({len(img_idx)} groups), scorer {label}: lr {lr:g}, tau {tau:g}")
    history = adapt(
        head, bank, img_idx.to(device), cap_idx.to(device), cfg, tau, lr, group_figures(sc, m.table.to_pydict()), log
    )
    summary = {"benchmark": name, "manifest": manifest, "scorer": label, "recipe": recipe,
               "settings": {**dataclasses.asdict(cfg), "lr": lr, "tau": tau}, "groups": len(img_idx),
               "store_fingerprint": store.fingerprint, "source": SOURCE, "history": history}  # fmt: skip
    with outputs.staged(out, "test-time-matching", overwrite) as tmp:
        outputs.write_text(f"{tmp}/results.json", json.dumps(summary, indent=1))
        outputs.write_text(f"{tmp}/results.md", report(summary))
    log(f"wrote {out}")
    return summary


def _adaptable_head(store, spec: str, device: str):
    """(a trainable head, its tau_c, its training learning rate, its label): a run folder's
    head, or for `clip` a Global-M head at the identity (scores as the frozen encoder)."""
    from ..head_specs import training_free_kinds
    from ..heads.global_m import GlobalHead
    from ..training.train_config import TrainConfig
    from .scorers import load_scorers

    if spec == "clip":
        d = TrainConfig()
        return GlobalHead(store.meta["dim"]).to(device), d.tau_c, d.lr, "clip (Global-M from the identity)"
    if spec in training_free_kinds():
        raise FlowclipError(
            f"--scorer {spec}: a training-free scorer has no weights to adapt; give a run folder or clip"
        )
    (s,) = load_scorers([spec], store, device)
    assert s.train is not None  # a run folder's settings
    head = s.head.float()
    for p in head.parameters():
        p.requires_grad_(True)
    if not any(True for _ in head.parameters()):
        raise FlowclipError(f"--scorer {spec}: its head has no parameters to adapt")
    return head, float(s.train["tau_c"]), float(s.train["lr"]), s.run


def _group_indices(store, m, image_root):
    """(image keys, caption texts, each group's two images [n, 2] and two captions [n, 2]
    as indices into them)."""
    from ..store.manifest_keys import manifest_keys
    from .matrix_tasks import record_captions, split_rows

    caps = record_captions(m)
    texts = sorted({c for cs in caps for c in cs})
    ikeys = split_rows(manifest_keys(store, m, texts, image_root), m)
    bad = next((i for i, (k, c) in enumerate(zip(ikeys, caps)) if len(k) != 2 or len(c) != 2), None)
    if bad is not None:
        raise FlowclipError(
            f"{m.path}: row {bad} is not a 2x2 group ({len(ikeys[bad])} images, {len(caps[bad])} captions)"
        )
    img_keys = sorted({k for ks in ikeys for k in ks})
    at, ct = {k: i for i, k in enumerate(img_keys)}, {c: i for i, c in enumerate(texts)}
    img_idx = torch.tensor([[at[k] for k in ks] for ks in ikeys])
    cap_idx = torch.tensor([[ct[c] for c in cs] for cs in caps])
    return img_keys, texts, img_idx, cap_idx


def report(summary: dict) -> str:
    """results.md: the figures before adapting and after each iteration, in percent."""
    pct = lambda x: "" if x is None else f"{100 * x:.2f}"  # noqa: E731
    rows = []
    for h in summary["history"]:
        th = f"{h['threshold']:.3g}" if "threshold" in h else ""
        figures = " | ".join(pct(h[k]) for k in ("text", "image", "group", "group_match"))
        fits = f"{pct(h['fit_before'])}, {pct(h['fit'])}" if "fit" in h else ""
        first = f"| {h['iteration']} | {th} | {h.get('selected', '')} | {pct(h.get('pseudo_label_accuracy'))} | {fits}"
        rows.append(f"{first} | {figures} |")
    s = summary["settings"]
    return "\n".join(
        [
            f"# {summary['recipe']} on {summary['benchmark']}: {summary['scorer']}",
            "",
            f"**Adapted to the test set's own images and captions, without labels: not an official score, "
            f"not comparable with a frozen scorer's.** {SOURCE}.",
            "",
            f"{summary['groups']} groups; {s['iterations']} iteration(s) of {s['epochs']} epochs, {s['batch_groups']} "
            f"groups a batch, lr {s['lr']:g} ({s['lr_schedule']}), tau {s['tau']:g}, "
            f"weight decay {s['weight_decay']:g}, "
            f"seed {s['seed']}. Iteration 0 is the head before adapting (its official figures). Fit: the share "
            "of matched groups whose scores decide the matching they trained on (Winoground's group rule), "
            "before and after the iteration's training.",
            "",
            "| iteration | threshold | groups matched | matched as gold (%) | fit before, after (%) | text (%) "
            "| image (%) | group (%) | GroupMatch (%) |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
