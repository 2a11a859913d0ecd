"""Telling attention where tokens are (chapter 5).

Attention by itself is permutation-equivariant: shuffle the tokens and the outputs shuffle
the same way. Four ways to break that symmetry:

- learned absolute positions (GPT-2): a trainable table [ctx, d] added to the embeddings;
- sinusoidal positions (Vaswani et al., 2017): a fixed table of sines and cosines;
- rotary positions (RoPE, Su et al., 2021): rotate query and key feature pairs by an angle
  proportional to position, so q_p . k_m depends only on p - m;
- ALiBi (Press et al., 2022): no embedding at all, a distance penalty added to the scores.
"""

from __future__ import annotations

import numpy as np

from ._validate import check_positive_int, check_shape, shape_error


def _pair_angles(positions: np.ndarray, d: int, base: float) -> np.ndarray:
    """Angle of feature pair i at each position: p / base^(2i/d).

    Low pairs spin fast (angle 1 radian per step for i = 0) and tell neighbours apart; high
    pairs spin slowly and give a coarse position.

    Shapes: positions [T] -> angles [T, d/2]
    """
    inv_freq = base ** (np.arange(0, d, 2) / d)       # [d/2]: 1, ..., close to base
    return positions[:, None] / inv_freq              # [T, 1] / [d/2] -> [T, d/2]


def pair_frequencies(d: int, base: float = 10000.0) -> np.ndarray:
    """How fast each feature pair turns: 1 / base^(2i/d) radians per position, i = 0..d/2-1.

    Pair 0 turns one radian per step; each later pair turns more slowly, the last one almost
    ``base`` times slower. The angle of pair i at position p is p times its frequency, in
    :func:`sinusoidal` (base 10000) and in :func:`rope` alike.

    Shapes: -> [d/2]   (d even)
    """
    d = check_positive_int(d, "d")
    if d % 2:
        raise ValueError(f"d: expected an even width (features come in pairs), got d={d}")
    if not base > 0:
        raise ValueError(f"base: expected a positive number, got {base!r}")
    return 1.0 / float(base) ** (np.arange(0, d, 2) / d)   # [d/2]: 1, ..., about 1/base


def sinusoidal(n_pos: int, d: int) -> np.ndarray:
    """The fixed position table of the original transformer.

    PE[p, 2i] = sin(p / 10000^(2i/d)) and PE[p, 2i+1] = cos(p / 10000^(2i/d)). Because
    sin a sin b + cos a cos b = cos(a - b), PE[p] . PE[m] depends only on the gap p - m.

    Shapes: -> PE [n_pos, d]   (d even)
    """
    n_pos, d = check_positive_int(n_pos, "n_pos"), check_positive_int(d, "d")
    if d % 2:
        raise ValueError(f"d: expected an even width (features come in (sin, cos) pairs), "
                         f"got d={d}")
    angles = _pair_angles(np.arange(n_pos), d, 10000.0)   # [n_pos, d/2]
    pe = np.empty((n_pos, d))
    pe[:, 0::2] = np.sin(angles)                           # even columns: sines
    pe[:, 1::2] = np.cos(angles)                           # odd columns: cosines
    return pe


def rope(x: np.ndarray, positions: np.ndarray | None = None, base: float = 10000.0
         ) -> np.ndarray:
    """Rotary position embedding: rotate each feature pair (2i, 2i+1) by position * base^(-2i/d).

    Applied to queries and keys (not values) before the scores. A rotation by angle a of the
    query and by angle b of the key leaves their dot product depending on a - b only, so the
    score of positions p and m depends on p - m, and rotations preserve every vector's norm.
    This is the interleaved-pairs form of the RoFormer paper; some libraries pair feature i
    with feature i + d/2 instead, which is the same idea with the features permuted.

    Shapes: x [..., T, d] (d even), positions [T] (default 0..T-1) -> [..., T, d]
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    dims = check_shape(x, "x", "[..., T, d]")
    T, d = dims["T"], dims["d"]
    if d % 2:
        raise shape_error("x", "[..., T, d]", x.shape, note="with d even (features rotate in "
                          "pairs)")
    if not base > 0:
        raise ValueError(f"base: expected a positive number, got {base!r}")
    positions = np.arange(T) if positions is None else np.asarray(positions)
    check_shape(positions, "positions", "[T]", T=T)
    angles = _pair_angles(positions.astype(np.float64), d, float(base))   # [T, d/2]
    # Cast once so a float32 x stays float32.
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]         # [..., T, d] -> 2 x [..., T, d/2]
    out = np.empty_like(x)
    out[..., 0::2] = x_even * cos - x_odd * sin        # [..., T, d/2] * [T, d/2]
    out[..., 1::2] = x_even * sin + x_odd * cos
    return out


def learned_positions(pos_emb: np.ndarray, T: int, start: int = 0) -> np.ndarray:
    """Rows start..start+T-1 of a learned position table (GPT-2's absolute positions).

    The table has exactly ctx rows: a learned table has nothing to say about position ctx
    or beyond, so asking for it is an error rather than a silent wrap-around.

    Shapes: pos_emb [ctx, d] -> [T, d]
    """
    pos_emb = np.asarray(pos_emb)
    ctx = check_shape(pos_emb, "pos_emb", "[ctx, d]")["ctx"]
    T = check_positive_int(T, "T")
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0:
        raise ValueError(f"start: expected a non-negative integer, got {start!r}")
    if start + T > ctx:
        if start == 0:
            raise ValueError(f"T: T={T} exceeds ctx={ctx} (the learned table pos_emb has "
                             f"no row for position {ctx} or later)")
        raise ValueError(f"start: positions {start}..{start + T - 1} exceed ctx={ctx} (the "
                         f"learned table pos_emb has no row for position {ctx} or later)")
    return pos_emb[start:start + T]                    # [ctx, d] -> [T, d]


def alibi_slopes(h: int) -> np.ndarray:
    """ALiBi's per-head slopes: a geometric sequence 2^(-8/h), 2^(-16/h), ..., 2^(-8).

    When h is not a power of two, the paper takes the slopes for the power of two below h
    and fills the rest with every other slope of the next power of two.

    Shapes: -> [h]
    """
    h = check_positive_int(h, "h")

    def geometric(n: int) -> np.ndarray:
        return 2.0 ** (-8.0 * np.arange(1, n + 1) / n)

    n = 1 << (h.bit_length() - 1)                      # largest power of two <= h
    return np.concatenate([geometric(n), geometric(2 * n)[0::2][: h - n]])


def alibi_bias(T: int, h: int) -> np.ndarray:
    """ALiBi: add -slope * (distance to the key) to each head's scores; no position table.

    Future keys (k > q) get 0 here: they are removed by the causal mask. Pass the result as
    ``bias`` to :func:`anatomy.attention.attention` with per-head q, k, v.

    Shapes: -> bias [h, T, T]
    """
    T = check_positive_int(T, "T")
    offset = np.arange(T)[None, :] - np.arange(T)[:, None]   # [T, T]: k - q, < 0 for the past
    slopes = alibi_slopes(h)[:, None, None]                   # [h] -> [h, 1, 1]
    return slopes * np.minimum(offset, 0)                     # [h, 1, 1] * [T, T] -> [h, T, T]
