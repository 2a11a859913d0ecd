"""Training a small attention-only GPT on the copy task of ``anatomy.induction`` (for the
induction chapter's model; no recipe of ``anatomy.weights.make`` uses it yet).

The step is chapter 9's (``train_step``: AdamW with decay on the matrices, gradient
clipping, ``lr_at``'s warmup and cosine), only the batches differ: fresh windows of
``copy_task_batch`` drawn from a NumPy generator seeded with ``cfg.seed``, instead of
windows of Tiny Shakespeare. Every ``eval_every`` steps (and at the end) the model is
scored on one fixed set of ``repeated_tokens`` sequences: its loss on the first half and on
the repeated half, the two curves whose gap opens when the induction head forms.

Shapes: batches x, y [B, T] -> loss []
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from anatomy.gpt_torch import GPT, configure_optimizer
from anatomy.induction import copy_task_batch, half_masks, repeated_tokens
from anatomy.train.config import TrainConfig
from anatomy.train.hardware import choose_precision
from anatomy.train.loop import seed_everything
from anatomy.train.schedule import lr_at
from anatomy.train.step import train_step

EVAL_SEQUENCES = 128       # fixed repeated_tokens sequences each evaluation scores


@dataclass
class CopyRun:
    """One run: ``rows`` (one dict per evaluation: "step", "first_loss", "repeat_loss",
    "lr"), ``step_loss`` (every step's training loss) and the trained ``model``."""

    rows: list[dict] = field(default_factory=list)
    step_loss: list[float] = field(default_factory=list)
    model: GPT | None = field(default=None, repr=False)


@torch.no_grad()
def evaluate_halves(model: GPT, ids: np.ndarray) -> tuple[float, float]:
    """Mean loss on the first half and on the repeated half of ``repeated_tokens`` ids.

    Shapes: ids [n, T] -> (first, repeat)
    """
    was_training = model.training
    model.eval()
    x = torch.from_numpy(np.ascontiguousarray(ids))                       # [n, T]
    logp = F.log_softmax(model(x)[:, :-1].float(), dim=-1)                # [n, T-1, V]
    nll = -logp.gather(-1, x[:, 1:, None])[..., 0].numpy()               # [n, T-1]
    first, repeat = half_masks(*ids.shape)
    model.train(was_training)
    return float(nll[first[:, 1:]].mean()), float(nll[repeat[:, 1:]].mean())


def train_copy_task(cfg: TrainConfig, V: int, min_period: int,
                    log: Callable[[dict, CopyRun], None] | None = None) -> CopyRun:
    """Train ``cfg``'s GPT (on the CPU) on ``copy_task_batch`` windows of ``cfg.T`` ids
    from a vocabulary of ``V``; ``log(row, run)`` is called at every evaluation with the
    run so far (it may raise to end the run there). Returns the :class:`CopyRun`.
    """
    seed_everything(cfg.seed)
    model = GPT(cfg.model_config(V), dropout=cfg.dropout, attn=cfg.attn, causal=cfg.causal)
    optimizer = configure_optimizer(model, cfg.lr, cfg.weight_decay, cfg.betas, "cpu")
    precision = choose_precision(torch.device("cpu"), "float32")
    batches = np.random.default_rng(cfg.seed)                 # the training windows only
    held_out = repeated_tokens(cfg.seed + 1, EVAL_SEQUENCES, cfg.T, V)   # [n, T]
    run = CopyRun(model=model)

    def evaluate(step: int) -> None:
        first, repeat = evaluate_halves(model, held_out)
        row = {"step": step, "first_loss": first, "repeat_loss": repeat,
               "lr": lr_at(step, cfg)}
        run.rows.append(row)
        if log is not None:
            log(row, run)

    model.train()
    for step in range(cfg.max_steps):
        if step % cfg.eval_every == 0:
            evaluate(step)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, cfg)
        ids = torch.from_numpy(copy_task_batch(batches, cfg.B, cfg.T + 1, V, min_period))
        x, y = ids[:, :-1], ids[:, 1:]                                    # [B, T] each
        loss, _ = train_step(model, x, y, optimizer, precision, cfg.grad_clip)
        run.step_loss.append(float(loss))
    evaluate(cfg.max_steps)
    return run
