"""anatomy.masks (and chapter 3's figures): the worked example, the last-token experiment,
padding and combined masks, fully masked rows, and their errors."""

import numpy as np
import pytest

from anatomy.attention import attention, softmax
from anatomy.examples import ali_makan
from anatomy.gpt_numpy import forward
from anatomy.heads import multi_head_attention
from anatomy.masks import (
    causal_mask,
    causal_padding_mask,
    combine_masks,
    padded_attention,
    padding_mask,
    sliding_window_mask,
)
from anatomy.params import TOY, init_params
from anatomy.viz.masks import batch_weights, draw_batch, draw_masked_weights


def test_causal_mask_is_the_strict_upper_triangle():
    for T in (1, 2, 5):
        m = causal_mask(T)
        assert m.dtype == np.bool_ and m.shape == (T, T)
        np.testing.assert_array_equal(m, np.triu(np.ones((T, T)), k=1).astype(bool))


def test_causal_mask_for_new_queries_is_the_last_rows_of_the_full_mask():
    # Three new queries against seven keys (four of them cached) are rows 4..6 of a 7 x 7 mask.
    np.testing.assert_array_equal(causal_mask(3, T_k=7), causal_mask(7)[4:])
    np.testing.assert_array_equal(causal_mask(1, T_k=5), np.zeros((1, 5), dtype=bool))


def test_ch3_masked_weights(ch1_qkv):
    q, k, v = ch1_qkv
    mask = causal_mask(4)
    np.testing.assert_array_equal(mask.astype(int), [[0, 1, 1, 1],
                                                     [0, 0, 1, 1],
                                                     [0, 0, 0, 1],
                                                     [0, 0, 0, 0]])
    _, weights = attention(q, k, v, mask)
    np.testing.assert_array_equal(np.round(weights, 2), [[1.00, 0.00, 0.00, 0.00],
                                                         [0.78, 0.22, 0.00, 0.00],
                                                         [0.11, 0.20, 0.69, 0.00],
                                                         [0.96, 0.03, 0.01, 0.00]])
    _, unmasked = attention(q, k, v)
    # Row "nasi" was 0.09 0.17 0.59 0.15: its first three renormalise; "lemak" sees all of it.
    np.testing.assert_allclose(weights[2, :3], unmasked[2, :3] / unmasked[2, :3].sum(),
                               atol=1e-12)
    np.testing.assert_allclose(weights[3], unmasked[3], atol=1e-12)
    assert (weights[mask] == 0.0).all()


def test_padding_mask_shape_and_values():
    m = padding_mask(np.array([3, 1, 0]), 4)
    assert m.dtype == np.bool_ and m.shape == (3, 1, 4)
    np.testing.assert_array_equal(m[:, 0].astype(int), [[0, 0, 0, 1],
                                                        [0, 1, 1, 1],
                                                        [1, 1, 1, 1]])


def test_padding_mask_broadcasts_against_single_head_scores():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 4, 3)) for _ in range(3))
    out, weights = attention(q, k, v, padding_mask(np.array([4, 2]), 4))   # scores [B, T, T]
    assert weights.shape == (2, 4, 4)
    np.testing.assert_array_equal(weights[1, :, 2:], 0.0)
    np.testing.assert_allclose(out[1], attention(q[1], k[1, :2], v[1, :2])[0], atol=1e-12)


def test_zero_length_sequence_gives_zero_weights_not_nan():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 3, 2)) for _ in range(3))
    out, weights = attention(q, k, v, padding_mask(np.array([0]), 3))
    np.testing.assert_array_equal(weights, 0.0)
    np.testing.assert_array_equal(out, 0.0)


def test_padded_batch_matches_each_sequence_alone():
    # The padding mask is what lets sequences of unequal length share one batch: the real
    # positions of each padded sequence get exactly what they would get alone.
    rng = np.random.default_rng(2)
    d, h, T, lengths = 8, 2, 5, np.array([5, 3])
    x = rng.standard_normal((2, T, d))
    W_qkv, W_o = rng.standard_normal((d, 3 * d)), rng.standard_normal((d, d))
    out, weights = multi_head_attention(x, W_qkv, W_o, h, mask=padding_mask(lengths, T))
    assert weights.shape == (2, h, T, T)
    for b, n in enumerate(lengths):
        alone, _ = multi_head_attention(x[b, :n], W_qkv, W_o, h)
        np.testing.assert_allclose(out[b, :n], alone, atol=1e-12)
    np.testing.assert_array_equal(weights[1, :, :, 3:], 0.0)


