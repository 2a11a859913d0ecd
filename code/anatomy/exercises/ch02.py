"""Chapter 2 exercises: measure the spread of q . k (measure), attention weights with a
temperature (implement), how the spread grows with the head width (predict), a multi-head
scale taken from the wrong width (debug), and the softmax Jacobian (the challenge)."""

from __future__ import annotations

import math

import numpy as np

from ..attention import softmax
from ..scaling import attention_weights, multi_head_weights, score_std, softmax_jacobian
from . import register
from ._core import (
    Exercise,
    Wrong,
    as_array,
    expect_close,
    expect_finite,
    expect_number,
    other_convention,
    random_leading,
    run,
)


def _close(a, b, rtol: float = 1e-4, atol: float = 1e-6) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


# ---- 2.1 the spread of q . k (measure) ---------------------------------------------------

_SMALL_N = 32          # pairs per estimate in the sampling test: noisy on purpose
_N_SEEDS = 800         # fresh seeds in the sampling test
# The spread of the reader's estimates over 800 seeds, relative to the reference's: 1 up to
# sampling noise of about 3.5 % (both estimates together), so 0.8 and 1.25 are over five
# standard errors away, while n/2 pairs (sqrt 2 = 1.41 times the spread) fall outside.
_SPREAD_RANGE = (0.8, 1.25)


def _relative_noise(d_k: int, n: int) -> float:
    """Relative standard error of the std of n dot products at width d_k.

    The std of n samples with kurtosis kappa has relative error about sqrt((kappa - 1) / 4n);
    q . k is a sum of d_k products of two normals, with kurtosis 3 + 6 / d_k.
    """
    return math.sqrt((2 + 6 / d_k) / (4 * n))


def _estimator_spread(d_k: int, n: int, rng: np.random.Generator, reps: int = 1500) -> float:
    """How much the reference's estimate from n pairs varies from seed to seed (its std)."""
    q = rng.standard_normal((reps, n, d_k))                       # [reps, n, d_k]
    k = rng.standard_normal((reps, n, d_k))                       # [reps, n, d_k]
    dots = np.einsum("rnd,rnd->rn", q, k)                         # -> [reps, n]
    return float(dots.std(axis=1).std(ddof=1))


def _estimate(fn, d_k: int, n: int, seed: int) -> float:
    case = f"d_k = {d_k}, n = {n}, seed = {seed}"
    got = as_array(run(fn, d_k, n=n, seed=seed, case=case), case=case)
    if got.size != 1:
        raise Wrong(f"on {case}, the result has shape {got.shape}; return one number, the "
                    "standard deviation over all the pairs")
    return expect_number(got, case=case)


def _check_accuracy(fn, rng) -> None:
    """Large n, fresh seeds: the estimate must agree with sqrt(d_k) within its noise."""
    # d_k = 1 last: there the variance and the std are both about 1
    for d_k in (16, 256, int(rng.integers(2, 129)), 1):
        n, seed = int(rng.integers(10_000, 16_001)), int(rng.integers(2**31))
        case = f"d_k = {d_k}, n = {n}, seed = {seed}"
        got, want = _estimate(fn, d_k, n, seed), math.sqrt(d_k)
        tol = 5 * _relative_noise(d_k, n)
        if abs(got / want - 1) <= tol:
            continue
        if d_k > 1 and abs(got / d_k - 1) <= tol:
            raise Wrong(f"on {case}, you returned {got:.4g}, which is the variance d_k; the "
                        f"standard deviation is its square root, about {want:.4g}")
        if d_k > 1 and abs(got - 1) <= tol:
            raise Wrong(f"on {case}, you returned {got:.4g}, about 1: that is the spread of "
                        "single entries or of scaled scores; measure raw dot products q . k "
                        "(the sum of the d_k products, with no division by sqrt(d_k))")
        if d_k > 1 and abs(got / math.sqrt(d_k / 2) - 1) <= tol:
            raise Wrong(f"on {case}, you returned {got:.4g}, about sqrt(d_k / 2): draw the "
                        "entries from a standard normal (variance 1), not from a uniform")
        raise Wrong(f"on {case}, you returned {got:.4g}; a std measured from {n} pairs "
                    f"should be within {tol:.1%} of sqrt(d_k) = {want:.4g}. Draw n pairs "
                    "q, k with N(0, 1) entries, take each pair's dot product, and return "
                    "the std of those n numbers")


