"""Chapter 5 exercises: the sinusoidal table (implement), rotary positions (implement), where
one RoPE pair scores below zero (predict), a RoPE head that looks g places back (construct),
scores of the newest query under RoPE (debug), and ALiBi (the challenge)."""

from __future__ import annotations

import numpy as np

from ..attention import softmax
from ..positions import (
    alibi_bias,
    alibi_slopes,
    pair_frequencies,
    rope,
    rope_scores,
    sinusoidal,
)
from . import register
from ._core import (
    Exercise,
    Wrong,
    as_array,
    expect_close,
    expect_finite,
    expect_shape,
    int_set,
    other_convention,
    random_leading,
    run,
)

# ---- 5.1 the sinusoidal table (implement) -----------------------------------------------


def _table(n_pos: int, d: int, *, exponent: str = "2i/d", first: int = 0,
           swap: bool = False, halves: bool = False, times: bool = False) -> np.ndarray:
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
    sign = 1.0 if times else -1.0                               # p * 10000^(+2i/d) if times
    sin, cos = np.sin(p * 10000.0 ** (sign * even)), np.cos(p * 10000.0 ** (sign * odd))
    if swap:
        sin, cos = np.cos(p * 10000.0 ** (sign * even)), np.sin(p * 10000.0 ** (sign * odd))
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
                           "pairs, so the exponent runs 0, 2/d, 4/d, ...)"),
    (dict(exponent="column/d"), "the cosine column 2i+1 uses exponent (2i+1)/d; both columns "
                                "of pair i share the same frequency 1 / 10000^(2i/d)"),
    (dict(first=1), "every row is one position late: positions start at 0, so row 0 must be "
                    "sin 0 = 0 and cos 0 = 1"),
    (dict(halves=True), "the sines fill the first half of the columns and the cosines the "
                        "second; interleave them: column 2i is the sine and column 2i+1 the "
                        "cosine of the same angle"),
    (dict(times=True), "the angle is p * 10000^(2i/d), which makes later pairs turn faster; "
                       "it is p / 10000^(2i/d): pair 0 turns 1 radian per position and each "
                       "later pair more slowly"),
)


def _row_tolerance(n_pos: int) -> np.ndarray:
    """What a float32 table may be off by, row by row: its angles p * w carry a relative
    error of about 1e-7, so the allowed error grows with the position p.

    Shapes: -> [n_pos, 1]
    """
    return 1e-6 + 5e-7 * np.arange(n_pos)[:, None]


def _table_cases(rng) -> list[tuple[str, int, int]]:
    cases = [("n_pos = 50, d = 16", 50, 16),
             ("the hand example n_pos = 2, d = 4", 2, 4),
             ("a single position and one pair, n_pos = 1, d = 2", 1, 2),
             ("a long table, n_pos = 4096, d = 64", 4096, 64)]
    for _ in range(2):
        n_pos, d = int(rng.integers(1, 400)), 2 * int(rng.integers(1, 65))
        cases.append((f"fresh random n_pos = {n_pos}, d = {d}", n_pos, d))
    return cases


def _diagnose_sinusoidal(fn, rng) -> None:
    for case, n_pos, d in _table_cases(rng):
        got = as_array(run(fn, n_pos, d, case=case), case=case)
        if n_pos != d and got.shape == (d, n_pos):
            raise Wrong(f"on {case}, the result has shape {got.shape}; expected "
                        f"{(n_pos, d)} = [n_pos, d]: one row per position")
        got = expect_shape(got, (n_pos, d), case=case)
        expect_finite(got, case=case)
        want = sinusoidal(n_pos, d)
        tol = _row_tolerance(n_pos)
        if n_pos > 1 and np.any(np.abs(got - want) > tol):
            for kwargs, message in _SIN_MISTAKES:
                if np.all(np.abs(got - _table(n_pos, d, **kwargs)) <= tol + 1e-4):
                    raise Wrong(f"on {case}, {message}")
        expect_close(got, want, case=case, atol=tol, rtol=0.0, hint=_SIN_FORMULA)


def _table_battery(rng):
    return [((n_pos, d), {}) for _, n_pos, d in _table_cases(rng)]


