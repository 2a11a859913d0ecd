"""anatomy.positions: chapter 5's hand example and table, RoPE's relative-position property,
the learned table's hard limit, ALiBi's slopes, and their errors."""

import numpy as np
import pytest

from anatomy.attention import attention
from anatomy.examples import ali_makan
from anatomy.heads import multi_head_attention
from anatomy.masks import causal_mask
from anatomy.positions import (
    alibi_bias,
    alibi_slopes,
    learned_positions,
    pair_frequencies,
    position_axis,
    principal_directions,
    remove_direction,
    rope,
    rope_scores,
    shared_directions,
    similarity_by_gap,
    sinusoidal,
)


def test_hand_example_d4_p1():
    # Pair 0 spins at frequency 1, pair 1 at 1 / 10000^(2/4) = 0.01.
    np.testing.assert_array_equal(np.round(sinusoidal(2, 4)[1], 4),
                                  [0.8415, 0.5403, 0.0100, 1.0000])


def test_ch5_table_first_rows():
    pe = sinusoidal(50, 16)
    assert pe.shape == (50, 16)
    np.testing.assert_array_equal(np.round(pe[:3, :6], 2),
                                  [[0.00, 1.00, 0.00, 1.00, 0.00, 1.00],
                                   [0.84, 0.54, 0.31, 0.95, 0.10, 1.00],
                                   [0.91, -0.42, 0.59, 0.81, 0.20, 0.98]])


def test_ch5_dot_products_depend_only_on_the_gap():
    pe = sinusoidal(50, 16)
    dots = [round(float(pe[10] @ pe[m]), 2) for m in (10, 11, 12, 15, 30)]
    assert dots == [8.00, 7.49, 6.37, 6.14, 5.78]
    assert round(float(pe[30] @ pe[35]), 2) == 6.14
    np.testing.assert_allclose(pe[30] @ pe[35], pe[10] @ pe[15], atol=1e-12)
    # A hint, not a ruler: gap 5 scores lower than gap 2 but not monotonically with distance.
    assert pe[10] @ pe[15] < pe[10] @ pe[12]


def test_adding_positions_breaks_permutation_symmetry():
    rng = np.random.default_rng(0)
    T, d = 5, 8
    x = rng.standard_normal((T, d))
    W_qkv, W_o = rng.standard_normal((d, 3 * d)), rng.standard_normal((d, d))
    perm = np.array([2, 1, 0, 3, 4])          # "nasi makan Ali ..." for "Ali makan nasi ..."
    plain, _ = multi_head_attention(x, W_qkv, W_o, 2, causal=False)
    shuffled, _ = multi_head_attention(x[perm], W_qkv, W_o, 2, causal=False)
    np.testing.assert_allclose(shuffled, plain[perm], atol=1e-12)   # positions cannot be told
    pe = sinusoidal(T, d)
    with_pos, _ = multi_head_attention(x + pe, W_qkv, W_o, 2, causal=False)
    shuffled_pos, _ = multi_head_attention(x[perm] + pe, W_qkv, W_o, 2, causal=False)
    assert not np.allclose(shuffled_pos, with_pos[perm], atol=1e-6)


# ---------------------------------------------------------------- RoPE


def test_rope_scores_depend_only_on_the_offset():
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal(16), rng.standard_normal(16)

    def score(p, m):
        return rope(q[None], np.array([p]))[0] @ rope(k[None], np.array([m]))[0]

    for p, m in [(3, 1), (7, 2), (0, 9)]:
        for shift in (1, 10, 250):
            np.testing.assert_allclose(score(p + shift, m + shift), score(p, m), atol=1e-10)
    assert not np.isclose(score(3, 1), score(3, 2))


def test_rope_preserves_norms_and_leaves_position_zero_alone():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 6, 8))                  # [B, h, T, d_head]
    y = rope(x)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1),
                               atol=1e-12)
    np.testing.assert_allclose(y[..., 0, :], x[..., 0, :], atol=1e-15)


