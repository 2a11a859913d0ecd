"""From GPT-2 to a modern open model (appendix): a Llama-style decoder in NumPy.

Llama 3 8B makes these six changes to GPT-2's block (LLaMA 1 and the smaller Llama 2 models
all but grouped-query attention); Mistral, Qwen and Gemma make most of them
(Qwen2 keeps the query, key and value biases; Gemma gates its MLP with GELU, GeGLU, and ties
its head to the token table):

- RMSNorm instead of LayerNorm (Zhang & Sennrich, 2019): no mean subtraction, no shift;
- a SwiGLU MLP instead of GELU (Shazeer, 2020): three matrices of width d_ff ~ 8d/3;
- RoPE inside attention instead of a learned position table (chapter 5);
- grouped-query attention (Ainslie et al., 2023): h_kv < h key/value heads (chapter 4);
- no biases;
- an output head of its own instead of the transposed token table.

:class:`LlamaConfig`, :func:`llama_block` and :func:`forward` put them together from the
book's own pieces (:func:`anatomy.positions.rope`,
:func:`anatomy.heads.grouped_query_attention`), and
:func:`params_from_hf` loads a Hugging Face ``LlamaForCausalLM`` state dict into it.
:class:`Design` describes every model on the way from GPT-2 to Llama, so that one shape table
(:func:`param_shapes`) counts each step. Weights are stored [in, out]: a projection is
``x @ W``; the token table and the head are stored [V, d], as in chapter 7.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ._validate import (
    check_divisible,
    check_even,
    check_groups,
    check_ids,
    check_keys,
    check_pairs,
    check_positive_int,
    check_positive_number,
    check_rope_heads,
    check_shape,
    check_type,
    resolve,
    validated,
)
from .flops import matmul_flops
from .gpt_numpy import _as_numpy
from .heads import grouped_query_attention
from .heads import kv_cache_bytes as _kv_bytes
from .params import (
    GPT2_SMALL,
    GPTConfig,
    block_params,
    check_table,
    count_table,
    draw_table,
    resolve_table,
    short_name,
)
from .positions import pair_frequencies

# The six changes, in the order the appendix makes them.
CHANGES = ("RMSNorm", "SwiGLU", "RoPE", "GQA", "no biases", "untied head")


def _check_sizes(sizes: _Sizes, owner: str, flags: tuple[str, ...]) -> None:
    """The letters are positive integers, the heads split d and each other, flags are bools."""
    for name in ("V", "ctx", "d", "L", "h", "h_kv", "d_ff"):
        check_positive_int(getattr(sizes, name), f"{owner}.{name}")
    check_divisible(f"{owner}.h", sizes.d, sizes.h)
    check_groups(f"{owner}.h_kv", sizes.h, sizes.h_kv)
    for name in flags:
        if not isinstance(getattr(sizes, name), bool):
            raise ValueError(f"{owner}.{name}: expected True or False, "
                             f"got {getattr(sizes, name)!r}")


@dataclass(frozen=True)
class _Sizes:
    """The letters both configs share, in this order, and the head widths derived from them."""

    V: int
    ctx: int
    d: int
    L: int
    h: int
    h_kv: int
    d_ff: int

    @property
    def d_head(self) -> int:
        """Width of one head, d / h."""
        return self.d // self.h

    @property
    def d_kv(self) -> int:
        """Width of all key (or value) heads together, h_kv * d_head."""
        return self.h_kv * self.d_head


@dataclass(frozen=True)
class LlamaConfig(_Sizes):
    """The sizes of a Llama-style decoder, in the book's letters.

    V vocabulary, ctx longest context, d model width, L blocks, h query heads, h_kv
    key/value heads (h_kv = h: ordinary multi-head attention; h_kv = 1: multi-query), d_ff
    SwiGLU width, rope_base the RoPE base (theta), eps the RMSNorm epsilon, tied whether the
    head reuses the token table (False for Llama 2 and 3 8B). Impossible shapes are rejected
    here, not deep inside a forward pass.
    """

    rope_base: float = 10000.0
    eps: float = 1e-5
    tied: bool = False

    def __post_init__(self) -> None:
        _check_sizes(self, "cfg", ("tied",))
        check_rope_heads("cfg.h", self.d, self.h)
        check_positive_number(self.rope_base, "cfg.rope_base")
        check_positive_number(self.eps, "cfg.eps")

    @property
    def design(self) -> Design:
        """The same model as a :class:`Design` with all six changes made."""
        return Design(V=self.V, ctx=self.ctx, d=self.d, L=self.L, h=self.h, h_kv=self.h_kv,
                      d_ff=self.d_ff, rms_norm=True, swiglu=True, rope=True, bias=False,
                      tied=self.tied)


# Llama 2 7B (Touvron et al., 2023, table 1 and Meta's released params.json / the Hugging Face
# config.json): 4k context, RMSNorm eps 1e-5, RoPE base 10000, MHA, untied head.
LLAMA2_7B = LlamaConfig(V=32_000, ctx=4_096, d=4_096, L=32, h=32, h_kv=32, d_ff=11_008)
# Llama 3 8B (Grattafiori et al., 2024, table 3; Hugging Face config.json of
# Meta-Llama-3-8B): 8,192-token context as released (Llama 3.1 stretches RoPE to 128k),
# RMSNorm eps 1e-5, RoPE base 500,000, 8 key/value heads, untied head.
LLAMA3_8B = LlamaConfig(V=128_256, ctx=8_192, d=4_096, L=32, h=32, h_kv=8, d_ff=14_336,
                        rope_base=500_000.0)


@dataclass(frozen=True)
class Design(_Sizes):
    """A decoder anywhere between GPT-2 and Llama: its sizes and which changes it makes.

    rms_norm: RMSNorm (gain only) instead of LayerNorm (gain and shift); swiglu: a SwiGLU MLP
    (W_gate, W_up, W_down) instead of GELU (W_1, W_2); rope: no position table; h_kv < h:
    grouped-query attention; bias: biases on every projection; tied: the head is the token
    table. Only counted, never run: :func:`forward` runs a :class:`LlamaConfig`.
    """

    rms_norm: bool = False
    swiglu: bool = False
    rope: bool = False
    bias: bool = True
    tied: bool = True

    def __post_init__(self) -> None:
        _check_sizes(self, "design", ("rms_norm", "swiglu", "rope", "bias", "tied"))

    @property
    def changes(self) -> tuple[str, ...]:
        """The names (from :data:`CHANGES`) of the changes this design makes."""
        made = (self.rms_norm, self.swiglu, self.rope, self.h_kv < self.h, not self.bias,
                not self.tied)
        return tuple(name for name, on in zip(CHANGES, made, strict=True) if on)


def gpt2_design(gpt: GPTConfig = GPT2_SMALL) -> Design:
    """Chapter 7's GPT as a :class:`Design` with none of the changes (W_qkv counted as
    W_q and W_kv, which hold the same numbers)."""
    check_type(gpt, "gpt", GPTConfig, "anatomy.params.GPT2_SMALL")
    return Design(V=gpt.V, ctx=gpt.ctx, d=gpt.d, L=gpt.L, h=gpt.h, h_kv=gpt.h, d_ff=gpt.d_ff,
                  tied=gpt.tied)


def with_changes(gpt: GPTConfig, changes: Iterable[str], h_kv: int, d_ff: int) -> Design:
    """GPT ``gpt`` with some of the six :data:`CHANGES` made, in any combination.

    "SwiGLU" switches the MLP width to ``d_ff`` and "GQA" the key/value heads to ``h_kv``.
    """
    changes = {changes} if isinstance(changes, str) else set(changes)
    unknown = sorted(changes - set(CHANGES))
    if unknown:
        raise ValueError(f"changes: unknown change {unknown[0]!r} (expected some of "
                         f"{', '.join(CHANGES)})")
    base = gpt2_design(gpt)
    if "GQA" in changes and not (isinstance(h_kv, int) and 0 < h_kv < base.h):
        raise ValueError(f"h_kv: grouped-query attention needs fewer key/value heads than "
                         f"the h={base.h} query heads, got h_kv={h_kv!r}")
    return dataclasses.replace(
        base, rms_norm="RMSNorm" in changes, swiglu="SwiGLU" in changes,
        rope="RoPE" in changes, bias="no biases" not in changes,
        tied="untied head" not in changes,
        d_ff=d_ff if "SwiGLU" in changes else base.d_ff,
        h_kv=h_kv if "GQA" in changes else base.h_kv)


def design_steps(gpt: GPTConfig = GPT2_SMALL, h_kv: int = 3, d_ff: int | None = None
                 ) -> list[tuple[str, Design]]:
    """GPT-2 and then one more change at a time, in the order of :data:`CHANGES`.

    The first entry is ("GPT-2", the unchanged design); the last makes all six. ``d_ff``
    defaults to :func:`swiglu_width` of d, which keeps the MLP's size.
    """
    d_ff = swiglu_width(gpt.d) if d_ff is None else d_ff
    steps = [("GPT-2", gpt2_design(gpt))]
    for i, change in enumerate(CHANGES):
        steps.append((change, with_changes(gpt, CHANGES[:i + 1], h_kv, d_ff)))
    return steps


def swiglu_width(d: int, multiple_of: int = 256, multiplier: float | None = None) -> int:
    """The SwiGLU width Llama uses: two thirds of 4d, optionally scaled, rounded up.

    Two thirds of 4d keeps three matrices [d, d_ff] as large as GELU's two [d, 4d]. Meta's
    code then multiplies by ``multiplier`` (1.3 for Llama 3 8B and the 70B models) and rounds
    up to a multiple of ``multiple_of`` (256 for LLaMA 1 and Llama 2 7B and 13B, 1024 for
    Llama 3 8B, 4096 for Llama 2 70B and Llama 3 70B). Llama 2 7B: 11,008; Llama 3 8B: 14,336;
    the 70B models: 28,672.
    """
    d = check_positive_int(d, "d")
    multiple_of = check_positive_int(multiple_of, "multiple_of")
    width = int(2 * 4 * d / 3)
    if multiplier is not None:
        width = int(check_positive_number(multiplier, "multiplier") * width)
    return multiple_of * -(-width // multiple_of)          # round up


# ---- the shape table ------------------------------------------------------------------------


def _as_design(cfg: object) -> Design:
    if isinstance(cfg, LlamaConfig):
        return cfg.design
    if isinstance(cfg, Design):
        return cfg
    raise TypeError(f"cfg: expected a LlamaConfig (e.g. LLAMA3_8B) or a Design, got "
                    f"{type(cfg).__name__}")


def _block_specs(design: Design) -> dict[str, str]:
    """One block's parameters in letters, in the order the block uses them."""
    norm = ("_g",) if design.rms_norm else ("_g", "_b")
    specs = {f"ln1{s}": "[d]" for s in norm}
    attention = {"W_q": "[d, d]", "b_q": "[d]", "W_kv": "[d, 2d_kv]", "b_kv": "[2d_kv]",
                 "W_o": "[d, d]", "b_o": "[d]"}
    if design.swiglu:
        mlp = {"W_gate": "[d, d_ff]", "b_gate": "[d_ff]", "W_up": "[d, d_ff]",
               "b_up": "[d_ff]", "W_down": "[d_ff, d]", "b_down": "[d]"}
    else:
        mlp = {"W_1": "[d, d_ff]", "b_1": "[d_ff]", "W_2": "[d_ff, d]", "b_2": "[d]"}
    specs.update({k: v for k, v in attention.items() if design.bias or k.startswith("W_")})
    specs.update({f"ln2{s}": "[d]" for s in norm})
    specs.update({k: v for k, v in mlp.items() if design.bias or k.startswith("W_")})
    return specs


