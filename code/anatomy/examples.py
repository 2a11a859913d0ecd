"""The book's worked examples: the exact random draws the syllabus prescribes.

Kept in one place so that chapters which compare against each other (chapter 3 masks the
very scores chapter 1 computed) draw the same numbers.
"""

from __future__ import annotations

import numpy as np

TOKENS = ("Ali", "makan", "nasi", "lemak")


def ali_makan(seed: int = 0, d: int = 8, d_k: int = 4) -> dict[str, np.ndarray]:
    """Four tokens and random Q/K/V projections, drawn in the syllabus's order.

    Shapes: X [T, d]; W_q, W_k, W_v [d, d_k]   (T = 4, d = 8, d_k = 4)
    """
    np.random.seed(seed)
    X = np.random.randn(len(TOKENS), d)          # [T, d] stand-in token vectors
    W_q = np.random.randn(d, d_k) / np.sqrt(d)   # [d, d_k]; 1/sqrt(d) keeps Q entries ~ unit size
    W_k = np.random.randn(d, d_k) / np.sqrt(d)   # [d, d_k]
    W_v = np.random.randn(d, d_k) / np.sqrt(d)   # [d, d_k]
    return {"X": X, "W_q": W_q, "W_k": W_k, "W_v": W_v}
