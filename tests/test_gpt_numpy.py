"""anatomy.gpt_numpy: chapter 8's "nasi lemak" model, causality, batching, the residual
decomposition, the embedding, the loss, generation (with and without a KV cache) and its
cost, and parity with a GPT built from torch.nn modules (float64 within 1e-12) and with
anatomy.gpt_torch (float64 within 1e-13, float32 within 1e-5, as chapter 8 prints)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from anatomy.attention import scaled_scores, softmax
from anatomy.blocks import layer_norm, mlp, relu
from anatomy.gpt_numpy import (
    embed,
    forward,
    forward_cached,
    generate,
    generate_cached,
    lm_loss,
    loss,
    next_token_distribution,
    next_token_loss,
    sample,
    step_macs,
)
from anatomy.gpt_torch import from_numpy
from anatomy.heads import merge_heads, split_heads
from anatomy.masks import causal_mask
from anatomy.params import GPT2_SMALL, TOY, GPTConfig, init_params

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


def _nasi_lemak():
    """Chapter 8's one-block model: draws in the syllabus's order, g = 1, b = 0, no biases."""
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
    return vocab, params, cfg, ids


def test_ch8_nasi_lemak():
    vocab, params, cfg, ids = _nasi_lemak()
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
    assert max(probs, key=probs.get) == " "       # the character just read (tied head)


def test_ch8_nasi_lemak_by_hand_equals_forward():
    """The chapter's step-by-step route through the block gives forward()'s logits."""
    vocab, p, cfg, ids = _nasi_lemak()
    ones, zeros = np.ones(cfg.d), np.zeros(cfg.d)
    x = embed(p["tok_emb"], p["pos_emb"], ids)                         # [5, 16]
    qkv = layer_norm(x, ones, zeros) @ p["blocks.0.W_qkv"]             # [5, 48]
    q, k, v = (split_heads(t, cfg.h) for t in np.split(qkv, 3, axis=-1))
    scores = scaled_scores(q, k)                                       # [2, 5, 5]
    weights = softmax(np.where(causal_mask(5), -np.inf, scores))
    x = x + merge_heads(weights @ v) @ p["blocks.0.W_o"]
    x = x + mlp(layer_norm(x, ones, zeros), p["blocks.0.W_1"], None, p["blocks.0.W_2"], None,
                act=relu)
    logits = layer_norm(x, ones, zeros) @ p["tok_emb"].T               # [5, 9]
    assert qkv.shape == (5, 48) and scores.shape == (2, 5, 5) and logits.shape == (5, 9)
    np.testing.assert_allclose(logits, forward(p, ids, cfg, act=relu), atol=1e-14, rtol=0)


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


# ---------------------------------------------------------------- chapter 8 additions


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-13), (np.float32, 1e-5)])
def test_matches_anatomy_gpt_torch(dtype, tol):
    """The chapter's parity figure: the library's PyTorch GPT, loaded with the same NumPy
    weights (every entry perturbed, so no LayerNorm or bias is trivial)."""
    params = {k: v.astype(dtype) for k, v in _random_params(TOY, 9).items()}
    ids = np.random.default_rng(9).integers(0, TOY.V, size=(2, 32))
    model = from_numpy(params, TOY).eval()
    with torch.no_grad():
        ref = model(torch.from_numpy(ids)).numpy()
    got = forward(params, ids, TOY)
    assert got.dtype == ref.dtype == dtype and np.abs(ref).max() > 1.0
    np.testing.assert_allclose(got, ref, atol=tol, rtol=0)


def test_ch8_loss_at_init_and_greedy_repeats_the_last_prompt_token(toy_params):
    batch = np.random.default_rng(1).integers(0, TOY.V, size=(8, TOY.ctx))
    assert abs(lm_loss(toy_params, batch, TOY) - np.log(65)) < 0.05     # ln 65 = 4.17
    out = generate(toy_params, np.array([1, 2, 3, 4, 5]), TOY, n_new=10)
    np.testing.assert_array_equal(out[5:], 5)


def test_embed_adds_token_rows_and_the_first_t_position_rows():
    rng = np.random.default_rng(10)
    tok_emb, pos_emb = rng.standard_normal((7, 4)), rng.standard_normal((6, 4))
    ids = np.array([[3, 0, 6], [1, 1, 2]])
    x = embed(tok_emb, pos_emb, ids)
    assert x.shape == (2, 3, 4)
    np.testing.assert_array_equal(x[1], tok_emb[[1, 1, 2]] + pos_emb[:3])
    np.testing.assert_array_equal(embed(tok_emb, pos_emb, ids[0], start=2),
                                  tok_emb[[3, 0, 6]] + pos_emb[2:5])
    with pytest.raises(ValueError, match=r"pos_emb: expected shape \[ctx, d\] = \(6, 4\), "
                                         r"got \(6, 3\)"):
        embed(tok_emb, pos_emb[:, :3], ids)
    with pytest.raises(ValueError, match=r"ids: expected integers in \[0, V\) = \[0, 7\)"):
        embed(tok_emb, pos_emb, np.array([7]))
    with pytest.raises(ValueError, match=r"start: positions 4\.\.6 exceed ctx=6"):
        embed(tok_emb, pos_emb, ids, start=4)


def test_next_token_loss_scores_row_t_against_token_t_plus_1():
    rng = np.random.default_rng(11)
    logits, ids = rng.standard_normal((3, 6, 5)), rng.integers(0, 5, size=(3, 6))
    value = next_token_loss(logits, ids)
    assert value == pytest.approx(loss(logits[:, :-1], ids[:, 1:]), abs=1e-15)
    picked = [-np.log(softmax(logits[b, t]))[ids[b, t + 1]] for b in range(3) for t in range(5)]
    assert value == pytest.approx(np.mean(picked), abs=1e-12)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        assert np.isfinite(next_token_loss(logits * 1e4, ids))
    with pytest.raises(ValueError, match=r"ids: expected shape \[\.\.\., T\] = \(\.\.\., 6\), "
                                         r"got \(3, 5\)"):
        next_token_loss(logits, ids[:, 1:])
    # Leading axes that would broadcast are still wrong: one id row per row of logits.
    with pytest.raises(ValueError, match=r"ids: expected shape \[\.\.\., T\] = \(3, 6\) "
                                         r"\(logits \[\.\.\., T, V\] without V\), got \(1, 6\)"):
        next_token_loss(logits, ids[:1])
    with pytest.raises(ValueError, match=r"T >= 2"):
        next_token_loss(logits[:, :1], ids[:, :1])


def test_next_token_distribution_temperature_and_top_k():
    logits = np.array([[2.0, 1.0, 0.5, -1.0], [0.0, 0.0, 3.0, 3.0]])
    p = next_token_distribution(logits)
    np.testing.assert_allclose(p, softmax(logits), atol=1e-15)
    np.testing.assert_allclose(next_token_distribution(logits, 0.5), softmax(2 * logits))
    top2 = next_token_distribution(logits, top_k=2)
    assert (top2[0, 2:] == 0).all() and (top2[1, :2] == 0).all()
    np.testing.assert_allclose(top2.sum(axis=-1), 1.0)
    np.testing.assert_allclose(top2[0, :2], softmax(logits[0, :2]))
    # Ties with the k-th largest are kept: both 3.0s survive top_k=1.
    np.testing.assert_allclose(next_token_distribution(logits[1], top_k=1), [0, 0, 0.5, 0.5])
    cold, hot = next_token_distribution(logits[0], 0.01), next_token_distribution(logits[0], 1e3)
    assert cold[0] > 0.999 and np.abs(hot - 0.25).max() < 1e-2
    with pytest.raises(ValueError, match=r"temperature: expected a positive number"):
        next_token_distribution(logits, 0.0)
    with pytest.raises(ValueError, match=r"top_k: expected an integer in \[1, V\] = \[1, 4\]"):
        next_token_distribution(logits, top_k=5)


def test_generate_cached_gives_the_tokens_of_generate():
    params = _random_params(TINY, 12)
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(generate_cached(params, prompt, TINY, 5),
                                  generate(params, prompt, TINY, 5))
    kwargs = {"temperature": 1.5, "top_k": 4}
    a = generate_cached(params, prompt[0], TINY, 5, rng=np.random.default_rng(3), **kwargs)
    b = generate(params, prompt[0], TINY, 5, rng=np.random.default_rng(3), **kwargs)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"n_new: T \+ n_new = 3 \+ 6 exceeds ctx=8"):
        generate_cached(params, prompt, TINY, 6)
    with pytest.raises(ValueError, match=r"rng: sampling with temperature > 0 needs"):
        generate_cached(params, prompt, TINY, 2, temperature=1.0)
    # The same argument checks as generate (one check, so they cannot drift apart).
    for bad, says in (({"top_k": 999, "temperature": 1.0}, r"top_k: expected an integer in "
                       r"\[1, V\] = \[1, 13\]"), ({"temperature": -1.0}, "temperature")):
        with pytest.raises(ValueError, match=says):
            generate_cached(params, prompt, TINY, 2, rng=np.random.default_rng(0), **bad)


def test_step_macs_counts_by_hand():
    c = TINY                                          # d = 16, L = 2, d_ff = 32, V = 13
    full = step_macs(c, 3, cached=False)
    assert full == {"projections": 2 * 3 * 4 * 16 * 16, "attention": 2 * 2 * 9 * 16,
                    "mlp": 2 * 3 * 2 * 16 * 32, "head": 3 * 16 * 13,
                    "total": 6144 + 576 + 6144 + 624}
    kv = step_macs(c, 3, cached=True)
    assert kv == {"projections": 2 * 4 * 16 * 16, "attention": 2 * 2 * 3 * 16,
                  "mlp": 2 * 2 * 16 * 32, "head": 16 * 13, "total": 2048 + 192 + 2048 + 208}
    assert step_macs(c, 1, cached=False) == step_macs(c, 1, cached=True)
    # A generation step needs the last row's logits only: the head runs once.
    last = step_macs(c, 3, cached=False, all_logits=False)
    assert last["head"] == 16 * 13 and last["total"] == full["total"] - 2 * 16 * 13
    assert {k: v for k, v in last.items() if k not in ("head", "total")} == {
        k: v for k, v in full.items() if k not in ("head", "total")}
    # The ratio to a cached step is exactly T when the head runs on all T rows.
    for T in (2, 5, 8):
        assert step_macs(c, T, cached=False)["total"] == T * step_macs(c, T, cached=True)["total"]
    # GPT-2 small, one token: 12 (4 d^2 + 2 d d_ff) + 2 L d + d V multiply-adds (the chapter).
    assert step_macs(GPT2_SMALL, 1, cached=True)["total"] == 123_550_464
    with pytest.raises(ValueError, match=r"T: T=9 exceeds ctx=8"):
        step_macs(c, 9, cached=True)


def test_sample_draws_by_the_cumulative_total_and_names_a_missing_generator():
    probs = np.array([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    draws = np.stack([sample(probs, np.random.default_rng(s)) for s in range(200)])
    assert (draws[:, 0] == 1).all()                         # probability 1
    assert set(draws[:, 1].tolist()) == {0, 2}              # never the token of p = 0
    with pytest.raises(ValueError, match=r"rng: expected a np.random.Generator, got 0"):
        sample(probs, 0)
    with pytest.raises(ValueError, match=r"probs: expected shape \[\.\.\., V\], got \(\)"):
        sample(np.float64(1.0), np.random.default_rng(0))
    for bad in ([0.0, 0.0, 0.0], [0.6, -0.5, 0.9], [0.5, np.nan, 0.5]):
        with pytest.raises(ValueError, match=r"probs: expected finite numbers >= 0 with a "
                                             r"positive sum"):
            sample(np.array(bad), np.random.default_rng(0))


EDIT = GPTConfig(V=11, ctx=12, d=16, L=2, h=4)


def test_forward_edit_matches_the_same_change_made_in_the_weights():
    # Zeroing block 0's attention write by an edit == zero W_o and b_o: the MLP of block 0
    # must read the edited stream, as must every later block.
    params = _random_params(EDIT, 0)
    ids = np.random.default_rng(2).integers(0, EDIT.V, size=(2, 8))

    def no_attn0(name, write, writes):
        return np.zeros_like(write) if name == "blocks.0.attn" else write

    def no_mlp1(name, write, writes):
        return np.zeros_like(write) if name == "blocks.1.mlp" else write

    quiet = {**params, "blocks.0.W_o": 0 * params["blocks.0.W_o"],
             "blocks.0.b_o": 0 * params["blocks.0.b_o"]}
    got = forward(params, ids, EDIT, edit=no_attn0)
    assert np.allclose(got, forward(quiet, ids, EDIT), atol=1e-12)
    quiet = {**params, "blocks.1.W_2": 0 * params["blocks.1.W_2"],
             "blocks.1.b_2": 0 * params["blocks.1.b_2"]}
    got = forward(params, ids, EDIT, edit=no_mlp1)
    assert np.allclose(got, forward(quiet, ids, EDIT), atol=1e-12)
    same = forward(params, ids, EDIT, edit=lambda name, write, writes: write)
    assert np.array_equal(same, forward(params, ids, EDIT))