def _check_sampling(fn, rng) -> None:
    """Small n, many fresh seeds: the estimates must really be drawn, seed by seed."""
    for d_k in (1, int(rng.integers(8, 65))):
        seeds = [int(s) for s in np.unique(rng.integers(2**31, size=_N_SEEDS + 10))]
        seeds = seeds[:_N_SEEDS]
        case = f"d_k = {d_k}, n = {_SMALL_N} and {len(seeds)} fresh seeds"
        ests = np.array([_estimate(fn, d_k, _SMALL_N, s) for s in seeds])
        if np.ptp(ests) == 0:
            value = float(ests[0])
            if math.isclose(value, math.sqrt(d_k), rel_tol=1e-9):
                raise Wrong(f"on {case}, your function returns the same number for every "
                            f"seed, {value:.4g} = sqrt({d_k}): it computes the answer "
                            "instead of measuring it. Draw n pairs from "
                            "np.random.default_rng(seed) and return the std of their dot "
                            "products")
            raise Wrong(f"on {case}, your function returns the same number for every seed "
                        f"({value:.4g}): draw the samples from np.random.default_rng(seed), "
                        "so that each seed gives its own estimate")
        again = _estimate(fn, d_k, _SMALL_N, seeds[0])
        if not math.isclose(again, float(ests[0]), rel_tol=1e-9, abs_tol=1e-12):
            raise Wrong(f"on d_k = {d_k}, n = {_SMALL_N}, two calls with seed = {seeds[0]} "
                        f"gave {ests[0]:.4g} and {again:.4g}: a measurement must be "
                        "repeatable; draw from np.random.default_rng(seed), not from "
                        "np.random.* or a generator made without the seed")
        spread, expected = float(ests.std(ddof=1)), _estimator_spread(d_k, _SMALL_N, rng)
        low, high = _SPREAD_RANGE
        if spread < low * expected:
            raise Wrong(f"on {case}, your estimates vary from seed to seed by {spread:.3g} "
                        f"(std), but estimates from {_SMALL_N} random pairs vary by about "
                        f"{expected:.3g}: they vary too little, as if they came from more "
                        "pairs than n, or were not measured at all. Does your function use "
                        "its argument n?")
        if spread > high * expected:
            raise Wrong(f"on {case}, your estimates vary from seed to seed by {spread:.3g} "
                        f"(std), but estimates from {_SMALL_N} independent pairs vary by "
                        f"about {expected:.3g}: they vary too much, as if fewer than n pairs "
                        "were drawn, or the pairs shared a vector")


def _diagnose_score_std(fn, rng) -> None:
    _check_accuracy(fn, rng)
    _check_sampling(fn, rng)


def _std_battery(rng):
    return [((d_k,), {"n": n, "seed": int(rng.integers(2**31))})
            for d_k, n in ((1, 4000), (16, 4000), (256, 1000), (7, _SMALL_N))]


def _variance(d_k, n=10_000, seed=0):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((n, d_k)), rng.standard_normal((n, d_k))
    return float(np.einsum("nd,nd->n", q, k).var())


def _scaled_std(d_k, n=10_000, seed=0):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((n, d_k)), rng.standard_normal((n, d_k))
    return float((np.einsum("nd,nd->n", q, k) / np.sqrt(d_k)).std())


def _per_coordinate_std(d_k, n=10_000, seed=0):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((n, d_k)), rng.standard_normal((n, d_k))
    return (q * k).std(axis=0)            # one std per coordinate, not of the dot products


def _ignores_n(d_k, n=10_000, seed=0):
    return score_std(d_k, n=10_000, seed=seed)


def _ignores_seed(d_k, n=10_000, seed=0):
    return score_std(d_k, n=n, seed=0)


def _unseeded(d_k, n=10_000, seed=0):
    rng = np.random.default_rng()
    q, k = rng.standard_normal((n, d_k)), rng.standard_normal((n, d_k))
    return float(np.einsum("nd,nd->n", q, k).std())


def _gaussian_forgery(d_k, n=10_000, seed=0):
    # sqrt(d_k) plus noise of the size a normal sample would have: too little at d_k = 1,
    # where q . k is the product of two normals and has heavy tails
    noise = np.random.default_rng(seed).standard_normal() * math.sqrt(1 / (2 * n))
    return math.sqrt(d_k) * (1 + noise)


