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

from ._validate import (
    check_even,
    check_pairs,
    check_positive_int,
    check_positive_number,
    check_shape,
    validated,
)


def pair_frequencies(d: int, base: float = 10000.0) -> np.ndarray:
    """How fast each feature pair turns: 1 / base^(2i/d) radians per position, i = 0..d/2-1.

    Pair 0 turns one radian per step; each later pair turns more slowly, the last one
    base^((d-2)/d) times slower (close to ``base`` only for wide heads: 100 times at d = 4
    with base 10000, 7,499 at d = 64). The angle of pair i at position p is p times its
    frequency, in :func:`sinusoidal` (base 10000) and in :func:`rope` alike.

    Shapes: -> [d/2]   (d even)
    """
    d = check_even(d, "d")
    base = check_positive_number(base, "base")
    return 1.0 / base ** (np.arange(0, d, 2) / d)   # [d/2]: 1, ..., base^(-(d-2)/d)


def _table_size(args: dict, sizes: dict) -> None:
    """The ``where=`` check of :func:`sinusoidal`: n_pos and an even d, positive integers."""
    check_positive_int(args["n_pos"], "n_pos")
    check_even(args["d"], "d", "features come in (sin, cos) pairs")


@validated(where=_table_size)
def sinusoidal(n_pos: int, d: int) -> np.ndarray:
    """The fixed position table of the original transformer.

    PE[p, 2i] = sin(p / 10000^(2i/d)) and PE[p, 2i+1] = cos(p / 10000^(2i/d)). Because
    sin a sin b + cos a cos b = cos(a - b), PE[p] . PE[m] depends only on the gap p - m.

    Shapes: -> PE [n_pos, d]   (d even)
    """
    p = np.arange(n_pos)[:, None]                      # [n_pos, 1]: positions 0..n_pos-1
    angles = p / 10000.0 ** (np.arange(0, d, 2) / d)   # [n_pos, 1] / [d/2] -> [n_pos, d/2]
    pe = np.empty((n_pos, d))
    pe[:, 0::2] = np.sin(angles)                       # even columns: sines
    pe[:, 1::2] = np.cos(angles)                       # odd columns: cosines of the same angle
    return pe


def _rope_args(args: dict, sizes: dict) -> None:
    """The ``where=`` check of :func:`rope`: an even width and a positive base."""
    check_pairs(args["x"], "x", "[..., T, d]", "features rotate in pairs")
    check_positive_number(args["base"], "base")


@validated(floats=("x",), where=_rope_args)
def rope(x: np.ndarray, positions: np.ndarray | None = None, base: float = 10000.0
         ) -> np.ndarray:
    """Rotary position embedding: turn each feature pair (2i, 2i+1) of the vector at position
    p by the angle p * base^(-2i/d), counter-clockwise.

    Applied per head to the queries and keys (not the values), after the projections and
    before the scores, so d here is d_head. A rotation by angle a of the query and by angle b
    of the key leaves their dot product depending on a - b only, so the score of positions p
    and m depends on p - m, and rotations preserve every vector's norm. This is the
    interleaved-pairs form of the RoFormer paper; some libraries pair feature i with feature
    i + d/2 instead, which is the same idea with the features permuted. A float32 x stays
    float32.

    Shapes: x [..., T, d] (d even), positions [T] (default 0..T-1) -> [..., T, d]
    """
    T, d = x.shape[-2:]
    p = np.arange(T) if positions is None else positions          # [T]
    angles = p[:, None] / base ** (np.arange(0, d, 2) / d)        # [T, 1] / [d/2] -> [T, d/2]
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]         # [..., T, d] -> 2 x [..., T, d/2]
    out = np.empty_like(x)
    out[..., 0::2] = x_even * cos - x_odd * sin        # [..., T, d/2] * [T, d/2]
    out[..., 1::2] = x_even * sin + x_odd * cos
    return out


