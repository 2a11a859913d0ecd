"""Scaled dot-product attention (chapter 1), the softmax under it and its scaling (chapter 2).

Attention in four steps: compare every query with every key (dot products), scale by
sqrt(d_k), normalise each row with a softmax, and mix the values with those weights.
All functions accept any number of leading batch or head axes.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ._validate import check_bool, check_positive_int, check_shape, validated
from .params import GPTConfig, init_params


@validated(floats=("z",))
def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    """Turn scores into weights that are positive and sum to one along ``axis``.

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

    If the entries of q and k have mean 0 and variance 1, q . k has variance d_k; dividing by
    sqrt(d_k) brings it back to about 1 whatever the head width, so the softmax does not
    saturate (Vaswani et al., 2017; chapter 2).

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

    ``mask`` is boolean with True = forbidden (the opposite of PyTorch's boolean
    ``attn_mask``, where True = allowed). Forbidden scores become -inf before the softmax, so
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


# ---------------------------------------------------------------- chapter 2: why sqrt(d_k)


def _positive_temperature(args: dict, sizes: dict) -> None:
    t = args["temperature"]
    if isinstance(t, bool) or not np.isscalar(t) or not t > 0:
        raise ValueError(f"temperature: expected a positive number, got {t!r}")


@validated(where=_positive_temperature)
def attention_weights(q: np.ndarray, k: np.ndarray, temperature: float = 1.0,
                      scaled: bool = True) -> np.ndarray:
    """The weights alone, softmax(q k^T / (sqrt(d_k) * temperature)), one row per query.

    ``temperature`` divides the scores: above 1 it flattens each row, below 1 it sharpens
    it. ``scaled=False`` leaves out sqrt(d_k), giving the raw dot products chapter 2 warns
    about; dividing by sqrt(d_k) is itself a fixed temperature of sqrt(d_k).

    Shapes: q [..., T_q, d_k], k [..., T_k, d_k] -> weights [..., T_q, T_k]
    """
    scores = scaled_scores(q, k)                                  # [..., T_q, T_k]
    if not scaled:
        scores = scores * math.sqrt(q.shape[-1])                  # back to raw q . k
    return softmax(scores / float(temperature), axis=-1)


def _positive_counts(args: dict, sizes: dict) -> None:
    for name in ("d_k", "n"):
        check_positive_int(args[name], name)


@validated(where=_positive_counts)
def score_std(d_k: int, n: int = 10_000, seed: int = 0) -> float:
    """Measure the spread of raw dot products q . k at width d_k (it comes out near sqrt(d_k)).

    Draws ``n`` independent pairs of vectors with N(0, 1) entries from a generator seeded
    with ``seed`` and returns the standard deviation of their dot products: an estimate, so
    it varies with the seed, by less the more pairs it uses.

    Shapes: q, k [n, d_k] -> dots [n] -> a float
    """
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, d_k))                             # [n, d_k]
    k = rng.standard_normal((n, d_k))                             # [n, d_k]
    dots = np.einsum("nd,nd->n", q, k)                            # [n, d_k] x2 -> [n]
    return float(dots.std())


