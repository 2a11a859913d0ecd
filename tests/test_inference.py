"""anatomy.inference: attention in tiles equals attention, decoding strategies cut what they
say, speculative decoding is exact (greedy: token for token; sampling: a chi-square test
that a wrong acceptance rule fails), and quantization is bounded and bad inputs are named.

Tolerances: tiled vs naive attention in float64, 1e-12 (measured about 1e-15). The
chi-square test draws N = 3000 sequences of 2 new tokens over V = 3 (9 outcomes, 8 degrees
of freedom) with fixed seeds; its threshold 26.1 is the 0.001 critical value, and the
known-wrong rule (resampling from p instead of the residual) scores in the hundreds.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from anatomy.attention import softmax
from anatomy.gpt_numpy import forward, generate_cached
from anatomy.inference import (
    absmax_int8,
    accept_or_resample,
    beam_search,
    decode,
    dequantize,
    expected_tokens_per_call,
    naive_attention,
    nbytes,
    online_softmax_update,
    output_distribution,
    peak_bytes,
    quantize,
    repeated_ngrams,
    repetition_penalty,
    residual,
    speculative_generate,
    text_stats,
    tiled_attention,
    truncate,
)
from anatomy.params import GPTConfig, init_params
from anatomy.sampling import next_token_probs
from anatomy.weights import load


def _random_model(cfg: GPTConfig, seed: int, scale: float = 0.5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: w + rng.standard_normal(w.shape) * scale
            for n, w in init_params(cfg, rng).items()}


# ---- tiles -------------------------------------------------------------------------------


@pytest.mark.parametrize("T", [1, 7, 64, 65, 130])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block", [1, 16, 64, 200])
def test_tiled_attention_equals_naive(T, causal, block):
    rng = np.random.default_rng(T * 7 + block)
    q, k, v = (rng.standard_normal((2, 3, T, 8)) for _ in range(3))
    got = tiled_attention(q, k, v, block=block, causal=causal)
    assert got.shape == (2, 3, T, 8)
    assert np.abs(got - naive_attention(q, k, v, causal)).max() < 1e-12


def test_tiled_attention_with_fewer_queries_than_keys_matches_a_kv_cache():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((4, T, 8)) for T in (20, 20, 20))
    full = tiled_attention(q, k, v, block=6, causal=True)
    last = tiled_attention(q[:, -5:], k, v, block=6, causal=True)      # T_q = 5 < T_k
    assert np.abs(last - full[:, -5:]).max() < 1e-12
    assert np.abs(tiled_attention(q[:, :5], k, v, 3) - naive_attention(q[:, :5], k, v)).max() \
        < 1e-12


def test_online_update_folds_into_softmax():
    rng = np.random.default_rng(1)
    s, v = rng.standard_normal((3, 10)) * 5, rng.standard_normal((10, 2))
    m, l, acc = np.full(3, -np.inf), np.zeros(3), np.zeros((3, 2))  # noqa: E741
    for j in range(0, 10, 3):
        m, l, acc = online_softmax_update(m, l, acc, s[:, j:j + 3], v[j:j + 3])  # noqa: E741
    assert np.allclose(acc / l[:, None], softmax(s) @ v, atol=1e-13)
    assert np.allclose(m, s.max(axis=-1))


def test_tiled_attention_keeps_only_tile_sized_scratch():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1024, 16)) for _ in range(3))
    naive = peak_bytes(naive_attention, q, k, v, True)
    tiled = peak_bytes(tiled_attention, q, k, v, 64, True)
    assert naive > 1024 * 1024 * 8                      # at least one [T, T] float64 table
    assert tiled < 1024 * 1024 * 8 / 8
    assert tiled_attention(q.astype(np.float32), k, v).dtype == np.float64   # result_type


@pytest.mark.parametrize("kwargs, says", [
    ({"block": 0}, "block: expected a positive integer, got 0"),
    ({"block": 2.0}, "block: expected a positive integer"),
    ({"causal": "yes"}, "causal: expected True or False"),
])
def test_tiled_attention_refuses_bad_arguments(kwargs, says):
    q = np.zeros((4, 2))
    with pytest.raises(ValueError, match=says):
        tiled_attention(q, q, q, **kwargs)
    with pytest.raises(ValueError, match=r"k: expected shape .* = \(..., 4, 2\), got \(4, 3\)"):
        tiled_attention(q, np.zeros((4, 3)), q)
    with pytest.raises(ValueError, match="causal pass needs T_q <= T_k"):
        tiled_attention(np.zeros((5, 2)), q, q, causal=True)


# ---- decoding ----------------------------------------------------------------------------


def test_truncations_keep_what_they_say():
    probs = np.array([0.5, 0.25, 0.15, 0.1])
    logits = np.log(probs)
    assert np.array_equal(truncate(logits, top_p=0.7) > 0, [True, True, False, False])
    assert np.array_equal(truncate(logits, top_p=0.75) > 0, [True, True, False, False])
    assert np.array_equal(truncate(logits, top_p=0.76) > 0, [True, True, True, False])
    assert np.array_equal(truncate(logits, top_p=0.01) > 0, [True, False, False, False])
    assert np.array_equal(truncate(logits, min_p=0.3) > 0, [True, True, True, False])
    assert np.array_equal(truncate(logits, top_k=3, min_p=0.4) > 0, [True, True, False, False])
    assert np.allclose(truncate(logits), probs)
    assert np.allclose(truncate(logits, top_p=0.7), [2 / 3, 1 / 3, 0, 0])
    batch = truncate(np.stack([logits, logits[::-1]]), top_p=0.7)        # [2, V]
    assert np.allclose(batch[1], batch[0][::-1])
    for bad in ({"top_p": 0}, {"top_p": 1.5}, {"min_p": -0.1}, {"min_p": True}):
        name = next(iter(bad))
        with pytest.raises(ValueError, match=f"{name}: expected a number in"):
            truncate(logits, **bad)


@pytest.mark.parametrize("kw", [{"top_p": 0.8}, {"min_p": 0.1}, {"top_k": 5, "top_p": 0.9},
                                {"temperature": 0.7, "min_p": 0.05}, {"top_k": 3}])
def test_numpy_and_torch_truncations_agree(kw):
    logits = np.random.default_rng(3).standard_normal(12) * 2
    ours = truncate(logits, **kw)
    theirs = next_token_probs(torch.from_numpy(logits), **kw).double().numpy()
    assert np.allclose(ours, theirs, atol=1e-6)


def test_torch_sample_takes_top_p_and_min_p():
    from anatomy.data import CharTokenizer
    from anatomy.gpt_torch import GPT
    from anatomy.sampling import sample

    tok = CharTokenizer("\n abcdefgh")
    torch.manual_seed(0)
    model = GPT(GPTConfig(V=tok.vocab_size, ctx=8, d=16, L=1, h=2))
    text = sample(model, tok, "ab", 10, top_p=0.01, generator=torch.Generator())
    assert text == sample(model, tok, "ab", 10, temperature=0)           # top-p tiny: greedy
    assert len(sample(model, tok, "ab", 10, min_p=0.5, generator=torch.Generator())) == 12
    with pytest.raises(ValueError, match="top_p: expected a number in"):
        sample(model, tok, "ab", 3, top_p=2.0)


def test_repetition_penalty_lowers_seen_tokens_either_sign():
    logits = np.array([2.0, -1.0, 0.5, 3.0])
    out = repetition_penalty(logits, np.array([0, 1, 1]), 2.0)
    assert np.allclose(out, [1.0, -2.0, 0.5, 3.0]) and logits[0] == 2.0
    assert np.array_equal(repetition_penalty(logits, np.array([3]), 1.0), logits)


TINY = GPTConfig(V=5, ctx=12, d=8, L=1, h=2, d_ff=16)


def test_decode_greedy_is_generate_cached_and_beam_one_is_greedy():
    params = _random_model(TINY, 0)
    prompt = np.array([1, 2])
    greedy = generate_cached(params, prompt, TINY, 6)
    assert np.array_equal(decode(params, TINY, prompt, 6), greedy)
    assert np.array_equal(beam_search(params, TINY, prompt, 6, beams=1)[0], greedy)
    a = decode(params, TINY, prompt, 6, temperature=1.0, top_p=0.9, rng=np.random.default_rng(0))
    b = decode(params, TINY, prompt, 6, temperature=1.0, top_p=0.9, rng=np.random.default_rng(0))
    assert np.array_equal(a, b)


def _total_logprob(params, cfg, ids, start):
    logits = forward(params, ids, cfg)
    log_p = np.log(softmax(logits))
    return sum(log_p[t - 1, ids[t]] for t in range(start, len(ids)))


def test_a_wide_enough_beam_finds_the_exhaustive_best():
    params, prompt, n = _random_model(TINY, 4, 1.0), np.array([0, 3]), 3
    best = max(itertools.product(range(TINY.V), repeat=n),
               key=lambda new: _total_logprob(params, TINY, np.array([*prompt, *new]), 2))
    ids, score = beam_search(params, TINY, prompt, n, beams=TINY.V ** 2)
    assert tuple(ids[2:]) == best
    assert score == pytest.approx(_total_logprob(params, TINY, ids, 2))
    greedy = generate_cached(params, prompt, TINY, n)
    assert score >= _total_logprob(params, TINY, greedy, 2) - 1e-12


def test_text_measures():
    assert repeated_ngrams([0, 1, 2, 0, 1, 2], 3) == 0.25
    assert repeated_ngrams([7] * 5, 2) == 0.75 and repeated_ngrams(np.arange(6), 2) == 0.0
    with pytest.raises(ValueError, match="at least n = 4 ids"):
        repeated_ngrams([1, 2], 4)
    params = _random_model(TINY, 1)
    stats = text_stats(params, TINY, np.array([1, 2, 3, 3, 3, 3]), 2, n=2)
    assert stats["repeated"] == pytest.approx(2 / 3) and stats["distinct"] == 1.0
    assert stats["loglik"] < 0


# ---- speculative decoding ----------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped():
    target, t_cfg, tok = load("shakespeare-char", dtype=np.float64)
    draft, d_cfg, _ = load("shakespeare-char-draft", dtype=np.float64)
    return target, t_cfg, draft, d_cfg, tok


def test_greedy_speculative_is_the_targets_greedy_output_on_many_prompts(shipped):
    target, t_cfg, draft, d_cfg, tok = shipped
    rng = np.random.default_rng(0)
    for i in range(12):
        T = int(rng.integers(1, 20))
        prompt = rng.integers(0, t_cfg.V, size=T)
        n_new = int(rng.integers(1, t_cfg.ctx - T + 1)) if i % 3 else t_cfg.ctx - T
        k = int(rng.integers(1, 7))
        ids, stats = speculative_generate(target, t_cfg, draft, d_cfg, prompt, n_new, k=k)
        assert np.array_equal(ids, generate_cached(target, prompt, t_cfg, n_new)), (i, k)
        assert stats["accepted"] <= stats["proposed"]
        assert stats["target_calls"] <= n_new


def test_a_draft_that_is_the_target_is_always_accepted(shipped):
    target, t_cfg, _, _, tok = shipped
    prompt = np.array(tok.encode("ROMEO:\n"))
    ids, stats = speculative_generate(target, t_cfg, target, t_cfg, prompt, 40, k=4)
    assert stats["accepted"] == stats["proposed"] and stats["target_calls"] == 8
    _, stats = speculative_generate(target, t_cfg, target, t_cfg, prompt, 40, k=4,
                                    temperature=1.0, seed=0)
    assert stats["accepted"] == stats["proposed"]          # p = q: min(1, p/q) = 1


def test_residual_rule_gives_the_targets_distribution_exactly():
    rng = np.random.default_rng(5)
    p, q = softmax(rng.standard_normal((50, 7)) * 2), softmax(rng.standard_normal((50, 7)))
    assert np.allclose(output_distribution(p, q), p, atol=1e-14)
    assert not np.allclose(output_distribution(p, q, lambda p, q: p), p, atol=1e-3)
    assert np.allclose(residual(p, p), p)
    assert expected_tokens_per_call(0.8, 4) == pytest.approx(1 + .8 + .64 + .512 + .4096)
    assert expected_tokens_per_call(1.0, 4) == 5.0


def _wrong_rule(p, q, drafts, rng):
    """The known-wrong rule: on rejection, draw from p instead of the residual."""
    from anatomy.gpt_numpy import sample

    for i, x in enumerate(drafts):
        if rng.random() >= min(1.0, p[i, x] / q[i, x]):
            return i, int(sample(p[i], rng))
    return len(drafts), int(sample(p[-1], rng))


SMALL = GPTConfig(V=3, ctx=6, d=8, L=1, h=2, d_ff=8)


def _chi_square(rule, n: int = 3000) -> float:
    target, draft = _random_model(SMALL, 10, 1.0), _random_model(SMALL, 11, 1.0)
    prompt = np.array([0, 2])
    exact = {}
    for new in itertools.product(range(SMALL.V), repeat=2):
        ids = np.array([*prompt, *new])
        exact[new] = np.exp(_total_logprob(target, SMALL, ids, 2))
    counts = dict.fromkeys(exact, 0)
    for seed in range(n):
        ids, _ = speculative_generate(target, SMALL, draft, SMALL, prompt, 2, k=2,
                                      temperature=1.0, seed=seed, accept=rule)
        counts[tuple(int(i) for i in ids[2:])] += 1
    return sum((counts[x] - n * e) ** 2 / (n * e) for x, e in exact.items())


@pytest.mark.slow
def test_sampled_speculative_output_has_the_targets_distribution():
    # 9 outcomes, 8 degrees of freedom: P(chi2 > 26.1) = 0.001 for the right rule.
    assert _chi_square(accept_or_resample) < 26.1
    assert _chi_square(_wrong_rule) > 26.1


@pytest.mark.parametrize("change, says", [
    ({"k": 0}, "k: expected an integer >= 1"),
    ({"draft_cfg": GPTConfig(V=66, ctx=64, d=64, L=1, h=4)},
     "draft must share the target's vocabulary, expected V = 65, got V = 66"),
    ({"temperature": -1}, "temperature: expected a number >= 0"),
    ({"n_new": 100}, "exceeds ctx=64"),
])
def test_speculative_refuses_bad_inputs(shipped, change, says):
    target, t_cfg, draft, d_cfg, tok = shipped
    args = {"target_params": target, "target_cfg": t_cfg, "draft_params": draft,
            "draft_cfg": d_cfg, "ids": np.array([1, 2]), "n_new": 5, **change}
    with pytest.raises(ValueError, match=says):
        speculative_generate(**args)


# ---- quantization ------------------------------------------------------------------------


@pytest.mark.parametrize("bits, group", [(8, None), (4, 32), (4, None), (8, 16)])
def test_quantize_round_trip_is_within_half_a_step(shipped, bits, group):
    params = load("shakespeare-char")[0]
    qp = quantize(params, bits, group)
    back = dequantize(qp)
    assert list(back) == list(params)
    for name, w in params.items():
        assert back[name].shape == w.shape and back[name].dtype == np.float32
        if w.ndim == 2 and name != "pos_emb":
            steps = qp[name].scale                          # [n_in / g, n_out]
            Wt = w.T if qp[name].transposed else w
            g = qp[name].group
            bound = np.repeat(steps, g, axis=0) / 2 * (1 + 1e-5)
            err = np.abs((back[name].T if qp[name].transposed else back[name]) - Wt)
            assert (err <= bound + 1e-7).all(), name
        else:
            assert np.array_equal(back[name], w)
    matrices = sum(w.size for n, w in params.items() if w.ndim == 2 and n != "pos_emb")
    assert nbytes(qp) < nbytes(params) - matrices * (4 - bits / 8) + 0.2 * nbytes(params)


def test_quantize_uses_the_channel_quantizer_it_is_given():
    params = {"W": np.array([[1.0, -2.0], [0.5, 4.0]], dtype=np.float32),
              "b": np.zeros(2, dtype=np.float32)}
    calls = []

    def halves(W):                                          # a stand-in: scale 0.5 everywhere
        calls.append(W.shape)
        return np.round(W / 0.5).astype(np.int8), np.full(W.shape[1], 0.5, np.float32)

    back = dequantize(quantize(params, 8, channel=halves))
    assert calls == [(2, 2)]
    assert np.array_equal(back["W"], params["W"]) and np.array_equal(back["b"], params["b"])
    assert calls == [(2, 2)] and len(quantize(params, 4, 1, channel=halves)) == 2
    assert calls == [(2, 2)]                                # int4 groups never call it
    same = dequantize(quantize(params, 8, channel=absmax_int8))["W"]
    assert np.array_equal(same, dequantize(quantize(params, 8))["W"])


def test_quantize_refuses_bad_inputs():
    params = {"W": np.ones((6, 4), dtype=np.float32)}
    with pytest.raises(ValueError, match="bits: expected 4 or 8, got 3"):
        quantize(params, bits=3)
    with pytest.raises(ValueError, match="group: expected a divisor .* W has 6 inputs"):
        quantize(params, bits=4, group=4)
    with pytest.raises(ValueError, match="group: expected a positive integer"):
        quantize(params, bits=4, group=0)