def _newest_queries(args: dict, sizes: dict) -> None:
    """The ``where=`` check of :func:`rope_scores`: d_k even and T_q <= T_k."""
    check_pairs(args["q"], "q", "[..., T_q, d_k]", "RoPE turns features in pairs")
    if sizes["T_q"] > sizes["T_k"]:
        raise ValueError(f"q: expected at most T_k = {sizes['T_k']} queries (the newest "
                         f"T_q of the T_k positions), got T_q = {sizes['T_q']}")


@validated(floats=("q", "k"), where=_newest_queries)
def rope_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Scaled RoPE scores of the newest T_q queries against all T_k keys.

    The keys sit at positions 0..T_k-1 and the queries are the last T_q of those positions,
    T_k - T_q .. T_k - 1: a model that keeps the keys of earlier tokens (a KV cache) and
    scores only its newest token has T_q = 1. Each is turned by :func:`rope` at its own
    position, then q k^T / sqrt(d_k) as in chapter 1.

    Shapes: q [..., T_q, d_k], k [..., T_k, d_k] (d_k even, T_q <= T_k) -> [..., T_q, T_k]
    """
    T_q, T_k = q.shape[-2], k.shape[-2]
    q = rope(q, np.arange(T_k - T_q, T_k))     # queries at the last T_q positions
    k = rope(k)                                # keys at positions 0..T_k-1
    # [..., T_q, d_k] @ [..., d_k, T_k] -> [..., T_q, T_k]
    return q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])


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

    When h is not a power of two, this follows the authors' reference code: the slopes for
    the power of two below h, then every other slope of the next power of two. (The paper's
    text gives the geometric sequence 2^(-8k/h) for every h.)

    Shapes: -> [h]
    """
    h = check_positive_int(h, "h")

    def geometric(n: int) -> np.ndarray:
        return 2.0 ** (-8.0 * np.arange(1, n + 1) / n)

    n = 1 << (h.bit_length() - 1)                      # largest power of two <= h
    return np.concatenate([geometric(n), geometric(2 * n)[0::2][: h - n]])


def _bias_size(args: dict, sizes: dict) -> None:
    """The ``where=`` check of :func:`alibi_bias`: T and h positive integers."""
    check_positive_int(args["T"], "T")
    check_positive_int(args["h"], "h")


@validated(where=_bias_size)
def alibi_bias(T: int, h: int) -> np.ndarray:
    """ALiBi: add -slope * (distance to the key) to each head's scores; no position table.

    Future keys (k > q) get 0 here: they are removed by the causal mask. Pass the result as
    ``bias`` to :func:`anatomy.attention.attention` with per-head q, k, v.

    Shapes: -> bias [h, T, T]
    """
    offset = np.arange(T)[None, :] - np.arange(T)[:, None]   # [T, T]: k - q, < 0 for the past
    slopes = alibi_slopes(h)[:, None, None]                   # [h] -> [h, 1, 1]
    return slopes * np.minimum(offset, 0)                     # [h, 1, 1] * [T, T] -> [h, T, T]


# ---- reading a position table (chapter 5: what training puts in GPT's table) -------------


@validated
def similarity_by_gap(sim: np.ndarray, bands: list[tuple[int, int]]) -> np.ndarray:
    """The mean of a table of similarities between positions over the pairs (p, m) whose
    gap |p - m| lies in each band [lo, hi] (both ends included).

    Shapes: sim [n, n] -> [len(bands)]
    """
    n = sim.shape[0]
    gap = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])   # [n, n]: |p - m|
    means = []
    for lo, hi in bands:
        pairs = (gap >= lo) & (gap <= hi)                          # [n, n]
        if not pairs.any():
            raise ValueError(f"bands: no pair of the {n} positions is {lo} to {hi} apart")
        means.append(sim[pairs].mean())
    return np.array(means)


def _three_rows(args: dict, sizes: dict) -> None:
    if sizes["n"] < 3:
        raise ValueError(f"table: expected shape [n, d] with n >= 3 positions, got "
                         f"{args['table'].shape}")


