"""Pieces every lab shares."""

from __future__ import annotations

import io

import matplotlib.pyplot as plt


def figure_png(fig) -> bytes:
    """Render a figure to PNG bytes and close it.

    Labs show figures in an ``ipywidgets.Image`` rather than printing them into an ``Output``
    widget: the cell's recorded output is then only the widget itself, identical under
    Jupyter, Colab (ipywidgets 7.7) and nbval, and the picture updates through the widget's
    state. Set the Image's value *after* ``display`` so the recorded repr stays small.
    """
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return buffer.getvalue()


def show_lab(rows, outputs, update, watch=None) -> None:
    """Lay out and start a lab: rows of controls above its outputs, redrawn on every change.

    ``rows`` is a list whose items are a control or a list of controls shown side by side;
    ``watch`` (default: every control in ``rows``) are the controls whose changes call
    ``update``. The first drawing happens after ``display``, so the cell's recorded output
    is only the widget tree and stays small and stable (see :func:`figure_png`).
    """
    import ipywidgets as widgets
    from IPython.display import display

    lines = [widgets.HBox(list(row)) if isinstance(row, (list, tuple)) else row for row in rows]
    if watch is None:
        watch = [c for row in rows for c in (row if isinstance(row, (list, tuple)) else [row])]
    for control in watch:
        control.observe(update, names="value")
    display(widgets.VBox([*lines, *outputs]))
    update()
