"""The learning-rate schedule: linear warmup, then cosine decay to a floor.

Warmup keeps AdamW's first updates small while its second-moment estimates are still noisy;
the cosine brings the rate down smoothly so the last steps refine instead of bounce.
"""

from __future__ import annotations

import math

from anatomy._validate import validated


def _step_not_negative(args: dict, sizes: dict) -> None:
    if args["step"] < 0:
        raise ValueError(f"lr_at: step must be >= 0, got {args['step']}")


@validated(where=_step_not_negative)
def lr_at(step: int, cfg) -> float:
    """Learning rate for optimizer step ``step`` (0-based) of a run configured by ``cfg``.

    Uses ``cfg.lr`` (peak), ``cfg.min_lr`` (floor), ``cfg.warmup_steps`` and
    ``cfg.max_steps``: steps 0..warmup-1 climb linearly to the peak, reaching it at
    warmup-1; from warmup the rate follows half a cosine down to ``min_lr`` at
    ``max_steps`` and stays there (a run shorter than its warmup simply ends warming up).
    A pure function, so a resumed run needs only the step.
    """
    warmup, total = cfg.warmup_steps, cfg.max_steps
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    if step >= total:
        return cfg.min_lr
    progress = (step - warmup) / (total - warmup)          # 0 -> 1 over the decay
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - cfg.min_lr)


class ScheduleChangedWarning(UserWarning):
    """A resumed run told to end at another step than the saved run: its cosine moves."""


def restretch_note(step: int, saved, resumed) -> str | None:
    """What resuming at ``step`` with ``resumed.max_steps`` instead of the saved run's
    ``saved.max_steps`` does to the learning rate, in one sentence; None if they agree.

    ``lr_at`` draws the cosine from the warmup's end to ``max_steps``, so a new end
    re-stretches the whole curve: from ``step`` on the run follows the new one, and the rate
    at the resume jumps (up for a later end, down for an earlier one).
    """
    old, new = saved.max_steps, resumed.max_steps
    if old == new:
        return None
    before, after = lr_at(step, saved), lr_at(step, resumed)
    change = (f"the learning rate jumps from {before:.2e} to {after:.2e} at the resume"
              if before != after else
              f"the learning rate at step {step} stays {before:.2e} but then follows the new "
              f"curve")
    return (f"resume: max_steps={new} instead of the saved {old} redraws the whole cosine, "
            f"from the end of warmup (step {resumed.warmup_steps}) to the new end (step "
            f"{new}), and the run joins it at step {step}: {change}. To continue the saved "
            f"schedule unchanged, resume with max_steps={old}.")
