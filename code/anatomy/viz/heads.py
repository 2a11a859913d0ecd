"""Chapter 4's picture of multi-head attention: one weight map per head, the lab that
re-splits the same projection into a different number of heads (the slider stops at the
divisors of d only), and a short report of which heads of a trained model have a pattern that
can be named (:func:`describe_heads`, from :func:`anatomy.interp.head_scores`)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

from .._validate import check_positive_int
from ..heads import multi_head_attention
from ..interp import ROLE_WORDS
from .common import figure_png, show_lab


def divisors(d: int) -> list[int]:
    """Every head count that splits width d evenly, smallest first."""
    d = check_positive_int(d, "d")
    return [h for h in range(1, d + 1) if d % h == 0]


def snap_heads(h: int, d: int) -> int:
    """The divisor of d nearest to h (the smaller one on a tie), so that d_head = d / h is whole."""
    return min(divisors(d), key=lambda n: (abs(n - h), n))


def head_weights(X: np.ndarray, W_qkv: np.ndarray, h: int, causal: bool = True) -> np.ndarray:
    """The attention weights of every head when W_qkv is split into h heads.

    The output projection does not affect the weights, so an identity stands in for W_o.

    Shapes: X [T, d], W_qkv [d, 3d] -> weights [h, T, T]
    """
    d = np.shape(X)[-1]
    _, weights = multi_head_attention(X, W_qkv, np.eye(d), h, causal=causal)
    return weights                              # [h, T, T]


def draw_heads(weights: np.ndarray, tokens: Sequence[str], annotate: bool | None = None,
               max_cols: int = 6):
    """One heatmap per head, rows = queries, columns = keys, every panel on the same 0..1 scale.

    ``annotate`` prints each weight in its cell (default: only when the panels are few and
    small). Returns the matplotlib figure.

    Shapes: weights [h, T, T]
    """
    weights = np.asarray(weights)
    if weights.ndim != 3 or weights.shape[1:] != (len(tokens), len(tokens)):
        raise ValueError(f"weights: expected shape [h, T, T] with T = len(tokens) = "
                         f"{len(tokens)}, got {weights.shape}")
    h, T, _ = weights.shape
    if annotate is None:
        annotate = h <= 4 and T <= 6
    cols = min(h, max_cols)
    rows = -(-h // cols)                        # ceiling division
    fig, axes = plt.subplots(rows, cols, figsize=(1.9 * cols + 0.4, 1.9 * rows + 0.5),
                             squeeze=False)
    for j, ax in enumerate(axes.flat):
        if j >= h:
            ax.axis("off")
            continue
        ax.imshow(weights[j], cmap="Blues", vmin=0.0, vmax=1.0)
        ax.set_title(f"head {j}  [{T}, {T}]", fontsize=9)
        ax.set_xticks(range(T), tokens, fontsize=7, rotation=60)
        ax.set_yticks(range(T), tokens if j % cols == 0 else [], fontsize=7)
        if annotate:
            for (r, c), w in np.ndenumerate(weights[j]):
                ax.text(c, r, f"{w:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if w > 0.6 else "black")
    fig.suptitle(f"h = {h} {'head' if h == 1 else 'heads'}: weights [h, T, T] = [{h}, {T}, {T}]",
                 fontsize=10)
    fig.tight_layout()
    return fig


def heads_lab(X: np.ndarray, W_qkv: np.ndarray, tokens: Sequence[str], h: int = 2,
              causal: bool = True):
    """An ipywidgets lab: split the same W_qkv into h heads and see every head's weights.

    The slider's stops are the divisors of d and nothing else, so every stop is a whole
    d_head and the arrow keys step from one divisor to the next (1, 2, 3, 4, 6, 12 for
    d = 12); ``h`` starts at the divisor nearest to it. Uses only widgets and calls common to
    ipywidgets 7.7 (Colab) and 8.x; the figure goes to an Image widget whose value is set
    after ``display``, so the cell's recorded output stays small and stable.
    """
    import ipywidgets as widgets

    d = np.shape(X)[-1]
    heads = widgets.SelectionSlider(options=divisors(d), value=snap_heads(h, d),
                                    description="h")
    masked = widgets.Checkbox(value=causal, description="causal mask")
    picture, caption = widgets.Image(format="png"), widgets.HTML()

    def update(_change=None):
        n = heads.value
        weights = head_weights(X, W_qkv, n, causal=masked.value)
        picture.value = figure_png(draw_heads(weights, tokens))
        caption.value = (f"d = {d} split into h = {n} {'head' if n == 1 else 'heads'} of "
                         f"d_head = {d // n}; weights [h, T, T] = {list(weights.shape)}")

    show_lab([[heads, masked]], [picture, caption], update)


# ---- chapter 4: which trained heads have a pattern you can name ---------------------------


def describe_heads(scores, min_score: float = 0.4, min_ratio: float = 5.0) -> list[str]:
    """Lines that sort a model's heads into those with a nameable pattern and the rest.

    ``scores`` is an :class:`anatomy.interp.HeadScores`. A head is named by its best role
    when that role holds at least ``min_score`` of its weight and at least ``min_ratio``
    times what a uniform head would put there (``HeadScores.named``); each of the others is
    listed with its two strongest roles, score and multiple of the uniform baseline, so the
    reader sees why no single word fits. Every line fits the book's 78-character column.

    Shapes: scores.scores[role] [L, h] -> one line per head, plus two headings
    """
    named = scores.named(min_score, min_ratio)
    L, h = next(iter(scores.scores.values())).shape
    lines = [f"{len(named)} of {L * h} heads named (one role holds >= {min_score:.2f} of the "
             f"weight, >= {min_ratio:g}x uniform):"]
    for layer, head, role, score, base in named:
        lines.append(f"  layer {layer} head {head}: {score:.2f} on {ROLE_WORDS.get(role, role)}"
                     f" (uniform: {base:.2f})")
    done = {(layer, head) for layer, head, *_ in named}
    lines.append(f"{L * h - len(named)} heads without a name: their two strongest roles, "
                 "score (x uniform):")
    for layer in range(L):
        for head in range(h):
            if (layer, head) in done:
                continue
            best = sorted(scores.scores, key=lambda r: -scores.scores[r][layer, head])[:2]
            parts = [f"{r} {scores.scores[r][layer, head]:.2f} "
                     f"({scores.scores[r][layer, head] / scores.uniform[r]:.1f}x)"
                     for r in best]
            lines.append(f"  layer {layer} head {head}: " + ", ".join(parts))
    return lines
