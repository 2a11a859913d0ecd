"""anatomy.viz.residual: chapter 6's figures draw what they claim (the block diagram, GELU's
dip, the residual decomposition's bars, the gradient profiles), and the GELU minimum is
right."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from anatomy.blocks import residual_pieces  # noqa: E402
from anatomy.norm_placement import GradProfile  # noqa: E402
from anatomy.params import GPTConfig, block_params, init_params  # noqa: E402
from anatomy.viz.residual import (  # noqa: E402
    BLOCK_BOXES,
    contributions,
    draw_block_diagram,
    draw_gelu,
    draw_grad_profiles,
    draw_residual,
    gelu_minimum,
)


def _pieces(L: int = 3):
    cfg = GPTConfig(V=11, ctx=8, d=16, L=L, h=4)
    params = init_params(cfg, np.random.default_rng(0))
    blocks = [{k: v * 10 if k.startswith("W_") else v for k, v in block_params(params, i).items()}
              for i in range(L)]
    return residual_pieces(np.random.default_rng(1).standard_normal((5, 16)), blocks, 4)


def test_block_diagram_reads_through_layernorms_and_writes_by_two_additions():
    from matplotlib.patches import Circle, FancyBboxPatch

    fig = draw_block_diagram()
    (ax,) = fig.axes
    texts = [t.get_text() for t in ax.texts]
    for label, *_ in BLOCK_BOXES:
        assert label in texts
    assert [label for label, *_ in BLOCK_BOXES] == ["LN1", "Attention", "LN2", "MLP"]
    assert texts.count("+") == 2                                   # two writes, by addition
    assert sum(isinstance(p, Circle) for p in ax.patches) == 2
    assert sum(isinstance(p, FancyBboxPatch) for p in ax.patches) == 4
    stream = ax.lines[0]                                           # the residual stream
    assert stream.get_linewidth() == 3 and len(set(stream.get_ydata())) == 1
    # LN1 reads the stream before the first addition, LN2 after it (pre-norm, sequential)
    ln1_x, ln2_x = (x for x, _ in (ax.lines[i].get_xydata()[0] for i in (1, 2)))
    (add_1, _), (add_2, _) = (c.center for c in ax.patches if isinstance(c, Circle))
    assert ln1_x < add_1 < ln2_x < add_2
    plt.close(fig)


def test_gelu_dips_to_minus_0_170_near_minus_0_75():
    x_min, y_min = gelu_minimum()
    assert round(x_min, 2) == -0.75 and round(y_min, 3) == -0.170


def test_gelu_figure_shows_both_curves_and_the_minimum():
    fig = draw_gelu()
    ax = fig.axes[0]
    assert len(ax.lines) == 4                      # ReLU, GELU, the minimum's dot, the zero line
    assert min(ax.lines[1].get_ydata()) < -0.16 and min(ax.lines[0].get_ydata()) == 0
    plt.close(fig)


def test_contributions_add_up_to_the_final_length():
    pieces = _pieces()
    final = sum(pieces.values())
    for t in range(5):
        parts = contributions(pieces, t)
        assert abs(sum(parts.values()) - np.linalg.norm(final[t])) < 1e-12


@pytest.mark.parametrize("show, n_bars", [("all", 7), ("attn", 5), ("mlp", 5)])
def test_residual_figure_bars_add_up_whatever_is_shown(show, n_bars):
    pieces = _pieces()
    fig = draw_residual(pieces, token=2, show=show)
    left, right = fig.axes
    heights = [p.get_height() for p in right.patches]
    assert len(heights) == n_bars
    assert abs(sum(heights) - np.linalg.norm(sum(pieces.values())[2])) < 1e-12
    assert len(left.lines[0].get_ydata()) == 7     # the stream after each of 7 pieces
    plt.close(fig)


def test_residual_figure_rejects_unknown_show():
    with pytest.raises(ValueError, match="show: expected one of"):
        draw_residual(_pieces(), show="both")


def test_grad_profile_figure_has_two_log_panels_of_two_curves():
    prof = GradProfile(params=np.linspace(1, 2, 6), stream=np.linspace(0.1, 1, 6),
                       size=np.linspace(1, 3, 7))
    fig = draw_grad_profiles({"pre": prof, "post": prof}, {"pre": prof, "post": prof})
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert ax.get_yscale() == "log" and len(ax.lines) == 2
    plt.close(fig)


def test_lab_redraws_when_a_control_changes(monkeypatch):
    import IPython.display

    from anatomy.viz.residual import residual_lab

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs: shown.extend(objs))
    cfg = GPTConfig(V=11, ctx=8, d=16, L=3, h=4)
    params = init_params(cfg, np.random.default_rng(0))
    blocks = [block_params(params, i) for i in range(3)]
    residual_lab(np.random.default_rng(1).standard_normal((5, 16)), blocks, 4)
    (box,) = shown
    (n_blocks, token), show, picture, caption = box.children[0].children, *box.children[1:]
    first = bytes(picture.value)
    assert first.startswith(b"\x89PNG") and "7 pieces" in caption.value
    n_blocks.value = 1
    assert bytes(picture.value) != first and "3 pieces" in caption.value
    token.value, show.value = 0, "mlp"
    assert "token 0" in caption.value


def test_patch_recovery_figure_has_a_cell_per_head_and_mlp():
    from anatomy.interp import PatchRecovery
    from anatomy.viz.residual import draw_patch_recovery

    rec = PatchRecovery(heads=np.array([[0.5, -0.25], [0.0, 1.5]]), mlps=np.array([0.8, 0.1]),
                        clean=2.0, corrupt=-1.0)
    fig = draw_patch_recovery(rec)
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.texts] == ["0.50", "-0.25", "0.80", "0.00", "1.50", "0.10"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["head 0", "head 1", "MLP"]
    assert "-1.00 -> 2.00" in ax.get_title()
    plt.close(fig)
    with pytest.raises(ValueError, match=r"recovery: expected heads \[L, h\] and mlps \[L\]"):
        draw_patch_recovery(PatchRecovery(heads=np.zeros((2, 2)), mlps=np.zeros(3),
                                          clean=1.0, corrupt=0.0))
