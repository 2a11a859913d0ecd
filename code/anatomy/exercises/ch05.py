"""Chapter 5 exercises: the sinusoidal table, rotary positions, and ALiBi (the challenge)."""

from __future__ import annotations

import numpy as np

from ..positions import alibi_bias, alibi_slopes, pair_frequencies, rope, sinusoidal
from . import register
from ._core import Exercise, Wrong, as_array, expect_close, expect_finite, expect_shape, run

# ---- 5.1 the sinusoidal table -----------------------------------------------------------


def _table(n_pos: int, d: int, *, exponent: str = "2i/d", first: int = 0,
           swap: bool = False, halves: bool = False) -> np.ndarray:
    """The sinusoidal table and its usual wrong variants, to recognise a reader's mistake.

    Shapes: -> [n_pos, d]
    """
    p = np.arange(first, first + n_pos, dtype=float)[:, None]  # [n_pos, 1]
    if exponent == "2i/d":
        even = odd = np.arange(0, d, 2) / d                     # pair i, both columns: 2i/d
    elif exponent == "i/d":
        even = odd = np.arange(d // 2) / d                      # the pair index without the 2
    else:                                                       # "column/d": 2i/d, (2i+1)/d
        even, odd = np.arange(0, d, 2) / d, np.arange(1, d, 2) / d
    sin, cos = np.sin(p / 10000.0 ** even), np.cos(p / 10000.0 ** odd)   # [n_pos, d/2] each
    if swap:
        sin, cos = np.cos(p / 10000.0 ** even), np.sin(p / 10000.0 ** odd)
    if halves:
        return np.concatenate([sin, cos], axis=-1)              # [n_pos, d]: sines first
    out = np.empty((n_pos, d))
    out[:, 0::2], out[:, 1::2] = sin, cos
    return out


_SIN_FORMULA = "PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d))"

_SIN_MISTAKES = (
    (dict(swap=True), "sin and cos are swapped: even columns (0, 2, 4, ...) hold the sines and "
                      "odd columns the cosines, so row 0 reads 0, 1, 0, 1, ..."),
    (dict(exponent="i/d"), "the frequency exponent is i/d where it should be 2i/d (i counts "
                           "pairs, so the exponent runs 0, 2/d, 4/d, ...): use "
                           "np.arange(0, d, 2) / d"),
    (dict(exponent="column/d"), "the cosine column 2i+1 uses exponent (2i+1)/d; both columns "
                                "of pair i share the same frequency 1 / 10000^(2i/d)"),
    (dict(first=1), "every row is one position late: positions start at 0, so row 0 must be "
                    "sin 0 = 0 and cos 0 = 1 (np.arange(n_pos), not np.arange(1, n_pos + 1))"),
    (dict(halves=True), "the sines fill the first half of the columns and the cosines the "
                        "second; interleave them: column 2i is the sine and column 2i+1 the "
                        "cosine of the same angle"),
)


def _diagnose_sinusoidal(fn, rng) -> None:
    case = "n_pos = 50, d = 16"
    got = as_array(run(fn, 50, 16, case=case), case=case)
    if got.shape == (16, 50):
        raise Wrong(f"on {case}, the result has shape (16, 50); expected (50, 16) = "
                    "[n_pos, d]: one row per position")
    got = expect_shape(got, (50, 16), case=case)
    expect_finite(got, case=case)
    for kwargs, message in _SIN_MISTAKES:
        if np.allclose(got, _table(50, 16, **kwargs), atol=1e-6):
            raise Wrong(f"on {case}, {message}")
    expect_close(got, sinusoidal(50, 16), case=case, hint=_SIN_FORMULA)

    case = "the hand example n_pos = 2, d = 4"
    got = expect_close(run(fn, 2, 4, case=case), sinusoidal(2, 4), case=case, atol=1e-4,
                       hint="pair 0 has frequency 1 and pair 1 frequency 1/10000^(2/4) = 0.01")

    case = "a single position and one pair, n_pos = 1, d = 2"
    expect_close(run(fn, 1, 2, case=case), [[0.0, 1.0]], case=case)

    case = "a long table, n_pos = 4096, d = 64"
    got = expect_shape(run(fn, 4096, 64, case=case), (4096, 64), case=case)
    expect_close(got, sinusoidal(4096, 64), case=case, hint=_SIN_FORMULA)


def _swapped_sin_cos(n_pos, d):
    return _table(n_pos, d, swap=True)


def _exponent_i_over_d(n_pos, d):
    return _table(n_pos, d, exponent="i/d")


def _positions_from_one(n_pos, d):
    return _table(n_pos, d, first=1)


register(Exercise(
    id="5.1",
    title="The sinusoidal position table",
    kind="implement",
    reference=sinusoidal,
    diagnose=_diagnose_sinusoidal,
    success="sines in even columns, cosines in odd, frequency 1/10000^(2i/d), positions "
            "from 0, for d = 2 up to a 4096 x 64 table",
    wrong_answers=(
        (_swapped_sin_cos, "sin and cos are swapped"),
        (_exponent_i_over_d, "exponent is i/d"),
        (_positions_from_one, "positions start at 0"),
    ),
))

# ---- 5.2 rotary positions ---------------------------------------------------------------


def _rotate(x: np.ndarray, angle_even: np.ndarray, angle_odd: np.ndarray) -> np.ndarray:
    """Rotate pairs (2i, 2i+1), with separate angle tables for the two rows of the rotation
    (equal for a true rotation; unequal to imitate a layout mix-up).

    Shapes: x [..., T, d], angles [T, d/2] -> [..., T, d]
    """
    x_even, x_odd = x[..., 0::2], x[..., 1::2]         # [..., T, d] -> 2 x [..., T, d/2]
    out = np.empty(x.shape)
    out[..., 0::2] = x_even * np.cos(angle_even) - x_odd * np.sin(angle_even)
    out[..., 1::2] = x_even * np.sin(angle_odd) + x_odd * np.cos(angle_odd)
    return out


def _rope_i_over_d(x, positions=None):
    x = np.asarray(x, dtype=float)
    T, d = x.shape[-2:]
    positions = np.arange(T) if positions is None else np.asarray(positions)
    angles = positions[:, None] * 10000.0 ** (-np.arange(d // 2) / d)   # [T, d/2], no 2
    return _rotate(x, angles, angles)


def _rope_mixed_layout(x, positions=None):
    # Angles laid out for the "rotate half" layout ([a_0..a_{d/2-1}, a_0..a_{d/2-1}]) but
    # applied to neighbouring pairs: the two features of a pair turn by different angles.
    x = np.asarray(x, dtype=float)
    T, d = x.shape[-2:]
    positions = np.arange(T) if positions is None else np.asarray(positions)
    angles = positions[:, None] * pair_frequencies(d)   # [T, d/2]
    full = np.concatenate([angles, angles], axis=-1)    # [T, d]
    return _rotate(x, full[:, 0::2], full[:, 1::2])


def _rope_ignores_positions(x, positions=None):
    return rope(x)


def _half_split(x: np.ndarray, positions: np.ndarray | None) -> np.ndarray:
    """The "rotate half" layout: feature i pairs with feature i + d/2. Shapes: as rope."""
    d = x.shape[-1]
    order = np.stack([np.arange(d // 2), np.arange(d // 2) + d // 2], axis=-1).ravel()
    out = np.empty(x.shape)
    out[..., order] = rope(x[..., order], positions)    # interleave, rotate, put back
    return out


_ROTATION = ("rotate each pair (x_2i, x_2i+1) by one angle a = p / 10000^(2i/d): "
             "(x_2i cos a - x_2i+1 sin a, x_2i sin a + x_2i+1 cos a)")


def _diagnose_rope(fn, rng) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 8))
    case = "x [T, d] = [6, 8] with the default positions 0..5"
    got = expect_shape(run(fn, x, case=case), x.shape, case=case)
    expect_finite(got, case=case)
    if not np.allclose(got[0], x[0], atol=1e-9):
        raise Wrong(f"on {case}, row 0 changed: position 0 has angle 0 in every pair, so "
                    "RoPE must leave it as it is (do your positions start at 0?)")
    norms, want = np.linalg.norm(got, axis=-1), np.linalg.norm(x, axis=-1)
    if not np.allclose(norms, want, atol=1e-9):
        row = int(np.argmax(np.abs(norms - want)))
        raise Wrong(f"on {case}, row {row} has length {norms[row]:.4g} but x[{row}] has "
                    f"length {want[row]:.4g}: a rotation preserves length; " + _ROTATION)

    q, k = rng.standard_normal((2, 1, 8))               # one query and one key, [1, d] each

    def score(p: int, m: int) -> float:
        case = f"a query at position {p} and a key at position {m}"
        q_p = expect_shape(run(fn, q, np.array([p]), case=case), (1, 8), case=case)
        k_m = expect_shape(run(fn, k, np.array([m]), case=case), (1, 8), case=case)
        return float(q_p[0] @ k_m[0])                   # [d] . [d]

    for p, m in ((3, 1), (2, 7)):
        for shift in (5, 40):
            before, after = score(p, m), score(p + shift, m + shift)
            if not np.isclose(before, after, atol=1e-8):
                raise Wrong(f"a query at {p} and a key at {m} score {before:.4g}, but shifted "
                            f"together by {shift} they score {after:.4g}: RoPE scores must "
                            "depend only on the offset p - m (the same angle per position "
                            "for queries and keys)")

    positions = np.array([0, 3, 7, 30, 100, 1000])
    case = "x [6, 8] with positions [0, 3, 7, 30, 100, 1000]"
    got = expect_shape(run(fn, x, positions, case=case), x.shape, case=case)
    if np.allclose(got, rope(x), atol=1e-9):
        raise Wrong(f"on {case}, the result is the one for positions 0..5: use the positions "
                    "argument when it is given (a KV cache feeds tokens at positions "
                    "T_past, T_past + 1, ...)")
    if np.allclose(got, _half_split(x, positions), atol=1e-9):
        raise Wrong(f"on {case}, you paired feature i with feature i + d/2 (the 'rotate "
                    "half' layout of some libraries); this book pairs neighbours (2i, 2i+1). "
                    "Both are rotations, but queries, keys and trained weights must agree "
                    "on one layout")
    if np.allclose(got, _rope_i_over_d(x, positions), atol=1e-9):
        raise Wrong(f"on {case}, the frequency exponent is i/d where it should be 2i/d: "
                    "pair i turns by 1 / 10000^(2i/d) per position")
    if np.allclose(got, rope(x, -positions), atol=1e-9):
        raise Wrong(f"on {case}, every pair turns the wrong way: the first feature of a pair "
                    "gets x_2i cos a - x_2i+1 sin a, the second x_2i sin a + x_2i+1 cos a")
    expect_close(got, rope(x, positions), case=case, hint=_ROTATION)

    x = rng.standard_normal((2, 3, 5, 4))
    case = "a batch of heads x [B, h, T, d_head] = [2, 3, 5, 4]"
    expect_close(run(fn, x, case=case), rope(x), case=case,
                 hint="rotate along the last axis; positions run along axis -2 (T) and are "
                      "shared by every batch entry and head")


register(Exercise(
    id="5.2",
    title="Rotary position embedding (RoPE)",
    kind="implement",
    reference=rope,
    diagnose=_diagnose_rope,
    success="norms kept, scores depend only on the offset, positions honoured, batches of "
            "heads rotated along the last axis",
    wrong_answers=(
        (_rope_i_over_d, "exponent is i/d"),
        (_rope_mixed_layout, "a rotation preserves length"),
        (_rope_ignores_positions, "use the positions argument"),
    ),
))

# ---- 5.C challenge: ALiBi ----------------------------------------------------------------


def _diagnose_alibi(fn, rng) -> None:
    case = "T = 4, h = 2"
    got = as_array(run(fn, 4, 2, case=case), case=case)
    if got.shape == (4, 4, 2):
        raise Wrong(f"on {case}, the result has shape (4, 4, 2); expected (2, 4, 4) = "
                    "[h, T, T]: heads first, so it adds to per-head scores [h, T, T]")
    got = expect_shape(got, (2, 4, 4), case=case)
    expect_finite(got, case=case)
    future = np.triu(np.ones((4, 4), dtype=bool), k=1)
    if np.any(got[:, future] != 0):
        raise Wrong(f"on {case}, a future key (k > q) has a nonzero bias: give the future 0 "
                    "(the causal mask removes it) and penalise only the past")
    if np.any(np.diagonal(got, axis1=-2, axis2=-1) != 0):
        raise Wrong(f"on {case}, the diagonal is not 0: a query looking at its own position "
                    "is at distance 0 and gets no penalty")
    if np.any(got[:, ~future] > 0):
        raise Wrong(f"on {case}, some biases are positive: ALiBi subtracts slope x distance, "
                    "so a key further in the past loses more score")
    slopes = -got[:, 1, 0]                                # distance 1: the slope itself
    if np.allclose(slopes, 2.0 ** -np.arange(1, 3)):
        raise Wrong(f"on {case}, the slopes are 1/2, 1/4, ... whatever h; they are "
                    "2^(-8j/h) for heads j = 1..h, from 2^(-8/h) down to 2^(-8)")
    if np.allclose(slopes, alibi_slopes(2)[::-1]):
        raise Wrong(f"on {case}, the heads are in reverse order: head 0 has the steepest "
                    "slope 2^(-8/h)")
    expect_close(got, alibi_bias(4, 2), case=case,
                 hint="bias[j, q, k] = -slope_j * (q - k) for k <= q, slope_j = 2^(-8(j+1)/h)")

    case = "T = 6, h = 8"
    expect_close(run(fn, 6, 8, case=case), alibi_bias(6, 8), case=case,
                 hint="with h = 8 the slopes are 1/2, 1/4, ..., 1/256")

    case = "T = 5, h = 6 (not a power of two)"
    rule = ("take the 4 slopes of h = 4, then every other slope of h = 8 (1/2, 1/8) for the "
            "remaining 2 heads")
    got = as_array(run(fn, 5, 6, case=case), case=case)
    if got.shape != (6, 5, 5):
        raise Wrong(f"on {case}, the result has shape {got.shape}; expected (6, 5, 5), one "
                    f"[T, T] bias per head: {rule}")
    expect_close(got, alibi_bias(5, 6), case=case, hint=rule)

    case = "a single token, T = 1, h = 4"
    expect_close(run(fn, 1, 4, case=case), np.zeros((4, 1, 1)), case=case)


def _alibi_positive(T, h):
    return -alibi_bias(T, h)


def _alibi_both_directions(T, h):
    distance = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])   # [T, T]
    return -alibi_slopes(h)[:, None, None] * distance                  # [h, T, T]


def _alibi_slopes_ignore_h(T, h):
    slopes = 2.0 ** -np.arange(1, h + 1)                                # [h]
    offset = np.minimum(np.arange(T)[None, :] - np.arange(T)[:, None], 0)
    return slopes[:, None, None] * offset                               # [h, T, T]


register(Exercise(
    id="5.C",
    title="Challenge: the ALiBi bias",
    kind="implement",
    reference=alibi_bias,
    diagnose=_diagnose_alibi,
    success="[h, T, T] penalties, zero for the future, geometric slopes for h = 2, 8 and "
            "the non-power-of-two h = 6, and T = 1",
    wrong_answers=(
        (_alibi_positive, "some biases are positive"),
        (_alibi_both_directions, "a future key"),
        (_alibi_slopes_ignore_h, "the slopes are 1/2, 1/4"),
    ),
))
