"""Chapter 3 exercises: the causal mask, the mask of a padded batch, and padded attention."""

from __future__ import annotations

import numpy as np

from ..attention import attention, softmax
from ..masks import causal_mask, causal_padding_mask, padded_attention, padding_mask
from . import register
from ._core import Exercise, Wrong, expect_close, expect_finite, expect_shape, run


def _as_mask(got, want_shape: tuple, *, case: str) -> np.ndarray:
    """The reader's mask, checked for None, shape and dtype, as a boolean array."""
    if got is None:
        raise Wrong(f"on {case}, the result is None: did you forget to return the mask?")
    arr = np.asarray(got)
    if arr.shape != tuple(want_shape):
        raise Wrong(f"on {case}, the mask has shape {arr.shape}; expected {tuple(want_shape)}")
    if arr.dtype != np.bool_:
        if np.issubdtype(arr.dtype, np.number) and np.isin(arr, (0, 1)).all():
            raise Wrong(f"on {case}, the mask holds 0/1 numbers of dtype {arr.dtype}; expected "
                        "dtype bool (True = forbidden), the only kind attention accepts: "
                        "build it with dtype=bool")
        raise Wrong(f"on {case}, the mask has dtype {arr.dtype}; expected dtype bool "
                    "(True = forbidden)")
    return arr


def _first_difference(got: np.ndarray, want: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(got != want)[0])


# ---- 3.1 the causal mask ----------------------------------------------------------------


def _diagnose_causal(fn, rng) -> None:
    T = 4
    case = "T = 4"
    got = _as_mask(run(fn, T, case=case), (T, T), case=case)
    want = causal_mask(T)
    if not np.array_equal(got, want):
        ones = np.ones((T, T), dtype=bool)
        if np.array_equal(got, np.triu(ones)):
            raise Wrong(f"on {case}, the diagonal is True: a token must see itself (query i "
                        "may use keys j <= i), so only keys strictly above the diagonal are "
                        "forbidden (np.triu(..., k=1)); with the diagonal masked, row 0 has "
                        "no key left at all")
        if np.array_equal(got, ~want):
            raise Wrong(f"on {case}, the mask is True where attention is allowed; in this "
                        "book True means forbidden (the future keys j > i), so invert it")
        if np.array_equal(got, np.tril(ones, k=-1)) or np.array_equal(got, np.tril(ones)):
            raise Wrong(f"on {case}, the lower triangle is True, which forbids the past; the "
                        "future keys j > i lie above the diagonal (np.triu, not np.tril)")
        i, j = _first_difference(got, want)
        raise Wrong(f"on {case}, mask[{i}, {j}] is {bool(got[i, j])} but should be "
                    f"{bool(want[i, j])}: query {i} may see key {j} exactly when {j} <= {i}")

    case = "T = 1"
    got = _as_mask(run(fn, 1, case=case), (1, 1), case=case)
    if got[0, 0]:
        raise Wrong(f"on {case}, the only entry is True; a single token must see itself, so "
                    "the mask is [[False]]")

    T = 7
    case = "T = 7"
    got = _as_mask(run(fn, T, case=case), (T, T), case=case)
    if not np.array_equal(got, causal_mask(T)):
        i, j = _first_difference(got, causal_mask(T))
        raise Wrong(f"on {case}, mask[{i}, {j}] is {bool(got[i, j])}: build the mask from T, "
                    "not from a fixed size")


def _diagonal_included(T):
    return np.triu(np.ones((T, T), dtype=bool))


def _lower_triangle(T):
    return np.tril(np.ones((T, T), dtype=bool), k=-1)


def _zero_one_ints(T):
    return np.triu(np.ones((T, T), dtype=int), k=1)


register(Exercise(
    id="3.1",
    title="The causal mask",
    kind="implement",
    reference=causal_mask,
    diagnose=_diagnose_causal,
    success="boolean [T, T], True strictly above the diagonal, for T = 4, 1 and 7",
    wrong_answers=(
        (_diagonal_included, "the diagonal is True"),
        (_lower_triangle, "the lower triangle is True"),
        (_zero_one_ints, "expected dtype bool"),
    ),
))

# ---- 3.2 the mask of a padded batch -----------------------------------------------------


