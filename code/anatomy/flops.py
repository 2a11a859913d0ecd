"""Counting work and memory (chapter 7): FLOPs per token, training compute, the KV cache,
and the shape of every tensor one forward pass makes.

Conventions, kept everywhere in the book:

- A matrix product [rows, in] @ [in, out] costs ``2 * rows * in * out`` FLOPs: one multiply
  and one add for every weight, for every row.
- Forward FLOPs per token ~ 2N (each weight is used once per token) plus attention's own
  work, which has no weights: per layer, scoring a query against n keys costs 2 n d (h heads
  of 2 n d_head each) and mixing n value rows costs another 2 n d, so 4 L n d in all. n is
  the number of keys the query sees: the context so far (t + 1 for the token at position t)
  when generating with a cache, or T in a dense masked pass, which computes the whole
  T x T table and then throws the upper half away.
- The backward pass costs about twice the forward, so training ~ 6N per token and a run over
  D tokens costs C ~ 6 N D.
- The KV cache keeps one key and one value vector of width d per token per layer:
  2 L T d values per sequence. A cached decoding step reads all of it and every weight to
  do about one FLOP per byte, so on an accelerator, for weights far larger than its caches
  and kernels that cost little per call, decoding is bound by memory bandwidth, not FLOPs.
- Training with AdamW keeps the weights, one gradient and two moments per weight (16N bytes
  in fp32, whatever T is) plus the activations, which grow with B and T.

Everything here is arithmetic on the config: nothing is allocated or run.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ._validate import (
    check_positive_int,
    check_positive_number,
    check_type,
    resolve,
    validated,
)
from .params import GPTConfig, count_params


def _check_cfg(cfg: object) -> GPTConfig:
    return check_type(cfg, "cfg", GPTConfig, "anatomy.params.GPT2_SMALL")


def _check_len(T: object, cfg: GPTConfig, name: str = "T") -> int:
    T = check_positive_int(T, name)
    if T > cfg.ctx:
        raise ValueError(f"{name}: {name}={T} exceeds ctx={cfg.ctx} (the position table has "
                         f"ctx rows)")
    return T


def _sized(args: dict, sizes: dict) -> None:
    """The ``where=`` check of the counting functions: cfg a GPTConfig, 1 <= T (or n) <= ctx,
    and B and bytes_per_value positive integers, for whichever of them the function takes."""
    cfg = _check_cfg(args["cfg"])
    for name in ("T", "n"):
        if name in args:
            _check_len(args[name], cfg, name)
    for name in ("B", "bytes_per_value"):
        if name in args:
            check_positive_int(args[name], name)


def matmul_flops(rows: int, n_in: int, n_out: int) -> int:
    """FLOPs of [rows, n_in] @ [n_in, n_out]: one multiply and one add per weight per row."""
    for value, name in ((rows, "rows"), (n_in, "n_in"), (n_out, "n_out")):
        check_positive_int(value, name)
    return 2 * rows * n_in * n_out


def forward_flops_per_token(cfg: GPTConfig, n: int) -> dict[str, int]:
    """The rule of thumb for one token's forward pass when its query sees n keys.

    "weights" = 2N, "attention" = 4 L n d (scores 2 n d plus weighted values 2 n d, per
    layer), "total" = their sum.
    """
    cfg = _check_cfg(cfg)
    n = _check_len(n, cfg, "n")
    weights = 2 * count_params(cfg)
    attention = cfg.L * (2 * n * cfg.d + 2 * n * cfg.d)     # scores + weighted values
    return {"weights": weights, "attention": attention, "total": weights + attention}


def training_flops_per_token(cfg: GPTConfig, n: int) -> dict[str, int]:
    """Forward plus backward (about twice the forward): 6N + 12 L n d per token."""
    return {key: 3 * value for key, value in forward_flops_per_token(cfg, n).items()}


def training_compute(N: float, D: float) -> float:
    """C = 6 N D: the FLOPs to train N parameters on D tokens (attention left out)."""
    for value, name in ((N, "N"), (D, "D")):
        check_positive_number(value, name)
    return 6 * N * D


@validated(where=_sized)
def forward_matmul_flops(cfg: GPTConfig, T: int, B: int = 1) -> int:
    """Exact FLOPs of the matrix products in one dense forward pass of B sequences of T tokens.

    This is what ``torch.utils.flop_counter.FlopCounterMode`` reports for the book's GPT with
    the explicit attention: the four weight matrices of each block and the head for every
    token, plus q k^T and weights @ v over the full T x T table in every head. Embedding
    lookups, biases, LayerNorms, GELU and softmax are not matrix products and count zero.
    """
    d, d_ff, h = cfg.d, cfg.d_ff, cfg.h
    per_token = cfg.L * (matmul_flops(1, d, 3 * d)            # qkv   [d] -> [3d]
                         + matmul_flops(1, d, d)               # W_o   [d] -> [d]
                         + matmul_flops(1, d, d_ff)            # W_1   [d] -> [d_ff]
                         + matmul_flops(1, d_ff, d))           # W_2   [d_ff] -> [d]
    per_token += matmul_flops(1, d, cfg.V)                     # head  [d] -> [V]
    per_sequence = cfg.L * h * (matmul_flops(T, cfg.d_head, T)   # [T, d_head] @ [d_head, T]
                                + matmul_flops(T, T, cfg.d_head))  # [T, T] @ [T, d_head]
    return B * (T * per_token + per_sequence)


@validated(where=_sized)
def step_flops(cfg: GPTConfig, n: int, cached: bool, all_logits: bool = True
               ) -> dict[str, int]:
    """Matmul FLOPs, part by part, of the logits for the next token when the sequence holds
    n tokens.

    Without a cache, the whole window of n tokens is run again: every token's projections
    and MLP, the full n x n score table (a dense masked pass computes the masked half too)
    and, by default, the head for all n rows, as a training pass does. Choosing the next
    token needs only the last row's logits: ``all_logits=False`` charges the head for that
    one row. With a cache, only the newest token is projected; its query meets n keys, and
    only its row goes through the head. Per part (LayerNorms, softmax and additions are a
    rounding error next to these):

    - "projections": W_qkv and W_o, 2 (3d^2 + d^2) per token and block;
    - "attention": scores q . k and the weighted sum of values, 2d per (query, key) pair each;
    - "mlp": W_1 and W_2, 4 d d_ff per token and block;
    - "head": 2 d V per row of logits;
    - "total": their sum.
    """
    d, L = cfg.d, cfg.L
    rows = 1 if cached else n               # tokens pushed through the per-token layers
    pairs = n if cached else n * n          # (query, key) pairs in the score table
    head_rows = rows if all_logits else 1   # rows of logits computed
    flops = {
        "projections": L * (matmul_flops(rows, d, 3 * d) + matmul_flops(rows, d, d)),
        "attention": L * 2 * matmul_flops(pairs, d, 1),   # summed over heads: h d_head = d
        "mlp": L * (matmul_flops(rows, d, cfg.d_ff) + matmul_flops(rows, cfg.d_ff, d)),
        "head": matmul_flops(head_rows, d, cfg.V),
    }
    flops["total"] = sum(flops.values())
    return flops


def cached_step_flops(cfg: GPTConfig, n: int) -> int:
    """Exact matmul FLOPs of generating one token with a KV cache, when its query sees n keys
    (the n - 1 cached ones and its own): its one row through every weight matrix and the
    head, plus q k^T and weights @ v against n keys in every layer (4 L n d)."""
    return step_flops(cfg, n, cached=True)["total"]


def uncached_step_flops(cfg: GPTConfig, n: int, all_logits: bool = False) -> int:
    """Exact matmul FLOPs of generating the token after a prefix of n without a cache: a dense
    forward pass over all n tokens. Sampling needs only the last row's logits, so the head
    runs once; ``all_logits=True`` counts the head on every row, as a training pass does."""
    return step_flops(cfg, n, cached=False, all_logits=all_logits)["total"]


@validated(where=_sized)
def kv_cache_bytes(cfg: GPTConfig, T: int, B: int = 1, bytes_per_value: int = 2) -> int:
    """Bytes of the KV cache: a key and a value of width d per token, per layer, per sequence.

    2 x L x T x d values per sequence, times B sequences, times bytes per value (2 for fp16 or
    bf16, 4 for fp32).
    """
    return 2 * cfg.L * T * cfg.d * B * bytes_per_value


def weight_bytes(cfg: GPTConfig, bytes_per_value: int = 2) -> int:
    """Bytes to hold every parameter once (a tied head is stored once)."""
    cfg = _check_cfg(cfg)
    return count_params(cfg) * check_positive_int(bytes_per_value, "bytes_per_value")


def _batch_args(args: dict, sizes: dict) -> None:
    """The ``where=`` check of :func:`max_batch`: the counting checks, and memory in bytes."""
    _sized(args, sizes)
    check_positive_int(args["memory"], "memory")


@validated(where=_batch_args)
def max_batch(cfg: GPTConfig, T: int, memory: int, bytes_per_value: int = 2) -> int:
    """The most sequences of T tokens that ``memory`` bytes can serve (chapter 7, exercise 7.2).

    The weights are held once and every sequence adds its own KV cache, all in
    ``bytes_per_value`` bytes a number; activations are left out. A partial sequence does not
    count, and 0 means that not even one fits beside the weights.
    """
    free = memory - weight_bytes(cfg, bytes_per_value)          # what the weights leave
    return max(0, free // kv_cache_bytes(cfg, T, 1, bytes_per_value))   # whole sequences


def kv_crossover_tokens(cfg: GPTConfig) -> float:
    """Cached tokens (B x T, summed over the batch) at which the cache outgrows the weights,
    both in the same dtype: N / (2 L d)."""
    cfg = _check_cfg(cfg)
    return count_params(cfg) / (2 * cfg.L * cfg.d)


def format_bytes(n: float) -> str:
    """Binary units with one decimal: 37748736 -> "36.0 MiB", 512 -> "512 B"."""
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}"
    raise AssertionError("unreachable")                   # the loop always returns


class Activation(NamedTuple):
    """One tensor made by the forward pass: where ("embed", "block", "head"), its name, its
    shape in the book's letters and in numbers."""

    stage: str
    name: str
    spec: str
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)


