"""anatomy.modern: the Llama-style NumPy model agrees with Hugging Face's LlamaForCausalLM.

Offline: every Hugging Face model here is randomly initialised from a config (never
downloaded), and every weight is redrawn at a scale where the logits are of order 1-10 and
no RMSNorm gain is a no-op. The parity tolerance is 1e-4 in float32; the measured maximum
difference of each shape is printed (run with ``-s`` to see it) and recorded as a property.
"""

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode
from transformers import LlamaConfig as HFLlamaConfig
from transformers import LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from anatomy import flops, params
from anatomy.attention import attention
from anatomy.heads import grouped_query_attention, split_heads
from anatomy.masks import causal_mask
from anatomy.modern import (
    CHANGES,
    LLAMA2_7B,
    LLAMA3_8B,
    Design,
    LlamaConfig,
    config_from_hf,
    count_by_kind,
    count_params,
    design_steps,
    flops_per_token,
    forward,
    forward_matmul_flops,
    gpt2_design,
    init_params,
    kv_cache_bytes,
    llama_block,
    param_shapes,
    params_from_hf,
    rms_norm,
    rope_rotate_half,
    rotate_half_permutation,
    silu,
    step_costs,
    swiglu,
    swiglu_width,
    with_changes,
)
from anatomy.positions import rope

# (V, ctx, d, L, h, h_kv, d_ff, tied, rope_base): multi-head (h_kv = h), grouped (h_kv < h),
# multi-query (h_kv = 1), tied and untied heads, Llama 3's RoPE base, one and three blocks.
SHAPES = [
    (50, 16, 32, 2, 4, 4, 48, False, 10000.0),
    (61, 12, 48, 2, 6, 2, 80, False, 10000.0),
    (40, 16, 32, 1, 4, 1, 64, True, 10000.0),
    (97, 20, 64, 3, 8, 2, 96, True, 500000.0),
]


def _hf_model(V, ctx, d, L, h, h_kv, d_ff, tied, rope_base, seed=0, attn="eager"):
    torch.manual_seed(seed)
    config = HFLlamaConfig(vocab_size=V, max_position_embeddings=ctx, hidden_size=d,
                           num_hidden_layers=L, num_attention_heads=h, num_key_value_heads=h_kv,
                           intermediate_size=d_ff, tie_word_embeddings=tied, rope_theta=rope_base,
                           rms_norm_eps=1e-5, attn_implementation=attn)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_tokens" in name:
                p.copy_(torch.randn_like(p))
            elif p.ndim == 2:                       # nn.Linear weights are [out, in]
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
            else:                                   # RMSNorm gains
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    return model


def _hf_logits(model, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(ids)).logits.numpy()


def _shape_id(s):
    return "V{}-ctx{}-d{}-L{}-h{}-hkv{}-ff{}-tied{}-base{:.0f}".format(*s)


# ---------------------------------------------------------------- parity with Hugging Face


@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
def test_logits_match_hugging_face_float32(shape, record_property):
    V, ctx, d, L, h, h_kv, d_ff, tied, rope_base = shape
    model = _hf_model(*shape)
    cfg = config_from_hf(model.config)
    assert cfg == LlamaConfig(V, ctx, d, L, h, h_kv, d_ff, rope_base, 1e-5, tied)
    p = params_from_hf(model.state_dict(), cfg)
    assert list(p) == list(param_shapes(cfg))
    assert all(v.dtype == np.float32 for v in p.values())
    ids = np.random.default_rng(1).integers(0, V, size=(2, ctx))      # [B, T], T = ctx
    want = _hf_logits(model, ids)
    assert np.abs(want).max() > 1.0                  # a real test, not tiny numbers
    got = forward(p, ids, cfg)
    assert got.shape == (2, ctx, V) and got.dtype == np.float32
    diff = float(np.abs(got - want).max())
    print(f"\n{_shape_id(shape)}: max |numpy - HF| = {diff:.3g}, "
          f"params {count_params(cfg):,} (HF {model.num_parameters():,})")
    record_property("max_abs_diff", diff)
    assert diff < 1e-4
    # One sequence without a batch axis, and a prompt shorter than ctx.
    np.testing.assert_allclose(forward(p, ids[0, :5], cfg), want[0, :5], atol=1e-4, rtol=0)
    assert count_params(cfg) == model.num_parameters()


