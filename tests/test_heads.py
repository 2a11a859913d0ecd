"""anatomy.heads: the chapter 4 worked example, the no-loop implementation against a loop over
heads, parity with torch.nn.MultiheadAttention and scaled_dot_product_attention (float64 within
1e-12, float32 within 1e-5), per-sequence masks reaching every head, the cost formulas, and
chapter 4's figures and report (anatomy.viz.heads: the lab's divisor slider, describe_heads).
"""

import numpy as np
import pytest
import torch
from torch import nn

from anatomy.attention import attention
from anatomy.heads import (
    attention_flops,
    cached_multi_head_attention,
    cross_attention,
    grouped_query_attention,
    kv_cache_bytes,
    merge_heads,
    multi_head_attention,
    score_bytes,
    split_heads,
)
from anatomy.masks import causal_mask, padding_mask
from anatomy.viz.heads import divisors, draw_heads, head_weights, snap_heads


def test_ch4_worked_example(legacy_draws):
    X, W_qkv, W_o = legacy_draws(1, (4, 8), (8, 24), (8, 8))
    W_qkv, W_o = W_qkv / np.sqrt(8), W_o / np.sqrt(8)
    out, weights = multi_head_attention(X, W_qkv, W_o, h=2)
    q = split_heads(np.split(X @ W_qkv, 3, axis=-1)[0], 2)
    assert q.shape == (2, 4, 4) and weights.shape == (2, 4, 4) and out.shape == (4, 8)
    np.testing.assert_array_equal(np.round(weights[0, -1], 2), [0.27, 0.18, 0.26, 0.28])
    np.testing.assert_array_equal(np.round(weights[1, -1], 2), [0.21, 0.23, 0.36, 0.20])


def test_split_heads_gives_each_head_its_columns_and_merge_undoes_it():
    x = np.arange(2 * 3 * 8, dtype=float).reshape(2, 3, 8)       # [B, T, d]
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)                             # [B, h, T, d_head]
    for j in range(4):
        np.testing.assert_array_equal(heads[:, j], x[..., 2 * j:2 * j + 2])
    np.testing.assert_array_equal(merge_heads(heads), x)


def _weights(d, rng, dtype=np.float64):
    """W_qkv [d, 3d], b_qkv [3d], W_o [d, d], b_o [d]."""
    shapes = ((d, 3 * d), (3 * d,), (d, d), (d,))
    return [rng.standard_normal(s).astype(dtype) * 0.5 for s in shapes]


def test_equals_a_loop_over_heads():
    rng = np.random.default_rng(0)
    d, h, T = 12, 3, 5
    x = rng.standard_normal((T, d))
    W_qkv, b_qkv, W_o, b_o = _weights(d, rng)
    out, weights = multi_head_attention(x, W_qkv, W_o, h, b_qkv, b_o)
    q, k, v = np.split(x @ W_qkv + b_qkv, 3, axis=-1)
    outs = []
    for j in range(h):
        cols = slice(j * d // h, (j + 1) * d // h)
        o, w = attention(q[:, cols], k[:, cols], v[:, cols], causal_mask(T))
        np.testing.assert_allclose(weights[j], w, atol=1e-12)
        outs.append(o)
    np.testing.assert_allclose(out, np.concatenate(outs, axis=-1) @ W_o + b_o, atol=1e-12)


def test_batched_equals_each_sequence():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 6, 8))
    W_qkv, b_qkv, W_o, b_o = _weights(8, rng)
    out, weights = multi_head_attention(x, W_qkv, W_o, 2, b_qkv, b_o)
    assert out.shape == (3, 6, 8) and weights.shape == (3, 2, 6, 6)
    for b in range(3):
        o, w = multi_head_attention(x[b], W_qkv, W_o, 2, b_qkv, b_o)
        np.testing.assert_allclose(out[b], o, atol=1e-12)
        np.testing.assert_allclose(weights[b], w, atol=1e-12)


def _torch_mha(W_qkv, b_qkv, W_o, b_o, h, dtype):
    d = W_o.shape[0]
    mha = nn.MultiheadAttention(d, h, batch_first=True, dtype=dtype)
    with torch.no_grad():
        # torch keeps weights [out, in] and applies x @ W.T: the transposes of ours.
        mha.in_proj_weight.copy_(torch.from_numpy(W_qkv.T.copy()))
        mha.in_proj_bias.copy_(torch.from_numpy(b_qkv))
        mha.out_proj.weight.copy_(torch.from_numpy(W_o.T.copy()))
        mha.out_proj.bias.copy_(torch.from_numpy(b_o))
    return mha.eval()


