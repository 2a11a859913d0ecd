"""anatomy.scaling: chapter 2's worked example (the syllabus's table), the spread of q . k,
the temperature, the per-head scale, and the softmax Jacobian against finite differences.
"""

import numpy as np
import pytest

from anatomy.attention import softmax
from anatomy.params import GPT2_SMALL, TOY
from anatomy.scaling import (
    attention_weights,
    jacobian_norm_by_scale,
    multi_head_weights,
    saturation_stats,
    scaling_experiment,
    score_std,
    score_std_at_init,
    softmax_jacobian,
)

# ---------------------------------------------------------------- chapter 2 worked example


def test_ch2_scaling_table():
    rng = np.random.default_rng(42)
    rows = {}
    for d in (4, 64, 512):
        q = rng.standard_normal((1000, d))
        k = rng.standard_normal((1000, 16, d))
        raw = np.einsum("nd,nkd->nk", q, k)     # [N, d], [N, 16, d] -> [N, 16]
        top_unscaled = softmax(raw).max(axis=-1).mean()
        top_scaled = softmax(raw / np.sqrt(d)).max(axis=-1).mean()
        rows[d] = (raw.std(), top_unscaled, top_scaled)
    assert [round(rows[d][0], 1) for d in (4, 64, 512)] == [2.0, 8.0, 22.5]
    assert [round(rows[d][1], 2) for d in (4, 64, 512)] == [0.43, 0.84, 0.95]
    assert [round(rows[d][2], 2) for d in (4, 64, 512)] == [0.24, 0.24, 0.25]


def test_scaling_experiment_reproduces_the_syllabus_table():
    rows = scaling_experiment()
    assert [r["d_k"] for r in rows] == [4, 64, 512]
    assert [round(r["std"], 1) for r in rows] == [2.0, 8.0, 22.5]
    assert [round(r["top_unscaled"], 2) for r in rows] == [0.43, 0.84, 0.95]
    assert [round(r["top_scaled"], 2) for r in rows] == [0.24, 0.24, 0.25]
    # the scale brings the spread back to about 1 at every width
    assert all(abs(r["std_scaled"] - 1) < 0.02 for r in rows)


def test_scaling_experiment_follows_the_recipe_draw_for_draw():
    # widths are drawn in the order given from one generator: a different order differs
    first = scaling_experiment(dims=(64,), n=50, n_keys=4, seed=3)[0]
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((50, 64)), rng.standard_normal((50, 4, 64))
    raw = np.einsum("nd,nkd->nk", q, k)
    assert first["std"] == pytest.approx(raw.std(), abs=1e-12)
    assert first["top_scaled"] == pytest.approx(softmax(raw / 8).max(-1).mean(), abs=1e-12)


def test_score_std_is_about_sqrt_dk():
    for d_k in (1, 16, 256):
        assert score_std(d_k) == pytest.approx(np.sqrt(d_k), rel=0.05)
    assert score_std(16, seed=1) == score_std(16, seed=1)


def test_score_std_is_a_measurement_that_varies_with_seed_and_n():
    # a small sample gives a noisy estimate, different for every seed; n = 1 pair has std 0
    few = [score_std(4, n=20, seed=s) for s in range(50)]
    assert len(set(few)) == 50 and 0.1 < np.std(few) / 2 < 0.4
    assert score_std(4, n=1) == 0.0
    for bad in ({"d_k": 0}, {"d_k": 4, "n": 0}, {"d_k": 2.0}, {"d_k": True}):
        with pytest.raises(ValueError, match="expected a positive integer"):
            score_std(**{"d_k": 4, **bad})


def test_score_std_at_init_of_gpt2_small_follows_the_variance_calculation():
    # q = LayerNorm(x) @ W_q with W_q ~ N(0, 0.02^2): entries of variance d * 0.02^2, shrunk a
    # little by LayerNorm's eps against the tiny embeddings (var 2 * 0.02^2); q . k over a
    # head of d_head entries then has std sqrt(d_head) * d * 0.02^2 * that shrink
    got = score_std_at_init(GPT2_SMALL, T=256, seed=0)
    shrink = 2 * 0.02**2 / (2 * 0.02**2 + 1e-5)
    q_var = GPT2_SMALL.d * 0.02**2 * shrink
    assert got["q_std"] == pytest.approx(np.sqrt(q_var), rel=0.02)
    assert got["k_std"] == pytest.approx(np.sqrt(q_var), rel=0.02)
    assert got["raw"] == pytest.approx(np.sqrt(GPT2_SMALL.d_head) * q_var, rel=0.03)
    assert 2.3 < got["raw"] < 2.6                    # not the 8 of unit-variance entries
    assert got["scaled"] == pytest.approx(got["raw"] / 8, rel=1e-12)
    assert score_std_at_init(TOY, T=16, seed=1) == score_std_at_init(TOY, T=16, seed=1)
    # without eps the shrink is gone and the calculation holds to sampling error
    bare = score_std_at_init(GPT2_SMALL, T=256, seed=0, eps=0.0)
    var_w = GPT2_SMALL.d * 0.02**2
    assert bare["raw"] == pytest.approx(np.sqrt(GPT2_SMALL.d_head) * var_w, rel=0.01)
    assert bare["raw"] > got["raw"]
    # the input's variance is two tables' 0.02^2, and eps shrinks q . k by var / (var + eps)
    assert got["x_var"] == pytest.approx(2 * 0.02**2, rel=0.02)
    assert bare["x_var"] == got["x_var"]
    eps_shrink = got["x_var"] / (got["x_var"] + 1e-5)
    assert got["raw"] == pytest.approx(bare["raw"] * eps_shrink, rel=2e-3)
    with pytest.raises(ValueError, match="T: expected a positive integer"):
        score_std_at_init(TOY, T=0)


