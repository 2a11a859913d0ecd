"""What a run costs in arithmetic: the training steps, and the evaluations beside them.

A training token costs 6N + 12 L T d FLOPs (forward and backward, chapter 7); an evaluated
token costs a forward pass only, a third of that. ``train`` evaluates at step 0, every
``eval_every`` steps and at the end, each time ``eval_iters`` batches of both splits, so a
preset that evaluates often and long spends a visible share of its run there.

Shapes: cfg (a TrainConfig) and V -> FLOPs (plain numbers)
"""

from __future__ import annotations

from anatomy.flops import forward_flops_per_token, training_flops_per_token
from anatomy.train.config import TrainConfig

SPLITS = 2          # train and val: estimate_loss scores both


def evaluations(cfg: TrainConfig) -> int:
    """How many times a fresh run of ``cfg`` calls ``estimate_loss``: at every multiple of
    ``eval_every`` below ``max_steps``, and once more at ``max_steps``."""
    return -(-cfg.max_steps // cfg.eval_every) + 1


def run_flops(cfg: TrainConfig, V: int) -> dict[str, int]:
    """FLOPs of a fresh run: ``train`` (every step, forward and backward), ``eval`` (every
    evaluation's forward passes), and ``eval_in_steps``, the evaluations expressed in
    training steps of the same batch shape."""
    model = cfg.model_config(V)
    train_token = training_flops_per_token(model, cfg.T)["total"]
    eval_token = forward_flops_per_token(model, cfg.T)["total"]
    eval_batches = evaluations(cfg) * SPLITS * cfg.eval_iters
    train = cfg.max_steps * cfg.tokens_per_step * train_token
    evaluation = eval_batches * cfg.tokens_per_step * eval_token
    return {"train": train, "eval": evaluation,
            "eval_in_steps": evaluation // (cfg.tokens_per_step * train_token)}