def test_combine_masks_is_a_broadcast_or():
    lengths, T = np.array([4, 2]), 4
    both = combine_masks(causal_mask(T), padding_mask(lengths, T))
    assert both.shape == (2, T, T)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    for b, n in enumerate(lengths):
        np.testing.assert_array_equal(both[b], (j > i) | (j >= n))
    np.testing.assert_array_equal(combine_masks(causal_mask(3)), causal_mask(3))



def test_sliding_window_mask_sees_itself_and_the_w_minus_1_before():
    i, j = np.arange(6)[:, None], np.arange(6)[None, :]
    for w in (1, 2, 3):
        np.testing.assert_array_equal(sliding_window_mask(6, w), (j > i) | (j <= i - w))
    np.testing.assert_array_equal(sliding_window_mask(4, 1), ~np.eye(4, dtype=bool))
    np.testing.assert_array_equal(sliding_window_mask(4, 4), causal_mask(4))
    np.testing.assert_array_equal(sliding_window_mask(4, 9), causal_mask(4))
    assert (~sliding_window_mask(8, 3)).sum(axis=-1).tolist() == [1, 2, 3, 3, 3, 3, 3, 3]


def test_stacked_sliding_windows_reach_L_times_w_minus_1_back():
    # The docstring's claim: L layers of a window w let position i read inputs i - L(w-1)..i,
    # and nothing else (each layer is x + attention(x W_q, x W_k, x W_v, mask)).
    T, d, w = 9, 6, 3
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((3, 3, d, d)) / np.sqrt(d)     # [L, q/k/v, d, d]
    x = rng.standard_normal((T, d))
    mask = sliding_window_mask(T, w)

    def stack(x, L):
        for W_q, W_k, W_v in weights[:L]:
            x = x + attention(x @ W_q, x @ W_k, x @ W_v, mask)[0]   # [T, d] -> [T, d]
        return x

    for L in (1, 2, 3):
        reach = np.zeros((T, T), dtype=bool)                       # [output i, input j]
        for j in range(T):
            x_new = x.copy()
            x_new[j] += 1.0
            reach[:, j] = (stack(x_new, L) != stack(x, L)).any(axis=-1)
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        np.testing.assert_array_equal(reach, (j <= i) & (j >= i - L * (w - 1)))


# ---------------------------------------------------------------- errors


def test_combine_masks_rejects_shapes_that_do_not_broadcast():
    with pytest.raises(ValueError, match=r"masks: expected shapes broadcastable to "
                                         r"\[\.\.\., T_q, T_k\], got \(4, 4\), \(3, 3\)"):
        combine_masks(causal_mask(4), causal_mask(3))


def test_combine_masks_rejects_non_boolean_and_empty():
    with pytest.raises(TypeError, match=r"masks\[1\]: expected a boolean array"):
        combine_masks(causal_mask(2), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="masks: expected at least one mask"):
        combine_masks()


def test_padding_mask_rejects_bad_lengths():
    with pytest.raises(ValueError, match=r"lengths: expected integers in \[0, T\] = \[0, 4\], "
                                         r"got \[5, 2\]"):
        padding_mask(np.array([5, 2]), 4)
    with pytest.raises(TypeError, match=r"lengths: expected integers .* got dtype float64"):
        padding_mask(np.array([2.0]), 4)
    with pytest.raises(ValueError, match=r"lengths: expected shape \[B\], got \(2, 1\)"):
        padding_mask(np.array([[2], [1]]), 4)


def test_causal_padding_mask_rejects_bad_lengths():
    with pytest.raises(ValueError, match=r"lengths: expected integers in \[0, T\] = \[0, 3\], "
                                         r"got \[-1\]"):
        causal_padding_mask(np.array([-1]), 3)
    with pytest.raises(TypeError, match=r"lengths: expected integers .* got dtype float64"):
        causal_padding_mask(np.array([1.0, 2.0]), 3)
    with pytest.raises(ValueError, match=r"lengths: expected shape \[B\], got \(\)"):
        causal_padding_mask(np.array(2), 3)
    with pytest.raises(ValueError, match="T: expected a positive integer, got 2.0"):
        causal_padding_mask(np.array([1]), 2.0)


