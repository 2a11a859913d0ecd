"""Chapter 3's pictures of masked attention weights, and the lab that toggles the masks."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..attention import attention
from ..masks import causal_mask, combine_masks, padding_mask


def batch_weights(q: np.ndarray, k: np.ndarray, v: np.ndarray, lengths: np.ndarray,
                  causal: bool = True, padding: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The mask and the attention weights of a right-padded batch, each mask switchable.

    Shapes: q, k [B, T, d_k], v [B, T, d_v], lengths [B] -> mask [B, T, T], weights [B, T, T]
    """
    B, T = np.shape(q)[0], np.shape(q)[-2]
    masks = [np.zeros((T, T), dtype=bool)]                # nothing forbidden by default
    if causal:
        masks.append(causal_mask(T))                      # [T, T]
    if padding:
        masks.append(padding_mask(lengths, T))            # [B, 1, T]
    mask = np.broadcast_to(combine_masks(*masks), (B, T, T))    # -> [B, T, T]
    _, weights = attention(q, k, v, mask)                 # [B, T, T]
    return mask, weights


def draw_masked_weights(weights: np.ndarray, mask: np.ndarray, titles: Sequence[str],
                        labels: Sequence[Sequence[str]] | Sequence[str] | None = None,
                        annotate: bool | None = None):
    """One heatmap of attention weights per panel; forbidden cells are hatched grey.

    ``labels`` is one list of token names shared by every panel, or one list per panel.
    Numbers are written in the cells when ``annotate`` (by default when T <= 6).
    Returns the matplotlib figure.

    Shapes: weights [P, T, T], mask broadcastable to [P, T, T], titles [P]
    """
    weights = np.asarray(weights)
    P, T, _ = weights.shape
    mask = np.broadcast_to(mask, weights.shape)           # -> [P, T, T]
    if len(titles) != P:
        raise ValueError(f"titles: expected {P} titles, one per panel, got {len(titles)}")
    if labels is None:
        labels = [str(i) for i in range(T)]
    per_panel = [list(labels)] * P if isinstance(labels[0], str) else [list(x) for x in labels]
    annotate = T <= 6 if annotate is None else annotate
    size = 0.3 * T + 1.2
    fig, axes = plt.subplots(1, P, figsize=(size * P + 0.3, size + 0.7), squeeze=False)
    for p, ax in enumerate(axes[0]):
        ax.imshow(weights[p], cmap="Blues", vmin=0, vmax=1)
        grey = np.where(mask[p], 1.0, np.nan)             # draw only the forbidden cells
        ax.imshow(grey, cmap="Greys", vmin=0, vmax=2.5)
        for i, j in np.argwhere(mask[p]):
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///",
                                       edgecolor="0.55", linewidth=0))
        if annotate:
            for i, j in np.argwhere(~mask[p]):
                w = weights[p, i, j]
                ax.text(j, i, f"{w:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if w > 0.6 else "black")
        ax.set_title(f"{titles[p]}\nweights {list(weights[p].shape)}", fontsize=9)
        ax.set_xticks(range(T), per_panel[p], fontsize=7, rotation=45)
        ax.set_yticks(range(T), per_panel[p], fontsize=7)
        ax.set_xlabel("key", fontsize=8)
        if p == 0:
            ax.set_ylabel("query", fontsize=8)
    fig.suptitle("hatched cells are masked: their weight is exactly 0", fontsize=9)
    fig.tight_layout()
    return fig


def padded_labels(lengths: Sequence[int], T: int) -> list[list[str]]:
    """Tick labels for a padded batch: positions 0, 1, ... and "pad" past each length."""
    return [[str(j) if j < n else "pad" for j in range(T)] for n in lengths]


def draw_batch(q: np.ndarray, k: np.ndarray, v: np.ndarray, lengths: Sequence[int],
               causal: bool = True, padding: bool = True):
    """The weights of every sequence of a padded batch, with its mask hatched.

    Shapes: q, k [B, T, d_k], v [B, T, d_v], lengths [B]
    """
    lengths = np.asarray(lengths)
    mask, weights = batch_weights(q, k, v, lengths, causal, padding)   # [B, T, T] each
    T = weights.shape[-1]
    titles = [f"sequence {b}: length {n}" for b, n in enumerate(lengths)]
    return draw_masked_weights(weights, mask, titles, padded_labels(lengths.tolist(), T))


def mask_lab(B: int = 3, T_max: int = 8, d_k: int = 4, seed: int = 0):
    """An ipywidgets lab: toggle the causal and padding masks, choose T and each length.

    The queries, keys and values are random ([B, T_max, d_k] from ``seed``), cut to the
    first T positions. Uses only widgets common to ipywidgets 7.7 (Colab) and 8.x; the figure
    goes to an Image widget, set after ``display`` so the recorded output stays stable.
    """
    import ipywidgets as widgets

    from .common import figure_png, show_lab

    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((3, B, T_max, d_k))     # each [B, T_max, d_k]
    causal = widgets.Checkbox(value=True, description="causal mask")
    padding = widgets.Checkbox(value=True, description="padding mask")
    T = widgets.IntSlider(value=min(6, T_max), min=1, max=T_max, description="T")
    start = [T.value - 2 * b for b in range(B)]
    lengths = [widgets.IntSlider(value=max(n, 0), min=0, max=T.value, description=f"length {b}")
               for b, n in enumerate(start)]
    picture, caption = widgets.Image(format="png"), widgets.HTML()

    busy = [False]

    def update(_change=None):
        if busy[0]:                  # lowering a slider's max below its value re-enters here
            return
        busy[0] = True
        for slider in lengths:
            slider.max = T.value                          # also clips a length above T
        busy[0] = False
        n = np.array([slider.value for slider in lengths])
        t = T.value
        fig = draw_batch(q[:, :t], k[:, :t], v[:, :t], n, causal.value, padding.value)
        picture.value = figure_png(fig)
        mask, _ = batch_weights(q[:, :t], k[:, :t], v[:, :t], n, causal.value, padding.value)
        empty = int(mask.all(axis=-1).sum())
        caption.value = (f"mask [B, T, T] = {list(mask.shape)}; {int(mask.sum())} of "
                         f"{mask.size} entries forbidden; {empty} fully masked row(s), "
                         "which get all-zero weights")

    show_lab([[causal, padding, T], lengths], [picture, caption], update)
