"""Chapter 3 exercises: the causal mask and the mask of a padded batch (implement), which
output rows one token reaches under the mask (predict), a padding mask with its polarity
flipped (debug), a sliding window (construct), and padded attention that never produces NaN
(the challenge)."""

from __future__ import annotations

import numpy as np

from ..attention import attention, softmax
from ..masks import (
    causal_mask,
    causal_padding_mask,
    padded_attention,
    padding_mask,
    sliding_window_mask,
)
from . import register
from ._core import (
    Exercise,
    Wrong,
    expect_close,
    expect_finite,
    expect_shape,
    int_set,
    other_convention,
    run,
)


def _as_mask(got, want_shape: tuple, *, case: str) -> np.ndarray:
    """The reader's mask, checked for None, shape and dtype, as a boolean array."""
    if got is None:
        raise Wrong(f"on {case}, the result is None: did you forget to return the mask?")
    arr = np.asarray(got)
    if arr.shape != tuple(want_shape):
        raise Wrong(f"on {case}, the mask has shape {arr.shape}; expected {tuple(want_shape)}")
    if arr.dtype != np.bool_:
        if np.issubdtype(arr.dtype, np.floating) and np.isin(arr, (0.0, -np.inf)).all() \
                and np.isneginf(arr).any():
            raise other_convention("an additive mask of 0 and -inf (added to the scores)",
                                   "a boolean mask, True = forbidden")
        if np.issubdtype(arr.dtype, np.number) and np.isin(arr, (0, 1)).all():
            raise Wrong(f"on {case}, the mask holds 0/1 numbers of dtype {arr.dtype}; expected "
                        "dtype bool (True = forbidden), the only kind attention accepts: "
                        "build it with dtype=bool")
        raise Wrong(f"on {case}, the mask has dtype {arr.dtype}; expected dtype bool "
                    "(True = forbidden)")
    return arr


def _first_difference(got: np.ndarray, want: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(got != want)[0])


def _keys(indices) -> str:
    """Key indices as a short phrase: "keys 2..5", "key 3", "no key at all"."""
    indices = [int(i) for i in indices]
    if not indices:
        return "no key at all"
    if len(indices) == 1:
        return f"key {indices[0]}"
    if indices == list(range(indices[0], indices[-1] + 1)):
        return f"keys {indices[0]}..{indices[-1]}"
    return "keys " + ", ".join(map(str, indices))


# ---- 3.1 the causal mask (implement) ------------------------------------------------------

_ALLOWED = "True marks the keys a query may see (PyTorch's scaled_dot_product_attention)"


def _causal_cases(rng) -> list[tuple[str, int]]:
    fresh = [int(n) for n in rng.integers(3, 40, size=3)]
    return [(f"T = {T}", T) for T in (4, 1, 2, 7)] + [(f"fresh T = {T}", T) for T in fresh]


def _diagnose_causal(fn, rng) -> None:
    for case, T in _causal_cases(rng):
        got = _as_mask(run(fn, T, case=case), (T, T), case=case)
        want = causal_mask(T)
        if np.array_equal(got, want):
            continue
        if np.array_equal(got, ~want):
            raise other_convention(_ALLOWED, "True = forbidden, the keys in a query's future")
        ones = np.ones((T, T), dtype=bool)
        if np.array_equal(got, np.triu(ones)):
            raise Wrong(f"on {case}, the diagonal is True: a token must see itself (query i "
                        "may use keys j <= i), so only keys strictly above the diagonal are "
                        "forbidden; with the diagonal masked, row 0 has no key left at all")
        if np.array_equal(got, np.tril(ones, k=-1)):
            raise Wrong(f"on {case}, the lower triangle is True, which forbids the past; the "
                        "future keys j > i lie above the diagonal")
        i, j = _first_difference(got, want)
        raise Wrong(f"on {case}, mask[{i}, {j}] is {bool(got[i, j])} but should be "
                    f"{bool(want[i, j])}: query {i} may see key {j} exactly when {j} <= {i}"
                    + (" (build the mask from T, not from a fixed size)" if T != 4 else ""))


def _causal_battery(rng):
    return [((T,), {}) for _, T in _causal_cases(rng)]


def _diagonal_included(T):
    return np.triu(np.ones((T, T), dtype=bool))


def _lower_triangle(T):
    return np.tril(np.ones((T, T), dtype=bool), k=-1)


def _zero_one_ints(T):
    return np.triu(np.ones((T, T), dtype=int), k=1)


def _true_means_allowed(T):
    return np.tril(np.ones((T, T), dtype=bool))


