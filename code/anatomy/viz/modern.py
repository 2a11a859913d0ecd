"""The appendix's pictures: GPT-2 small turned into a Llama-style model one change at a time,
with its parameters, FLOPs per token and KV cache after each change; and the lab that lets
the reader switch the six changes on and off in any combination."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt

from ..flops import format_bytes
from ..modern import CHANGES, Step, step_costs, swiglu_width, with_changes
from ..params import GPT2_SMALL, GPTConfig
from .calculator import DTYPES, Table, html_table
from .common import figure_png, show_lab

# What each bar shows: (title, Step field, divisor, unit).
_PANELS = (("parameters", "params", 1e6, "M"),
           ("forward FLOPs per token", "flops", 1e6, "M"),
           ("KV cache, one sequence", "kv_bytes", 2**20, "MiB"))


def steps_table(costs: Sequence[Step]) -> Table:
    """One row per model: the change made, parameters (and the change from the row before),
    FLOPs per token and the KV cache, as computed by :func:`anatomy.modern.step_costs`."""
    rows, before = [], None
    for i, s in enumerate(costs):
        delta = "" if before is None else f"{s.params - before:+,}"
        rows.append((i, s.change, s.params, delta, s.flops, format_bytes(s.kv_bytes)))
        before = s.params
    return Table(("step", "change", "parameters", "difference", "FLOPs / token",
                  "KV cache"), rows, align="rlrrrr")


def draw_steps(costs: Sequence[Step], T: int, bytes_per_value: int = 2):
    """Three bar charts side by side, one bar per model in ``costs`` (top: GPT-2): the
    parameters, the forward FLOPs of one token that sees T keys, and the KV cache of one
    sequence of T tokens. A bar that differs from the one above it is orange."""
    labels = [s.change if i == 0 else f"+ {s.change}" for i, s in enumerate(costs)]
    fig, axes = plt.subplots(1, 3, figsize=(9.6, 0.42 * len(costs) + 1.3), sharey=True)
    for ax, (title, field, scale, unit) in zip(axes, _PANELS, strict=True):
        values = [getattr(s, field) for s in costs]
        colors = ["tab:blue" if i == 0 or v == values[i - 1] else "tab:orange"
                  for i, v in enumerate(values)]
        bars = ax.barh(range(len(costs)), [v / scale for v in values], color=colors)
        for bar, v in zip(bars, values, strict=True):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                    f" {v / scale:.1f}", va="center", fontsize=7)
        ax.set_xlim(0, 1.3 * max(values) / scale)
        ax.set_title(f"{title} ({unit})", fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0].set_yticks(range(len(costs)), labels)
    axes[0].invert_yaxis()
    bits = 8 * bytes_per_value
    fig.suptitle(f"one change at a time (T = {T}, {bits}-bit cache; orange: changed)",
                 fontsize=10)
    fig.tight_layout()
    return fig


def _panel(base: Step, chosen: Step) -> str:
    """The lab's table: GPT-2 against the chosen design, as HTML."""
    rows = [("parameters", base.params, chosen.params),
            ("FLOPs / token", base.flops, chosen.flops),
            ("KV cache", format_bytes(base.kv_bytes), format_bytes(chosen.kv_bytes))]
    made = ", ".join(chosen.design.changes) or "none"
    return html_table(("", "GPT-2", "chosen"), rows, align="lrr", title=f"changes: {made}")


def modern_lab(gpt: GPTConfig = GPT2_SMALL, h_kv: int = 3, d_ff: int | None = None,
               T: int = 1024):
    """An ipywidgets lab: six check boxes, one per change, a context length and a cache
    dtype. The picture compares GPT-2 with the chosen design; the table gives the numbers.

    Uses only widgets common to ipywidgets 7.7 (Colab) and 8.x; the figure goes to an Image
    widget as PNG bytes, set after ``display`` so the recorded output is stable.
    """
    import ipywidgets as widgets

    d_ff = swiglu_width(gpt.d) if d_ff is None else d_ff
    boxes = [widgets.Checkbox(value=False, description=name, indent=False)
             for name in CHANGES]
    lengths = [t for t in (128, 256, 512, 1024, 2048, 4096, 8192) if t <= gpt.ctx]
    T_ = widgets.SelectionSlider(options=lengths, value=min(T, lengths[-1]), description="T")
    dtype = widgets.ToggleButtons(options=DTYPES, value=2, description="cache")
    picture, table = widgets.Image(format="png"), widgets.HTML()

    def update(_change=None):
        chosen = [b.description for b in boxes if b.value]
        designs = [("GPT-2", with_changes(gpt, (), h_kv, d_ff)),
                   ("chosen", with_changes(gpt, chosen, h_kv, d_ff))]
        costs = step_costs(designs, T_.value, 1, dtype.value)
        picture.value = figure_png(draw_steps(costs, T_.value, dtype.value))
        table.value = _panel(*costs)

    show_lab([boxes[:3], boxes[3:], [T_, dtype]], [picture, table], update)