# One forward pass, in order. The block's rows repeat L times (one set per block).
_ACTIVATIONS = (
    ("embed", "ids", "[B, T]"),
    ("embed", "tok_emb[ids]", "[B, T, d]"),
    ("embed", "pos_emb[:T]", "[T, d]"),
    ("embed", "x = sum", "[B, T, d]"),
    ("block", "LN1(x)", "[B, T, d]"),
    ("block", "qkv = LN1(x) @ W_qkv", "[B, T, 3d]"),
    ("block", "q, k, v (each, split into heads)", "[B, h, T, d_head]"),
    ("block", "scores = q k^T / sqrt(d_head)", "[B, h, T, T]"),
    ("block", "weights = softmax(masked scores)", "[B, h, T, T]"),
    ("block", "weights @ v", "[B, h, T, d_head]"),
    ("block", "heads merged", "[B, T, d]"),
    ("block", "attn out = merged @ W_o", "[B, T, d]"),
    ("block", "x = x + attn out", "[B, T, d]"),
    ("block", "LN2(x)", "[B, T, d]"),
    ("block", "hidden = LN2(x) @ W_1", "[B, T, d_ff]"),
    ("block", "GELU(hidden)", "[B, T, d_ff]"),
    ("block", "mlp out = GELU @ W_2", "[B, T, d]"),
    ("block", "x = x + mlp out", "[B, T, d]"),
    ("head", "LN_f(x)", "[B, T, d]"),
    ("head", "logits = LN_f(x) @ tok_emb^T", "[B, T, V]"),    # head^T when untied
)


