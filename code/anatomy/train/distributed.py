"""Data-parallel training under ``torchrun``: N processes, one model copy each.

Every process draws the same global batch from the same seeded generator and keeps its own
slice of rows; DistributedDataParallel averages the gradients across processes during
backward. With equal slices, the average of the per-process mean losses is the mean over the
global batch.

When N processes follow one process's loss curve, and when not:

- With dropout 0 and the same global batch B, they follow it up to rounding: the all-reduce
  adds the N half-batch gradients in another order than one process's backward does.
- With dropout > 0 they do not. Each rank seeds its own dropout generator (seed + rank), so
  the masks differ from one process's, and so does the curve: alike in distribution, not
  equal step by step.
- A resume under torchrun is not bit-exact, unlike a one-process resume on the CPU. The
  checkpoint keeps rank 0's random states only, and every rank reseeds its dropout generator
  from the resume step, so with dropout the resumed run draws other masks than the
  uninterrupted one; without dropout the all-reduce's order of additions still carries no
  promise of identical bits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as torch_dist


@dataclass(frozen=True)
class Dist:
    """Where this process sits: its rank among ``world`` processes and its device."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    started_here: bool = False

    @property
    def is_main(self) -> bool:
        """Rank 0 alone writes checkpoints, logs and the progress bar."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


def setup(device: torch.device | None) -> tuple[Dist, torch.device | None]:
    """Join the process group that ``torchrun`` describes in the environment (WORLD_SIZE,
    RANK, LOCAL_RANK, MASTER_ADDR/PORT); a plain ``python`` run is a world of one.

    NCCL on CUDA, gloo on CPU. Each CUDA process takes the GPU numbered by its local rank.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist(), device
    use_cuda = torch.cuda.is_available() and (device is None or device.type == "cuda")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    started = not torch_dist.is_initialized()
    if started:
        torch_dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return Dist(torch_dist.get_rank(), torch_dist.get_world_size(), local_rank, started), device


def teardown(dist: Dist) -> None:
    """Leave the process group, if this module joined it."""
    if dist.started_here and torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def shard(batch: torch.Tensor, dist: Dist) -> torch.Tensor:
    """This process's rows of the global batch: rank r keeps rows r*B/N to (r+1)*B/N.

    Shapes: batch [B, T] -> [B/N, T]
    """
    if not dist.active:
        return batch
    B = batch.shape[0]
    if B % dist.world:
        raise ValueError(f"B={B} rows do not split evenly over {dist.world} processes; choose "
                         f"a global batch B divisible by --nproc_per_node")
    rows = B // dist.world
    return batch[dist.rank * rows:(dist.rank + 1) * rows]  # [B, T] -> [B/N, T]


def mean_over_ranks(x: torch.Tensor, dist: Dist) -> torch.Tensor:
    """Average ``x`` across processes (each holds a mean over an equal share of rows)."""
    if dist.active:
        x = x.clone()
        torch_dist.all_reduce(x, op=torch_dist.ReduceOp.SUM)
        x /= dist.world
    return x
