"""anatomy.viz.calculator's figures: chapter 7's KV cache against the weights."""

import matplotlib
import pytest

from anatomy.flops import kv_cache_bytes, weight_bytes
from anatomy.params import TOY

matplotlib.use("Agg")


def test_kv_cache_figure_draws_one_line_per_batch_and_the_weights():
    import matplotlib.pyplot as plt

    from anatomy.viz.calculator import kv_cache_figure

    fig = kv_cache_figure(TOY, batches=(1, 4), name="toy")
    (ax,) = fig.axes
    *caches, weights = ax.get_lines()
    assert len(caches) == 2
    for line, B in zip(caches, (1, 4), strict=True):
        T, mib = line.get_data()
        assert list(T) == list(range(1, TOY.ctx + 1))
        assert mib[-1] * 2**20 == pytest.approx(kv_cache_bytes(TOY, TOY.ctx, B))
    assert weights.get_ydata()[0] * 2**20 == pytest.approx(weight_bytes(TOY))
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert "toy" in ax.get_title() and "fp16" in ax.get_ylabel()
    plt.close(fig)