def param_specs(cfg: LlamaConfig | Design) -> dict[str, str]:
    """Every parameter's name and its shape in letters, e.g. "blocks.0.W_kv": "[d, 2d_kv]".

    For a :class:`LlamaConfig`: tok_emb [V, d]; per block ln1_g [d], W_q [d, d],
    W_kv [d, 2d_kv], W_o [d, d], ln2_g [d], W_gate [d, d_ff], W_up [d, d_ff],
    W_down [d_ff, d]; then lnf_g [d]; head [V, d] unless tied.
    """
    design = _as_design(cfg)
    specs = {"tok_emb": "[V, d]"}
    if not design.rope:
        specs["pos_emb"] = "[ctx, d]"
    block = _block_specs(design)
    for i in range(design.L):
        specs.update({f"blocks.{i}.{name}": spec for name, spec in block.items()})
    specs["lnf_g"] = "[d]"
    if not design.rms_norm:
        specs["lnf_b"] = "[d]"
    if not design.tied:
        specs["head"] = "[V, d]"
    return specs


def _sizes(cfg: LlamaConfig | Design) -> dict[str, int]:
    return {"V": cfg.V, "ctx": cfg.ctx, "d": cfg.d, "d_ff": cfg.d_ff, "d_kv": cfg.d_kv}


