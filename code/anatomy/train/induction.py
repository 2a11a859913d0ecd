"""Training a small attention-only GPT on the copy task of ``anatomy.induction`` (for the
induction chapter's model, made by ``python -m anatomy.weights.make --name induction``).

The optimizer and schedule are chapter 9's (AdamW with decay on the matrices, gradient
clipping, ``lr_at``'s warmup and cosine); the batches are fresh windows of
``copy_pairs_batch`` drawn from a NumPy generator seeded with ``cfg.seed``. The loss is a
weighted mean: each copied token counts 1 (almost all the tokens a model can predict; a few
others become predictable by chance), every other token ``OTHER_WEIGHT``. With every token
counted alike (three quarters of the targets are not copies with the recipe's 8 pairs in
32), this recipe had not formed an induction head by step 3,000 for seeds 2 and 1337 (both
layer-1 induction scores below 0.1); counted at 0.02 it formed one by step 600 for seeds 0,
1, 2, 3 and 1337 (scores above 0.7), and the model still learned to guess evenly on the
first half. (A likely reason, not tested: the targets no copy predicts add gradient noise,
which inflates AdamW's second moment and so shrinks every step.) These runs are not part of
the test suite.

Every ``eval_every`` steps (and at the end) the model is scored on one fixed set of
``repeated_tokens`` sequences: its loss on the first half and on the repeated half, the two
curves whose gap opens when the induction head forms.

Shapes: batches x, y [B, T] -> loss []
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from anatomy.gpt_torch import GPT, configure_optimizer
from anatomy.induction import copy_pairs_batch, half_masks, repeated_tokens
from anatomy.train.config import TrainConfig
from anatomy.train.loop import seed_everything
from anatomy.train.schedule import lr_at

EVAL_SEQUENCES = 128       # fixed repeated_tokens sequences each evaluation scores
OTHER_WEIGHT = 0.02        # the loss weight of a token that is not a copy (a copy: 1)


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


def weighted_loss(logits: torch.Tensor, y: torch.Tensor, weight: torch.Tensor
                  ) -> torch.Tensor:
    """Cross-entropy of each target, averaged with the given weights.

    Shapes: logits [B, T, V], y [B, T], weight [B, T] -> []
    """
    nll = F.cross_entropy(logits.transpose(1, 2), y, reduction="none")   # [B, T]
    return (nll * weight).sum() / weight.sum()


def train_copy_task(cfg: TrainConfig, V: int, pairs: int,
                    log: Callable[[dict, CopyRun], None] | None = None) -> CopyRun:
    """Train ``cfg``'s GPT (on the CPU) on ``copy_pairs_batch`` windows of ``cfg.T`` ids
    from a vocabulary of ``V``, each with ``pairs`` copied bigrams; ``log(row, run)`` is
    called at every evaluation with the run so far (it may raise to end the run there).
    Returns the :class:`CopyRun`.
    """
    seed_everything(cfg.seed)
    model = GPT(cfg.model_config(V), dropout=cfg.dropout, attn=cfg.attn, causal=cfg.causal)
    optimizer = configure_optimizer(model, cfg.lr, cfg.weight_decay, cfg.betas, "cpu")
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
        ids, copied = copy_pairs_batch(batches, cfg.B, cfg.T + 1, V, pairs)  # [B, T + 1]
        ids = torch.from_numpy(ids)
        weight = torch.from_numpy(np.where(copied[:, 1:], 1.0, OTHER_WEIGHT)).float()
        loss = weighted_loss(model(ids[:, :-1]), ids[:, 1:], weight)      # x, y [B, T]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        run.step_loss.append(float(loss.detach()))
    evaluate(cfg.max_steps)
    return run
