"""The learning-rate schedule: linear warmup, then cosine decay to a floor.

Warmup keeps AdamW's first updates small while its second-moment estimates are still noisy;
the cosine brings the rate down smoothly so the last steps refine instead of bounce.
"""

from __future__ import annotations

import math


def lr_at(step: int, cfg) -> float:
    """Learning rate for optimizer step ``step`` (0-based) of a run configured by ``cfg``.

    Uses ``cfg.lr`` (peak), ``cfg.min_lr`` (floor), ``cfg.warmup_steps`` and
    ``cfg.max_steps``: steps 0..warmup-1 climb linearly to the peak, reaching it at
    warmup-1; from warmup the rate follows half a cosine down to ``min_lr`` at
    ``max_steps`` and stays there (a run shorter than its warmup simply ends warming up).
    A pure function, so a resumed run needs only the step.
    """
    if step < 0:
        raise ValueError(f"lr_at: step must be >= 0, got {step}")
    warmup, total = cfg.warmup_steps, cfg.max_steps
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    if step >= total:
        return cfg.min_lr
    progress = (step - warmup) / (total - warmup)          # 0 -> 1 over the decay
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - cfg.min_lr)
