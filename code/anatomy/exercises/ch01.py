"""Chapter 1 exercises: a stable softmax (implement), scores that break on a batch (debug),
which output rows a value reaches (predict), a head programmed by hand (construct), and
attention itself (the challenge)."""

from __future__ import annotations

import numpy as np

from ..attention import attention, scaled_scores, softmax
from ..examples import ali_makan
from ..masks import causal_mask
from . import register
from ._core import (
    Exercise,
    Wrong,
    as_array,
    expect_close,
    expect_finite,
    expect_shape,
    int_set,
    random_leading,
    run,
)

# ---- 1.1 softmax (implement) --------------------------------------------------------------

_SHIFT = ("subtract each row's own maximum before exp (np.max(z, axis=axis, keepdims=True)); "
          "the softmax does not change, and exp can no longer overflow or underflow to 0/0")


def _softmax_cases(rng: np.random.Generator) -> list[tuple[str, np.ndarray, int]]:
    """(case, z, axis): fixed edge cases, then fresh random ones."""
    cases = [
        ("z = [1, 2, 3]", np.array([1.0, 2.0, 3.0]), -1),
        ("a [2, 3] batch of rows", np.array([[1.0, 2.0, 3.0], [0.5, 0.5, -1.0]]), -1),
        ("a [3, 2] array with axis=0", np.array([[0.0, 3.0], [1.0, 2.0], [2.0, 1.0]]), 0),
        ("large logits [1000, 1001, 1002]", np.array([1000.0, 1001.0, 1002.0]), -1),
        ("very negative logits [-1000, -1001, -1002]", np.array([-1000.0, -1001.0, -1002.0]),
         -1),
        ("rows at very different levels, [[1000, 1001], [-1000, -999]]",
         np.array([[1000.0, 1001.0], [-1000.0, -999.0]]), -1),
        ("a wide row [-1000, 0, 1000]", np.array([-1000.0, 0.0, 1000.0]), -1),
        ("a single entry z = [7]", np.array([7.0]), -1),
    ]
    for i in range(3):
        shape = (*random_leading(rng), int(rng.integers(1, 8)))
        scale = 10.0 ** rng.uniform(-1, 3)
        z = rng.standard_normal(shape) * scale + rng.uniform(-500, 500)
        dtype = np.float32 if i == 1 else np.float64
        axis = int(rng.integers(-len(shape), len(shape)))
        cases.append((f"fresh random scores of shape {shape} ({np.dtype(dtype).name}, "
                      f"axis={axis})", z.astype(dtype), axis))
    return cases


def _diagnose_softmax(fn, rng) -> None:
    for case, z, axis in _softmax_cases(rng):
        # axis=-1 is left to the default, which must be the last axis
        kwargs = {} if axis == -1 else {"axis": axis}
        got = expect_shape(run(fn, z, case=case, **kwargs), z.shape, case=case)
        expect_finite(got, case=case, hint=_SHIFT)
        tol = 1e-4 if z.dtype == np.float32 else 1e-5       # float32 rounds at ~6e-8 a step
        sums = got.sum(axis=axis)
        if not np.allclose(sums, 1.0, rtol=tol, atol=0):
            if axis != -1 and np.allclose(got.sum(axis=-1), 1.0):
                raise Wrong(f"on {case}, the weights sum to 1 along the last axis, not along "
                            "axis: normalise along the `axis` argument")
            worst = float(np.abs(sums - 1.0).max())
            raise Wrong(f"on {case}, the weights do not sum to 1 along axis={axis} (a sum "
                        f"is off by {worst:.2g}): divide each row by its own sum "
                        "(np.sum(..., axis=axis, keepdims=True))")
        expect_close(got, softmax(z.astype(float), axis=axis), case=case, rtol=tol,
                     atol=1e-12)


def _softmax_battery(rng):
    return [((z,), {} if axis == -1 else {"axis": axis}) for _, z, axis in _softmax_cases(rng)]


def _naive_softmax(z, axis=-1):
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def _global_max_softmax(z, axis=-1):
    e = np.exp(z - np.max(z))
    return e / e.sum(axis=axis, keepdims=True)


