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
