"""Chapter 7's tables and the model calculator: shapes, parameters, FLOPs and memory of a GPT.

The same functions render the static tables of the web page and the live lab, so the two
cannot disagree. Tables come out as Markdown (for ``IPython.display.Markdown``) or as HTML
(for the lab's ``ipywidgets.HTML``); both are plain strings, identical on every run.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from ..flops import (
    activation_shapes,
    format_bytes,
    forward_flops_per_token,
    kv_cache_bytes,
    training_memory_bytes,
    weight_bytes,
)
from ..params import GPT2_SMALL, GPTConfig, count_by_kind, count_params, shape_table
from .common import show_lab

# Choices offered by the lab (round sizes and a few real vocabularies).
D_CHOICES = tuple(range(64, 4096 + 1, 64))
CTX_CHOICES = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
V_CHOICES = (65, 256, 1024, 8192, 32000, 50257, 100000)
DTYPES = (("fp16 / bf16", 2), ("fp32", 4))


def head_choices(d: int, max_h: int = 64) -> list[int]:
    """Every head count that splits d evenly (d mod h = 0), up to ``max_h``."""
    return [h for h in range(1, min(d, max_h) + 1) if d % h == 0]


def snap_heads(d: int, h: int, max_h: int = 64) -> int:
    """``h`` if it divides d, else the nearest head count that does (the smaller on a tie)."""
    return min(head_choices(d, max_h), key=lambda c: (abs(c - h), c))


def length_choices(ctx: int) -> list[int]:
    """Sequence lengths offered for a context: powers of two up to ctx, and ctx itself."""
    out = [1 << k for k in range(ctx.bit_length()) if 1 << k <= ctx]
    return out if out[-1] == ctx else [*out, ctx]


def _text(x: object) -> str:
    return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else str(x)


def _guess_align(rows: Sequence[Sequence[object]]) -> str:
    return "".join("r" if isinstance(x, int) else "l" for x in rows[0]) if rows else ""


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]],
                   align: str | None = None) -> str:
    """A GitHub-style Markdown table; ``align`` has one letter per column, "l", "c" or "r"
    (default: numbers right, text left, judged from the first row). Integers get commas."""
    align = align or _guess_align(rows)
    rule = {"l": ":---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join(rule[a] for a in align) + "|"]
    lines += ["| " + " | ".join(_text(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell_html(x: object) -> str:
    """Escape a cell; text in `backticks` becomes code and **stars** bold, as in Markdown."""
    text = _text(x)
    if len(text) > 2 and text[0] == text[-1] == "`":
        return f"<code>{html.escape(text[1:-1])}</code>"
    if len(text) > 4 and text.startswith("**") and text.endswith("**"):
        return f"<b>{html.escape(text[2:-2])}</b>"
    return html.escape(text)


def html_table(headers: Sequence[str], rows: Sequence[Sequence[object]],
               align: str | None = None, title: str = "") -> str:
    """The same table as HTML, with inline styles only (it renders in Jupyter, Colab and the
    book alike)."""
    align = align or _guess_align(rows)
    side = {"l": "left", "r": "right", "c": "center"}
    cell = "padding:1px 8px;border-bottom:1px solid #ddd"
    head = "".join(f"<th style='{cell};text-align:{side[a]}'>{html.escape(h)}</th>"
                   for h, a in zip(headers, align, strict=True))
    body = "".join("<tr>" + "".join(f"<td style='{cell};text-align:{side[a]}'>{_cell_html(x)}"
                                    "</td>" for x, a in zip(row, align, strict=True)) + "</tr>"
                   for row in rows)
    caption = f"<b>{html.escape(title)}</b>" if title else ""
    return (f"<div>{caption}<table style='border-collapse:collapse;font-size:12px'>"
            f"<tr>{head}</tr>{body}</table></div>")


class Table:
    """A table for a notebook cell: HTML in Jupyter, Colab and the rendered book, Markdown
    text (its ``repr``) anywhere else. ``display(Table(headers, rows))`` or end a cell with it.
    """

    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[object]],
                 align: str | None = None, title: str = ""):
        self.headers, self.rows = tuple(headers), [tuple(r) for r in rows]
        self.align, self.title = align or _guess_align(self.rows), title
        if any(len(r) != len(self.headers) for r in self.rows) or len(self.align) != len(
                self.headers):
            raise ValueError(f"rows and align: expected {len(self.headers)} columns each, "
                             f"like headers")

    def _repr_html_(self) -> str:
        return html_table(self.headers, self.rows, self.align, self.title)

    def _repr_markdown_(self) -> str:
        return markdown_table(self.headers, self.rows, self.align)

    def __repr__(self) -> str:
        return (f"{self.title}\n" if self.title else "") + self._repr_markdown_()


def shape_table_display(cfg: GPTConfig) -> Table:
    """The shape table: name, shape in letters and in numbers, copies, count, and the total."""
    rows = [(f"`{r.name}`", f"`{r.spec}`", str(r.shape), r.times, r.count)
            for r in shape_table(cfg)]
    rows.append(("**total**", "", "", "", f"**{count_params(cfg):,}**"))
    return Table(("parameter", "shape", "numbers", "copies", "count"), rows, align="lllrr")


def calculator_html(cfg: GPTConfig, T: int, B: int = 1, bytes_per_value: int = 2) -> str:
    """The calculator's two panels as one HTML string.

    Left: the shape of every tensor of one forward pass (B sequences of T tokens). Right:
    parameters by kind, total N, FLOPs per token (2N forward, 6N training, attention's
    4 L T d), memory to serve (weights and the KV cache in the chosen dtype) and memory to
    train with AdamW in fp32 (weights, gradients, the two moments, activations).
    """
    acts = activation_shapes(cfg, T, B)
    left = html_table(
        ("where", "tensor", "shape", "numbers", "values"),
        [(a.stage, a.name, a.spec, str(a.shape), a.size) for a in acts], align="llllr",
        title=f"one forward pass, B = {B}, T = {T} (block rows repeat L = {cfg.L} times)")
    kinds = count_by_kind(cfg)
    flops = forward_flops_per_token(cfg, T)
    N = kinds["total"]
    dtype = {b: name for name, b in DTYPES}.get(bytes_per_value, f"{bytes_per_value} B")
    cache = kv_cache_bytes(cfg, T, B, bytes_per_value)
    rows = [(f"{kind}", n) for kind, n in kinds.items() if kind != "total"]
    rows += [
        ("total N", N),
        ("forward FLOPs / token, 2N", 2 * N),
        ("training FLOPs / token, 6N", 6 * N),
        ("attention FLOPs / token, 4 L T d", flops["attention"]),
        (f"weights ({dtype})", format_bytes(weight_bytes(cfg, bytes_per_value))),
        (f"KV cache, 2 L T d x B ({dtype})", format_bytes(cache)),
        ("KV cache / weights", f"{cache / weight_bytes(cfg, bytes_per_value):.2f}"),
    ]
    train = training_memory_bytes(cfg, T, B, 4)
    rows += [(f"training (fp32): {part}", format_bytes(n)) for part, n in train.items()]
    sizes = (f"V = {cfg.V}, ctx = {cfg.ctx}, d = {cfg.d}, L = {cfg.L}, h = {cfg.h}, "
             f"d_head = {cfg.d_head}, d_ff = {cfg.d_ff}")
    right = html_table(("", "count"), rows, align="lr", title=sizes)
    return (f"<div style='display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start'>"
            f"{left}{right}</div>")


def calculator_lab(cfg: GPTConfig = GPT2_SMALL, T: int = 1024):
    """An ipywidgets calculator: sliders for d, L, h, T, V (and ctx, B, dtype).

    h only offers divisors of d: moving d recomputes h's options and snaps h to the nearest
    one; likewise T's options stop at ctx. d_ff follows 4d. Uses only widgets common to
    ipywidgets 7.7 (Colab) and 8.x.
    """
    import ipywidgets as widgets

    d = widgets.SelectionSlider(options=D_CHOICES, value=cfg.d, description="d")
    L = widgets.IntSlider(value=cfg.L, min=1, max=96, description="L")
    h = widgets.SelectionSlider(options=head_choices(cfg.d), value=cfg.h, description="h")
    ctx = widgets.SelectionSlider(options=CTX_CHOICES, value=cfg.ctx, description="ctx")
    T_ = widgets.SelectionSlider(options=length_choices(cfg.ctx), value=T, description="T")
    V = widgets.SelectionSlider(options=V_CHOICES, value=cfg.V, description="V")
    B = widgets.IntSlider(value=1, min=1, max=64, description="B")
    dtype = widgets.ToggleButtons(options=DTYPES, value=2, description="dtype")
    panels = widgets.HTML()
    busy = []              # set while options are being swapped, so half-updated states wait

    def refresh_choices(_change=None):
        busy.append(True)
        try:
            new_h, new_T = snap_heads(d.value, h.value), min(T_.value, ctx.value)
            h.options, h.value = head_choices(d.value), new_h
            T_.options = length_choices(ctx.value)
            T_.value = max(t for t in T_.options if t <= new_T)
        finally:
            busy.pop()
        update()

    def update(_change=None):
        if busy:
            return
        model = GPTConfig(V=V.value, ctx=ctx.value, d=d.value, L=L.value, h=h.value)
        panels.value = calculator_html(model, T_.value, B.value, dtype.value)

    for w in (d, ctx):
        w.observe(refresh_choices, names="value")
    show_lab([[d, L, h], [ctx, T_, V], [B, dtype]], [panels], update,
             watch=[L, h, T_, V, B, dtype])


def memory_figure(configs: dict[str, GPTConfig], lengths: Sequence[int] = (256, 1024),
                  B: int = 1):
    """Training memory in fp32, one panel per sequence length, side by side: for each
    config a stacked bar of weights, gradients, AdamW state and activations (GiB).

    The three parameter parts are the same in every panel; only the activations grow with T.
    Returns the matplotlib figure.
    """
    import matplotlib.pyplot as plt

    parts = ("weights", "gradients", "AdamW state", "activations")
    colors = ("#4c72b0", "#8fa9d6", "#c8d4ec", "#dd8452")
    fig, axes = plt.subplots(1, len(lengths), figsize=(3.1 * len(lengths), 3.0), sharey=True)
    axes = [axes] if len(lengths) == 1 else list(axes)
    for ax, T in zip(axes, lengths, strict=True):
        bottom = [0.0] * len(configs)
        memory = [training_memory_bytes(cfg, T, B, 4) for cfg in configs.values()]
        for part, color in zip(parts, colors, strict=True):
            height = [m[part] / 2**30 for m in memory]
            ax.bar(list(configs), height, bottom=bottom, color=color, label=part)
            bottom = [b + h for b, h in zip(bottom, height, strict=True)]
        ax.set_title(f"T = {T:,}, B = {B}", fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
    axes[0].set_ylabel("GiB (fp32)")
    axes[-1].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def kv_cache_figure(cfg: GPTConfig = GPT2_SMALL, batches: Sequence[int] = (1, 8, 64),
                    bytes_per_value: int = 2, name: str = "GPT-2 small"):
    """The KV cache against the weights, both in the same number format (fp16 by default):
    one line per batch size over T = 1 to ctx, and the weights as a dashed line, on log axes.

    Returns the matplotlib figure.
    """
    import matplotlib.pyplot as plt

    lengths = range(1, cfg.ctx + 1)
    mib = 2**20
    label = {2: "fp16", 4: "fp32"}.get(bytes_per_value, f"{bytes_per_value} bytes")
    fig, ax = plt.subplots(figsize=(5.6, 3.0))
    for B in batches:
        cache = [kv_cache_bytes(cfg, T, B, bytes_per_value) / mib for T in lengths]
        ax.plot(lengths, cache, label=f"KV cache, B = {B}")
    ax.axhline(weight_bytes(cfg, bytes_per_value) / mib, color="k", ls="--", label="weights")
    ax.set(xscale="log", yscale="log", xlabel="T (tokens per sequence)",
           ylabel=f"MiB ({label})",
           title=f"{name}: KV cache [2, L, B, T, d] vs weights [N]")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