def _last_axis_softmax(z, axis=-1):
    e = np.exp(z - np.max(z, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _global_sum_softmax(z, axis=-1):
    e = np.exp(z - np.max(z, axis=axis, keepdims=True))
    return e / e.sum()


register(Exercise(
    id="1.1",
    title="A numerically stable softmax",
    kind="implement",
    reference=softmax,
    diagnose=_diagnose_softmax,
    battery=_softmax_battery,
    success="rows, batches, any axis, logits of +-1000, rows at very different levels, "
            "float32, and fresh random inputs",
    wrong_answers=(
        (_naive_softmax, "subtract each row's own maximum"),
        (_global_max_softmax, "subtract each row's own maximum"),
        (_last_axis_softmax, "normalise along the `axis`"),
        (_global_sum_softmax, "divide each row by its own sum"),
    ),
))

# ---- 1.2 scores that break on a batch (debug) -------------------------------------------


def _given_scores(q, k):
    """Scaled dot-product scores.

    Shapes: q [..., T_q, d_k], k [..., T_k, d_k] -> [..., T_q, T_k]
    """
    return q @ k.T / np.sqrt(q.shape[-1])


_SWAP = ("k.T reverses *every* axis of a batch [B, T_k, d_k] into [d_k, T_k, B]; transpose "
         "only the last two axes, np.swapaxes(k, -1, -2)")


def _score_cases(rng) -> list[tuple[str, np.ndarray, np.ndarray]]:
    cases = [("q [3, 4] and k [5, 4]", rng.standard_normal((3, 4)),
              rng.standard_normal((5, 4))),
             ("a batch q [2, 3, 4] and k [2, 5, 4]", rng.standard_normal((2, 3, 4)),
              rng.standard_normal((2, 5, 4))),
             ("a batch of heads q [2, 3, 6, 8] and k [2, 3, 6, 8]",
              rng.standard_normal((2, 3, 6, 8)), rng.standard_normal((2, 3, 6, 8)))]
    lead = random_leading(rng, max_axes=3)
    T_q, T_k = (int(n) for n in rng.integers(1, 9, size=2))
    d_k = int(rng.integers(2, 9))
    cases.append((f"fresh random q {list((*lead, T_q, d_k))} and k {list((*lead, T_k, d_k))}",
                  rng.standard_normal((*lead, T_q, d_k)).astype(np.float32),
                  rng.standard_normal((*lead, T_k, d_k)).astype(np.float32)))
    return cases


def _swap_hint(error: Exception) -> str:
    """The transpose hint, for a shape error only (matmul's mismatch, a transpose's axes):
    a NameError or a TypeError is some other slip."""
    return _SWAP if isinstance(error, ValueError) else ""


def _diagnose_scores(fn, rng) -> None:
    for case, q, k in _score_cases(rng):
        want = scaled_scores(q, k)
        got = as_array(run(fn, q, k, case=case, hint=_swap_hint), case=case)
        if got.shape != want.shape:
            raise Wrong(f"on {case}, the scores have shape {got.shape}; expected {want.shape} "
                        "= [..., T_q, T_k]" + (f": {_SWAP}" if q.ndim > 2 else ""))
        if q.shape[-1] > 1 and np.allclose(got, want * np.sqrt(q.shape[-1]), rtol=1e-4):
            raise Wrong(f"on {case}, the scores are sqrt(d_k) times too large: keep the "
                        "division by sqrt(d_k)")
        expect_close(got, want, case=case, rtol=1e-4, atol=1e-6)


def _score_battery(rng):
    return [((q, k), {}) for _, q, k in _score_cases(rng)]


def _fixed_for_three_axes(q, k):
    return q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])


def _reshape_transpose(q, k):
    return q @ k.reshape(*k.shape[:-2], k.shape[-1], k.shape[-2]) / np.sqrt(q.shape[-1])


def _scores_unscaled(q, k):
    return q @ np.swapaxes(k, -1, -2)


def _fixed_scores(q, k):
    """The function as given with its one bug repaired, in the chapter's own NumPy: the
    fixed side of the solution's diff. Shapes: q [..., T_q, d_k], k [..., T_k, d_k]."""
    return q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])   # -> [..., T_q, T_k]