def _additive(T):
    return np.where(causal_mask(T), -np.inf, 0.0)


def _always_four(T):
    return causal_mask(4)


register(Exercise(
    id="3.1",
    title="The causal mask",
    kind="implement",
    reference=causal_mask,
    diagnose=_diagnose_causal,
    battery=_causal_battery,
    success="boolean [T, T], True strictly above the diagonal, for T = 1, 2, 4, 7 and fresh "
            "random T",
    wrong_answers=(
        (_diagonal_included, "the diagonal is True"),
        (_lower_triangle, "the lower triangle is True"),
        (_zero_one_ints, "expected dtype bool"),
        (_true_means_allowed, "a different convention: True marks the keys"),
        (_additive, "a different convention: an additive mask"),
        (_always_four, "has shape"),
    ),
))

# ---- 3.2 the mask of a padded batch (implement) -------------------------------------------


def _batch_cases(rng) -> list[tuple[str, np.ndarray, int]]:
    cases = [(np.array([4, 2, 0]), 4), (np.array([1]), 1), (np.array([3, 3]), 3),
             (np.array([0, 5, 1]), 5)]
    for _ in range(2):
        T = int(rng.integers(1, 10))
        B = int(rng.integers(1, 5))
        cases.append((rng.integers(0, T + 1, size=B), T))
    return [(f"{'fresh ' if n >= 4 else ''}lengths = {lengths.tolist()}, T = {T}", lengths, T)
            for n, (lengths, T) in enumerate(cases)]


def _why(i: int, j: int, n: int) -> str:
    if j > i:
        return f"key {j} is in the future of query {i}"
    if j >= n:
        return f"key {j} is padding (the sequence has length {n})"
    return f"key {j} is a real token at or before query {i}, so it is visible"


def _diagnose_batch_mask(fn, rng) -> None:
    for case, lengths, T in _batch_cases(rng):
        B = len(lengths)
        got = run(fn, lengths, T, case=case)
        if np.shape(got) == (B, 1, T) != (B, T, T):
            raise Wrong(f"on {case}, the mask has shape {np.shape(got)}, the padding mask "
                        "alone; the future keys must be forbidden too, in one [B, T, T] mask")
        if np.shape(got) == (T, T) != (B, T, T):
            raise Wrong(f"on {case}, the mask has shape {np.shape(got)}, one mask for the "
                        f"whole batch; each sequence has its own padding, so expected "
                        f"{(B, T, T)} = [B, T, T]")
        got = _as_mask(got, (B, T, T), case=case)
        want = causal_padding_mask(lengths, T)
        if np.array_equal(got, want):
            continue
        if np.array_equal(got, ~want):
            raise other_convention(_ALLOWED, "True = forbidden: future and padding keys")
        future = causal_mask(T)
        pad = padding_mask(lengths, T)                              # [B, 1, T]
        if np.array_equal(got, future & pad):
            raise Wrong(f"on {case}, a key is forbidden only where it is both in the future "
                        "and padding; it must be hidden if it is *either* (logical OR, not "
                        "AND)")
        if np.array_equal(got, future | np.swapaxes(pad, -1, -2)):
            # masking padding queries instead of keys, or as well as keys: on a right-padded
            # batch the causal part already hides every padding key from the real queries
            raise Wrong(f"on {case}, the rows i >= lengths[b] are fully masked, but padding "
                        "hides keys, not queries: a padding query still sees the real tokens "
                        "before it (its output is computed and never used), so in those rows "
                        "only the padding columns j >= lengths[b] are True")
        if np.array_equal(got, np.broadcast_to(pad, got.shape)):
            raise Wrong(f"on {case}, future keys are allowed: the causal part is missing")
        b, i, j = _first_difference(got, want)
        raise Wrong(f"on {case}, mask[{b}, {i}, {j}] is {bool(got[b, i, j])} but should be "
                    f"{bool(want[b, i, j])}: in sequence {b}, {_why(i, j, lengths[b])}")


def _batch_battery(rng):
    return [((lengths, T), {}) for _, lengths, T in _batch_cases(rng)]


def _and_instead_of_or(lengths, T):
    return causal_mask(T) & padding_mask(lengths, T)


def _padding_on_queries(lengths, T):
    return causal_mask(T) | np.swapaxes(padding_mask(lengths, T), -1, -2)


def _padding_keys_and_queries(lengths, T):
    pad = padding_mask(lengths, T)                              # [B, 1, T]
    return causal_mask(T) | pad | np.swapaxes(pad, -1, -2)


def _padding_only(lengths, T):
    return padding_mask(lengths, T)


