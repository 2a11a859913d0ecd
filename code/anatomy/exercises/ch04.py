"""Chapter 4 exercises: split the features into heads (implement), a merge that mixes tokens
(debug), the shapes of grouped-query attention on a batch (predict), two heads with jobs set
by hand (construct), and multi-head attention with biases and a per-sequence mask (the
challenge)."""

from __future__ import annotations

import math
import re

import numpy as np

from ..attention import attention
from ..heads import merge_heads, multi_head_attention, split_heads
from ..masks import causal_mask, padding_mask
from . import register
from ._core import (
    Exercise,
    Wrong,
    as_array,
    expect_close,
    expect_finite,
    expect_shape,
    random_leading,
    run,
)

_SWAP = ("cut each token's row into h pieces first ([..., T, h, d_head]), then swap the T "
         "and h axes")


def _features(*shape: int) -> np.ndarray:
    """Entries 0, 1, 2, ... in order: every value is distinct, so a misplaced one shows."""
    return np.arange(math.prod(shape), dtype=float).reshape(shape)


def _straight_split(x: np.ndarray, h: int) -> np.ndarray:
    """The silent bug: [..., T, d] read in row-major index order as [..., h, T, d_head]."""
    *lead, T, d = x.shape
    return x.reshape(*lead, h, T, d // h)


def _strided_split(x: np.ndarray, h: int) -> np.ndarray:
    """Head j gets columns j, j + h, j + 2h, ... (interleaved, not contiguous)."""
    *lead, T, d = x.shape
    return np.moveaxis(x.reshape(*lead, T, d // h, h), -1, -3)


def _mentions(text: str, number: int) -> bool:
    """Whether ``number`` appears in ``text`` as a whole number (10 in "d=10", not in 100)."""
    return re.search(rf"(?<!\d){number}(?!\d)", text) is not None


# ---- 4.1 split the features into heads (implement) --------------------------------------


def _split_cases(rng) -> list[tuple[str, np.ndarray, int]]:
    """(case, x, h): fixed edge cases, then fresh random shapes (float32 among them)."""
    cases = [("x [T, d] = [3, 8] with h = 2", _features(3, 8), 2),
             ("a batch x [B, T, d] = [2, 3, 8] with h = 4", _features(2, 3, 8), 4),
             ("a single token x [T, d] = [1, 6] with h = 3", _features(1, 6), 3),
             ("one head, x [3, 5] with h = 1", _features(3, 5), 1),
             ("as many heads as features, x [2, 4] with h = 4", _features(2, 4), 4),
             # "any leading axes": two of them, so an answer written for [T, d] and
             # [B, T, d] alone is caught on every check, not on a lucky draw
             ("two leading axes, x [2, 3, 4, 6] with h = 2", _features(2, 3, 4, 6), 2)]
    for i in range(3):
        lead = random_leading(rng, max_axes=2)
        T, h, d_head = (int(n) for n in rng.integers(1, 5, size=3))
        x = rng.standard_normal((*lead, T, h * d_head))
        if i == 1:
            x = x.astype(np.float32)
        shape = list(x.shape)
        cases.append((f"fresh random x {shape} ({x.dtype.name}) with h = {h}", x, h))
    return cases


def _check_split_values(got: np.ndarray, x: np.ndarray, h: int, case: str) -> None:
    want = split_heads(x, h)
    if got.shape == want.shape and not np.allclose(got, want):
        if np.allclose(got, _straight_split(x, h)):
            raise Wrong(f"on {case}, the shape {got.shape} is right but the values are not: "
                        "reshaping [T, d] straight to [h, T, d_head] deals out consecutive "
                        "chunks of x in row-major order (last axis fastest), so head 0 gets "
                        "whole tokens instead of columns "
                        f"0:d_head of every token; {_SWAP}")
        if np.allclose(got, _strided_split(x, h)):
            raise Wrong(f"on {case}, the heads get interleaved columns (head 0 has columns "
                        "0, h, 2h, ...): head j must get the contiguous columns "
                        "j*d_head:(j+1)*d_head, so cut each row as [..., T, h, d_head], not "
                        "[..., T, d_head, h]")
    expect_close(got, want, case=case, rtol=1e-6, atol=0.0,
                 hint="head j must hold columns j*d_head:(j+1)*d_head of every token")


def _check_split_error(fn, T: int, d: int, h: int) -> None:
    case = f"x [T, d] = [{T}, {d}] with h = {h} ({d} is not a multiple of {h})"
    try:
        got = fn(_features(T, d), h)
    except NotImplementedError:
        raise
    except ValueError as error:
        message = str(error)
        if _mentions(message, d) and _mentions(message, h):
            return
        if "cannot reshape" in message:
            raise Wrong(f"on {case}, NumPy's own error ({message}) does not say what is "
                        "wrong: check d % h yourself and raise a ValueError that names d and "
                        "h") from None
        raise Wrong(f"on {case}, your ValueError says {message!r}, which does not name "
                    f"both d = {d} and h = {h}: say which numbers do not divide, e.g. "
                    f"'d={d} is not divisible by h={h}'") from None
    except Exception as error:
        raise Wrong(f"on {case}, your function raised {type(error).__name__}: {error}; "
                    "raise a ValueError naming d and h instead") from None
    raise Wrong(f"on {case}, your function returned a {type(got).__name__} instead of "
                "raising: d must be a multiple of h, so check d % h and raise ValueError")


def _diagnose_split(fn, rng) -> None:
    for case, x, h in _split_cases(rng):
        got = as_array(run(fn, x, h, case=case, hint="keep the leading axes: only the last "
                           "axis is cut"), case=case)
        *lead, T, d = x.shape
        want = (*lead, h, T, d // h)
        if got.shape != want:
            if got.shape == (d // h, h, T) and x.ndim == 2:
                raise Wrong(f"on {case}, the result has shape {got.shape} = [d_head, h, T]; "
                            f"expected {want} = [h, T, d_head]: .T or transpose() reverses "
                            "every axis; swap only the T and h axes")
            raise Wrong(f"on {case}, the result has shape {got.shape}; expected {want} = "
                        "[..., h, T, d_head]: keep any leading axes and put the head axis "
                        "just before T")
        _check_split_values(got, x, h, case)
    _check_split_error(fn, 3, 10, 4)
    while True:                      # fresh numbers, all different, so each must be named
        T, h = (int(n) for n in rng.integers(2, 8, size=2))
        d = h * int(rng.integers(1, 5)) + int(rng.integers(1, h))
        if len({T, h, d}) == 3:
            break
    _check_split_error(fn, T, d, h)


def _split_battery(rng):
    return [((x, h), {}) for _, x, h in _split_cases(rng)]


def _split_nope(x, h):
    *lead, T, d = x.shape
    if d % h:
        raise ValueError("nope")
    return np.swapaxes(x.reshape(*lead, T, h, d // h), -3, -2)


def _split_no_check(x, h):
    *lead, T, d = x.shape
    return np.swapaxes(x.reshape(*lead, T, h, d // h), -3, -2)


def _split_names_shape_only(x, h):
    *lead, T, d = x.shape
    if d % h:
        raise ValueError(f"x has shape {x.shape}")
    return np.swapaxes(x.reshape(*lead, T, h, d // h), -3, -2)


def _split_2d_only(x, h):
    T, d = x.shape
    if d % h:
        raise ValueError(f"d={d} is not divisible by h={h}")
    return x.reshape(T, h, d // h).transpose(1, 0, 2)


def _split_straight(x, h):
    if x.shape[-1] % h:
        raise ValueError(f"d={x.shape[-1]} is not divisible by h={h}")
    return _straight_split(x, h)


def _split_strided(x, h):
    if x.shape[-1] % h:
        raise ValueError(f"d={x.shape[-1]} is not divisible by h={h}")
    return _strided_split(x, h)


def _split_full_transpose(x, h):
    T, d = x.shape[-2:]
    if d % h:
        raise ValueError(f"d={d} is not divisible by h={h}")
    return x.reshape(T, h, d // h).T


register(Exercise(
    id="4.1",
    title="Split the features into heads",
    kind="implement",
    reference=split_heads,
    diagnose=_diagnose_split,
    battery=_split_battery,
    rtol=1e-6,
    atol=0.0,
    success="[..., T, d] -> [..., h, T, d_head] with contiguous columns per head, for one "
            "sequence, a batch, T = 1, h = 1, h = d and fresh random shapes, and an error "
            "that names d and h when h does not divide d",
    wrong_answers=(
        (_split_nope, "does not name both d = 10 and h = 4"),
        (_split_names_shape_only, "does not name both"),
        (_split_no_check, "does not say what is wrong"),
        (_split_straight, "reshaping [T, d] straight to [h, T, d_head]"),
        (_split_strided, "interleaved columns"),
        (_split_2d_only, "keep the leading axes"),
        (_split_full_transpose, "reverses every axis"),
    ),
))

# ---- 4.2 a merge that mixes tokens (debug) ----------------------------------------------


def _given_merge(x):
    """Lay the heads side by side again: [..., h, T, d_head] -> [..., T, d]."""
    *lead, h, T, d_head = x.shape
    return x.reshape(*lead, T, h * d_head)


def _merge_cases(rng) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(case, heads, x) with heads = split_heads(x, h): merging must give x back."""
    shapes = [("heads [h, T, d_head] = [2, 3, 4]", (3, 8), 2),
              ("a batch of heads [B, h, T, d_head] = [2, 3, 5, 4]", (2, 5, 12), 3),
              ("a single token, heads [h, T, d_head] = [2, 1, 3]", (1, 6), 2),
              ("one head, heads [1, 4, 3]", (4, 3), 1),
              ("two leading axes, heads [2, 3, 2, 4, 3]", (2, 3, 4, 6), 2)]
    cases = [(case, split_heads(_features(*shape), h), _features(*shape))
             for case, shape, h in shapes]
    for i in range(3):
        lead = random_leading(rng, max_axes=2)
        T, h, d_head = (int(n) for n in rng.integers(2, 6, size=3))
        x = rng.standard_normal((*lead, T, h * d_head))
        if i == 1:
            x = x.astype(np.float32)
        heads = split_heads(x, h)
        cases.append((f"fresh random heads {list(heads.shape)} ({x.dtype.name})", heads, x))
    return cases


def _diagnose_merge(fn, rng) -> None:
    for case, heads, x in _merge_cases(rng):
        got = run(fn, heads, case=case, hint="keep the leading axes: only the last three "
                  "axes [h, T, d_head] take part")
        got = expect_shape(got, x.shape, case=case)
        if not np.allclose(got, x):
            *lead, h, T, d_head = heads.shape
            if np.allclose(got, heads.reshape(x.shape)):
                raise Wrong(f"on {case}, merge(split_heads(x, h)) is not x: a reshape reads "
                            "entries in index order (last axis fastest, whatever the "
                            "memory layout), so reshaping [h, T, d_head] straight to "
                            "[T, d] fills token 0's row with head 0's first rows, i.e. with "
                            "features of other tokens; bring the head axis back next to "
                            "d_head first ([..., T, h, d_head]), then reshape")
            if np.allclose(got, np.moveaxis(heads, -3, -1).reshape(x.shape)):
                raise Wrong(f"on {case}, the columns come out interleaved (head 0's features "
                            "at columns 0, h, 2h, ...): move the head axis to [..., T, h, "
                            "d_head], not [..., T, d_head, h], so head j lands in columns "
                            "j*d_head:(j+1)*d_head")
        expect_close(got, x, case=case, rtol=1e-6, atol=0.0,
                     hint="merge(split_heads(x, h)) must give x back")


def _merge_battery(rng):
    return [((heads,), {}) for _, heads, _ in _merge_cases(rng)]


def _merge_interleaved(x):
    *lead, h, T, d_head = x.shape
    return np.moveaxis(x, -3, -1).reshape(*lead, T, h * d_head)


def _merge_3d_only(x):
    h, T, d_head = x.shape
    return x.transpose(1, 0, 2).reshape(T, h * d_head)


def _merge_wrong_swap(x):
    *lead, h, T, d_head = x.shape
    return np.swapaxes(x, -3, -1).reshape(*lead, T, h * d_head)   # [..., d_head, T, h]


register(Exercise(
    id="4.2",
    title="A merge that mixes tokens",
    kind="debug",
    reference=merge_heads,
    given=_given_merge,
    diagnose=_diagnose_merge,
    battery=_merge_battery,
    rtol=1e-6,
    atol=0.0,
    success="merge(split_heads(x, h)) == x for one sequence, a batch, T = 1, one head and "
            "fresh random shapes",
    explain="The reshape is right only once the head axis sits next to d_head. A reshape "
            "reads entries in index order, last axis fastest, whatever the memory layout: "
            "reading [h, T, d_head] that way (head 0's rows first) as [T, h * d_head] gives "
            "token 0 the first rows of head 0, features of tokens 0, 1, ... glued into one "
            "row. Move the head axis back first ([..., T, h, d_head]), which changes the "
            "index order without moving any data, then reshape.",
    wrong_answers=(
        (_merge_wrong_swap, "must give x back"),
        (_merge_interleaved, "interleaved"),
        (_merge_3d_only, "keep the leading axes"),
    ),
))

# ---- 4.3 the shapes of grouped-query attention on a batch (predict) ----------------------

_SIZES = {"B": 4, "T": 10, "d": 96, "h": 6, "h_kv": 2}
_K = (4, 2, 10, 16)
_K_REP = (4, 6, 10, 16)
_SCORES = (4, 6, 10, 10)
_NAMES = ("the shape of k", "the shape of k_rep", "the shape of the scores")


def _shape(value, name: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(n) for n in value)
    except (TypeError, ValueError):
        raise Wrong(f"{name} should be a shape, a tuple of whole numbers such as "
                    "(1, 2, 3, 4)") from None
    if any(n != float(m) for n, m in zip(shape, value, strict=True)):
        raise Wrong(f"{name} should be a tuple of whole numbers")
    return shape


def _check_k(k: tuple[int, ...]) -> None:
    if k == _K:
        return
    if k == (4, 2, 10, 48):
        raise Wrong(f"k {k}: d_head is d / h = 16 for the keys too, not d / h_kv; a "
                    "grouped-query layer computes fewer key heads of the same width, so "
                    "W_k is [d, h_kv d_head] = [96, 32]")
    if k == (4, 6, 10, 16):
        raise Wrong(f"k {k} has h = 6 heads: the keys are split into h_kv = 2 heads, "
                    "one per group of query heads; that is where the saving comes from")
    if k == (4, 10, 2, 16):
        raise Wrong(f"k {k} is the layout after the reshape, before the T and head axes "
                    "swap: split_heads puts the head axis in front of T")
    if k == (2, 4, 10, 16):
        raise Wrong(f"k {k} puts the heads before the batch: split_heads keeps the "
                    "leading (batch) axes and puts the head axis just before T")
    if len(k) != 4:
        raise Wrong(f"k {k} has {len(k)} axes; the keys of a batch of heads have four, "
                    "[B, h_kv, T, d_head]")
    raise Wrong(f"k {k} is not [B, h_kv, T, d_head] with d_head = d / h")


def _check_k_rep(k_rep: tuple[int, ...]) -> None:
    if k_rep == _K_REP:
        return
    if k_rep == (4, 2, 30, 16) or k_rep == (4, 2, 10, 48):
        raise Wrong(f"k_rep {k_rep}: axis=-3 is the head axis of [B, h_kv, T, d_head], so "
                    "the repeat multiplies the number of heads, not T or d_head")
    if k_rep == (4, 4, 10, 16):
        raise Wrong(f"k_rep {k_rep}: each key head is repeated h // h_kv = 3 times, once "
                    "per query head of its group, giving h = 6 heads")
    if k_rep == (4, 12, 10, 16):
        raise Wrong(f"k_rep {k_rep}: h // h_kv = 3 copies of each of the h_kv = 2 key "
                    "heads make h = 6, one for every query head")
    raise Wrong(f"k_rep {k_rep} is not [B, h, T, d_head]: after the repeat every query "
                "head has a key head of its own shape")


def _check_scores(scores: tuple[int, ...]) -> None:
    if scores == _SCORES:
        return
    if scores == (4, 2, 10, 10):
        raise Wrong(f"scores {scores} have one table per key head; every query head "
                    "computes its own table against its group's keys, so the scores have "
                    "h = 6 heads: [B, h, T, T]")
    if scores == (4, 10, 10):
        raise Wrong(f"scores {scores} are one table per sequence; every head computes "
                    "its own table, so the scores keep the head axis: [B, h, T, T]")
    if len(scores) == 4 and scores[-1] == 16 or scores[-2:] == (16, 16):
        raise Wrong(f"scores {scores}: a score compares one token's query with one "
                    "token's key, so the last two axes are T x T; d_head is summed "
                    "over in each dot product")
    raise Wrong(f"scores {scores} are not [B, h, T, T]")


def _diagnose_shapes(answer, rng) -> None:
    if isinstance(answer, (str, bytes)) or not hasattr(answer, "__len__") or len(answer) != 3:
        raise Wrong("answer with three shapes, (shape of k, shape of k_rep, shape of the "
                    "scores), e.g. ((1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 3))")
    k, k_rep, scores = (_shape(value, name) for value, name in zip(answer, _NAMES,
                                                                   strict=True))
    _check_k(k)
    _check_k_rep(k_rep)
    _check_scores(scores)


register(Exercise(
    id="4.3",
    title="Grouped-query attention shapes on a batch",
    kind="predict",
    reference=(_K, _K_REP, _SCORES),
    diagnose=_diagnose_shapes,
    success="k is [B, h_kv, T, d_head] = (4, 2, 10, 16), k_rep [B, h, T, d_head] = "
            "(4, 6, 10, 16) and the scores [B, h, T, T] = (4, 6, 10, 10)",
    explain="d_head = d / h = 96 / 6 = 16 for queries and keys alike, so W_k is "
            "[d, h_kv d_head] = [96, 32]. split_heads keeps the batch axis and puts the "
            "head axis before T: k is [B, h_kv, T, d_head] = (4, 2, 10, 16). Repeating "
            "each key head h // h_kv = 3 times along the head axis gives every query head "
            "a key head: k_rep is [B, h, T, d_head] = (4, 6, 10, 16). Each query head "
            "compares its T queries with its T keys, summing over d_head, so the scores are "
            "[B, h, T, T] = (4, 6, 10, 10): one 10 x 10 table per query head per sequence.",
    wrong_answers=(
        (((4, 2, 10, 48), _K_REP, _SCORES), "not d / h_kv"),
        (((4, 6, 10, 16), _K_REP, _SCORES), "split into h_kv = 2 heads"),
        (((4, 10, 2, 16), _K_REP, _SCORES), "before the T and head axes swap"),
        (((2, 4, 10, 16), _K_REP, _SCORES), "heads before the batch"),
        ((_K, (4, 2, 30, 16), _SCORES), "the head axis"),
        ((_K, (4, 4, 10, 16), _SCORES), "repeated h // h_kv = 3 times"),
        ((_K, _K_REP, (4, 2, 10, 10)), "one table per key head"),
        ((_K, _K_REP, (4, 10, 10)), "one table per sequence"),
        ((_K, _K_REP, (4, 6, 16, 16)), "T x T"),
        ((_K, _K_REP, (4, 6, 10, 16)), "T x T"),
        ((_K_REP, _SCORES), "three shapes"),
        ("(4, 2, 10, 16)", "three shapes"),
    ),
))

# ---- 4.4 two heads with jobs set by hand (construct) ------------------------------------

_NEED = 0.9


def _one_hot_tokens(T: int) -> np.ndarray:
    """Token t is the one-hot vector e_t of width d = 2T (its position and nothing else).

    Shapes: -> X [T, 2T]
    """
    return np.eye(T, 2 * T)


def _head_problem(w: np.ndarray, head: int, key_of, job: str) -> str | None:
    """The first query of one head [T, T] whose weight on its wanted key is below _NEED."""
    T = w.shape[0]
    for t in range(1, T):
        key = key_of(t)
        if not w[t, key] >= _NEED:
            top = int(np.argmax(w[t]))
            gap = ("It already prefers that key, but not by enough: the gap between the "
                   "wanted score and the others must grow with T (each score is divided by "
                   "sqrt(d_head) = sqrt(T), and up to T - 1 other keys compete), so scale "
                   "the query (or key) columns up" if top == key else
                   f"Its favourite is key {top} ({w[t, top]:.2f}): make q_{t} . k_{key} "
                   f"the one large score of row {t}")
            # rounded down, so that a weight just under _NEED never prints as reaching it
            got = math.floor(w[t, key] * 1000) / 1000
            return (f"head {head} ({job}) puts {got:.3f} of query {t}'s weight on key "
                    f"{key}; it needs at least {_NEED}. {gap}")
    return None


def _diagnose_two_heads(fn, rng) -> None:
    sizes = [6, 32, int(rng.integers(3, 41))]
    for T in sizes:
        d = 2 * T
        case = f"T = {T} tokens, X = np.eye({T}, {d}) (d = {d}, h = 2, d_head = {T})"
        W_qkv = expect_shape(run(fn, T, case=case), (d, 3 * d), case=case, name="W_qkv")
        expect_finite(W_qkv, case=case, name="W_qkv")
        _, w = multi_head_attention(_one_hot_tokens(T), W_qkv, np.eye(d), 2)   # [2, T, T]
        prev = _head_problem(w[0], 0, lambda t: t - 1, "previous token")
        first = _head_problem(w[1], 1, lambda t: 0, "first token")
        swapped = (_head_problem(w[1], 1, lambda t: t - 1, "") is None
                   and _head_problem(w[0], 0, lambda t: 0, "") is None)
        if (prev or first) and swapped:
            raise Wrong(f"on {case}, the heads are swapped: head 0 (columns 0:d_head of the "
                        "Q block and d:d+d_head of the K block) must attend to the previous "
                        "token, head 1 (the next d_head columns of each block) to the first")
        for problem in (prev, first):
            if problem:
                raise Wrong(f"on {case}, {problem}")


def previous_and_first_heads(T: int) -> np.ndarray:
    """W_qkv [2T, 6T] for tokens X = np.eye(T, 2T) (token t is the one-hot e_t) and h = 2
    heads of d_head = T: head 0 attends to the previous token, head 1 to the first token.

    Q is the block of columns 0:d, K the block d:2d; head 0 owns the first T columns of each
    block, head 1 the next T. Head 0's query of token t is s e_(t-1) and every key of token
    j is e_j, so the score of key t - 1 is s / sqrt(T) and every other score 0; head 1's
    query is s e_0 for every token, so only the first key scores. With a gap g and at most
    T - 1 other keys, the weight is at least e^g / (e^g + T - 1): g = ln(100 T) gives 0.99.

    Shapes: -> W_qkv [d, 3d] with d = 2T
    """
    d = 2 * T
    s = math.sqrt(T) * math.log(100 * T)         # score gap s / sqrt(d_head) = ln(100 T)
    W_qkv = np.zeros((d, 3 * d))                 # [d, 3d]; V (columns 2d:3d) stays 0
    W_qkv[:T, :T] = s * np.eye(T, k=-1)          # head 0's Q: token t -> s e_(t-1)
    W_qkv[:T, T] = s                             # head 1's Q: every token -> s e_0
    W_qkv[:T, d:d + T] = np.eye(T)               # head 0's K: token j -> e_j
    W_qkv[:T, d + T:2 * d] = np.eye(T)           # head 1's K: token j -> e_j
    return W_qkv


def _swapped_heads(T):
    W = previous_and_first_heads(T)
    d = 2 * T
    W[:, :d] = np.concatenate([W[:, T:d], W[:, :T]], axis=1)
    return W


def _fixed_scale(T):
    d = 2 * T
    W = np.zeros((d, 3 * d))
    W[:T, :T] = 10 * np.eye(T, k=-1)                     # score gap 10 / sqrt(T): too small
    W[:T, T] = 10
    W[:T, d:d + T] = np.eye(T)
    W[:T, d + T:2 * d] = np.eye(T)
    return W


def _only_head_0(T):
    W = previous_and_first_heads(T)
    W[:, T:2 * T] = 0                                    # head 1's queries are all 0
    return W


def _previous_from_keys(T):
    d = 2 * T
    W = np.zeros((d, 3 * d))
    W[:T, :T] = 50 * np.eye(T)                           # head 0: query t asks for t itself
    W[:T, d:d + T] = np.eye(T)
    W[:T, T] = 50
    W[:T, d + T:2 * d] = np.eye(T)
    return W


register(Exercise(
    id="4.4",
    title="Two heads with jobs set by hand",
    kind="construct",
    reference=previous_and_first_heads,
    diagnose=_diagnose_two_heads,
    success="head 0 puts at least 0.9 on the previous token and head 1 at least 0.9 on the "
            "first, for T = 6, T = 32 and a fresh random T",
    explain="One construction of many. Queries and keys of one-hot tokens are rows of "
            "W_qkv, so each head's score table is a block of W_q W_k^T: put a large entry "
            "where query t should meet its key, and let the scale grow like sqrt(T) ln T so "
            "that more competing keys cannot pull the weight under 0.9.",
    wrong_answers=(
        (_swapped_heads, "the heads are swapped"),
        (_fixed_scale, "not by enough"),
        (_only_head_0, "head 1 (first token)"),
        (_previous_from_keys, "Its favourite is key"),
        (lambda T: np.zeros((T, 3 * T)), "W_qkv has shape"),
    ),
))

# ---- 4.C challenge: multi-head attention, biases and a per-sequence mask (implement) -----


def _mha_variant(x, W_qkv, W_o, h, b_qkv=None, b_o=None, causal=True, mask=None, *,
                 scale_width=None, split=split_heads, use_W_o=True, head_axis=True,
                 use_b_qkv=True, use_b_o=True):
    """Multi-head attention with one known mistake switched on (for diagnosis and tests)."""
    qkv = x @ W_qkv                             # [..., T, d] @ [d, 3d] -> [..., T, 3d]
    if b_qkv is not None and use_b_qkv:
        qkv = qkv + b_qkv
    q, k, v = (split(t, h) for t in np.split(qkv, 3, axis=-1))   # each [..., h, T, d_head]
    if scale_width is not None:                 # attention divides by sqrt(d_head); undo that
        q = q * math.sqrt(q.shape[-1] / scale_width)
    T = x.shape[-2]
    if causal:
        mask = causal_mask(T) if mask is None else mask | causal_mask(T)
    if mask is not None and mask.ndim > 2 and head_axis:
        mask = mask[..., None, :, :]            # [..., T, T] -> [..., 1, T, T]
    out, weights = attention(q, k, v, mask)
    out = merge_heads(out)                      # -> [..., T, d]
    out = out @ W_o if use_W_o else out
    if b_o is not None and use_b_o:
        out = out + b_o
    return out, weights


def _pair(result, case: str):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Wrong(f"on {case}, expected a pair (out, weights), got a "
                    f"{type(result).__name__}: return both, as `return out, weights`")
    return result


def _weights_of(kwargs: dict, args: tuple) -> np.ndarray | None:
    try:
        with np.errstate(all="ignore"):
            return _mha_variant(*args, **kwargs)[1]
    except Exception:                           # this mistake cannot even run on this case
        return None


def _weights_problem(weights, want_w, args, kwargs, case):
    """Explain wrong per-head weights by the mistake that reproduces them, if any."""
    x, h, causal = args[0], args[3], kwargs.get("causal", True)
    *lead, T, d = x.shape
    want = (*lead, h, T, T)
    if np.shape(weights) == (*lead, T, T) and h > 1:
        raise Wrong(f"on {case}, weights have shape {np.shape(weights)}; expected {want} = "
                    "[..., h, T, T]: return every head's weights, not one head or their "
                    "average")
    weights = expect_shape(weights, want, case=case, name="weights")
    if causal and not np.all(weights[..., causal_mask(T)] == 0):
        raise Wrong(f"on {case} (causal=True), some weights above the diagonal are not 0: "
                    "apply the causal mask (True = forbidden) in every head")
    mask = kwargs.get("mask")
    if mask is not None:
        forbidden = np.broadcast_to(np.expand_dims(mask, -3) if mask.ndim > 2 else mask, want)
        if np.any(weights[forbidden] != 0):
            ignored = _weights_of({**kwargs, "mask": None}, args)
            if ignored is not None and np.allclose(weights, ignored):
                raise Wrong(f"on {case}, keys that the mask forbids (True) get weight: the "
                            "mask is not applied; combine it with the causal mask (or use it "
                            "alone when causal=False) before the softmax")
            raise Wrong(f"on {case}, some keys that the mask forbids (True) get weight: "
                        f"every head of sequence b must obey sequence b's mask; {_HEAD_AXIS}")
    suspects = (
        ({"scale_width": d}, "the scores are divided by sqrt(d); each head must divide by "
         "sqrt(d_head), its own width"),
        ({"split": _straight_split}, "the heads were split by reshaping [T, d] straight to "
         f"[h, T, d_head]; {_SWAP}"),
        ({"split": _strided_split}, "the heads got interleaved columns; head j must get "
         "columns j*d_head:(j+1)*d_head"),
        ({"use_b_qkv": False}, "the weights ignore b_qkv: add the bias to x @ W_qkv before "
         "splitting into Q, K, V"),
    )
    for change, message in suspects:
        bad = _weights_of({**kwargs, **change}, args)
        if bad is not None and np.allclose(weights, bad) and not np.allclose(bad, want_w):
            raise Wrong(f"on {case}, {message}")
    return weights


def _mha_cases(rng) -> list[tuple[str, tuple, dict]]:
    """(case, args, kwargs): the worked example, biases, masks, a batch, and fresh shapes."""
    rs = np.random.RandomState(1)               # the chapter's worked example
    x, W_qkv, W_o = rs.randn(4, 8), rs.randn(8, 24) / math.sqrt(8), rs.randn(8, 8) / math.sqrt(8)
    g = np.random.default_rng(4)                # fixed cases, the same on every check
    xb = g.standard_normal((2, 5, 12))
    Wb, Wo = g.standard_normal((12, 36)) / math.sqrt(12), g.standard_normal((12, 12))
    bq, bo = g.standard_normal(36), g.standard_normal(12)
    x2 = g.standard_normal((2, 5, 8))           # B = h = 2: a mask without the head axis fits
    W2, Wo2 = g.standard_normal((8, 24)) / math.sqrt(8), g.standard_normal((8, 8))
    per_seq = (g.random((2, 5, 5)) < 0.5) & ~np.eye(5, dtype=bool)    # [B, T, T], own key ok
    cases = [
        ("the worked example, x [4, 8], h = 2, causal", (x, W_qkv, W_o, 2), {}),
        ("the worked example with causal=False", (x, W_qkv, W_o, 2), {"causal": False}),
        ("a batch x [B, T, d] = [2, 5, 12], h = 3, with biases b_qkv and b_o",
         (xb, Wb, Wo, 3), {"b_qkv": bq, "b_o": bo}),
        ("a padded batch x [2, 5, 12], h = 3, lengths [5, 2], causal=False, padding mask "
         "[B, 1, T]", (xb, Wb, Wo, 3),
         {"causal": False, "mask": padding_mask(np.array([5, 2]), 5)}),
        ("x [B, T, d] = [2, 5, 8] with h = 2 heads and a per-sequence mask [B, T, T] = "
         "[2, 5, 5] (B = h, so a mask without the head axis still broadcasts)",
         (x2, W2, Wo2, 2), {"mask": per_seq}),
        ("a single token x [1, 1, 12], h = 3", (xb[:1, :1], Wb, Wo, 3), {"b_o": bo}),
        ("the worked example, causal=False, with a key mask [T] = [F, F, T, T] (the last "
         "two keys hidden from every query)", (x, W_qkv, W_o, 2),
         {"causal": False, "mask": np.arange(4) >= 2}),
    ]
    for dtype in (np.float64, np.float32):      # one fresh case in each precision
        lead = random_leading(rng, max_axes=2)
        T, h, d_head = (int(n) for n in rng.integers(1, 5, size=3))
        d = h * d_head
        args = (rng.standard_normal((*lead, T, d)), rng.standard_normal((d, 3 * d)) / math.sqrt(d),
                rng.standard_normal((d, d)))
        kwargs = {"b_qkv": rng.standard_normal(3 * d), "b_o": rng.standard_normal(d),
                  "causal": bool(rng.random() < 0.5),
                  "mask": (rng.random((*lead, T, T)) < 0.4) & ~np.eye(T, dtype=bool)}
        args = (*(a.astype(dtype) for a in args), h)
        kwargs = {k: v.astype(dtype) if k.startswith("b_") else v for k, v in kwargs.items()}
        cases.append((f"fresh random x {list(args[0].shape)} ({np.dtype(dtype).name}), h = {h}, "
                      f"biases, causal={kwargs['causal']} and a random per-sequence mask "
                      f"{list(kwargs['mask'].shape)}", args, kwargs))
    return cases


_HEAD_AXIS = ("a per-sequence mask [..., T, T] has no head axis; give the mask a head axis "
              "([..., 1, T, T]) so that it lines up with the scores [..., h, T, T]")


def _diagnose_mha(fn, rng) -> None:
    for case, args, kwargs in _mha_cases(rng):
        mask = kwargs.get("mask")
        hint = _HEAD_AXIS if mask is not None and mask.ndim > 2 else ""
        out, weights = _pair(run(fn, *args, case=case, hint=hint, **kwargs), case)
        want_out, want_w = multi_head_attention(*args, **kwargs)
        weights = _weights_problem(weights, want_w, args, kwargs, case)
        expect_close(weights, want_w, case=case, name="weights", rtol=1e-4, atol=1e-6)
        out = expect_shape(out, want_out.shape, case=case, name="out")
        for change, message in (({"use_W_o": False}, "out is the merged heads before W_o: "
                                 "mix them with the output projection (out @ W_o)"),
                                ({"use_b_o": False}, "out ignores b_o: add it after W_o")):
            bad, _ = _mha_variant(*args, **kwargs, **change)
            if np.allclose(out, bad) and not np.allclose(bad, want_out):
                raise Wrong(f"on {case}, {message}")
        expect_close(out, want_out, case=case, name="out", rtol=1e-4, atol=1e-6,
                     hint="merge the heads back to [..., T, d] (the head axis next to "
                          "d_head, then a reshape) and multiply by W_o")


def _mha_battery(rng):
    return [(args, kwargs) for _, args, kwargs in _mha_cases(rng)]


def _mha_scaled_by_d(x, W_qkv, W_o, h, b_qkv=None, b_o=None, causal=True, mask=None):
    return _mha_variant(x, W_qkv, W_o, h, b_qkv, b_o, causal, mask, scale_width=x.shape[-1])


def _mha_without_W_o(x, W_qkv, W_o, h, b_qkv=None, b_o=None, causal=True, mask=None):
    return _mha_variant(x, W_qkv, W_o, h, b_qkv, b_o, causal, mask, use_W_o=False)


def _mha_straight_split(x, W_qkv, W_o, h, b_qkv=None, b_o=None, causal=True, mask=None):
    return _mha_variant(x, W_qkv, W_o, h, b_qkv, b_o, causal, mask, split=_straight_split)


def _mha_no_head_axis(x, W_qkv, W_o, h, b_qkv=None, b_o=None, causal=True, mask=None):
    return _mha_variant(x, W_qkv, W_o, h, b_qkv, b_o, causal, mask, head_axis=False)


def _mha_no_biases(x, W_qkv, W_o, h, b_qkv=None, b_o=None, causal=True, mask=None):
    return _mha_variant(x, W_qkv, W_o, h, None, None, causal, mask)


def _mha_ignores_mask(x, W_qkv, W_o, h, b_qkv=None, b_o=None, causal=True, mask=None):
    return _mha_variant(x, W_qkv, W_o, h, b_qkv, b_o, causal, None)


register(Exercise(
    id="4.C",
    title="Challenge: multi-head attention, complete",
    kind="implement",
    reference=multi_head_attention,
    diagnose=_diagnose_mha,
    battery=_mha_battery,
    rtol=1e-4,
    atol=1e-6,
    success="out and per-head weights agree with multi_head_attention on the worked "
            "example, with and without the causal mask, with biases, a padding mask, a "
            "[B, T, T] mask with B = h, T = 1 and fresh random shapes in float32 and float64",
    wrong_answers=(
        (_mha_scaled_by_d, "divided by sqrt(d)"),
        (_mha_without_W_o, "before W_o"),
        (_mha_straight_split, "straight to [h, T, d_head]"),
        (_mha_no_head_axis, "give the mask a head axis"),
        (_mha_no_biases, "ignore b_qkv"),
        (_mha_ignores_mask, "the mask is not applied"),
    ),
))