register(Exercise(
    id="1.2",
    title="Scores that break on a batch",
    kind="debug",
    reference=scaled_scores,
    given=_given_scores,
    fix=_fixed_scores,
    diagnose=_diagnose_scores,
    battery=_score_battery,
    success="q k^T / sqrt(d_k) for one sequence, a batch, a batch of heads and fresh "
            "random shapes",
    explain="The bug is k.T: on a 2-D key matrix it is the transpose you want, but on a "
            "batch it reverses every axis. Swap only the last two axes.",
    wrong_answers=(
        (_fixed_for_three_axes, "transpose only the last two axes"),
        (_reshape_transpose, "should be"),
        (_scores_unscaled, "sqrt(d_k) times too large"),
    ),
))

# ---- 1.3 which output rows does one value reach? (predict) ------------------------------

_ALL_ROWS = frozenset({0, 1, 2, 3})
_WHY_ALL = ("every row of the output is a weighted average of *all* value rows, and no "
            "softmax weight is exactly 0 (exp of a finite score is positive), so a change "
            "in V[2] reaches every row")


def _diagnose_rows(answer, rng) -> None:
    rows = int_set(answer, what="row indices", example="{0, 2}")
    if not rows <= _ALL_ROWS:
        raise Wrong(f"rows {sorted(rows - _ALL_ROWS)} do not exist: out has 4 rows, 0 to 3")
    if rows == {2}:
        raise Wrong("not only nasi's own row: " + _WHY_ALL)
    if rows != _ALL_ROWS:
        raise Wrong(f"rows {sorted(_ALL_ROWS - rows)} change too: " + _WHY_ALL)


register(Exercise(
    id="1.3",
    title="Which output rows does one value row reach?",
    kind="predict",
    reference={0, 1, 2, 3},
    diagnose=_diagnose_rows,
    success="all four rows: each output row blends every value row",
    explain="All four. Row i of out is weights[i] @ V, a blend of every value row with "
            "weights that are all positive, so changing V[2] moves every row, each in "
            "proportion to how much weight its query puts on nasi.",
    wrong_answers=(({2}, "not only nasi's own row"), ({2, 3}, "change too"),
                   ("2", "answer with a set"), (5, "answer with a set")),
))

# ---- 1.4 program a head (construct) -------------------------------------------------------

_TARGET = 0.9


def _diagnose_head(fn, rng) -> None:
    X = ali_makan()["X"]
    # A token that resembles the key, only longer: scaling the key's own direction up makes
    # that token win the row, so only a construction that tells the rows apart passes.
    rival = np.random.default_rng(14).standard_normal((4, 8))
    rival[1] = 1.5 * rival[2] + 0.1 * rival[1]
    cases = [("the worked example's X [4, 8], query 3 (lemak), key 2 (nasi)", X, 3, 2),
             ("the worked example's X, query 0 (Ali), key 0 (itself)", X, 0, 0),
             ("an X [4, 8] whose token 1 is 1.5 x token 2 plus a little, query 3, key 2",
              rival, 3, 2)]
    # T = d = 8, the longest sentence the spec allows: a gap that suffices for a few
    # tokens can fall short once seven rival keys share the row
    full = np.random.default_rng(48).standard_normal((8, 8))
    cases.append(("a random X [8, 8] (T = d, the longest the spec allows), query 5, key 1",
                  full, 5, 1))
    T = int(rng.integers(2, 9))                   # any T from 2 to d = 8
    query, key = (int(i) for i in rng.integers(0, T, size=2))
    cases.append((f"fresh random X [{T}, 8], query {query}, key {key}",
                  rng.standard_normal((T, 8)), query, key))
    for case, X, query, key in cases:
        got = run(fn, X, query, key, case=case)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise Wrong(f"on {case}, expected a pair (W_q, W_k), got a {type(got).__name__}")
        W_q = expect_shape(got[0], (X.shape[1], 4), case=case, name="W_q")
        W_k = expect_shape(got[1], (X.shape[1], 4), case=case, name="W_k")
        expect_finite(W_q, case=case, name="W_q")
        expect_finite(W_k, case=case, name="W_k")
        _, weights = attention(X @ W_q, X @ W_k, X @ W_k)
        w = weights[query, key]
        if not w >= _TARGET:
            top = int(np.argmax(weights[query]))
            if top == key:
                raise Wrong(f"on {case}, query {query} puts {w:.2f} of its weight on key "
                            f"{key}, its favourite, but it needs at least {_TARGET}: the "
                            f"gap is too small for {X.shape[0]} tokens, since every other "
                            f"key still takes a share. Widen the gap between q_{query} . "
                            f"k_{key} and the other scores of the row")
            raise Wrong(f"on {case}, query {query} puts {w:.2f} of its weight on key {key} "
                        f"(its favourite is key {top}, with {weights[query, top]:.2f}); it "
                        f"needs at least {_TARGET}. Make q_{query} . k_{key} much larger "
                        f"than q_{query} . k_j for every other j: give query {query} and key "
                        f"{key} a shared direction that the other keys lack, and scale it up")