def _diagnose_batch_mask(fn, rng) -> None:
    lengths, T = np.array([4, 2, 0]), 4
    case = f"lengths = {lengths.tolist()}, T = {T}"
    got = run(fn, lengths, T, case=case)
    if np.shape(got) == (len(lengths), 1, T):
        raise Wrong(f"on {case}, the mask has shape {np.shape(got)}, the padding mask alone; "
                    "combine it with the causal mask [T, T] (logical OR broadcasts both to "
                    "[B, T, T])")
    if np.shape(got) == (T, T):
        raise Wrong(f"on {case}, the mask has shape {np.shape(got)}, one mask for the whole "
                    f"batch; each sequence has its own padding, so expected "
                    f"{(len(lengths), T, T)} = [B, T, T]")
    got = _as_mask(got, (len(lengths), T, T), case=case)
    want = causal_padding_mask(lengths, T)
    if np.array_equal(got, want):
        pass
    elif np.array_equal(got, causal_mask(T) & padding_mask(lengths, T)):
        raise Wrong(f"on {case}, a key is forbidden only where both masks forbid it; a key "
                    "must be hidden if *either* mask forbids it: use logical OR, not AND")
    elif np.array_equal(got, causal_mask(T) | np.swapaxes(padding_mask(lengths, T), -1, -2)):
        raise Wrong(f"on {case}, the padding is on the query axis (rows); padding hides keys, "
                    "so columns j >= lengths[b] must be True (a [B, 1, T] mask, not [B, T, 1])")
    elif np.array_equal(got, np.broadcast_to(padding_mask(lengths, T), got.shape)):
        raise Wrong(f"on {case}, future keys are allowed (e.g. mask[0, 0, 1] is False): the "
                    "causal mask is missing")
    else:
        b, i, j = _first_difference(got, want)
        why = "in the future" if j > i else ("padding" if j >= lengths[b] else "allowed")
        raise Wrong(f"on {case}, mask[{b}, {i}, {j}] is {bool(got[b, i, j])} but should be "
                    f"{bool(want[b, i, j])}: key {j} is {why} for query {i} of sequence {b} "
                    f"(length {lengths[b]})")

    case = "one sequence of one token (lengths = [1], T = 1)"
    got = _as_mask(run(fn, np.array([1]), 1, case=case), (1, 1, 1), case=case)
    if got[0, 0, 0]:
        raise Wrong(f"on {case}, the only entry is True; a real token must see itself")


def _and_instead_of_or(lengths, T):
    return causal_mask(T) & padding_mask(lengths, T)


def _padding_on_queries(lengths, T):
    return causal_mask(T) | np.swapaxes(padding_mask(lengths, T), -1, -2)


def _padding_only(lengths, T):
    return padding_mask(lengths, T)


register(Exercise(
    id="3.2",
    title="The mask of a padded batch",
    kind="implement",
    reference=causal_padding_mask,
    diagnose=_diagnose_batch_mask,
    success="boolean [B, T, T]: the causal mask OR each sequence's padding keys, a length-0 "
            "sequence and T = 1 included",
    wrong_answers=(
        (_and_instead_of_or, "use logical OR"),
        (_padding_on_queries, "padding is on the query axis"),
        (_padding_only, "the padding mask alone"),
    ),
))

# ---- 3.C challenge: attention over a padded batch, never NaN ----------------------------


def _pair(result, case: str):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Wrong(f"on {case}, expected a pair (out, weights), got a "
                    f"{type(result).__name__}: return both, as `return out, weights`")
    return result


def _check_forbidden(weights: np.ndarray, lengths: np.ndarray, case: str) -> None:
    """Name the first weight that sits on a future or padding key."""
    B, T, _ = weights.shape
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    for b in range(B):
        future = (j > i) & (weights[b] != 0)
        if future.any():
            qi, kj = np.argwhere(future)[0]
            raise Wrong(f"on {case}, weights[{b}, {qi}, {kj}] is {weights[b, qi, kj]:.3g} for "
                        f"the future key {kj} > {qi}: add the causal mask")
        pad = (j >= lengths[b]) & (weights[b] != 0)
        if pad.any():
            qi, kj = np.argwhere(pad)[0]
            raise Wrong(f"on {case}, weights[{b}, {qi}, {kj}] is {weights[b, qi, kj]:.3g} but "
                        f"key {kj} is padding in sequence {b} (length {lengths[b]}): mask the "
                        "key axis (the last one) where j >= lengths[b]")


