"""anatomy.blocks: LayerNorm and GELU against PyTorch, the zero-weight identity, the residual
decomposition, and a whole pre-norm block against one built from torch.nn modules
(float64 within 1e-12, float32 within 1e-5)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from anatomy.blocks import (
    block,
    block_stack,
    block_writes,
    gelu,
    layer_norm,
    mlp,
    relu,
    residual_pieces,
    sublayer_reads,
)
from anatomy.params import GPT2_SMALL, GPTConfig, block_params, count_breakdown, init_params

CFG = GPTConfig(V=11, ctx=8, d=16, L=1, h=4, d_ff=48)


def _block_p(seed: int = 0, dtype=np.float64) -> dict[str, np.ndarray]:
    """One block's weights with every entry random, biases and LayerNorm too."""
    rng = np.random.default_rng(seed)
    p = block_params(init_params(CFG, rng), 0)
    return {k: (v + rng.standard_normal(v.shape) * 0.3).astype(dtype) for k, v in p.items()}


# ---------------------------------------------------------------- LayerNorm, GELU, MLP


def test_layer_norm_gives_mean_0_variance_1_per_token():
    x = np.random.default_rng(1).standard_normal((3, 5, 16)) * 4 + 2
    y = layer_norm(x, np.ones(16), np.zeros(16))
    np.testing.assert_allclose(y.mean(axis=-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=-1), 1.0, atol=1e-5)     # eps shrinks it a hair


@pytest.mark.parametrize("scale", [1.0, 1e-3])      # tiny variance: is eps inside the sqrt?
def test_layer_norm_matches_torch(scale):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 7, 16)) * scale
    g, b = rng.standard_normal(16), rng.standard_normal(16)
    ref = F.layer_norm(torch.from_numpy(x), (16,), torch.from_numpy(g), torch.from_numpy(b),
                       eps=1e-5)
    np.testing.assert_allclose(layer_norm(x, g, b), ref.numpy(), atol=1e-12, rtol=0)


def test_gelu_matches_torch_tanh_approximation_and_dips_below_zero():
    x = np.linspace(-6, 6, 1001)
    ref = F.gelu(torch.from_numpy(x), approximate="tanh").numpy()
    np.testing.assert_allclose(gelu(x), ref, atol=1e-12, rtol=0)
    assert gelu(np.zeros(1))[0] == 0.0
    assert -0.18 < gelu(x).min() < -0.16 and (relu(x) >= 0).all()
    assert gelu(np.ones(2, dtype=np.float32)).dtype == np.float32


def test_mlp_works_per_token():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 16))
    W_1, b_1, W_2, b_2 = (rng.standard_normal(s) for s in ((16, 48), (48,), (48, 16), (16,)))
    out = mlp(x, W_1, b_1, W_2, b_2)
    np.testing.assert_allclose(out[2], mlp(x[2:3], W_1, b_1, W_2, b_2)[0], atol=1e-12)
    np.testing.assert_allclose(out, gelu(x @ W_1 + b_1) @ W_2 + b_2, atol=1e-12)
    np.testing.assert_allclose(mlp(x, W_1, None, W_2, None, act=relu),
                               np.maximum(x @ W_1, 0) @ W_2, atol=1e-12)


# ---------------------------------------------------------------- the block


def test_all_zero_weights_give_the_identity():
    x = np.random.default_rng(4).standard_normal((2, 6, 16))
    zeros = {k: np.zeros_like(v) for k, v in _block_p().items()}
    np.testing.assert_array_equal(block(x, zeros, CFG.h), x)


def test_block_is_input_plus_its_two_writes():
    x = np.random.default_rng(5).standard_normal((6, 16))
    p = _block_p(5)
    writes = block_writes(x, p, CFG.h)
    assert writes.attn.shape == writes.mlp.shape == (6, 16)
    assert writes.weights.shape == (CFG.h, 6, 6)
    np.testing.assert_array_equal(block(x, p, CFG.h), x + writes.attn + writes.mlp)
    assert np.abs(writes.attn).max() > 0 and np.abs(writes.mlp).max() > 0


def test_missing_biases_mean_zero_biases():
    x = np.random.default_rng(6).standard_normal((6, 16))
    p = _block_p(6)
    zero_bias = {**p, **{k: np.zeros_like(p[k]) for k in ("b_qkv", "b_o", "b_1", "b_2")}}
    bias_free = {k: v for k, v in p.items() if k not in ("b_qkv", "b_o", "b_1", "b_2")}
    np.testing.assert_array_equal(block(x, bias_free, CFG.h), block(x, zero_bias, CFG.h))


@pytest.mark.parametrize("dtype, tdtype, tol", [(np.float64, torch.float64, 1e-12),
                                                (np.float32, torch.float32, 1e-5)])
def test_block_matches_torch_nn_modules(torch_reference, dtype, tdtype, tol):
    p = _block_p(7, dtype)
    x = np.random.default_rng(7).standard_normal((2, 6, 16)).astype(dtype)
    ref_block = torch_reference.Block(16, CFG.h, CFG.d_ff).to(tdtype).load(p).eval()
    with torch.no_grad():
        ref = ref_block(torch.from_numpy(x)).numpy()
    out = block(x, p, CFG.h)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref, atol=tol, rtol=0)


