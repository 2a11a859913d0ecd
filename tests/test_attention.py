"""anatomy.attention: chapter 1's worked example, softmax properties, and parity with
torch.nn.functional.scaled_dot_product_attention (float64 within 1e-12, float32 within 1e-5).
Chapter 2's measurements are tested in test_scaling.py.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from anatomy.attention import attention, scaled_scores, softmax

# ---------------------------------------------------------------- chapter 1 worked example


def test_ch1_weights_table(ch1_qkv):
    q, k, v = ch1_qkv
    out, weights = attention(q, k, v)
    expected = [[0.89, 0.02, 0.08, 0.01],     # Ali
                [0.51, 0.15, 0.21, 0.13],     # makan
                [0.09, 0.17, 0.59, 0.15],     # nasi
                [0.96, 0.03, 0.01, 0.00]]     # lemak
    np.testing.assert_array_equal(np.round(weights, 2), expected)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-12)
    assert q.shape == k.shape == v.shape == (4, 4)
    assert out.shape == (4, 4)


def test_ch1_lemak_scaled_scores(ch1_qkv):
    q, k, _ = ch1_qkv
    np.testing.assert_array_equal(np.round(scaled_scores(q, k)[3], 2), [4.15, 0.69, -0.52, -2.84])


def test_ch1_output_rows_are_blends_of_values(ch1_qkv):
    q, k, v = ch1_qkv
    out, weights = attention(q, k, v)
    for i in range(4):
        blend = sum(weights[i, j] * v[j] for j in range(4))
        np.testing.assert_allclose(out[i], blend, atol=1e-12)


def test_scaled_scores_divide_by_sqrt_dk():
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((3, 5, 16)), rng.standard_normal((3, 7, 16))
    scores = scaled_scores(q, k)
    assert scores.shape == (3, 5, 7)
    np.testing.assert_allclose(scores, np.einsum("bqd,bkd->bqk", q, k) / 4.0, atol=1e-12)


# ---------------------------------------------------------------- softmax


def test_softmax_rows_sum_to_one_and_are_positive():
    z = np.random.default_rng(1).standard_normal((6, 9)) * 5
    p = softmax(z)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, atol=1e-12)
    assert (p > 0).all()
    np.testing.assert_allclose(softmax(z, axis=0).sum(axis=0), 1.0, atol=1e-12)


def test_softmax_is_stable_on_huge_logits():
    small = np.array([[2.0, 1.0, 0.0]])
    with np.errstate(all="raise"):               # any overflow or NaN would raise here
        big = softmax(small + 1e4)
        neg = softmax(small - 1e4)
    np.testing.assert_allclose(big, softmax(small), atol=1e-12)
    np.testing.assert_allclose(neg, softmax(small), atol=1e-12)
    np.testing.assert_allclose(softmax(np.array([1e4, 0.0])), [1.0, 0.0], atol=1e-12)


def test_softmax_all_minus_inf_row_gives_zeros_not_nan():
    z = np.array([[-np.inf, -np.inf, -np.inf], [0.0, -np.inf, 0.0]])
    with np.errstate(all="raise"):
        p = softmax(z)
    np.testing.assert_array_equal(p[0], [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(p[1], [0.5, 0.0, 0.5])


def test_softmax_keeps_float32_and_accepts_integers():
    assert softmax(np.zeros(3, dtype=np.float32)).dtype == np.float32
    np.testing.assert_allclose(softmax(np.array([0, 0])), [0.5, 0.5])


# ---------------------------------------------------------------- attention properties


def test_masked_weights_are_exactly_zero_and_rows_renormalise():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 5, 4)) for _ in range(3))
    mask = rng.random((2, 5, 5)) < 0.4
    mask[..., 0] = False                          # every query keeps at least one key
    _, plain = attention(q, k, v)
    _, weights = attention(q, k, v, mask)
    assert (weights[mask] == 0.0).all()
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-12)
    kept = np.where(mask, 0.0, plain)
    np.testing.assert_allclose(weights, kept / kept.sum(axis=-1, keepdims=True), atol=1e-12)


def test_fully_masked_row_gives_zero_weights_and_output():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((3, 4)) for _ in range(3))
    mask = np.zeros((3, 3), dtype=bool)
    mask[1] = True
    out, weights = attention(q, k, v, mask)
    np.testing.assert_array_equal(weights[1], 0.0)
    np.testing.assert_array_equal(out[1], 0.0)
    assert np.isfinite(out).all()


def test_permuting_tokens_permutes_outputs():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((6, 8))
    W_q, W_k, W_v = (rng.standard_normal((8, 4)) for _ in range(3))
    perm = rng.permutation(6)
    out, weights = attention(X @ W_q, X @ W_k, X @ W_v)
    Xp = X[perm]
    out_p, weights_p = attention(Xp @ W_q, Xp @ W_k, Xp @ W_v)
    np.testing.assert_allclose(out_p, out[perm], atol=1e-12)
    np.testing.assert_allclose(weights_p, weights[perm][:, perm], atol=1e-12)


def test_leading_axes_equal_a_loop():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 3, 5, 4))
    k, v = rng.standard_normal((2, 3, 7, 4)), rng.standard_normal((2, 3, 7, 6))
    out, weights = attention(q, k, v)
    assert out.shape == (2, 3, 5, 6) and weights.shape == (2, 3, 5, 7)
    for b in range(2):
        for j in range(3):
            o, w = attention(q[b, j], k[b, j], v[b, j])
            np.testing.assert_allclose(out[b, j], o, atol=1e-12)
            np.testing.assert_allclose(weights[b, j], w, atol=1e-12)


# ---------------------------------------------------------------- parity with PyTorch


def _random_qkv(dtype, seed=6):
    rng = np.random.default_rng(seed)
    shapes = [(2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 6)]     # [B, h, T, d_k], ..., [B, h, T, d_v]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 1e-5)])
@pytest.mark.parametrize("kind", ["none", "causal", "boolean"])
def test_matches_torch_sdpa(dtype, tol, kind):
    q, k, v = _random_qkv(dtype)
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    if kind == "none":
        out, _ = attention(q, k, v)
        ref = F.scaled_dot_product_attention(tq, tk, tv)
    elif kind == "causal":
        out, _ = attention(q, k, v, np.triu(np.ones((5, 5), dtype=bool), k=1))
        ref = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    else:
        mask = np.random.default_rng(7).random((2, 1, 5, 5)) < 0.5
        mask[..., 0] = False
        out, _ = attention(q, k, v, mask)
        # torch's boolean attn_mask means True = ALLOWED, the opposite of ours.
        ref = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.from_numpy(~mask))
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref.numpy(), atol=tol, rtol=0)


def test_additive_bias_matches_torch_float_mask():
    q, k, v = _random_qkv(np.float64, seed=8)
    bias = np.random.default_rng(9).standard_normal((3, 5, 5))
    out, _ = attention(q, k, v, bias=bias)
    ref = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)),
                                         attn_mask=torch.from_numpy(bias))
    np.testing.assert_allclose(out, ref.numpy(), atol=1e-12, rtol=0)


# ---------------------------------------------------------------- errors


def test_q_of_wrong_rank_is_named():
    with pytest.raises(ValueError, match=r"q: expected shape \[\.\.\., T_q, d_k\], got \(4,\)"):
        attention(np.ones(4), np.ones((4, 4)), np.ones((4, 4)))


def test_k_width_must_match_q():
    with pytest.raises(ValueError, match=r"k: expected shape \[\.\.\., T_k, d_k\] = "
                                         r"\(\.\.\., 4, 4\), got \(4, 3\)"):
        scaled_scores(np.ones((4, 4)), np.ones((4, 3)))


def test_v_length_must_match_k():
    with pytest.raises(ValueError, match=r"v: expected shape \[\.\.\., T_k, d_v\].*got \(5, 4\)"):
        attention(np.ones((4, 4)), np.ones((4, 4)), np.ones((5, 4)))


def test_leading_axes_must_broadcast():
    with pytest.raises(ValueError, match=r"k: .* leading axes broadcastable to q's \(2,\), "
                                         r"got \(3, 4, 8\)"):
        scaled_scores(np.ones((2, 4, 8)), np.ones((3, 4, 8)))


def test_mask_of_wrong_shape_is_named():
    msg = (r"mask: expected shape \[T_q, T_k\] = \(4, 4\) \(or broadcastable to scores "
           r"\[\.\.\., T_q, T_k\] = \(4, 4\)\), got \(3, 4\)")
    with pytest.raises(ValueError, match=msg):
        attention(np.ones((4, 4)), np.ones((4, 4)), np.ones((4, 4)),
                  mask=np.zeros((3, 4), dtype=bool))


def test_mask_may_not_enlarge_the_scores():
    with pytest.raises(ValueError, match=r"mask: .*got \(2, 4, 4\)"):
        attention(np.ones((4, 4)), np.ones((4, 4)), np.ones((4, 4)),
                  mask=np.zeros((2, 4, 4), dtype=bool))


def test_mask_must_be_boolean():
    with pytest.raises(TypeError, match=r"mask: expected a boolean array \(True = forbidden\)"):
        attention(np.ones((4, 4)), np.ones((4, 4)), np.ones((4, 4)), mask=np.zeros((4, 4)))
