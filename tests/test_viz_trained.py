"""anatomy.viz.trained: the per-head heatmaps of the shipped model draw exactly the weights
of anatomy.interp, for the heads asked, with spaces and newlines made visible; and
anatomy.examples.PASSAGE is the unseen stretch of Tiny Shakespeare it says it is."""

import matplotlib.pyplot as plt
import numpy as np
import pytest

from anatomy.examples import PASSAGE, PASSAGE_OFFSET
from anatomy.interp import attention_patterns
from anatomy.params import GPTConfig, init_params
from anatomy.text import CharTokenizer
from anatomy.viz.trained import MARKS, char_labels, draw_trained_heads

TEXT = "ab c\nab"
TOK = CharTokenizer("abc \n")
SMALL = GPTConfig(V=5, ctx=8, d=8, L=2, h=2)


@pytest.fixture
def patterns():
    params = init_params(SMALL, 0)
    rng = np.random.default_rng(0)
    params = {k: v + rng.normal(0, 0.5, v.shape) for k, v in params.items()}
    return attention_patterns(params, np.array(TOK.encode(TEXT)), SMALL)   # [L, h, T, T]


def test_labels_make_spaces_and_newlines_visible():
    assert char_labels(TEXT) == ["a", "b", MARKS[" "], "c", MARKS["\n"], "a", "b"]
    assert MARKS == {" ": "\u2423", "\n": "\u21b5"}
    with pytest.raises(ValueError, match="text: expected a string"):
        char_labels(["a"])


def test_each_panel_is_the_chosen_heads_weights(patterns):
    heads = [(1, 0), (0, 1)]
    fig = draw_trained_heads(patterns, TEXT, heads=heads, notes={(0, 1): "a note"}, cols=2)
    assert len(fig.axes) == 2
    for ax, (layer, head) in zip(fig.axes, heads, strict=True):
        np.testing.assert_array_equal(ax.images[0].get_array(), patterns[layer, head])
        assert ax.images[0].get_clim() == (0.0, 1.0)            # one scale for every panel
        assert [t.get_text() for t in ax.get_xticklabels()] == char_labels(TEXT)
    assert fig.axes[0].get_title() == "layer 1, head 0"
    assert fig.axes[1].get_title() == "layer 0, head 1\na note"
    assert {t.get_text() for t in fig.axes[1].get_yticklabels()} <= {""}   # 1st column only
    assert "[7, 7]" in fig._suptitle.get_text()
    plt.close(fig)


def test_default_is_every_head_a_layer_per_row(patterns):
    fig = draw_trained_heads(patterns, TEXT, cols=2)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["layer 0, head 0", "layer 0, head 1", "layer 1, head 0",
                      "layer 1, head 1"]
    plt.close(fig)
    fig = draw_trained_heads(patterns, TEXT, heads=[(0, 0), (0, 1), (1, 1)], cols=2)
    assert [ax.axison for ax in fig.axes] == [True, True, True, False]   # spare panel off
    plt.close(fig)


def test_bad_arguments_are_named(patterns):
    with pytest.raises(ValueError, match=r"patterns: expected shape \[L, h, T, T\] with T = "
                                         r"len\(text\) = 6, got \(2, 2, 7, 7\)"):
        draw_trained_heads(patterns, TEXT[:6])
    with pytest.raises(ValueError, match=r"patterns: expected shape \[L, h, T, T\]"):
        draw_trained_heads(patterns[0], TEXT)
    with pytest.raises(ValueError, match=r"heads: \(2, 0\) is outside the model's L = 2"):
        draw_trained_heads(patterns, TEXT, heads=[(2, 0)])
    with pytest.raises(ValueError, match="heads: expected \\(layer, head\\) pairs, got 3"):
        draw_trained_heads(patterns, TEXT, heads=[3])
    with pytest.raises(ValueError, match="heads: expected at least one"):
        draw_trained_heads(patterns, TEXT, heads=[])
    with pytest.raises(ValueError, match="cols: expected a positive integer, got 0"):
        draw_trained_heads(patterns, TEXT, cols=0)