def _swapped_sin_cos(n_pos, d):
    return _table(n_pos, d, swap=True)


def _exponent_i_over_d(n_pos, d):
    return _table(n_pos, d, exponent="i/d")


def _positions_from_one(n_pos, d):
    return _table(n_pos, d, first=1)


def _faster_pairs(n_pos, d):
    return _table(n_pos, d, times=True)


def _float32_table(n_pos, d):
    # Right, in float32: the check must accept it (its error grows with the angle).
    p = np.arange(n_pos, dtype=np.float32)[:, None]
    w = np.float32(10000.0) ** (-np.arange(0, d, 2, dtype=np.float32) / np.float32(d))
    out = np.empty((n_pos, d), dtype=np.float32)
    out[:, 0::2], out[:, 1::2] = np.sin(p * w), np.cos(p * w)
    return out


register(Exercise(
    id="5.1",
    title="The sinusoidal position table",
    kind="implement",
    reference=sinusoidal,
    diagnose=_diagnose_sinusoidal,
    battery=_table_battery,
    rtol=1e-5,
    atol=1e-6,
    success="sines in even columns, cosines in odd, frequency 1/10000^(2i/d), positions "
            "from 0, for d = 2 up to a 4096 x 64 table and fresh random sizes",
    wrong_answers=(
        (_swapped_sin_cos, "sin and cos are swapped"),
        (_exponent_i_over_d, "exponent is i/d"),
        (_positions_from_one, "positions start at 0"),
        (_faster_pairs, "later pairs turn faster"),
        (lambda n_pos, d: _table(n_pos, d).T, "one row per position"),
    ),
))

# ---- 5.2 rotary positions (implement) ---------------------------------------------------


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


def _positions(x, positions):
    return np.arange(x.shape[-2]) if positions is None else np.asarray(positions)


