"""The book's worked examples: the exact random draws the syllabus prescribes.

Kept in one place so that chapters which compare against each other (chapter 3 masks the
very scores chapter 1 computed) draw the same numbers.
"""

from __future__ import annotations

import numpy as np

TOKENS = ("Ali", "makan", "nasi", "lemak")


def ali_makan(seed: int = 0, d: int = 8, d_k: int = 4
              ) -> dict[str, np.ndarray]:
    """Four tokens and random Q/K/V projections, drawn in the syllabus's order.

    Shapes: X [T, d]; W_q, W_k, W_v [d, d_k]   (T = 4, d = 8, d_k = 4)
    """
    np.random.seed(seed)
    X = np.random.randn(len(TOKENS), d)          # [T, d] stand-in token vectors
    # dividing by sqrt(d) keeps the entries of Q, K and V at about unit size
    W_q = np.random.randn(d, d_k) / np.sqrt(d)   # [d, d_k]
    W_k = np.random.randn(d, d_k) / np.sqrt(d)   # [d, d_k]
    W_v = np.random.randn(d, d_k) / np.sqrt(d)   # [d, d_k]
    return {"X": X, "W_q": W_q, "W_k": W_k, "W_v": W_v}


# Where PASSAGE starts in tinyshakespeare.txt: 3 characters into the validation split, the
# last 10% of the file (from character 1,003,854 of 1,115,394), which the shipped model
# (anatomy.weights) never trained on.
PASSAGE_OFFSET = 1_003_857

# 1,280 characters of Tiny Shakespeare (The Taming of the Shrew, act 2), exactly as the file
# has them: 20 windows of the shipped model's ctx = 64, to measure what its heads do on text
# it has not seen, with NumPy alone and no download.
PASSAGE = (
    "GREMIO:\n"
    "Good morrow, neighbour Baptista.\n"
    "\n"
    "BAPTISTA:\n"
    "Good morrow, neighbour Gremio.\n"
    "God save you, gentlemen!\n"
    "\n"
    "PETRUCHIO:\n"
    "And you, good sir! Pray, have you not a daughter\n"
    "Call'd Katharina, fair and virtuous?\n"
    "\n"
    "BAPTISTA:\n"
    "I have a daughter, sir, called Katharina.\n"
    "\n"
    "GREMIO:\n"
    "You are too blunt: go to it orderly.\n"
    "\n"
    "PETRUCHIO:\n"
    "You wrong me, Signior Gremio: give me leave.\n"
    "I am a gentleman of Verona, sir,\n"
    "That, hearing of her beauty and her wit,\n"
    "Her affability and bashful modesty,\n"
    "Her wondrous qualities and mild behavior,\n"
    "Am bold to show myself a forward guest\n"
    "Within your house, to make mine eye the witness\n"
    "Of that report which I so oft have heard.\n"
    "And, for an entrance to my entertainment,\n"
    "I do present you with a man of mine,\n"
    "Cunning in music and the mathematics,\n"
    "To instruct her fully in those sciences,\n"
    "Whereof I know she is not ignorant:\n"
    "Accept of him, or else you do me wrong:\n"
    "His name is Licio, born in Mantua.\n"
    "\n"
    "BAPTISTA:\n"
    "You're welcome, sir; and he, for your good sake.\n"
    "But for my daughter Katharina, this I know,\n"
    "She is not for your turn, the more my grief.\n"
    "\n"
    "PETRUCHIO:\n"
    "I see you do not mean to part with her,\n"
    "Or else you like not of my company.\n"
    "\n"
    "BAPTISTA:\n"
    "Mistake me not; I speak but as I find.\n"
    "Whence are you, sir? what may I call your name?\n"
    "\n"
    "PETRUCHIO:\n"
    "Petruchio is my name;"
)
