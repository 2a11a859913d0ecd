"""Pre-norm against post-norm: where the gradient goes in a deep random stack (chapter 6).

The two placements of LayerNorm differ by one line per sublayer:

    pre-norm  (GPT-2):        x = x + f(LN(x))
    post-norm (the original): x = LN(x + f(x))

In pre-norm the skip path is the identity, so the gradient reaching block l from above is
passed down unchanged. In post-norm every step down the skip path goes through a LayerNorm's
Jacobian, 2L of them in series for L blocks. :func:`grad_profile` measures both, per block,
in float64 on the CPU, with backpropagation (PyTorch), which is why this module needs torch.

The blocks are the book's (causal attention with a fused QKV projection, a GELU MLP) and take
their weights under the shape-table names, as torch tensors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

PLACEMENTS = ("pre", "post")
LN_EPS = 1e-5


class GradProfile(NamedTuple):
    """Gradient norms of one stack, block by block (index 0 is the block nearest the input).

    ``params[l]``: norm of the loss's gradient with respect to all of block l's weights.
    ``stream[l]``: norm of the gradient with respect to the residual stream entering block l.
    ``size[l]``: mean length of a token's stream vector entering block l (forward pass);
    ``size[L]`` is after the last block, before any final LayerNorm.

    Shapes: params [L], stream [L], size [L + 1]
    """

    params: np.ndarray
    stream: np.ndarray
    size: np.ndarray


def _ln(x: torch.Tensor, g: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), g, b, LN_EPS)       # [..., T, d]


def attention(x: torch.Tensor, p: Mapping[str, torch.Tensor], h: int) -> torch.Tensor:
    """Causal multi-head self-attention, as :func:`anatomy.heads.multi_head_attention`.

    Shapes: x [B, T, d] -> [B, T, d]
    """
    B, T, d = x.shape
    q, k, v = (x @ p["W_qkv"] + p["b_qkv"]).split(d, dim=-1)   # [B, T, 3d] -> 3 x [B, T, d]
    q, k, v = (t.view(B, T, h, d // h).transpose(1, 2)
               for t in (q, k, v))                              # each -> [B, h, T, d_head]
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # [B, h, T, d_head]
    out = out.transpose(1, 2).reshape(B, T, d)                  # -> [B, T, d]
    return out @ p["W_o"] + p["b_o"]                            # [B, T, d] @ [d, d] -> [B, T, d]


def mlp(x: torch.Tensor, p: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The per-token feed-forward sublayer with GPT-2's tanh GELU.

    Shapes: x [B, T, d] -> [B, T, d]
    """
    hidden = F.gelu(x @ p["W_1"] + p["b_1"], approximate="tanh")   # -> [B, T, d_ff]
    return hidden @ p["W_2"] + p["b_2"]                             # -> [B, T, d]


def prenorm_block(x: torch.Tensor, p: Mapping[str, torch.Tensor], h: int,
                  skip_only: bool = False) -> torch.Tensor:
    """x + Attn(LN1(x)), then + MLP(LN2(x)). ``skip_only`` detaches what each sublayer reads,
    so the forward pass is unchanged but the gradient can reach x only along the skip path.

    Shapes: x [B, T, d] -> [B, T, d]
    """
    read = x.detach() if skip_only else x
    x = x + attention(_ln(read, p["ln1_g"], p["ln1_b"]), p, h)
    read = x.detach() if skip_only else x
    return x + mlp(_ln(read, p["ln2_g"], p["ln2_b"]), p)


def postnorm_block(x: torch.Tensor, p: Mapping[str, torch.Tensor], h: int,
                   skip_only: bool = False) -> torch.Tensor:
    """LN1(x + Attn(x)), then LN2(x + MLP(x)): the original Transformer's placement.

    ``skip_only`` as in :func:`prenorm_block`.

    Shapes: x [B, T, d] -> [B, T, d]
    """
    read = x.detach() if skip_only else x
    x = _ln(x + attention(read, p, h), p["ln1_g"], p["ln1_b"])
    read = x.detach() if skip_only else x
    return _ln(x + mlp(read, p), p["ln2_g"], p["ln2_b"])


