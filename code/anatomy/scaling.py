"""Why attention divides by sqrt(d_k) (chapter 2): the spread of q . k, the softmax's
saturation and the gradient it starves.

Random queries and keys with N(0, 1) entries give dot products of spread sqrt(d_k); dividing
by sqrt(d_k) brings them back to about 1 whatever the head width (Vaswani et al., 2017). The
functions here measure that spread, the weights with and without the scale (and with a
temperature), the softmax Jacobian that carries the gradient back to the scores, and the
spread of the first block's scores under the library's initialisation.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ._validate import (
    check_divisible,
    check_non_negative,
    check_positive_int,
    check_positive_number,
    validated,
)
from .attention import scaled_scores, softmax
from .blocks import LN_EPS, layer_norm
from .heads import split_heads
from .params import GPTConfig, init_params


def _positive_temperature(args: dict, sizes: dict) -> None:
    check_positive_number(args["temperature"], "temperature")


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


def _random_scores(dims: tuple[int, ...], n: int, n_keys: int, seed: int):
    """For each width d_k in turn, n random queries, n_keys random keys for each, and their
    raw scores, all entries N(0, 1), from one generator seeded once.

    Shapes: per width q [n, d_k], k [n, n_keys, d_k] -> raw [n, n_keys]
    """
    for name, value in (("n", n), ("n_keys", n_keys), *(("dims", d) for d in dims)):
        check_positive_int(value, name)
    rng = np.random.default_rng(seed)
    for d_k in dims:
        q = rng.standard_normal((n, d_k))                         # [n, d_k]
        k = rng.standard_normal((n, n_keys, d_k))                 # [n, n_keys, d_k]
        yield d_k, q, k, np.einsum("nd,nkd->nk", q, k)   # [n, d_k], [n, n_keys, d_k] -> [n, n_keys]


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
    rows = []
    for d_k, _, _, raw in _random_scores(dims, n, n_keys, seed):
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
    stds = check_non_negative(stds, "stds", "[S]", "standard deviations")
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
    norms = check_non_negative(norms, "norms", "[S, n]", "Jacobian norms")
    median = np.median(norms, axis=-1)                            # [S, n] -> [S]
    frozen = (norms < threshold).mean(axis=-1)                    # [S, n] -> [S]
    return {"median": median, "frozen": frozen, "peak": int(np.argmax(median))}


def query_gradient_norms(dims: tuple[int, ...] = (16, 64, 256, 512), n: int = 1000,
                         n_keys: int = 16, seed: int = 0, threshold: float = 0.01
                         ) -> list[dict[str, float]]:
    """Follow the gradient one step past the softmax, to the query, with and without the scale.

    The score of key j is z_j = c q . k_j, with c = 1 / sqrt(d_k) scaled and c = 1 unscaled,
    so the weights move with the query as d p / d q = c J K, where J is the softmax Jacobian
    at those scores and K [n_keys, d_k] the keys. The scale therefore acts twice: it sets the
    spread of the scores, and so how saturated J is, and it multiplies what gets through J by
    c. For each width, ``n`` queries, each with its own ``n_keys`` keys, all entries N(0, 1),
    from one generator in the order of ``dims``. Per width and per variant ("unscaled",
    "scaled"): the median spectral norm of J (weights per score), the median spectral norm of
    c J K (weights per query), and the share of queries whose c J K has norm below
    ``threshold``.

    Shapes: per width q [n, d_k], k [n, n_keys, d_k] -> J [n, n_keys, n_keys],
            c J K [n, n_keys, d_k] -> one number per query
    Returns one dict per width with keys d_k and, for v in (unscaled, scaled),
    to_scores_v, to_query_v, frozen_v.
    """
    rows = []
    for d_k, _, k, raw in _random_scores(dims, n, n_keys, seed):
        row: dict[str, float] = {"d_k": int(d_k)}
        for name, c in (("unscaled", 1.0), ("scaled", 1.0 / math.sqrt(d_k))):
            J = softmax_jacobian(c * raw)                         # [n, n_keys, n_keys]
            to_scores = np.abs(np.linalg.eigvalsh(J)).max(axis=-1)          # [n]
            M = c * (J @ k)       # [n, n_keys, n_keys] @ [n, n_keys, d_k] -> [n, n_keys, d_k]
            # spectral norm of M from the small Gram matrix M M^T [n, n_keys, n_keys]
            gram = M @ np.swapaxes(M, -1, -2)
            to_query = np.sqrt(np.clip(np.linalg.eigvalsh(gram)[..., -1], 0, None))   # [n]
            row[f"to_scores_{name}"] = float(np.median(to_scores))
            row[f"to_query_{name}"] = float(np.median(to_query))
            row[f"frozen_{name}"] = float((to_query < threshold).mean())
        rows.append(row)
    return rows


def _head_count(args: dict, sizes: dict) -> None:
    check_divisible("x", sizes["d"], check_positive_int(args["h"], "h"))


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


def score_std_at_init(cfg: GPTConfig, T: int = 256, seed: int = 0,
                      eps: float = LN_EPS) -> dict[str, float]:
    """How widely the first block's scores spread under the library's initialisation.

    ``init_params`` draws both embedding tables and every W_qkv from N(0, 0.02^2), with zero
    bias, and sets LayerNorm to g = 1, b = 0, whatever the vocabulary and the depth. So in a
    copy of ``cfg`` with one block and a vocabulary of T tokens, the weights the first
    block's scores read (the embeddings, ln1, and W_qkv with its bias b_qkv, which starts at
    zero) come from the same distributions as in the full model, for a small part of the
    cost (GPT-2 small in full is 124M numbers).
    W_o and W_2 do not (their std, 0.02 / sqrt(2L), depends on the depth), but the scores
    never read them. The block's input is token t at position t, for t < T, through the
    first LayerNorm. Returned:
    the std of the entries of q and k, and of the scores q . k over every head and every
    pair of positions, raw and divided by sqrt(d_head); and ``x_var``, the variance of a
    token's input features before the LayerNorm (averaged over the T tokens), which is what
    its ``eps`` is added to. ``eps`` is the first LayerNorm's (0 shows what the variance
    calculation, which ignores it, predicts).

    Shapes: x [T, d] -> q, k [h, T, d_head] -> scores [h, T, T]
    """
    check_positive_int(T, "T")
    one_block = dataclasses.replace(cfg, V=T, ctx=T, L=1)
    params = init_params(one_block, seed)
    x = params["tok_emb"] + params["pos_emb"]                      # [T, d]: token t at t
    x_var = float(x.var(axis=-1).mean())                           # [T, d] -> [T] -> scalar
    x = layer_norm(x, params["blocks.0.ln1_g"], params["blocks.0.ln1_b"], eps=eps)
    qkv = x @ params["blocks.0.W_qkv"] + params["blocks.0.b_qkv"]  # [T, d] @ [d, 3d] -> [T, 3d]
    q, k, _ = np.split(qkv, 3, axis=-1)                            # 3 x [T, d]
    q, k = split_heads(q, cfg.h), split_heads(k, cfg.h)            # [T, d] -> [h, T, d_head]
    raw = q @ np.swapaxes(k, -1, -2)       # [h, T, d_head] @ [h, d_head, T] -> [h, T, T]
    return {"q_std": float(q.std()), "k_std": float(k.std()), "raw": float(raw.std()),
            "scaled": float(raw.std() / math.sqrt(cfg.d_head)), "x_var": x_var}
