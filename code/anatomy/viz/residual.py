"""Chapter 6's figures: the pre-norm block as a diagram, GELU against ReLU, the residual
stream's pieces, and the gradient profiles of pre-norm and post-norm stacks; plus the lab
that explores the residual stream."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Circle, FancyBboxPatch

from ..blocks import gelu, relu, residual_pieces
from .common import figure_png, show_lab

SHOW = ("all", "attn", "mlp")

# The boxes of the block diagram: (label, x of the centre, y of the centre, colour).
BLOCK_BOXES = (("LN1", 2.6, 1.55, "#dddddd"), ("Attention", 4.3, 1.55, "tab:orange"),
               ("LN2", 7.1, 1.55, "#dddddd"), ("MLP", 8.6, 1.55, "tab:green"))
_ADDS = (5.7, 10.0)          # x of the two additions on the stream


def _arrow(ax, start, end, color="black", width=1.4):
    ax.annotate("", xy=end, xytext=start,
                arrowprops={"arrowstyle": "-|>", "color": color, "lw": width,
                            "shrinkA": 0, "shrinkB": 0})


def draw_block_diagram():
    """One pre-norm block drawn on its residual stream: the stream runs left to right; each
    sublayer reads a copy of it through its LayerNorm and adds its output back at a "+".
    The skip path (the straight line) passes every block unchanged. Returns the figure.

    Shapes: the stream [T, d] in and out; each write [T, d]
    """
    fig, ax = plt.subplots(figsize=(8.6, 2.9))
    y0 = 0.0                                               # the stream's height
    ax.plot([0.2, 11.6], [y0, y0], color="tab:blue", lw=3, zorder=1)
    _arrow(ax, (11.0, y0), (11.7, y0), color="tab:blue", width=3)
    ax.text(0.2, y0 - 0.45, "stream x [T, d]\n(from the embedding\nor the block below)",
            fontsize=8, va="top")
    ax.text(11.7, y0 - 0.45, "x [T, d]\nto the next block\n(after the last: the\n"
            "final LN and head)", fontsize=8, va="top", ha="right")
    for (label, cx, cy, color), read_at in zip((BLOCK_BOXES[0], BLOCK_BOXES[2]), (1.3, 6.3),
                                               strict=True):
        width = 0.9
        ax.add_patch(FancyBboxPatch((cx - width / 2, cy - 0.3), width, 0.6,
                                    boxstyle="round,pad=0.05", fc=color, ec="black"))
        ax.text(cx, cy, label, ha="center", va="center", fontsize=9)
        ax.plot([read_at, read_at], [y0, cy], color="black", lw=1.2)   # the read: a copy
        _arrow(ax, (read_at, cy), (cx - width / 2 - 0.05, cy))
    for (label, cx, cy, color), add_at in zip((BLOCK_BOXES[1], BLOCK_BOXES[3]), _ADDS,
                                               strict=True):
        width = 1.5 if label == "Attention" else 1.1
        ax.add_patch(FancyBboxPatch((cx - width / 2, cy - 0.3), width, 0.6,
                                    boxstyle="round,pad=0.05", fc=color, ec="black",
                                    alpha=0.85))
        ax.text(cx, cy, label, ha="center", va="center", fontsize=9, color="white",
                fontweight="bold")
        ax.plot([cx + width / 2 + 0.05, add_at], [cy, cy], color="black", lw=1.2)
        _arrow(ax, (add_at, cy), (add_at, y0 + 0.2))        # the write: an addition
        ax.add_patch(Circle((add_at, y0), 0.2, fc="white", ec="black", zorder=3))
        ax.text(add_at, y0, "+", ha="center", va="center", fontsize=12, zorder=4)
    for (_, cx, _, _), other in zip((BLOCK_BOXES[0], BLOCK_BOXES[2]),
                                    (BLOCK_BOXES[1], BLOCK_BOXES[3]), strict=True):
        left = cx + 0.5
        right = other[1] - (0.8 if other[0] == "Attention" else 0.6)
        _arrow(ax, (left, other[2]), (right, other[2]))
    ax.text(3.5, 2.25, "reads LN1(x), writes a [T, d] change", ha="center", fontsize=8)
    ax.text(7.9, 2.25, "reads LN2(x), after attention's write", ha="center", fontsize=8)
    ax.text(5.85, -0.35, "x + Attn(LN1(x))", ha="left", fontsize=8, color="tab:blue")
    ax.text(3.5, 0.12, "skip path: x passes on unchanged", ha="center", fontsize=8,
            color="tab:blue")
    ax.set_xlim(0, 11.9)
    ax.set_ylim(-1.5, 2.5)
    ax.axis("off")
    ax.set_title("one pre-norm block: read through a LayerNorm, write by addition "
                 "(x L blocks)", fontsize=10)
    fig.tight_layout()
    return fig


def gelu_minimum(lo: float = -3.0, hi: float = 0.0, n: int = 300_001) -> tuple[float, float]:
    """Where GELU (tanh form) dips lowest, and how low: (x_min, gelu(x_min)), on a fine grid."""
    xs = np.linspace(lo, hi, n)
    ys = gelu(xs)
    i = int(np.argmin(ys))
    return float(xs[i]), float(ys[i])


def draw_gelu(lo: float = -4.0, hi: float = 3.0):
    """GELU and ReLU on one axis, with GELU's negative dip marked. Returns the figure."""
    xs = np.linspace(lo, hi, 701)
    x_min, y_min = gelu_minimum()
    fig, ax = plt.subplots(figsize=(5.2, 3.0))
    ax.plot(xs, relu(xs), color="grey", linestyle="--", label="ReLU  max(x, 0)")
    ax.plot(xs, gelu(xs), color="tab:blue", label="GELU (tanh form)")
    ax.plot([x_min], [y_min], "o", color="tab:red")
    ax.annotate(f"minimum {y_min:.3f}\nat x = {x_min:.2f}", (x_min, y_min),
                xytext=(x_min - 2.6, 0.9), fontsize=8,
                arrowprops={"arrowstyle": "->", "color": "tab:red"})
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_xlabel("x")
    ax.set_title(f"GELU vs ReLU, elementwise: x {[len(xs)]} -> {[len(xs)]}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def _kind(name: str) -> str:
    return "embed" if name == "embed" else name.split(".")[1]


def contributions(pieces: Mapping[str, np.ndarray], token: int) -> dict[str, float]:
    """How much each piece adds to the final vector of ``token``, measured along it.

    The final vector is f = sum of the pieces; piece k contributes <piece_k, f> / |f|. The
    contributions add up to |f| exactly (to rounding), so a bar chart of them is a true
    decomposition of the final vector's length; a negative bar points against it.

    Shapes: pieces each [T, d] -> one number per piece
    """
    final = sum(np.asarray(v)[token] for v in pieces.values())     # [d]
    norm = float(np.linalg.norm(final))
    return {name: float(np.asarray(v)[token] @ final) / norm for name, v in pieces.items()}


def draw_residual(pieces: Mapping[str, np.ndarray], token: int = -1, show: str = "all"):
    """Two panels for one token: the stream's norm after every sublayer, and the final
    vector's length split into what each piece contributed.

    ``show`` picks the writes drawn as their own bars ("all", "attn" or "mlp"); the others are
    lumped into one "other writes" bar, so the bars still add up to the final length.

    Shapes: pieces each [T, d] (from :func:`anatomy.blocks.residual_pieces`)
    """
    if show not in SHOW:
        raise ValueError(f"show: expected one of {SHOW}, got {show!r}")
    names = list(pieces)
    T, d = np.shape(pieces["embed"])
    t = token % T
    stream = np.cumsum([np.asarray(pieces[n])[t] for n in names], axis=0)   # [pieces, d]
    parts = contributions(pieces, t)
    bars = {n: v for n, v in parts.items() if n == "embed" or show in ("all", _kind(n))}
    rest = sum(v for n, v in parts.items() if n not in bars)
    if len(bars) < len(parts):
        bars["other writes"] = rest
    colors = {"embed": "tab:grey", "attn": "tab:orange", "mlp": "tab:green"}

    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.2),
                                      gridspec_kw={"width_ratios": [1, 1.3]})
    left.plot(range(len(names)), np.linalg.norm(stream, axis=-1), "o-", color="tab:blue")
    left.set_xticks(range(len(names)), names, rotation=60, fontsize=7)
    left.set_ylabel("|stream|")
    left.set_ylim(bottom=0)
    left.set_title(f"stream norm after each write, token {t}\nstream [T, d] = [{T}, {d}]",
                   fontsize=9)
    right.bar(range(len(bars)), list(bars.values()),
              color=[colors.get(_kind(n) if n != "other writes" else "", "tab:purple")
                     for n in bars])
    right.axhline(sum(parts.values()), color="black", linestyle="--", linewidth=1,
                  label=f"|final| = {sum(parts.values()):.2f}")
    right.axhline(0, color="black", linewidth=0.5)
    right.set_xticks(range(len(bars)), list(bars), rotation=60, fontsize=7)
    right.set_title("each piece's share of the final vector\n<piece, final> / |final|",
                    fontsize=9)
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def residual_lab(x: np.ndarray, blocks: Sequence[Mapping[str, np.ndarray]], h: int):
    """An ipywidgets lab: choose how many blocks run, which token, and which writes to show.

    Uses only widgets common to ipywidgets 7.7 and 8.x; the picture goes to an Image widget,
    set after ``display`` so the recorded output stays small and stable.

    Shapes: x [T, d], blocks: up to L dicts of block weights
    """
    import ipywidgets as widgets

    T = np.shape(x)[0]
    n_blocks = widgets.IntSlider(value=len(blocks), min=1, max=len(blocks), description="blocks")
    token = widgets.Dropdown(options=list(range(T)), value=T - 1, description="token")
    show = widgets.ToggleButtons(options=list(SHOW), value="all", description="writes")
    picture, caption = widgets.Image(format="png"), widgets.HTML()

    def update(_change=None):
        pieces = residual_pieces(x, blocks[: n_blocks.value], h)
        picture.value = figure_png(draw_residual(pieces, token.value, show.value))
        t = token.value
        final = sum(np.asarray(v)[t] for v in pieces.values())        # [d]
        caption.value = (f"{len(pieces)} pieces (the embedding and {len(pieces) - 1} writes); "
                         f"token {t}: |embed| = {np.linalg.norm(x[t]):.2f}, "
                         f"|final| = {np.linalg.norm(final):.2f}")

    show_lab([[n_blocks, token], show], [picture, caption], update)


