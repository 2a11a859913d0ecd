"""Boolean masks for attention (chapter 3): True means "this query may not see this key".

Masks are kept boolean and applied once, inside :func:`anatomy.attention.attention`, which
turns True into a score of -inf and hence a weight of exactly 0.
"""

from __future__ import annotations

from functools import reduce

import numpy as np

from ._validate import check_bool, check_positive_int, validated
from .attention import attention


def _sizes(args: dict, sizes: dict) -> None:
    """T (and T_k, when given) are positive integers, and T_k >= T."""
    T = check_positive_int(args["T"], "T")
    if args.get("T_k") is not None:
        T_k = check_positive_int(args["T_k"], "T_k")
        if T_k < T:
            raise ValueError(f"T_k: expected T_k >= T = {T} (the queries are the last T of "
                             f"the T_k keys), got {T_k}")


def _lengths(args: dict, sizes: dict) -> None:
    """T is a positive integer and every length an integer in [0, T]."""
    T = check_positive_int(args["T"], "T")
    lengths = args["lengths"]
    if not np.issubdtype(lengths.dtype, np.integer):
        raise TypeError(f"lengths: expected integers in [0, T] = [0, {T}], "
                        f"got dtype {lengths.dtype}")
    if lengths.size and (lengths.min() < 0 or lengths.max() > T):
        raise ValueError(f"lengths: expected integers in [0, T] = [0, {T}], "
                         f"got {lengths.tolist()}")


@validated(where=_sizes)
def causal_mask(T: int, T_k: int | None = None) -> np.ndarray:
    """Forbid every query from seeing keys in its future: True strictly above the diagonal.

    The objective p(x_1..x_T) = prod_t p(x_t | x_<t) forces this: to train all T positions in
    one pass, position t may only see keys j <= t, or the token it must predict leaks in.

    With ``T_k`` > ``T`` the T queries are the *last* T of T_k positions (new tokens attending
    to a cache of earlier keys): query i sits at position T_k - T + i.

    Shapes: -> [T, T]  (or [T, T_k] when T_k is given)
    """
    T_k = T if T_k is None else T_k
    return np.triu(np.ones((T, T_k), dtype=bool), k=1 + T_k - T)      # [T, T_k]


@validated(where=_lengths)
def padding_mask(lengths: np.ndarray, T: int) -> np.ndarray:
    """Forbid every query from seeing the padding keys of its own sequence.

    Sequence b holds ``lengths[b]`` real tokens followed by padding; key positions
    ``>= lengths[b]`` are True. The query axis has size 1, so the mask broadcasts over all
    queries and against single-head scores [B, T_q, T_k]. For per-head scores
    [B, h, T_q, T_k] add the head axis, ``mask[:, None]`` -> [B, 1, 1, T_k];
    :func:`anatomy.heads.multi_head_attention` does that itself.

    Queries at padding positions are not masked: they produce outputs nobody reads (a loss
    over a padded batch leaves their targets out). A sequence of length 0 masks every key,
    and its rows of weights are all 0.

    Shapes: lengths [B] -> mask [B, 1, T]
    """
    is_pad = np.arange(T) >= lengths[:, None]          # [T] vs [B, 1] -> [B, T]
    return is_pad[:, None, :]                          # [B, T] -> [B, 1, T]


def combine_masks(*masks: np.ndarray) -> np.ndarray:
    """Forbid a key if any mask forbids it: logical OR, broadcasting the shapes together.

    ``combine_masks(causal_mask(T), padding_mask(lengths, T))`` gives [B, T, T]: each query
    sees its past, and none of its sequence's padding.

    Shapes: each mask [T_q, T_k] or broadcastable to [..., T_q, T_k] -> [..., T_q, T_k]
    """
    if not masks:
        raise ValueError("masks: expected at least one mask, got none")
    arrays = [check_bool(m, f"masks[{i}]") for i, m in enumerate(masks)]
    try:
        np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        shapes = ", ".join(str(a.shape) for a in arrays)
        raise ValueError(f"masks: expected shapes broadcastable to [..., T_q, T_k], got "
                         f"{shapes}, which do not broadcast together") from None
    return reduce(np.logical_or, arrays)               # -> broadcast shape [..., T_q, T_k]


@validated(where=_lengths)
def causal_padding_mask(lengths: np.ndarray, T: int) -> np.ndarray:
    """The mask of a right-padded batch for a decoder: each query sees its past, no padding.

    Sequence b holds ``lengths[b]`` real tokens then padding. Key j is forbidden to query i
    when it lies in the future (j > i) or is padding (j >= lengths[b]): the OR of
    :func:`causal_mask` and :func:`padding_mask`, written here from the positions alone.

    Shapes: lengths [B] -> mask [B, T, T]
    """
    i = np.arange(T)[:, None]                    # query positions [T, 1]
    j = np.arange(T)                             # key positions [T]
    future = j > i                               # [T] vs [T, 1] -> [T, T]
    padding = j >= lengths[:, None, None]        # [T] vs [B, 1, 1] -> [B, 1, T]
    return future | padding                      # [T, T] | [B, 1, T] -> [B, T, T]


@validated
def padded_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, lengths: np.ndarray,
                     causal: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Self-attention over a right-padded batch that never produces NaN.

    Padding keys (and, when ``causal``, future keys) get weight exactly 0. A row whose every
    key is forbidden (a sequence of length 0) gets all-zero weights and a zero output rather
    than the NaN of 0 / 0: :func:`anatomy.attention.softmax` treats an all -inf row that way.

    Shapes: q, k [B, T, d_k], v [B, T, d_v], lengths [B]
            -> out [B, T, d_v], weights [B, T, T]
    """
    T = q.shape[-2]
    mask = causal_padding_mask(lengths, T) if causal else padding_mask(lengths, T)
    return attention(q, k, v, mask)     # out [B, T, d_v], weights [B, T, T]


def _window(args: dict, sizes: dict) -> None:
    check_positive_int(args["T"], "T")
    check_positive_int(args["w"], "w")


@validated(where=_window)
def sliding_window_mask(T: int, w: int) -> np.ndarray:
    """Let each query see only itself and the ``w - 1`` keys just before it.

    Key j is forbidden to query i when it lies in the future (j > i) or ``w`` or more
    positions back (j <= i - w). With w = 1 every token sees only itself; with w >= T this is
    the causal mask. One layer of such attention looks w - 1 positions back; a stack of L
    layers reaches L (w - 1) positions back, because each layer's output at position i
    already holds what its window saw.

    Shapes: -> [T, T]
    """
    too_old = np.tril(np.ones((T, T), dtype=bool), k=-w)     # [T, T]: True where j <= i - w
    return causal_mask(T) | too_old                            # [T, T]
