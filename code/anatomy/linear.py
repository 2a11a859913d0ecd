"""The learned projection every layer is made of: x @ W (+ b), weights stored [in, out].

Heads (chapter 4) and blocks (chapter 6) both project with it, so it sits below both.
"""

from __future__ import annotations

import numpy as np


def linear(x: np.ndarray, W: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """A learned projection, x @ W (+ b); weights are stored [in, out]. Checked by callers.

    Shapes: x [..., n, d_in], W [d_in, d_out], b [d_out] -> [..., n, d_out]
    """
    y = x @ W                                   # [..., n, d_in] @ [d_in, d_out] -> [..., n, d_out]
    return y if b is None else y + b
