"""Chapter 4 exercises: splitting and merging heads, and multi-head attention (the challenge)."""

from __future__ import annotations

import math

import numpy as np

from ..attention import attention
from ..heads import merge_heads, multi_head_attention, split_heads
from ..masks import causal_mask
from . import register
from ._core import Exercise, Wrong, as_array, expect_close, expect_shape, run

_TRANSPOSE = ("reshape to [..., T, h, d_head] first, then swap the T and h axes "
              "(np.swapaxes(x, -3, -2))")


def _features(*shape: int) -> np.ndarray:
    """Entries 0, 1, 2, ... in order: every value is distinct, so a misplaced one shows."""
    return np.arange(math.prod(shape), dtype=float).reshape(shape)


# ---- 4.1 split_heads ---------------------------------------------------------------------


def _straight_split(x: np.ndarray, h: int) -> np.ndarray:
    *lead, T, d = x.shape
    return x.reshape(*lead, h, T, d // h)


def _strided_split(x: np.ndarray, h: int) -> np.ndarray:
    *lead, T, d = x.shape
    return np.moveaxis(x.reshape(*lead, T, d // h, h), -1, -3)


def _check_split_values(got: np.ndarray, x: np.ndarray, h: int, case: str) -> None:
    *lead, T, d = x.shape
    want = split_heads(x, h)
    if got.shape == want.shape and not np.allclose(got, want):
        if np.allclose(got, _straight_split(x, h)):
            raise Wrong(f"on {case}, the shape {got.shape} is right but the values are not: "
                        "reshaping [T, d] straight to [h, T, d_head] deals out consecutive "
                        "chunks of the flat array, so head 0 gets whole tokens instead of "
                        f"columns 0:d_head of every token; {_TRANSPOSE}")
        if np.allclose(got, _strided_split(x, h)):
            raise Wrong(f"on {case}, the heads get interleaved columns (head 0 has columns 0, "
                        f"h, 2h, ...): head j must get the contiguous columns "
                        f"j*d_head:(j+1)*d_head, so reshape to [..., T, h, d_head], not "
                        f"[..., T, d_head, h]")
    expect_close(got, want, case=case, hint="head j must hold columns j*d_head:(j+1)*d_head "
                 "of every token")


def _diagnose_split(fn, rng) -> None:
    x = _features(3, 8)
    case = "x [T, d] = [3, 8] with h = 2"
    got = as_array(run(fn, x, 2, case=case), case=case)
    if got.shape == (4, 2, 3):
        raise Wrong(f"on {case}, the result has shape (4, 2, 3) = [d_head, h, T]; expected "
                    "(2, 3, 4) = [h, T, d_head]: .T / transpose() reverses every axis; swap "
                    "only the T and h axes")
    got = expect_shape(got, (2, 3, 4), case=case)
    _check_split_values(got, x, 2, case)

    x = _features(2, 3, 8)
    case = "a batch x [B, T, d] = [2, 3, 8] with h = 4"
    got = run(fn, x, 4, case=case, hint="keep the leading axes: *lead, T, d = x.shape")
    if np.shape(got) != (2, 4, 3, 2):
        raise Wrong(f"on {case}, the result has shape {np.shape(got)}; expected (2, 4, 3, 2) "
                    "= [B, h, T, d_head]: keep the leading axes (*lead, T, d = x.shape) and "
                    "swap only the T and h axes (np.swapaxes(x, -3, -2))")
    _check_split_values(as_array(got, case=case), x, 4, case)

    x = _features(1, 6)
    case = "a single token x [T, d] = [1, 6] with h = 3"
    expect_close(run(fn, x, 3, case=case), split_heads(x, 3), case=case)

    x = _features(3, 10)
    case = "x [T, d] = [3, 10] with h = 3 (10 is not a multiple of 3)"
    try:
        got = fn(x, 3)
    except NotImplementedError:
        raise
    except ValueError as error:
        if "cannot reshape" in str(error):
            raise Wrong(f"on {case}, numpy's own error ({error}) does not say what is wrong: "
                        "check d % h first and raise ValueError naming d and h") from None
        return
    except Exception as error:
        raise Wrong(f"on {case}, your function raised {type(error).__name__}: {error}; "
                    "raise ValueError naming d and h instead (d is not divisible by h)") from None
    raise Wrong(f"on {case}, your function returned {type(got).__name__} instead of raising: "
                "d must be a multiple of h, so check d % h and raise ValueError")


def _split_no_check(x, h):
    *lead, T, d = x.shape
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


register(Exercise(
    id="4.1",
    title="Split the features into heads",
    kind="implement",
    reference=split_heads,
    diagnose=_diagnose_split,
    success="[..., T, d] -> [..., h, T, d_head] with contiguous columns per head, for one "
            "sequence, a batch, T = 1, and a clear error when h does not divide d",
    wrong_answers=(
        (_split_straight, "reshaping [T, d] straight to [h, T, d_head]"),
        (_split_2d_only, "keep the leading axes"),
        (_split_no_check, "does not say what is wrong"),
    ),
))

# ---- 4.2 merge_heads ---------------------------------------------------------------------


def _diagnose_merge(fn, rng) -> None:
    x = _features(3, 8)
    heads = split_heads(x, 2)                   # [T, d] -> [h, T, d_head] = [2, 3, 4]
    case = "heads [h, T, d_head] = [2, 3, 4] from split_heads(x [3, 8], 2)"
    got = expect_shape(run(fn, heads, case=case), (3, 8), case=case)
    if not np.allclose(got, x):
        if np.allclose(got, heads.reshape(3, 8)):
            raise Wrong(f"on {case}, the shape is right but merge(split(x)) != x: reshaping "
                        "[h, T, d_head] straight to [T, d] mixes tokens; move the head axis "
                        "back next to d_head first (np.swapaxes(x, -3, -2) -> [..., T, h, "
                        "d_head]), then reshape")
        if np.allclose(got, np.moveaxis(heads, -3, -1).reshape(3, 8)):
            raise Wrong(f"on {case}, the columns come out interleaved (head 0's features at "
                        "columns 0, h, 2h, ...): swap to [..., T, h, d_head], not "
                        "[..., T, d_head, h], so head j lands in columns j*d_head:(j+1)*d_head")
        expect_close(got, x, case=case, hint="merge_heads(split_heads(x, h)) must give x back")

    x = _features(2, 5, 12)
    heads = split_heads(x, 3)                   # [B, T, d] -> [B, h, T, d_head] = [2, 3, 5, 4]
    case = "a batch [B, h, T, d_head] = [2, 3, 5, 4]"
    got = run(fn, heads, case=case, hint="keep the leading axes: *lead, h, T, d_head = x.shape")
    if np.shape(got) != (2, 5, 12):
        raise Wrong(f"on {case}, the result has shape {np.shape(got)}; expected (2, 5, 12) = "
                    "[B, T, d]: keep the leading axes (*lead, h, T, d_head = x.shape) and swap "
                    "only the h and T axes")
    expect_close(got, x, case=case, hint="merge_heads(split_heads(x, h)) must give x back")

    heads = split_heads(_features(1, 6), 2)
    case = "a single token [h, T, d_head] = [2, 1, 3]"
    expect_close(run(fn, heads, case=case), merge_heads(heads), case=case)


def _merge_straight(x):
    *lead, h, T, d_head = x.shape
    return x.reshape(*lead, T, h * d_head)


def _merge_interleaved(x):
    *lead, h, T, d_head = x.shape
    return np.moveaxis(x, -3, -1).reshape(*lead, T, h * d_head)


def _merge_3d_only(x):
    h, T, d_head = x.shape
    return x.transpose(1, 0, 2).reshape(T, h * d_head)


register(Exercise(
    id="4.2",
    title="Merge the heads back",
    kind="implement",
    reference=merge_heads,
    diagnose=_diagnose_merge,
    success="[..., h, T, d_head] -> [..., T, d], undoing split_heads exactly, for one "
            "sequence, a batch and T = 1",
    wrong_answers=(
        (_merge_straight, "reshaping [h, T, d_head] straight to [T, d]"),
        (_merge_interleaved, "interleaved"),
        (_merge_3d_only, "keep the leading axes"),
    ),
))

# ---- 4.C challenge: multi-head attention -------------------------------------------------


def _mha_variant(x, W_qkv, W_o, h, causal=True, *, scale_width=None, use_W_o=True,
                 split=split_heads):
    """Multi-head attention with one known mistake switched on (for diagnosis and tests)."""
    q, k, v = np.split(x @ W_qkv, 3, axis=-1)   # [..., T, 3d] -> 3 x [..., T, d]
    q, k, v = (split(t, h) for t in (q, k, v))  # each -> [..., h, T, d_head]
    if scale_width is not None:                 # attention divides by sqrt(d_head); undo that
        q = q * math.sqrt(q.shape[-1] / scale_width)
    T = x.shape[-2]
    out, weights = attention(q, k, v, causal_mask(T) if causal else None)
    out = merge_heads(out)                      # -> [..., T, d]
    return (out @ W_o if use_W_o else out), weights


def _pair(result, case: str):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Wrong(f"on {case}, expected a pair (out, weights), got a "
                    f"{type(result).__name__}: return both, as `return out, weights`")
    return result


def _weights_problem(weights, want_w, x, W_qkv, W_o, h, causal, case):
    """Explain wrong per-head weights by the mistake that reproduces them, if any."""
    *lead, T, d = x.shape
    want = (*lead, h, T, T)
    if np.shape(weights) == (*lead, T, T):
        raise Wrong(f"on {case}, weights have shape {np.shape(weights)}; expected {want} = "
                    "[..., h, T, T]: return every head's weights, not one head or their "
                    "average")
    weights = expect_shape(weights, want, case=case, name="weights")
    if causal and not np.all(weights[..., causal_mask(T)] == 0):
        raise Wrong(f"on {case} (causal=True), some weights above the diagonal are not 0: "
                    "apply the causal mask (True = forbidden) in every head")
    suspects = (
        ({"scale_width": d}, "the scores are divided by sqrt(d); each head must divide by "
         "sqrt(d_head), its own width"),
        ({"split": _straight_split}, "the heads were split by reshaping [T, d] straight to "
         f"[h, T, d_head]; {_TRANSPOSE}"),
        ({"split": _strided_split}, "the heads got interleaved columns; head j must get "
         "columns j*d_head:(j+1)*d_head"),
    )
    for kwargs, message in suspects:
        _, bad = _mha_variant(x, W_qkv, W_o, h, causal, **kwargs)
        if np.allclose(weights, bad) and not np.allclose(bad, want_w):
            raise Wrong(f"on {case}, {message}")
    return weights


def _check_mha(fn, x, W_qkv, W_o, h, causal, case):
    out, weights = _pair(run(fn, x, W_qkv, W_o, h, causal=causal, case=case), case)
    want_out, want_w = multi_head_attention(x, W_qkv, W_o, h, causal=causal)
    weights = _weights_problem(weights, want_w, x, W_qkv, W_o, h, causal, case)
    expect_close(weights, want_w, case=case, name="weights")
    out = expect_shape(out, want_out.shape, case=case, name="out")
    no_mix, _ = _mha_variant(x, W_qkv, W_o, h, causal, use_W_o=False)
    if np.allclose(out, no_mix) and not np.allclose(no_mix, want_out):
        raise Wrong(f"on {case}, out is the merged heads before W_o: mix them with the output "
                    "projection (out @ W_o)")
    expect_close(out, want_out, case=case, name="out", hint="merge the heads back to [T, d] "
                 "(swap h and T, then reshape) and multiply by W_o")


def _diagnose_mha(fn, rng) -> None:
    rs = np.random.RandomState(1)               # the chapter's worked example
    x, W_qkv, W_o = rs.randn(4, 8), rs.randn(8, 24) / math.sqrt(8), rs.randn(8, 8) / math.sqrt(8)
    _check_mha(fn, x, W_qkv, W_o, 2, True, "the worked example, x [4, 8], h = 2, causal")
    _check_mha(fn, x, W_qkv, W_o, 2, False, "the worked example with causal=False")

    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 12))
    W_qkv, W_o = rng.standard_normal((12, 36)) / math.sqrt(12), rng.standard_normal((12, 12))
    _check_mha(fn, x, W_qkv, W_o, 3, True, "a batch x [B, T, d] = [2, 5, 12], h = 3, causal")
    _check_mha(fn, x[:1, :1], W_qkv, W_o, 3, True, "a single token x [1, 1, 12], h = 3")


def _mha_scaled_by_d(x, W_qkv, W_o, h, causal=True):
    return _mha_variant(x, W_qkv, W_o, h, causal, scale_width=x.shape[-1])


def _mha_without_W_o(x, W_qkv, W_o, h, causal=True):
    return _mha_variant(x, W_qkv, W_o, h, causal, use_W_o=False)


def _mha_straight_split(x, W_qkv, W_o, h, causal=True):
    return _mha_variant(x, W_qkv, W_o, h, causal, split=_straight_split)


register(Exercise(
    id="4.C",
    title="Challenge: multi-head attention from the pieces",
    kind="implement",
    reference=multi_head_attention,
    diagnose=_diagnose_mha,
    success="out and per-head weights agree with multi_head_attention on the worked example, "
            "with and without the causal mask, on a batch and for T = 1",
    wrong_answers=(
        (_mha_scaled_by_d, "divided by sqrt(d)"),
        (_mha_without_W_o, "before W_o"),
        (_mha_straight_split, "straight to [h, T, d_head]"),
    ),
))