def activation_shapes(cfg: GPTConfig, T: int, B: int = 1) -> list[Activation]:
    """Every intermediate tensor of one forward pass of B sequences of T tokens, in order
    (the block's tensors once; each of the L blocks makes the same set).

    Shapes: ids [B, T] -> ... -> logits [B, T, V]
    """
    cfg = _check_cfg(cfg)
    T, B = _check_len(T, cfg), check_positive_int(B, "B")
    sizes = {"B": B, "T": T, "d": cfg.d, "h": cfg.h, "d_head": cfg.d_head,
             "d_ff": cfg.d_ff, "V": cfg.V}
    rows = [Activation(stage, name, spec, resolve(spec, **sizes))
            for stage, name, spec in _ACTIVATIONS]
    if not cfg.tied:
        rows[-1] = rows[-1]._replace(name="logits = LN_f(x) @ head^T")
    return rows


# The one row of the activation table that stands for three tensors of its shape.
_THREE_TENSORS = "q, k, v (each, split into heads)"


@validated(where=_sized)
def activation_values(cfg: GPTConfig, T: int, B: int = 1) -> int:
    """Values in every tensor of :func:`activation_shapes` for one forward pass: the block's
    tensors once per block (L times), q, k and v as three tensors.

    A rough measure of what training keeps for the backward pass if it stores each tensor
    once; a real implementation keeps less (a split into heads is a view, fused attention
    never stores the T x T tables) or more: with dropout 0.1 in training mode, GPT-2 small
    at T = 1024 keeps about 1.2 times this count (chapter 7 measures it).
    """
    total = 0
    for a in activation_shapes(cfg, T, B):
        copies = cfg.L if a.stage == "block" else 1
        total += a.size * copies * (3 if a.name == _THREE_TENSORS else 1)
    return total


