"""Attention in tiles: the online softmax and FlashAttention's forward pass, in NumPy.

Plain attention builds the [T, T] table of scores, softmaxes it and multiplies by V. The
tiled pass (Dao et al., 2022) never holds that table: it walks the keys in blocks and keeps,
for every query, a running maximum ``m``, a running sum of exponentials ``l`` and a running
weighted sum of values ``acc``. When a block arrives with a larger maximum, what was summed
so far is rescaled by exp(m_old - m_new), so the end result is exactly softmax(s) v, to
rounding. Scratch memory is one [block, block] tile of scores per step instead of [T, T].

Shapes: q [..., T_q, d_k], k [..., T_k, d_k], v [..., T_k, d_v] -> [..., T_q, d_v]
"""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable

import numpy as np

from .._validate import check_positive_int, check_shape


def online_softmax_update(m: np.ndarray, l: np.ndarray, acc: np.ndarray,  # noqa: E741
                          scores: np.ndarray, v: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fold one block of keys into the running softmax of every query row.

    ``m`` is the largest score seen so far (-inf before the first block), ``l`` the sum of
    exp(score - m) so far and ``acc`` the sum of exp(score - m) * value so far. The new
    block's ``scores`` may hold -inf (masked keys), but each row's running maximum must be
    finite after the update. Returns the updated ``(m, l, acc)``; ``acc / l`` is then the
    attention output over every key seen. The inputs are left unchanged.

    Shapes: m [..., T_q], l [..., T_q], acc [..., T_q, d_v], scores [..., T_q, T_b],
            v [..., T_b, d_v] -> m [..., T_q], l [..., T_q], acc [..., T_q, d_v]
    """
    m_new = np.maximum(m, scores.max(axis=-1))              # [..., T_q]
    rescale = np.exp(m - m_new)                             # [..., T_q], 0 on the first block
    p = np.exp(scores - m_new[..., None])                   # [..., T_q, T_b]
    l_new = l * rescale + p.sum(axis=-1)                    # [..., T_q]
    # [..., T_q, T_b] @ [..., T_b, d_v] -> [..., T_q, d_v]
    acc_new = acc * rescale[..., None] + p @ v
    return m_new, l_new, acc_new


def _tile_inputs(q, k, v, block: int, causal: bool) -> tuple[int, int]:
    """Check the tiled pass's arguments; return (T_q, T_k)."""
    block = check_positive_int(block, "block")
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal: expected True or False, got {causal!r}")
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    sizes = check_shape(q, "q", "[..., T_q, d_k]")
    sizes |= check_shape(k, "k", "[..., T_k, d_k]", d_k=sizes["d_k"])
    check_shape(v, "v", "[..., T_k, d_v]", T_k=sizes["T_k"])
    try:
        np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(f"q, k, v: expected leading axes [...] that broadcast together, "
                         f"got {q.shape[:-2]}, {k.shape[:-2]} and {v.shape[:-2]}") from None
    if causal and sizes["T_q"] > sizes["T_k"]:
        raise ValueError(f"q: a causal pass needs T_q <= T_k (the queries are the last T_q "
                         f"of the T_k positions), got T_q={sizes['T_q']}, "
                         f"T_k={sizes['T_k']}")
    return sizes["T_q"], sizes["T_k"]


def tiled_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, block: int = 64,
                    causal: bool = False) -> np.ndarray:
    """softmax(q k^T / sqrt(d_k)) v computed one [block, block] tile at a time.

    Equal to chapter 1's ``attention(q, k, v, mask)[0]`` (within 1e-12 in float64) for any
    T, a multiple of ``block`` or not, and any leading (batch, head) axes. With ``causal``
    the queries are the last T_q of the T_k positions (T_q = T_k in training, fewer with a
    KV cache) and query i sees keys up to its own position; tiles entirely in the future are
    skipped, not computed and masked. The result has q's dtype.

    Shapes: q [..., T_q, d_k], k [..., T_k, d_k], v [..., T_k, d_v] -> [..., T_q, d_v]
    """
    T_q, T_k = _tile_inputs(q, k, v, block, causal)
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    offset = T_k - T_q                                      # query i sits at position offset + i
    out = np.empty((*lead, T_q, v.shape[-1]), dtype=np.result_type(q, v))
    scale = 1.0 / math.sqrt(q.shape[-1])
    for i0 in range(0, T_q, block):
        qi = q[..., i0:i0 + block, :] * scale               # [..., b_q, d_k]
        rows = qi.shape[-2]
        m = np.full((*lead, rows), -np.inf)                 # [..., b_q]
        l = np.zeros((*lead, rows))                         # noqa: E741  [..., b_q]
        acc = np.zeros((*lead, rows, v.shape[-1]))          # [..., b_q, d_v]
        last = offset + i0 + rows if causal else T_k        # keys beyond it are all future
        for j0 in range(0, last, block):
            s = qi @ np.swapaxes(k[..., j0:j0 + block, :], -1, -2)   # [..., b_q, b_k]
            if causal and j0 + s.shape[-1] > offset + i0 + 1:        # the tile crosses the diagonal
                pos_q = offset + i0 + np.arange(rows)[:, None]       # [b_q, 1]
                pos_k = j0 + np.arange(s.shape[-1])[None, :]         # [1, b_k]
                s = np.where(pos_k > pos_q, -np.inf, s)              # future keys -> weight 0
            m, l, acc = online_softmax_update(m, l, acc, s, v[..., j0:j0 + block, :])  # noqa: E741
        out[..., i0:i0 + rows, :] = acc / l[..., None]      # [..., b_q, d_v]
    return out


def naive_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False
                    ) -> np.ndarray:
    """Chapter 1's attention with chapter 3's mask, the whole [T_q, T_k] table at once (the
    reference the tiled pass is compared with; the same query alignment as
    :func:`tiled_attention`).

    Shapes: q [..., T_q, d_k], k [..., T_k, d_k], v [..., T_k, d_v] -> [..., T_q, d_v]
    """
    from ..attention import attention

    T_q, T_k = _tile_inputs(q, k, v, 1, causal)
    mask = None
    if causal:                                              # [T_q, T_k], True = future
        mask = np.arange(T_k)[None, :] > (T_k - T_q + np.arange(T_q))[:, None]
    return attention(q, k, v, mask)[0]


def peak_bytes(fn: Callable, *args, **kwargs) -> int:
    """The peak of memory newly allocated (as tracemalloc sees it; NumPy reports its arrays)
    while ``fn(*args, **kwargs)`` runs, above what was in use before, the result included."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        fn(*args, **kwargs)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        if not was_tracing:
            tracemalloc.stop()