def program_head(X: np.ndarray, query: int, key: int) -> tuple[np.ndarray, np.ndarray]:
    """W_q, W_k [d, 4] under which row ``query`` of X attends to row ``key`` (weight >= 0.9).

    The pseudo-inverse gives, for each token, a direction that its row of X projects onto
    with 1 and every other row with 0. Projecting the query onto its own such direction and
    the keys onto the key's makes q_query . k_j = s for j = key and 0 for the rest: a score
    gap of s / sqrt(d_k), so the weight is e^g / (e^g + T - 1) with g = s / 2.

    Shapes: X [T, d] (T <= d, rows independent) -> W_q, W_k [d, 4]
    """
    dual = np.linalg.pinv(X)                      # [d, T]: X @ dual = I_T
    s = 20.0                                      # score gap 10: weight > 0.99 for T <= 100
    W_q = np.zeros((X.shape[1], 4))
    W_k = np.zeros((X.shape[1], 4))
    W_q[:, 0] = dual[:, query]                    # q_i[0] = 1 if i == query else 0
    W_k[:, 0] = s * dual[:, key]                  # k_j[0] = s if j == key else 0
    return W_q, W_k


def _identity_head(X, query, key):
    return np.eye(X.shape[1], 4), np.eye(X.shape[1], 4)


def _scaled_pair(X, query, key):
    W_q, W_k = np.zeros((X.shape[1], 4)), np.zeros((X.shape[1], 4))
    W_q[:, 0], W_k[:, 0] = 3 * X[query], 3 * X[key]
    return W_q, W_k


def _small_gap_head(X, query, key):
    # the reference's construction with a score gap of 4 instead of 10: enough up to T = 7
    W_q, W_k = program_head(X, query, key)
    return W_q, W_k * (8.0 / 20.0)


def _key_direction_only(X, query, key):
    W = np.zeros((X.shape[1], 4))
    W[:, 0] = X[key]
    return W, W


register(Exercise(
    id="1.4",
    title="Program a head: make one token attend to another",
    kind="construct",
    reference=program_head,
    diagnose=_diagnose_head,
    success="the query puts at least 0.9 of its weight on the chosen key, on the worked "
            "example, on an adversarial X whose rival token is a longer copy of the key, "
            "on a sentence of T = d = 8 tokens and on fresh random tokens",
    explain="One construction of many: any W_q, W_k that give the chosen pair a score far "
            "above every other pair in that row works.",
    wrong_answers=(
        (_identity_head, "needs at least 0.9"),
        (_key_direction_only, "needs at least 0.9"),
        (_scaled_pair, "token 1 is 1.5 x token 2"),
        (_small_gap_head, "the gap is too small for 8 tokens"),
        (lambda X, query, key: np.eye(X.shape[1], 4), "expected a pair (W_q, W_k)"),
    ),
))

# ---- 1.C challenge: attention (implement) -----------------------------------------------


def _pair(result, case: str):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Wrong(f"on {case}, expected a pair (out, weights), got a "
                    f"{type(result).__name__}: return both, as `return out, weights`")
    return result


_BROADCAST = ("the mask is [T, T] and the scores [B, h, T, T]: let it broadcast, e.g. "
              "np.where(mask, -np.inf, scores), rather than indexing scores[mask]")


