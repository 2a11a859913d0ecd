"""LayerNorm, GELU, the MLP and the pre-norm transformer block (chapter 6).

The block reads from the residual stream through a LayerNorm and writes back by addition,
twice:

    x = x + Attn(LN1(x))
    x = x + MLP(LN2(x))

Shapes in equal shapes out ([..., T, d] -> [..., T, d]), which is why blocks stack.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from ._validate import check_keys, check_projection, check_shape, validated
from .heads import cached_multi_head_attention, multi_head_attention
from .linear import linear
from .params import LINEAR_BIAS_NAMES, MLP_NAMES

# The weights one block reads, by their shape-table names (see anatomy.params).
BLOCK_WEIGHTS = ("ln1_g", "ln1_b", "W_qkv", "W_o", "ln2_g", "ln2_b", "W_1", "W_2")
# An attention-only block's (GPTConfig.attn_only): no MLP and no LayerNorm before it.
ATTN_WEIGHTS = ("ln1_g", "ln1_b", "W_qkv", "W_o")
# Biases may be left out (or None) for a bias-free block, as in many current models.
BLOCK_BIASES = LINEAR_BIAS_NAMES
# GPT-2's LayerNorm epsilon: layer_norm's default, and the PyTorch models' (gpt_torch).
LN_EPS = 1e-5

_GELU_C = math.sqrt(2.0 / math.pi)


@validated
def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float = LN_EPS) -> np.ndarray:
    """Normalise each token's d features to mean 0, variance 1, then scale by g and shift by b.

    The statistics are over the last axis only, per token (Ba et al., 2016): normalising
    over the sequence axis would mix information across positions. The variance is the
    biased one (divide by d), and eps sits inside the square root, as in PyTorch and GPT-2.

    Shapes: x [..., d], g [d], b [d] -> [..., d]
    """
    mean = x.mean(axis=-1, keepdims=True)              # [..., d] -> [..., 1]
    var = x.var(axis=-1, keepdims=True)                # [..., d] -> [..., 1], biased (ddof=0)
    return (x - mean) / np.sqrt(var + eps) * g + b     # [..., d]


@validated
def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, in the tanh approximation GPT-2 uses.

    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Smooth, and slightly negative for
    negative x (its minimum is about -0.17 near x = -0.75), unlike ReLU. The cube is written
    x * x * x: NumPy's float power is far slower than two multiplications.

    Shapes: x [...] -> [...]
    """
    return 0.5 * x * (1.0 + np.tanh(_GELU_C * (x + 0.044715 * x * x * x)))


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0), elementwise.

    Shapes: x [...] -> [...]
    """
    return np.maximum(x, 0)


def mlp(x: np.ndarray, W_1: np.ndarray, b_1: np.ndarray | None, W_2: np.ndarray,
        b_2: np.ndarray | None, act: Callable[[np.ndarray], np.ndarray] = gelu) -> np.ndarray:
    """The feed-forward sublayer: widen to d_ff, apply the nonlinearity, project back to d.

    It works on each token on its own; no information moves between positions here.
    Biases may be None.

    Shapes: x [..., T, d], W_1 [d, d_ff], b_1 [d_ff], W_2 [d_ff, d], b_2 [d] -> [..., T, d]
    """
    x = np.asarray(x)
    d = check_shape(x, "x", "[..., d]")["d"]
    d_ff = check_projection(W_1, b_1, ("W_1", "b_1"), "[d, d_ff]", d=d)["d_ff"]
    check_projection(W_2, b_2, ("W_2", "b_2"), "[d_ff, d]", d=d, d_ff=d_ff)
    hidden = act(linear(x, W_1, b_1))        # [..., T, d] @ [d, d_ff] -> [..., T, d_ff]
    return linear(hidden, W_2, b_2)          # [..., T, d_ff] @ [d_ff, d] -> [..., T, d]


class BlockWrites(NamedTuple):
    """What one block adds to the residual stream, sublayer by sublayer.

    ``kv`` is the attention's key/value cache after this call (see ``past``).

    Shapes: attn [..., T, d], mlp [..., T, d], weights [..., h, T, T_k],
            kv (K, V) each [..., h, T_k, d_head]   (T_k = T, or T_past + T with a cache)
    """

    attn: np.ndarray
    mlp: np.ndarray
    weights: np.ndarray
    kv: tuple[np.ndarray, np.ndarray]


def block_writes(x: np.ndarray, p: Mapping[str, np.ndarray], h: int, causal: bool = True,
                 mask: np.ndarray | None = None,
                 act: Callable[[np.ndarray], np.ndarray] = gelu,
                 past: tuple[np.ndarray, np.ndarray] | None = None) -> BlockWrites:
    """Run one pre-norm block and return what each sublayer writes, not the new stream.

    ``block(x) == x + writes.attn + writes.mlp``. Summing the writes of every block onto the
    embedding gives the final residual stream (Elhage et al., 2021): the decomposition of
    chapter 6.

    ``p`` holds the block's weights under their short names: ln1_g, ln1_b, W_qkv, b_qkv, W_o,
    b_o, ln2_g, ln2_b, W_1, b_1, W_2, b_2 (the biases may be missing or None). A block with
    none of the MLP's weights (ln2_*, W_1, W_2, ...: ``GPTConfig.attn_only``) is attention
    alone, and its MLP write is zero. ``past`` is
    this block's key/value cache from earlier positions, if any
    (:func:`anatomy.heads.cached_multi_head_attention`).

    Shapes: x [..., T, d] -> attn [..., T, d], mlp [..., T, d], weights [..., h, T, T_k],
            kv (K, V) each [..., h, T_k, d_head]
    """
    attn_only = not any(name in p for name in MLP_NAMES)
    if attn_only:
        check_keys(p, "p", ATTN_WEIGHTS, ("b_qkv", "b_o"))
    else:
        check_keys(p, "p", BLOCK_WEIGHTS, BLOCK_BIASES)
    x = np.asarray(x)
    attn, weights, kv = cached_multi_head_attention(
        layer_norm(x, p["ln1_g"], p["ln1_b"]), p["W_qkv"], p["W_o"], h, past,
        b_qkv=p.get("b_qkv"), b_o=p.get("b_o"), causal=causal, mask=mask)   # [..., T, d]
    if attn_only:                                          # no MLP: it writes nothing
        return BlockWrites(attn=attn, mlp=np.zeros_like(attn), weights=weights, kv=kv)
    x = x + attn                                           # first write to the stream
    out = mlp(layer_norm(x, p["ln2_g"], p["ln2_b"]), p["W_1"], p.get("b_1"), p["W_2"],
              p.get("b_2"), act=act)                       # [..., T, d]
    return BlockWrites(attn=attn, mlp=out, weights=weights, kv=kv)


def _block_keys(args: dict, sizes: dict) -> None:
    """The ``where=`` check of :func:`block`: the weights under their shape-table names."""
    check_keys(args["p"], "p", BLOCK_WEIGHTS, BLOCK_BIASES)


@validated(where=_block_keys)
def block(x: np.ndarray, p: Mapping[str, np.ndarray], h: int, causal: bool = True,
          mask: np.ndarray | None = None,
          act: Callable[[np.ndarray], np.ndarray] = gelu) -> np.ndarray:
    """One pre-norm transformer block: x + Attn(LN1(x)), then + MLP(LN2(x)).

    Each sublayer reads the stream through its own LayerNorm and adds what it computes back
    onto it, so with every weight zero the block returns its input unchanged: a block learns
    a change to the stream, not a replacement. The MLP reads the stream *after* attention's
    write. ``p`` holds the weights as in :func:`block_writes`; ``block(x, p, h)`` is exactly
    ``x + writes.attn + writes.mlp``.

    Shapes: x [..., T, d] -> [..., T, d]
    """
    attn, _ = multi_head_attention(
        layer_norm(x, p["ln1_g"], p["ln1_b"]), p["W_qkv"], p["W_o"], h,
        b_qkv=p.get("b_qkv"), b_o=p.get("b_o"), causal=causal, mask=mask)   # [..., T, d]
    x = x + attn                                      # attention's write
    ffn = mlp(layer_norm(x, p["ln2_g"], p["ln2_b"]), p["W_1"], p.get("b_1"), p["W_2"],
              p.get("b_2"), act=act)                  # [..., T, d]
    return x + ffn                                    # the MLP's write


@validated
def block_stack(x: np.ndarray, blocks: Sequence[Mapping[str, np.ndarray]], h: int,
                causal: bool = True, act: Callable[[np.ndarray], np.ndarray] = gelu
                ) -> np.ndarray:
    """Run pre-norm blocks one after another; each block's output is the next one's input.

    A block already returns the whole new stream (its input plus its writes), so the stack
    just passes it on. No final LayerNorm: this is the stream as the last block leaves it.

    Shapes: x [..., T, d], blocks: L dicts of block weights -> [..., T, d]
    """
    for p in blocks:
        x = block(x, p, h, causal=causal, act=act)     # [..., T, d] -> [..., T, d]
    return x


def residual_pieces(x: np.ndarray, blocks: Sequence[Mapping[str, np.ndarray]], h: int,
                    causal: bool = True, act: Callable[[np.ndarray], np.ndarray] = gelu
                    ) -> dict[str, np.ndarray]:
    """Everything that is added into the residual stream by a stack of blocks, in order.

    Keys: "embed" (the input x itself), then "0.attn", "0.mlp", "1.attn", ... (what each
    sublayer of block i writes). Their sum, taken in this order, is exactly
    :func:`block_stack`'s output: the final stream is the embedding plus every write
    (Elhage et al., 2021).

    Shapes: x [..., T, d], blocks: L dicts of block weights -> each piece [..., T, d]
    """
    x = np.asarray(x)
    pieces = {"embed": x}
    for i, p in enumerate(blocks):
        writes = block_writes(x, p, h, causal=causal, act=act)
        pieces[f"{i}.attn"], pieces[f"{i}.mlp"] = writes.attn, writes.mlp
        x = x + writes.attn + writes.mlp               # [..., T, d], same sums as block()
    return pieces


def sublayer_reads(pieces: Mapping[str, np.ndarray], blocks: Sequence[Mapping[str, np.ndarray]]
                   ) -> dict[str, np.ndarray]:
    """What each sublayer reads: its LayerNorm's output, from :func:`residual_pieces`' pieces.

    Keys "0.attn", "0.mlp", "1.attn", ...: LN1 of the stream entering block i, and LN2 of
    that stream plus the attention's write (an attention-only block has no "i.mlp"). Put
    beside the pieces, this compares each write with what its sublayer read (chapter 6).

    Shapes: pieces: each [..., T, d], blocks: L dicts of block weights -> each read [..., T, d]
    """
    x = np.asarray(pieces["embed"])
    reads = {}
    for i, p in enumerate(blocks):
        reads[f"{i}.attn"] = layer_norm(x, p["ln1_g"], p["ln1_b"])
        x = x + pieces[f"{i}.attn"]                    # [..., T, d]
        if "ln2_g" in p:
            reads[f"{i}.mlp"] = layer_norm(x, p["ln2_g"], p["ln2_b"])
            x = x + pieces[f"{i}.mlp"]
    return reads
