"""Transformer Anatomy: the code behind the book.

One module per concept, in the order the chapters meet them:

- ``attention``  softmax and scaled dot-product attention (chapter 1)
- ``masks``      causal and padding masks (chapter 3)
- ``heads``      splitting, merging and multi-head attention (chapter 4)
- ``positions``  learned, sinusoidal and rotary position encodings (chapter 5)
- ``blocks``     LayerNorm, GELU, the MLP and the pre-norm block (chapter 6)
- ``params``     the config, the shape table and parameter counts (chapter 7)
- ``gpt_numpy``  the whole GPT forward pass in NumPy (chapter 8)
- ``gpt_torch``, ``data``, ``train``  the PyTorch model and its training (chapter 9)
- ``exercises``  the checks behind every exercise cell

Importing the package does no work: no prints, downloads, seeding or plotting.
"""

__version__ = "0.1.0"
