"""One training step, in the order mixed precision needs (``train`` runs it every step).

Under float16 autocast a gradient scaler multiplies the loss by a factor S before
``backward``, so small gradients survive float16, and divides the gradients by S again
(``unscale_``) before anything reads them. Clipping reads them, so it comes after
``unscale_``. ``scaler.step`` skips the update when a gradient came out inf or nan, and
``scaler.update`` then lowers S. In float32 and bfloat16 the scaler is disabled: ``scale``
returns the loss unchanged, ``unscale_`` and ``update`` do nothing and ``scaler.step`` is a
plain ``optimizer.step()``, so the same lines serve every run.

Shapes: x, y [B, T] -> loss [], grad_norm []
"""

from __future__ import annotations

import torch


def train_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
               optimizer: torch.optim.Optimizer, precision,
               grad_clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step on the batch (x, y); returns the loss and the norm.

    ``model(x, y)`` returns ``(logits, loss)``. ``precision`` (from
    ``choose_precision``) holds the autocast context and the grad scaler.
    The norm is that of the true (unscaled) gradient before clipping, as
    ``clip_grad_norm_`` measures it; both come back as tensors, so nothing
    waits on the GPU. The gradients are reset to None at the end.

    Shapes: x, y [B, T] -> loss [], grad_norm []
    """
    scaler = precision.scaler
    with precision.autocast():              # 16-bit matmuls on a GPU
        _, loss = model(x, y)               # x, y [B, T] -> loss []
    scaler.scale(loss).backward()           # the gradients of S * loss
    scaler.unscale_(optimizer)              # divided by S, in float32
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)                  # skipped if a grad is inf or nan
    scaler.update()                         # S halves after a skip
    optimizer.zero_grad(set_to_none=True)   # backward adds to .grad
    return loss.detach(), grad_norm