def param_shapes(cfg: LlamaConfig | Design) -> dict[str, tuple[int, ...]]:
    """THE shape table: every parameter's flat name and shape, in order. It initialises
    (:func:`init_params`), checks (:func:`check_params`) and counts (:func:`count_params`)."""
    return resolve_table(param_specs(cfg), _sizes(_as_design(cfg)))


def count_params(cfg: LlamaConfig | Design) -> int:
    """Total number of parameters, summed over the shape table (a tied head counts once)."""
    return count_table(param_shapes(cfg))


def _kind(name: str) -> str:
    short = short_name(name)                          # "blocks.3.W_kv" -> "W_kv"
    if short in ("tok_emb", "pos_emb"):
        return "embeddings"
    if short == "head":
        return "head"
    if short.startswith("ln"):
        return "norms"
    return "attention" if short[2:] in ("q", "kv", "o") else "MLP"


def count_by_kind(cfg: LlamaConfig | Design) -> dict[str, int]:
    """Where the parameters live: "embeddings" (token and position tables), "attention"
    (W_q, W_kv, W_o and their biases), "MLP", "norms" (every gain and shift, the final norm's
    included), "head" (only if untied) and "total"."""
    counts = {"embeddings": 0, "attention": 0, "MLP": 0, "norms": 0}
    for name, shape in param_shapes(cfg).items():
        kind = _kind(name)
        counts[kind] = counts.get(kind, 0) + math.prod(shape)
    counts["total"] = sum(counts.values())
    return counts


