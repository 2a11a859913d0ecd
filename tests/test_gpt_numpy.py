"""anatomy.gpt_numpy: chapter 8's "nasi lemak" model, causality, batching, the residual
decomposition, the loss, generation, and parity with a GPT built from torch.nn modules
(float64 within 1e-12)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from anatomy.blocks import relu
from anatomy.gpt_numpy import forward, forward_cached, generate, lm_loss, loss
from anatomy.params import TOY, GPTConfig, init_params

TINY = GPTConfig(V=13, ctx=8, d=16, L=2, h=2, d_ff=32)


@pytest.fixture(scope="module")
def toy_params():
    return init_params(TOY, np.random.default_rng(0))


def _random_params(cfg, seed):
    """Every entry random (LayerNorm and biases too), so no part of the model is trivially 0/1."""
    rng = np.random.default_rng(seed)
    return {k: v + rng.standard_normal(v.shape) * 0.2
            for k, v in init_params(cfg, rng).items()}


# ---------------------------------------------------------------- chapter 8 worked example


def test_ch8_nasi_lemak():
    text = "nasi lemak"
    vocab = sorted(set(text))
    V, T, d, h, d_ff = len(vocab), 5, 16, 2, 64
    assert V == 9
    rng = np.random.default_rng(42)
    draws = {name: rng.standard_normal(shape) * 0.1 for name, shape in [
        ("tok_emb", (V, d)), ("pos_emb", (T, d)), ("blocks.0.W_qkv", (d, 3 * d)),
        ("blocks.0.W_o", (d, d)), ("blocks.0.W_1", (d, d_ff)), ("blocks.0.W_2", (d_ff, d))]}
    # LayerNorm without scale or shift is g = 1, b = 0; "no biases" is biases of 0.
    ones, zeros = np.ones(d), np.zeros(d)
    params = {**draws, "blocks.0.ln1_g": ones, "blocks.0.ln1_b": zeros,
              "blocks.0.b_qkv": np.zeros(3 * d), "blocks.0.b_o": zeros,
              "blocks.0.ln2_g": ones, "blocks.0.ln2_b": zeros,
              "blocks.0.b_1": np.zeros(d_ff), "blocks.0.b_2": zeros,
              "lnf_g": ones, "lnf_b": zeros}
    cfg = GPTConfig(V=V, ctx=T, d=d, L=1, h=h, d_ff=d_ff)
    ids = np.array([vocab.index(c) for c in "nasi "])
    logits, trace = forward(params, ids, cfg, act=relu, return_trace=True)
    assert trace["embed"].shape == (5, 16)
    assert (trace["embed"] @ params["blocks.0.W_qkv"]).shape == (5, 48)
    assert trace["blocks.0.weights"].shape == (2, 5, 5)
    assert trace["blocks.0.attn"].shape == trace["blocks.0.mlp"].shape == (5, 16)
    assert logits.shape == (5, 9)
    e = np.exp(logits[-1] - logits[-1].max())
    probs = dict(zip(vocab, np.round(e / e.sum(), 3).tolist(), strict=True))
    assert probs == {" ": 0.211, "a": 0.115, "e": 0.112, "i": 0.123, "k": 0.062,
                     "l": 0.151, "m": 0.076, "n": 0.090, "s": 0.060}


# ---------------------------------------------------------------- properties


def test_changing_the_last_token_changes_only_the_last_logits(toy_params):
    ids = np.array([5, 17, 3, 40, 8])
    other = ids.copy()
    other[-1] = 9
    a, b = forward(toy_params, ids, TOY), forward(toy_params, other, TOY)
    assert a.shape == (5, 65)
    np.testing.assert_allclose(a[:-1], b[:-1], atol=1e-12, rtol=0)
    assert np.abs(a[-1] - b[-1]).max() > 1e-3


def test_batched_forward_equals_each_sequence():
    params = _random_params(TINY, 1)
    ids = np.random.default_rng(1).integers(0, TINY.V, size=(3, 6))
    logits = forward(params, ids, TINY)
    assert logits.shape == (3, 6, TINY.V)
    for b in range(3):
        np.testing.assert_allclose(logits[b], forward(params, ids[b], TINY), atol=1e-12)


def test_final_stream_is_embedding_plus_every_write():
    params = _random_params(TINY, 2)
    logits, trace = forward(params, np.array([1, 4, 2, 8]), TINY, return_trace=True)
    total = trace["embed"] + sum(trace[f"blocks.{i}.{part}"]
                                 for i in range(TINY.L) for part in ("attn", "mlp"))
    np.testing.assert_allclose(total, trace[f"blocks.{TINY.L - 1}.out"], atol=1e-12)
    np.testing.assert_array_equal(trace["logits"], logits)
    assert list(trace)[0] == "embed" and list(trace)[-1] == "logits"


def test_matches_a_gpt_built_from_torch_modules(torch_reference):
    params = _random_params(TINY, 3)
    ids = np.random.default_rng(3).integers(0, TINY.V, size=(2, TINY.ctx))
    c = TINY
    model = torch_reference.GPT(c.V, c.ctx, c.d, c.L, c.h, c.d_ff).double().load(params)
    with torch.no_grad():
        ref = model.eval()(torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(forward(params, ids, TINY), ref, atol=1e-12, rtol=0)


def test_kv_cache_gives_the_logits_of_a_full_recompute():
    params = _random_params(TINY, 8)
    ids = np.random.default_rng(8).integers(0, TINY.V, size=(2, TINY.ctx))
    full = forward(params, ids, TINY)
    logits, cache = forward_cached(params, ids[:, :5], TINY)         # prefill 5 tokens
    pieces = [logits]
    for t in range(5, TINY.ctx):                                     # then one at a time
        logits, cache = forward_cached(params, ids[:, t:t + 1], TINY, cache)
        pieces.append(logits)
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, atol=1e-12)
    assert len(cache) == TINY.L and cache[0][0].shape == (2, TINY.h, TINY.ctx, TINY.d_head)


# ---------------------------------------------------------------- loss


def test_loss_matches_torch_cross_entropy_and_survives_huge_logits():
    rng = np.random.default_rng(4)
    logits, targets = rng.standard_normal((2, 5, 7)) * 3, rng.integers(0, 7, size=(2, 5))
    ref = F.cross_entropy(torch.from_numpy(logits.reshape(10, 7)),
                          torch.from_numpy(targets.reshape(10))).item()
    assert loss(logits, targets) == pytest.approx(ref, abs=1e-12)
    with np.errstate(over="raise", invalid="raise", divide="raise"):   # underflow to 0 is fine
        huge = loss(logits * 1e4, targets)
    assert np.isfinite(huge) and huge > 0
    assert loss(np.array([[1e4, 0.0]]), np.array([0])) == pytest.approx(0.0, abs=1e-12)


def test_lm_loss_is_next_token_loss_near_ln_v_at_init(toy_params):
    ids = np.random.default_rng(5).integers(0, TOY.V, size=(2, 32))
    logits = forward(toy_params, ids, TOY)
    value = lm_loss(toy_params, ids, TOY)
    assert value == pytest.approx(loss(logits[:, :-1], ids[:, 1:]), abs=1e-12)
    assert abs(value - np.log(TOY.V)) < 0.15          # ln 65 = 4.17: a near-uniform guess


# ---------------------------------------------------------------- generation


def test_greedy_generation_keeps_the_prompt_and_picks_argmaxes(toy_params):
    prompt = np.array([5, 17, 3])
    out = generate(toy_params, prompt, TOY, n_new=6)
    assert out.shape == (9,) and out.dtype.kind == "i"
    np.testing.assert_array_equal(out[:3], prompt)
    for t in range(3, 9):
        assert out[t] == forward(toy_params, out[:t], TOY)[-1].argmax()


def test_greedy_generation_from_random_weights_repeats_one_token(toy_params):
    out = generate(toy_params, np.array([1, 2, 3, 4, 5]), TOY, n_new=10)
    assert len(set(out[5:].tolist())) == 1


def test_generation_crops_the_context_to_ctx():
    params = _random_params(TINY, 6)
    prompt = np.random.default_rng(6).integers(0, TINY.V, size=12)    # longer than ctx = 8
    out = generate(params, prompt, TINY, n_new=3)
    assert out.shape == (15,)
    np.testing.assert_array_equal(out[-3:], generate(params, prompt[-TINY.ctx:], TINY, 3)[-3:])


def test_sampling_is_reproducible_and_respects_top_k():
    params = _random_params(TINY, 7)
    prompt = np.array([[1, 2], [3, 4]])
    a = generate(params, prompt, TINY, 5, temperature=1.0, rng=np.random.default_rng(0))
    b = generate(params, prompt, TINY, 5, temperature=1.0, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (2, 7)
    greedy = generate(params, prompt, TINY, 5)
    top1 = generate(params, prompt, TINY, 5, temperature=2.0, top_k=1,
                    rng=np.random.default_rng(1))
    np.testing.assert_array_equal(top1, greedy)
    # With top_k = 3 every sampled token is among the 3 likeliest at its step.
    c = generate(params, prompt[0], TINY, 6, temperature=5.0, top_k=3,
                 rng=np.random.default_rng(2))
    for t in range(2, 8):
        top3 = np.argsort(forward(params, c[:t], TINY)[-1])[-3:]
        assert c[t] in top3


# ---------------------------------------------------------------- errors


def test_bad_ids_are_named(toy_params):
    with pytest.raises(ValueError, match=r"ids: expected integers in \[0, V\) = \[0, 65\), "
                                         r"got max 70"):
        forward(toy_params, np.array([3, 70]), TOY)
    with pytest.raises(ValueError, match=r"ids: expected integers .* got min -1"):
        forward(toy_params, np.array([-1, 3]), TOY)
    with pytest.raises(TypeError, match=r"ids: expected integers .* got dtype float64"):
        forward(toy_params, np.array([1.0, 2.0]), TOY)
    with pytest.raises(ValueError, match=r"ids: T=80 exceeds ctx=64"):
        forward(toy_params, np.zeros(80, dtype=int), TOY)
    with pytest.raises(ValueError, match=r"ids: expected shape \[T\] or \[B, T\], "
                                         r"got \(1, 2, 3\)"):
        forward(toy_params, np.zeros((1, 2, 3), dtype=int), TOY)
    with pytest.raises(ValueError, match=r"ids: expected shape \[T\] or \[B, T\] with T >= 1"):
        forward(toy_params, np.zeros(0, dtype=int), TOY)


def test_bad_loss_and_generation_arguments_are_named(toy_params):
    with pytest.raises(ValueError, match=r"targets: expected shape \[\.\.\.\] = \(2, 5\)"):
        loss(np.zeros((2, 5, 7)), np.zeros((2, 4), dtype=int))
    with pytest.raises(ValueError, match=r"targets: expected integers in \[0, V\) = \[0, 7\)"):
        loss(np.zeros((2, 7)), np.array([1, 7]))
    with pytest.raises(ValueError, match=r"ids: expected .* T >= 2"):
        lm_loss(toy_params, np.array([3]), TOY)
    with pytest.raises(ValueError, match=r"rng: sampling with temperature > 0 needs"):
        generate(toy_params, np.array([1]), TOY, 2, temperature=1.0)
    with pytest.raises(ValueError, match=r"top_k: expected an integer in \[1, V\] = \[1, 65\]"):
        generate(toy_params, np.array([1]), TOY, 2, top_k=0)
    _, cache = forward_cached(toy_params, np.arange(60), TOY)
    with pytest.raises(ValueError, match=r"ids: T_past \+ T = 60 \+ 5 exceeds ctx=64"):
        forward_cached(toy_params, np.arange(5), TOY, cache)
    with pytest.raises(ValueError, match=r"cache: expected L = 2 \(K, V\) pairs"):
        forward_cached(toy_params, np.arange(5), TOY, cache[:1])