def random_stack(L: int, d: int, d_ff: int, generator: torch.Generator
                 ) -> list[dict[str, torch.Tensor]]:
    """L blocks of float64 weights: matrices ~ N(0, 1/fan_in), biases 0, LayerNorm g = 1, b = 0.

    With std 1/sqrt(fan_in) each sublayer writes about as much as it reads, so the two
    placements are compared with writes of a size that matters.
    """
    shapes = {"W_qkv": (d, 3 * d), "W_o": (d, d), "W_1": (d, d_ff), "W_2": (d_ff, d)}
    blocks = []
    for _ in range(L):
        p = {name: torch.randn(shape, generator=generator, dtype=torch.float64)
             / math.sqrt(shape[0]) for name, shape in shapes.items()}
        for name, n in (("b_qkv", 3 * d), ("b_o", d), ("b_1", d_ff), ("b_2", d),
                        ("ln1_b", d), ("ln2_b", d)):
            p[name] = torch.zeros(n, dtype=torch.float64)
        for name in ("ln1_g", "ln2_g"):
            p[name] = torch.ones(d, dtype=torch.float64)
        blocks.append(p)
    return blocks


def grad_profile(placement: str, L: int = 48, d: int = 32, h: int = 4, T: int = 8, B: int = 2,
                 V: int = 64, seed: int = 0, skip_only: bool = False) -> GradProfile:
    """Backpropagate one language-model loss through L random blocks; measure every block.

    The input is a random unit-scale stream [B, T, d]; the loss is the cross-entropy of random
    targets under a random head [d, V]. Pre-norm ends with a final LayerNorm before the head,
    as GPT-2 does; post-norm's last sublayer already ends in one. ``skip_only`` lets the
    gradient travel only along the skip path (see :func:`prenorm_block`). Everything is
    drawn from ``torch.Generator().manual_seed(seed)``, in float64 on the CPU, on one thread.

    Shapes: -> params [L], stream [L], size [L + 1]
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement: expected one of {PLACEMENTS}, got {placement!r}")
    threads = torch.get_num_threads()
    # Tiny tensors: extra threads only add overhead (a lot of it on a busy machine), and one
    # thread fixes the order of every sum. Restored on the way out.
    torch.set_num_threads(1)
    try:
        return _measure(placement, L, d, h, T, B, V, seed, skip_only)
    finally:
        torch.set_num_threads(threads)


def _measure(placement: str, L: int, d: int, h: int, T: int, B: int, V: int, seed: int,
             skip_only: bool) -> GradProfile:
    """The body of :func:`grad_profile`. Shapes: -> params [L], stream [L], size [L + 1]"""
    gen = torch.Generator().manual_seed(seed)
    blocks = random_stack(L, d, 4 * d, gen)
    x = torch.randn(B, T, d, generator=gen, dtype=torch.float64)
    head = torch.randn(d, V, generator=gen, dtype=torch.float64) / math.sqrt(d)
    targets = torch.randint(V, (B, T), generator=gen)
    for p in blocks:
        for w in p.values():
            w.requires_grad_(True)
    step = prenorm_block if placement == "pre" else postnorm_block
    inputs = []
    x.requires_grad_(True)
    for p in blocks:
        inputs.append(x)
        x = step(x, p, h, skip_only=skip_only)             # [B, T, d] -> [B, T, d]
    size = [float(v.detach().norm(dim=-1).mean()) for v in (*inputs, x)]   # [L + 1]
    if placement == "pre":
        x = F.layer_norm(x, (d,), eps=LN_EPS)              # the final LayerNorm
    logits = x @ head                                      # [B, T, d] @ [d, V] -> [B, T, V]
    loss = F.cross_entropy(logits.reshape(B * T, V), targets.reshape(B * T))
    weights = [w for p in blocks for w in p.values()]
    grads = torch.autograd.grad(loss, inputs + weights)
    stream, per_weight = grads[:L], grads[L:]
    n = len(blocks[0])
    params = [math.sqrt(sum(float(g.pow(2).sum()) for g in per_weight[i * n:(i + 1) * n]))
              for i in range(L)]
    return GradProfile(params=np.array(params), stream=np.array([float(g.norm()) for g in stream]),
                       size=np.array(size))
