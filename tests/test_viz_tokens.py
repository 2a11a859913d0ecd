"""The tokens chapter's compression figure."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from anatomy.viz.tokens import draw_compression  # noqa: E402


def test_one_line_per_tokenizer_through_its_sizes_in_order():
    rates = {("bpe", 1024): 2.3, ("bpe", 256): 1.0, ("bpe", 512): 1.9, ("gpt2", 50257): 3.1}
    fig = draw_compression(rates)
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["bpe", "gpt2"]
    assert list(lines[0].get_xdata()) == [256, 512, 1024]
    assert list(lines[0].get_ydata()) == [1.0, 1.9, 2.3]
    assert fig.axes[0].get_xscale() == "log"
    plt.close(fig)


def test_no_rates_is_refused():
    with pytest.raises(ValueError, match="expected at least one"):
        draw_compression({})
