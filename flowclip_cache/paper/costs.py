"""What the dry run measures on this machine, each thing once and all of it within
MEASURE_SECONDS (so the dry run answers within a minute on any device): an encoder's
forward per image and per caption (random weights of its architecture), and a head's
optimiser step at an encoder's feature shape (random features). A cost it had no time
for is a sentence saying so, never a number."""

from __future__ import annotations

import time

from ..extraction.sizes import measure_forward

MEASURE_SECONDS = 30.0
# backward and the optimiser step cost about twice the forward (a rule of thumb, not measured):
# the adaptation estimate is 3 x the measured forward per record
TRAIN_OVER_FORWARD = 3.0


class Costs:
    """Measured costs by key, each measured once, none begun after the deadline."""

    def __init__(self, device: str, enabled: bool):
        self.device, self.enabled = device, enabled
        self.deadline = time.monotonic() + MEASURE_SECONDS
        self.got: dict = {}

    def _get(self, key, measure):
        if key not in self.got:
            if not self.enabled:
                self.got[key] = ""
            elif time.monotonic() > self.deadline:
                self.got[key] = (
                    f"not measured: the dry run measures for at most {MEASURE_SECONDS:.0f} s and had spent them "
                    "(the estimates above are measured)"
                )
            else:
                self.got[key] = measure()
        return self.got[key]

    def forward(self, model: str) -> tuple[float, float] | str:
        """(seconds per image, per caption) of the encoder's forward, or why not."""
        return self._get(("forward", model), lambda: measure_forward(model, self.device))

    def step(self, shape: tuple[int, int], head: dict) -> float | str:
        """Seconds of one optimiser step of `head` at the feature shape, or why not."""
        key = ("step", shape, tuple(sorted(head.items())))
        return self._get(key, lambda: measure_step(shape, head, self.device))


def measure_step(shape, head: dict, device: str) -> float:
    from ..studies.checks import random_training_data
    from ..training.loop import seconds_per_step
    from ..training.train_config import TrainConfig

    cfg = TrainConfig.from_dict({k: v for k, v in head.items() if k != "epochs"} | {"epochs": 1}, "paper")
    d, patches = shape
    data = random_training_data(d, patches, 4 * cfg.batch_size, device)
    return seconds_per_step(data, cfg, device, repeats=1)