def test_sdpa_attention_gives_the_same_logits():
    shape = SHAPES[1]
    model = _hf_model(*shape, attn="sdpa")
    cfg = config_from_hf(model.config)
    ids = np.random.default_rng(2).integers(0, cfg.V, size=(3, cfg.ctx))
    np.testing.assert_allclose(forward(params_from_hf(model.state_dict(), cfg), ids, cfg),
                               _hf_logits(model, ids), atol=1e-4, rtol=0)


def test_float64_agrees_closely():
    model = _hf_model(*SHAPES[3]).double()
    cfg = config_from_hf(model.config)
    p = params_from_hf(model.state_dict(), cfg)
    assert p["tok_emb"].dtype == np.float64
    ids = np.random.default_rng(3).integers(0, cfg.V, size=(2, cfg.ctx))
    # HF computes RoPE's angles in float32 even for a float64 model, hence not 1e-12.
    np.testing.assert_allclose(forward(p, ids, cfg), _hf_logits(model, ids), atol=1e-4, rtol=0)


def test_without_the_permutation_the_logits_are_silently_wrong():
    model = _hf_model(*SHAPES[1])
    cfg = config_from_hf(model.config)
    ids = np.random.default_rng(4).integers(0, cfg.V, size=(2, cfg.ctx))
    want = _hf_logits(model, ids)
    wrong = forward(params_from_hf(model.state_dict(), cfg, permute_rope=False), ids, cfg)
    # Same shapes, no error, and right at position 0, where every rotation angle is 0 ...
    assert wrong.shape == want.shape
    np.testing.assert_allclose(wrong[:, 0], want[:, 0], atol=1e-4, rtol=0)
    # ... and wrong everywhere after it.
    assert np.abs(wrong[:, 1:] - want[:, 1:]).max(axis=-1).min() > 1e-3
    assert np.abs(wrong - want).max() > 0.5


def test_permutation_turns_hugging_face_rope_into_the_books():
    d_head, T, h = 8, 5, 2
    config = HFLlamaConfig(hidden_size=h * d_head, num_attention_heads=h,
                           max_position_embeddings=T, rope_theta=100.0)
    rotary = LlamaRotaryEmbedding(config)
    q = torch.randn(1, h, T, d_head, generator=torch.Generator().manual_seed(0))
    cos, sin = rotary(q, torch.arange(T)[None])              # [1, T, d_head] each
    hf_q, _ = apply_rotary_pos_emb(q, q, cos, sin)           # rotate-half layout
    perm = rotate_half_permutation(d_head)
    assert perm.tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    ours = rope(q.numpy()[..., perm], base=100.0)            # neighbours layout
    np.testing.assert_allclose(ours, hf_q.numpy()[..., perm], atol=1e-5, rtol=0)
    # Without the reordering the two RoPEs disagree.
    assert np.abs(rope(q.numpy(), base=100.0) - hf_q.numpy()).max() > 0.1


def test_rope_rotate_half_is_hugging_faces_rope_and_the_books_reordered():
    d_head, T, h = 8, 6, 2
    config = HFLlamaConfig(hidden_size=h * d_head, num_attention_heads=h,
                           max_position_embeddings=T, rope_theta=100.0)
    q = torch.randn(1, h, T, d_head, generator=torch.Generator().manual_seed(1))
    cos, sin = LlamaRotaryEmbedding(config)(q, torch.arange(T)[None])   # [1, T, d_head]
    hf_q, _ = apply_rotary_pos_emb(q, q, cos, sin)
    ours = rope_rotate_half(q.numpy(), base=100.0)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, hf_q.numpy(), atol=1e-5, rtol=0)
    # The same rotations as chapter 5's rope, with the features laid out differently.
    x = np.random.default_rng(6).standard_normal((3, T, 12))
    perm = rotate_half_permutation(12)
    np.testing.assert_allclose(rope_rotate_half(x)[..., perm], rope(x[..., perm]),
                               atol=1e-12, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(rope_rotate_half(x), axis=-1),
                               np.linalg.norm(x, axis=-1), atol=1e-12)
    np.testing.assert_array_equal(rope_rotate_half(x)[:, 0], x[:, 0])   # position 0
    with pytest.raises(ValueError, match=r"x: expected shape \[\.\.\., T, d\] with d even"):
        rope_rotate_half(np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"base: expected a positive number, got 0"):
        rope_rotate_half(np.ones((4, 6)), base=0)


