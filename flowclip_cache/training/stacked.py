"""Stacked training: runs whose heads share a class, settings and shapes take one batched
step on the batch they share (docs/studies.md, "Stacked runs").

The runs' weights are stacked, and one call of torch.func's vmap over grad computes every
run's loss, terms and gradients at once; each run then clips and steps its own AdamW on
its own gradients (head_run.HeadRun.take_step), so its optimiser state, checkpoints, log
and evaluation are what they are side by side. What may differ between stacked runs: the
initial weights, lr, betas, weight decay, gradient clip, tau_c and lambda_CIMR (a run
with lambda_CIMR = 0 adds 0 x CIMR, which changes no bit of its loss or gradients, and logs
CIMR as 0 as it does alone). Runs that cannot stack (another head class, settings or
buffers, or loss weights of the head's own terms) go side by side, and so does a group
whose head vmap cannot batch (a plug-in's op), saying why.
"""

from __future__ import annotations

import copy
import hashlib
import json

import torch
from torch import nn

from .losses import donor_map, objective


def stack_key(head, cfg) -> tuple:
    """What runs must share to take one batched step: the head's class, settings and
    parameter shapes, and the weights of the head's own loss terms."""
    return (
        f"{type(head).__module__}.{type(head).__qualname__}",
        json.dumps(head.hparams(), sort_keys=True, default=str),
        tuple((n, tuple(p.shape), str(p.dtype)) for n, p in head.named_parameters()),
        tuple(
            (n, tuple(b.shape), hashlib.sha256(b.detach().cpu().numpy().tobytes()).hexdigest())
            for n, b in head.named_buffers()
        ),  # the stack reads the first run's buffers
        json.dumps(cfg.loss_weights, sort_keys=True),
    )


def stack_groups(items: list, key) -> list[list]:
    """items in groups of equal key(item), in their order; a group of one goes alone."""
    groups: dict[tuple, list] = {}
    for x in items:
        groups.setdefault(key(x), []).append(x)
    return list(groups.values())


def planned_groups(cfgs: dict, dim: int) -> list[list[str]]:
    """The names of cfgs (name -> TrainConfig, runs sharing a data order) in the groups that
    stack (the dry run's plan): heads built at dimension dim, as training builds them."""
    return stack_groups(list(cfgs), lambda n: stack_key(cfgs[n].build_head(dim), cfgs[n]))


class _Scores(nn.Module):
    """A head's all-pairs scores and parts as a module call (what functional_call runs)."""

    def __init__(self, head):
        super().__init__()
        self.head = head

    def forward(self, v, P, t, H, mask):
        tok = self.head.uses_tokens
        return self.head.forward_terms(v, P if tok else None, t, H if tok else None, mask)


class StackedStep:
    """One batched step for a fixed group of runs (built again when the group changes)."""

    def __init__(self, runs: list):
        from torch.func import grad, vmap

        self.runs = runs
        self.model = _Scores(copy.deepcopy(runs[0].head))
        self.names = [n for n, _ in runs[0].head.named_parameters()]
        self.buffers = {f"head.{n}": b for n, b in runs[0].head.named_buffers()}
        dev = next(runs[0].head.parameters()).device
        self.tau_c = torch.tensor([r.cfg.tau_c for r in runs], device=dev)
        self.cimr = torch.tensor([r.cfg.cimr or 0.0 for r in runs], device=dev)
        self.use_cimr = bool((self.cimr > 0).any())
        self.loss_weights = runs[0].cfg.loss_weights
        self.grads = vmap(grad(self._loss, has_aux=True), in_dims=(0, 0, 0) + (None,) * 5)

    def _loss(self, params, tau_c, cimr, img, pos, neg, donors, feats):
        from torch.func import functional_call

        S, parts = functional_call(self.model, ({f"head.{n}": p for n, p in params.items()}, self.buffers), feats)
        loss, terms = objective(self.model.head, S, parts, tau_c, cimr, self.loss_weights, img, pos, neg, donors)
        return loss, (
            loss.detach(),
            {k: v.detach() for k, v in terms.items()},
            {k: v.detach() for k, v in parts.items()},
        )

    def compute(self, img, pos, neg, feats) -> tuple:
        """Every run's gradients, loss, terms and parts: nothing is changed yet."""
        params = {n: torch.stack([dict(r.head.named_parameters())[n].detach() for r in self.runs]) for n in self.names}
        donors = donor_map(img) if self.use_cimr else None
        return self.grads(params, self.tau_c, self.cimr, img, pos, neg, donors, feats)

    def apply(self, computed: tuple, img) -> None:
        """Each run checks its loss, then clips and steps its own AdamW on its gradients."""
        grads, (loss, terms, parts) = computed
        for i, r in enumerate(self.runs):
            r.check_loss(loss[i])
        for i, r in enumerate(self.runs):
            for n, p in zip(self.names, r.params):
                p.grad = grads[n][i].clone()
            own = {k: v[i] if k != "cimr" or self.cimr[i] > 0 else v.new_zeros(()) for k, v in terms.items()}
            r.take_step(img, loss[i], own, {k: v[i] for k, v in parts.items()})


class Stacker:
    """Steps a changing list of runs (max_steps removes some): stacked where they can."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.cache: dict[tuple, StackedStep] = {}
        self.unstackable: set[tuple] = set()

    def step(self, runs: list, img, pos, neg, feats) -> None:
        groups = stack_groups(runs, lambda r: stack_key(r.head, r.cfg)) if self.enabled else [[r] for r in runs]
        keys = [tuple(id(r) for r in g) for g in groups]
        # built once per group (a group changes only when one of its runs stops)
        self.cache = {k: self.cache.get(k) or StackedStep(g) for k, g in zip(keys, groups)
                      if len(g) > 1 and k not in self.unstackable}  # fmt: skip
        for k, g in zip(keys, groups):
            if k not in self.cache:
                for r in g:
                    r.step(img, pos, neg, feats)
                continue
            try:
                computed = self.cache[k].compute(img, pos, neg, feats)
            except Exception as e:  # an op vmap cannot batch: nothing was changed, so side by side from here
                g[0].log(f"{len(g)} runs of one head cannot take one batched step ({type(e).__name__}: {e}); "
                         "they train side by side")  # fmt: skip
                self.unstackable.add(k)
                del self.cache[k]
                for r in g:
                    r.step(img, pos, neg, feats)
                continue
            self.cache[k].apply(computed, img)
