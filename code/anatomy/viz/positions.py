"""Chapter 5's pictures: the sinusoidal table, dot product against gap, one RoPE pair turning,
and the lab that compares how similar two positions look under each scheme."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..interp import cosine_similarity
from ..positions import rope, sinusoidal
from .common import figure_png, show_lab

SCHEMES = ("sinusoidal", "RoPE", "learned (untrained)")


def position_similarity(scheme: str, n_pos: int = 64, d: int = 16, seed: int = 0
                        ) -> np.ndarray:
    """Cosine similarity of every pair of positions under one scheme.

    - "sinusoidal": rows of :func:`sinusoidal` (every row has norm sqrt(d/2));
    - "RoPE": one random vector x rotated to position p against the same x rotated to
      position m, rope(x, p) . rope(x, m) / |x|^2: a query and a key with the same content,
      so only the positions change the score, and a position is as similar to itself (1)
      as under the sinusoidal table;
    - "learned (untrained)": rows of a freshly initialised table (N(0, 0.02^2), as nanoGPT
      and Hugging Face draw GPT-2's).
      Training would shape it; at initialisation it holds no notion of distance.

    Shapes: -> [n_pos, n_pos]
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme: expected one of {SCHEMES}, got {scheme!r}")
    rng = np.random.default_rng(seed)
    if scheme == "sinusoidal":
        rows = sinusoidal(n_pos, d)                              # [n_pos, d]
    elif scheme == "RoPE":
        x = rng.standard_normal(d)                               # [d]: one content vector
        rows = rope(np.tile(x, (n_pos, 1)))                      # [n_pos, d]: x at 0..n_pos-1
    else:
        rows = rng.normal(0.0, 0.02, (n_pos, d))                 # [n_pos, d]
    return cosine_similarity(rows)                               # [n_pos, d] -> [n_pos, n_pos]


def draw_sinusoidal_table(pe: np.ndarray):
    """The sinusoidal table as a heatmap: positions down, features across.

    Shapes: pe [n_pos, d]
    """
    fig, ax = plt.subplots(figsize=(6.2, 3.6))
    image = ax.imshow(pe, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto",
                      interpolation="nearest")
    ax.set_title(f"sinusoidal table PE {list(pe.shape)} = [n_pos, d]", fontsize=10)
    ax.set_xlabel("feature: column 2i = sin, column 2i + 1 = cos (pair i = column // 2)",
                  fontsize=8)
    ax.set_ylabel("position p", fontsize=9)
    ax.set_xticks(range(0, pe.shape[1], 2))
    fig.colorbar(image, ax=ax, fraction=0.04)
    fig.tight_layout()
    return fig


def draw_dot_vs_gap(pe: np.ndarray, starts: Sequence[int] = (10, 30),
                    marks: Sequence[int] = (1, 2, 5, 20)):
    """PE[p] . PE[p + gap] against the gap, one line per starting position p.

    The lines lie on top of each other: the dot product depends only on the gap.

    Shapes: pe [n_pos, d]
    """
    fig, ax = plt.subplots(figsize=(6.2, 3.0))
    styles = ("-o", "--s", ":^")
    for j, p in enumerate(starts):
        style = styles[j % len(styles)]
        gaps = np.arange(pe.shape[0] - p)                        # [n_pos - p]
        dots = pe[p + gaps] @ pe[p]                              # [n_pos - p, d] @ [d]
        ax.plot(gaps, dots, style, markersize=3, linewidth=1, label=f"from position {p}")
    p = starts[0]
    for gap in marks:
        value = pe[p] @ pe[p + gap]
        ax.plot([gap], [value], "o", color="black", markersize=4)
        ax.annotate(f"{value:.2f}", (gap, value), textcoords="offset points", xytext=(5, 5),
                    fontsize=8, bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none"))
    ax.set_xlabel("gap m - p", fontsize=9)
    ax.set_ylabel("PE[p] . PE[m]", fontsize=9)
    ax.set_title(f"dot product against gap, PE {list(pe.shape)}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def gap_curve(d: int, n_gaps: int) -> np.ndarray:
    """PE[p] . PE[p + gap] / (d/2) for gap = 0..n_gaps-1: the sinusoidal dot product against
    the gap, scaled to start at 1 whatever the width (it is the same from every p).

    Shapes: -> [n_gaps]
    """
    pe = sinusoidal(n_gaps, d)                                   # [n_gaps, d]
    return pe @ pe[0] / (d / 2)                                  # [n_gaps, d] @ [d]


def first_rise(curve: np.ndarray) -> int | None:
    """The first gap at which a dot-product curve is higher than at the gap before (None if
    it never rises).

    Shapes: curve [n_gaps]
    """
    rises = np.flatnonzero(np.diff(curve) > 0)                   # [n_gaps - 1] -> indices
    return int(rises[0]) + 1 if rises.size else None


def gap_steps(curve: np.ndarray) -> dict:
    """How a dot-product curve moves from each gap to the next.

    - "rises": how many of the n_gaps - 1 steps go up, and "first_rise" the first gap at
      which one does (:func:`first_rise`); "max_rise" the largest rise (0.0 if none);
    - "min_fall", "max_fall": the smallest and largest drop among the steps that go down
      (0.0 if none does);
    - "in_order" of "pairs": the pairs of gaps g < g' with curve[g'] < curve[g], that is,
      the farther gap scoring lower, as on a ruler (all pairs when the curve only falls).

    Shapes: curve [n_gaps]
    """
    steps = np.diff(curve)                                       # [n_gaps - 1]
    falls = -steps[steps < 0] if (steps < 0).any() else np.zeros(1)  # [n_falls]
    near, far = np.triu_indices(curve.size, k=1)                 # [pairs] each, near < far
    return {"rises": int((steps > 0).sum()), "first_rise": first_rise(curve),
            "max_rise": float(max(steps.max(), 0.0)),
            "min_fall": float(falls.min()), "max_fall": float(falls.max()),
            "in_order": int((curve[far] < curve[near]).sum()), "pairs": int(near.size)}


def draw_gap_curves(widths: Sequence[int] = (16, 512), n_gaps: int = 64):
    """The sinusoidal dot product against the gap for several widths, each scaled to start
    at 1, with each curve's largest rise from one gap to the next marked and sized.

    Narrow tables wiggle from the first few gaps; wide ones fall almost monotonically,
    their few rises too small to see at this scale.
    """
    fig, ax = plt.subplots(figsize=(6.2, 3.0))
    for j, (d, style) in enumerate(zip(widths, ("-o", "-s", "-^", "-v"), strict=False)):
        curve = gap_curve(d, n_gaps)                             # [n_gaps]
        line, = ax.plot(np.arange(n_gaps), curve, style, markersize=2.5, linewidth=1,
                        label=f"d = {d}")
        steps = np.diff(curve)                                   # [n_gaps - 1]
        if steps.max() > 0:
            rise = int(steps.argmax()) + 1                       # the gap it rises to
            ax.plot([rise], [curve[rise]], "o", markersize=8, markerfacecolor="none",
                    markeredgecolor=line.get_color())
            ax.annotate(f"largest rise: {steps.max():.2g} (gap {rise})",
                        (rise, curve[rise]), ha="right",
                        textcoords="offset points", fontsize=8,
                        xytext=(-6, 12) if j % 2 == 0 else (-6, -20),  # labels apart
                        color=line.get_color(),
                        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none"))
    ax.set_xlabel("gap m - p", fontsize=9)
    ax.set_ylabel("PE[p] . PE[m] / (d/2)", fontsize=9)
    ax.set_title("dot product against gap, scaled to 1 at gap 0", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _arrow(ax, xy, color, label, width=0.012):
    ax.arrow(0, 0, xy[0], xy[1], width=width, length_includes_head=True, color=color)
    ax.annotate(label, xy, textcoords="offset points", xytext=(3, 3), fontsize=8, color=color)


def draw_rope_pair(pair: Sequence[float] = (1.0, 0.4), positions: Sequence[int] = range(6),
                   query_key: tuple[int, int] = (4, 1), shift: int = 2, step: float = 1.0):
    """One feature pair turning under RoPE by ``step`` radians per position (1 is pair 0's
    speed; pair i of a head of width d turns by ``pair_frequencies(d)[i]``).

    Left: the same pair at each of ``positions``; the arrows keep their length. Right: a
    query at p and a key at m, then both shifted by ``shift``: the angle between them, and
    so their dot product, stays the same.

    Shapes: pair [2]
    """
    pair = np.asarray(pair, dtype=float)
    radius = np.linalg.norm(pair)
    positions = np.asarray(list(positions))

    def turn(xy, at):
        # rope's pair 0 turns 1 rad per position, so position p * step turns by p * step
        return rope(np.atleast_2d(xy), np.asarray(at, dtype=float) * step)   # [n, 2]

    turned = turn(np.tile(pair, (len(positions), 1)), positions)   # [n, 2]: d = 2, one pair
    fig, axes = plt.subplots(1, 2, figsize=(7.0, 3.5))
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(positions)))
    for xy, p, color in zip(turned, positions, colors, strict=True):
        _arrow(axes[0], xy, color, f"p={p}")
    axes[0].set_title(f"one pair at positions {positions[0]}..{positions[-1]}\n"
                      f"turns {step:.2f} rad per step, length kept", fontsize=9)
    p, m = query_key
    query, key = np.array([1.0, 0.0]) * radius, pair
    scores = []
    for (qp, kp), color in (((p, m), "tab:blue"), ((p + shift, m + shift), "tab:orange")):
        q_rot = turn(query, [qp])[0]                               # [1, 2] -> [2]
        k_rot = turn(key, [kp])[0]                                 # [1, 2] -> [2]
        _arrow(axes[1], q_rot, color, f"q at {qp}")
        _arrow(axes[1], k_rot, color, f"k at {kp}", width=0.006)
        scores.append(q_rot @ k_rot)
    axes[1].set_title(f"q at {p}, k at {m}; then both shifted by {shift}\n"
                      f"same angle between them: q . k = {scores[0]:.2f}, {scores[1]:.2f}",
                      fontsize=9)
    circle = np.linspace(0, 2 * np.pi, 200)
    for ax in axes:
        ax.plot(radius * np.cos(circle), radius * np.sin(circle), ":", color="grey",
                linewidth=0.8)
        ax.set_aspect("equal")
        ax.set_xlim(-1.35 * radius, 1.35 * radius)
        ax.set_ylim(-1.35 * radius, 1.35 * radius)
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.axvline(0, color="grey", linewidth=0.5)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    return fig


def draw_similarity(schemes: str | Sequence[str], p: int, m: int, n_pos: int = 64,
                    d: int = 16):
    """For each scheme: the table of similarities between positions, and row p of it.

    The chosen pair (p, m) is marked in both panels. Sinusoidal and RoPE tables are constant
    along every diagonal (similarity depends on m - p only); an untrained learned table has
    no such structure.
    """
    schemes = (schemes,) if isinstance(schemes, str) else tuple(schemes)
    fig, axes = plt.subplots(len(schemes), 2, figsize=(7.4, 2.7 * len(schemes)),
                             gridspec_kw={"width_ratios": [1, 1.5]}, squeeze=False)
    for (left, right), scheme in zip(axes, schemes, strict=True):
        sim = position_similarity(scheme, n_pos, d)              # [n_pos, n_pos]
        # One scale for every panel: each position has similarity 1 with itself.
        left.imshow(sim, cmap="RdBu_r", vmin=-1.0, vmax=1.0, interpolation="nearest")
        left.plot([m], [p], "o", markerfacecolor="none", markeredgecolor="black",
                  markersize=8)
        left.set_title(f"{scheme}: similarity {list(sim.shape)}", fontsize=9)
        left.set_xlabel("position m", fontsize=8)
        left.set_ylabel("position p", fontsize=8)
        left.tick_params(labelsize=7)
        right.plot(np.arange(n_pos), sim[p], "-", linewidth=1, color="tab:blue")
        right.plot([m], [sim[p, m]], "o", color="tab:orange")
        right.axhline(0, color="grey", linewidth=0.5)
        right.set_ylim(-1.05, 1.05)
        right.set_title(f"row p = {p}: cos(p={p}, m={m}) = {sim[p, m]:.2f}", fontsize=9)
        right.set_xlabel("position m", fontsize=8)
        right.tick_params(labelsize=7)
    fig.tight_layout()
    return fig


def _caption(scheme: str, p: int, m: int, n_pos: int, d: int) -> str:
    sim = position_similarity(scheme, n_pos, d)
    gap = m - p
    p0, m0 = (0, gap) if gap >= 0 else (-gap, 0)                 # the same gap, elsewhere
    return (f"<b>{scheme}</b>: positions {p} and {m} (gap {gap}) have similarity "
            f"{sim[p, m]:.2f}; positions {p0} and {m0}, the same gap elsewhere, have "
            f"{sim[p0, m0]:.2f}.")


def positions_lab(n_pos: int = 64, d: int = 16):
    """An ipywidgets lab: pick a scheme and two positions; see how similar they look.

    Uses only widgets and calls common to ipywidgets 7.7 (Colab) and 8.x; the figure goes
    to an Image widget as PNG bytes, set after ``display`` so the recorded output is stable.
    """
    import ipywidgets as widgets

    scheme = widgets.ToggleButtons(options=list(SCHEMES), value="sinusoidal",
                                   description="scheme")
    p = widgets.IntSlider(value=20, min=0, max=n_pos - 1, description="position p")
    m = widgets.IntSlider(value=25, min=0, max=n_pos - 1, description="position m")
    picture, caption = widgets.Image(format="png"), widgets.HTML()

    def update(_change=None):
        picture.value = figure_png(draw_similarity(scheme.value, p.value, m.value, n_pos, d))
        caption.value = _caption(scheme.value, p.value, m.value, n_pos, d)

    show_lab([scheme, [p, m]], [picture, caption], update)
