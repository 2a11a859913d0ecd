"""Read-only probes on a training run: what ``train`` computes but does not keep.

``watch_grad_norms`` records the gradient norm of every optimizer step, measured before
clipping, so a chapter can say how often ``grad_clip`` acted. It wraps the step that
``train`` calls and hands back exactly what that step returned: the run's losses and
weights are those of an unwatched run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from anatomy.data import get_batch
from anatomy.gpt_torch import GPT, configure_optimizer
from anatomy.train import loop
from anatomy.train.hardware import Precision


@contextmanager
def watch_grad_norms() -> Iterator[list[float]]:
    """Within the block, append each step's pre-clip gradient norm to the list it yields.

    One float per optimizer step ``train`` takes, in order (``inf`` on a step the float16
    scaler skipped). Reading the norm waits for the step to finish, which on a GPU costs
    a synchronization per step; meant for the book's CPU runs.
    """
    norms: list[float] = []
    inner = loop.train_step

    def watched(*args, **kwargs):
        loss, grad_norm = inner(*args, **kwargs)
        norms.append(float(grad_norm))
        return loss, grad_norm

    loop.train_step = watched
    try:
        yield norms
    finally:
        loop.train_step = inner


def clipped_share(norms: Sequence[float], grad_clip: float, start: int = 0,
                  stop: int | None = None) -> float:
    """The share of steps ``start`` to ``stop`` (Python slice) whose norm exceeded ``grad_clip``,
    the steps ``clip_grad_norm_`` scaled down."""
    span = list(norms[start:stop])
    if not span:
        raise ValueError(f"no steps in norms[{start}:{stop}] (of {len(norms)})")
    return sum(n > grad_clip for n in span) / len(span)


def matrix_moves(step, model_cfg, ids, B: int, T: int, n_steps: int = 4, lr: float = 1e-3,
                 seed: int = 0, float16_scaler: bool = True) -> list[float]:
    """The mean absolute move of the matrix weights on each of ``n_steps`` AdamW steps.

    A fresh ``GPT(model_cfg)`` seeded with ``seed``, AdamW at ``lr`` without weight decay,
    batches of ``[B, T]`` windows of ``ids``, and ``step(model, x, y, optimizer, precision,
    1.0)`` (``train_step``'s signature, clipping at 1.0) for each step. The compute is
    float32; with ``float16_scaler`` the CPU ``GradScaler`` is on all the same (S = 65,536),
    so a step that mishandles the scale shows it at a fraction of float16's cost on a CPU.
    Two steps given the same arguments see the same weights and batches, so the ratio of
    their moves compares the steps alone.
    """
    torch.manual_seed(seed)
    model = GPT(model_cfg)
    optimizer = configure_optimizer(model, lr, 0.0)
    precision = Precision("cpu", None, torch.amp.GradScaler("cpu", enabled=float16_scaler))
    gen = torch.Generator().manual_seed(seed)
    matrices = [p for p in model.parameters() if p.ndim >= 2]
    moves = []
    for _ in range(n_steps):
        before = [p.detach().clone() for p in matrices]
        x, y = get_batch(ids, B, T, gen)                  # [B, T]
        step(model, x, y, optimizer, precision, 1.0)
        moves.append(sum((p.detach() - b).abs().mean().item()
                         for p, b in zip(matrices, before, strict=True)) / len(matrices))
    return moves
