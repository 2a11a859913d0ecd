"""Transformer Anatomy: the code behind the book.

One module per concept, in the order the chapters meet them:

- ``attention``       softmax and scaled dot-product attention (chapter 1)
- ``scaling``         why sqrt(d_k): score spread, temperature, the softmax Jacobian (chapter 2)
- ``masks``           causal and padding masks (chapter 3)
- ``linear``          the projection x @ W + b that heads and blocks share (chapters 4-6)
- ``heads``           splitting, merging and multi-head attention (chapter 4)
- ``positions``       learned, sinusoidal, rotary and ALiBi positions (chapter 5)
- ``blocks``          LayerNorm, GELU, the MLP and the pre-norm block (chapter 6)
- ``norm_placement``  pre-norm vs post-norm gradients, in PyTorch (chapter 6)
- ``params``          the config, the shape table and parameter counts (chapter 7)
- ``flops``           FLOPs, training compute and KV-cache memory (chapter 7)
- ``memory``          what autograd keeps for the backward pass, measured (chapter 7)
- ``gpt_numpy``       the whole GPT in NumPy: forward, loss, generation, KV cache (chapter 8)
- ``gpt_torch``       the same GPT as PyTorch modules, with the same parameter names (8-9)
- ``text``            Tiny Shakespeare, verified, its split and the character tokenizer (8-9)
- ``tokens``          byte-level BPE from scratch, and GPT-2's tokenizer offline (tokens chapter)
- ``data``            PyTorch batches of random windows (chapter 9; re-exports ``text``)
- ``sampling``        temperature and top-k sampling from the PyTorch model (chapter 9)
- ``checkpoint``      atomic, verified checkpoints that resume exactly (chapter 9)
- ``train``           the training loop, presets, devices and data parallelism (chapter 9)
- ``modern``          a Llama-style model: RMSNorm, SwiGLU, RoPE, GQA, HF parity (appendix)
- ``weights``         the trained character model that ships with the package (chapters 1-8)
- ``interp``          reading a trained model: head roles, logit attribution (chapters 1-6)
- ``hf``              GPT-2 from Hugging Face through the NumPy model, when online (chapter 8)
- ``examples``        the worked examples' exact random draws and a validation passage
- ``exercises``       the checks behind every exercise cell
- ``viz``             figures and interactive labs (matplotlib and ipywidgets live only here)
- ``glue``            numbers from code into the book's prose

Importing the package does no work: no prints, downloads, seeding or plotting.
"""

__version__ = "0.1.0"
