"""Pre-norm against post-norm: where the gradient goes in a deep random stack (chapter 6).

The two placements of LayerNorm differ by one line per sublayer:

    pre-norm  (GPT-2):        x = x + f(LN(x))
    post-norm (the original): x = LN(x + f(x))

In pre-norm the skip path is the identity, so the gradient reaching block l from above is
passed down unchanged. In post-norm every step down the skip path goes through a LayerNorm's
Jacobian, 2L of them in series for L blocks. :func:`grad_profile` measures both, per block,
in float64 on the CPU, with backpropagation (PyTorch), which is why this module needs torch.

Two initialisations (``INITS``): "fan_in" draws every matrix with std 1/sqrt(fan-in), so each
sublayer writes about as much as it reads and the effects of the placement show at once;
"gpt2" is the whole model as :func:`anatomy.params.init_params` draws it (std 0.02, the two
writing projections 0.02 / sqrt(2L), the embeddings included), whose writes are tiny at
small widths such as d = 32 and grow with d;
"gpt2_unscaled" is the same draw with W_o and W_2 multiplied back by sqrt(2L), to show what
that one scaling does.
:func:`ratio_split` and :func:`block_gains` take a profile apart: a block's weight gradient
is the gradient arriving at its output times a local factor.

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

from .blocks import LN_EPS
from .params import GPTConfig, block_params, init_params

PLACEMENTS = ("pre", "post")
INITS = ("fan_in", "gpt2", "gpt2_unscaled")


class GradProfile(NamedTuple):
    """Gradient norms of one stack, block by block (index 0 is the block nearest the input).

    ``params[l]``: norm of the loss's gradient with respect to all of block l's weights.
    ``stream[l]``: norm of the gradient with respect to the residual stream entering block l.
    ``size[l]``: mean length of a token's stream vector entering block l (forward pass);
    ``size[L]`` is after the last block, before any final LayerNorm.
    ``out[l]``: norm of the gradient with respect to the stream *leaving* block l (what
    block l's weights receive from above; ``out[l] == stream[l + 1]`` below the top).
    ``inv_std[l]``: mean over tokens of 1 / sqrt(var + eps) of the stream entering block l,
    the factor a LayerNorm reading it divides by.
    ``by_weight[name][l]``: the part of ``params[l]`` from one weight, such as ``"b_o"``
    (``params[l]`` is the root of the sum of their squares).
    ``write_ratio[l]``: for block l's attention and MLP, the mean length of what the sublayer
    writes over the mean length of what it reads (pre-norm: its LayerNorm's output;
    post-norm: the stream itself).

    Shapes: params [L], stream [L], size [L + 1], out [L], inv_std [L], by_weight[name] [L],
            write_ratio [L, 2]
    """

    params: np.ndarray
    stream: np.ndarray
    size: np.ndarray
    out: np.ndarray | None = None
    inv_std: np.ndarray | None = None
    by_weight: dict[str, np.ndarray] | None = None
    write_ratio: np.ndarray | None = None


class RatioSplit(NamedTuple):
    """One block's weight gradient over another's, split in two: ``params == upstream *
    local``. ``upstream`` compares the gradients arriving at the two blocks' outputs,
    ``local`` what each block makes of the gradient it receives (weight gradient / arriving
    gradient)."""

    params: float
    upstream: float
    local: float


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
                 V: int = 64, seed: int = 0, skip_only: bool = False,
                 init: str = "fan_in") -> GradProfile:
    """Backpropagate one language-model loss through L random blocks; measure every block.

    ``init="fan_in"``: the input is a random unit-scale stream [B, T, d], the blocks come
    from :func:`random_stack` and the loss is the cross-entropy of random targets under a
    random head [d, V], all drawn from ``torch.Generator().manual_seed(seed)``.
    ``init="gpt2"``: the model is ``init_params`` of a GPT with these sizes (ctx = T), drawn
    from ``np.random.default_rng(seed)``, then random ids and targets from the same
    generator; the input is their token + position embeddings and the head is the tied
    token table. Pre-norm ends with a final LayerNorm before the head, as GPT-2 does;
    post-norm's last sublayer already ends in one. ``init="gpt2_unscaled"``: the same model
    with W_o and W_2 multiplied by sqrt(2L), so they too have std 0.02. ``skip_only`` lets
    the gradient travel only along the skip path (see :func:`prenorm_block`). Float64 on the
    CPU, one thread.

    Shapes: -> params [L], stream [L], size [L + 1], out [L], inv_std [L], by_weight[name] [L],
               write_ratio [L, 2]
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement: expected one of {PLACEMENTS}, got {placement!r}")
    if init not in INITS:
        raise ValueError(f"init: expected one of {INITS}, got {init!r}")
    threads = torch.get_num_threads()
    # Tiny tensors: extra threads only add overhead (a lot of it on a busy machine), and one
    # thread fixes the order of every sum. Restored on the way out.
    torch.set_num_threads(1)
    try:
        if init == "fan_in":
            parts = _fan_in_setup(L, d, h, T, B, V, seed)
        else:
            parts = _gpt2_setup(L, d, h, T, B, V, seed, scaled=init == "gpt2")
        return _measure(placement, h, skip_only, *parts)
    finally:
        torch.set_num_threads(threads)


def _fan_in_setup(L: int, d: int, h: int, T: int, B: int, V: int, seed: int):
    """Blocks, input [B, T], head [d, V] and targets [B, T] of the "fan_in" regime."""
    gen = torch.Generator().manual_seed(seed)
    blocks = random_stack(L, d, 4 * d, gen)
    x = torch.randn(B, T, d, generator=gen, dtype=torch.float64)
    head = torch.randn(d, V, generator=gen, dtype=torch.float64) / math.sqrt(d)
    targets = torch.randint(V, (B, T), generator=gen)
    return blocks, x, head, targets


def _gpt2_setup(L: int, d: int, h: int, T: int, B: int, V: int, seed: int,
                scaled: bool = True):
    """The same four things for a GPT initialised by ``init_params`` (GPT-2's scheme).

    ``scaled=False`` undoes the 1/sqrt(2L) on the writing projections W_o and W_2 (the same
    draw, multiplied by sqrt(2L)); everything else is unchanged.
    """
    rng = np.random.default_rng(seed)
    params = init_params(GPTConfig(V=V, ctx=T, d=d, L=L, h=h), rng)
    if not scaled:
        for i in range(L):
            for name in ("W_o", "W_2"):
                params[f"blocks.{i}.{name}"] = params[f"blocks.{i}.{name}"] * math.sqrt(2 * L)
    blocks = [{k: torch.from_numpy(v) for k, v in block_params(params, i).items()}
              for i in range(L)]
    ids = rng.integers(V, size=(B, T))
    targets = torch.from_numpy(rng.integers(V, size=(B, T)))
    x = torch.from_numpy(params["tok_emb"][ids] + params["pos_emb"][:T])   # [B, T, d]
    head = torch.from_numpy(params["tok_emb"].T.copy())        # tied: [V, d] -> [d, V]
    return blocks, x, head, targets


def _measure(placement: str, h: int, skip_only: bool, blocks: list, x: torch.Tensor,
             head: torch.Tensor, targets: torch.Tensor) -> GradProfile:
    """The body of :func:`grad_profile`.

    Shapes: x [B, T, d], head [d, V], targets [B, T] -> params [L], stream [L], size [L + 1],
            out [L], inv_std [L]
    """
    B, T, d = x.shape
    V, L = head.shape[1], len(blocks)
    for p in blocks:
        for w in p.values():
            w.requires_grad_(True)
    step = prenorm_block if placement == "pre" else postnorm_block
    inputs = []
    x.requires_grad_(True)
    for p in blocks:
        inputs.append(x)
        x = step(x, p, h, skip_only=skip_only)             # [B, T, d] -> [B, T, d]
    top = x
    size = [float(v.detach().norm(dim=-1).mean()) for v in (*inputs, x)]   # [L + 1]
    inv_std = [float((v.detach().var(dim=-1, unbiased=False) + LN_EPS).rsqrt().mean())
               for v in inputs]                            # [L]
    if placement == "pre":
        x = F.layer_norm(x, (d,), eps=LN_EPS)              # the final LayerNorm
    logits = x @ head                                      # [B, T, d] @ [d, V] -> [B, T, V]
    loss = F.cross_entropy(logits.reshape(B * T, V), targets.reshape(B * T))
    weights = [w for p in blocks for w in p.values()]
    grads = torch.autograd.grad(loss, [*inputs, top, *weights])
    stream = [float(g.norm()) for g in grads[:L + 1]]      # entering blocks 0..L-1, then top
    per_weight = grads[L + 1:]
    n = len(blocks[0])
    params = [math.sqrt(sum(float(g.pow(2).sum()) for g in per_weight[i * n:(i + 1) * n]))
              for i in range(L)]
    by_weight = {name: np.array([float(per_weight[i * n + j].norm()) for i in range(L)])
                 for j, name in enumerate(blocks[0])}                      # name -> [L]
    with torch.no_grad():
        ratio = [_write_ratio(placement, v.detach(), p, h)
                 for v, p in zip(inputs, blocks, strict=True)]
    return GradProfile(params=np.array(params), stream=np.array(stream[:L]),
                       size=np.array(size), out=np.array(stream[1:]),
                       inv_std=np.array(inv_std), by_weight=by_weight,
                       write_ratio=np.array(ratio))


def _write_ratio(placement: str, x: torch.Tensor, p: Mapping[str, torch.Tensor], h: int
                 ) -> tuple[float, float]:
    """Mean |write| / mean |read| of one block's attention and MLP, on the same forward pass.

    Shapes: x [B, T, d] -> (attention's ratio, the MLP's ratio)
    """
    def size(v: torch.Tensor) -> float:
        return float(v.norm(dim=-1).mean())                # mean over [B, T]

    if placement == "pre":
        read = _ln(x, p["ln1_g"], p["ln1_b"])
        a = attention(read, p, h)
        read2 = _ln(x + a, p["ln2_g"], p["ln2_b"])
    else:
        read, a = x, attention(x, p, h)
        read2 = _ln(x + a, p["ln1_g"], p["ln1_b"])
    return size(a) / size(read), size(mlp(read2, p)) / size(read2)


def block_gains(profile: GradProfile) -> np.ndarray:
    """How much the gradient grows as it crosses block l on its way down: |gradient entering
    block l| / |gradient leaving it|. Exactly 1 for an identity (the skip path alone, or a
    block that writes nothing); above 1 where the sublayers send extra gradient down.

    Shapes: profile with L blocks -> [L]
    """
    return profile.stream / profile.out


def ratio_split(profile: GradProfile, lo: int = 0, hi: int = -1) -> RatioSplit:
    """Block ``lo``'s weight gradient over block ``hi``'s, as upstream * local.

    ``upstream = out[lo] / out[hi]`` is also the product of :func:`block_gains` of the blocks
    from lo + 1 to hi: whatever the gradient gains on its way down from hi to lo.

    Shapes: profile with L blocks, lo and hi in [-L, L) -> three numbers
    """
    L = len(profile.params)
    for name, i in (("lo", lo), ("hi", hi)):
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not -L <= i < L:
            raise ValueError(f"{name}: expected a block index in [-L, L) = [{-L}, {L}), got "
                             f"{i!r}")
    local = profile.params / profile.out                   # [L]
    return RatioSplit(params=float(profile.params[lo] / profile.params[hi]),
                      upstream=float(profile.out[lo] / profile.out[hi]),
                      local=float(local[lo] / local[hi]))


def profile_table(full: Mapping[str, GradProfile], skip: Mapping[str, GradProfile],
                  title: str, blocks: tuple[int, int, int] = (0, 24, 47)) -> list[str]:
    """Pre- against post-norm at three blocks, one line per placement and measurement (at
    most 72 columns): the full weight gradient, the stream's gradient along the skip path
    alone, and the stream's mean length; the last column is first block / last block.
    ``full`` and ``skip`` map "pre" and "post" to profiles (``skip_only`` False and True)."""
    first, mid, last = blocks
    lines = [f"{title:<36}" + "".join(f"{'block ' + str(i):>9}" for i in blocks)
             + f"{f'{first} / {last}':>9}"]
    rows = (("full: |grad W|", full, "params"), ("skip only: |grad x|", skip, "stream"),
            ("forward: mean |x| in", full, "size"))
    for label, profiles, field in rows:
        for placement in PLACEMENTS:
            v = getattr(profiles[placement], field)            # [L] (size: [L + 1])
            cols = "".join(f"{v[i]:>9.2g}" for i in blocks)
            lines.append(f"{placement + '-norm':<10}{label:<26}{cols}"
                         f"{v[first] / v[last]:>9.2g}")
    return lines


def split_table(profile: GradProfile, blocks: tuple[int, ...] = (0, 1, 2, 4, 8, 16, 24, 47)
                ) -> list[str]:
    """The split of each listed block's weight gradient, one line per block (64 columns):
    the stream's length entering the block, the 1/std its LayerNorm divides by, the block's
    gain, the gradient arriving at its output, the local factor, the weight gradient."""
    gains = block_gains(profile)
    lines = [f"{'block':>5}{'|x| in':>9}{'1/std':>8}{'gain':>8}{'|g out|':>9}"
             f"{'local':>8}{'|grad W|':>10}"]
    for i in blocks:
        lines.append(f"{i:>5}{profile.size[i]:>9.1f}{profile.inv_std[i]:>8.3f}"
                     f"{gains[i]:>8.3f}{profile.out[i]:>9.4f}"
                     f"{profile.params[i] / profile.out[i]:>8.1f}{profile.params[i]:>10.3f}")
    return lines