register(Exercise(
    id="2.1",
    title="Measure the spread of q . k",
    kind="measure",
    reference=score_std,
    diagnose=_diagnose_score_std,
    battery=_std_battery,
    success="within its sampling noise of sqrt(d_k) for d_k = 1, 16, 256 and a fresh width, "
            "and a real sample: reproducible per seed, varying across fresh seeds as much "
            "as n pairs should",
    wrong_answers=(
        (lambda d_k, n=10000, seed=0: d_k ** 0.5, "the same number for every seed"),
        (_variance, "which is the variance d_k"),
        (_scaled_std, "measure raw dot products"),
        (_per_coordinate_std, "return one number"),
        (_ignores_n, "use its argument n"),
        (_ignores_seed, "the same number for every seed"),
        (_unseeded, "must be repeatable"),
        (_gaussian_forgery, "vary too little"),
    ),
))

# ---- 2.2 weights with a temperature (implement) -------------------------------------------

_SWAP = ("on a batch, k.T reverses every axis; transpose only the last two axes of k "
         "(np.swapaxes(k, -1, -2))")
_STABLE = ("exp of scores in the thousands overflows; use a stable softmax (subtract each "
           "row's maximum first)")


def _weight_cases(rng) -> list[tuple[str, np.ndarray, np.ndarray, dict]]:
    q, k = rng.standard_normal((3, 8)), rng.standard_normal((5, 8))
    cases = [
        ("q [3, 8], k [5, 8] at the default temperature", q, k, {}),
        ("the same q, k with temperature 2", q, k, {"temperature": 2.0}),
        ("the same q, k with temperature 0.5", q, k, {"temperature": 0.5}),
        ("a batch of heads q [2, 3, 4, 8], k [2, 3, 6, 8], temperature 0.05 (scores in "
         "the thousands)", 10 * rng.standard_normal((2, 3, 4, 8)),
         10 * rng.standard_normal((2, 3, 6, 8)), {"temperature": 0.05}),
        ("q [2, 1, 3, 4] and k [1, 3, 5, 4], whose leading axes broadcast, temperature 1.5",
         rng.standard_normal((2, 1, 3, 4)), rng.standard_normal((1, 3, 5, 4)),
         {"temperature": 1.5}),
        ("one query and one key, q [1, 4], k [1, 4], temperature 3",
         rng.standard_normal((1, 4)), rng.standard_normal((1, 4)), {"temperature": 3.0}),
    ]
    for dtype in (np.float64, np.float32):
        lead = random_leading(rng)
        T_q, T_k = (int(n) for n in rng.integers(1, 8, size=2))
        d_k = int(rng.integers(2, 33))
        tau = float(np.exp(rng.uniform(math.log(0.1), math.log(10))))
        scale = float(rng.uniform(0.5, 3))
        q_shape, k_shape = (*lead, T_q, d_k), (*lead, T_k, d_k)
        cases.append((f"fresh random q {list(q_shape)}, k {list(k_shape)} "
                      f"({np.dtype(dtype).name}), temperature {tau:.3g}",
                      (scale * rng.standard_normal(q_shape)).astype(dtype),
                      (scale * rng.standard_normal(k_shape)).astype(dtype),
                      {"temperature": tau}))
    return cases


def _diagnose_weights(fn, rng) -> None:
    for case, q, k, kwargs in _weight_cases(rng):
        want = attention_weights(q, k, **kwargs)
        hint = _SWAP if q.ndim > 2 else ""
        got = as_array(run(fn, q, k, case=case, hint=hint, **kwargs), case=case)
        if got.shape != want.shape:
            raise Wrong(f"on {case}, the weights have shape {got.shape}; expected "
                        f"{want.shape} = [..., T_q, T_k]" + (f": {_SWAP}" if hint else ""))
        expect_finite(got, case=case, hint=_STABLE)
        if _close(got, want):
            continue
        tau, d_k = kwargs.get("temperature", 1.0), q.shape[-1]
        raw = q.astype(float) @ np.swapaxes(k.astype(float), -1, -2)   # [..., T_q, T_k]
        root = math.sqrt(d_k)
        if _close(got, softmax(raw / (d_k * tau))) and not _close(want, softmax(
                raw / (d_k * tau))):
            raise other_convention(
                f"on {case}, you divided the scores by d_k = {d_k}, the scale muP uses for "
                "heads whose q and k have lined up in training", "the standard "
                f"softmax(q k^T / (sqrt(d_k) tau)), with sqrt(d_k) = {root:.3g}")
        for alt, why in (
                (softmax(raw / tau), "the weights are those of the raw scores q k^T: "
                 f"divide them by sqrt(d_k) = {root:.3g} before the softmax"),
                (softmax(raw / root * tau), "the temperature multiplies the scores; it "
                 "must divide them (a higher temperature gives flatter weights), so do "
                 "not multiply"),
                (softmax(raw / root), "the weights are those of temperature 1: the "
                 "temperature argument is ignored; divide the scaled scores by it"),
                (softmax(raw / (root * tau), axis=-2), "the columns sum to 1 instead of "
                 "the rows: the softmax runs over the keys, the last axis (axis=-1)")):
            if _close(got, alt) and not _close(want, alt):
                raise Wrong(f"on {case}, {why}")
        expect_close(got, want, case=case, rtol=1e-4, atol=1e-6)