# ---- work and memory ------------------------------------------------------------------------


def _check_len(T: object, cfg: LlamaConfig | Design, name: str) -> int:
    T = check_positive_int(T, name)
    if T > cfg.ctx:
        raise ValueError(f"{name}: {name}={T} exceeds ctx={cfg.ctx}")
    return T


def _weight_flops_per_token(design: Design) -> int:
    """Matrix-product FLOPs one token spends on weights: every W of every block, and the
    head (the tied token table, or its own matrix). Lookups, norms and biases do no matmul."""
    block = sum(matmul_flops(1, *resolve(spec, **_sizes(design)))
                for name, spec in _block_specs(design).items() if name.startswith("W_"))
    return design.L * block + matmul_flops(1, design.d, design.V)   # head [d] -> [V]


def flops_per_token(cfg: LlamaConfig | Design, n: int) -> dict[str, int]:
    """Forward matmul FLOPs of one token whose query sees n keys.

    "weights": 2 per weight of every matrix the token passes through (the embedding lookup
    is free, so an untied table costs parameters but no FLOPs); "attention": scores and
    weighted values, 2 n d each per layer, 4 L n d in all (grouped-query attention shares
    keys and values but every query head still reads n of them); "total".
    """
    design = _as_design(cfg)
    n = _check_len(n, design, "n")
    weights = _weight_flops_per_token(design)
    attention = design.L * (2 * n * design.d + 2 * n * design.d)   # scores + weighted values
    return {"weights": weights, "attention": attention, "total": weights + attention}


def forward_matmul_flops(cfg: LlamaConfig | Design, T: int, B: int = 1) -> int:
    """Exact FLOPs of the matrix products in one dense forward pass of B sequences of T
    tokens: every weight matrix and the head for every token, plus q k^T and weights @ v
    over the full T x T table in each of the h query heads (what
    ``torch.utils.flop_counter.FlopCounterMode`` counts for Hugging Face's eager Llama)."""
    design = _as_design(cfg)
    T, B = _check_len(T, design, "T"), check_positive_int(B, "B")
    per_sequence = design.L * design.h * (matmul_flops(T, design.d_head, T)   # q k^T
                                          + matmul_flops(T, T, design.d_head))  # w @ v
    return B * (T * _weight_flops_per_token(design) + per_sequence)


def kv_cache_bytes(cfg: LlamaConfig | Design, T: int, B: int = 1,
                   bytes_per_value: int = 2) -> int:
    """Bytes of the KV cache: a key and a value of width d_kv = h_kv d_head per token, per
    layer, per sequence (2 for fp16 or bf16, 4 for fp32). Grouped-query attention divides
    GPT-2's 2 L T d by h / h_kv."""
    design = _as_design(cfg)
    T = _check_len(T, design, "T")
    return _kv_bytes(design.L, T, design.h_kv, design.d_head, B=B, itemsize=bytes_per_value)