@pytest.mark.parametrize("dtype, tdtype, tol", [(np.float64, torch.float64, 1e-12),
                                                (np.float32, torch.float32, 1e-5)])
@pytest.mark.parametrize("causal", [True, False])
def test_matches_torch_multihead_attention(dtype, tdtype, tol, causal):
    rng = np.random.default_rng(2)
    d, h, T = 16, 4, 7
    x = rng.standard_normal((2, T, d)).astype(dtype)
    W_qkv, b_qkv, W_o, b_o = _weights(d, rng, dtype)
    out, weights = multi_head_attention(x, W_qkv, W_o, h, b_qkv, b_o, causal=causal)
    mha = _torch_mha(W_qkv, b_qkv, W_o, b_o, h, tdtype)
    tx = torch.from_numpy(x)
    # nn.MultiheadAttention's boolean attn_mask means True = NOT allowed, like ours (unlike SDPA).
    mask = torch.from_numpy(causal_mask(T)) if causal else None
    with torch.no_grad():
        ref, ref_w = mha(tx, tx, tx, attn_mask=mask, average_attn_weights=False)
        _, ref_avg = mha(tx, tx, tx, attn_mask=mask, average_attn_weights=True)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref.numpy(), atol=tol, rtol=0)
    np.testing.assert_allclose(weights, ref_w.numpy(), atol=tol, rtol=0)
    np.testing.assert_allclose(weights.mean(axis=1), ref_avg.numpy(), atol=tol, rtol=0)


def test_padding_mask_matches_torch_key_padding_mask():
    rng = np.random.default_rng(3)
    d, h, T, lengths = 8, 2, 5, np.array([5, 2])
    x = rng.standard_normal((2, T, d))
    W_qkv, b_qkv, W_o, b_o = _weights(d, rng)
    out, _ = multi_head_attention(x, W_qkv, W_o, h, b_qkv, b_o, causal=False,
                                  mask=padding_mask(lengths, T))
    mha = _torch_mha(W_qkv, b_qkv, W_o, b_o, h, torch.float64)
    tx = torch.from_numpy(x)
    key_padding = torch.from_numpy(np.arange(T)[None, :] >= lengths[:, None])   # True = ignore
    with torch.no_grad():
        ref, _ = mha(tx, tx, tx, key_padding_mask=key_padding)
    np.testing.assert_allclose(out, ref.numpy(), atol=1e-12, rtol=0)


@pytest.mark.parametrize("d_kv", [8, 6])
def test_cross_attention_matches_torch(d_kv):
    rng = np.random.default_rng(4)
    d, h, T_q, T_k = 8, 2, 3, 5
    x_q, x_kv = rng.standard_normal((2, T_q, d)), rng.standard_normal((2, T_k, d_kv))
    W_q, W_kv, W_o = (rng.standard_normal(s) for s in ((d, d), (d_kv, 2 * d), (d, d)))
    b_q, b_kv, b_o = (rng.standard_normal(s) for s in ((d,), (2 * d,), (d,)))
    out, weights = cross_attention(x_q, x_kv, W_q, W_kv, W_o, h, b_q, b_kv, b_o)
    assert out.shape == (2, T_q, d) and weights.shape == (2, h, T_q, T_k)
    mha = nn.MultiheadAttention(d, h, batch_first=True, kdim=d_kv, vdim=d_kv,
                                dtype=torch.float64)
    with torch.no_grad():
        if d_kv == d:                            # torch fuses Q, K, V only when widths agree
            mha.in_proj_weight.copy_(torch.from_numpy(np.concatenate([W_q, W_kv], 1).T.copy()))
        else:
            mha.q_proj_weight.copy_(torch.from_numpy(W_q.T.copy()))
            mha.k_proj_weight.copy_(torch.from_numpy(W_kv[:, :d].T.copy()))
            mha.v_proj_weight.copy_(torch.from_numpy(W_kv[:, d:].T.copy()))
        mha.in_proj_bias.copy_(torch.from_numpy(np.concatenate([b_q, b_kv])))
        mha.out_proj.weight.copy_(torch.from_numpy(W_o.T.copy()))
        mha.out_proj.bias.copy_(torch.from_numpy(b_o))
        tq, tkv = torch.from_numpy(x_q), torch.from_numpy(x_kv)
        ref, ref_w = mha.eval()(tq, tkv, tkv, average_attn_weights=False)
    np.testing.assert_allclose(out, ref.numpy(), atol=1e-12, rtol=0)
    np.testing.assert_allclose(weights, ref_w.numpy(), atol=1e-12, rtol=0)