def test_sliding_window_mask_rejects_bad_sizes():
    with pytest.raises(ValueError, match="w: expected a positive integer, got 0"):
        sliding_window_mask(4, 0)
    with pytest.raises(ValueError, match="T: expected a positive integer, got -1"):
        sliding_window_mask(-1, 2)


def test_causal_mask_rejects_bad_sizes():
    with pytest.raises(ValueError, match="T: expected a positive integer, got 0"):
        causal_mask(0)
    with pytest.raises(ValueError, match=r"T_k: expected T_k >= T = 4"):
        causal_mask(4, T_k=2)


# ---------------------------------------------------------------- chapter 3: the rest of it


def test_ch3_nasi_row_renormalises(ch1_qkv):
    # The syllabus's call-out: 0.09 0.17 0.59 0.15 unmasked -> 0.11 0.20 0.69 masked, because
    # the three visible keys held 0.85 of the row and are divided by that share.
    q, k, v = ch1_qkv
    _, unmasked = attention(q, k, v)
    _, masked = attention(q, k, v, causal_mask(4))
    np.testing.assert_array_equal(np.round(unmasked[2], 2), [0.09, 0.17, 0.59, 0.15])
    assert round(unmasked[2, :3].sum(), 2) == 0.85
    np.testing.assert_array_equal(np.round(masked[2, :3], 2), [0.11, 0.20, 0.69])
    np.testing.assert_array_equal(masked[3], unmasked[3])


def test_changing_the_last_token_changes_only_the_last_attention_row():
    ex = ali_makan(seed=0)
    X = ex["X"]
    X_new = X.copy()
    X_new[3] = np.random.default_rng(1).standard_normal(X.shape[1])

    def outputs(x, mask):
        return attention(x @ ex["W_q"], x @ ex["W_k"], x @ ex["W_v"], mask)[0]   # [T, d_k]

    change = np.abs(outputs(X_new, causal_mask(4)) - outputs(X, causal_mask(4))).max(axis=-1)
    np.testing.assert_array_equal(change[:3], 0.0)
    assert change[3] > 0.1
    unmasked = np.abs(outputs(X_new, None) - outputs(X, None)).max(axis=-1)
    assert (unmasked > 1e-3).all()          # without the mask the new token reaches every row


def test_changing_the_last_token_leaves_earlier_logits_bit_identical():
    params = init_params(TOY, rng=0)
    ids = np.random.default_rng(0).integers(0, TOY.V, size=8)
    ids_new = ids.copy()
    ids_new[-1] = (ids[-1] + 1) % TOY.V
    logits, logits_new = forward(params, ids, TOY), forward(params, ids_new, TOY)
    assert logits.shape == (8, TOY.V)
    np.testing.assert_array_equal(logits[:-1], logits_new[:-1])
    assert np.abs(logits[-1] - logits_new[-1]).max() > 0.1


def test_causal_padding_mask_is_causal_or_padding():
    lengths, T = np.array([4, 2, 0]), 4
    m = causal_padding_mask(lengths, T)
    assert m.dtype == np.bool_ and m.shape == (3, T, T)
    np.testing.assert_array_equal(m, combine_masks(causal_mask(T), padding_mask(lengths, T)))
    np.testing.assert_array_equal(m[1].astype(int), [[0, 1, 1, 1],
                                                     [0, 0, 1, 1],
                                                     [0, 0, 1, 1],
                                                     [0, 0, 1, 1]])
    assert m[2].all()                                     # length 0: every key is padding
    np.testing.assert_array_equal(causal_padding_mask(np.array([1]), 1), [[[False]]])


