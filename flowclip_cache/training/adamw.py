"""torch's AdamW without the compiler stack.

torch.optim wraps add_param_group, zero_grad, state_dict, load_state_dict and step in
guards for torch.compile that import torch._dynamo (and with it torch._inductor) on first
call: +1.5 s and over 100 MiB in every training process, for code flowclip never
compiles. This AdamW calls the same methods unwrapped, so its arithmetic, state and
state_dict are torch's own (tests/test_train.py checks the bits against torch.optim.AdamW).
"""

from __future__ import annotations

from typing import Any

import torch

_O = torch.optim.Optimizer


def unwrapped(f: Any) -> Any:
    """The method under torch's wrapper (a torch without the wrapper: the method itself)."""
    return getattr(f, "__wrapped__", f)


_STEP = unwrapped(torch.optim.AdamW.step)  # Adam.step without its graph-break wrapper


class AdamW(torch.optim.AdamW):
    add_param_group = unwrapped(_O.add_param_group)
    zero_grad = unwrapped(_O.zero_grad)
    state_dict = unwrapped(_O.state_dict)
    load_state_dict = unwrapped(_O.load_state_dict)

    def step(self, closure=None):
        # what the wrapper did besides its graph breaks: no autograd in the update
        with torch.no_grad():
            return _STEP(self, closure)
