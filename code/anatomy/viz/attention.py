"""Chapter 1's picture of self-attention, one stage at a time, and the lab that steps through it."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..attention import attention, scaled_scores
from .common import figure_png, show_lab

STAGES = ("X", "Q, K, V", "scores", "weights", "output")
# The panels in which one query's computation is a single row. Its output row uses *every*
# row of K and V (and so of X), so outlining its own row there would mislead.
QUERY_ROWS = ("Q", "scores", "weights", "output")

_CAPTIONS = {
    "X": "The input: one row of width d per token.",
    "Q, K, V": "Three projections of the same rows: what each token looks for, offers, hands over.",
    "scores": "Every query compared with every key, divided by sqrt(d_k): a T x T table.",
    "weights": "Softmax along each row: the weights are positive and each row sums to 1.",
    "output": "Each output row is the weighted average of the value rows.",
}


def self_attention_stages(X, W_q, W_k, W_v) -> dict[str, np.ndarray]:
    """Every intermediate array of one self-attention pass, keyed by name.

    Shapes: X [T, d]; W_q, W_k, W_v [d, d_k] -> Q, K, V [T, d_k], scores/weights [T, T],
    output [T, d_k]
    """
    Q, K, V = X @ W_q, X @ W_k, X @ W_v          # [T, d] @ [d, d_k] -> [T, d_k]
    out, weights = attention(Q, K, V)             # [T, d_k], [T, T]
    return {"X": X, "Q": Q, "K": K, "V": V, "scores": scaled_scores(Q, K),
            "weights": weights, "output": out}


def _heatmap(ax, values, title, row_labels, query=None, annotate=False, col_labels=None):
    ax.imshow(values, cmap="RdBu_r" if values.min() < 0 else "Blues", aspect="auto",
              vmin=-np.abs(values).max() if values.min() < 0 else 0, vmax=np.abs(values).max())
    ax.set_title(f"{title}\n{list(values.shape)}", fontsize=9)
    ax.set_yticks(range(len(row_labels)), row_labels, fontsize=8)
    if col_labels is None:
        ax.set_xticks([])
    else:
        ax.set_xticks(range(len(col_labels)), col_labels, fontsize=7, rotation=45)
    if query is not None:  # outline the chosen query's row
        ax.add_patch(plt.Rectangle((-0.5, query - 0.5), values.shape[1], 1, fill=False,
                                   edgecolor="orange", linewidth=2.5))
    if annotate:
        dark = 0.6 * np.abs(values).max()         # white text on the darkest cells
        for (i, j), v in np.ndenumerate(values):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6.5,
                    color="white" if abs(v) > dark else "black")


def draw_stages(stages: dict[str, np.ndarray], tokens: Sequence[str], upto: str = "output",
                query: int | None = None):
    """Draw the stages of :func:`self_attention_stages` from X up to ``upto``.

    Returns the matplotlib figure. ``query`` outlines one token's row in the panels where
    its computation is one row (:data:`QUERY_ROWS`: Q, scores, weights, output), not in X,
    K or V, every row of which its output uses.
    """
    if upto not in STAGES:
        raise ValueError(f"upto: expected one of {STAGES}, got {upto!r}")
    T = len(stages["X"])
    if query is not None and (isinstance(query, bool) or not isinstance(query, (int, np.integer))
                              or not 0 <= query < T):
        raise ValueError(f"query: expected a token index in [0, T) = [0, {T}), got {query!r}")
    shown = STAGES[: STAGES.index(upto) + 1]
    panels = [name for stage in shown for name in (("Q", "K", "V") if stage == "Q, K, V"
                                                   else (stage,))]
    # the T x T panels carry a number in every cell, so they get more room
    width = [2.0 if p in ("X", "scores", "weights") else 1.4 for p in panels]
    fig, axes = plt.subplots(1, len(panels), figsize=(sum(width) + 0.6, 2.8),
                             gridspec_kw={"width_ratios": width}, squeeze=False)
    for ax, name in zip(axes[0], panels, strict=True):
        square = name in ("scores", "weights")
        _heatmap(ax, stages[name], name, tokens, query if name in QUERY_ROWS else None,
                 annotate=square, col_labels=tokens if square else None)
    fig.suptitle(_CAPTIONS[upto], fontsize=10)
    fig.tight_layout()
    return fig


def attention_lab(X, W_q, W_k, W_v, tokens: Sequence[str]):
    """An ipywidgets lab: choose a stage and a query token; see every array and its shape.

    Uses only widgets and calls common to ipywidgets 7.7 (Colab) and 8.x. The figure is sent
    to an Image widget as PNG bytes rather than printed into an Output widget, so the cell's
    own output is just the widget, the same under Jupyter, Colab and nbval.
    """
    import ipywidgets as widgets

    stages = self_attention_stages(X, W_q, W_k, W_v)
    stage = widgets.SelectionSlider(options=list(STAGES), value="output", description="stage")
    query = widgets.Dropdown(options=[(t, i) for i, t in enumerate(tokens)], value=0,
                             description="query")
    picture, caption = widgets.Image(format="png"), widgets.HTML()

    def update(_change=None):
        fig = draw_stages(stages, tokens, upto=stage.value, query=query.value)
        picture.value = figure_png(fig)
        row = stages["weights"][query.value]
        shown = STAGES.index(stage.value) >= STAGES.index("weights")
        caption.value = ("<b>{}</b> attends: {}".format(tokens[query.value], ", ".join(
            f"{t} {w:.2f}" for t, w in zip(tokens, row, strict=True))) if shown else "")

    show_lab([[stage, query]], [picture, caption], update)