def test_padded_attention_matches_each_sequence_alone_and_never_nans():
    rng = np.random.default_rng(4)
    q, k = rng.standard_normal((2, 3, 5, 4))
    v = rng.standard_normal((3, 5, 6))
    lengths = np.array([5, 3, 0])
    out, weights = padded_attention(q, k, v, lengths)
    assert out.shape == (3, 5, 6) and weights.shape == (3, 5, 5)
    assert np.isfinite(out).all() and np.isfinite(weights).all()
    for b, n in enumerate(lengths[:2]):
        alone, _ = attention(q[b, :n], k[b, :n], v[b, :n], causal_mask(int(n)))
        np.testing.assert_allclose(out[b, :n], alone, atol=1e-12)
    np.testing.assert_array_equal(weights[2], 0.0)        # an all-padding sequence
    np.testing.assert_array_equal(out[2], 0.0)
    _, both_ways = padded_attention(q, k, v, lengths, causal=False)
    assert (both_ways[0, 0] > 0).all()                    # no causal mask: sees every key
    np.testing.assert_array_equal(both_ways[1, :, 3:], 0.0)


def test_padding_queries_masked_too_give_zero_rows_not_nan():
    # The chapter's "row with nothing to see": OR-ing in the padding mask on its side hides
    # padding queries; their rows are all-zero weights and zero outputs.
    rng = np.random.default_rng(0)
    lengths, T = np.array([4, 2, 3]), 4
    q, k, v = rng.standard_normal((3, 3, T, 4))
    pad = padding_mask(lengths, T)
    strict = combine_masks(causal_mask(T), pad, np.swapaxes(pad, -1, -2))
    out, weights = attention(q, k, v, strict)
    np.testing.assert_array_equal(strict.all(axis=-1).sum(axis=-1), [0, 2, 1])
    np.testing.assert_array_equal(weights[1, 2:], 0.0)
    np.testing.assert_array_equal(out[1, 2:], 0.0)
    assert not np.isnan(out).any()
    np.testing.assert_array_equal(softmax(np.full(4, -np.inf)), 0.0)


def test_a_nan_at_a_padding_position_reaches_the_real_rows():
    # Why zeros rather than NaN matter: a masked key still multiplies its value by 0, and
    # 0 * NaN is NaN.
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 1, 4, 4))
    v[0, 3] = np.nan
    out, _ = attention(q, k, v, causal_padding_mask(np.array([2]), 4))
    assert np.isnan(out[0, :2]).all()


def test_padded_attention_rejects_bad_shapes():
    q = np.zeros((2, 3, 4))
    with pytest.raises(ValueError, match=r"lengths: expected shape \[B\] = \(2,\), got \(3,\)"):
        padded_attention(q, q, q, np.array([1, 2, 3]))
    with pytest.raises(ValueError, match=r"k: expected shape \[B, T, d_k\]"):
        padded_attention(q, np.zeros((2, 4, 4)), q, np.array([1, 2]))
    with pytest.raises(ValueError, match=r"q: expected shape \[B, T, d_k\]"):
        padded_attention(np.zeros((3, 4)), q, q, np.array([1, 2]))


# ---------------------------------------------------------------- chapter 3's figures


def test_batch_weights_toggles_each_mask():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 2, 4, 3))
    lengths = np.array([4, 2])
    mask, weights = batch_weights(q, k, v, lengths, causal=True, padding=True)
    np.testing.assert_array_equal(mask, causal_padding_mask(lengths, 4))
    assert (weights[mask] == 0).all()
    mask, _ = batch_weights(q, k, v, lengths, causal=False, padding=False)
    assert mask.shape == (2, 4, 4) and not mask.any()
    mask, _ = batch_weights(q, k, v, lengths, causal=False, padding=True)
    np.testing.assert_array_equal(mask, np.broadcast_to(padding_mask(lengths, 4), (2, 4, 4)))


def test_figures_draw_one_panel_per_matrix():
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 3, 6, 4))
    fig = draw_batch(q, k, v, lengths=[6, 3, 0])
    assert len(fig.axes) == 3 and "length 0" in fig.axes[2].get_title()
    assert "[6, 6]" in fig.axes[0].get_title()
    plt.close(fig)
    w = np.full((1, 2, 2), 0.5)
    fig = draw_masked_weights(w, causal_mask(2), ["one"], ["a", "b"])
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["a", "b"]
    plt.close(fig)
    with pytest.raises(ValueError, match="titles: expected 1 titles"):
        draw_masked_weights(w, causal_mask(2), ["one", "two"])