def test_passage_is_unseen_tiny_shakespeare():
    from _local_data import DATA

    from anatomy.text import FILENAME, load_text, split

    path = DATA / FILENAME if DATA.is_dir() else DATA
    if not path.is_file():
        pytest.skip(f"no local copy of Tiny Shakespeare at {path}")
    text = load_text(path)
    train, _ = split(text)
    assert len(PASSAGE) == 1280 == 20 * 64                   # 20 windows of the model's ctx
    assert text[PASSAGE_OFFSET:PASSAGE_OFFSET + len(PASSAGE)] == PASSAGE
    assert PASSAGE_OFFSET >= len(train)                       # in the validation split
    assert PASSAGE.startswith("GREMIO:\n")


# ---- chapter 6: a direct logit attribution as bars


def test_logit_attribution_bars_are_the_pieces_and_the_line_their_sum():
    from anatomy.interp import direct_logit_attribution
    from anatomy.viz.trained import draw_logit_attribution, piece_label

    params = {k: v + np.random.default_rng(1).normal(0, 0.3, v.shape)
              for k, v in init_params(SMALL, 1).items()}
    ids = np.array(TOK.encode(TEXT))
    pieces = direct_logit_attribution(params, ids, SMALL, 5, 1)
    fig = draw_logit_attribution(pieces)
    ax = fig.axes[0]
    np.testing.assert_allclose([p.get_height() for p in ax.patches], list(pieces.values()))
    assert ax.lines[0].get_ydata()[0] == pytest.approx(sum(pieces.values()))
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "tok emb", "pos emb", "attn 0", "MLP 0", "attn 1", "MLP 1", "final LN b"]
    colours = [p.get_facecolor() for p in ax.patches]
    assert colours[2] != colours[3] and colours[2] == colours[4]     # attention vs MLP
    plt.close(fig)
    assert piece_label("blocks.11.mlp") == "MLP 11" and piece_label("other") == "other"
    with pytest.raises(ValueError, match="pieces: expected a non-empty dict"):
        draw_logit_attribution({})
    with pytest.raises(ValueError, match="name: expected a piece name"):
        piece_label(3)


# ---- chapter 5: the position table, trained and untrained


def test_position_similarity_panels_draw_the_tables_and_their_gap_means():
    from anatomy.viz.trained import draw_position_similarity

    rng = np.random.default_rng(2)
    tables = {}
    for name in ("trained", "untrained"):
        x = rng.standard_normal((6, 4))
        x /= np.linalg.norm(x, axis=-1, keepdims=True)
        tables[name] = x @ x.T                                   # [6, 6], 1 on the diagonal
    fig = draw_position_similarity(tables)
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 2
    for ax, (name, table) in zip(heatmaps, tables.items(), strict=True):
        np.testing.assert_array_equal(ax.images[0].get_array(), table)
        assert ax.images[0].get_clim() == (-1.0, 1.0)
        assert ax.get_title().startswith(name)
    plt.close(fig)
    # the curve: the mean similarity of the pairs g apart, worked out by hand
    hand = np.array([[1.0, 0.5, -0.2],
                     [0.5, 1.0, 0.3],
                     [-0.2, 0.3, 1.0]])
    fig = draw_position_similarity({"hand": hand})
    curves = [ax for ax in fig.axes if ax.get_title() == "positions g apart, on average"][0]
    np.testing.assert_allclose(curves.lines[0].get_xdata(), [0, 1, 2])
    np.testing.assert_allclose(curves.lines[0].get_ydata(), [1.0, (0.5 + 0.3) / 2, -0.2])
    plt.close(fig)
    fig = draw_position_similarity({"hand": hand}, max_gap=1)
    curves = [ax for ax in fig.axes if ax.get_title() == "positions g apart, on average"][0]
    np.testing.assert_allclose(curves.lines[0].get_ydata(), [1.0, 0.4])
    plt.close(fig)
    with pytest.raises(ValueError, match="sim: expected a non-empty dict"):
        draw_position_similarity({})
    with pytest.raises(ValueError, match=r"sim\['b'\]: expected shape \[n, n\] = \(6, 6\)"):
        draw_position_similarity({"a": np.eye(6), "b": np.eye(5)})
