"""Chapter 2's pictures: one query's weights with and without sqrt(d_k), and how the softmax
Jacobian shrinks as the scores grow; plus the lab with sliders for d_k and a temperature."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np

from ..scaling import attention_weights
from .common import figure_png, show_lab

LAB_WIDTHS = (1, 4, 16, 64, 256, 512)
# The temperature slider moves in steps of 2^0.25 from 2^-2 to 2^5 = 32: every lab width is
# a power of 2, so sqrt(d_k) (up to sqrt(512) = 2^4.5) is a stop on it, where the unscaled
# weights become exactly the scaled weights at tau = 1.
LAB_LOG2_TAU = (-2.0, 5.0, 0.25)


def one_query(d_k: int, n_keys: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One random query and its keys, entries N(0, 1): the first d_k features of one draw.

    The draw is made once at the widest lab width (or at d_k, if that is wider) and sliced,
    so for a given seed a narrower head is the same query and keys with fewer features.
    Moving the lab's d_k slider then adds or removes features instead of drawing new vectors.

    Shapes: -> q [d_k], k [n_keys, d_k]
    """
    width = max(d_k, LAB_WIDTHS[-1])
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal(width), rng.standard_normal((n_keys, width))
    return q[:d_k], k[:, :d_k]           # [width] -> [d_k]; [n_keys, width] -> [n_keys, d_k]


def lab_top_weights(n_keys: int = 16, seed: int = 0,
                    widths: tuple[int, ...] = LAB_WIDTHS) -> list[dict[str, float]]:
    """What the lab shows at each width at tau = 1: the top weight and top key, both panels.

    Uses :func:`one_query`, so every width is a slice of the same draw. Each row holds
    ``d_k``, ``top_unscaled``, ``key_unscaled``, ``top_scaled`` and ``key_scaled``.

    Shapes: q [d_k], k [n_keys, d_k] -> weights [n_keys] per panel and width
    """
    rows = []
    for d_k in widths:
        q, k = one_query(d_k, n_keys, seed)                        # [d_k], [n_keys, d_k]
        raw = attention_weights(q[None], k, scaled=False)[0]       # [1, n_keys] -> [n_keys]
        scaled = attention_weights(q[None], k)[0]                  # [n_keys]
        rows.append({"d_k": d_k, "top_unscaled": float(raw.max()),
                     "key_unscaled": int(raw.argmax()), "top_scaled": float(scaled.max()),
                     "key_scaled": int(scaled.argmax())})
    return rows


def draw_query_weights(q: np.ndarray, k: np.ndarray, temperature: float = 1.0):
    """Bars of one query's weights over its keys: raw scores on the left, scaled on the right.

    Both panels divide by ``temperature``; the right one also by sqrt(d_k). Returns the figure.

    Shapes: q [d_k], k [n_keys, d_k]
    """
    q, k = np.asarray(q, dtype=float), np.asarray(k, dtype=float)
    d_k, n_keys = q.shape[-1], k.shape[0]
    panels = (("unscaled: softmax(q.k / tau)", False),
              (f"scaled: softmax(q.k / (tau sqrt({d_k})))", True))
    fig, axes = plt.subplots(1, 2, figsize=(8, 2.8), sharey=True)
    for ax, (title, scaled) in zip(axes, panels, strict=True):
        w = attention_weights(q[None], k, temperature, scaled=scaled)[0]   # [1, n_keys] -> [n_keys]
        top = int(np.argmax(w))
        colors = ["tab:orange" if j == top else "tab:blue" for j in range(n_keys)]
        ax.bar(range(n_keys), w, color=colors)
        ax.set_ylim(0, 1.05)
        ax.set_xticks(range(0, n_keys, max(1, n_keys // 8)))
        ax.set_xlabel("key", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.set_title(f"{title}\ntop weight {w[top]:.2f}", fontsize=9)
    axes[0].set_ylabel("weight", fontsize=8)
    fig.suptitle(f"one query q [{d_k}] against K [{n_keys}, {d_k}] -> weights [{n_keys}], "
                 f"tau = {temperature:.2f}", fontsize=10)
    fig.tight_layout()
    return fig


def draw_jacobian_norms(stds: np.ndarray, norms: np.ndarray, marks: Mapping[str, float],
                        n_keys: int = 16):
    """The softmax Jacobian's spectral norm against the spread of the scores.

    The line is the median over the rows, the band runs from the 25th to the 75th percentile
    (log scale), and each entry of ``marks`` draws a labelled vertical line at that std.

    Shapes: stds [S], norms [S, n] (from ``jacobian_norm_by_scale`` with ``n_keys`` keys)
    """
    stds, norms = np.asarray(stds), np.asarray(norms)
    low, mid, high = np.percentile(norms, [25, 50, 75], axis=1)   # [S, n] -> [S] each
    fig, ax = plt.subplots(figsize=(7, 3.4))
    ax.fill_between(stds, low, high, color="tab:blue", alpha=0.2,
                    label="middle half of the queries")
    ax.plot(stds, mid, color="tab:blue", label="median")
    colors = ("tab:green", "tab:brown", "tab:red", "tab:purple", "gray")
    for (label, x), color in zip(marks.items(), colors, strict=False):
        ax.axvline(x, color=color, linestyle="--", linewidth=1.2, label=label)
    ax.set_yscale("log")
    ax.tick_params(labelsize=8)
    ax.set_xlabel("standard deviation of the scores", fontsize=9)
    ax.set_ylabel("norm of d weights / d scores", fontsize=9)
    ax.set_title(f"spectral norm of J = diag(p) - p p^T, J [{n_keys}, {n_keys}] per query; "
                 f"norms {list(norms.shape)}", fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    return fig


def scaling_lab(n_keys: int = 16, seed: int = 0):
    """An ipywidgets lab: pick a head width d_k and a temperature; watch one query's weights.

    The temperature runs from 1/4 to 32 on a log scale, far enough to undo the missing
    scale of the widest head: at tau = sqrt(d_k) the unscaled panel equals the scaled one
    at tau = 1.

    Uses only widgets common to ipywidgets 7.7 (Colab) and 8.x. The figure goes to an Image
    widget as PNG bytes, set after ``display``, so the cell's recorded output stays stable.
    """
    import ipywidgets as widgets

    width = widgets.SelectionSlider(options=list(LAB_WIDTHS), value=64, description="d_k")
    low, high, step = LAB_LOG2_TAU
    temperature = widgets.FloatLogSlider(value=1.0, base=2, min=low, max=high, step=step,
                                         description="tau")
    picture, caption = widgets.Image(format="png"), widgets.HTML()

    def update(_change=None):
        q, k = one_query(width.value, n_keys, seed)               # [d_k], [n_keys, d_k]
        picture.value = figure_png(draw_query_weights(q, k, temperature.value))
        raw = k @ q                                    # [n_keys, d_k] @ [d_k] -> [n_keys]
        root = np.sqrt(width.value)
        caption.value = (f"raw scores q.k spread with std {raw.std():.1f} here; about "
                         f"sqrt(d_k) = {root:.1f} on average. At tau = {root:.1f} the left "
                         "panel is the right one at tau = 1.")

    show_lab([[width, temperature]], [picture, caption], update)
