"""Chapter 1 exercises: softmax, scaled scores, and attention itself (the challenge)."""

from __future__ import annotations

import math

import numpy as np

from ..attention import attention, scaled_scores, softmax
from ..masks import causal_mask
from . import register
from ._core import Exercise, Wrong, as_array, expect_close, expect_finite, expect_shape, run

# ---- 1.1 softmax ------------------------------------------------------------------------


def _diagnose_softmax(fn) -> None:
    row = np.array([1.0, 2.0, 3.0])
    expect_close(run(fn, row, case="z = [1, 2, 3]"), softmax(row), case="z = [1, 2, 3]")

    batch = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, -1.0]])
    case = "a [2, 3] batch of rows"
    got = expect_shape(run(fn, batch, case=case), batch.shape, case=case)
    sums = got.sum(axis=-1)
    if not np.allclose(sums, 1.0):
        raise Wrong(f"on {case}, the rows sum to {np.round(sums, 3).tolist()} instead of 1: "
                    "divide each row by its own sum (np.sum(..., axis=axis, keepdims=True))")
    expect_close(got, softmax(batch), case=case)

    cols = np.array([[0.0, 3.0], [1.0, 2.0], [2.0, 1.0]])
    case = "a [3, 2] array with axis=0"
    got = expect_shape(run(fn, cols, axis=0, case=case), cols.shape, case=case)
    if not np.allclose(got.sum(axis=0), 1.0):
        raise Wrong(f"on {case}, the columns do not sum to 1: normalise along the `axis` "
                    "argument, not always the last axis")
    expect_close(got, softmax(cols, axis=0), case=case)

    big = np.array([1000.0, 1001.0, 1002.0])
    case = "large logits [1000, 1001, 1002]"
    with np.errstate(all="ignore"):
        got = expect_shape(run(fn, big, case=case), big.shape, case=case)
    expect_finite(got, case=case, hint="exp(1000) overflows to inf; subtract the row maximum "
                  "before exp (the softmax value does not change)")
    expect_close(got, softmax(big), case=case)


def _naive_softmax(z, axis=-1):
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def _global_sum_softmax(z, axis=-1):
    e = np.exp(z - np.max(z))
    return e / e.sum()


def _last_axis_softmax(z, axis=-1):
    e = np.exp(z - np.max(z, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


register(Exercise(
    id="1.1",
    title="A numerically stable softmax",
    reference=softmax,
    diagnose=_diagnose_softmax,
    success="matches the reference on rows, batches, axis=0 and logits of 1000",
    wrong_answers=(
        (_naive_softmax, "subtract the row maximum"),
        (_global_sum_softmax, "the rows sum to"),
        (_last_axis_softmax, "normalise along the `axis`"),
    ),
))

# ---- 1.2 scaled scores ------------------------------------------------------------------

_SWAP = ("on a batch, k.T reverses every axis; transpose only the last two axes of k "
         "(np.swapaxes(k, -1, -2))")


def _diagnose_scores(fn) -> None:
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    case = "q [3, 4] and k [5, 4]"
    got = as_array(run(fn, q, k, case=case), case=case)
    want = scaled_scores(q, k)
    if got.shape == (5, 3):
        raise Wrong(f"on {case}, the result has shape (5, 3); expected (3, 5) = [T_q, T_k]: "
                    "row i must hold query i against every key (q @ k^T, not k @ q^T)")
    got = expect_shape(got, want.shape, case=case)
    if np.allclose(got, want * math.sqrt(4)):
        raise Wrong(f"on {case}, the scores are sqrt(d_k) = 2 times too large: divide the dot "
                    "products by sqrt(d_k)")
    if np.allclose(got, want / math.sqrt(4)):
        raise Wrong(f"on {case}, the scores are 2 times too small: divide by sqrt(d_k), not d_k")
    expect_close(got, want, case=case)

    q, k = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4))
    case = "a batch q [2, 3, 4] and k [2, 5, 4]"
    got = run(fn, q, k, case=case, hint=_SWAP)
    if np.shape(got) != (2, 3, 5):
        raise Wrong(f"on {case}, the result has shape {np.shape(got)}; expected (2, 3, 5): "
                    + _SWAP)
    expect_close(got, scaled_scores(q, k), case=case)


