"""anatomy.gpt_numpy.params_from_hf: Hugging Face GPT-2 weights through the book's NumPy
forward pass give Hugging Face's own logits (float32 within 1e-4, float64 within 1e-10).

Offline: the models are randomly initialised GPT2LMHeadModel / GPT2Model of several shapes,
never downloaded. Every weight is redrawn at a larger scale (LayerNorm gains and biases too),
so the logits are of order 1-10 and no part of the model is a no-op.
"""

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model

from anatomy.gpt_numpy import forward, params_from_hf
from anatomy.params import GPTConfig, param_shapes

# (vocab_size, n_positions, n_embd, n_layer, n_head, n_inner): d_ff default 4d, custom,
# one head, many heads, one block, several blocks.
SHAPES = [
    (50, 16, 32, 2, 4, None),
    (97, 24, 48, 3, 6, 80),
    (11, 8, 16, 1, 1, None),
    (64, 12, 64, 2, 16, 96),
]


def _hf_model(V, ctx, d, L, h, d_ff, seed=0, cls=GPT2LMHeadModel, **extra):
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=V, n_positions=ctx, n_embd=d, n_layer=L, n_head=h,
                        n_inner=d_ff, bos_token_id=0, eos_token_id=0, **extra)
    model = cls(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "wte" in name or "wpe" in name:
                p.copy_(0.5 * torch.randn_like(p))
            elif p.ndim == 2:                                   # Conv1D weights are [in, out]
                p.copy_(torch.randn_like(p) / p.shape[0] ** 0.5)
            elif name.endswith(".weight"):                      # LayerNorm gains
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            else:                                               # biases and LayerNorm shifts
                p.copy_(0.3 * torch.randn_like(p))
    return model


def _hf_logits(model, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(ids)).logits.numpy()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "V{}-ctx{}-d{}-L{}-h{}-ff{}".format(*s))
def test_logits_match_hugging_face_float32(shape):
    V, ctx, d, L, h, d_ff = shape
    model = _hf_model(*shape)
    assert model.config.activation_function == "gelu_new"     # GELU, tanh form, as ours
    params, cfg = params_from_hf(model.state_dict(), h=h)
    assert cfg == GPTConfig(V=V, ctx=ctx, d=d, L=L, h=h, d_ff=d_ff or 4 * d, tied=True)
    assert list(params) == list(param_shapes(cfg))
    assert all(v.dtype == np.float32 for v in params.values())
    ids = np.random.default_rng(1).integers(0, V, size=(2, ctx))
    want = _hf_logits(model, ids)
    assert np.abs(want).max() > 1.0                           # a real test, not tiny numbers
    got = forward(params, ids, cfg)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    # One sequence without a batch axis, and a prompt shorter than ctx.
    np.testing.assert_allclose(forward(params, ids[0, :5], cfg), want[0, :5], atol=1e-4, rtol=0)


def test_float64_agrees_to_1e_10():
    model = _hf_model(*SHAPES[1]).double()
    params, cfg = params_from_hf(model.state_dict(), h=6)
    assert params["tok_emb"].dtype == np.float64
    ids = np.random.default_rng(2).integers(0, cfg.V, size=(3, cfg.ctx))
    np.testing.assert_allclose(forward(params, ids, cfg), _hf_logits(model, ids),
                               atol=1e-10, rtol=0)


def test_numpy_arrays_buffers_and_dtype_are_accepted():
    model = _hf_model(*SHAPES[0])
    state = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    ctx = 16
    # Older checkpoints store the causal mask as per-block buffers: they are skipped.
    state["transformer.h.0.attn.bias"] = np.tril(np.ones((ctx, ctx)))[None, None]
    state["transformer.h.1.attn.masked_bias"] = np.array(-1e4)
    params, cfg = params_from_hf(state, h=4, dtype=np.float64)
    assert params["blocks.0.W_qkv"].dtype == np.float64 and cfg.L == 2
    ids = np.arange(10)[None]
    np.testing.assert_allclose(forward(params, ids, cfg), _hf_logits(model, ids), atol=1e-4)


def test_gpt2model_keys_without_prefix_or_head():
    base = _hf_model(*SHAPES[0], cls=GPT2Model)
    state = base.state_dict()
    assert not any(k.startswith("transformer.") or k.startswith("lm_head") for k in state)
    params, cfg = params_from_hf(state, h=4)
    assert cfg.tied and cfg.L == 2
    ids = np.array([[3, 1, 4, 1, 5]])
    with torch.no_grad():
        hidden = base(torch.from_numpy(ids)).last_hidden_state     # after ln_f
        want = (hidden @ base.wte.weight.T).numpy()                 # the tied head
    np.testing.assert_allclose(forward(params, ids, cfg), want, atol=1e-4, rtol=0)


def test_untied_head_is_kept():
    model = _hf_model(*SHAPES[0], tie_word_embeddings=False)
    state = model.state_dict()
    assert not torch.equal(state["lm_head.weight"], state["transformer.wte.weight"])
    params, cfg = params_from_hf(state, h=4)
    assert not cfg.tied and params["head"].shape == (50, 32)
    ids = np.random.default_rng(3).integers(0, 50, size=(1, 16))
    np.testing.assert_allclose(forward(params, ids, cfg), _hf_logits(model, ids), atol=1e-4)


def test_mistakes_are_named():
    state = dict(_hf_model(*SHAPES[2]).state_dict())
    with pytest.raises(ValueError, match=r"missing key 'h\.0\.attn\.c_proj\.weight'"):
        params_from_hf({k: v for k, v in state.items() if "attn.c_proj.weight" not in k}, h=1)
    with pytest.raises(ValueError, match=r"unknown key 'h\.0\.attn\.q_proj\.weight'"):
        params_from_hf({**state, "transformer.h.0.attn.q_proj.weight": torch.zeros(16, 16)},
                       h=1)
    bad = {**state, "transformer.h.0.attn.c_attn.weight": torch.zeros(48, 16)}   # [3d, d]
    with pytest.raises(ValueError, match=r"state_dict\['transformer\.h\.0\.attn\.c_attn\."
                                         r"weight'\]: expected shape \[d, 3d\] = \(16, 48\), "
                                         r"got \(48, 16\)"):
        params_from_hf(bad, h=1)
    with pytest.raises(ValueError, match=r"d=16 is not divisible by h=3"):
        params_from_hf(state, h=3)
    with pytest.raises(ValueError, match=r"expected a GPT-2 state_dict"):
        params_from_hf({"embed.weight": torch.zeros(3, 4)}, h=1)