def test_llama_block_is_forwards_step_causal_and_an_identity_at_zero():
    cfg = LlamaConfig(V=30, ctx=10, d=16, L=1, h=4, h_kv=2, d_ff=24, rope_base=500.0,
                      eps=1e-3)
    p = init_params(cfg, 3)
    ids = np.random.default_rng(7).integers(0, cfg.V, size=(2, 6))
    x = p["tok_emb"][ids]                                        # [B, T, d]
    block = params.block_params(p, 0)
    out = llama_block(x, block, cfg)
    logits = rms_norm(out, p["lnf_g"], cfg.eps) @ p["head"].T    # [B, T, V]
    np.testing.assert_allclose(forward(p, ids, cfg), logits, atol=1e-12)
    np.testing.assert_allclose(llama_block(x[1], block, cfg), out[1], atol=1e-12)
    changed = x.copy()
    changed[:, -1] += 1.0                                        # only the last token
    np.testing.assert_allclose(llama_block(changed, block, cfg)[:, :-1], out[:, :-1],
                               atol=1e-12)
    zeros = {k: np.zeros_like(v) for k, v in block.items()}
    np.testing.assert_array_equal(llama_block(x, zeros, cfg), x)
    with pytest.raises(ValueError, match=r"p: missing key 'W_up'"):
        llama_block(x, {k: v for k, v in block.items() if k != "W_up"}, cfg)
    with pytest.raises(ValueError, match=r"p\['W_kv'\]: expected shape \[d, 2d_kv\] = "
                                         r"\(16, 16\), got \(16, 8\)"):
        llama_block(x, {**block, "W_kv": np.zeros((16, 8))}, cfg)
    with pytest.raises(ValueError, match=r"x: expected shape \[\.\.\., T, d\] = "
                                         r"\(\.\.\., 6, 16\), got \(2, 6, 8\)"):
        llama_block(x[..., :8], block, cfg)
    with pytest.raises(TypeError, match=r"cfg: expected a LlamaConfig"):
        llama_block(x, block, params.GPT2_SMALL)


def test_pieces_reject_bad_arguments_by_name():
    with pytest.raises(ValueError, match=r"eps: expected a positive number, got -1"):
        rms_norm(np.ones((2, 8)), np.ones(8), eps=-1)
    with pytest.raises(ValueError, match=r"x: expected shape \[\.\.\., T, d\], got \(8,\)"):
        swiglu(np.ones(8), np.ones((8, 6)), np.ones((8, 6)), np.ones((6, 8)))
    with pytest.raises(ValueError, match=r"W_down: expected shape \[d_ff, d\] = \(6, 8\), "
                                         r"got \(8, 6\)"):
        swiglu(np.ones((2, 8)), np.ones((8, 6)), np.ones((8, 6)), np.ones((8, 6)))


def test_state_dict_of_numpy_arrays_without_prefix_and_a_cast():
    model = _hf_model(*SHAPES[2])
    cfg = config_from_hf(model.config)
    state = {k.removeprefix("model."): v.numpy().copy() for k, v in model.state_dict().items()}
    state.pop("lm_head.weight")                   # tied: the head may be left out
    p = params_from_hf(state, cfg, dtype=np.float64)
    assert p["tok_emb"].dtype == np.float64
    ids = np.arange(cfg.ctx) % cfg.V
    np.testing.assert_allclose(forward(p, ids, cfg), _hf_logits(model, ids[None])[0],
                               atol=1e-4, rtol=0)


# ---------------------------------------------------------------- counts


def test_presets_count_the_published_totals_to_the_digit():
    assert count_params(LLAMA2_7B) == 6_738_415_616
    assert count_params(LLAMA3_8B) == 8_030_261_248
    assert LLAMA3_8B.d_head == 128 and LLAMA3_8B.d_kv == 1024
    assert swiglu_width(4096) == LLAMA2_7B.d_ff == 11_008
    assert swiglu_width(4096, multiple_of=1024, multiplier=1.3) == LLAMA3_8B.d_ff == 14_336
    kinds = count_by_kind(LLAMA3_8B)
    assert kinds["head"] == kinds["embeddings"] == 128_256 * 4096
    assert kinds["norms"] == (2 * 32 + 1) * 4096
    assert sum(v for k, v in kinds.items() if k != "total") == kinds["total"]


