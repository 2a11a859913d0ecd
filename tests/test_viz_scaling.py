"""anatomy.viz.scaling: chapter 2's figures draw what the library computes, and the lab runs."""

import matplotlib.pyplot as plt
import numpy as np
import pytest

from anatomy.scaling import attention_weights, jacobian_norm_by_scale
from anatomy.viz.scaling import (
    LAB_WIDTHS,
    draw_jacobian_norms,
    draw_query_weights,
    lab_top_weights,
    one_query,
    scaling_lab,
)


def test_one_query_is_seeded_and_shaped():
    q, k = one_query(64, n_keys=16, seed=0)
    assert q.shape == (64,) and k.shape == (16, 64)
    q2, k2 = one_query(64, n_keys=16, seed=0)
    np.testing.assert_array_equal(q, q2)
    np.testing.assert_array_equal(k, k2)


def test_narrower_heads_are_slices_of_one_draw():
    # the lab's d_k slider must add features to the same query and keys, not redraw them
    q_wide, k_wide = one_query(max(LAB_WIDTHS), n_keys=16, seed=3)
    for d_k in LAB_WIDTHS:
        q, k = one_query(d_k, n_keys=16, seed=3)
        assert q.shape == (d_k,) and k.shape == (16, d_k)
        np.testing.assert_array_equal(q, q_wide[:d_k])
        np.testing.assert_array_equal(k, k_wide[:, :d_k])
    q, k = one_query(1024, n_keys=4)                 # wider than the lab: drawn at its width
    assert q.shape == (1024,) and k.shape == (4, 1024)


def test_lab_top_weights_are_what_the_panels_draw():
    rows = lab_top_weights(n_keys=16, seed=0)
    assert [r["d_k"] for r in rows] == list(LAB_WIDTHS)
    for r in rows:
        q, k = one_query(r["d_k"], n_keys=16, seed=0)
        fig = draw_query_weights(q, k)
        left, right = ([bar.get_height() for bar in ax.patches] for ax in fig.axes)
        assert np.isclose(max(left), r["top_unscaled"]) and np.argmax(left) == r["key_unscaled"]
        assert np.isclose(max(right), r["top_scaled"]) and np.argmax(right) == r["key_scaled"]
        plt.close(fig)
    # the lab's point: from d_k = 64 on the unscaled panel is all but one-hot
    assert all(r["top_unscaled"] > 0.99 for r in rows if r["d_k"] >= 64)
    assert all(r["top_scaled"] < 0.6 for r in rows)


def test_bars_are_the_unscaled_and_scaled_weights():
    q, k = one_query(64)
    fig = draw_query_weights(q, k, temperature=2.0)
    left, right = fig.axes
    heights = [[bar.get_height() for bar in ax.patches] for ax in (left, right)]
    np.testing.assert_allclose(heights[0], attention_weights(q[None], k, 2.0, scaled=False)[0])
    np.testing.assert_allclose(heights[1], attention_weights(q[None], k, 2.0)[0])
    assert "q [64]" in fig._suptitle.get_text() and "K [16, 64]" in fig._suptitle.get_text()
    plt.close(fig)


def test_jacobian_figure_plots_the_median_and_the_marks():
    stds = np.array([0.0, 1.0, 8.0])
    norms = jacobian_norm_by_scale(stds, n=50)
    fig = draw_jacobian_norms(stds, norms, {"std 1": 1.0, "std 8": 8.0})
    ax = fig.axes[0]
    median = ax.lines[0]
    np.testing.assert_allclose(median.get_ydata(), np.median(norms, axis=1))
    assert [line.get_xdata()[0] for line in ax.lines[1:]] == [1.0, 8.0]
    plt.close(fig)


def test_lab_runs_without_a_kernel(capsys):
    pytest.importorskip("ipywidgets")
    scaling_lab()
    assert plt.get_fignums() == []          # the lab's figures are closed after rendering


def test_lab_temperature_reaches_past_every_widths_sqrt_dk(monkeypatch):
    # "raise tau to see how much it takes" must be doable at every width: the slider has to
    # go past sqrt(512) ~ 22.6, and sqrt(d_k) of each width must be one of its stops
    pytest.importorskip("ipywidgets")
    import anatomy.viz.scaling as lab

    shown = {}
    monkeypatch.setattr(lab, "show_lab", lambda rows, outputs, update: shown.update(
        rows=rows, outputs=outputs, update=update))
    lab.scaling_lab(n_keys=16, seed=0)
    (width, temperature), = shown["rows"]
    picture, caption = shown["outputs"]
    assert temperature.base ** temperature.max >= np.sqrt(max(width.options)) > 22.6
    assert temperature.base ** temperature.min <= 0.25
    stops = temperature.base ** np.arange(temperature.min, temperature.max + 1e-9,
                                          temperature.step)
    for d_k in width.options:
        assert np.isclose(stops, np.sqrt(d_k)).any(), d_k
    width.value, temperature.value = 512, np.sqrt(512)
    shown["update"]()
    assert bytes(picture.value[:4]) == b"\x89PNG" and "tau = 22.6" in caption.value
    q, k = one_query(512, n_keys=16, seed=0)
    np.testing.assert_allclose(attention_weights(q[None], k, temperature.value, scaled=False),
                               attention_weights(q[None], k), atol=1e-12)
    assert plt.get_fignums() == []
