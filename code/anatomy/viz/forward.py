"""Chapter 8's picture of a model's next-token guess, and the lab that changes the prompt,
the temperature and top-k."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..blocks import gelu
from ..gpt_numpy import forward, next_token_distribution
from ..params import GPTConfig
from .common import figure_png, show_lab


def next_char_probs(params: Mapping[str, np.ndarray], cfg: GPTConfig, vocab: Sequence[str],
                     prompt: str, temperature: float = 1.0, top_k: int | None = None,
                     act: Callable[[np.ndarray], np.ndarray] = gelu) -> np.ndarray:
    """The distribution over the next character after ``prompt`` (a character-level model).

    Each character of the prompt is looked up in ``vocab``; only the last ctx characters
    are fed to the model.

    Shapes: prompt of T characters -> ids [T] -> logits [T, V] -> probs [V]
    """
    unknown = sorted(set(prompt) - set(vocab))
    if unknown or not prompt:
        raise ValueError(f"prompt: expected 1 or more characters from the vocabulary "
                         f"{''.join(vocab)!r}, got {prompt!r}")
    ids = np.array([list(vocab).index(c) for c in prompt[-cfg.ctx:]])   # [T]
    logits = forward(params, ids, cfg, act=act)[-1]                     # [T, V] -> [V]
    return next_token_distribution(logits, temperature, top_k)          # [V]


def draw_next_token(probs: np.ndarray, vocab: Sequence[str], prompt: str,
                    temperature: float = 1.0, top_k: int | None = None):
    """Bars of the next-token probabilities, the uniform guess 1/V as a dashed line.

    Returns the matplotlib figure.

    Shapes: probs [V]
    """
    probs = np.asarray(probs)
    V = len(vocab)
    if probs.shape != (V,):
        raise ValueError(f"probs: expected shape [V] = ({V},), got {probs.shape}")
    labels = [repr(c)[1:-1] if c != " " else "' '" for c in vocab]   # a space must be seen
    fig, ax = plt.subplots(figsize=(5.2, 2.8))
    bars = ax.bar(range(V), probs, color="tab:blue")
    bars[int(probs.argmax())].set_color("tab:orange")                # the greedy choice
    ax.axhline(1 / V, color="gray", linestyle="--", linewidth=1, label=f"uniform 1/V = 1/{V}")
    for i, p in enumerate(probs):
        ax.text(i, p, f"{p:.2f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(V), labels, fontsize=9)
    ax.set_ylim(0, max(1.15 * probs.max(), 1.5 / V))
    ax.set_ylabel("p(next character)")
    k = "all" if top_k is None else top_k
    ax.set_title(f"after {prompt!r}: logits [T, V] = [{len(prompt)}, {V}] -> last row "
                 f"-> probs [V]\n"
                 f"temperature {temperature:g}, top-k {k}", fontsize=9)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


def next_token_lab(params: Mapping[str, np.ndarray], cfg: GPTConfig, vocab: Sequence[str],
                   prompts: Sequence[str], act: Callable[[np.ndarray], np.ndarray] = gelu):
    """An ipywidgets lab: choose a prompt, a temperature and top-k; see the next-token bars.

    Uses only widgets and calls common to ipywidgets 7.7 (Colab) and 8.x. The figure is sent
    to an Image widget as PNG bytes, set after ``display`` so the recorded output is stable.
    """
    import ipywidgets as widgets

    prompt = widgets.Dropdown(options=list(prompts), value=prompts[0], description="prompt")
    temperature = widgets.FloatSlider(value=1.0, min=0.1, max=3.0, step=0.1,
                                      description="temperature")
    top_k = widgets.IntSlider(value=len(vocab), min=1, max=len(vocab), description="top-k")
    picture, caption = widgets.Image(format="png"), widgets.HTML()

    def update(_change=None):
        k = None if top_k.value == len(vocab) else top_k.value
        probs = next_char_probs(params, cfg, vocab, prompt.value, temperature.value, k, act)
        picture.value = figure_png(draw_next_token(probs, vocab, prompt.value,
                                                   temperature.value, k))
        best = vocab[int(probs.argmax())]
        caption.value = (f"greedy pick: <b>{best!r}</b> with p = {probs.max():.3f}; "
                         f"uniform would give {1 / len(vocab):.3f} each")

    show_lab([prompt, [temperature, top_k]], [picture, caption], update)