def scaling_experiment(dims: tuple[int, ...] = (4, 64, 512), n: int = 1000, n_keys: int = 16,
                       seed: int = 42) -> list[dict[str, float]]:
    """Chapter 2's measurement: wide heads saturate the softmax unless scores are scaled.

    One generator, widths in the order given: for each width d_k, ``n`` random queries, each
    with its own ``n_keys`` random keys, all entries N(0, 1). For each width it reports the
    standard deviation of the raw scores q . k and of the scaled scores q . k / sqrt(d_k),
    and the largest softmax weight of each query, averaged over the queries, without and
    with the scale. With the defaults this is the syllabus's table.

    Shapes: per width q [n, d_k], k [n, n_keys, d_k] -> scores [n, n_keys]
    Returns one dict per width with keys d_k, std, std_scaled, top_unscaled, top_scaled.
    """
    for name, value in (("n", n), ("n_keys", n_keys), *(("dims", d) for d in dims)):
        check_positive_int(value, name)
    rng = np.random.default_rng(seed)
    rows = []
    for d_k in dims:
        q = rng.standard_normal((n, d_k))                         # [n, d_k]
        k = rng.standard_normal((n, n_keys, d_k))                 # [n, n_keys, d_k]
        raw = np.einsum("nd,nkd->nk", q, k)              # [n, d_k], [n, n_keys, d_k] -> [n, n_keys]
        scaled = raw / math.sqrt(d_k)                             # [n, n_keys]
        rows.append({"d_k": int(d_k), "std": float(raw.std()), "std_scaled": float(scaled.std()),
                     "top_unscaled": float(softmax(raw).max(axis=-1).mean()),
                     "top_scaled": float(softmax(scaled).max(axis=-1).mean())})
    return rows


@validated(floats=("z",))
def softmax_jacobian(z: np.ndarray) -> np.ndarray:
    """How each softmax weight moves when each score moves: J[i, j] = d p_i / d z_j.

    With p = softmax(z), J = diag(p) - p p^T, that is p_i (1 - p_i) on the diagonal and
    -p_i p_j off it: raising one score takes weight from every other key. A saturated row
    (p nearly one-hot) has J nearly 0, so almost no gradient flows back to the scores.
    Every row and column of J sums to 0, because the weights always sum to 1.

    Shapes: z [..., n] -> J [..., n, n]
    """
    p = softmax(z, axis=-1)                                       # [..., n]
    n = p.shape[-1]
    diag = p[..., :, None] * np.eye(n, dtype=p.dtype)     # [..., n, 1] * [n, n] -> [..., n, n]
    outer = p[..., :, None] * p[..., None, :]   # [..., n, 1] * [..., 1, n] -> [..., n, n]
    return diag - outer


def jacobian_norm_by_scale(stds: np.ndarray, n_keys: int = 16, n: int = 1000,
                           seed: int = 0) -> np.ndarray:
    """The size of the softmax Jacobian as the scores grow: how saturation starves gradients.

    Draws ``n`` rows of ``n_keys`` N(0, 1) scores once, multiplies them by each standard
    deviation in ``stds`` and returns the spectral norm of each row's Jacobian (its largest
    eigenvalue, since diag(p) - p p^T is symmetric and positive semi-definite): the most a
    unit change of the scores can move the weights, and so the most gradient the softmax can
    pass back. At std 0 every row gives exactly 1 / n_keys.

    Shapes: stds [S] -> norms [S, n]
    """
    stds = np.asarray(stds, dtype=float)
    check_shape(stds, "stds", "[S]")
    if not np.all(np.isfinite(stds)) or np.any(stds < 0):
        raise ValueError("stds: expected finite standard deviations >= 0")
    n_keys, n = check_positive_int(n_keys, "n_keys"), check_positive_int(n, "n")
    z = np.random.default_rng(seed).standard_normal((n, n_keys))  # [n, n_keys]
    norms = np.empty((len(stds), n))
    for i, s in enumerate(stds):
        J = softmax_jacobian(s * z)                               # [n, n_keys, n_keys]
        norms[i] = np.abs(np.linalg.eigvalsh(J)).max(axis=-1)     # [n, n_keys] -> [n]
    return norms


def saturation_stats(norms: np.ndarray, threshold: float = 0.01) -> dict[str, np.ndarray]:
    """Summarise the Jacobian norms of :func:`jacobian_norm_by_scale` at each spread.

    "median": the median norm over the rows; "frozen": the share of rows whose norm is
    below ``threshold``, saturated so hard that almost no gradient passes; "peak": the index
    of the spread with the largest median.

    Shapes: norms [S, n] -> median [S], frozen [S], peak (an index into S)
    """
    norms = np.asarray(norms, dtype=float)
    check_shape(norms, "norms", "[S, n]")
    if not np.all(np.isfinite(norms)) or np.any(norms < 0):
        raise ValueError("norms: expected finite Jacobian norms >= 0")
    median = np.median(norms, axis=-1)                            # [S, n] -> [S]
    frozen = (norms < threshold).mean(axis=-1)                    # [S, n] -> [S]
    return {"median": median, "frozen": frozen, "peak": int(np.argmax(median))}


