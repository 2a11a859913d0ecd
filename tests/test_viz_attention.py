"""anatomy.viz.attention: chapter 1's stages are the library's attention, and the chosen
query is outlined only where its computation is one row (Q, scores, weights, output)."""

import matplotlib.pyplot as plt
import numpy as np
import pytest

from anatomy.attention import attention, scaled_scores
from anatomy.examples import TOKENS, ali_makan
from anatomy.viz.attention import QUERY_ROWS, draw_stages, self_attention_stages


@pytest.fixture
def stages():
    ex = ali_makan()
    return self_attention_stages(ex["X"], ex["W_q"], ex["W_k"], ex["W_v"])


def _outlines(ax) -> list[tuple[float, float, float]]:
    """(x, y, width) of every outline rectangle drawn on a panel."""
    return [(p.get_x(), p.get_y(), p.get_width()) for p in ax.patches
            if isinstance(p, plt.Rectangle) and not p.get_fill()]


def test_stages_are_the_library_attention(stages):
    ex = ali_makan()
    Q, K, V = (ex["X"] @ ex[w] for w in ("W_q", "W_k", "W_v"))   # [T, d] @ [d, d_k]
    out, weights = attention(Q, K, V)
    assert np.allclose(stages["scores"], scaled_scores(Q, K))
    assert np.allclose(stages["weights"], weights) and np.allclose(stages["output"], out)
    assert np.allclose(stages["weights"][3], [0.96, 0.03, 0.01, 0.00], atol=0.005)


@pytest.mark.parametrize("query", [0, 3])
def test_only_the_query_rows_are_outlined(stages, query):
    fig = draw_stages(stages, TOKENS, upto="output", query=query)
    titles = [ax.get_title().split("\n")[0] for ax in fig.axes]
    assert titles == ["X", "Q", "K", "V", "scores", "weights", "output"]
    for ax, name in zip(fig.axes, titles, strict=True):
        width = stages[name].shape[1]
        want = [(-0.5, query - 0.5, width)] if name in QUERY_ROWS else []
        assert _outlines(ax) == want, name             # no row of X, K or V is outlined
    plt.close(fig)


def test_no_outline_without_a_query_and_stages_stop_at_upto(stages):
    fig = draw_stages(stages, TOKENS, upto="scores")
    assert [ax.get_title().split("\n")[0] for ax in fig.axes] == ["X", "Q", "K", "V",
                                                                  "scores"]
    assert all(_outlines(ax) == [] for ax in fig.axes)
    assert fig.axes[4].get_title().split("\n")[1] == "[4, 4]"   # every panel shows its shape
    plt.close(fig)


def test_bad_arguments_are_named(stages):
    with pytest.raises(ValueError, match="upto: expected one of"):
        draw_stages(stages, TOKENS, upto="softmax")
    with pytest.raises(ValueError, match=r"query: expected a token index in \[0, T\) = "
                                          r"\[0, 4\), got 4"):
        draw_stages(stages, TOKENS, query=4)
    with pytest.raises(ValueError, match="query"):
        draw_stages(stages, TOKENS, query=True)


def test_lab_redraws_for_another_query(monkeypatch):
    pytest.importorskip("ipywidgets")
    import IPython.display

    from anatomy.viz import attention as viz

    shown, drawn = [], []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    real = viz.draw_stages

    def spy(stages, tokens, upto="output", query=None):
        drawn.append((upto, query))
        return real(stages, tokens, upto=upto, query=query)

    monkeypatch.setattr(viz, "draw_stages", spy)
    ex = ali_makan()
    viz.attention_lab(ex["X"], ex["W_q"], ex["W_k"], ex["W_v"], TOKENS)
    box = shown[0]
    stage, query = box.children[0].children
    query.value = 3
    stage.value = "scores"
    assert drawn == [("output", 0), ("output", 3), ("scores", 3)]
    caption = box.children[-1]
    assert caption.value == ""                         # no weights shown before "weights"
    stage.value = "weights"
    assert caption.value.startswith("<b>lemak</b> attends: Ali 0.96")
    plt.close("all")