def _diagonal_forbidden(lengths, T):
    j = np.arange(T)
    return (j >= np.arange(T)[:, None]) | (j >= lengths[:, None, None])


register(Exercise(
    id="3.2",
    title="The mask of a padded batch",
    kind="implement",
    reference=causal_padding_mask,
    diagnose=_diagnose_batch_mask,
    battery=_batch_battery,
    success="boolean [B, T, T]: future keys OR each sequence's padding keys, for a length-0 "
            "sequence, T = 1, no padding at all and fresh random batches",
    wrong_answers=(
        (_and_instead_of_or, "not AND"),
        (_padding_on_queries, "padding hides keys, not queries"),
        (_padding_keys_and_queries, "padding hides keys, not queries"),
        (_padding_only, "the padding mask alone"),
        (_diagonal_forbidden, "so it is visible"),
    ),
))

# ---- 3.3 which rows does one token reach under the mask? (predict) ------------------------

_ROWS = frozenset({0, 1, 2, 3})


def _diagnose_reach(answer, rng) -> None:
    rows = int_set(answer, what="row indices", example="{0, 2}")
    if not rows <= _ROWS:
        raise Wrong(f"rows {sorted(rows - _ROWS)} do not exist: out has 4 rows, 0 to 3")
    if rows & {0, 1}:
        raise Wrong(f"rows {sorted(rows & {0, 1})} cannot change: Ali and makan come before "
                    "nasi, the mask gives nasi's key weight exactly 0 in their rows, and "
                    "their own queries, keys and values are untouched")
    if 2 not in rows:
        raise Wrong("row 2 changes: it is nasi's own row, and its query, key and value "
                    "are all new")
    if 3 not in rows:
        raise Wrong("row 3 changes too: lemak comes after nasi, so it may see nasi (2 <= 3), "
                    "gives its key a positive weight and mixes in its new value")


register(Exercise(
    id="3.3",
    title="Which rows does a change to nasi reach?",
    kind="predict",
    reference={2, 3},
    diagnose=_diagnose_reach,
    success="rows 2 and 3: a change flows forward, to its own row and the rows after it",
    explain="Rows 2 and 3. Under the causal mask a token reaches its own row and every row "
            "after it, never one before it: rows 0 and 1 give key 2 a weight of exactly 0 and "
            "read nothing else of nasi, while row 3 gives it a positive weight.",
    wrong_answers=(({2}, "row 3 changes too"), ({0, 1, 2, 3}, "cannot change"),
                   ({3}, "row 2 changes"), ({0, 1, 2}, "cannot change"),
                   ("2", "answer with a set")),
))

# ---- 3.4 a padding mask with its polarity flipped (debug) ---------------------------------


def _given_padding_mask(lengths, T):
    """True = forbidden: the padding keys. lengths [B] -> mask [B, 1, T]."""
    is_pad = np.arange(T) < lengths[:, None]           # [T] vs [B, 1] -> [B, T]
    return is_pad[:, None, :]                          # [B, T] -> [B, 1, T]


def _pad_cases(rng) -> list[tuple[str, np.ndarray, int]]:
    cases = [(np.array([4, 2, 0]), 4), (np.array([1]), 3), (np.array([2, 2]), 2)]
    for _ in range(2):
        T = int(rng.integers(1, 12))
        cases.append((rng.integers(0, T + 1, size=int(rng.integers(1, 6))), T))
    return [(f"{'fresh ' if n >= 3 else ''}lengths = {lengths.tolist()}, T = {T}", lengths, T)
            for n, (lengths, T) in enumerate(cases)]


def _diagnose_padding(fn, rng) -> None:
    for case, lengths, T in _pad_cases(rng):
        B = len(lengths)
        want = padding_mask(lengths, T)                               # [B, 1, T]
        got = run(fn, lengths, T, case=case)
        shape = np.shape(got)
        if shape == (B, T, 1) != (B, 1, T):
            raise Wrong(f"on {case}, the mask has shape {shape}: padding on the query axis. "
                        "Padding hides keys from every query, so the mask is [B, 1, T], "
                        "one row per sequence that broadcasts over the queries")
        if shape == (B, T, T) != (B, 1, T) and np.array_equal(
                np.asarray(got), np.broadcast_to(want, shape)):
            raise other_convention("a full [B, T, T] mask, the same row for every query",
                                   "the [B, 1, T] mask that broadcasts over the queries")
        got = _as_mask(got, (B, 1, T), case=case)
        if np.array_equal(got, want):
            continue
        b, _, j = _first_difference(got, want)
        n = lengths[b]
        what = "padding, so it must be True" if j >= n else "a real token, so it must be False"
        raise Wrong(f"on {case}, mask[{b}, 0, {j}] is {bool(got[b, 0, j])}: key {j} of "
                    f"sequence {b} (length {n}) is {what}")