class Step(NamedTuple):
    """One model on the way from GPT-2 to Llama, and what it costs."""

    change: str
    design: Design
    params: int
    flops: int          # forward matmul FLOPs per token, query seeing T keys
    kv_bytes: int       # KV cache of one sequence of T tokens


def step_costs(steps: Iterable[tuple[str, Design]], T: int, B: int = 1,
               bytes_per_value: int = 2) -> list[Step]:
    """Parameters, FLOPs per token (n = T) and KV-cache bytes (B sequences of T) of each
    design in ``steps`` (e.g. :func:`design_steps`)."""
    return [Step(change, design, count_params(design),
                 flops_per_token(design, T)["total"],
                 kv_cache_bytes(design, T, B, bytes_per_value))
            for change, design in steps]


# ---- the forward pass -----------------------------------------------------------------------


def _positive_eps(args: dict, sizes: dict) -> None:
    check_positive_number(args["eps"], "eps")


@validated(where=_positive_eps)
def rms_norm(x: np.ndarray, g: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Scale each token's d features to root-mean-square 1, then by the gain g.

    LayerNorm without its two centring steps: no mean is subtracted and there is no shift b
    (Zhang & Sennrich, 2019). eps sits inside the square root, as in Llama.

    Shapes: x [..., d], g [d] -> [..., d]
    """
    ms = (x * x).mean(axis=-1, keepdims=True)          # [..., d] -> [..., 1]
    return x / np.sqrt(ms + eps) * g                   # [..., d] / [..., 1] * [d]


@validated
def silu(x: np.ndarray) -> np.ndarray:
    """SiLU (swish): x * sigmoid(x), with sigmoid(x) written 0.5 (1 + tanh(x / 2)) so that
    no exp overflows for large |x|.

    Shapes: x [...] -> [...]
    """
    return x * (0.5 + 0.5 * np.tanh(0.5 * x))


@validated
def swiglu(x: np.ndarray, W_gate: np.ndarray, W_up: np.ndarray, W_down: np.ndarray
           ) -> np.ndarray:
    """The gated MLP of Llama: (SiLU(x W_gate) * (x W_up)) W_down (Shazeer, 2020).

    Two matrices widen to d_ff side by side; one, through SiLU, gates the other feature by
    feature; the third projects back. Three matrices instead of GELU's two, so d_ff is about
    8d/3 rather than 4d for the same count. Bias-free.

    Shapes: x [..., T, d], W_gate [d, d_ff], W_up [d, d_ff], W_down [d_ff, d] -> [..., T, d]
    """
    gate = silu(x @ W_gate)                  # [..., T, d] @ [d, d_ff] -> [..., T, d_ff]
    up = x @ W_up                            # [..., T, d] @ [d, d_ff] -> [..., T, d_ff]
    return (gate * up) @ W_down              # [..., T, d_ff] @ [d_ff, d] -> [..., T, d]


def _rope_args(args: dict, sizes: dict) -> None:
    check_pairs(args["x"], "x", "[..., T, d]")
    check_positive_number(args["base"], "base")


@validated(floats=("x",), where=_rope_args)
def rope_rotate_half(x: np.ndarray, base: float = 10000.0) -> np.ndarray:
    """RoPE in Hugging Face's layout ("rotate half"), at positions 0..T-1.

    Feature i turns together with feature i + d/2, by the angle p / base^(2i/d) of chapter
    5's pair i. It is chapter 5's :func:`anatomy.positions.rope` with the features laid out
    differently (:func:`rotate_half_permutation`): the same rotations, the same scores. Only
    used to explain the layout; :func:`forward` uses the book's ``rope``.

    Shapes: x [..., T, d] (d even) -> [..., T, d]
    """
    T, d = x.shape[-2:]
    freqs = pair_frequencies(d, base)              # [d/2]
    angles = np.arange(T)[:, None] * freqs         # [T, 1] * [d/2] -> [T, d/2]
    angles = np.concatenate([angles, angles], axis=-1)   # -> [T, d]
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    x1, x2 = np.split(x, 2, axis=-1)               # 2 x [..., T, d/2]
    turned = np.concatenate([-x2, x1], axis=-1)    # each pair turned a quarter
    return x * cos + turned * sin                  # [..., T, d] * [T, d]


def _check_cfg(cfg: object) -> LlamaConfig:
    return check_type(cfg, "cfg", LlamaConfig, "anatomy.modern.LLAMA3_8B")


def check_params(params: Mapping[str, np.ndarray], cfg: LlamaConfig) -> None:
    """Every name of the shape table present, nothing else, and every shape right."""
    cfg = _check_cfg(cfg)
    check_table(params, param_specs(cfg), _sizes(cfg))


def init_params(cfg: LlamaConfig, rng: np.random.Generator | int,
                dtype: np.dtype | type = np.float64) -> dict[str, np.ndarray]:
    """Random weights drawn in shape-table order, GPT-2 style (as in chapter 7).

    Matrices and tables ~ N(0, 0.02^2); W_o and W_down, which write into the residual
    stream, get std 0.02 / sqrt(2L); RMSNorm gains 1. Drawn in float64, then cast, so a seed
    gives the same model in every dtype. ``rng`` is a Generator or a seed.
    """
    return draw_table(param_shapes(_check_cfg(cfg)), rng, cfg.L, ("W_o", "W_down"), dtype)


def _head(params: Mapping[str, np.ndarray], cfg: LlamaConfig) -> np.ndarray:
    """The output head [V, d]: its own matrix, or the token table when tied."""
    return params["tok_emb"] if cfg.tied else params["head"]


def _block_args(args: dict, sizes: dict) -> None:
    cfg = _check_cfg(args["cfg"])
    check_shape(args["x"], "x", "[..., T, d]", d=cfg.d)
    check_table(args["p"], _block_specs(cfg.design), _sizes(cfg), name="p")


@validated(where=_block_args)
def llama_block(x: np.ndarray, p: Mapping[str, np.ndarray], cfg: LlamaConfig) -> np.ndarray:
    """One Llama block: x + GQA(RMSNorm(x)), then + SwiGLU(RMSNorm(x)).

    Pre-norm, as GPT-2's (chapter 6), with RMSNorm, grouped-query attention (cfg.h query
    heads, cfg.h_kv key/value heads) turned by RoPE of base cfg.rope_base, causal, and the
    SwiGLU MLP. ``p`` holds the block's weights under their short names: ln1_g, W_q, W_kv
    (keys then values), W_o, ln2_g, W_gate, W_up, W_down.

    Shapes: x [..., T, d] -> [..., T, d]
    """
    a = rms_norm(x, p["ln1_g"], cfg.eps)                 # [..., T, d]
    attn, _ = grouped_query_attention(                   # RoPE inside: [..., T, d]
        a, p["W_q"], p["W_kv"], p["W_o"], cfg.h, cfg.h_kv, rope_base=cfg.rope_base)
    x = x + attn
    m = rms_norm(x, p["ln2_g"], cfg.eps)                 # [..., T, d]
    return x + swiglu(m, p["W_gate"], p["W_up"], p["W_down"])   # [..., T, d]


def forward(params: Mapping[str, np.ndarray], ids: np.ndarray,
            cfg: LlamaConfig) -> np.ndarray:
    """Logits for the next token at every position, Llama style.

    ids -> token table (no position table) -> L blocks (:func:`llama_block`) of
    x + GQA(RMSNorm(x)), with RoPE on every query and key head, then
    x + SwiGLU(RMSNorm(x)) -> final RMSNorm -> head. Causal throughout.

    Shapes: ids [T] or [B, T] (integers in [0, V), 1 <= T <= ctx)
            -> logits [T, V] or [B, T, V]
    """
    cfg = _check_cfg(cfg)
    ids = check_ids(ids, cfg.V, cfg.ctx)
    check_params(params, cfg)
    x = np.asarray(params["tok_emb"])[ids]       # [..., T] -> [..., T, d]
    for i in range(cfg.L):
        x = llama_block(x, block_params(params, i), cfg)   # [..., T, d]
    x = rms_norm(x, params["lnf_g"], cfg.eps)    # [..., T, d]
    return x @ _head(params, cfg).T    # [..., T, d] @ [d, V] -> [..., T, V]


# ---- Hugging Face weights -------------------------------------------------------------------


def rotate_half_permutation(d_head: int) -> np.ndarray:
    """Feature order that turns Hugging Face's RoPE layout into the book's.

    Chapter 5's :func:`anatomy.positions.rope` turns neighbouring features (2i, 2i+1)
    together, by the angle of frequency i. Hugging Face's Llama ("rotate half") turns
    feature i with feature i + d_head/2, by the same angle of frequency i. Both are
    rotations by the same angles, only the features are laid out differently: book feature
    2i is HF feature i, and book feature 2i+1 is HF feature i + d_head/2. Reordering the
    columns of W_q and W_k of every head this way makes the book's rope give HF's scores
    (a dot product does not care how the features are ordered, if q and k agree).

    Shapes: -> perm [d_head], book feature c = HF feature perm[c]
    """
    d_head = check_even(d_head, "d_head", "RoPE turns features in pairs")
    half = d_head // 2
    return np.arange(d_head).reshape(2, half).T.reshape(-1)   # [2, d/2] -> [d/2, 2] -> [d]


def _permute_heads(W: np.ndarray, n_heads: int, d_head: int) -> np.ndarray:
    """Reorder the columns of each head of a projection [d, n_heads * d_head]."""
    d = W.shape[0]
    W = W.reshape(d, n_heads, d_head)                 # [d, n d_head] -> [d, n, d_head]
    W = W[:, :, rotate_half_permutation(d_head)]      # same shape, features reordered
    return W.reshape(d, n_heads * d_head)             # -> [d, n d_head]


# Hugging Face LlamaForCausalLM names (without "model.") -> HF shape -> the book's name.
_HF_BLOCK = {
    "input_layernorm.weight": ("[d]", "ln1_g"),
    "self_attn.q_proj.weight": ("[d, d]", "W_q"),             # [out, in]
    "self_attn.k_proj.weight": ("[d_kv, d]", "W_kv"),
    "self_attn.v_proj.weight": ("[d_kv, d]", "W_kv"),
    "self_attn.o_proj.weight": ("[d, d]", "W_o"),
    "post_attention_layernorm.weight": ("[d]", "ln2_g"),
    "mlp.gate_proj.weight": ("[d_ff, d]", "W_gate"),
    "mlp.up_proj.weight": ("[d_ff, d]", "W_up"),
    "mlp.down_proj.weight": ("[d, d_ff]", "W_down"),
}
# RoPE's frequencies may be saved as a buffer; they are not weights (cfg.rope_base has them).
_HF_BUFFERS = ("rotary_emb.inv_freq",)


def params_from_hf(state_dict: Mapping[str, object], cfg: LlamaConfig, *,
                   dtype: np.dtype | type | None = None, permute_rope: bool = True
                   ) -> dict[str, np.ndarray]:
    """The book's weights from a Hugging Face ``LlamaForCausalLM`` (or ``LlamaModel``)
    state dict, for the model described by ``cfg`` (see :func:`config_from_hf`).

    Hugging Face stores ``nn.Linear`` weights [out, in]; they are transposed to [in, out].
    k_proj and v_proj become the fused W_kv [d, 2d_kv] of
    :func:`anatomy.heads.grouped_query_attention`.

    The RoPE layout is the classic silent bug. Hugging Face's Llama turns feature i of a head
    together with feature i + d_head/2 ("rotate half"); the book's
    :func:`anatomy.positions.rope` turns neighbours 2i and 2i+1. Loading the weights as they
    are runs without any error and gives wrong logits. So the columns of W_q and of the
    key half of W_kv are reordered inside every head (:func:`rotate_half_permutation`), after
    which the book's RoPE computes exactly Hugging Face's scores. ``permute_rope=False``
    skips that step, only to show what the bug does.

    Accepts torch tensors or NumPy arrays, keys with or without the ``model.`` prefix.
    ``lm_head.weight`` must be present when ``cfg.tied`` is False; when tied it may be
    missing, or must equal the token table. Any other missing or unknown key, or a wrong
    shape, raises ``ValueError`` naming the key.

    Shapes: embed_tokens [V, d], q_proj [d, d], k_proj and v_proj [d_kv, d], o_proj [d, d],
            gate_proj and up_proj [d_ff, d], down_proj [d, d_ff], norms [d], lm_head [V, d]
            -> params with param_shapes(cfg)
    """
    cfg = _check_cfg(cfg)
    arrays = {}
    for key, value in state_dict.items():
        name = key.removeprefix("model.")
        if name.endswith(_HF_BUFFERS):
            continue
        arrays[name] = (key, _as_numpy(value, dtype))
    names = {"embed_tokens.weight": "[V, d]", "norm.weight": "[d]"}
    names.update({f"layers.{i}.{hf}": spec for i in range(cfg.L)
                  for hf, (spec, _) in _HF_BLOCK.items()})
    check_keys(arrays, "state_dict (without the 'model.' prefix)", names,
               optional=("lm_head.weight",))
    sizes = _sizes(cfg)
    for name, spec in names.items():
        key, value = arrays[name]
        check_shape(value, f"state_dict[{key!r}]", spec, **sizes)
    tok = arrays["embed_tokens.weight"][1]
    head = arrays.get("lm_head.weight", (None, None))[1]
    if head is not None:
        check_shape(head, f"state_dict[{arrays['lm_head.weight'][0]!r}]", "[V, d]", **sizes)
    if cfg.tied and head is not None and not np.array_equal(head, tok):
        raise ValueError("cfg.tied: True, but state_dict['lm_head.weight'] differs from the "
                         "token table (use cfg.tied=False for an untied head)")
    if not cfg.tied and head is None:
        raise ValueError("state_dict: missing key 'lm_head.weight' (cfg.tied is False, so "
                         "the head has its own matrix)")

    def rope_order(W: np.ndarray, n_heads: int) -> np.ndarray:
        return _permute_heads(W, n_heads, cfg.d_head) if permute_rope else W

    params = {"tok_emb": tok}
    for i in range(cfg.L):
        hf = {short: arrays[f"layers.{i}.{short}"][1] for short in _HF_BLOCK}
        W_k = rope_order(hf["self_attn.k_proj.weight"].T, cfg.h_kv)   # [d, d_kv]
        W_v = hf["self_attn.v_proj.weight"].T                         # [d_kv, d] -> [d, d_kv]
        params.update({
            f"blocks.{i}.ln1_g": hf["input_layernorm.weight"],
            f"blocks.{i}.W_q": rope_order(hf["self_attn.q_proj.weight"].T, cfg.h),  # [d, d]
            f"blocks.{i}.W_kv": np.concatenate([W_k, W_v], axis=1),   # -> [d, 2d_kv]
            f"blocks.{i}.W_o": hf["self_attn.o_proj.weight"].T,       # [d, d]
            f"blocks.{i}.ln2_g": hf["post_attention_layernorm.weight"],
            f"blocks.{i}.W_gate": hf["mlp.gate_proj.weight"].T,       # [d_ff, d] -> [d, d_ff]
            f"blocks.{i}.W_up": hf["mlp.up_proj.weight"].T,           # [d_ff, d] -> [d, d_ff]
            f"blocks.{i}.W_down": hf["mlp.down_proj.weight"].T,       # [d, d_ff] -> [d_ff, d]
        })
    params["lnf_g"] = arrays["norm.weight"][1]
    if not cfg.tied:
        params["head"] = head                                         # [V, d], like tok_emb
    check_params(params, cfg)
    return params


def config_from_hf(hf_config: object) -> LlamaConfig:
    """A :class:`LlamaConfig` from a Hugging Face ``LlamaConfig`` (duck-typed: no import).

    Settings this model does not implement (biases, an activation other than SiLU, a head
    width other than d / h, scaled RoPE) are refused rather than silently ignored.
    """
    def get(name: str, default: object = None) -> object:
        return getattr(hf_config, name, default)

    rope = get("rope_parameters") or get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    d, h = get("hidden_size"), get("num_attention_heads")
    refused = {                                   # setting: (its value, unsupported?)
        "attention_bias": (get("attention_bias"), bool(get("attention_bias", False))),
        "mlp_bias": (get("mlp_bias"), bool(get("mlp_bias", False))),
        "hidden_act": (get("hidden_act"), get("hidden_act", "silu") != "silu"),
        "head_dim": (get("head_dim"), get("head_dim") not in (None, d // h if d and h else 0)),
        "rope_parameters": (rope_type, rope_type != "default"),
    }
    for name, (value, bad) in refused.items():
        if bad:
            raise ValueError(f"hf_config.{name}: {value!r} is not supported (this model has "
                             "no biases, SiLU, d_head = d / h and plain RoPE)")
    return LlamaConfig(
        V=get("vocab_size"), ctx=get("max_position_embeddings"), d=d,
        L=get("num_hidden_layers"), h=h, h_kv=get("num_key_value_heads") or h,
        d_ff=get("intermediate_size"),
        rope_base=float(rope.get("rope_theta", get("rope_theta", 10000.0))),
        eps=float(get("rms_norm_eps")), tied=bool(get("tie_word_embeddings", False)))