def test_rope_is_complex_multiplication_of_feature_pairs():
    # An independent formulation: pair (x_2i, x_2i+1) as x_2i + i x_2i+1, times e^(i p theta_i).
    rng = np.random.default_rng(3)
    x, positions = rng.standard_normal((5, 8)), np.array([0, 1, 4, 9, 30])
    theta = 500.0 ** (-np.arange(4) * 2 / 8)               # base 500: the argument is used
    z = (x[:, 0::2] + 1j * x[:, 1::2]) * np.exp(1j * positions[:, None] * theta)
    y = rope(x, positions, base=500.0)
    np.testing.assert_allclose(y[:, 0::2], z.real, atol=1e-12)
    np.testing.assert_allclose(y[:, 1::2], z.imag, atol=1e-12)


def test_rope_keeps_float32_and_promotes_integers():
    assert rope(np.ones((3, 4), dtype=np.float32)).dtype == np.float32
    np.testing.assert_allclose(rope(np.ones((3, 4), dtype=int)), rope(np.ones((3, 4))))
    np.testing.assert_allclose(rope(np.ones((3, 4)), [0, 1, 2]), rope(np.ones((3, 4))))


def test_rope_scores_put_the_newest_queries_at_the_last_positions():
    rng = np.random.default_rng(4)
    q, k = rng.standard_normal((2, 2, 3, 7, 8))               # [B, h, T, d_head] each
    full = rope_scores(q, k)                                  # T_q = T_k = 7
    want = rope(q) @ np.swapaxes(rope(k), -1, -2) / np.sqrt(8)
    np.testing.assert_allclose(full, want, atol=1e-12)
    # The newest token alone scores exactly as the last row of the full table.
    np.testing.assert_allclose(rope_scores(q[..., -1:, :], k), full[..., -1:, :], atol=1e-12)
    np.testing.assert_allclose(rope_scores(q[..., -3:, :], k), full[..., -3:, :], atol=1e-12)
    # Turning the queries at 0..T_q-1 instead (the bug of exercise 5.5) gives other scores.
    wrong = rope(q[..., -1:, :]) @ np.swapaxes(rope(k), -1, -2) / np.sqrt(8)
    assert not np.allclose(wrong, full[..., -1:, :])


def test_rope_scores_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"q: expected shape \[\.\.\., T_q, d_k\] with d_k even"):
        rope_scores(np.ones((2, 5)), np.ones((3, 5)))
    with pytest.raises(ValueError, match=r"q: expected at most T_k = 3 queries .* got T_q = 4"):
        rope_scores(np.ones((4, 6)), np.ones((3, 6)))
    with pytest.raises(ValueError, match=r"k: expected shape \[\.\.\., T_k, d_k\] = "
                                         r"\(\.\.\., 3, 6\), got \(3, 4\)"):
        rope_scores(np.ones((1, 6)), np.ones((3, 4)))


# ---------------------------------------------------------------- learned table and ALiBi


def test_learned_positions_are_rows_of_the_table():
    table = np.arange(64 * 4, dtype=float).reshape(64, 4)
    np.testing.assert_array_equal(learned_positions(table, 5), table[:5])
    np.testing.assert_array_equal(learned_positions(table, 3, start=61), table[61:])


def test_alibi_slopes_and_bias():
    np.testing.assert_allclose(alibi_slopes(8), 2.0 ** -np.arange(1, 9))
    # Not a power of two: the 4-head slopes, then every other 8-head slope.
    np.testing.assert_allclose(alibi_slopes(6), 2.0 ** -np.array([2, 4, 6, 8, 1, 3]))
    bias = alibi_bias(4, 2)
    assert bias.shape == (2, 4, 4)
    np.testing.assert_allclose(bias[0], -0.0625 * np.array([[0, 0, 0, 0],
                                                            [1, 0, 0, 0],
                                                            [2, 1, 0, 0],
                                                            [3, 2, 1, 0]]))


# ---------------------------------------------------------------- errors


def test_odd_widths_are_rejected():
    with pytest.raises(ValueError, match=r"d: expected an even width .* got d=15"):
        sinusoidal(10, 15)
    with pytest.raises(ValueError, match=r"x: expected shape \[\.\.\., T, d\] with d even "
                                         r"\(features rotate in pairs\), got \(2, 5, 7\)"):
        rope(np.ones((2, 5, 7)))


def test_rope_positions_must_match_T():
    with pytest.raises(ValueError, match=r"positions: expected shape \[T\] = \(5,\), got \(4,\)"):
        rope(np.ones((5, 4)), np.arange(4))


