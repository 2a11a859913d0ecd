"""Chapter 2 exercises: measure the spread of q . k, weights with a temperature, and the
softmax Jacobian (the challenge)."""

from __future__ import annotations

import math

import numpy as np

from ..attention import attention_weights, score_std, softmax, softmax_jacobian
from . import register
from ._core import Exercise, Wrong, as_array, expect_close, expect_finite, expect_shape, run

# ---- 2.1 the spread of q . k -------------------------------------------------------------

_STD_WIDTHS = (1, 16, 256)
_STD_TOLERANCE = 0.10          # relative; 10,000 pairs estimate the std within about 2 %


def _one_number(got, case: str) -> float:
    arr = as_array(got, case=case)
    if arr.size != 1:
        raise Wrong(f"on {case}, the result has shape {arr.shape}; return one number, the "
                    "standard deviation over all the pairs (e.g. float(dots.std()))")
    value = float(arr.reshape(()))
    if not math.isfinite(value):
        raise Wrong(f"on {case}, the result is {value}; expected a finite standard deviation")
    return value


def _diagnose_score_std(fn, rng) -> None:
    for d_k in _STD_WIDTHS:
        case = f"d_k = {d_k}"
        got = _one_number(run(fn, d_k, case=case), case)
        want = math.sqrt(d_k)
        if abs(got / want - 1) <= _STD_TOLERANCE:
            continue
        if d_k > 1 and abs(got / d_k - 1) <= _STD_TOLERANCE:
            raise Wrong(f"on {case}, you returned {got:.3g}, which is the variance d_k; the "
                        f"standard deviation is its square root, about {want:.3g}")
        if d_k > 1 and abs(got - 1) <= _STD_TOLERANCE:
            raise Wrong(f"on {case}, you returned {got:.3g}, about 1: that is the spread of "
                        "single entries or of scaled scores; measure raw dot products q . k "
                        "(sum over the d_k products, no division by sqrt(d_k))")
        if d_k > 1 and abs(got / math.sqrt(d_k / 2) - 1) <= _STD_TOLERANCE:
            raise Wrong(f"on {case}, you returned {got:.3g}, about sqrt(d_k / 2): draw the "
                        "entries from a standard normal (variance 1), e.g. "
                        "rng.standard_normal, not a uniform or a half-width normal")
        raise Wrong(f"on {case}, you returned {got:.3g}; expected about sqrt(d_k) = "
                    f"{want:.3g} (within {_STD_TOLERANCE:.0%}). Draw q and k with N(0, 1) "
                    "entries, take the dot product of each pair, and use at least 10,000 "
                    "pairs so the estimate is not noisy")


def _variance(d_k):
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((10_000, d_k)), rng.standard_normal((10_000, d_k))
    return float(np.einsum("nd,nd->n", q, k).var())


def _scaled_std(d_k):
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((10_000, d_k)), rng.standard_normal((10_000, d_k))
    return float((np.einsum("nd,nd->n", q, k) / np.sqrt(d_k)).std())


def _per_pair_std(d_k):
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((10_000, d_k)), rng.standard_normal((10_000, d_k))
    return (q * k).std(axis=0)            # one std per coordinate, not of the dot products


register(Exercise(
    id="2.1",
    title="Measure the spread of q . k",
    kind="measure",
    reference=score_std,
    diagnose=_diagnose_score_std,
    success=f"the measured std is within {_STD_TOLERANCE:.0%} of sqrt(d_k) for d_k = "
            + ", ".join(map(str, _STD_WIDTHS)),
    wrong_answers=(
        (_variance, "which is the variance d_k"),
        (_scaled_std, "measure raw dot products"),
        (_per_pair_std, "return one number"),
    ),
))

# ---- 2.2 weights with a temperature -------------------------------------------------------

_SWAP = ("on a batch, k.T reverses every axis; transpose only the last two axes of k "
         "(np.swapaxes(k, -1, -2))")


def _diagnose_weights(fn, rng) -> None:
    rng = np.random.default_rng(20)
    q, k = rng.standard_normal((3, 8)), rng.standard_normal((5, 8))
    case = "q [3, 8], k [5, 8], temperature 1"
    got = expect_shape(run(fn, q, k, temperature=1.0, case=case), (3, 5), case=case)
    want = attention_weights(q, k)
    if np.allclose(got, attention_weights(q, k, scaled=False)):
        raise Wrong(f"on {case}, the weights are those of the raw scores q k^T, too peaked: "
                    "divide the scores by sqrt(d_k) = sqrt(8) before the softmax")
    if np.allclose(got.sum(axis=0), 1.0) and not np.allclose(got.sum(axis=-1), 1.0):
        raise Wrong(f"on {case}, the columns sum to 1 instead of the rows: the softmax runs "
                    "over the keys, the last axis (axis=-1)")
    expect_close(got, want, case=case)

    case = "the same q, k with temperature 2"
    got = expect_shape(run(fn, q, k, temperature=2.0, case=case), (3, 5), case=case)
    want = attention_weights(q, k, temperature=2.0)
    if np.allclose(got, attention_weights(q, k, temperature=0.5)):
        raise Wrong(f"on {case}, the weights got sharper; a temperature above 1 must flatten "
                    "them: divide the scaled scores by the temperature, do not multiply")
    if np.allclose(got, attention_weights(q, k)):
        raise Wrong(f"on {case}, the weights are those of temperature 1: the temperature "
                    "argument is ignored; divide the scaled scores by it")
    expect_close(got, want, case=case)

    q, k = 10 * rng.standard_normal((2, 3, 4, 8)), 10 * rng.standard_normal((2, 3, 6, 8))
    case = "a batch q [2, 3, 4, 8], k [2, 3, 6, 8] with temperature 0.05 (scores in the 1000s)"
    with np.errstate(all="ignore"):
        got = run(fn, q, k, temperature=0.05, case=case, hint=_SWAP)
    want = attention_weights(q, k, temperature=0.05)
    if np.shape(got) != want.shape:
        raise Wrong(f"on {case}, the weights have shape {np.shape(got)}; expected "
                    f"{want.shape} = [B, h, T_q, T_k]: " + _SWAP)
    got = as_array(got, case=case)
    expect_finite(got, case=case, hint="exp of scores in the thousands overflows; use a stable "
                  "softmax (subtract each row's maximum first)")
    expect_close(got, want, case=case)