def _unscaled(q, k):
    return q @ np.swapaxes(k, -1, -2)


def _over_d_k(q, k):
    return q @ np.swapaxes(k, -1, -2) / q.shape[-1]


def _plain_transpose(q, k):
    return np.matmul(q, k.T) / np.sqrt(q.shape[-1])


register(Exercise(
    id="1.2",
    title="Scaled dot-product scores",
    reference=scaled_scores,
    diagnose=_diagnose_scores,
    success="q k^T / sqrt(d_k), for one sequence and for a batch",
    wrong_answers=(
        (_unscaled, "2 times too large"),
        (_over_d_k, "not d_k"),
        (_plain_transpose, "transpose only the last two"),
    ),
))

# ---- 1.C challenge: attention -----------------------------------------------------------


def _pair(result, case: str):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Wrong(f"on {case}, expected a pair (out, weights), got a "
                    f"{type(result).__name__}: return both, as `return out, weights`")
    return result


def _diagnose_attention(fn) -> None:
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((4, 4)) for _ in range(3))
    case = "q, k, v [4, 4] without a mask"
    out, weights = _pair(run(fn, q, k, v, case=case), case)
    want_out, want_w = attention(q, k, v)
    expect_close(weights, want_w, case=case, name="weights")
    expect_close(out, want_out, case=case, name="out")

    mask = causal_mask(4)
    case = "a causal mask (True = forbidden)"
    out, weights = _pair(run(fn, q, k, v, mask=mask, case=case), case)
    weights = expect_shape(weights, (4, 4), case=case, name="weights")
    if np.any(weights[mask] != 0):
        i, j = np.argwhere(mask & (weights != 0))[0]
        raise Wrong(f"on {case}, weights[{i}, {j}] is {weights[i, j]:.3g} where the mask is "
                    "True; forbidden positions must get weight exactly 0 (set their scores to "
                    "-inf before the softmax)")
    want_out, want_w = attention(q, k, v, mask=mask)
    expect_close(weights, want_w, case=case, name="weights")
    expect_close(out, want_out, case=case, name="out")

    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    case = "a batch of heads, q, k, v [B, h, T, d_k] = [2, 3, 5, 4]"
    out, weights = _pair(run(fn, q, k, v, case=case, hint=_SWAP), case)
    want_out, want_w = attention(q, k, v)
    if np.shape(weights) != want_w.shape:
        raise Wrong(f"on {case}, weights have shape {np.shape(weights)}; expected "
                    f"{want_w.shape} = [B, h, T, T]: " + _SWAP)
    expect_close(weights, want_w, case=case, name="weights")
    expect_close(out, want_out, case=case, name="out")

    q, k, v = rng.standard_normal((1, 4)), rng.standard_normal((1, 4)), rng.standard_normal((1, 6))
    case = "a single token (T = 1) with d_v = 6"
    out, weights = _pair(run(fn, q, k, v, case=case), case)
    expect_close(out, v, case=case, name="out", hint="with one key, its weight is 1 and the "
                 "output is that key's value row")


def _no_mask(q, k, v, mask=None):
    return attention(q, k, v)


def _out_only(q, k, v, mask=None):
    return attention(q, k, v, mask)[0]


def _transpose_all(q, k, v, mask=None):
    scores = q @ k.T / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    weights = softmax(scores)
    return weights @ v, weights


register(Exercise(
    id="1.C",
    title="Challenge: attention with masks and any leading axes",
    reference=attention,
    diagnose=_diagnose_attention,
    success="out and weights agree with the reference with and without a mask, for "
            "[B, h, T, d_k] inputs, and for T = 1",
    wrong_answers=(
        (_no_mask, "must get weight exactly 0"),
        (_out_only, "expected a pair (out, weights)"),
        (_transpose_all, "transpose only the last two axes"),
    ),
))