def test_counts_must_be_positive_integers():
    with pytest.raises(ValueError, match=r"n_pos: expected a positive integer, got 0"):
        sinusoidal(0, 4)
    with pytest.raises(ValueError, match=r"d: expected a positive integer, got 4\.0"):
        sinusoidal(3, 4.0)
    with pytest.raises(ValueError, match=r"T: expected a positive integer, got 0"):
        alibi_bias(0, 2)
    with pytest.raises(ValueError, match=r"h: expected a positive integer, got True"):
        alibi_bias(3, True)
    with pytest.raises(ValueError, match=r"base: expected a positive number, got -1"):
        rope(np.ones((3, 4)), base=-1)


def test_learned_table_has_nothing_past_ctx():
    table = np.zeros((64, 8))
    with pytest.raises(ValueError, match=r"T: T=80 exceeds ctx=64"):
        learned_positions(table, 80)
    with pytest.raises(ValueError, match=r"start: positions 60\.\.67 exceed ctx=64"):
        learned_positions(table, 8, start=60)
    with pytest.raises(ValueError, match=r"pos_emb: expected shape \[ctx, d\], got \(64,\)"):
        learned_positions(np.zeros(64), 8)


# ---------------------------------------------------------------- chapter 5's other figures


def test_pair_frequencies_match_the_hand_example_and_both_schemes():
    np.testing.assert_allclose(pair_frequencies(4), [1.0, 0.01])
    omega = pair_frequencies(16)
    angles = np.arange(50)[:, None] * omega                # [n_pos, d/2]
    pe = sinusoidal(50, 16)
    np.testing.assert_allclose(pe[:, 0::2], np.sin(angles), atol=1e-12)
    np.testing.assert_allclose(pe[:, 1::2], np.cos(angles), atol=1e-12)
    # The dot product of two rows is the sum of cos(gap * omega_i) (chapter 5's identity).
    for p, m in [(10, 15), (30, 35), (10, 30)]:
        np.testing.assert_allclose(pe[p] @ pe[m], np.cos((p - m) * omega).sum(), atol=1e-12)
    # RoPE turns pair i of a position-1 vector by omega_i (base 500 to see the argument used).
    x = np.array([[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0]])
    turned = rope(x, np.array([0, 1]), base=500.0)[1]
    np.testing.assert_allclose(np.arctan2(turned[1::2], turned[0::2]),
                               pair_frequencies(4, base=500.0), atol=1e-12)
    with pytest.raises(ValueError, match=r"d: expected an even width .* got d=5"):
        pair_frequencies(5)
    with pytest.raises(ValueError, match=r"base: expected a positive number, got 0"):
        pair_frequencies(4, base=0)


def test_ch5_permutation_equivariance_of_single_head_attention():
    ex = ali_makan()
    X, W_q, W_k, W_v = ex["X"], ex["W_q"], ex["W_k"], ex["W_v"]

    def self_attend(X):
        return attention(X @ W_q, X @ W_k, X @ W_v)[0]

    swap = [2, 1, 0]                                       # "nasi makan Ali"
    np.testing.assert_allclose(self_attend(X[:3][swap]), self_attend(X[:3])[swap], atol=1e-12)
    np.testing.assert_allclose(self_attend(X[:3])[0], self_attend(X[:3][swap])[2], atol=1e-12)
    pe = sinusoidal(3, 8)
    moved = np.abs(self_attend(X[:3][swap] + pe) - self_attend(X[:3] + pe)[swap]).max()
    assert round(float(moved), 2) == 1.80


def test_ch5_sinusoidal_and_rope_are_defined_past_the_trained_length():
    pe = sinusoidal(4096, 16)
    np.testing.assert_allclose(pe[3000] @ pe[3005], pe[10] @ pe[15], atol=1e-9)
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 1, 8))

    def score(p, m):
        return (rope(q, np.array([p])) @ rope(k, np.array([m])).T).item()

    scores = [score(5 + s, 2 + s) for s in (0, 1, 10, 100, 1000, 4000)]
    assert np.ptp(scores) < 1e-10
    assert round(scores[0], 2) == -1.59


def test_ch5_alibi_without_content_prefers_recent_keys():
    zeros, v = np.zeros((5, 4)), np.eye(5)
    bias = alibi_bias(5, 8)
    _, weights = attention(zeros, zeros, v, mask=causal_mask(5), bias=bias[0])
    # Slope 1/2: weight on a key g places back is proportional to exp(-g / 2).
    want = np.exp(-0.5 * np.arange(4, -1, -1))
    np.testing.assert_allclose(weights[-1], want / want.sum(), atol=1e-12)
    assert np.all(np.diff(weights[-1]) > 0)