@pytest.mark.parametrize("h_kv", [4, 2, 1])
def test_grouped_query_attention_is_mha_with_shared_kv_heads(h_kv):
    rng = np.random.default_rng(5)
    d, h, T = 16, 4, 6
    d_head, group = d // h, h // h_kv
    x = rng.standard_normal((2, T, d))
    W_q, W_o = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    W_kv = rng.standard_normal((d, 2 * h_kv * d_head))
    out, weights = grouped_query_attention(x, W_q, W_kv, W_o, h, h_kv)
    # The same model as ordinary MHA whose K and V columns repeat each shared head `group` times.
    W_k, W_v = np.split(W_kv, 2, axis=1)
    def widen(W):
        return np.repeat(W.reshape(d, h_kv, d_head), group, axis=1).reshape(d, d)
    W_qkv = np.concatenate([W_q, widen(W_k), widen(W_v)], axis=1)   # [d, 3d]
    ref, ref_w = multi_head_attention(x, W_qkv, W_o, h)
    np.testing.assert_allclose(out, ref, atol=1e-12)
    np.testing.assert_allclose(weights, ref_w, atol=1e-12)


def test_a_per_sequence_mask_reaches_every_head_of_its_own_sequence():
    # B = h = 2: a [B, T, T] mask without the head axis would still broadcast against the
    # scores [B, h, T, T] and silently give head b the mask of sequence b.
    rng = np.random.default_rng(8)
    d, h, T = 8, 2, 5
    x = rng.standard_normal((2, T, d))
    W_qkv, b_qkv, W_o, b_o = _weights(d, rng)
    mask = (rng.random((2, T, T)) < 0.5) & ~np.eye(T, dtype=bool)          # [B, T, T]
    out, weights = multi_head_attention(x, W_qkv, W_o, h, b_qkv, b_o, mask=mask)
    for b in range(2):
        o, w = multi_head_attention(x[b], W_qkv, W_o, h, b_qkv, b_o, mask=mask[b])
        np.testing.assert_allclose(out[b], o, atol=1e-12)
        np.testing.assert_allclose(weights[b], w, atol=1e-12)
        assert not weights[b][:, mask[b] | causal_mask(T)].any()            # every head
    # the same through the KV-cache path, which builds its mask separately
    cached, cached_w, _ = cached_multi_head_attention(x, W_qkv, W_o, h, None, b_qkv, b_o,
                                                      mask=mask)
    np.testing.assert_allclose(out, cached, atol=1e-12)
    np.testing.assert_allclose(weights, cached_w, atol=1e-12)


def test_a_key_mask_of_shape_T_hides_keys_from_every_query():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 8))
    W_qkv, _, W_o, _ = _weights(8, rng)
    hidden = np.arange(4) >= 2                                              # [T]
    _, weights = multi_head_attention(x, W_qkv, W_o, 2, causal=False, mask=hidden)
    assert weights.shape == (2, 4, 4) and not weights[..., 2:].any()
    np.testing.assert_allclose(weights.sum(-1), 1.0)
    with pytest.raises(TypeError, match="mask: expected a boolean array"):
        multi_head_attention(x, W_qkv, W_o, 2, mask=hidden.astype(float))


