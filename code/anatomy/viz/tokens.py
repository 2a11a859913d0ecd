"""The tokens chapter's picture: what a larger vocabulary buys in bytes per token."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt


def draw_compression(rates: Mapping[tuple[str, int], float]):
    """Bytes per token against the vocabulary size V (log scale), one marker per tokenizer.

    ``rates`` maps (tokenizer name, V) to its bytes per token on one text. Tokenizers that
    share a name (one BPE truncated to several sizes) are joined by a line.
    Returns the matplotlib figure.
    """
    if not rates:
        raise ValueError("draw_compression: expected at least one (name, V) -> bytes per "
                         "token; got none")
    fig, ax = plt.subplots(figsize=(5.6, 3.0))
    for name in dict.fromkeys(n for n, _ in rates):
        points = sorted((V, r) for (n, V), r in rates.items() if n == name)
        Vs, rs = zip(*points, strict=True)
        ax.plot(Vs, rs, marker="o", label=name)
        for V, r in points:
            ax.annotate(f"{r:.2f}", (V, r), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("vocabulary size V (log scale)")
    ax.set_ylabel("bytes per token")
    ax.set_ylim(0, 1.2 * max(rates.values()))
    ax.set_title("a larger vocabulary packs more text into each token", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