# ---------------------------------------------------------------- chapter 5's pictures


def test_position_similarity_is_relative_for_sinusoidal_and_rope_only():
    from anatomy.viz.positions import SCHEMES, position_similarity

    tables = {s: position_similarity(s, n_pos=32, d=16) for s in SCHEMES}
    for scheme, sim in tables.items():
        assert sim.shape == (32, 32)
        # Constant along every diagonal = depends on m - p only.
        relative = all(np.ptp(np.diagonal(sim, offset)) < 1e-9 for offset in range(-31, 32))
        assert relative == (scheme != "learned (untrained)"), scheme
    np.testing.assert_allclose(np.diag(tables["sinusoidal"]), 1.0)
    pe = sinusoidal(32, 16)
    np.testing.assert_allclose(tables["sinusoidal"], pe @ pe.T / 8, atol=1e-12)   # |row|^2 = d/2
    with pytest.raises(ValueError, match=r"scheme: expected one of"):
        position_similarity("alibi")


def test_ch5_figures_draw_the_syllabus_numbers():
    import matplotlib.pyplot as plt

    from anatomy.viz.positions import (
        SCHEMES,
        draw_dot_vs_gap,
        draw_rope_pair,
        draw_similarity,
        draw_sinusoidal_table,
    )

    pe = sinusoidal(50, 16)
    fig = draw_sinusoidal_table(pe)
    assert "[50, 16]" in fig.axes[0].get_title()
    np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), pe)
    plt.close(fig)

    fig = draw_dot_vs_gap(pe, starts=(10, 30), marks=(1, 2, 5, 20))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["7.49", "6.37", "6.14", "5.78"]
    from_10, from_30 = ax.lines[0].get_ydata(), ax.lines[1].get_ydata()
    np.testing.assert_allclose(from_10[: len(from_30)], from_30, atol=1e-12)   # gap only
    plt.close(fig)

    fig = draw_rope_pair(pair=(1.0, 0.4), positions=range(6), query_key=(4, 1), shift=2)
    left, right = fig.axes
    assert "q . k = -1.01, -1.01" in right.get_title()
    # Each arrow's farthest vertex from the origin is its tip: every tip is at |pair|.
    tips = [np.linalg.norm(patch.get_xy(), axis=-1).max() for patch in left.patches]
    np.testing.assert_allclose(tips, np.hypot(1.0, 0.4), atol=1e-9)
    assert len(tips) == 6
    plt.close(fig)

    # Chapter 5 draws pair 1 of d_head = 16: each arrow is p * omega_1 from the x axis.
    omega = pair_frequencies(16)[1]
    fig = draw_rope_pair(pair=(1.0, 0.0), positions=range(6), query_key=(3, 0), shift=4,
                         step=omega)
    left, right = fig.axes
    assert "turns 0.32 rad per step" in left.get_title()
    assert "q . k = 0.58, 0.58" in right.get_title()                 # cos(3 omega_1)
    tips = [max(patch.get_xy(), key=np.linalg.norm) for patch in left.patches]
    np.testing.assert_allclose([np.arctan2(y, x) for x, y in tips], omega * np.arange(6),
                               atol=1e-9)
    plt.close(fig)

    fig = draw_similarity(SCHEMES, p=20, m=25, n_pos=64, d=16)
    assert len(fig.axes) == 6
    assert fig.axes[1].get_title() == "row p = 20: cos(p=20, m=25) = 0.77"
    plt.close(fig)


def test_position_similarity_rope_compares_one_vector_with_itself():
    from anatomy.viz.positions import position_similarity

    sim = position_similarity("RoPE", n_pos=40, d=16, seed=3)
    np.testing.assert_allclose(np.diag(sim), 1.0, atol=1e-12)          # as sinusoidal
    x = np.random.default_rng(3).standard_normal(16)
    pairs = x[0::2] ** 2 + x[1::2] ** 2                                # |x_i|^2 per pair
    for gap in (1, 5, 17):
        want = (pairs * np.cos(gap * pair_frequencies(16))).sum() / (x @ x)
        np.testing.assert_allclose(np.diagonal(sim, gap), want, atol=1e-12)