def _weight_battery(rng):
    return [((q, k), kwargs) for _, q, k, kwargs in _weight_cases(rng)]


def _no_sqrt(q, k, temperature=1.0):
    return softmax(q @ np.swapaxes(k, -1, -2) / temperature)


def _over_d_k(q, k, temperature=1.0):
    return softmax(q @ np.swapaxes(k, -1, -2) / (q.shape[-1] * temperature))


def _times_temperature(q, k, temperature=1.0):
    return softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]) * temperature)


def _naive_exp(q, k, temperature=1.0):
    e = np.exp(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]) / temperature)
    return e / e.sum(axis=-1, keepdims=True)


def _over_queries(q, k, temperature=1.0):
    return softmax(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]) / temperature, axis=-2)


def _transpose_all(q, k, temperature=1.0):
    return softmax(q @ k.T / np.sqrt(q.shape[-1]) / temperature)


register(Exercise(
    id="2.2",
    title="Attention weights with a temperature",
    kind="implement",
    reference=attention_weights,
    diagnose=_diagnose_weights,
    battery=_weight_battery,
    rtol=1e-4,
    atol=1e-6,
    success="softmax(q k^T / (sqrt(d_k) tau)) at the default and other temperatures, on "
            "batches, broadcast leading axes, scores in the thousands, float32 and fresh "
            "random shapes",
    wrong_answers=(
        (_no_sqrt, "divide them by sqrt(d_k)"),
        (_over_d_k, "a different convention"),
        (_times_temperature, "do not multiply"),
        (_naive_exp, "subtract each row's maximum"),
        (_over_queries, "the softmax runs over the keys"),
        (_transpose_all, "transpose only the last two axes"),
    ),
))

# ---- 2.3 how the spread grows with the width (predict) ------------------------------------


def _diagnose_factors(answer, rng) -> None:
    ask = ("answer with three numbers: the factor for q . k, for q . k / sqrt(d_k) and for "
           "q . k / d_k, e.g. (3, 1.5, 0.75)")
    try:
        values = [float(v) for v in answer]
    except (TypeError, ValueError):
        raise Wrong(ask) from None
    if len(values) != 3 or not all(math.isfinite(v) for v in values):
        raise Wrong(ask)
    raw, root, linear = values

    def near(value: float, target: float) -> bool:
        return abs(value - target) <= 0.02 * target

    if not near(raw, 2.0):
        if near(raw, 4.0):
            raise Wrong("the raw factor: 4 is how much the variance of q . k grows "
                        "(256 / 64); the std is the square root of the variance")
        raise Wrong(f"the raw factor is not {raw:g}: with unit-variance entries, q . k "
                    "has variance d_k, so its std is sqrt(d_k); compare sqrt(256) with "
                    "sqrt(64)")
    if not near(root, 1.0):
        raise Wrong(f"the factor for q . k / sqrt(d_k) is not {root:g}: dividing by "
                    "sqrt(d_k) cancels the sqrt(d_k) growth, which is what it is for; the "
                    "scaled spread is 1 at every width")
    if not near(linear, 0.5):
        if near(linear, 0.25):
            raise Wrong("the factor for q . k / d_k: 1/4 is how much its variance "
                        "changes; the std is the square root")
        raise Wrong(f"the factor for q . k / d_k is not {linear:g}: its std is "
                    "sqrt(d_k) / d_k = 1 / sqrt(d_k), which falls as the head widens")