def _pad_battery(rng):
    return [((lengths, T), {}) for _, lengths, T in _pad_cases(rng)]


def _pad_on_queries(lengths, T):
    is_pad = np.arange(T) >= lengths[:, None]
    return is_pad[:, :, None]


def _pad_off_by_one(lengths, T):
    is_pad = np.arange(T) > lengths[:, None]
    return is_pad[:, None, :]


def _pad_full(lengths, T):
    is_pad = np.arange(T) >= lengths[:, None]
    return np.broadcast_to(is_pad[:, None, :], (len(lengths), T, T))


def _pad_as_ints(lengths, T):
    return (np.arange(T) >= lengths[:, None])[:, None, :].astype(int)


register(Exercise(
    id="3.4",
    title="A padding mask that hides the wrong tokens",
    kind="debug",
    reference=padding_mask,
    given=_given_padding_mask,
    diagnose=_diagnose_padding,
    battery=_pad_battery,
    success="True exactly at each sequence's padding keys, [B, 1, T], for a length-0 "
            "sequence, no padding at all and fresh random batches",
    explain="The comparison is the wrong way round: np.arange(T) < lengths[:, None] is True "
            "at the real tokens, the convention of a Hugging Face attention_mask (1 = attend). "
            "In this book True means forbidden, and the padding keys are j >= lengths[b].",
    wrong_answers=(
        (_pad_on_queries, "padding on the query axis"),
        (_pad_off_by_one, "is padding, so it must be True"),
        (_pad_full, "a different convention: a full [B, T, T] mask"),
        (_pad_as_ints, "expected dtype bool"),
    ),
))

# ---- 3.5 a sliding window (construct) -----------------------------------------------------


def _window_cases(rng) -> list[tuple[str, int, int]]:
    cases = [(6, 3), (4, 1), (3, 5), (1, 1)]
    for _ in range(2):
        T = int(rng.integers(2, 30))
        cases.append((T, int(rng.integers(1, T + 3))))
    return [(f"{'fresh ' if n >= 4 else ''}T = {T}, w = {w}", T, w)
            for n, (T, w) in enumerate(cases)]


def _diagnose_window(fn, rng) -> None:
    for case, T, w in _window_cases(rng):
        got = _as_mask(run(fn, T, w, case=case), (T, T), case=case)
        want = sliding_window_mask(T, w)
        if np.array_equal(got, want):
            continue
        if np.array_equal(got, ~want):
            raise other_convention("True marks the keys a query may see",
                                   "True = forbidden, everything outside the window")
        i = int(np.argwhere((got != want).any(axis=-1))[0, 0])
        seen, should = np.flatnonzero(~got[i]), np.flatnonzero(~want[i])
        message = (f"on {case}, query {i} sees {_keys(seen)} but should see "
                   f"{_keys(should)}")
        if seen.size and seen.max() > i:
            raise Wrong(message + ": a key in its future is visible; the window only "
                        "looks back")
        if seen.size and seen.min() < should.min():
            raise Wrong(message + f": key {seen.min()} is {i - seen.min()} positions back, "
                        f"but a window of w = {w} holds w tokens, the query itself included")
        raise Wrong(message + f": a window of w = {w} holds the query and the {w - 1} "
                    "key(s) just before it, as far as they exist")


def _window_battery(rng):
    return [((T, w), {}) for _, T, w in _window_cases(rng)]


def _one_too_many(T, w):
    return causal_mask(T) | np.tril(np.ones((T, T), dtype=bool), k=-w - 1)


def _one_too_few(T, w):
    return causal_mask(T) | np.tril(np.ones((T, T), dtype=bool), k=-w + 1)


def _symmetric_band(T, w):
    i, j = np.arange(T)[:, None], np.arange(T)
    return np.abs(i - j) >= w


def _window_allows(T, w):
    return ~sliding_window_mask(T, w)


def _always_three(T, w):
    return sliding_window_mask(T, 3)


register(Exercise(
    id="3.5",
    title="A sliding window of w tokens",
    kind="construct",
    reference=sliding_window_mask,
    diagnose=_diagnose_window,
    battery=_window_battery,
    success="each query sees itself and the w - 1 keys before it, for w = 1, w > T and "
            "fresh random T and w",
    explain="One way of many: forbid the future (the causal mask) OR every key w or more "
            "positions back (every entry with j <= i - w).",
    wrong_answers=(
        (_one_too_many, "positions back"),
        (_one_too_few, "should see"),
        (_symmetric_band, "a key in its future"),
        (_window_allows, "a different convention"),
        (_always_three, "positions back"),
    ),
))

