"""Chapter 9's pictures of training: the learning-rate schedule, loss curves, the loss at each
position of the window, the next-character distribution of a trained model, and the lab that
samples from it with a temperature and top-k."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from ..data import CharTokenizer, get_batch
from ..gpt_torch import unwrap
from ..sampling import next_token_probs, sample
from ..train.history import History
from ..train.schedule import lr_at
from .common import figure_png, show_lab


def draw_lr_schedule(cfg):
    """The learning rate of every step of a run: warmup, cosine, floor.

    Returns the matplotlib figure.
    """
    steps = np.arange(cfg.max_steps + 1)
    rates = np.array([lr_at(int(s), cfg) for s in steps])
    fig, ax = plt.subplots(figsize=(5.6, 2.6))
    ax.plot(steps, rates, color="tab:blue")
    ax.axvline(cfg.warmup_steps, color="gray", linestyle=":", linewidth=1,
               label=f"end of warmup (step {cfg.warmup_steps})")
    ax.axhline(cfg.min_lr, color="gray", linestyle="--", linewidth=1,
               label=f"min_lr = {cfg.min_lr:g}")
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    ax.set_ylim(0, 1.08 * cfg.lr)
    ax.set_title(f"lr_at(step) for the '{cfg.name}' preset: peak {cfg.lr:g}, "
                 f"{cfg.max_steps:,} steps", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _smooth(values: Sequence[float], width: int) -> np.ndarray:
    """Running mean over ``width`` steps (shorter at the start), to show the trend."""
    v = np.asarray(values, dtype=float)
    cum = np.cumsum(np.insert(v, 0, 0.0))
    idx = np.arange(1, len(v) + 1)
    lo = np.maximum(idx - width, 0)
    return (cum[idx] - cum[lo]) / (idx - lo)


def draw_loss_curves(runs: History | Mapping[str, History], V: int | None = None,
                     title: str = "loss curve", smooth: int = 25):
    """Training and validation loss against the step, for one run or several.

    Each run shows its per-step training loss (a running mean over ``smooth`` steps, thin)
    and its evaluations (train and val loss, with markers). ``V`` draws the loss of a
    uniform guess, ln V. Returns the matplotlib figure.
    """
    if isinstance(runs, History):
        runs = {"": runs}
    fig, ax = plt.subplots(figsize=(5.8, 3.2))
    colors = ["tab:blue", "tab:red", "tab:green", "tab:purple"]
    for (name, h), color in zip(runs.items(), colors, strict=False):
        label = f"{name}: " if name else ""
        if h.step_loss:
            ax.plot(np.arange(1, len(h.step_loss) + 1), _smooth(h.step_loss, smooth),
                    color=color, alpha=0.35, linewidth=1)
        ax.plot(h.step, h.train_loss, "o-", color=color, markersize=3, linewidth=1.2,
                label=f"{label}train")
        ax.plot(h.step, h.val_loss, "s--", color=color, markersize=3, linewidth=1.2,
                label=f"{label}val")
    if V is not None:
        ax.axhline(math.log(V), color="gray", linestyle=":", linewidth=1,
                   label=f"ln V = ln {V} (uniform guess)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


@torch.no_grad()
def loss_by_position(model: torch.nn.Module, data: torch.Tensor, T: int, B: int = 64,
                     n_batches: int = 4, seed: int = 0) -> np.ndarray:
    """Mean cross-entropy at each position of the window, over ``n_batches`` random batches.

    Position t predicts token t + 1 from tokens 0..t, so in a causal model the loss falls
    with t (more context). The model is evaluated in eval mode and left as it was found.

    Shapes: data [N] -> x, y [B, T] -> logits [B, T, V] -> losses [B, T] -> result [T]
    """
    raw = unwrap(model)
    device = raw.device                          # a model trained on a GPU stays there
    was_training = raw.training
    raw.eval()
    gen = torch.Generator().manual_seed(seed)
    total = torch.zeros(T, device=device)
    try:
        for _ in range(n_batches):
            x, y = get_batch(data, B, T, gen)                          # [B, T] each
            x, y = x.to(device), y.to(device)
            logits = raw(x)                                            # [B, T, V]
            losses = F.cross_entropy(logits.transpose(1, 2), y,        # [B, V, T] vs [B, T]
                                     reduction="none")                 # -> [B, T]
            total += losses.mean(dim=0)                                # -> [T]
    finally:
        raw.train(was_training)
    return (total / n_batches).cpu().numpy()


@torch.no_grad()
def loss_at_last_row(model: torch.nn.Module, data: torch.Tensor, n: int, B: int = 64,
                     n_batches: int = 4, seed: int = 0) -> float:
    """Mean cross-entropy of the last row of random windows of ``n`` tokens.

    This is the row that generation reads while its window holds n tokens (``sample`` feeds
    the prompt and what it has written so far, up to ctx tokens, and takes the last row's
    logits). With ``n = T`` and the same ``B``, ``n_batches`` and ``seed`` it equals the last
    entry of ``loss_by_position``. Eval mode; the model is left as it was found.

    Shapes: data [N] -> x, y [B, n] -> logits [B, n, V] -> last row [B, V] -> result []
    """
    raw = unwrap(model)
    device = raw.device
    was_training = raw.training
    raw.eval()
    gen = torch.Generator().manual_seed(seed)
    total = 0.0
    try:
        for _ in range(n_batches):
            x, y = get_batch(data, B, n, gen)                          # [B, n] each
            logits = raw(x.to(device))[:, -1]                          # [B, n, V] -> [B, V]
            total += F.cross_entropy(logits, y[:, -1].to(device)).item()  # vs [B]
    finally:
        raw.train(was_training)
    return total / n_batches


def draw_loss_by_position(curves: Mapping[str, np.ndarray], V: int | None = None,
                          title: str | None = None):
    """One line per model: the loss at each position t of the window. Returns the figure.

    ``title`` replaces the default one (which says how ``loss_by_position`` averages), for
    curves measured another way, such as ``loss_at_last_row`` at every window length.
    """
    fig, ax = plt.subplots(figsize=(5.6, 2.8))
    T = 0
    for (name, losses), color in zip(curves.items(), ["tab:blue", "tab:red", "tab:green"],
                                     strict=False):
        losses = np.asarray(losses)
        T = max(T, len(losses))
        ax.plot(np.arange(len(losses)), losses, "o-", color=color, markersize=3, label=name)
    if V is not None:
        ax.axhline(math.log(V), color="gray", linestyle=":", linewidth=1, label=f"ln {V}")
    ax.set_xlabel("position t in the window (predicting token t + 1)")
    ax.set_ylabel("validation loss")
    if title is None:
        title = (f"loss at each position: logits [B, T, V] -> losses [B, T] -> mean over B, "
                 f"T = {T}")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


@torch.no_grad()
def next_char_probs(model: torch.nn.Module, tokenizer: CharTokenizer, prompt: str,
                    temperature: float = 1.0, top_k: int | None = None) -> np.ndarray:
    """The distribution the sampler draws the character after ``prompt`` from.

    ``temperature=0`` (greedy) puts all the probability on the likeliest character.

    Shapes: prompt -> ids [1, n] -> logits [1, n, V] -> last row [V] -> probs [V]
    """
    raw = unwrap(model)
    was_training = raw.training
    raw.eval()
    try:
        ids = tokenizer.encode(prompt or "\n")[-raw.cfg.ctx:]
        window = torch.tensor([ids], device=raw.device)                # [1, n]
        last = raw(window)[0, -1].cpu()                                # [1, n, V] -> [V]
    finally:
        raw.train(was_training)
    if temperature == 0:
        probs = torch.zeros_like(last)
        probs[last.argmax()] = 1.0
        return probs.numpy()
    return next_token_probs(last, temperature, top_k).numpy()


def _show(ch: str) -> str:
    return {" ": "' '", "\n": "\\n"}.get(ch, ch)


def draw_next_chars(probs: np.ndarray, vocab: str, prompt: str, temperature: float = 1.0,
                    top_k: int | None = None, n: int = 12):
    """Horizontal bars of the ``n`` likeliest next characters. Returns the figure.

    Shapes: probs [V]
    """
    probs = np.asarray(probs)
    if probs.shape != (len(vocab),):
        raise ValueError(f"probs: expected shape [V] = ({len(vocab)},), got {probs.shape}")
    order = np.argsort(-probs, kind="stable")[:n]
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    ax.barh(range(len(order)), probs[order], color=["tab:orange"] + ["tab:blue"] *
            (len(order) - 1))
    ax.set_yticks(range(len(order)), [_show(vocab[i]) for i in order], fontsize=9)
    ax.invert_yaxis()
    for row, i in enumerate(order):
        ax.text(probs[i], row, f" {probs[i]:.2f}", va="center", fontsize=7)
    ax.set_xlim(0, min(1.0, 1.25 * probs.max() + 0.02))
    ax.set_xlabel("p(next character)")
    k = "all" if top_k is None else top_k
    ax.set_title(f"after ...{prompt[-24:]!r}\nprobs [V] = [{len(vocab)}], temperature "
                 f"{temperature:g}, top-k {k}; the {len(order)} likeliest", fontsize=8)
    fig.tight_layout()
    return fig


def sampling_lab(model: torch.nn.Module, tokenizer: CharTokenizer, prompts: Sequence[str],
                 n_chars: int = 240):
    """An ipywidgets lab: pick a prompt, a temperature (0 = greedy), top-k and a seed; see
    the next-character distribution and a sample of ``n_chars`` characters.

    Uses only widgets and calls common to ipywidgets 7.7 (Colab) and 8.x; the figure goes to
    an Image widget and the text to an HTML widget, both filled after ``display``.
    """
    import ipywidgets as widgets

    V = tokenizer.vocab_size
    prompt = widgets.Dropdown(options=list(prompts), value=prompts[0], description="prompt")
    temperature = widgets.FloatSlider(value=0.8, min=0.0, max=2.0, step=0.1,
                                      description="temperature")
    top_k = widgets.IntSlider(value=V, min=1, max=V, description="top-k")
    seed = widgets.IntSlider(value=0, min=0, max=9, description="seed")
    picture, text = widgets.Image(format="png"), widgets.HTML()

    def update(_change=None):
        k = None if top_k.value == V else top_k.value
        probs = next_char_probs(model, tokenizer, prompt.value, temperature.value, k)
        picture.value = figure_png(draw_next_chars(probs, tokenizer.vocab, prompt.value,
                                                   temperature.value, k))
        gen = torch.Generator().manual_seed(seed.value)
        out = sample(model, tokenizer, prompt.value, n_chars, temperature=temperature.value,
                     top_k=k, generator=gen)
        text.value = f"<pre style='font-size: 12px'>{html.escape(out)}</pre>"

    show_lab([prompt, [temperature, top_k], seed], [picture, text], update)