@pytest.mark.parametrize("preset", [LLAMA2_7B, LLAMA3_8B], ids=["llama2-7b", "llama3-8b"])
def test_presets_match_hugging_face_on_the_meta_device(preset):
    config = HFLlamaConfig(vocab_size=preset.V, max_position_embeddings=preset.ctx,
                           hidden_size=preset.d, num_hidden_layers=preset.L,
                           num_attention_heads=preset.h, num_key_value_heads=preset.h_kv,
                           intermediate_size=preset.d_ff, rope_theta=preset.rope_base,
                           rms_norm_eps=preset.eps, tie_word_embeddings=False)
    assert config_from_hf(config) == preset
    with torch.device("meta"):                     # shapes only, nothing allocated
        model = LlamaForCausalLM(config)
    assert model.num_parameters() == count_params(preset)


def test_each_change_counted_against_chapter_7s_table():
    gpt = params.GPT2_SMALL
    count7 = params.count_params
    d, L, d_kv = gpt.d, gpt.L, 3 * gpt.d_head
    assert count_params(gpt2_design(gpt)) == count7(gpt) == 124_439_808

    def only(change):
        return count_params(with_changes(gpt, [change], h_kv=3, d_ff=2048))

    assert only("RMSNorm") == count7(gpt, without=("ln1_b", "ln2_b", "lnf_b"))
    assert only("RoPE") == count7(gpt, without=("pos_emb",))
    assert only("no biases") == count7(gpt, without=("b_qkv", "b_o", "b_1", "b_2"))
    assert only("untied head") == count7(dataclasses.replace(gpt, tied=False))
    # SwiGLU at 8d/3: three [d, 2048] hold exactly what two [d, 3072] held; biases differ.
    assert only("SwiGLU") - count7(gpt) == L * (2 * 2048 - 3072)
    # GQA: K and V shrink from d to d_kv columns each (and their biases).
    assert count7(gpt) - only("GQA") == L * 2 * (d + 1) * (d - d_kv)


def test_design_steps_end_at_the_llama_config():
    steps = design_steps(params.GPT2_SMALL, h_kv=3)
    assert [name for name, _ in steps] == ["GPT-2", *CHANGES]
    assert [len(design.changes) for _, design in steps] == list(range(7))
    last = steps[-1][1]
    llama_sized = LlamaConfig(V=50_257, ctx=1_024, d=768, L=12, h=12, h_kv=3, d_ff=2048)
    assert last == llama_sized.design
    assert param_shapes(last) == param_shapes(llama_sized)


def test_flops_and_kv_cache_of_the_steps():
    T = 1024
    costs = step_costs(design_steps(params.GPT2_SMALL, h_kv=3), T)
    gpt, rms, swi, rop, gqa, nob, untied = costs
    # GPT-2's FLOPs per token are chapter 7's exact count for a dense pass, divided by T.
    assert gpt.flops * T == flops.forward_matmul_flops(params.GPT2_SMALL, T)
    assert gpt.kv_bytes == flops.kv_cache_bytes(params.GPT2_SMALL, T)
    # Norms, biases, RoPE and untying change no matrix product; GQA cuts K and V work.
    assert gpt.flops == rms.flops == swi.flops == rop.flops
    assert gqa.flops == nob.flops == untied.flops < rop.flops
    assert rop.flops - gqa.flops == 12 * 2 * 2 * 768 * (768 - 192)
    assert gqa.kv_bytes * 4 == rop.kv_bytes == gpt.kv_bytes == untied.kv_bytes * 4
    assert untied.params - nob.params == 50_257 * 768


def test_forward_matmul_flops_match_torchs_flop_counter_on_hugging_face():
    model = _hf_model(*SHAPES[1])                 # eager attention: explicit matmuls
    cfg = config_from_hf(model.config)
    ids = torch.zeros(3, cfg.ctx, dtype=torch.long)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(ids)
    assert counter.get_total_flops() == forward_matmul_flops(cfg, cfg.ctx, B=3)
    per_token = flops_per_token(cfg, cfg.ctx)["total"]
    assert forward_matmul_flops(cfg, cfg.ctx) == cfg.ctx * per_token