@validated(floats=("table",), where=_three_rows)
def position_axis(table: np.ndarray) -> tuple[float, float]:
    """How much of a position table lies along one direction, and how well that direction
    orders the positions.

    Returns (share, order): the share of the variance of the centred rows that lies along
    their first principal direction, and |correlation| between each row's coordinate along
    that direction and its position. A table that learned "how far into the window am I" as
    one straight axis scores high on both. Random rows score low on both, but their share is
    not 1/d: the n centred rows span at most min(n - 1, d) directions, so the top one holds
    at least 1/min(n - 1, d), and chance lifts it further (about 4% for 64 rows of width 128).

    Shapes: table [n, d] (n >= 3) -> (float, float)
    """
    centred = table - table.mean(axis=0)                       # [n, d]
    _, s, vt = np.linalg.svd(centred, full_matrices=False)     # vt [min(n, d), d]
    if not np.sum(s ** 2) > 0:
        raise ValueError("table: every row is the same, so there is no direction to find "
                         "(expected rows that differ)")
    coord = centred @ vt[0]                                    # [n, d] @ [d] -> [n]
    share = s[0] ** 2 / np.sum(s ** 2)
    order = abs(np.corrcoef(coord, np.arange(len(table)))[0, 1])
    return float(share), float(order)


def shared_directions(a: np.ndarray, b: np.ndarray, keep: float = 0.9) -> tuple[int, float]:
    """How much of table ``b`` lives in the directions that carry table ``a``.

    Returns (r, share): r, the fewest principal directions of the centred rows of ``a`` that
    hold ``keep`` of its variance, and the share of the centred ``b``'s variance that lies in
    those r directions. Two tables in separate directions give a share near 0; random
    directions would give about r / d.

    Shapes: a [n_a, d], b [n_b, d] -> (int, float)
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"a, b: expected two tables [n_a, d] and [n_b, d] of the same width, "
                         f"got shapes {a.shape} and {b.shape}")
    if not 0 < keep <= 1:
        raise ValueError(f"keep: expected a share in (0, 1], got {keep}")
    a_c, b_c = a - a.mean(axis=0), b - b.mean(axis=0)          # [n_a, d], [n_b, d]
    _, s, vt = np.linalg.svd(a_c, full_matrices=False)         # vt [min(n_a, d), d]
    total_a, total_b = np.sum(s ** 2), np.sum(b_c ** 2)
    if not (total_a > 0 and total_b > 0):
        raise ValueError("a, b: every row of a table is the same (expected rows that differ)")
    r = int(np.searchsorted(np.cumsum(s ** 2) / total_a, keep - 1e-12)) + 1
    inside = b_c @ vt[:r].T                                    # [n_b, d] @ [d, r] -> [n_b, r]
    return r, float(np.sum(inside ** 2) / total_b)


@validated(floats=("table",), where=_three_rows)
def principal_directions(table: np.ndarray, k: int) -> np.ndarray:
    """The k directions along which the centred rows of a table spread most, strongest
    first (the top k principal directions), as unit vectors. The sign of each is arbitrary.

    Shapes: table [n, d] (n >= 3) -> [k, d]
    """
    k = check_positive_int(k, "k")
    n, d = table.shape
    if k > min(n, d):
        raise ValueError(f"k: a table of shape {table.shape} has at most {min(n, d)} "
                         f"principal directions, got k={k}")
    centred = table - table.mean(axis=0)                       # [n, d]
    _, _, vt = np.linalg.svd(centred, full_matrices=False)     # vt [min(n, d), d]
    return vt[:k]


@validated(floats=("table", "u"))
def remove_direction(table: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Every row of a table with its component along u taken out, so that no row has any
    length left in that direction (an ablation of one direction). The rows are not centred
    first: each row loses exactly its own component along u.

    Shapes: table [n, d], u [d] -> [n, d]
    """
    length = np.linalg.norm(u)
    if not length > 0:
        raise ValueError("u: expected a direction, got a zero vector")
    unit = u / length                                          # [d]
    return table - np.outer(table @ unit, unit)                # [n, d] - [n, 1] x [1, d]
