"""Put a computed value into the book's prose, so text and code cannot drift apart.

The book is built with myst-nb, whose ``glue`` stores a value in the cell's output for
``{glue:text}`name``` roles in the prose to render. Colab and plain Jupyter have no myst-nb
and render no roles, so there the call quietly does nothing.
"""

from __future__ import annotations


def glue(name: str, value, display: bool = False) -> None:
    """Record ``value`` under ``name`` for the rendered book (a no-op without myst-nb)."""
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return
    myst_glue(name, value, display=display)
