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
  2 L T d values per sequence.

Everything here is arithmetic on the config: nothing is allocated or run.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ._validate import check_positive_int, resolve
from .params import GPTConfig, count_params


def _check_cfg(cfg: object) -> GPTConfig:
    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"cfg: expected a GPTConfig (e.g. anatomy.params.GPT2_SMALL), got "
                        f"{type(cfg).__name__}")
    return cfg


def _check_len(T: object, cfg: GPTConfig, name: str = "T") -> int:
    T = check_positive_int(T, name)
    if T > cfg.ctx:
        raise ValueError(f"{name}: {name}={T} exceeds ctx={cfg.ctx} (the position table has "
                         f"ctx rows)")
    return T


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
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name}: expected a positive number, got {value!r}")
    return 6 * N * D


def forward_matmul_flops(cfg: GPTConfig, T: int, B: int = 1) -> int:
    """Exact FLOPs of the matrix products in one dense forward pass of B sequences of T tokens.

    This is what ``torch.utils.flop_counter.FlopCounterMode`` reports for the book's GPT with
    the explicit attention: the four weight matrices of each block and the head for every
    token, plus q k^T and weights @ v over the full T x T table in every head. Embedding
    lookups, biases, LayerNorms, GELU and softmax are not matrix products and count zero.
    """
    cfg = _check_cfg(cfg)
    T, B = _check_len(T, cfg), check_positive_int(B, "B")
    d, d_ff, h = cfg.d, cfg.d_ff, cfg.h
    per_token = cfg.L * (matmul_flops(1, d, 3 * d)            # qkv   [d] -> [3d]
                         + matmul_flops(1, d, d)               # W_o   [d] -> [d]
                         + matmul_flops(1, d, d_ff)            # W_1   [d] -> [d_ff]
                         + matmul_flops(1, d_ff, d))           # W_2   [d_ff] -> [d]
    per_token += matmul_flops(1, d, cfg.V)                     # head  [d] -> [V]
    per_sequence = cfg.L * h * (matmul_flops(T, cfg.d_head, T)   # [T, d_head] @ [d_head, T]
                                + matmul_flops(T, T, cfg.d_head))  # [T, T] @ [T, d_head]
    return B * (T * per_token + per_sequence)


def kv_cache_bytes(cfg: GPTConfig, T: int, B: int = 1, bytes_per_value: int = 2) -> int:
    """Bytes of the KV cache: a key and a value of width d per token, per layer, per sequence.

    2 x L x T x d values per sequence, times B sequences, times bytes per value (2 for fp16 or
    bf16, 4 for fp32).
    """
    cfg = _check_cfg(cfg)
    T, B = _check_len(T, cfg), check_positive_int(B, "B")
    bytes_per_value = check_positive_int(bytes_per_value, "bytes_per_value")
    return 2 * cfg.L * T * cfg.d * B * bytes_per_value


def weight_bytes(cfg: GPTConfig, bytes_per_value: int = 2) -> int:
    """Bytes to hold every parameter once (a tied head is stored once)."""
    cfg = _check_cfg(cfg)
    return count_params(cfg) * check_positive_int(bytes_per_value, "bytes_per_value")


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