def test_multi_head_weights_scale_each_head_by_its_own_width():
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 5, 12))                          # [B, T, d], h = 3 heads of 4
    W_q, W_k = rng.standard_normal((12, 12)), rng.standard_normal((12, 12))
    weights = multi_head_weights(x, W_q, W_k, 3)
    assert weights.shape == (2, 3, 5, 5)
    q, k = x @ W_q, x @ W_k
    for j in range(3):
        cols = slice(4 * j, 4 * j + 4)                           # head j's features
        np.testing.assert_allclose(weights[:, j], attention_weights(q[..., cols], k[..., cols]),
                                   atol=1e-12)
    np.testing.assert_allclose(multi_head_weights(x, W_q, W_k, 1)[:, 0],
                               attention_weights(q, k), atol=1e-12)
    assert multi_head_weights(x.astype(np.float32), W_q.astype(np.float32),
                              W_k.astype(np.float32), 3).dtype == np.float32
    with pytest.raises(ValueError, match=r"x: d=12 is not divisible by h=5 heads"):
        multi_head_weights(x, W_q, W_k, 5)
    with pytest.raises(ValueError, match="h: expected a positive integer"):
        multi_head_weights(x, W_q, W_k, 0)
    with pytest.raises(ValueError, match=r"W_k: expected shape \[d, d\] = \(12, 12\)"):
        multi_head_weights(x, W_q, W_k[:6], 3)


def test_gpt2_small_unscaled_std_and_e_to_the_8():
    assert GPT2_SMALL.d_head == 64 and np.sqrt(GPT2_SMALL.d_head) == 8.0
    p = softmax(np.array([8.0, 0.0]))
    assert p[0] / p[1] == pytest.approx(np.exp(8), rel=1e-12)
    assert round(np.exp(8), -3) == 3000


def test_attention_weights_temperature_and_scale():
    rng = np.random.default_rng(10)
    q, k = rng.standard_normal((2, 3, 16)), rng.standard_normal((2, 5, 16))
    raw = np.einsum("bqd,bkd->bqk", q, k)
    np.testing.assert_allclose(attention_weights(q, k), softmax(raw / 4), atol=1e-12)
    np.testing.assert_allclose(attention_weights(q, k, scaled=False), softmax(raw), atol=1e-12)
    np.testing.assert_allclose(attention_weights(q, k, temperature=2.5),
                               softmax(raw / 10), atol=1e-12)
    # dividing by sqrt(d_k) is a fixed temperature of sqrt(d_k)
    np.testing.assert_allclose(attention_weights(q, k, temperature=4.0, scaled=False),
                               attention_weights(q, k), atol=1e-12)
    with np.errstate(over="raise", invalid="raise"):
        cold = attention_weights(q * 100, k, temperature=1e-3)
    assert np.isfinite(cold).all()
    for bad in (0, -1.0, True, np.ones(2)):
        with pytest.raises(ValueError, match="temperature: expected a positive number"):
            attention_weights(q, k, temperature=bad)


def test_softmax_jacobian_matches_finite_differences():
    z = np.random.default_rng(11).standard_normal((3, 5)) * 2     # [B, n]
    J = softmax_jacobian(z)
    assert J.shape == (3, 5, 5)
    eps = 1e-6
    for b in range(3):
        for j in range(5):
            step = np.zeros(5)
            step[j] = eps
            column = (softmax(z[b] + step) - softmax(z[b] - step)) / (2 * eps)
            np.testing.assert_allclose(J[b, :, j], column, atol=1e-9)