def test_kv_cache_of_the_presets():
    assert kv_cache_bytes(LLAMA2_7B, 4096) == 2 * 32 * 4096 * 4096 * 2 == 2 * 2**30
    assert kv_cache_bytes(LLAMA3_8B, 4096) * 4 == kv_cache_bytes(LLAMA2_7B, 4096)
    assert kv_cache_bytes(LLAMA3_8B, 8192, B=2, bytes_per_value=4) == 4 * 2**30
    # Exercise A.4: at 8,192 tokens in bf16, h_kv = 8 instead of 32 saves 3 GiB a sequence.
    mha = dataclasses.replace(LLAMA3_8B, h_kv=32)
    assert kv_cache_bytes(mha, 8192) - kv_cache_bytes(LLAMA3_8B, 8192) == 3 * 2**30


# ---------------------------------------------------------------- the pieces


def test_rms_norm_matches_torch_and_drops_the_centring():
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((2, 3, 8)), rng.standard_normal(8)
    want = F.rms_norm(torch.from_numpy(x), (8,), torch.from_numpy(g), eps=1e-5).numpy()
    np.testing.assert_allclose(rms_norm(x, g, 1e-5), want, atol=1e-12, rtol=0)
    ones = np.ones(8)
    out = rms_norm(x, ones)
    rms = np.sqrt((rms_norm(x, ones, eps=1e-12) ** 2).mean(-1))   # [2, 3]
    np.testing.assert_allclose(rms, 1.0, atol=1e-10)
    np.testing.assert_allclose(rms_norm(3.0 * x, ones, eps=1e-12), rms_norm(x, ones, eps=1e-12))
    assert np.abs(rms_norm(x + 2.0, ones) - out).max() > 0.1     # a shift is not removed
    assert rms_norm(x.astype(np.float32), ones.astype(np.float32)).dtype == np.float32


def test_silu_and_swiglu_match_torch():
    rng = np.random.default_rng(1)
    z = np.array([-1000.0, -20.0, -1.0, 0.0, 1.0, 20.0, 1000.0])
    with np.errstate(all="raise"):                            # no overflow on the way
        np.testing.assert_allclose(silu(z), F.silu(torch.from_numpy(z)).numpy(), atol=1e-12)
    x = rng.standard_normal((2, 5, 8))
    Wg, Wu, Wd = rng.standard_normal((8, 12)), rng.standard_normal((8, 12)), \
        rng.standard_normal((12, 8))
    t = [torch.from_numpy(a) for a in (x, Wg, Wu, Wd)]
    want = ((F.silu(t[0] @ t[1]) * (t[0] @ t[2])) @ t[3]).numpy()
    np.testing.assert_allclose(swiglu(x, Wg, Wu, Wd), want, atol=1e-10, rtol=0)