def _attention_cases(rng) -> list[tuple[str, tuple, np.ndarray | None]]:
    qkv = tuple(rng.standard_normal((4, 4)) for _ in range(3))
    # v wider than q and k (d_v = 6), so a scale by sqrt(d_v) instead of sqrt(d_k) shows
    heads = tuple(rng.standard_normal((2, 3, 5, d)) for d in (4, 4, 6))
    T, d_k, d_v = (int(n) for n in rng.integers(1, 7, size=3))
    lead = random_leading(rng)
    fresh = (rng.standard_normal((*lead, T, d_k)), rng.standard_normal((*lead, T, d_k)),
             rng.standard_normal((*lead, T, d_v)))
    return [
        ("q, k, v [4, 4] without a mask", qkv, None),
        ("a causal mask (True = forbidden)", qkv, causal_mask(4)),
        ("a batch of heads, q, k [B, h, T, d_k] = [2, 3, 5, 4], v [2, 3, 5, 6]", heads,
         None),
        ("a [T, T] causal mask over a batch of heads, q, k [2, 3, 5, 4]", heads,
         causal_mask(5)),
        ("a mask that forbids keys 0 and 1 to every query (not causal)", qkv,
         np.broadcast_to(np.arange(4) < 2, (4, 4))),
        ("a single token (T = 1) with d_v = 6",
         (rng.standard_normal((1, 4)), rng.standard_normal((1, 4)),
          rng.standard_normal((1, 6))), None),
        (f"fresh random q, k [{', '.join(map(str, (*lead, T, d_k)))}] and v [..., {T}, {d_v}] "
         "with a random mask that leaves every query a key",
         fresh, (rng.random((T, T)) < 0.5) & ~np.eye(T, dtype=bool)),
    ]


def _diagnose_attention(fn, rng) -> None:
    for case, (q, k, v), mask in _attention_cases(rng):
        kwargs = {} if mask is None else {"mask": mask}
        hint = _BROADCAST if mask is not None and q.ndim > 2 else ""
        out, weights = _pair(run(fn, q, k, v, case=case, hint=hint, **kwargs), case)
        want_out, want_w = attention(q, k, v, **kwargs)
        weights = expect_shape(weights, want_w.shape, case=case, name="weights")
        if mask is not None:
            forbidden = np.broadcast_to(mask, want_w.shape) & (weights != 0)
            if forbidden.any():
                at = tuple(int(i) for i in np.argwhere(forbidden)[0])
                raise Wrong(f"on {case}, weights{list(at)} is {weights[at]:.3g} where the "
                            "mask is True; forbidden keys must get weight exactly 0 (set "
                            "their scores to -inf before the softmax)")
        # Absolute slack at float32's rounding of numbers of size ~1 (weights, N(0, 1) values)
        expect_close(weights, want_w, case=case, name="weights", atol=1e-7)
        expect_close(out, want_out, case=case, name="out", atol=1e-6,
                     hint="with one key, its weight is 1 and the output is that key's "
                          "value row" if q.shape[-2] == 1 else "")


def _attention_battery(rng):
    return [((q, k, v), {} if mask is None else {"mask": mask})
            for _, (q, k, v), mask in _attention_cases(rng)]


def _no_mask(q, k, v, mask=None):
    return attention(q, k, v)


def _out_only(q, k, v, mask=None):
    return attention(q, k, v, mask)[0]


def _boolean_indexing(q, k, v, mask=None):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        scores[mask] = -np.inf
    weights = softmax(scores)
    return weights @ v, weights


def _transpose_all(q, k, v, mask=None):
    scores = q @ k.T / np.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    weights = softmax(scores)
    return weights @ v, weights


register(Exercise(
    id="1.C",
    title="Challenge: attention with masks and any leading axes",
    kind="implement",
    reference=attention,
    diagnose=_diagnose_attention,
    battery=_attention_battery,
    success="out and weights agree with the reference with and without a mask, for "
            "[B, h, T, d_k] inputs under a [T, T] mask, for T = 1 and fresh random shapes",
    wrong_answers=(
        (_no_mask, "must get weight exactly 0"),
        (_out_only, "expected a pair (out, weights)"),
        (_boolean_indexing, "let it broadcast"),
        (_transpose_all, "your function raised"),
    ),
))
