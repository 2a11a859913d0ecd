"""One AdamW update written out in NumPy: what ``torch.optim.AdamW`` does to each weight.

Adam keeps two running averages per weight, m of the gradient and v of its square, and moves
the weight by m / sqrt(v): a step that does not grow with the gradient: typically about the
learning rate per weight or less (exactly that on the first step, a fraction of it once the
gradients vary from step to step), approximately bounded by it (Kingma and Ba, 2015) but not
capped: a gradient that keeps growing can push it past. Both averages start at 0, so for the
first steps they are too small; dividing by 1 - beta^t (the *bias correction*) undoes that.
AdamW's weight decay is *decoupled* (Loshchilov and Hutter, 2019): the weight shrinks by lr
* weight_decay of itself, apart from the gradient, instead of having weight_decay * p added
to the gradient, where Adam's division by sqrt(v) would weaken it for weights with large
gradients.

Chapter 9's exercise 9.4 asks for this function; its check runs it against
``torch.optim.AdamW``.
"""

from __future__ import annotations

import numpy as np

from anatomy._validate import check_positive_int, check_positive_number, validated


def _adamw_args(args: dict, sizes: dict) -> None:
    shape = args["p"].shape
    for name in ("g", "m", "v"):
        if args[name].shape != shape:
            raise ValueError(f"{name}: expected the shape of p, {shape}, got "
                             f"{args[name].shape}")
    check_positive_int(args["t"], "t")
    b1, b2 = args["betas"]
    if not (0 <= b1 < 1 and 0 <= b2 < 1):
        raise ValueError(f"betas: expected two numbers in [0, 1), got {args['betas']!r}")
    check_positive_number(args["eps"], "eps")


@validated(floats=("p", "g", "m", "v"), where=_adamw_args)
def adamw_update(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, t: int,
                 lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AdamW's update number ``t`` (1 for the first) of weights ``p`` with gradient ``g``.

    ``m`` and ``v`` are the running averages after update t - 1 (zeros before the first);
    the new ones come back with the new weights, as ``(p, m, v)``. The inputs are left as
    they are. The same arithmetic as ``torch.optim.AdamW`` (eps added to sqrt(v_hat), the
    decay scaled by lr).

    Shapes: p, g, m, v [...] (all the same shape) -> p, m, v [...]
    """
    b1, b2 = betas
    m = b1 * m + (1 - b1) * g                   # running mean of the gradient
    v = b2 * v + (1 - b2) * g**2                # running mean of its square
    m_hat = m / (1 - b1**t)                     # both start at 0: undo that bias
    v_hat = v / (1 - b2**t)
    p = p * (1 - lr * weight_decay)             # decoupled decay: shrink p itself
    p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p, m, v


def spike_moves(optimizer: str, clip: float | None, betas: tuple[float, float] = (0.9, 0.99),
                n: int = 1000, lr: float = 1e-3, spike: float = 1000.0,
                seed: int = 0, after: int = 100) -> np.ndarray:
    """How far weights move around one huge gradient, under ``"SGD"`` or ``"AdamW"``.

    ``n`` weights take 200 ordinary steps with fresh Gaussian gradients of global norm about
    0.5, then one step whose gradient has norm about ``spike``, then ``after`` more ordinary
    steps. With ``clip`` every gradient is first scaled down to a global norm of at most
    ``clip``, as ``torch.nn.utils.clip_grad_norm_`` does. Returns the mean |move| of a weight
    on the spike step and on each of the ``after`` steps that follow it, each divided by the
    mean |move| of the 50 ordinary steps just before the spike (no weight decay, eps 1e-8).
    The draws do not depend on ``after``: a longer run extends a shorter one.

    Shapes: -> [after + 1] (the spike step first)
    """
    if optimizer not in ("SGD", "AdamW"):
        raise ValueError(f"optimizer: expected 'SGD' or 'AdamW', got {optimizer!r}")
    if isinstance(after, bool) or not isinstance(after, int) or after < 1:
        raise ValueError(f"after: expected a positive number of steps, got {after!r}")
    gen = np.random.default_rng(seed)
    p, m, v = np.zeros(n), np.zeros(n), np.zeros(n)
    moves = []
    for t in range(1, 202 + after):
        size = spike if t == 201 else 0.5
        g = gen.standard_normal(n) * (size / np.sqrt(n))           # global norm about `size`
        if clip is not None:
            g = g * min(1.0, clip / np.linalg.norm(g))
        if optimizer == "SGD":
            new = p - lr * g
        else:
            new, m, v = adamw_update(p, g, m, v, t, lr, betas, 1e-8, 0.0)
        moves.append(np.abs(new - p).mean())
        p = new
    moves = np.array(moves)
    return moves[200:] / moves[150:200].mean()