def test_gap_curves_wiggle_at_d16_and_fall_almost_monotonically_at_d512():
    import matplotlib.pyplot as plt

    from anatomy.viz.positions import draw_gap_curves, first_rise, gap_curve, gap_steps

    small = gap_curve(16, 64) * 8                              # back to PE . PE
    np.testing.assert_allclose(small[[0, 1, 2, 5, 20]], [8.0, 7.49, 6.37, 6.14, 5.78],
                               atol=0.005)
    assert first_rise(gap_curve(16, 64)) == 4
    # The recorded climbs of the d = 16 curve: gaps 4-6, 11-13 and 17-19.
    rises = np.flatnonzero(np.diff(small) > 0)[:9] + 1
    assert rises.tolist() == [4, 5, 6, 11, 12, 13, 17, 18, 19]
    wide = gap_curve(512, 64)
    assert first_rise(wide) == 44 and np.all(np.diff(wide[:44]) < 0)
    assert first_rise(np.arange(5.0)[::-1]) is None
    # Chapter 5's figures: d = 512 rises at only 4 of 63 steps (gaps 44, 50, 56, 62), each
    # by under 3e-4 of the scale; d = 16 rises at 33, by up to 0.15.
    narrow, broad = gap_steps(gap_curve(16, 64)), gap_steps(wide)
    assert (narrow["rises"], narrow["first_rise"], narrow["in_order"]) == (33, 4, 1219)
    assert (broad["rises"], broad["first_rise"], broad["in_order"]) == (4, 44, 2011)
    assert narrow["pairs"] == broad["pairs"] == 64 * 63 // 2
    assert (np.flatnonzero(np.diff(wide) > 0) + 1).tolist() == [44, 50, 56, 62]
    np.testing.assert_allclose([narrow["max_rise"], broad["max_rise"]], [0.1504, 0.000291],
                               rtol=1e-3)
    np.testing.assert_allclose([broad["min_fall"], broad["max_fall"]], [0.0001245, 0.07806],
                               rtol=1e-3)
    # A curve that only falls is a perfect ruler; one that never falls has no falls.
    assert gap_steps(np.arange(5.0)[::-1]) == {
        "rises": 0, "first_rise": None, "max_rise": 0.0, "min_fall": 1.0, "max_fall": 1.0,
        "in_order": 10, "pairs": 10}
    flat_up = gap_steps(np.arange(4.0))
    assert (flat_up["rises"], flat_up["min_fall"], flat_up["in_order"]) == (3, 0.0, 0)
    fig = draw_gap_curves((16, 512), 64)
    assert [t.get_text() for t in fig.axes[0].texts] == [
        "largest rise: 0.15 (gap 55)", "largest rise: 0.00029 (gap 62)"]
    plt.close(fig)


def test_similarity_by_gap_and_position_axis():
    sim = np.array([[1.0, 0.5, 0.1], [0.5, 1.0, 0.3], [0.1, 0.3, 1.0]])
    np.testing.assert_allclose(similarity_by_gap(sim, [(0, 0), (1, 1), (2, 2), (1, 2)]),
                               [1.0, 0.4, 0.1, (0.5 + 0.3 + 0.1) / 3])
    with pytest.raises(ValueError, match=r"bands: no pair of the 3 positions is 5 to 9 apart"):
        similarity_by_gap(sim, [(5, 9)])
    with pytest.raises(ValueError, match=r"sim: expected shape \[n, n\]"):
        similarity_by_gap(np.ones((2, 3)), [(1, 1)])
    # A table whose rows walk along one straight line: all variance on one axis, in order.
    line = np.arange(10.0)[:, None] * np.array([[1.0, -2.0, 0.5]])     # [10, 3]
    share, order = position_axis(line)
    assert share == pytest.approx(1.0) and order == pytest.approx(1.0)
    share, order = position_axis(np.random.default_rng(0).standard_normal((64, 128)))
    assert 1 / 63 <= share < 0.06 and order < 0.3         # 64 centred rows span 63 directions
    with pytest.raises(ValueError, match=r"table: expected shape \[n, d\] with n >= 3"):
        position_axis(np.ones((2, 4)))
    with pytest.raises(ValueError, match=r"table: every row is the same"):
        position_axis(np.ones((5, 4)))