def test_torch_prenorm_block_of_gpt2_small_has_7_087_872_parameters(torch_reference):
    with torch.device("meta"):                  # shapes only: nothing is allocated
        ref_block = torch_reference.Block(768, 12, 3072)
    assert sum(p.numel() for p in ref_block.parameters()) == 7_087_872


# ---------------------------------------------------------------- chapter 6's figures


def test_mlp_holds_two_thirds_of_a_gpt2_small_block():
    rows, d = count_breakdown(GPT2_SMALL), GPT2_SMALL.d
    assert (8 * d * d, 12 * d * d) == (4_718_592, 7_077_888)
    assert rows["MLP per block"] == 8 * d * d + 4 * d + d          # plus b_1 and b_2
    assert abs(rows["MLP per block"] / rows["one block"] - 2 / 3) < 1e-3


def test_layer_norm_over_the_sequence_axis_leaks_from_later_tokens():
    x = np.random.default_rng(8).standard_normal((5, 16))
    changed = x.copy()
    changed[-1] += 3.0                                   # only the last token changes
    ones, zeros = np.ones(16), np.zeros(16)
    per_token = layer_norm(changed, ones, zeros)[:-1] - layer_norm(x, ones, zeros)[:-1]
    assert np.abs(per_token).max() == 0.0

    def over_sequence(a):                                # the mistake: axis 0, the T positions
        return (a - a.mean(axis=0)) / np.sqrt(a.var(axis=0) + 1e-5)

    assert np.abs(over_sequence(changed)[:-1] - over_sequence(x)[:-1]).max() > 0.1
    assert np.abs(over_sequence(x[:1])).max() == 0.0    # T = 1: nothing left to normalise over


def _stack(L: int, seed: int = 9, scale: float = 10.0) -> list[dict[str, np.ndarray]]:
    cfg = GPTConfig(V=11, ctx=8, d=16, L=L, h=4)
    params = init_params(cfg, np.random.default_rng(seed))
    return [{k: v * scale if k.startswith("W_") else v for k, v in block_params(params, i).items()}
            for i in range(L)]


def test_final_stream_is_embedding_plus_every_write_exactly():
    blocks = _stack(4)
    x = np.random.default_rng(10).standard_normal((2, 5, 16))
    pieces = residual_pieces(x, blocks, 4)
    assert list(pieces) == ["embed", "0.attn", "0.mlp", "1.attn", "1.mlp", "2.attn", "2.mlp",
                            "3.attn", "3.mlp"]
    assert all(v.shape == (2, 5, 16) for v in pieces.values())
    out = block_stack(x, blocks, 4)
    assert out.shape == x.shape
    np.testing.assert_array_equal(out, sum(pieces.values()))       # same order of additions
    np.testing.assert_allclose(out, np.sum(list(pieces.values()), axis=0), atol=1e-12)
    assert min(np.abs(v).max() for v in pieces.values()) > 0.01    # every write is visible


def test_stack_of_zero_blocks_is_the_identity():
    x = np.random.default_rng(11).standard_normal((5, 16))
    zeros = [{k: np.zeros_like(v) for k, v in p.items()} for p in _stack(3)]
    np.testing.assert_array_equal(block_stack(x, zeros, 4), x)
    assert list(residual_pieces(x, [], 4)) == ["embed"]
    np.testing.assert_array_equal(block_stack(x, [], 4), x)


# ---------------------------------------------------------------- errors


def test_layer_norm_scale_of_wrong_width_is_named():
    with pytest.raises(ValueError, match=r"g: expected shape \[d\] = \(4,\), got \(3,\)"):
        layer_norm(np.ones((3, 4)), np.ones(3), np.zeros(4))


def test_block_names_missing_and_unknown_keys():
    p = _block_p()
    with pytest.raises(ValueError, match=r"p: missing key 'W_qkv'"):
        block(np.ones((2, 16)), {k: v for k, v in p.items() if k != "W_qkv"}, CFG.h)
    with pytest.raises(ValueError, match=r"p: unknown key 'W_q'"):
        block(np.ones((2, 16)), {**p, "W_q": p["W_o"]}, CFG.h)


def test_mlp_weight_of_wrong_shape_is_named():
    with pytest.raises(ValueError, match=r"W_2: expected shape \[d_ff, d\] = \(48, 16\), "
                                         r"got \(16, 48\)"):
        mlp(np.ones((2, 16)), np.ones((16, 48)), None, np.ones((16, 48)), None)


def test_sublayer_reads_are_what_each_sublayer_normalises():
    # Chapter 6 sets each write beside what its sublayer read.
    blocks = _stack(3)
    x = np.random.default_rng(12).standard_normal((2, 5, 16))
    pieces = residual_pieces(x, blocks, 4)
    reads = sublayer_reads(pieces, blocks)
    assert list(reads) == list(pieces)[1:]
    for i, p in enumerate(blocks):
        entering = block_stack(x, blocks[:i], 4)                    # [2, 5, 16]
        np.testing.assert_allclose(reads[f"{i}.attn"],
                                   layer_norm(entering, p["ln1_g"], p["ln1_b"]), atol=1e-12)
        mid = entering + block_writes(entering, p, 4).attn
        np.testing.assert_allclose(reads[f"{i}.mlp"],
                                   layer_norm(mid, p["ln2_g"], p["ln2_b"]), atol=1e-12)
        np.testing.assert_allclose(mlp(reads[f"{i}.mlp"], p["W_1"], p["b_1"], p["W_2"],
                                       p["b_2"]), pieces[f"{i}.mlp"], atol=1e-12)
