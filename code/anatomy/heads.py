"""Multi-head attention without a loop over heads (chapter 4).

One fused projection makes Q, K and V for every head at once; a reshape and a transpose give
each head its own slice of the features; batched matmuls attend in every head in parallel;
the heads are merged back and mixed by W_o. Weights are stored [in, out], so a projection is
``x @ W``.
"""

from __future__ import annotations

import numpy as np

from ._validate import (
    check_bool,
    check_divisible,
    check_groups,
    check_leading,
    check_mask,
    check_positive_int,
    check_projection,
    check_rope_heads,
    check_shape,
    shape_error,
    validated,
)
from .attention import attention
from .linear import linear
from .masks import causal_mask
from .positions import rope


def _heads_divide(args: dict, sizes: dict) -> None:
    """h is a positive integer and the width d splits into h heads of whole width."""
    check_divisible("x", sizes["d"], check_positive_int(args["h"], "h"))


@validated(where=_heads_divide)
def split_heads(x: np.ndarray, h: int) -> np.ndarray:
    """Give each head its own slice of the features: head j gets columns j*d_head..(j+1)*d_head.

    Shapes: x [..., T, d] -> [..., h, T, d_head]
    """
    *lead, T, d = x.shape
    x = x.reshape(*lead, T, h, d // h)          # [..., T, d] -> [..., T, h, d_head]
    return np.swapaxes(x, -3, -2)               # -> [..., h, T, d_head]


@validated
def merge_heads(x: np.ndarray) -> np.ndarray:
    """Undo :func:`split_heads`: lay the heads side by side again.

    The head axis moves back next to d_head first, so that the reshape glues each token's h
    pieces into one row; reshaping [h, T, d_head] straight to [T, d] would mix tokens.

    Shapes: x [..., h, T, d_head] -> [..., T, d]   (d = h * d_head)
    """
    *lead, h, T, d_head = x.shape
    x = np.moveaxis(x, -3, -2)                  # [..., h, T, d_head] -> [..., T, h, d_head]
    return x.reshape(*lead, T, h * d_head)      # -> [..., T, d]


def _sequence_mask(mask: np.ndarray | None, causal: bool, lead: tuple[int, ...], T_q: int,
                   T_k: int) -> np.ndarray | None:
    """Combine the caller's per-sequence mask with the causal mask and add the head axis.

    A mask is given per sequence, broadcastable to [..., T_q, T_k] (no head axis), because
    every head of a sequence sees the same tokens.

    Shapes: mask broadcastable to [..., T_q, T_k] -> [..., 1, T_q, T_k] (or [T_q, T_k])
    """
    if mask is not None:
        mask = check_mask(mask, (*lead, T_q, T_k))
    if causal:
        mask = causal_mask(T_q, T_k) if mask is None else mask | causal_mask(T_q, T_k)
    if mask is not None and mask.ndim >= 3:
        mask = mask[..., None, :, :]            # [..., T_q, T_k] -> [..., 1, T_q, T_k]
    return mask


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, W_o: np.ndarray,
            b_o: np.ndarray | None, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Attention in every head at once, then merge the heads and mix them with W_o.

    Shapes: q [..., h, T_q, d_head], k and v [..., h, T_k, d_head], W_o [d, d]
            -> out [..., T_q, d], weights [..., h, T_q, T_k]
    """
    out, weights = attention(q, k, v, mask)     # [..., h, T_q, d_head], [..., h, T_q, T_k]
    out = merge_heads(out)                      # -> [..., T_q, d]
    return linear(out, W_o, b_o), weights       # [..., T_q, d] @ [d, d] -> [..., T_q, d]


def _heads_and_mask(args: dict, sizes: dict) -> None:
    _heads_divide(args, sizes)
    if args["mask"] is not None:
        check_bool(args["mask"], "mask")


@validated(where=_heads_and_mask)
def multi_head_attention(x: np.ndarray, W_qkv: np.ndarray, W_o: np.ndarray, h: int,
                         b_qkv: np.ndarray | None = None, b_o: np.ndarray | None = None,
                         causal: bool = True, mask: np.ndarray | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Self-attention with h heads, as in GPT-2: one fused QKV projection, no loop over heads.

    ``W_qkv`` is split into Q, K, V in that order (columns 0:d, d:2d, 2d:3d), and each of
    those into h heads of width d_head = d / h. ``mask`` (True = forbidden) is per sequence,
    e.g. a :func:`anatomy.masks.padding_mask`: every head of a sequence sees the same tokens,
    so it has no head axis, and one is added here. It is combined with the causal mask when
    ``causal`` is true.

    Shapes: x [..., T, d], W_qkv [d, 3d], b_qkv [3d], W_o [d, d], b_o [d],
            mask broadcastable to [..., T, T]
            -> out [..., T, d], weights [..., h, T, T]
    """
    T, d = x.shape[-2:]
    qkv = x @ W_qkv                             # [..., T, d] @ [d, 3d] -> [..., T, 3d]
    if b_qkv is not None:
        qkv = qkv + b_qkv
    # Q, K, V are the column blocks 0:d, d:2d, 2d:3d; each [..., T, d] -> [..., h, T, d_head]
    q, k, v = (split_heads(qkv[..., i * d:(i + 1) * d], h) for i in range(3))
    if causal:
        mask = causal_mask(T) if mask is None else mask | causal_mask(T)   # [..., T, T]
    if mask is not None and mask.ndim > 2:
        mask = mask[..., None, :, :]            # [..., T, T] -> [..., 1, T, T]: every head
    out, weights = attention(q, k, v, mask)     # [..., h, T, d_head], [..., h, T, T]
    out = merge_heads(out) @ W_o                # [..., T, d] @ [d, d] -> [..., T, d]
    if b_o is not None:
        out = out + b_o
    return out, weights


def cached_multi_head_attention(
        x: np.ndarray, W_qkv: np.ndarray, W_o: np.ndarray, h: int,
        past: tuple[np.ndarray, np.ndarray] | None = None, b_qkv: np.ndarray | None = None,
        b_o: np.ndarray | None = None, causal: bool = True, mask: np.ndarray | None = None
        ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """:func:`multi_head_attention` for new tokens that follow ``past`` ones: the KV cache.

    ``past`` holds the keys and values of the T_past earlier positions (None: no history).
    Only the T new tokens are projected; their keys and values are appended to the cache, and
    each new query i sits at position T_past + i. The third result is the grown cache, to be
    passed as ``past`` next time. Keys and values of earlier tokens never change, because a
    token's K and V depend only on that token's stream, and under the causal mask no later
    token changes an earlier token's stream.

    Shapes: x [..., T, d], past (K, V) each [..., h, T_past, d_head],
            mask broadcastable to [..., T, T_past + T]
            -> out [..., T, d], weights [..., h, T, T_past + T],
               cache (K, V) each [..., h, T_past + T, d_head]
    """
    x = np.asarray(x)
    h = check_positive_int(h, "h")
    d = check_shape(x, "x", "[..., T, d]")["d"]
    check_divisible("x", d, h)
    check_projection(W_qkv, b_qkv, ("W_qkv", "b_qkv"), "[d, 3d]", d=d)
    check_projection(W_o, b_o, ("W_o", "b_o"), "[d, d]", d=d)
    *lead, T, _ = x.shape
    qkv = linear(x, W_qkv, b_qkv)               # [..., T, d] @ [d, 3d] -> [..., T, 3d]
    q, k, v = np.split(qkv, 3, axis=-1)         # [..., T, 3d] -> 3 x [..., T, d]
    q, k, v = (split_heads(t, h) for t in (q, k, v))   # each -> [..., h, T, d_head]
    if past is not None:
        K, V = (np.asarray(a) for a in past)
        spec = "[..., h, T_past, d_head]"
        T_past = check_shape(K, "past[0]", spec, h=h, d_head=d // h)["T_past"]
        for name, a in (("past[0]", K), ("past[1]", V)):
            check_shape(a, name, spec, h=h, T_past=T_past, d_head=d // h)
            if a.shape[:-3] != tuple(lead):
                raise shape_error(name, spec, a.shape,
                                  note=f"with leading axes {tuple(lead)} like x's")
        k = np.concatenate([K, k], axis=-2)     # -> [..., h, T_past + T, d_head]
        v = np.concatenate([V, v], axis=-2)     # -> [..., h, T_past + T, d_head]
    mask = _sequence_mask(mask, causal, tuple(lead), T, k.shape[-2])
    out, weights = _attend(q, k, v, W_o, b_o, mask)   # [..., T, d], [..., h, T, T_past + T]
    return out, weights, (k, v)


def cross_attention(x_q: np.ndarray, x_kv: np.ndarray, W_q: np.ndarray, W_kv: np.ndarray,
                    W_o: np.ndarray, h: int, b_q: np.ndarray | None = None,
                    b_kv: np.ndarray | None = None, b_o: np.ndarray | None = None,
                    mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Queries from one sequence, keys and values from another (decoder reading an encoder).

    No causal mask: the encoder's sequence is complete before decoding starts, so every
    query may see all of it. ``mask`` (True = forbidden) can hide the encoder's padding.
    ``W_kv`` is K then V, fused like ``W_qkv``. The encoder width d_kv may differ from d.

    Shapes: x_q [..., T_q, d], x_kv [..., T_k, d_kv], W_q [d, d], W_kv [d_kv, 2d],
            W_o [d, d], mask broadcastable to [..., T_q, T_k]
            -> out [..., T_q, d], weights [..., h, T_q, T_k]
    """
    x_q, x_kv = np.asarray(x_q), np.asarray(x_kv)
    h = check_positive_int(h, "h")
    d = check_shape(x_q, "x_q", "[..., T_q, d]")["d"]
    d_kv = check_shape(x_kv, "x_kv", "[..., T_k, d_kv]")["d_kv"]
    check_leading(x_kv, "x_kv", "[..., T_k, d_kv]", x_q.shape[:-2], "x_q")
    check_divisible("x_q", d, h)
    check_projection(W_q, b_q, ("W_q", "b_q"), "[d, d]", d=d)
    check_projection(W_kv, b_kv, ("W_kv", "b_kv"), "[d_kv, 2d]", d=d, d_kv=d_kv)
    check_projection(W_o, b_o, ("W_o", "b_o"), "[d, d]", d=d)
    q = split_heads(linear(x_q, W_q, b_q), h)  # [..., T_q, d] -> [..., h, T_q, d_head]
    kv = linear(x_kv, W_kv, b_kv)               # [..., T_k, d_kv] @ [d_kv, 2d] -> [..., T_k, 2d]
    k, v = (split_heads(t, h) for t in np.split(kv, 2, axis=-1))  # each [..., h, T_k, d_head]
    lead = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2])
    mask = _sequence_mask(mask, False, lead, x_q.shape[-2], x_kv.shape[-2])
    return _attend(q, k, v, W_o, b_o, mask)     # [..., T_q, d], [..., h, T_q, T_k]


def grouped_query_attention(x: np.ndarray, W_q: np.ndarray, W_kv: np.ndarray, W_o: np.ndarray,
                            h: int, h_kv: int, causal: bool = True,
                            mask: np.ndarray | None = None, rope_base: float | None = None
                            ) -> tuple[np.ndarray, np.ndarray]:
    """Self-attention where groups of h / h_kv query heads share one key/value head.

    Only h_kv heads of K and V are computed (and cached during generation), which shrinks
    the KV cache by h / h_kv. h_kv = h is ordinary multi-head attention; h_kv = 1 is
    multi-query attention. Query head j reads key/value head j // (h / h_kv). Bias-free, as
    in Llama and Mistral (some GQA models, Qwen2 among them, add biases to Q, K and V).

    With ``rope_base`` (e.g. 10000.0), each query and key head is turned by
    :func:`anatomy.positions.rope` at positions 0..T-1 after the projection, as in Llama;
    values are not turned. The default None adds no positions here.

    Shapes: x [..., T, d], W_q [d, d], W_kv [d, 2d_kv] (d_kv = h_kv * d_head), W_o [d, d]
            -> out [..., T, d], weights [..., h, T, T]
    """
    x = np.asarray(x)
    h, h_kv = check_positive_int(h, "h"), check_positive_int(h_kv, "h_kv")
    d = check_shape(x, "x", "[..., T, d]")["d"]
    check_divisible("x", d, h)
    check_groups("h_kv", h, h_kv)
    d_head = d // h
    if rope_base is not None:
        check_rope_heads("rope_base", d, h)
    check_projection(W_q, None, ("W_q", "b_q"), "[d, d]", d=d)
    check_projection(W_kv, None, ("W_kv", "b_kv"), "[d, 2d_kv]", d=d, d_kv=h_kv * d_head)
    check_projection(W_o, None, ("W_o", "b_o"), "[d, d]", d=d)
    *lead, T, _ = x.shape
    q = split_heads(x @ W_q, h)                 # [..., T, d] -> [..., h, T, d_head]
    kv = x @ W_kv                               # [..., T, d] @ [d, 2d_kv] -> [..., T, 2d_kv]
    k, v = (split_heads(t, h_kv) for t in np.split(kv, 2, axis=-1))  # [..., h_kv, T, d_head]
    if rope_base is not None:                   # positions inside attention (chapter 5)
        q = rope(q, base=rope_base)             # [..., h, T, d_head], pairs turned
        k = rope(k, base=rope_base)             # [..., h_kv, T, d_head], before the repeat
    k = np.repeat(k, h // h_kv, axis=-3)        # [..., h_kv, T, d_head] -> [..., h, T, d_head]
    v = np.repeat(v, h // h_kv, axis=-3)        # [..., h_kv, T, d_head] -> [..., h, T, d_head]
    mask = _sequence_mask(mask, causal, tuple(lead), T, T)
    return _attend(q, k, v, W_o, None, mask)    # [..., T, d], [..., h, T, T]


# ---- what heads cost ----------------------------------------------------------------------


def attention_flops(T: int, d: int, h: int) -> dict[str, int]:
    """Matmul FLOPs of one multi-head self-attention layer over T tokens, part by part.

    A (rows, n) @ (n, m) product costs 2 * rows * n * m FLOPs (one multiply and one add per
    term). Each head compares and mixes with width d_head = d / h, so the h heads together do
    the work of one head of width d: only the count of heads changes, not the total. The
    softmax (a few operations per score, h * T * T scores) is left out.

    Shapes: -> {"qkv": [T, d] @ [d, 3d], "scores": h x [T, d_head] @ [d_head, T],
                "mix": h x [T, T] @ [T, d_head], "out": [T, d] @ [d, d]}
    """
    T, d, h = (check_positive_int(v, name) for v, name in ((T, "T"), (d, "d"), (h, "h")))
    check_divisible("d", d, h)
    d_head = d // h
    return {
        "qkv": 2 * T * d * 3 * d,               # [T, d] @ [d, 3d]
        "scores": h * 2 * T * d_head * T,       # h x [T, d_head] @ [d_head, T]
        "mix": h * 2 * T * T * d_head,          # h x [T, T] @ [T, d_head]
        "out": 2 * T * d * d,                   # [T, d] @ [d, d]
    }


def score_bytes(T: int, h: int, B: int = 1, itemsize: int = 4) -> int:
    """Memory of one layer's attention scores [B, h, T, T], in bytes (float32 by default).

    Standard attention builds this tensor (and the weights, the same size again); training
    keeps the weights of every layer for the backward pass. It grows with T squared, which is
    the memory wall that FlashAttention removes by never materialising it.

    Shapes: scores [B, h, T, T] -> B * h * T * T * itemsize
    """
    for value, name in ((T, "T"), (h, "h"), (B, "B"), (itemsize, "itemsize")):
        check_positive_int(value, name)
    return B * h * T * T * itemsize


def kv_cache_bytes(L: int, T: int, h_kv: int, d_head: int, B: int = 1,
                   itemsize: int = 4) -> int:
    """Memory of the keys and values cached for generation, in bytes.

    Every one of the L layers keeps K and V for all T positions: h_kv heads of width d_head
    each. Ordinary multi-head attention has h_kv = h, so h_kv * d_head = d and this is
    2 L T d values per sequence; grouped-query attention shrinks it by h / h_kv.

    Shapes: K and V, each [B, h_kv, T, d_head] per layer -> 2 * L * B * h_kv * T * d_head
            * itemsize
    """
    for value, name in ((L, "L"), (T, "T"), (h_kv, "h_kv"), (d_head, "d_head"), (B, "B"),
                        (itemsize, "itemsize")):
        check_positive_int(value, name)
    return 2 * L * B * h_kv * T * d_head * itemsize