def test_grouped_query_attention_with_rope_turns_queries_and_keys_per_head():
    rng = np.random.default_rng(2)
    d, h, h_kv, T = 16, 4, 2, 6
    x = rng.standard_normal((T, d))
    W_q, W_o = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    W_kv = rng.standard_normal((d, 2 * h_kv * d // h))
    out, weights = grouped_query_attention(x, W_q, W_kv, W_o, h, h_kv, rope_base=50.0)
    q = rope(split_heads(x @ W_q, h), base=50.0)             # [h, T, d_head]
    k, v = (split_heads(t, h_kv) for t in np.split(x @ W_kv, 2, axis=-1))
    k = np.repeat(rope(k, base=50.0), h // h_kv, axis=0)     # [h, T, d_head]
    ref, ref_w = attention(q, k, np.repeat(v, h // h_kv, axis=0), causal_mask(T))
    np.testing.assert_allclose(weights, ref_w, atol=1e-12)
    np.testing.assert_allclose(out, np.swapaxes(ref, 0, 1).reshape(T, d) @ W_o, atol=1e-12)
    plain, _ = grouped_query_attention(x, W_q, W_kv, W_o, h, h_kv)
    assert np.abs(plain - out).max() > 1e-3                  # RoPE did something
    np.testing.assert_allclose(plain[0], out[0], atol=1e-12)  # ... except at position 0
    with pytest.raises(ValueError, match=r"rope_base: RoPE turns features in pairs, so "
                                         r"d_head = d / h must be even, got d_head=3"):
        grouped_query_attention(np.ones((2, 12)), np.ones((12, 12)), np.ones((12, 24)),
                                np.ones((12, 12)), 4, 4, rope_base=1e4)


def test_init_and_forward_batch_and_causality():
    cfg = LlamaConfig(V=30, ctx=10, d=16, L=2, h=4, h_kv=2, d_ff=24)
    p = init_params(cfg, 0)
    assert {k: v.shape for k, v in p.items()} == param_shapes(cfg)
    np.testing.assert_array_equal(init_params(cfg, 0)["head"], p["head"])
    assert init_params(cfg, 0, dtype=np.float32)["head"].dtype == np.float32
    assert np.all(p["blocks.1.ln2_g"] == 1.0)
    ids = np.random.default_rng(5).integers(0, cfg.V, size=(3, 7))
    logits = forward(p, ids, cfg)                             # [B, T, V]
    assert logits.shape == (3, 7, 30)
    np.testing.assert_allclose(logits[1], forward(p, ids[1], cfg), atol=1e-12)
    changed = ids.copy()
    changed[:, -1] = (changed[:, -1] + 1) % cfg.V             # only the last token differs
    np.testing.assert_allclose(forward(p, changed, cfg)[:, :-1], logits[:, :-1], atol=1e-12)
    tied = dataclasses.replace(cfg, tied=True)
    assert "head" not in init_params(tied, 0)
    assert count_params(cfg) - count_params(tied) == 30 * 16


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"d": 30}, r"cfg.h: d=30 is not divisible by h=4 heads"),
    ({"h_kv": 3}, r"cfg.h_kv: h=4 query heads do not split into groups for h_kv=3"),
    ({"h_kv": 8}, r"cfg.h_kv: h=4 query heads do not split into groups for h_kv=8"),
    ({"d": 12}, r"cfg.h: RoPE turns features in pairs, so d_head = d / h must be even, "
                r"got d_head=3"),
    ({"V": 0}, r"cfg.V: expected a positive integer, got 0"),
    ({"d_ff": 2.0}, r"cfg.d_ff: expected a positive integer, got 2.0"),
    ({"rope_base": 0.0}, r"cfg.rope_base: expected a positive number, got 0.0"),
    ({"eps": -1e-5}, r"cfg.eps: expected a positive number, got -1e-05"),
    ({"tied": 1}, r"cfg.tied: expected True or False, got 1"),
])
def test_config_rejects_impossible_shapes(kwargs, message):
    good = {"V": 30, "ctx": 10, "d": 16, "L": 2, "h": 4, "h_kv": 2, "d_ff": 24}
    with pytest.raises(ValueError, match=message):
        LlamaConfig(**{**good, **kwargs})


def test_design_and_changes_reject_bad_input():
    with pytest.raises(ValueError, match=r"design.h_kv: h=12 query heads do not split"):
        with_changes(params.GPT2_SMALL, ["GQA"], h_kv=5, d_ff=2048)
    with pytest.raises(ValueError, match=r"h_kv: grouped-query attention needs fewer "
                                         r"key/value heads than the h=12 query heads, got "
                                         r"h_kv=12"):
        with_changes(params.GPT2_SMALL, ["GQA"], h_kv=12, d_ff=2048)
    with pytest.raises(ValueError, match=r"changes: unknown change 'ReLU'"):
        with_changes(params.GPT2_SMALL, ["ReLU"], h_kv=3, d_ff=2048)
    with pytest.raises(ValueError, match=r"design.bias: expected True or False"):
        Design(V=5, ctx=4, d=8, L=1, h=2, h_kv=2, d_ff=8, bias=None)
    with pytest.raises(TypeError, match=r"cfg: expected a LlamaConfig .* or a Design, got "
                                        r"GPTConfig"):
        count_params(params.GPT2_SMALL)
    with pytest.raises(TypeError, match=r"cfg: expected a LlamaConfig"):
        forward({}, np.zeros(3, dtype=int), gpt2_design())
    with pytest.raises(ValueError, match=r"T: T=2048 exceeds ctx=1024"):
        kv_cache_bytes(gpt2_design(), 2048)
    with pytest.raises(ValueError, match=r"n: expected a positive integer, got 0"):
        flops_per_token(LLAMA3_8B, 0)
    with pytest.raises(ValueError, match=r"multiplier: expected a positive number"):
        swiglu_width(4096, multiplier=-1.3)
    with pytest.raises(ValueError, match=r"d_head: expected an even width"):
        rotate_half_permutation(7)


def test_forward_rejects_bad_ids_and_params():
    cfg = LlamaConfig(V=30, ctx=10, d=16, L=1, h=4, h_kv=2, d_ff=24)
    p = init_params(cfg, 0)
    with pytest.raises(ValueError, match=r"ids: expected integers in \[0, V\) = \[0, 30\), "
                                         r"got max 30"):
        forward(p, np.array([1, 30]), cfg)
    with pytest.raises(ValueError, match=r"ids: T=11 exceeds ctx=10"):
        forward(p, np.zeros(11, dtype=int), cfg)
    with pytest.raises(ValueError, match=r"params: missing key 'blocks.0.W_kv'"):
        forward({k: v for k, v in p.items() if k != "blocks.0.W_kv"}, np.zeros(3, int), cfg)
    with pytest.raises(ValueError, match=r"params: unknown key 'pos_emb'"):
        forward({**p, "pos_emb": np.zeros((10, 16))}, np.zeros(3, int), cfg)
    bad = {**p, "blocks.0.W_kv": np.zeros((16, 8))}
    with pytest.raises(ValueError, match=r"params\['blocks.0.W_kv'\]: expected shape "
                                         r"\[d, 2d_kv\] = \(16, 16\), got \(16, 8\)"):
        forward(bad, np.zeros(3, int), cfg)
    with pytest.raises(ValueError, match=r"g: expected shape \[d\] = \(8,\), got \(4,\)"):
        rms_norm(np.ones((2, 8)), np.ones(4))
    with pytest.raises(ValueError, match=r"W_up: expected shape \[d, d_ff\] = \(8, 6\), "
                                         r"got \(8, 5\)"):
        swiglu(np.ones((2, 8)), np.ones((8, 6)), np.ones((8, 5)), np.ones((6, 8)))


def test_params_from_hf_names_what_is_wrong():
    model = _hf_model(*SHAPES[1])
    cfg = config_from_hf(model.config)
    state = dict(model.state_dict())
    with pytest.raises(ValueError, match=r"missing key 'layers.1.mlp.up_proj.weight'"):
        params_from_hf({k: v for k, v in state.items() if "1.mlp.up_proj" not in k}, cfg)
    with pytest.raises(ValueError, match=r"unknown key 'layers.2.input_layernorm.weight'"):
        params_from_hf({**state, "model.layers.2.input_layernorm.weight": torch.ones(48)},
                       cfg)
    with pytest.raises(ValueError, match=r"state_dict\['model.layers.0.self_attn.k_proj."
                                         r"weight'\]: expected shape \[d_kv, d\] = "
                                         r"\(8, 48\), got \(16, 48\)"):
        params_from_hf(state, dataclasses.replace(cfg, h_kv=1))
    with pytest.raises(ValueError, match=r"missing key 'lm_head.weight' \(cfg.tied is False"):
        params_from_hf({k: v for k, v in state.items() if k != "lm_head.weight"}, cfg)
    with pytest.raises(ValueError, match=r"cfg.tied: True, but state_dict\['lm_head.weight'\] "
                                         r"differs"):
        params_from_hf(state, dataclasses.replace(cfg, tied=True))
    with pytest.raises(TypeError, match=r"cfg: expected a LlamaConfig"):
        params_from_hf(state, params.GPT2_SMALL)


@pytest.mark.parametrize(("setting", "value"), [
    ("attention_bias", True), ("mlp_bias", True), ("hidden_act", "gelu"), ("head_dim", 8),
])
def test_config_from_hf_refuses_what_the_model_does_not_do(setting, value):
    config = HFLlamaConfig(hidden_size=64, num_attention_heads=4, intermediate_size=96,
                           num_hidden_layers=1, vocab_size=10, **{setting: value})
    with pytest.raises(ValueError, match=rf"hf_config.{setting}: .* is not supported"):
        config_from_hf(config)


def test_config_from_hf_refuses_scaled_rope():
    config = HFLlamaConfig(hidden_size=64, num_attention_heads=4, intermediate_size=96,
                           num_hidden_layers=1, vocab_size=10)
    config.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}
    with pytest.raises(ValueError, match=r"hf_config.rope_parameters: 'linear' is not"):
        config_from_hf(config)
