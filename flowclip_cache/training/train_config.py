"""A head run's settings (TrainConfig): each head kind's published defaults, checked
like every config (unknown keys, types, ranges refused)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config import build, check_fields
from ..errors import FlowclipError
from ..head_specs import builtin_kinds, check_head_name, is_head_spec, plugins_possible

if TYPE_CHECKING:  # (the heads import torch: a config is checked before they are)
    from ..heads import Head


class HeadKinds:
    """The head kinds a config may name (config's `choices`): a built-in kind is answered
    from the files, without torch; the registry (plug-ins) is imported only where a
    plug-in could be the answer."""

    def __contains__(self, kind: object) -> bool:
        if kind in builtin_kinds():
            return True
        if not plugins_possible():
            return False
        from ..heads import available_kinds

        return kind in available_kinds()

    def __iter__(self):
        if not plugins_possible():
            return iter(builtin_kinds())
        from ..heads import available_kinds

        return iter(available_kinds())


_CONTRACTS_MET: set = set()  # (head class, its settings, dim) whose contract check passed here


@dataclass
class TrainConfig:
    # a registered kind (flow, global, ..., an installed or loaded plug-in's), or FILE.py:Class /
    # package.module:Class, which from_dict imports and registers (docs/plugins.md)
    head: str = field(default="flow", metadata={"choices": HeadKinds()})
    epochs: int = field(default=5, metadata={"min": 1})  # (0 would write a finished run of an untrained head)
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
    # stop after this many optimiser steps in all, as a finished run (evaluated, head written);
    # --resume with a larger max_steps (or none) continues it from its checkpoint
    max_steps: int | None = field(default=None, metadata={"min": 1})
    head_options: dict[str, Any] = field(default_factory=dict)  # the head's own options (Head.options)
    loss_weights: dict[str, float] = field(default_factory=dict)  # weights of the head's own loss terms

    def __post_init__(self):
        from ..heads import available_kinds, head_class

        if self.cimr is None:  # each head kind's default: its row of the paper's Tab. 2
            self.cimr = head_class(self.head).default_cimr if self.head in available_kinds() else 0.0

    def build_head(self, dim: int) -> Head:
        from ..heads import build_head

        return build_head(self.head, dim, **dataclasses.asdict(self))

    def check_contract(self, dim: int) -> None:
        """The head meets the head contract on random features (heads/contract.py); a
        plug-in head must also have parameters that its scores depend on. Once per head
        class, head settings and dimension in a process (a study's runs differ in training
        settings: each check of a Flow-CLIP head at d = 512 took 0.3 s)."""
        import json

        from ..heads import head_class
        from ..heads.contract import check_head

        cls = head_class(self.head)
        own = {n: getattr(self, n) for n in cls.hparam_names if hasattr(self, n)}
        key = (
            cls,
            json.dumps([own, self.head_options], sort_keys=True, default=str),
            dim,
        )  # (the class itself: an id may be reused)
        if key in _CONTRACTS_MET:
            return
        check_head(lambda: self.build_head(dim), self.head, trainable="plugin_origin" in cls.__dict__)
        _CONTRACTS_MET.add(key)

    @property
    def uses_tokens(self) -> bool:
        from ..heads import head_class

        return head_class(self.head).uses_tokens

    @classmethod
    def from_dict(cls, d: dict, source: str = "config") -> "TrainConfig":
        """Unknown keys, wrong types, NaN and out-of-range values are refused (config.build).
        Keys the dict leaves out take the head's published defaults, then the dataclass's."""
        d = with_head_defaults(d, source)
        cfg = build(cls, d, source)
        check_head_settings(cfg, source)
        return cfg

    @classmethod
    def precheck(cls, d: dict, source: str = "config") -> None:
        """What from_dict refuses that needs no head imported (torch): a head name no kind
        or file can be, unknown keys, wrong types, out-of-range values. A plug-in class
        (FILE.py:Class) is imported later, by from_dict."""
        kind = d.get("head", "flow") if isinstance(d, dict) else None
        if isinstance(d, dict):
            check_head_name(d.get("head"), f"{source}: key 'head'")
            if is_head_spec(d.get("head")):
                d = {k: v for k, v in d.items() if k != "head"}
        check_fields(cls, d, source)
        if isinstance(d, dict) and kind in builtin_kinds():  # built-in heads declare none
            for key, what in (("head_options", "options"), ("loss_weights", "loss terms")):
                if d.get(key):
                    raise FlowclipError(
                        f"{source}: key {key!r}: {sorted(d[key])} are not {what} of the {d.get('head', 'flow')} head "
                        f"(none: only a plug-in head declares {what})"
                    )

    def describe(self) -> str:
        """The settings in force, one line: a head's options with its declared defaults
        filled in (the config records only those given)."""
        d = dataclasses.asdict(self)
        from ..heads import head_class

        options = head_class(self.head).options
        if options:
            d["head_options"] = {**options, **self.head_options}
        return ", ".join(f"{k}={v}" for k, v in d.items())


def with_head_defaults(d, source: str):
    """A config dict with its head resolved to a kind (a FILE.py:Class plug-in imported and
    registered) and that head's published defaults under its keys."""
    from ..heads import available_kinds, head_class
    from ..heads.plugins import resolve_head

    if not isinstance(d, dict):
        return d
    head = d.get("head", "flow")
    check_head_name(head, f"{source}: key 'head'")
    if is_head_spec(head):
        try:
            d = {**d, "head": resolve_head(head)}
        except FlowclipError as e:
            raise FlowclipError(f"{source}: key 'head': {e}") from None
        head = d["head"]
    if isinstance(head, str) and head in available_kinds():
        d = {**head_class(head).train_defaults, **d}
    return d


def check_head_settings(cfg: TrainConfig, source: str) -> None:
    """head_options and loss_weights name what the head declares (Head.options, Head.loss_terms)."""
    from ..heads import head_class

    cls = head_class(cfg.head)
    cfg.head_options = cls.check_options(cfg.head_options, f"{source}: key 'head_options'") if cfg.head_options else {}
    unknown = sorted(set(cfg.loss_weights) - set(cls.loss_terms))
    if unknown:
        known = ", ".join(cls.loss_terms) or "none"
        raise FlowclipError(
            f"{source}: key 'loss_weights': {unknown} are not loss terms of the {cfg.head} head ({known})"
        )
    bad = [k for k, w in cfg.loss_weights.items() if w < 0]
    if bad:
        raise FlowclipError(f"{source}: key 'loss_weights': {bad} must be at least 0")


def recorded_settings(train: dict) -> dict:
    """A run's recorded training settings, comparable across flowclip versions: the
    plug-in keys at their empty defaults are left out (older runs lack them)."""
    return {k: v for k, v in train.items() if not (k in ("head_options", "loss_weights") and not v)}