def draw_grad_profiles(full: Mapping[str, object], skip: Mapping[str, object]):
    """Gradient norms per block for pre- and post-norm: the full gradient of each block's
    weights (left) and the gradient that reaches each block along the skip path alone (right).

    ``full`` and ``skip`` map "pre" and "post" to :class:`anatomy.norm_placement.GradProfile`.
    """
    styles = {"pre": ("tab:blue", "pre-norm  x + f(LN(x))"),
              "post": ("tab:red", "post-norm  LN(x + f(x))")}
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.2), sharex=True)
    for name, (color, label) in styles.items():
        left.semilogy(full[name].params, color=color, label=label)
        right.semilogy(skip[name].stream, color=color, label=label)
    L = len(full["pre"].params)
    left.set_title(f"|grad of block l's weights|, L = {L}", fontsize=9)
    right.set_title("|grad of the stream entering block l|,\nskip path only", fontsize=9)
    for ax in (left, right):
        ax.set_xlabel("block l (0 = nearest the input)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def draw_patch_recovery(recovery, title: str | None = None):
    """Activation patching as one table of colours: row l is block l, columns its heads and
    its MLP, each cell the share of the change in logit difference (from the clean run's to
    the corrupted run's) that patching that one head's or MLP's write from the clean run into the
    corrupted one gives back (0 = nothing, 1 = all of it; red above 0, blue below), with the
    share written in the cell. ``recovery`` is
    :class:`anatomy.interp.PatchRecovery`. Returns the figure.

    Shapes: recovery.heads [L, h], recovery.mlps [L] -> an [L, h + 1] table
    """
    heads, mlps = np.asarray(recovery.heads), np.asarray(recovery.mlps)
    if heads.ndim != 2 or mlps.shape != heads.shape[:1]:
        raise ValueError(f"recovery: expected heads [L, h] and mlps [L], got shapes "
                         f"{heads.shape} and {mlps.shape}")
    L, h = heads.shape
    table = np.concatenate([heads, mlps[:, None]], axis=1)   # [L, h] + [L, 1] -> [L, h + 1]
    top = max(1.0, float(np.abs(table).max()))
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * (h + 1), 0.8 + 0.6 * L))
    ax.imshow(table, cmap="RdBu_r", vmin=-top, vmax=top, aspect="auto")
    for (i, j), v in np.ndenumerate(table):
        ax.text(j, i, f"{v:.2f}".replace("-0.00", "0.00"), ha="center", va="center", fontsize=8,
                color="white" if abs(v) > 0.6 * top else "black")
    ax.axvline(h - 0.5, color="black", linewidth=1)
    ax.set_xticks(range(h + 1), [f"head {k}" for k in range(h)] + ["MLP"], fontsize=8)
    ax.set_yticks(range(L), [f"block {i}" for i in range(L)], fontsize=8)
    ax.set_title(title or f"share of the change in logit difference recovered "
                 f"({recovery.corrupt:.2f} -> {recovery.clean:.2f})", fontsize=9)
    fig.tight_layout()
    return fig