def test_cached_attention_equals_the_last_rows_of_full_attention():
    rng = np.random.default_rng(6)
    d, h, T = 8, 2, 7
    x = rng.standard_normal((2, T, d))
    W_qkv, b_qkv, W_o, b_o = _weights(d, rng)
    full, full_w = multi_head_attention(x, W_qkv, W_o, h, b_qkv, b_o)
    first, _, cache = cached_multi_head_attention(x[:, :4], W_qkv, W_o, h, None, b_qkv, b_o)
    rest, rest_w, cache = cached_multi_head_attention(x[:, 4:], W_qkv, W_o, h, cache,
                                                      b_qkv, b_o)
    assert cache[0].shape == cache[1].shape == (2, h, T, d // h)
    assert rest_w.shape == (2, h, 3, T)
    np.testing.assert_allclose(np.concatenate([first, rest], axis=1), full, atol=1e-12)
    np.testing.assert_allclose(rest_w, full_w[:, :, 4:], atol=1e-12)


# ---------------------------------------------------------------- errors


def test_fused_weight_of_wrong_shape_is_named():
    with pytest.raises(ValueError, match=r"W_qkv: expected shape \[d, 3d\] = \(8, 24\), "
                                         r"got \(8, 12\)"):
        multi_head_attention(np.ones((4, 8)), np.ones((8, 12)), np.ones((8, 8)), 2)
    with pytest.raises(ValueError, match=r"b_qkv: expected shape \[3d\] = \(24,\), got \(8,\)"):
        multi_head_attention(np.ones((4, 8)), np.ones((8, 24)), np.ones((8, 8)), 2,
                             b_qkv=np.ones(8))
    with pytest.raises(ValueError, match=r"W_o: expected shape \[d, d\] = \(8, 8\), got \(8, 4\)"):
        multi_head_attention(np.ones((4, 8)), np.ones((8, 24)), np.ones((8, 4)), 2)


def test_width_must_divide_into_heads():
    with pytest.raises(ValueError, match=r"x: d=10 is not divisible by h=3 heads"):
        split_heads(np.ones((4, 10)), 3)
    with pytest.raises(ValueError, match=r"x: d=10 is not divisible by h=3 heads"):
        multi_head_attention(np.ones((4, 10)), np.ones((10, 30)), np.ones((10, 10)), 3)
    with pytest.raises(ValueError, match=r"h: expected a positive integer, got 0"):
        split_heads(np.ones((4, 8)), 0)
    with pytest.raises(ValueError, match=r"h_kv: h=4 query heads do not split"):
        grouped_query_attention(np.ones((2, 8)), np.ones((8, 8)), np.ones((8, 12)),
                                np.ones((8, 8)), 4, 3)


def test_input_rank_and_mask_shape_are_named():
    with pytest.raises(ValueError, match=r"x: expected shape \[\.\.\., T, d\], got \(8,\)"):
        multi_head_attention(np.ones(8), np.ones((8, 24)), np.ones((8, 8)), 2)
    with pytest.raises(ValueError, match=r"x: expected shape \[\.\.\., h, T, d_head\], "
                                         r"got \(4, 8\)"):
        merge_heads(np.ones((4, 8)))
    msg = (r"mask: expected shape \[T_q, T_k\] = \(4, 4\) \(or broadcastable to scores "
           r"\[\.\.\., T, T\] = \(2, 4, 4\)\), got \(3, 1, 4\)")
    with pytest.raises(ValueError, match=msg):
        multi_head_attention(np.ones((2, 4, 8)), np.ones((8, 24)), np.ones((8, 8)), 2,
                             mask=padding_mask(np.array([1, 2, 3]), 4))
    with pytest.raises(ValueError, match=r"past\[0\]: expected shape \[\.\.\., h, T_past, d_head\] "
                                         r"= \(\.\.\., 2, 3, 4\), got \(2, 3, 8\)"):
        cached_multi_head_attention(np.ones((4, 8)), np.ones((8, 24)), np.ones((8, 8)), 2,
                                    (np.ones((2, 3, 8)), np.ones((2, 3, 8))))


# ---------------------------------------------------------------- parity with SDPA


@pytest.mark.parametrize("dtype, tdtype, tol", [(np.float64, torch.float64, 1e-12),
                                                (np.float32, torch.float32, 1e-5)])
def test_matches_torch_scaled_dot_product_attention(dtype, tdtype, tol):
    rng = np.random.default_rng(7)
    d, h, T = 16, 4, 6
    x = rng.standard_normal((2, T, d)).astype(dtype)
    W_qkv, b_qkv, W_o, b_o = _weights(d, rng, dtype)
    out, _ = multi_head_attention(x, W_qkv, W_o, h, b_qkv, b_o)
    q, k, v = (torch.from_numpy(split_heads(t, h))           # each [B, h, T, d_head]
               for t in np.split(x @ W_qkv + b_qkv, 3, axis=-1))
    # SDPA's boolean attn_mask means True = allowed: the complement of ours.
    allowed = torch.from_numpy(~causal_mask(T))
    for kwargs in ({"attn_mask": allowed}, {"is_causal": True}):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
        assert o.dtype == tdtype
        np.testing.assert_allclose(merge_heads(o.numpy()) @ W_o + b_o, out, atol=tol, rtol=0)


# ---------------------------------------------------------------- cost


def test_attention_flops_are_the_same_for_one_head_or_eight():
    T, d = 1024, 512                                 # the original transformer's width
    one, eight = attention_flops(T, d, 1), attention_flops(T, d, 8)
    assert one == eight
    assert one == {"qkv": 6 * T * d * d, "scores": 2 * T * T * d, "mix": 2 * T * T * d,
                   "out": 2 * T * d * d}
    assert sum(one.values()) == 8 * T * d * d + 4 * T * T * d == 4_294_967_296
    with pytest.raises(ValueError, match=r"d: d=10 is not divisible by h=3 heads"):
        attention_flops(4, 10, 3)


def test_score_tensor_memory_for_gpt2_small():
    # [B, h, T, T] float32 with GPT-2 small's h = 12, per layer and per sequence.
    assert score_bytes(1024, 12) == 12 * 1024 * 1024 * 4 == 50_331_648          # 48 MiB
    assert score_bytes(32_768, 12) == 51_539_607_552 == 48 * 2**30               # 48 GiB
    assert score_bytes(1024, 12, B=8, itemsize=2) == 4 * score_bytes(1024, 12)
    with pytest.raises(ValueError, match=r"T: expected a positive integer, got 0"):
        score_bytes(0, 12)


def test_kv_cache_bytes_and_the_grouped_query_saving():
    full = kv_cache_bytes(L=12, T=1024, h_kv=12, d_head=64)    # GPT-2 small, float32
    assert full == 2 * 12 * 1024 * 768 * 4 == 75_497_472       # 2 L T d values = 72 MiB
    assert kv_cache_bytes(12, 1024, 4, 64) * 3 == full          # h / h_kv = 3 times smaller
    assert kv_cache_bytes(12, 1024, 1, 64) * 12 == full         # multi-query: h times smaller
    assert kv_cache_bytes(12, 1024, 12, 64, B=4, itemsize=2) == 2 * full
    with pytest.raises(ValueError, match=r"h_kv: expected a positive integer"):
        kv_cache_bytes(12, 1024, 0, 64)


# ---------------------------------------------------------------- the chapter's figures


def test_cross_attention_weights_are_rectangular_and_unmasked():
    rng = np.random.default_rng(4)
    d, h, T_q, T_k = 8, 2, 3, 5
    x_dec, x_enc = rng.standard_normal((T_q, d)), rng.standard_normal((T_k, d))
    W_q, W_kv, W_o = (rng.standard_normal(s) / np.sqrt(d) for s in ((d, d), (d, 2 * d), (d, d)))
    out, weights = cross_attention(x_dec, x_enc, W_q, W_kv, W_o, h)
    assert out.shape == (T_q, d) and weights.shape == (h, T_q, T_k)
    np.testing.assert_allclose(weights.sum(-1), 1.0)
    assert np.all(weights > 0)                       # no causal mask: every key is seen


def test_lab_divisors_snap_and_head_weights():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert [snap_heads(h, 12) for h in (1, 5, 7, 8, 9, 10, 11, 12)] == [1, 4, 6, 6, 6, 12, 12,
                                                                         12]
    assert snap_heads(5, 8) == 4 and snap_heads(3, 8) == 2      # ties go to the smaller
    rng = np.random.default_rng(0)
    X, W_qkv = rng.standard_normal((6, 12)), rng.standard_normal((12, 36))
    for h in (1, 3, 12):
        w = head_weights(X, W_qkv, h)
        assert w.shape == (h, 6, 6)
        np.testing.assert_array_equal(w, multi_head_attention(X, W_qkv, np.eye(12), h)[1])
    assert np.all(head_weights(X, W_qkv, 3, causal=False) > 0)


def test_lab_slider_steps_through_every_divisor(monkeypatch):
    # The slider's stops are the divisors of d, so the arrow keys (one stop per press) reach
    # every head count, 6 and 12 included; a 1..d slider that snapped back to the nearest
    # divisor got stuck at 4 and 6.
    pytest.importorskip("ipywidgets")
    import matplotlib.pyplot as plt

    import anatomy.viz.heads as lab

    open_before = set(plt.get_fignums())             # other tests may have left figures
    shown = {}
    monkeypatch.setattr(lab, "show_lab", lambda rows, outputs, update: shown.update(
        rows=rows, outputs=outputs, update=update))
    rng = np.random.default_rng(0)
    X, W_qkv = rng.standard_normal((6, 12)), rng.standard_normal((12, 36))
    lab.heads_lab(X, W_qkv, list("abcdef"), h=5)
    (slider, masked), = shown["rows"]
    picture, caption = shown["outputs"]
    assert list(slider.options) == divisors(12) == [1, 2, 3, 4, 6, 12]
    assert slider.value == 4                        # h = 5 starts at the nearest divisor
    seen = []
    slider.observe(lambda change: shown["update"](), names="value")
    for index in range(len(slider.options)):        # what the right arrow does, one stop each
        slider.index = index
        seen.append(slider.value)
        assert f"h = {slider.value} " in caption.value
        assert f"d_head = {12 // slider.value};" in caption.value
        assert bytes(picture.value[:4]) == b"\x89PNG"
    assert seen == [1, 2, 3, 4, 6, 12]
    assert set(plt.get_fignums()) <= open_before       # the lab closes what it draws


@pytest.mark.parametrize("h", [1, 4, 12])
def test_draw_heads_has_one_panel_per_head(h):
    import matplotlib.pyplot as plt

    tokens = ["Ali", "makan", "nasi", "lemak", "di", "kedai"]
    rng = np.random.default_rng(1)
    weights = head_weights(rng.standard_normal((6, 12)), rng.standard_normal((12, 36)), h)
    fig = draw_heads(weights, tokens)
    panels = [ax for ax in fig.axes if ax.axison]
    assert len(panels) == h and len(panels[0].images) == 1
    assert panels[-1].get_title() == f"head {h - 1}  [6, 6]"
    heads = "head" if h == 1 else "heads"
    assert fig._suptitle.get_text() == f"h = {h} {heads}: weights [h, T, T] = [{h}, 6, 6]"
    plt.close(fig)
    with pytest.raises(ValueError, match=r"weights: expected shape \[h, T, T\]"):
        draw_heads(weights[0], tokens)


def test_describe_heads_names_the_clear_jobs_and_lists_the_rest():
    from anatomy.interp import HeadScores
    from anatomy.viz.heads import ROLE_WORDS, describe_heads

    # L = 1, h = 3: head 0 looks at the previous character, head 1 nearly so (0.35, under
    # the 0.4 bar), head 2 at itself, but a uniform head would score 0.3 there (1.5x)
    scores = HeadScores(scores={"previous": np.array([[0.8, 0.35, 0.1]]),
                                "self": np.array([[0.1, 0.2, 0.45]])},
                        uniform={"previous": 0.1, "self": 0.3},
                        queries={"previous": 10, "self": 12}, n_windows=1)
    lines = describe_heads(scores)
    assert lines == [
        "1 of 3 heads named (one role holds >= 0.40 of the weight, >= 5x uniform):",
        "  layer 0 head 0: 0.80 on the previous character (uniform: 0.10)",
        "2 heads without a name: their two strongest roles, score (x uniform):",
        "  layer 0 head 1: previous 0.35 (3.5x), self 0.20 (0.7x)",
        "  layer 0 head 2: self 0.45 (1.5x), previous 0.10 (1.0x)"]
    assert describe_heads(scores, min_score=0.3, min_ratio=3)[2].startswith(
        "  layer 0 head 1: 0.35 on the previous character")
    from anatomy.interp import ROLES
    assert set(ROLE_WORDS) == set(ROLES)


def test_describe_heads_on_the_shipped_model_fits_the_column():
    from anatomy.examples import PASSAGE
    from anatomy.interp import head_scores
    from anatomy.viz.heads import describe_heads
    from anatomy.weights import load, windows

    params, cfg, tok = load("shakespeare-char")
    rows = windows(np.array(tok.encode(PASSAGE)), cfg.ctx)               # [20, 64]
    lines = describe_heads(head_scores(params, rows, cfg, tok))
    assert len(lines) == 2 + cfg.L * cfg.h and all(len(line) <= 78 for line in lines)
    # the three heads chapter 4 names, with what they score on the passage
    assert lines[1:4] == [
        "  layer 1 head 1: 0.58 on the latest space or newline (uniform: 0.05)",
        "  layer 0 head 2: 0.55 on the previous character (uniform: 0.06)",
        "  layer 1 head 3: 0.43 on the latest newline (uniform: 0.03)"]