register(Exercise(
    id="2.3",
    title="How the spread grows from d_k = 64 to 256",
    kind="predict",
    reference=(2.0, 1.0, 0.5),
    diagnose=_diagnose_factors,
    success="(2, 1, 1/2): the raw spread doubles, the sqrt(d_k) scale holds it at 1, and "
            "1/d_k halves it",
    explain="(2, 1, 0.5). With unit-variance entries the std of q . k is sqrt(d_k): "
            "sqrt(256) / sqrt(64) = 2, because the width grew 4-fold and the std grows "
            "with its square root. Dividing by sqrt(d_k) leaves a std of 1 at both widths. "
            "Dividing by d_k leaves sqrt(d_k) / d_k = 1 / sqrt(d_k): 1/8 at 64 and 1/16 at "
            "256, half as wide.",
    wrong_answers=(
        ((4, 1, 0.25), "variance"),
        ((2, 2, 1), "cancels the sqrt(d_k) growth"),
        ((2, 1, 1), "falls as the head widens"),
        ((2, 1, 0.25), "variance"),
        ((2, 1), "answer with three numbers"),
        ("2", "answer with three numbers"),
    ),
))

# ---- 2.4 a multi-head scale from the wrong width (debug) ---------------------------------


def _given_head_weights(x, W_q, W_k, h):
    """Per-head weights: x [..., T, d], W_q, W_k [d, d] -> [..., h, T, T]."""
    *lead, T, d = x.shape
    d_head = d // h
    # [..., T, d] @ [d, d] -> [..., T, d] -> [..., T, h, d_head]
    q = (x @ W_q).reshape(*lead, T, h, d_head)
    k = (x @ W_k).reshape(*lead, T, h, d_head)
    q, k = np.swapaxes(q, -3, -2), np.swapaxes(k, -3, -2)  # [..., h, T, d_head]
    # [..., h, T, d_head] @ [..., h, d_head, T] -> [..., h, T, T]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)
    return softmax(scores, axis=-1)


def _fixed_head_weights(x, W_q, W_k, h):
    """The function as given with its one bug repaired, in the chapter's own NumPy: the
    fixed side of the solution's diff. Shapes: x [..., T, d] -> [..., h, T, T]."""
    *lead, T, d = x.shape
    d_head = d // h
    # [..., T, d] @ [d, d] -> [..., T, d] -> [..., T, h, d_head]
    q = (x @ W_q).reshape(*lead, T, h, d_head)
    k = (x @ W_k).reshape(*lead, T, h, d_head)
    q, k = np.swapaxes(q, -3, -2), np.swapaxes(k, -3, -2)  # [..., h, T, d_head]
    # [..., h, T, d_head] @ [..., h, d_head, T] -> [..., h, T, T]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_head)
    return softmax(scores, axis=-1)