def _check_empty_rows(weights: np.ndarray, want: np.ndarray, case: str) -> None:
    """Name the first row the reader emptied although some of its keys are visible."""
    emptied = (np.abs(weights).sum(axis=-1) == 0) & (want.sum(axis=-1) > 0)      # [B, T]
    if emptied.any():
        b, i = np.argwhere(emptied)[0]
        seen = np.flatnonzero(want[b, i])
        raise Wrong(f"on {case}, the row weights[{b}, {i}] is all 0, but query {i} of sequence "
                    f"{b} may still see keys {seen.min()}..{seen.max()}: padding hides keys, "
                    "not queries, so mask the key axis (the last one) only")


def _diagnose_padded_attention(fn, rng) -> None:
    rng = np.random.default_rng(3)
    lengths = np.array([4, 2])
    q, k = rng.standard_normal((2, 2, 4, 3))
    v = rng.standard_normal((2, 4, 5))
    case = f"q, k [2, 4, 3], v [2, 4, 5], lengths = {lengths.tolist()}"
    out, weights = _pair(run(fn, q, k, v, lengths, case=case), case)
    want_out, want_w = padded_attention(q, k, v, lengths)
    weights = expect_shape(weights, want_w.shape, case=case, name="weights")
    expect_finite(weights, case=case, name="weights")
    _check_forbidden(weights, lengths, case)
    _check_empty_rows(weights, want_w, case)
    expect_close(weights, want_w, case=case, name="weights")
    expect_close(out, want_out, case=case, name="out")

    lengths = np.array([3, 0])
    case = "lengths = [3, 0] (the second sequence is all padding)"
    with np.errstate(all="ignore"):
        out, weights = _pair(run(fn, q, k, v, lengths, case=case), case)
    want_out, want_w = padded_attention(q, k, v, lengths)
    weights = expect_shape(weights, want_w.shape, case=case, name="weights")
    expect_finite(weights, case=case, name="weights", hint="every key of sequence 1 is "
                  "masked, so its rows are all -inf and exp(-inf - (-inf)) = exp(nan); give "
                  "such rows weight 0 everywhere (anatomy.attention.softmax does)")
    if np.allclose(weights[1], 1 / weights.shape[-1]):
        raise Wrong(f"on {case}, every weight of sequence 1 is {weights[1, 0, 0]:.3g}: a large "
                    "negative number instead of -inf spreads a fully masked row evenly over "
                    "the padding; such a row must get weight 0 everywhere and output 0")
    _check_forbidden(weights, lengths, case)
    expect_close(weights, want_w, case=case, name="weights")
    expect_close(out, want_out, case=case, name="out", hint="a fully masked row's output is 0")

    q1, k1, v1 = q[:1, :1], k[:1, :1], v[:1, :1]
    case = "a single token (B = 1, T = 1, lengths = [1])"
    out, _ = _pair(run(fn, q1, k1, v1, np.array([1]), case=case), case)
    expect_close(out, v1, case=case, name="out", hint="one visible key gets weight 1, so the "
                 "output is its value row")


def _naive(q, k, v, lengths):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])    # [B, T, T]
    scores = np.where(causal_padding_mask(lengths, q.shape[-2]), -np.inf, scores)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ v, weights


def _large_negative(q, k, v, lengths):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])    # [B, T, T]
    scores = np.where(causal_padding_mask(lengths, q.shape[-2]), -1e9, scores)
    weights = softmax(scores)
    return weights @ v, weights


def _queries_padded(q, k, v, lengths):
    T = q.shape[-2]
    return attention(q, k, v, causal_mask(T) | np.swapaxes(padding_mask(lengths, T), -1, -2))


register(Exercise(
    id="3.C",
    title="Challenge: attention over a padded batch that never produces NaN",
    kind="implement",
    reference=padded_attention,
    diagnose=_diagnose_padded_attention,
    success="causal and padding keys get weight 0, an all-padding sequence gives zero "
            "weights and output (no NaN), and T = 1 works",
    wrong_answers=(
        (_naive, "contains nan"),
        (_large_negative, "a large negative number instead of -inf"),
        (_queries_padded, "mask the key axis"),
    ),
))