def test_softmax_jacobian_structure():
    z = np.random.default_rng(12).standard_normal((4, 6))
    J = softmax_jacobian(z)
    p = softmax(z)
    np.testing.assert_allclose(J, np.swapaxes(J, -1, -2), atol=1e-15)
    np.testing.assert_allclose(J.sum(axis=-1), 0.0, atol=1e-15)   # shifting all scores: no change
    np.testing.assert_allclose(np.diagonal(J, axis1=-2, axis2=-1), p * (1 - p), atol=1e-15)
    uniform = softmax_jacobian(np.zeros(4))
    np.testing.assert_allclose(uniform, (np.eye(4) - 0.25) / 4, atol=1e-15)
    with np.errstate(over="raise", invalid="raise"):
        saturated = softmax_jacobian(np.array([1000.0, 0.0, -1000.0]))
    np.testing.assert_allclose(saturated, 0.0, atol=1e-300)
    np.testing.assert_array_equal(softmax_jacobian(np.array([3.0])), [[0.0]])
    with pytest.raises(ValueError, match=r"z: expected shape \[\.\.\., n\]"):
        softmax_jacobian(np.float64(1.0))


def test_jacobian_norm_falls_once_scores_saturate():
    stds = np.array([0.0, 1.0, 8.0, 22.5])
    norms = jacobian_norm_by_scale(stds, n=500)
    assert norms.shape == (4, 500)
    np.testing.assert_allclose(norms[0], 1 / 16, atol=1e-15)      # uniform weights
    median = np.median(norms, axis=1)
    assert median[1] > median[2] > 10 * median[3]
    assert median[3] < 1e-3
    # spectral norm of diag(p) - p p^T never exceeds 1/2
    assert norms.max() <= 0.5 + 1e-12
    with pytest.raises(ValueError, match="stds"):
        jacobian_norm_by_scale(np.array([-1.0]))


def test_saturation_stats_summarise_each_spread():
    norms = np.array([[0.1, 0.2, 0.3, 0.005],        # spread 0: one row of four frozen
                      [0.001, 0.002, 0.4, 0.5],      # spread 1: half frozen
                      [0.3, 0.25, 0.35, 0.2]])       # spread 2: the largest median
    stats = saturation_stats(norms)
    np.testing.assert_allclose(stats["median"], [0.15, 0.201, 0.275])
    np.testing.assert_allclose(stats["frozen"], [0.25, 0.5, 0.0])
    assert stats["peak"] == 2
    assert saturation_stats(norms, threshold=0.25)["frozen"].tolist() == [0.75, 0.5, 0.25]
    real = jacobian_norm_by_scale(np.array([1.0, 3.0, 22.5]), n=500)
    stats = saturation_stats(real)
    np.testing.assert_array_equal(stats["median"], np.median(real, axis=1))
    assert stats["peak"] == 1 and stats["frozen"][0] == 0 and stats["frozen"][2] > 0.5
    with pytest.raises(ValueError, match=r"norms: expected shape \[S, n\]"):
        saturation_stats(np.ones(3))
    with pytest.raises(ValueError, match="norms"):
        saturation_stats(-np.ones((2, 2)))


def test_query_gradient_norms_follow_the_chain_rule_to_the_query():
    # recompute one query's d p / d q = c J K by finite differences, scaled and unscaled
    from anatomy.scaling import query_gradient_norms

    d_k, n_keys = 8, 5
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((1, d_k)), rng.standard_normal((1, n_keys, d_k))
    for name, c in (("unscaled", 1.0), ("scaled", 1 / np.sqrt(d_k))):
        def weights(qq, c=c):
            return softmax(c * np.einsum("d,kd->k", qq, k[0]))   # [d_k] -> [n_keys]
        eps = 1e-6
        numeric = np.stack([(weights(q[0] + eps * e) - weights(q[0] - eps * e)) / (2 * eps)
                            for e in np.eye(d_k)], axis=1)        # [n_keys, d_k]
        row = query_gradient_norms(dims=(d_k,), n=1, n_keys=n_keys, seed=0)[0]
        assert row[f"to_query_{name}"] == pytest.approx(np.linalg.norm(numeric, 2), rel=1e-6)
        J = softmax_jacobian(c * np.einsum("d,kd->k", q[0], k[0]))
        assert row[f"to_scores_{name}"] == pytest.approx(np.linalg.norm(J, 2), rel=1e-6)


def test_query_gradient_norms_chapter_2_regime():
    from anatomy.scaling import query_gradient_norms

    rows = {r["d_k"]: r for r in query_gradient_norms()}
    # scaled: about 0.2 to the query and no frozen query at every width
    for r in rows.values():
        assert 0.17 < r["to_query_scaled"] < 0.23 and r["frozen_scaled"] == 0
    # unscaled at width 64: more to the query in the median than scaled, despite a
    # smaller Jacobian to the scores
    assert rows[64]["to_query_unscaled"] > 3 * rows[64]["to_query_scaled"]
    assert rows[64]["to_scores_unscaled"] < rows[64]["to_scores_scaled"]
    # unscaled: the share of frozen queries grows with the width, to about half at 512
    frozen = [rows[d]["frozen_unscaled"] for d in (16, 64, 256, 512)]
    assert frozen == sorted(frozen) and 0.4 < frozen[-1] < 0.6
    assert rows[512]["to_query_unscaled"] < 0.2 * rows[512]["to_query_scaled"]
