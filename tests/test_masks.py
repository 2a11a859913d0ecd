"""anatomy.masks: the chapter 3 worked example, padding and combined masks, and their errors."""

import numpy as np
import pytest

from anatomy.attention import attention
from anatomy.heads import multi_head_attention
from anatomy.masks import causal_mask, combine_masks, padding_mask


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


def test_causal_mask_rejects_bad_sizes():
    with pytest.raises(ValueError, match="T: expected a positive integer, got 0"):
        causal_mask(0)
    with pytest.raises(ValueError, match=r"T_k: expected T_k >= T = 4"):
        causal_mask(4, T_k=2)
