"""Scaled dot-product attention and the softmax under it (chapter 1).

Attention in four steps: compare every query with every key (dot products), scale by
sqrt(d_k), normalise each row with a softmax, and mix the values with those weights.
All functions accept any number of leading batch or head axes. Why the scale is sqrt(d_k)
is chapter 2's question, measured in :mod:`anatomy.scaling`.
"""

from __future__ import annotations

import math

import numpy as np

from ._validate import check_bool, validated


@validated(floats=("z",))
def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    """Turn scores into weights that are non-negative and sum to one along ``axis``.

    The row maximum is subtracted before ``exp``. Softmax does not change when a constant is
    added to a row, so the value is the same, but the largest exponent is now exp(0) = 1 and
    nothing overflows, even for logits of 1e4. The shift also rescues a row whose scores are
    all very negative: exp(-1000) underflows to 0, and 0 / 0 would be NaN.

    A row that is entirely -inf gives all zeros, not NaN. That is the row of a query whose
    every key is masked (a padding position with nothing real to look at): it takes no
    information from anywhere, and its output is zero. A row with at least one finite entry
    is an ordinary softmax row. NaN or +inf in the input propagates as NaN.

    Shapes: z [..., n] -> [..., n]  (normalised along ``axis``, -1 by default)
    """
    top = np.max(z, axis=axis, keepdims=True)                   # [..., n] -> [..., 1]
    # An all -inf row has max -inf, and -inf - (-inf) is NaN: shift such rows by 0 instead.
    top = np.where(np.isneginf(top), 0.0, top)
    e = np.exp(z - top)
    total = np.sum(e, axis=axis, keepdims=True)                  # [..., n] -> [..., 1]
    # All -inf rows have total 0 and e = 0 everywhere; dividing by 1 keeps them 0.
    return e / np.where(total == 0, 1.0, total)


@validated
def scaled_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """How well each query matches each key: dot products divided by sqrt(d_k).

    If the entries of q and k are independent with mean 0 and variance 1, q . k has variance
    d_k; dividing by sqrt(d_k) brings it back to about 1 whatever the head width, so a wide
    head does not start out with a saturated softmax (Vaswani et al., 2017; chapter 2).
    Training can break the independence, and then the scaled scores can spread wider
    (chapter 2 measures a trained model's spread).

    Shapes: q [..., T_q, d_k], k [..., T_k, d_k] -> scores [..., T_q, T_k]
    """
    k_t = np.swapaxes(k, -1, -2)                   # [..., T_k, d_k] -> [..., d_k, T_k]
    # math.sqrt gives a Python float, which keeps float32 inputs in float32 under NumPy 2.
    return (q @ k_t) / math.sqrt(q.shape[-1])      # -> [..., T_q, T_k]


def _boolean_mask(args: dict, sizes: dict) -> None:
    if args["mask"] is not None:
        check_bool(args["mask"], "mask")


@validated(where=_boolean_mask)
def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None,
              bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Scaled dot-product attention: softmax(q k^T / sqrt(d_k)) v, row by row.

    ``mask`` is boolean with True = forbidden, as in ``nn.MultiheadAttention``'s boolean
    masks, and the opposite of ``F.scaled_dot_product_attention``'s boolean ``attn_mask``
    (True = allowed). Forbidden scores become -inf before the softmax, so
    their weights are exactly 0 and the allowed weights of the row renormalise to sum to 1.
    A row with every key forbidden gets all-zero weights and a zero output (see ``softmax``).

    ``bias`` is added to the scaled scores before masking (ALiBi's distance penalty).

    Shapes: q [..., T_q, d_k], k [..., T_k, d_k], v [..., T_k, d_v],
            mask and bias broadcastable to [..., T_q, T_k]
            -> out [..., T_q, d_v], weights [..., T_q, T_k]
    """
    scores = scaled_scores(q, k)                                  # [..., T_q, T_k]
    if bias is not None:
        scores = scores + bias                                    # ALiBi's distance penalty
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)                  # forbidden -> weight 0
    weights = softmax(scores, axis=-1)                            # each row sums to 1
    out = weights @ v              # [..., T_q, T_k] @ [..., T_k, d_v] -> [..., T_q, d_v]
    return out, weights