def _rope_i_over_d(x, positions=None):
    x = np.asarray(x, dtype=float)
    d = x.shape[-1]
    angles = _positions(x, positions)[:, None] * 10000.0 ** (-np.arange(d // 2) / d)
    return _rotate(x, angles, angles)                   # [T, d/2]: the exponent lacks its 2


def _rope_mixed_layout(x, positions=None):
    # Angles laid out for the "rotate half" layout ([a_0..a_{d/2-1}, a_0..a_{d/2-1}]) but
    # applied to neighbouring pairs: the two features of a pair turn by different angles.
    x = np.asarray(x, dtype=float)
    angles = _positions(x, positions)[:, None] * pair_frequencies(x.shape[-1])   # [T, d/2]
    full = np.concatenate([angles, angles], axis=-1)    # [T, d]
    return _rotate(x, full[:, 0::2], full[:, 1::2])


def _rope_ignores_positions(x, positions=None):
    return rope(x)


def _rope_clockwise(x, positions=None):
    return rope(x, -_positions(x, positions))


def _half_split(x: np.ndarray, positions: np.ndarray | None = None) -> np.ndarray:
    """The "rotate half" layout: feature i pairs with feature i + d/2. Shapes: as rope."""
    x = np.asarray(x, dtype=float)
    d = x.shape[-1]
    order = np.stack([np.arange(d // 2), np.arange(d // 2) + d // 2], axis=-1).ravel()
    out = np.empty(x.shape)
    out[..., order] = rope(x[..., order], positions)    # interleave, rotate, put back
    return out


_ROTATION = ("turn each pair (x_2i, x_2i+1) counter-clockwise by a = p / 10000^(2i/d): "
             "(x_2i cos a - x_2i+1 sin a, x_2i sin a + x_2i+1 cos a)")


def _rope_tolerance(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """What a float32 answer may be off by: its angles carry a relative error of about 1e-7,
    so the allowed error grows with the position, in proportion to the size of x.

    Shapes: x [..., T, d], positions [T] -> [T, 1]
    """
    scale = float(np.abs(x).max()) if x.size else 1.0
    return (2e-6 + 5e-7 * np.abs(positions)[:, None]) * max(scale, 1e-12)


def _rope_close(fn, x, positions, case: str, hint: str = _ROTATION) -> np.ndarray:
    """Run the answer on x (at ``positions``, or the default when None) and compare."""
    args = (x,) if positions is None else (x, positions)
    got = expect_shape(run(fn, *args, case=case), x.shape, case=case)
    expect_finite(got, case=case)
    pos = _positions(x, positions)
    return expect_close(got, rope(x.astype(float), pos), case=case,
                        atol=_rope_tolerance(x, pos), rtol=0.0, hint=hint)


def _check_properties(fn, rng) -> None:
    """Row 0 untouched, lengths kept, scores depending on the offset alone."""
    x = rng.standard_normal((6, 8))
    case = "x [T, d] = [6, 8] with the default positions 0..5"
    got = expect_shape(run(fn, x, case=case), x.shape, case=case)
    expect_finite(got, case=case)
    if not np.allclose(got[0], x[0], rtol=1e-6, atol=1e-9):
        raise Wrong(f"on {case}, row 0 changed: position 0 has angle 0 in every pair, so "
                    "RoPE must leave it as it is (do your positions start at 0?)")
    norms, want = np.linalg.norm(got, axis=-1), np.linalg.norm(x, axis=-1)
    if not np.allclose(norms, want, rtol=1e-5):
        row = int(np.argmax(np.abs(norms - want)))
        raise Wrong(f"on {case}, row {row} has length {norms[row]:.4g} but x[{row}] has "
                    f"length {want[row]:.4g}: a rotation preserves length; " + _ROTATION)

    q, k = rng.standard_normal((2, 1, 8))               # one query and one key, [1, d] each

    def score(p: int, m: int) -> float:
        case = f"a query at position {p} and a key at position {m}"
        q_p = expect_shape(run(fn, q, np.array([p]), case=case), (1, 8), case=case)
        k_m = expect_shape(run(fn, k, np.array([m]), case=case), (1, 8), case=case)
        return float(q_p[0] @ k_m[0])                   # [d] . [d]

    size = float(np.linalg.norm(q) * np.linalg.norm(k))
    for p, m in ((3, 1), tuple(int(i) for i in rng.integers(0, 50, size=2))):
        for shift in (5, int(rng.integers(100, 3000))):
            before, after = score(p, m), score(p + shift, m + shift)
            if not np.isclose(before, after, atol=1e-5 * size + 1e-6 * shift * size):
                raise Wrong(f"a query at {p} and a key at {m} score {before:.4g}, but shifted "
                            f"together by {shift} they score {after:.4g}: RoPE scores must "
                            "depend only on the offset p - m (the same angle per position "
                            "for queries and keys)")


def _check_conventions(fn, rng) -> None:
    """Positions honoured; the layout and the direction of the turn named if they differ."""
    x = rng.standard_normal((6, 8))
    positions = np.array([0, 3, 7, 30, 100, 1000])
    case = "x [6, 8] with positions [0, 3, 7, 30, 100, 1000]"
    got = expect_shape(run(fn, x, positions, case=case), x.shape, case=case)
    tol = _rope_tolerance(x, positions) + 1e-6

    def like(other: np.ndarray) -> bool:
        return bool(np.all(np.abs(got - other) <= tol))

    if not like(rope(x, positions)):
        if like(rope(x)):
            raise Wrong(f"on {case}, the result is the one for positions 0..5: use the "
                        "positions argument when it is given (a KV cache feeds tokens at "
                        "positions T_past, T_past + 1, ...)")
        if like(_half_split(x, positions)):
            raise other_convention(
                f"on {case}, you pair feature i with feature i + d/2 (the 'rotate half' "
                "layout of GPT-NeoX and of Llama in Hugging Face); that is a rotation too",
                "the interleaved pairs (2i, 2i+1) of the RoFormer paper and this chapter: "
                "queries, keys and trained weights must agree on one layout")
        if like(rope(x, -positions)):
            raise other_convention(
                f"on {case}, every pair turns clockwise, by -p / 10000^(2i/d); scores still "
                "depend only on p - m, so that is a valid choice",
                "the counter-clockwise turn of this chapter: (x_2i cos a - x_2i+1 sin a, "
                "x_2i sin a + x_2i+1 cos a)")
        if like(_rope_i_over_d(x, positions)):
            raise Wrong(f"on {case}, the frequency exponent is i/d where it should be 2i/d: "
                        "pair i turns by 1 / 10000^(2i/d) per position")
    _rope_close(fn, x, positions, case)
    # The base away from its default: an answer that hard-codes 10000 differs here only.
    case = f"{case} and base=500"
    got = expect_shape(run(fn, x, positions, base=500.0, case=case), x.shape, case=case)
    if like(rope(x, positions)) and not np.all(np.abs(got - rope(x, positions, base=500.0))
                                               <= tol):
        raise Wrong(f"on {case}, the result is the one for base 10000: use the base "
                    "argument, pair i turns by 1 / base^(2i/d) per position")
    expect_close(got, rope(x, positions, base=500.0), case=case, atol=tol, rtol=0.0,
                 hint=_ROTATION)


def _rope_cases(rng) -> list[tuple[str, np.ndarray, np.ndarray | None]]:
    """Values cases (after the properties): batches of heads, T = 1, fresh random shapes."""
    cases = [("a batch of heads x [B, h, T, d_head] = [2, 3, 5, 4]",
              rng.standard_normal((2, 3, 5, 4)), None),
             ("a single token, x [1, 2] at position 5", rng.standard_normal((1, 2)),
              np.array([5]))]
    for i in range(2):
        lead = random_leading(rng)
        T, d = int(rng.integers(1, 9)), 2 * int(rng.integers(1, 9))
        positions = np.sort(rng.integers(0, 2048, size=T))
        dtype = np.float32 if i == 1 else np.float64
        x = (rng.standard_normal((*lead, T, d)) * 10.0 ** rng.uniform(-1, 2)).astype(dtype)
        cases.append((f"fresh random x {list(x.shape)} ({np.dtype(dtype).name}) at positions "
                      f"{positions.tolist()}", x, positions))
    return cases


_HEADS = ("rotate along the last axis; positions run along axis -2 (T) and are shared by "
          "every batch entry and head")


def _diagnose_rope(fn, rng) -> None:
    _check_properties(fn, rng)
    _check_conventions(fn, rng)
    for case, x, positions in _rope_cases(rng):
        _rope_close(fn, x, positions, case, hint=_HEADS if x.ndim > 2 else _ROTATION)


def _rope_battery(rng):
    x = rng.standard_normal((6, 8))
    cases = [((x,), {}), ((x, np.array([0, 3, 7, 30, 100, 1000])), {}),
             ((x, np.array([0, 3, 7, 30, 100, 1000])), {"base": 500.0})]
    return cases + [((x,) if p is None else (x, p), {}) for _, x, p in _rope_cases(rng)]


register(Exercise(
    id="5.2",
    title="Rotary position embedding (RoPE)",
    kind="implement",
    reference=rope,
    diagnose=_diagnose_rope,
    battery=_rope_battery,
    rtol=1e-5,
    atol=1e-6,
    success="norms kept, scores depend only on the offset, positions honoured, batches of "
            "heads rotated along the last axis, float32 and fresh random shapes",
    wrong_answers=(
        (_rope_i_over_d, "exponent is i/d"),
        (_rope_mixed_layout, "a rotation preserves length"),
        (_rope_ignores_positions, "use the positions argument"),
        (_rope_clockwise, "turns clockwise"),
        (_half_split, "rotate half"),
    ),
))

# ---- 5.3 where does one RoPE pair score below zero? (predict) ---------------------------

_DISTANCES = frozenset(range(11))
_NEGATIVE = frozenset({2, 3, 4, 8, 9, 10})
_WHY_COS = ("one pair turns 1 radian per position, so two copies of the same vector n "
            "positions apart score |q|^2 cos n: below 0 while n lies between 1.57 (pi/2) "
            "and 4.71 (3pi/2), and again between 7.85 (5pi/2) and 11.0 (7pi/2)")


def _diagnose_negative(answer, rng) -> None:
    distances = int_set(answer, what="distances", example="{1, 5}")
    if not distances <= _DISTANCES:
        raise Wrong(f"distances {sorted(distances - _DISTANCES)} are not among the "
                    "choices 0 to 10")
    if distances == _NEGATIVE:
        return
    if distances and distances == set(range(min(distances), 11)):
        raise Wrong("the score does not fall steadily with distance: " + _WHY_COS)
    missing, extra = sorted(_NEGATIVE - distances), sorted(distances - _NEGATIVE)
    parts = []
    if missing:
        parts.append(f"distances {missing} score below 0 too (cos {missing[0]} = "
                     f"{np.cos(missing[0]):.2f})")
    if extra:
        parts.append(f"distances {extra} score above 0 (cos {extra[0]} = "
                     f"{np.cos(extra[0]):.2f})")
    raise Wrong("; ".join(parts) + ": " + _WHY_COS)


register(Exercise(
    id="5.3",
    title="Where does one RoPE pair score below zero?",
    kind="predict",
    reference={2, 3, 4, 8, 9, 10},
    diagnose=_diagnose_negative,
    success="2, 3, 4 and 8, 9, 10: one pair's score is a cosine of the distance",
    explain="With one pair (d_head = 2) the only frequency is 1 radian per position. Both "
            "copies of the vector turn, and what is left in the score is the angle between "
            "them, the distance n in radians: the score is |q|^2 cos n. Cosine is negative "
            "for n between 1.57 and 4.71 and between 7.85 and 11.0, so distances 2, 3, 4 "
            "and 8, 9, 10. One pair alone cannot say 'far': it comes round every 2 pi = "
            "6.28 positions, which is why RoPE uses many pairs turning at different speeds.",
    wrong_answers=(({6, 7, 8, 9, 10}, "does not fall steadily"),
                   ({2, 3, 4}, "score below 0 too"), ({2, 3, 4, 5, 8, 9, 10}, "above 0"),
                   (set(), "score below 0 too"), (7, "answer with a set")),
))

# ---- 5.4 a RoPE head that looks g places back (construct) -------------------------------

_LOOKBACK = 0.9


def lookback_head(d: int, g: int) -> tuple[np.ndarray, np.ndarray]:
    """A query q and a key k [d] whose RoPE head looks exactly g places back, at any position.

    Under RoPE a query at p and a key at m score sum_i q_i . R((m - p) w_i) k_i over the
    pairs i. Take for k the query turned forward by g positions, k_i = R(g w_i) q_i: the
    score becomes sum_i |q_i|^2 cos((m - p + g) w_i), and every cosine is 1 only at
    m = p - g. Long vectors (each pair of length 20) make that one score stand far above the
    rest, so the softmax puts nearly all its weight there.

    Shapes: -> q [d], k [d]   (d even)
    """
    q = 20.0 * np.tile([1.0, 0.0], d // 2)        # [d]: every pair (20, 0)
    k = rope(q[None], np.array([g]))[0]           # [1, d] -> [d]: q as if at position g
    return q, k


def _lookback_weights(q: np.ndarray, k: np.ndarray, p: int) -> np.ndarray:
    """The attention weights of a query q at position p on keys k at positions 0..p.

    Shapes: q [d], k [d] -> [p + 1]
    """
    d = q.shape[-1]
    q_p = rope(q[None], np.array([p]))                # [1, d]
    keys = rope(np.tile(k, (p + 1, 1)))               # [p + 1, d]: the key at 0..p
    return softmax((q_p @ keys.T)[0] / np.sqrt(d))    # [1, d] @ [d, p + 1] -> [p + 1]


def _lookback_cases(rng) -> list[tuple[int, int, list[int]]]:
    """(d, g, query positions): fixed, then fresh random; every key position is in 0..63."""
    cases = [(8, 1, [1, 20, 63]), (16, 0, [0, 40]), (32, 5, [5, 63])]
    for _ in range(2):
        d, g = 2 * int(rng.integers(2, 33)), int(rng.integers(0, 40))
        cases.append((d, g, sorted({g, int(rng.integers(g, 64)), 63})))
    return cases


def _diagnose_lookback(fn, rng) -> None:
    for d, g, query_positions in _lookback_cases(rng):
        case = f"d = {d}, g = {g}"
        got = run(fn, d, g, case=case)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise Wrong(f"on {case}, expected a pair (q, k), got a {type(got).__name__}")
        q = expect_shape(got[0], (d,), case=case, name="q")
        k = expect_shape(got[1], (d,), case=case, name="k")
        expect_finite(q, case=case, name="q")
        expect_finite(k, case=case, name="k")
        for p in query_positions:
            w = _lookback_weights(q, k, p)
            top = int(np.argmax(w))
            if p - top != g:
                raise Wrong(f"on {case}, a query at position {p} puts most of its weight "
                            f"({w[top]:.2f}) on the key {p - top} places back, not {g}: the "
                            "score of a query at p and a key at m depends on m - p; make k "
                            "the query turned forward by g positions, so the two line up "
                            "exactly when m = p - g")
            if not w[p - g] >= _LOOKBACK:
                raise Wrong(f"on {case}, a query at position {p} puts {w[p - g]:.2f} of its "
                            f"weight on the key {g} places back, its favourite, but it needs "
                            f"at least {_LOOKBACK}: lengthen q (or k) so that the best score "
                            "stands far above the others")


def _same_vector(d, g):
    q = 20.0 * np.tile([1.0, 0.0], d // 2)
    return q, q.copy()


def _turned_back(d, g):
    q = 20.0 * np.tile([1.0, 0.0], d // 2)
    return q, rope(q[None], np.array([-g]))[0]


def _too_short(d, g):
    q = np.tile([1.0, 0.0], d // 2)
    return q, rope(q[None], np.array([g]))[0]


register(Exercise(
    id="5.4",
    title="A RoPE head that looks g places back",
    kind="construct",
    reference=lookback_head,
    diagnose=_diagnose_lookback,
    success="the key g places back gets at least 0.9 of the weight for every query "
            "position tried, for fixed and fresh random d and g",
    explain="One construction of many: any q and k whose pairs line up only at offset g "
            "work, once they are long enough.",
    wrong_answers=(
        (_same_vector, "places back, not"),
        (_turned_back, "places back, not"),
        (_too_short, "needs at least 0.9"),
        (lambda d, g: np.ones(d), "expected a pair (q, k)"),
    ),
))

# ---- 5.5 RoPE scores of the newest query (debug) ----------------------------------------


def _given_rope_scores(q, k):
    """RoPE scores of the newest T_q queries against all T_k keys:
    q [..., T_q, d_k], k [..., T_k, d_k] -> [..., T_q, T_k]."""
    q, k = rope(q), rope(k)         # turn each vector by its position
    return q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])


def _scores_at(q, k, first: int, scale: bool = True) -> np.ndarray:
    """Scores with the queries at positions first .. first + T_q - 1 (a wrong ``first`` to
    recognise a reader's mistake). Shapes: as rope_scores."""
    q_rot = rope(q, np.arange(first, first + q.shape[-2]))
    out = q_rot @ np.swapaxes(rope(k), -1, -2)  # [..., T_q, d_k] @ [..., d_k, T_k]
    return out / np.sqrt(q.shape[-1]) if scale else out


def _newest_cases(rng) -> list[tuple[str, np.ndarray, np.ndarray]]:
    cases = [("a whole sequence, q and k [6, 8] (T_q = T_k)", rng.standard_normal((6, 8)),
              rng.standard_normal((6, 8))),
             ("the newest token alone, q [1, 8] against k [6, 8]",
              rng.standard_normal((1, 8)), rng.standard_normal((6, 8))),
             ("a batch of heads, q [2, 3, 3, 4] against k [2, 3, 7, 4]",
              rng.standard_normal((2, 3, 3, 4)), rng.standard_normal((2, 3, 7, 4)))]
    for i in range(2):
        lead = random_leading(rng)
        T_k = int(rng.integers(2, 12))
        T_q, d_k = int(rng.integers(1, T_k)), 2 * int(rng.integers(1, 9))
        dtype = np.float32 if i == 1 else np.float64
        cases.append((f"fresh random q {list((*lead, T_q, d_k))} against k "
                      f"{list((*lead, T_k, d_k))} ({np.dtype(dtype).name})",
                      rng.standard_normal((*lead, T_q, d_k)).astype(dtype),
                      rng.standard_normal((*lead, T_k, d_k)).astype(dtype)))
    return cases


def _diagnose_newest(fn, rng) -> None:
    for case, q, k in _newest_cases(rng):
        want = rope_scores(q.astype(float), k.astype(float))
        got = expect_shape(run(fn, q, k, case=case), want.shape, case=case)
        expect_finite(got, case=case)
        T_q, T_k = q.shape[-2], k.shape[-2]
        atol = 1e-5 * float(np.abs(want).max())
        if np.allclose(got, want, rtol=1e-4, atol=atol):
            continue
        q64, k64 = q.astype(float), k.astype(float)
        if T_q < T_k and np.allclose(got, _scores_at(q64, k64, 0), rtol=1e-4, atol=atol):
            raise Wrong(f"on {case}, the queries are turned as if they sat at positions "
                        f"0..{T_q - 1}; they are the newest {T_q} of the {T_k} positions, "
                        f"{T_k - T_q}..{T_k - 1}, and RoPE must turn each vector by its own "
                        "position")
        if np.allclose(got, _scores_at(q64, k64, T_k - T_q + 1), rtol=1e-4, atol=atol):
            raise Wrong(f"on {case}, the queries are one position late: the newest of "
                        f"{T_k} positions is {T_k - 1}, not {T_k}")
        if np.allclose(got, _scores_at(q64, k64, T_k - T_q, scale=False), rtol=1e-4,
                       atol=atol):
            raise Wrong(f"on {case}, the scores are sqrt(d_k) times too large: keep the "
                        "division by sqrt(d_k)")
        expect_close(got, want, case=case, rtol=1e-4, atol=atol,
                     hint="turn the keys at 0..T_k-1 and the queries at T_k-T_q..T_k-1")


def _newest_battery(rng):
    return [((q, k), {}) for _, q, k in _newest_cases(rng)]


def _one_late(q, k):
    return _scores_at(np.asarray(q, float), np.asarray(k, float), k.shape[-2] - q.shape[-2] + 1)


def _fixed_unscaled(q, k):
    return _scores_at(np.asarray(q, float), np.asarray(k, float), k.shape[-2] - q.shape[-2],
                      scale=False)


def _query_not_turned(q, k):
    return np.asarray(q) @ np.swapaxes(rope(k), -1, -2) / np.sqrt(q.shape[-1])


register(Exercise(
    id="5.5",
    title="RoPE scores of the newest token",
    kind="debug",
    reference=rope_scores,
    given=_given_rope_scores,
    diagnose=_diagnose_newest,
    battery=_newest_battery,
    rtol=1e-5,
    atol=1e-8,
    success="the library's scores for whole sequences, a single newest token, batches "
            "of heads and fresh random shapes",
    explain="The bug is rope(q): it turns the queries as if they were the first T_q "
            "positions. When the queries are the whole sequence that is right, which is "
            "why the function looks fine until it scores only the newest token. Turn them "
            "at T_k - T_q .. T_k - 1.",
    wrong_answers=(
        (_one_late, "one position late"),
        (_fixed_unscaled, "sqrt(d_k) times too large"),
        (_query_not_turned, "should be"),
    ),
))

# ---- 5.C challenge: ALiBi (implement) ---------------------------------------------------


def _alibi_cases(rng) -> list[tuple[str, int, int]]:
    cases = [("T = 4, h = 2", 4, 2), ("T = 6, h = 8", 6, 8),
             ("T = 5, h = 6 (not a power of two)", 5, 6),
             ("a single token, T = 1, h = 4", 1, 4)]
    for _ in range(2):
        T, h = int(rng.integers(1, 13)), int(rng.integers(1, 17))
        cases.append((f"fresh random T = {T}, h = {h}", T, h))
    return cases


_NOT_POWER = ("when h is not a power of two, take the slopes of the largest power of two "
              "n below h, then every other slope of 2n heads (the 1st, 3rd, ...) for the "
              "remaining h - n heads")


def _check_alibi_shape(fn, case: str, T: int, h: int) -> np.ndarray:
    got = as_array(run(fn, T, h, case=case), case=case)
    if T != h and got.shape == (T, T, h):
        raise Wrong(f"on {case}, the result has shape {got.shape}; expected {(h, T, T)} = "
                    "[h, T, T]: heads first, so it adds to per-head scores [h, T, T]")
    got = expect_shape(got, (h, T, T), case=case)
    expect_finite(got, case=case)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    if np.any(got[:, future] != 0):
        raise Wrong(f"on {case}, a future key (k > q) has a nonzero bias: give the future 0 "
                    "(the causal mask removes it) and penalise only the past")
    if np.any(np.diagonal(got, axis1=-2, axis2=-1) != 0):
        raise Wrong(f"on {case}, the diagonal is not 0: a query looking at its own position "
                    "is at distance 0 and gets no penalty")
    if np.any(got[:, ~future] > 0):
        raise Wrong(f"on {case}, some biases are positive: ALiBi subtracts slope x distance, "
                    "so a key further in the past loses more score")
    return got


def _diagnose_alibi(fn, rng) -> None:
    for case, T, h in _alibi_cases(rng):
        got = _check_alibi_shape(fn, case, T, h)
        if T > 1 and h > 1:
            slopes = -got[:, 1, 0]                        # distance 1: the slope itself
            if np.allclose(slopes, 2.0 ** -np.arange(1, h + 1)) and h != 8:
                raise Wrong(f"on {case}, the slopes are 1/2, 1/4, ... whatever h; they are "
                            "2^(-8j/h) for heads j = 1..h, from 2^(-8/h) down to 2^(-8)")
            if np.allclose(slopes, alibi_slopes(h)[::-1]):
                raise Wrong(f"on {case}, the heads are in reverse order: head 0 has the "
                            "steepest slope 2^(-8/h)")
        hint = ("bias[j, q, k] = -slope_j * (q - k) for k <= q, slope_j = 2^(-8(j+1)/h)"
                if h & (h - 1) == 0 else _NOT_POWER)
        expect_close(got, alibi_bias(T, h), case=case, rtol=1e-6, atol=1e-12, hint=hint)


def _alibi_battery(rng):
    return [((T, h), {}) for _, T, h in _alibi_cases(rng)]


def _alibi_positive(T, h):
    return -alibi_bias(T, h)


def _alibi_both_directions(T, h):
    distance = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])   # [T, T]
    return -alibi_slopes(h)[:, None, None] * distance                  # [h, T, T]


def _alibi_slopes_ignore_h(T, h):
    slopes = 2.0 ** -np.arange(1, h + 1)                                # [h]
    offset = np.minimum(np.arange(T)[None, :] - np.arange(T)[:, None], 0)
    return slopes[:, None, None] * offset                               # [h, T, T]


def _alibi_power_of_two_only(T, h):
    slopes = 2.0 ** (-8.0 * np.arange(1, h + 1) / h)                   # [h]: no special case
    offset = np.minimum(np.arange(T)[None, :] - np.arange(T)[:, None], 0)
    return slopes[:, None, None] * offset                               # [h, T, T]


register(Exercise(
    id="5.C",
    title="Challenge: the ALiBi bias",
    kind="implement",
    reference=alibi_bias,
    helpers=(alibi_slopes,),       # the hard part: a head count that is not a power of two
    diagnose=_diagnose_alibi,
    battery=_alibi_battery,
    rtol=1e-6,
    atol=1e-12,
    success="[h, T, T] penalties, zero for the future, geometric slopes for h = 2, 8, the "
            "non-power-of-two h = 6, T = 1 and fresh random sizes",
    wrong_answers=(
        (_alibi_positive, "some biases are positive"),
        (_alibi_both_directions, "a future key"),
        (_alibi_slopes_ignore_h, "the slopes are 1/2, 1/4"),
        (_alibi_power_of_two_only, "not a power of two"),
    ),
))
