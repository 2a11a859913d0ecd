"""The shipped trained model's attention, drawn: one heatmap per head over a short text
(chapters 1, 4, 5 and 6; the weights come from ``anatomy.interp.attention_patterns``); and
one logit split into what each piece of the model wrote (``draw_logit_attribution``, from
``anatomy.interp.direct_logit_attribution``).

Spaces and newlines are drawn as visible marks so that a head that looks at them can be
seen doing it.

Shapes: patterns [L, h, T, T] (one sequence of T characters) -> one panel per (layer, head)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..positions import similarity_by_gap

# What a space and a newline look like on an axis (both glyphs are in DejaVu Sans,
# matplotlib's default font).
MARKS = {" ": "\u2423", "\n": "\u21b5"}


def char_labels(text: str) -> list[str]:
    """One tick label per character, with spaces and newlines made visible."""
    if not isinstance(text, str):
        raise ValueError(f"text: expected a string, got {type(text).__name__}")
    return [MARKS.get(ch, ch) for ch in text]


def _pairs(heads, L: int, h: int) -> list[tuple[int, int]]:
    if heads is None:
        return [(layer, head) for layer in range(L) for head in range(h)]
    pairs = []
    for item in heads:
        try:
            layer, head = (int(i) for i in item)
        except (TypeError, ValueError):
            raise ValueError(f"heads: expected (layer, head) pairs, got {item!r}") from None
        if not (0 <= layer < L and 0 <= head < h):
            raise ValueError(f"heads: ({layer}, {head}) is outside the model's L = {L} "
                             f"layers and h = {h} heads")
        pairs.append((layer, head))
    if not pairs:
        raise ValueError("heads: expected at least one (layer, head) pair, got none")
    return pairs


def draw_trained_heads(patterns: np.ndarray, text: str,
                       heads: Sequence[tuple[int, int]] | None = None,
                       notes: Mapping[tuple[int, int], str] | None = None,
                       cols: int = 4, title: str | None = None):
    """One heatmap per chosen head: rows are the query characters, columns the keys.

    ``patterns`` is every block's attention on one sequence (entry [l, k, t, j] is how
    much head k of layer l at position t takes from position j). ``heads`` lists the
    (layer, head) pairs to draw, in order (default: all of them, a layer per row when
    ``cols`` = h); ``notes`` adds a line under a panel's title (say, the head's measured
    pattern). Every panel uses the same 0..1 colour scale. Returns the matplotlib figure.

    Shapes: patterns [L, h, T, T] with T = len(text)
    """
    patterns = np.asarray(patterns, dtype=float)
    labels = char_labels(text)
    T = len(labels)
    if patterns.ndim != 4 or patterns.shape[-2:] != (T, T):
        raise ValueError(f"patterns: expected shape [L, h, T, T] with T = len(text) = {T}, "
                         f"got {patterns.shape}")
    if isinstance(cols, bool) or not isinstance(cols, int) or cols < 1:
        raise ValueError(f"cols: expected a positive integer, got {cols!r}")
    L, h = patterns.shape[:2]
    pairs = _pairs(heads, L, h)
    notes = dict(notes or {})
    cols = min(cols, len(pairs))
    rows = -(-len(pairs) // cols)                      # ceiling division
    side = max(2.4, 0.1 * T)                            # inches: room for T labels
    fig, axes = plt.subplots(rows, cols, figsize=(side * cols + 0.4, side * rows + 0.6),
                             squeeze=False, layout="constrained")
    font = 8 if T <= 24 else 7 if T <= 64 else 5
    for n, ax in enumerate(axes.flat):
        if n >= len(pairs):
            ax.axis("off")
            continue
        layer, head = pairs[n]
        ax.imshow(patterns[layer, head], cmap="Blues", vmin=0.0, vmax=1.0)
        note = notes.get((layer, head))
        ax.set_title(f"layer {layer}, head {head}" + (f"\n{note}" if note else ""),
                     fontsize=9)
        ax.set_xticks(range(T), labels, fontsize=font)
        ax.set_yticks(range(T), labels if n % cols == 0 else [], fontsize=font)
        ax.tick_params(length=0, pad=1)
    fig.suptitle(title or f"attention weights [T, T] = [{T}, {T}] per head "
                 "(rows: queries, columns: keys)", fontsize=10)
    return fig


_PIECE_COLOURS = {"emb": "tab:grey", "attn": "tab:orange", "mlp": "tab:green",
                  "lnf_b": "tab:purple"}


def piece_label(name: str) -> str:
    """A short axis label for a piece of :func:`anatomy.interp.direct_logit_attribution`:
    "blocks.2.attn" -> "attn 2", "blocks.0.mlp" -> "MLP 0", "tok_emb" -> "tok emb"."""
    if not isinstance(name, str):
        raise ValueError(f"name: expected a piece name such as 'blocks.0.attn', got {name!r}")
    parts = name.split(".")
    if len(parts) == 3 and parts[0] == "blocks" and parts[2] in ("attn", "mlp"):
        return f"{'attn' if parts[2] == 'attn' else 'MLP'} {parts[1]}"
    return {"tok_emb": "tok emb", "pos_emb": "pos emb", "lnf_b": "final LN b"}.get(name, name)


def draw_logit_attribution(pieces: Mapping[str, float], title: str | None = None):
    """A direct logit attribution as bars: one per piece (embeddings grey, attention orange,
    MLPs green, the final LayerNorm's shift purple), and the logit they add up to as a
    dashed line. ``pieces`` is :func:`anatomy.interp.direct_logit_attribution`'s dict.
    Returns the figure.

    Shapes: pieces {name: float}, one bar each
    """
    if not isinstance(pieces, Mapping) or not pieces:
        raise ValueError("pieces: expected a non-empty dict {piece name: contribution}, got "
                         f"{type(pieces).__name__}")
    names = list(pieces)
    values = np.array([float(pieces[n]) for n in names])
    colours = [_PIECE_COLOURS["emb"] if n.endswith("_emb") else
               _PIECE_COLOURS.get(n.rsplit(".", 1)[-1], "tab:blue") for n in names]
    fig, ax = plt.subplots(figsize=(7.0, 3.0))
    ax.bar(range(len(names)), values, color=colours)
    ax.axhline(values.sum(), color="black", linestyle="--", linewidth=1,
               label=f"sum = logit = {values.sum():.2f}")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_xticks(range(len(names)), [piece_label(n) for n in names], rotation=45,
                  fontsize=8)
    ax.set_ylabel("contribution to the logit")
    ax.set_title(title or "direct logit attribution: what each piece writes toward the "
                 "target", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---- chapter 5: what training put in the position table


def draw_position_similarity(sim: Mapping[str, np.ndarray], max_gap: int | None = None):
    """Tables of cosine similarity between positions side by side (say "trained" and
    "untrained", from :func:`anatomy.interp.position_similarity`), on one -1..1 colour
    scale, and a last panel with each table's mean similarity against the gap |p - m|.
    Returns the figure.

    Shapes: sim {name: [n, n]}, every table the same n
    """
    if not isinstance(sim, Mapping) or not sim:
        raise ValueError("sim: expected a non-empty dict {name: [n, n] similarity table}, "
                         f"got {type(sim).__name__}")
    tables = {name: np.asarray(table, dtype=float) for name, table in sim.items()}
    n = next(iter(tables.values())).shape[0]
    for name, table in tables.items():
        if table.shape != (n, n):
            raise ValueError(f"sim[{name!r}]: expected shape [n, n] = ({n}, {n}), got "
                             f"{table.shape}")
    gaps = np.arange(n if max_gap is None else min(max_gap + 1, n))
    fig, axes = plt.subplots(1, len(tables) + 1, figsize=(3.0 * len(tables) + 3.4, 3.0),
                             gridspec_kw={"width_ratios": [1] * len(tables) + [1.3]},
                             layout="constrained")
    for ax, (name, table) in zip(axes, tables.items(), strict=False):
        image = ax.imshow(table, cmap="RdBu_r", vmin=-1.0, vmax=1.0, interpolation="nearest")
        ax.set_title(f"{name}: cos(PE[p], PE[m])", fontsize=9)
        ax.set_xlabel("position m", fontsize=8)
        ax.set_ylabel("position p", fontsize=8)
        ax.tick_params(labelsize=7)
        # [n, n] -> [len(gaps)]: the mean similarity of the pairs g apart
        means = similarity_by_gap(table, [(g, g) for g in gaps])
        axes[-1].plot(gaps, means, "-o", markersize=2.5, linewidth=1, label=name)
    fig.colorbar(image, ax=axes[:-1], fraction=0.04)
    axes[-1].axhline(0, color="grey", linewidth=0.5)
    axes[-1].set_xlabel("gap |p - m|", fontsize=8)
    axes[-1].set_ylabel("mean cosine similarity", fontsize=8)
    axes[-1].set_title("positions g apart, on average", fontsize=9)
    axes[-1].tick_params(labelsize=7)
    axes[-1].legend(fontsize=8)
    return fig
