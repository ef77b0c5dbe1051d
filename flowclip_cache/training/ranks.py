"""Processes under torchrun: each rank's slice of a global batch, feature gathers with
gradients, DistributedDataParallel, and the process groups (gloo on CPU, NCCL on CUDA)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ..errors import FlowclipError


@dataclass
class Ranks:
    rank: int = 0
    world: int = 1
    group: object = None  # the feature gathers' own process group (see init_ranks)

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def share(self, batch: torch.Tensor) -> torch.Tensor:
        """This rank's contiguous slice of a global batch."""
        n = len(batch)
        if n % self.world:
            raise FlowclipError(f"batch_size {n} is not divisible by the {self.world} ranks")
        k = n // self.world
        return batch[self.rank * k : (self.rank + 1) * k]

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's rows, in rank order, with gradients flowing back to each rank."""
        if not self.distributed:
            return x
        return _GatherRows.apply(x.contiguous(), self.group, self.rank, self.world)

    def wrap(self, model: torch.nn.Module, device: str) -> torch.nn.Module:
        """The module every step's forward goes through: DistributedDataParallel across ranks
        (it broadcasts rank 0's weights once and averages the ranks' gradients during the
        backward pass; see _GatherRows for why the mean is the one-process gradient)."""
        if not self.distributed:
            return model
        from torch.nn.parallel import DistributedDataParallel

        ids = [torch.device(device).index] if device.startswith("cuda") else None
        return DistributedDataParallel(model, device_ids=ids, broadcast_buffers=False)

    def max(self, n: int) -> int:
        if not self.distributed:
            return n
        import torch.distributed as dist

        t = torch.tensor([n], device=self.device_of_backend())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t)

    def device_of_backend(self) -> str:
        import torch.distributed as dist

        return f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"


class _GatherRows(torch.autograd.Function):
    """cat(all_gather(x)) whose backward sums every rank's gradient of the whole and keeps
    this rank's rows: each rank's loss is the same function of the gathered batch, so the
    sum is N x dL/dx and DDP's average over ranks makes it the one-process gradient. (An all_reduce of
    a contiguous copy: torch.distributed.nn's all_gather backward sends the gradient's
    views through all_to_all as they are, which gloo got wrong for strided gradients.)"""

    @staticmethod
    def forward(ctx, x, group, rank, world):
        import torch.distributed as dist

        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x, group=group)
        ctx.group, ctx.rank, ctx.n = group, rank, len(x)
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist

        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad[ctx.rank * ctx.n : (ctx.rank + 1) * ctx.n], None, None, None


def init_ranks(device: str) -> tuple[Ranks, str]:
    """Ranks from torchrun's environment (gloo on CPU, NCCL on CUDA, one GPU per rank)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Ranks(), device
    import torch.distributed as dist

    cuda = device.startswith("cuda")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    return Ranks(dist.get_rank(), dist.get_world_size(), gather_group()), device


def gather_group():
    """A second process group for the features' gathers, apart from DDP's gradient
    all-reduces (which run during the same backward pass): collectives of two purposes
    never share one stream."""
    import torch.distributed as dist

    return dist.new_group(backend=dist.get_backend())