@validated(where=_sized)
def training_memory_bytes(cfg: GPTConfig, T: int, B: int = 1,
                          bytes_per_value: int = 4) -> dict[str, int]:
    """Bytes to train with AdamW on B sequences of T tokens, everything in one dtype.

    "weights" N values, "gradients" one per weight, "AdamW state" two moments per weight
    (the running mean and the running mean square of the gradient), "activations"
    :func:`activation_values`, and "total". In fp32 the three parameter parts are 16N bytes,
    whatever T and B; only the activations grow with them. The 16N hold from the backward
    pass until the gradients are freed; between steps, once ``zero_grad(set_to_none=True)``
    has freed them (as ``anatomy.train.step.train_step`` does), 12N remain.

    Mixed precision does not shrink those 16N. Under ``torch.autocast``, this book's scheme,
    the weights, gradients and both moments stay fp32 (16 bytes per parameter while the
    gradients exist, 12 between steps) and the 16-bit copies of the weight matrices that
    the matmuls read are remade at every step; autograd keeps them from the forward pass
    until the backward pass has used them, about 2 more bytes per parameter while a step
    runs (``anatomy.memory.weight_copies`` finds them; chapter 7 measures them). Schemes
    that keep 16-bit weights and gradients beside an fp32 master copy and fp32 moments also
    come to 16 bytes: 2 + 2 + 4 + 4 + 4 (14 between steps, without the gradients). What
    16-bit compute can save is activation memory. ``bytes_per_value=2`` counts every
    part at 2 bytes, which fits training entirely in a 16-bit dtype, not either
    mixed-precision scheme.
    """
    N = count_params(cfg)
    parts = {"weights": N * bytes_per_value,
             "gradients": N * bytes_per_value,
             "AdamW state": 2 * N * bytes_per_value,
             "activations": activation_values(cfg, T, B) * bytes_per_value}
    parts["total"] = sum(parts.values())
    return parts