def test_the_shipped_models_position_table_learned_distance():
    # Chapter 5's printed measurements of the trained table (anatomy.weights).
    from anatomy.interp import position_similarity
    from anatomy.params import init_params
    from anatomy.weights import load

    params, cfg, _ = load("shakespeare-char")
    sim = position_similarity(params, cfg, seed=0)
    bands = [(1, 1), (2, 3), (4, 15), (16, 31), (32, 63)]
    trained = np.round(similarity_by_gap(sim["trained"], bands), 2)
    untrained = np.round(similarity_by_gap(sim["untrained"], bands), 2)
    assert trained[0] == 0.69 and trained[-1] < -0.3            # neighbours alike, far apart not
    assert np.all(np.diff(trained[[0, 1, 3, 4]]) < 0)
    assert np.all(np.abs(untrained) <= 0.02)
    share, order = position_axis(params["pos_emb"])
    assert round(share, 2) == 0.44 and order > 0.98
    share, order = position_axis(init_params(cfg, 0)["pos_emb"])
    assert share < 0.06 and order < 0.2


def test_shared_directions_separate_same_and_random_tables():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.standard_normal((16, 16)))[0]     # 16 orthonormal directions
    a = rng.standard_normal((50, 4)) @ basis[:4]               # lives in directions 0-3
    b = rng.standard_normal((40, 4)) @ basis[4:8]              # lives in directions 4-7
    r, share = shared_directions(a, b, keep=0.999)
    assert r == 4 and share < 1e-12
    assert shared_directions(a, a + 1.0)[1] > 0.85             # a shift does not matter
    shares = [shared_directions(a, rng.standard_normal((400, 16)), keep=0.999)[1]
              for _ in range(20)]
    assert abs(np.mean(shares) - 4 / 16) < 0.03                # random: about r / d


def test_shared_directions_rejects_bad_tables():
    with pytest.raises(ValueError, match="same width"):
        shared_directions(np.ones((3, 4)), np.ones((3, 5)))
    with pytest.raises(ValueError, match="rows that differ"):
        shared_directions(np.ones((3, 4)), np.eye(4))
    with pytest.raises(ValueError, match="keep"):
        shared_directions(np.eye(4), np.eye(4), keep=0)


def test_principal_directions_and_remove_direction():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.standard_normal((6, 6)))[0]       # 6 orthonormal directions
    spread = rng.standard_normal((200, 6)) * [5.0, 2.0, 1.0, 0.1, 0.1, 0.1]
    table = spread @ basis.T + 3.0                             # shifted: centring matters
    top = principal_directions(table, 2)                       # [2, 6]
    assert top.shape == (2, 6)
    np.testing.assert_allclose(np.abs(top @ basis[:, :2]), np.eye(2), atol=0.05)
    cut = remove_direction(table, 2.5 * top[0])                # the length of u does not matter
    np.testing.assert_allclose(cut @ top[0], 0.0, atol=1e-10)
    np.testing.assert_allclose(cut @ top[1], table @ top[1], atol=1e-10)   # others untouched
    assert position_axis(cut)[0] < position_axis(table)[0]
    with pytest.raises(ValueError, match=r"k: a table of shape \(200, 6\) has at most 6"):
        principal_directions(table, 7)
    with pytest.raises(ValueError, match=r"k: expected a positive integer"):
        principal_directions(table, 0)
    with pytest.raises(ValueError, match=r"u: expected a direction, got a zero vector"):
        remove_direction(table, np.zeros(6))
    with pytest.raises(ValueError, match=r"u: expected shape \[d\]"):
        remove_direction(table, np.ones(5))


def test_the_shipped_models_ruler_makes_far_positions_opposite():
    # Chapter 5's ablation: without its top principal direction the trained table's distant
    # positions no longer point away from each other; without the second one they still do.
    from anatomy.interp import cosine_similarity
    from anatomy.weights import load

    params, cfg, _ = load("shakespeare-char")
    table = params["pos_emb"]
    top = principal_directions(table, 2)

    def far(t):
        return similarity_by_gap(cosine_similarity(t), [(27, cfg.ctx - 1)])[0]

    assert far(table) < -0.3
    assert abs(far(remove_direction(table, top[0]))) < 0.05
    assert far(remove_direction(table, top[1])) < -0.3