def _raw_head_scores(x, W_q, W_k, h, mixed: bool = False) -> np.ndarray:
    """Unscaled per-head scores; ``mixed`` cuts heads with a plain reshape (the mistake)."""
    x, W_q, W_k = (np.asarray(a, dtype=float) for a in (x, W_q, W_k))
    *lead, T, d = x.shape
    q, k = x @ W_q, x @ W_k                                # [..., T, d] each
    if mixed:
        q = q.reshape(*lead, h, T, d // h)                 # heads of mixed tokens
        k = k.reshape(*lead, h, T, d // h)
    else:
        q = np.swapaxes(q.reshape(*lead, T, h, d // h), -3, -2)    # [..., h, T, d_head]
        k = np.swapaxes(k.reshape(*lead, T, h, d // h), -3, -2)
    return q @ np.swapaxes(k, -1, -2)                      # [..., h, T, T]


def _head_cases(rng) -> list[tuple[str, tuple]]:
    def draw(shape: tuple[int, ...], h: int, dtype=np.float64) -> tuple:
        d = shape[-1]
        # W with N(0, 1/d) entries gives q and k entries of variance about 1
        W_q, W_k = (rng.standard_normal((d, d)) / math.sqrt(d) for _ in range(2))
        return (rng.standard_normal(shape).astype(dtype), W_q.astype(dtype),
                W_k.astype(dtype), h)

    cases = [("x [4, 8] with h = 2 heads of width 4", draw((4, 8), 2)),
             ("a batch x [2, 5, 12] with h = 3 heads of width 4", draw((2, 5, 12), 3)),
             ("x [6, 96] with h = 12 heads of width 8", draw((6, 96), 12)),
             ("x [3, 6] with one head, h = 1", draw((3, 6), 1))]
    lead = random_leading(rng)
    T, h, d_head = int(rng.integers(2, 7)), int(rng.integers(2, 5)), int(rng.integers(2, 7))
    shape = (*lead, T, h * d_head)
    cases.append((f"fresh random x {list(shape)} (float32) with h = {h} heads of width "
                  f"{d_head}", draw(shape, h, np.float32)))
    return cases


def _diagnose_heads(fn, rng) -> None:
    for case, (x, W_q, W_k, h) in _head_cases(rng):
        want = multi_head_weights(x, W_q, W_k, h)
        got = as_array(run(fn, x, W_q, W_k, h, case=case), case=case)
        if got.shape != want.shape:
            raise Wrong(f"on {case}, the weights have shape {got.shape}; expected "
                        f"{want.shape} = [..., h, T, T]")
        expect_finite(got, case=case)
        if _close(got, want):
            continue
        d = x.shape[-1]
        d_head = d // h
        raw = _raw_head_scores(x, W_q, W_k, h)                         # [..., h, T, T]
        if _close(got, softmax(raw / d_head)) and not _close(want, softmax(raw / d_head)):
            raise other_convention(
                f"on {case}, you divided each head's scores by d_head = {d_head}, the scale "
                "of muP, meant for trained heads whose q and k have lined up",
                f"the standard 1/sqrt(d_head) = 1/sqrt({d_head})")
        for alt, why in (
                (softmax(raw / math.sqrt(d)), f"the scores are divided by sqrt(d) = "
                 f"sqrt({d}), the model's width; a head's score is a sum of only d_head = "
                 f"d / h = {d_head} products, so it spreads like sqrt(d_head): divide by "
                 f"sqrt({d_head})"),
                (softmax(raw / d), f"the scores are divided by d = {d}: that is the model's "
                 "width, not the head's, and with no square root"),
                (softmax(raw), "the scores are not scaled at all: divide each head's scores "
                 "by the square root of its width"),
                (softmax(raw / math.sqrt(d_head), axis=-2), "each column of weights sums "
                 "to 1 instead of each row: the softmax runs over the keys, the last axis"),
                (softmax(_raw_head_scores(x, W_q, W_k, h, mixed=True) / math.sqrt(d_head)),
                 "the heads hold pieces of different tokens: a plain reshape to "
                 "[..., h, T, d_head] takes consecutive numbers of the array; reshape to "
                 "[..., T, h, d_head] and then swap the head axis forward")):
            if _close(got, alt) and not _close(want, alt):
                raise Wrong(f"on {case}, {why}")
        expect_close(got, want, case=case, rtol=1e-4, atol=1e-6)


def _head_battery(rng):
    return [(args, {}) for _, args in _head_cases(rng)]


def _heads_over_d_head(x, W_q, W_k, h):
    return softmax(_raw_head_scores(x, W_q, W_k, h) / (x.shape[-1] // h))


def _heads_over_d(x, W_q, W_k, h):
    return softmax(_raw_head_scores(x, W_q, W_k, h) / x.shape[-1])


def _heads_mixed(x, W_q, W_k, h):
    d_head = x.shape[-1] // h
    return softmax(_raw_head_scores(x, W_q, W_k, h, mixed=True) / np.sqrt(d_head))


def _heads_over_queries(x, W_q, W_k, h):
    d_head = x.shape[-1] // h
    return softmax(_raw_head_scores(x, W_q, W_k, h) / np.sqrt(d_head), axis=-2)


register(Exercise(
    id="2.4",
    title="A multi-head scale from the wrong width",
    kind="debug",
    reference=multi_head_weights,
    given=_given_head_weights,
    fix=_fixed_head_weights,
    diagnose=_diagnose_heads,
    battery=_head_battery,
    rtol=1e-4,
    atol=1e-6,
    success="the library's weights on one sequence, a batch, 12 heads of width 8, one "
            "head and fresh random shapes in float32",
    explain="The bug is np.sqrt(d): d is the model's width, but each head compares only "
            "its own d_head = d / h features, so its scores spread like sqrt(d_head). With "
            "sqrt(d) every head's scores come out sqrt(h) times too small, as if at a "
            "temperature of sqrt(h), so its weights are too flat; GPT-2 small would divide "
            "by sqrt(768) = 27.7 instead of 8.",
    wrong_answers=(
        (_heads_over_d_head, "a different convention"),
        (_heads_over_d, "and with no square root"),
        (_heads_mixed, "pieces of different tokens"),
        (_heads_over_queries, "the softmax runs over the keys"),
    ),
))

# ---- 2.C challenge: the softmax Jacobian --------------------------------------------------

_PER_ROW = ("build the outer product p_i p_j row by row, p[..., :, None] * p[..., None, :] "
            "(np.outer flattens a batch)")


def _jacobian_cases(rng) -> list[tuple[str, np.ndarray]]:
    cases = [
        ("z = [1, 2, 0.5]", np.array([1.0, 2.0, 0.5])),
        ("a batch z [2, 4]", np.array([[0.0, 1.0, -1.0, 2.0], [3.0, 3.0, 0.0, -2.0]])),
        ("large scores z = [1000, 0, -1000] (a saturated softmax)",
         np.array([1000.0, 0.0, -1000.0])),
        ("a single score z = [3] (n = 1)", np.array([3.0])),
        ("a batch of heads z [2, 3, 5]", 2 * rng.standard_normal((2, 3, 5))),
    ]
    for dtype in (np.float64, np.float32):
        shape = (*random_leading(rng), int(rng.integers(1, 8)))
        scale = 10.0 ** rng.uniform(-1, 1.5)
        z = rng.standard_normal(shape) * scale + rng.uniform(-50, 50)
        cases.append((f"fresh random scores z {list(shape)} ({np.dtype(dtype).name})",
                      z.astype(dtype)))
    return cases


def _diagnose_jacobian(fn, rng) -> None:
    for case, z in _jacobian_cases(rng):
        want = softmax_jacobian(z.astype(float))
        hint = _PER_ROW if z.ndim > 1 else ""
        got = as_array(run(fn, z, case=case, hint=hint), case=case)
        if got.shape != want.shape:
            raise Wrong(f"on {case}, the result has shape {got.shape}; expected "
                        f"{want.shape} = [..., n, n], one Jacobian per row"
                        + (f": {_PER_ROW}" if hint else ""))
        expect_finite(got, case=case, hint="exp(1000) overflows; compute p with a stable "
                      "softmax")
        rtol, atol = (1e-4, 1e-7) if z.dtype == np.float32 else (1e-6, 1e-10)
        if _close(got, want, rtol, atol):
            continue
        n = z.shape[-1]
        off = ~np.eye(n, dtype=bool)
        if n > 1 and np.allclose(got[..., off], 0.0) and not np.allclose(want[..., off], 0):
            raise Wrong(f"on {case}, every off-diagonal entry is 0, but raising z_j also "
                        "lowers every other weight: J[i, j] = -p_i p_j for i != j, and the "
                        "diagonal is p_i (1 - p_i) (J = diag(p) - p p^T)")
        if _close(got, -want, rtol, atol):
            raise Wrong(f"on {case}, every entry has the wrong sign: J = diag(p) - p p^T, "
                        "so the diagonal p_i (1 - p_i) is positive")
        expect_close(got, want, case=case, rtol=rtol, atol=atol,
                     hint="a saturated softmax has a Jacobian of almost exactly 0"
                     if np.ptp(z, axis=-1).max() > 100 else "")


def _jacobian_battery(rng):
    return [((z,), {}) for _, z in _jacobian_cases(rng)]


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


def _negated(z):
    p = softmax(z)
    return p[..., :, None] * p[..., None, :] - p[..., :, None] * np.eye(p.shape[-1])


register(Exercise(
    id="2.C",
    title="Challenge: the softmax Jacobian",
    kind="implement",
    reference=softmax_jacobian,
    diagnose=_diagnose_jacobian,
    battery=_jacobian_battery,
    rtol=1e-4,
    atol=1e-7,
    success="diag(p) - p p^T on a row, batches of rows and of heads, saturated scores, "
            "n = 1, float32 and fresh random shapes",
    wrong_answers=(
        (_diag_only, "J[i, j] = -p_i p_j"),
        (_np_outer, "one Jacobian per row"),
        (_naive_jacobian, "stable softmax"),
        (_negated, "wrong sign"),
    ),
))