# ---- 3.C challenge: attention over a padded batch, never NaN (implement) ------------------


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
                    f"{b} may still see {_keys(seen)}: padding hides keys, not queries, so "
                    "mask the key axis (the last one) only")


_NAN = ("a sequence of length 0 has every key masked, so its rows are all -inf and "
        "exp(-inf - (-inf)) = exp(nan); give such rows weight 0 everywhere")


def _padded_cases(rng) -> list[tuple[str, tuple, np.ndarray]]:
    fixed = np.random.default_rng(3)
    q, k = fixed.standard_normal((2, 2, 4, 3))                 # each [B, T, d_k] = [2, 4, 3]
    v = fixed.standard_normal((2, 4, 5))                       # [B, T, d_v]
    cases = [("q, k [2, 4, 3], v [2, 4, 5], lengths = [4, 2]", (q, k, v), np.array([4, 2])),
             ("lengths = [3, 0] (the second sequence is all padding)", (q, k, v),
              np.array([3, 0])),
             ("a single token (B = 1, T = 1, lengths = [1])", (q[:1, :1], k[:1, :1],
                                                               v[:1, :1]), np.array([1]))]
    for dtype in (np.float64, np.float32):
        B, T, d_k, d_v = (int(n) for n in rng.integers(1, 7, size=4))
        lengths = rng.integers(0, T + 1, size=B)
        qkv = tuple(rng.standard_normal((B, T, d)).astype(dtype) for d in (d_k, d_k, d_v))
        cases.append((f"fresh random q, k [{B}, {T}, {d_k}], v [{B}, {T}, {d_v}] "
                      f"({np.dtype(dtype).name}), lengths = {lengths.tolist()}", qkv, lengths))
    return cases


def _diagnose_padded_attention(fn, rng) -> None:
    for case, (q, k, v), lengths in _padded_cases(rng):
        single = q.dtype == np.float32
        rtol, atol = (1e-4, 1e-6) if single else (1e-5, 1e-8)
        out, weights = _pair(run(fn, q, k, v, lengths, case=case), case)
        want_out, want_w = padded_attention(q.astype(float), k.astype(float),
                                            v.astype(float), lengths)
        weights = expect_shape(weights, want_w.shape, case=case, name="weights")
        empty = np.flatnonzero(lengths == 0)
        expect_finite(weights, case=case, name="weights", hint=_NAN if empty.size else "")
        for b in empty:
            if np.allclose(weights[b], 1 / weights.shape[-1]):
                raise Wrong(f"on {case}, every weight of sequence {b} is "
                            f"{weights[b, 0, 0]:.3g}: a large negative number instead of "
                            "-inf spreads a fully masked row evenly over its keys; such a row "
                            "must get weight 0 everywhere and output 0")
        _check_forbidden(weights, lengths, case)
        _check_empty_rows(weights, want_w, case)
        expect_close(weights, want_w, case=case, name="weights", rtol=rtol, atol=atol)
        hint = ("one visible key gets weight 1, so the output is its value row"
                if q.shape[-2] == 1 else "a fully masked row's output is 0" if empty.size
                else "")
        expect_close(out, want_out, case=case, name="out", rtol=rtol, atol=atol, hint=hint)


def _padded_battery(rng):
    return [((q, k, v, lengths), {}) for _, (q, k, v), lengths in _padded_cases(rng)]


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


def _not_causal(q, k, v, lengths):
    return padded_attention(q, k, v, lengths, causal=False)


register(Exercise(
    id="3.C",
    title="Challenge: padded attention without NaN",
    kind="implement",
    reference=padded_attention,
    diagnose=_diagnose_padded_attention,
    battery=_padded_battery,
    rtol=1e-5,
    atol=1e-8,
    success="causal and padding keys get weight 0, an all-padding sequence gives zero "
            "weights and output (no NaN), T = 1, float32 and fresh random batches",
    explain="The library builds the mask of exercise 3.2 and hands it to attention; the "
            "NaN-free part is its softmax (exercise 1.1's solution), which shifts an all -inf "
            "row by 0 instead of by its maximum and divides by 1 where a row's total is 0.",
    wrong_answers=(
        (_naive, "contains nan"),
        (_large_negative, "a large negative number instead of -inf"),
        (_queries_padded, "mask the key axis"),
        (_not_causal, "add the causal mask"),
    ),
))