def _no_sqrt(q, k, temperature=1.0):
    return softmax(q @ np.swapaxes(k, -1, -2) / temperature)


def _times_temperature(q, k, temperature=1.0):
    return softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]) * temperature)


def _naive_exp(q, k, temperature=1.0):
    e = np.exp(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]) / temperature)
    return e / e.sum(axis=-1, keepdims=True)


register(Exercise(
    id="2.2",
    title="Attention weights with a temperature",
    kind="implement",
    reference=attention_weights,
    diagnose=_diagnose_weights,
    success="softmax(q k^T / (sqrt(d_k) tau)) at temperatures 1, 2 and 0.05, on a batch",
    wrong_answers=(
        (_no_sqrt, "divide the scores by sqrt(d_k)"),
        (_times_temperature, "do not multiply"),
        (_naive_exp, "subtract each row's maximum"),
    ),
))

# ---- 2.C challenge: the softmax Jacobian --------------------------------------------------

_PER_ROW = ("build the outer product p_i p_j row by row, p[..., :, None] * p[..., None, :] "
            "(np.outer flattens a batch)")


def _diagnose_jacobian(fn, rng) -> None:
    z = np.array([1.0, 2.0, 0.5])
    case = "z = [1, 2, 0.5]"
    got = expect_shape(run(fn, z, case=case), (3, 3), case=case)
    want = softmax_jacobian(z)
    off = ~np.eye(3, dtype=bool)
    if np.allclose(got[off], 0.0) and not np.allclose(want[off], 0.0):
        raise Wrong(f"on {case}, every off-diagonal entry is 0, but raising z_j also lowers "
                    "every other weight: J[i, j] = -p_i p_j for i != j, and the diagonal is "
                    "p_i (1 - p_i) (J = diag(p) - p p^T)")
    if np.allclose(got, -want):
        raise Wrong(f"on {case}, every entry has the wrong sign: J = diag(p) - p p^T, "
                    "so the diagonal p_i (1 - p_i) is positive")
    expect_close(got, want, case=case, atol=1e-8)

    z = np.array([[0.0, 1.0, -1.0, 2.0], [3.0, 3.0, 0.0, -2.0]])
    case = "a batch z [2, 4]"
    got = run(fn, z, case=case, hint=_PER_ROW)
    if np.shape(got) != (2, 4, 4):
        raise Wrong(f"on {case}, the result has shape {np.shape(got)}; expected (2, 4, 4) = "
                    "[B, n, n], one Jacobian per row: " + _PER_ROW)
    expect_close(got, softmax_jacobian(z), case=case, atol=1e-8)

    z = np.array([1000.0, 0.0, -1000.0])
    case = "large scores z = [1000, 0, -1000] (a saturated softmax)"
    with np.errstate(all="ignore"):
        got = expect_shape(run(fn, z, case=case), (3, 3), case=case)
    expect_finite(got, case=case, hint="exp(1000) overflows; compute p with a stable softmax")
    expect_close(got, softmax_jacobian(z), case=case, atol=1e-8,
                 hint="a saturated softmax has a Jacobian of almost exactly 0")

    case = "a single score z = [3] (n = 1)"
    got = expect_shape(run(fn, np.array([3.0]), case=case), (1, 1), case=case)
    expect_close(got, [[0.0]], case=case, hint="with one key the weight is always 1, so it "
                 "cannot move")


def _diag_only(z):
    p = softmax(z)
    return p[..., :, None] * np.eye(p.shape[-1]) * (1 - p[..., :, None])


def _np_outer(z):
    p = softmax(z)
    return np.diag(p.ravel()) - np.outer(p, p)


def _naive_jacobian(z):
    e = np.exp(z)
    p = e / e.sum(axis=-1, keepdims=True)
    return p[..., :, None] * np.eye(p.shape[-1]) - p[..., :, None] * p[..., None, :]


register(Exercise(
    id="2.C",
    title="Challenge: the softmax Jacobian",
    kind="implement",
    reference=softmax_jacobian,
    diagnose=_diagnose_jacobian,
    success="diag(p) - p p^T on a row, a batch, saturated scores and n = 1",
    wrong_answers=(
        (_diag_only, "J[i, j] = -p_i p_j"),
        (_np_outer, "one Jacobian per row"),
        (_naive_jacobian, "stable softmax"),
    ),
))