def _head_count(args: dict, sizes: dict) -> None:
    h = check_positive_int(args["h"], "h")
    if sizes["d"] % h:
        raise ValueError(f"h: the width d = {sizes['d']} does not split into h = {h} heads")


@validated(floats=("x",), where=_head_count)
def multi_head_weights(x: np.ndarray, W_q: np.ndarray, W_k: np.ndarray, h: int) -> np.ndarray:
    """Every head's attention weights: each head scales by its own width, d_head = d / h.

    The queries and keys have the model's width d, but head j only compares its own slice
    of d_head features, so its scores are sums of d_head products and spread like
    sqrt(d_head): that is the d_k of the scale (GPT-2 small: sqrt(64) = 8, not sqrt(768)).

    Shapes: x [..., T, d], W_q and W_k [d, d] -> weights [..., h, T, T]
    """
    *lead, T, d = x.shape
    d_head = d // h
    # [..., T, d] @ [d, d] -> [..., T, d] -> [..., T, h, d_head]
    q = (x @ W_q).reshape(*lead, T, h, d_head)
    k = (x @ W_k).reshape(*lead, T, h, d_head)
    q, k = np.swapaxes(q, -3, -2), np.swapaxes(k, -3, -2)  # [..., h, T, d_head]
    # [..., h, T, d_head] @ [..., h, d_head, T] -> [..., h, T, T]
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(d_head)
    return softmax(scores, axis=-1)


def score_std_at_init(cfg: GPTConfig, T: int = 256, seed: int = 0) -> dict[str, float]:
    """How widely the first block's scores spread under the library's initialisation.

    ``init_params`` draws every W_qkv from N(0, 0.02^2) with zero bias and sets LayerNorm to
    g = 1, b = 0, whatever the vocabulary and the depth. So a copy of ``cfg`` with one block
    and a vocabulary of T tokens draws its block's weights from the same distribution as the
    full model, for a small part of the cost (GPT-2 small in full is 124M numbers). The
    block's input is token t at position t, for t < T, through the first LayerNorm. Returned:
    the std of the entries of q and k, and of the scores q . k over every head and every
    pair of positions, raw and divided by sqrt(d_head).

    Shapes: x [T, d] -> q, k [h, T, d_head] -> scores [h, T, T]
    """
    # imported here, not at the top: blocks and heads import this module
    from .blocks import layer_norm
    from .heads import split_heads

    check_positive_int(T, "T")
    one_block = dataclasses.replace(cfg, V=T, ctx=T, L=1)
    params = init_params(one_block, seed)
    x = params["tok_emb"] + params["pos_emb"]                      # [T, d]: token t at t
    x = layer_norm(x, params["blocks.0.ln1_g"], params["blocks.0.ln1_b"])
    qkv = x @ params["blocks.0.W_qkv"] + params["blocks.0.b_qkv"]  # [T, d] @ [d, 3d] -> [T, 3d]
    q, k, _ = np.split(qkv, 3, axis=-1)                            # 3 x [T, d]
    q, k = split_heads(q, cfg.h), split_heads(k, cfg.h)            # [T, d] -> [h, T, d_head]
    raw = q @ np.swapaxes(k, -1, -2)       # [h, T, d_head] @ [h, d_head, T] -> [h, T, T]
    return {"q_std": float(q.std()), "k_std": float(k.std()), "raw": float(raw.std()),
            "scaled": float(raw.std() / math.sqrt(cfg.d_head))}
