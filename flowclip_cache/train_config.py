"""A head run's settings (TrainConfig): each head kind's published defaults, checked
like every config (unknown keys, types, ranges refused)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .config import build
from .heads import HEAD_KINDS, Head, build_head, head_class


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
    # stop after this many optimiser steps in all, as a finished run (evaluated, head written);
    # --resume with a larger max_steps (or none) continues it from its checkpoint
    max_steps: int | None = field(default=None, metadata={"min": 1})

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
