"""The model's configuration and its one shape table (chapter 7).

:func:`param_shapes` lists every parameter of the GPT by name, in order. That single table
initialises the tiny models of the book (:func:`init_params`), checks weights handed to the
forward pass (:func:`check_params`) and counts GPT-2 small to the digit
(:func:`count_params`, :func:`count_breakdown`), so a hand count is always checked by code.

Weights are stored [in, out], so every projection is ``x @ W``. The token table doubles as
the output head (tied weights): logits = x @ tok_emb^T.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ._validate import (
    check_divisible,
    check_keys,
    check_positive_int,
    check_shape,
    resolve,
    validated,
)


@dataclass(frozen=True)
class GPTConfig:
    """The sizes of a GPT, in the book's letters.

    V vocabulary size, ctx maximum context, d model width, L blocks, h heads per block,
    d_ff MLP width (``None`` means the usual 4d), tied: whether the output head reuses the
    token table (True for GPT-2; False adds a separate head of V x d parameters).
    attn_only: blocks without an MLP (and its LayerNorm), x = x + Attn(LN1(x)) alone, the
    small models in which induction heads are easiest to study (Elhage et al., 2021); the
    shape table then has no ln2, W_1, b_1, W_2, b_2, and d_ff is unused.
    Impossible shapes are rejected when the config is made, not deep inside a forward pass.
    """

    V: int
    ctx: int
    d: int
    L: int
    h: int
    d_ff: int | None = None
    tied: bool = True
    attn_only: bool = False

    def __post_init__(self) -> None:
        for name in ("V", "ctx", "d", "L", "h"):
            check_positive_int(getattr(self, name), f"cfg.{name}")
        if self.d_ff is None:
            # Frozen dataclass: fill in the default through object.__setattr__, once.
            object.__setattr__(self, "d_ff", 4 * self.d)
        check_positive_int(self.d_ff, "cfg.d_ff")
        check_divisible("cfg", self.d, self.h)
        if not isinstance(self.tied, bool):
            raise ValueError(f"cfg.tied: expected True or False, got {self.tied!r}")
        if not isinstance(self.attn_only, bool):
            raise ValueError(f"cfg.attn_only: expected True or False, got {self.attn_only!r}")

    @property
    def d_head(self) -> int:
        """Width of one head, d / h."""
        return self.d // self.h

    def __repr__(self) -> str:
        # attn_only is shown only when it is on: a GPT's config prints as it always has.
        fields = "V ctx d L h d_ff tied".split() + ["attn_only"] * self.attn_only
        return f"GPTConfig({', '.join(f'{k}={getattr(self, k)!r}' for k in fields)})"


GPT2_SMALL = GPTConfig(V=50257, ctx=1024, d=768, L=12, h=12, d_ff=3072)
TOY = GPTConfig(V=65, ctx=64, d=64, L=2, h=4, d_ff=256)
BABY_GPT = GPTConfig(V=65, ctx=256, d=384, L=6, h=6, d_ff=1536)

# The shape table in the book's letters. Order matters: it is the order of initialisation.
_EMBEDDING_SPECS = {"tok_emb": "[V, d]", "pos_emb": "[ctx, d]"}
_BLOCK_SPECS = {
    "ln1_g": "[d]", "ln1_b": "[d]",
    "W_qkv": "[d, 3d]", "b_qkv": "[3d]",
    "W_o": "[d, d]", "b_o": "[d]",
    "ln2_g": "[d]", "ln2_b": "[d]",
    "W_1": "[d, d_ff]", "b_1": "[d_ff]",
    "W_2": "[d_ff, d]", "b_2": "[d]",
}
# What an attention-only block (cfg.attn_only) leaves out: the MLP and the LayerNorm before it.
MLP_NAMES = ("ln2_g", "ln2_b", "W_1", "b_1", "W_2", "b_2")
_FINAL_SPECS = {"lnf_g": "[d]", "lnf_b": "[d]"}
_HEAD_SPECS = {"head": "[V, d]"}     # only when untied; stored like tok_emb

# The shape table's biases by short name: the four of the linear layers, then the LayerNorms'
# shifts. ``count_params(cfg, without=BIAS_NAMES)`` counts the same model built without any
# bias, as nanoGPT's ``bias=False`` builds it.
LINEAR_BIAS_NAMES = ("b_qkv", "b_o", "b_1", "b_2")
BIAS_NAMES = (*LINEAR_BIAS_NAMES, "ln1_b", "ln2_b", "lnf_b")


# ---- the mechanism behind every shape table: this GPT's and anatomy.modern's Llama's ------


def short_name(name: str) -> str:
    """A parameter's name inside its block: "blocks.3.W_qkv" -> "W_qkv", "tok_emb" as is."""
    return name.rsplit(".", 1)[-1]


def resolve_table(specs: Mapping[str, str], sizes: Mapping[str, int]
                  ) -> dict[str, tuple[int, ...]]:
    """A shape table in numbers: every spec in letters resolved with ``sizes``, in order."""
    return {name: resolve(spec, **sizes) for name, spec in specs.items()}


def count_table(shapes: Mapping[str, tuple[int, ...]], without: Iterable[str] = ()) -> int:
    """The numbers in a shape table, leaving out entries whose short name is in ``without``."""
    return sum(math.prod(shape) for name, shape in shapes.items()
               if short_name(name) not in without)


def check_table(params: Mapping[str, np.ndarray], specs: Mapping[str, str],
                sizes: Mapping[str, int], name: str = "params") -> None:
    """Every name of the shape table present, nothing else, and every shape right."""
    check_keys(params, name, specs)
    for key, spec in specs.items():
        check_shape(params[key], f"{name}[{key!r}]", spec, **sizes)


def draw_table(shapes: Mapping[str, tuple[int, ...]], rng: np.random.Generator | int, L: int,
               residual: Iterable[str], dtype: np.dtype | type = np.float64
               ) -> dict[str, np.ndarray]:
    """Random weights in the GPT-2 style, drawn in the table's order.

    Gains (``*_g``) 1; biases (``b_*``) and LayerNorm shifts (``*_b``) 0; the matrices named
    in ``residual``, which write into the residual stream, N(0, (0.02 / sqrt(2L))^2); every
    other matrix and table N(0, 0.02^2). Draws are made in float64 and then cast, so the same
    seed gives the same model in every dtype.
    """
    rng = np.random.default_rng(rng)
    residual, residual_std = set(residual), 0.02 / math.sqrt(2 * L)
    params = {}
    for name, shape in shapes.items():
        short = short_name(name)
        if short.endswith("_g"):
            value = np.ones(shape)
        elif short.startswith("b_") or short.endswith("_b"):
            value = np.zeros(shape)
        elif short in residual:
            value = rng.standard_normal(shape) * residual_std
        else:
            value = rng.standard_normal(shape) * 0.02
        params[name] = value.astype(dtype)
    return params


# ---- this GPT's shape table -----------------------------------------------------------------


def param_specs(cfg: GPTConfig) -> dict[str, str]:
    """Every parameter's name and its shape in letters, e.g. "blocks.0.W_qkv": "[d, 3d]"."""
    specs = dict(_EMBEDDING_SPECS)
    block = {name: spec for name, spec in _BLOCK_SPECS.items()
             if not (cfg.attn_only and name in MLP_NAMES)}
    for i in range(cfg.L):
        specs.update({f"blocks.{i}.{name}": spec for name, spec in block.items()})
    specs.update(_FINAL_SPECS)
    if not cfg.tied:
        specs.update(_HEAD_SPECS)
    return specs


def _sizes(cfg: GPTConfig) -> dict[str, int]:
    return {"V": cfg.V, "ctx": cfg.ctx, "d": cfg.d, "d_ff": cfg.d_ff}


def param_shapes(cfg: GPTConfig) -> dict[str, tuple[int, ...]]:
    """THE shape table: every parameter's flat name and shape, in order.

    tok_emb (V, d), pos_emb (ctx, d); per block i: blocks.{i}.ln1_g,
    ln1_b (d,), W_qkv (d, 3d), b_qkv (3d,), W_o (d, d), b_o (d,), ln2_g,
    ln2_b (d,), W_1 (d, d_ff), b_1 (d_ff,), W_2 (d_ff, d), b_2 (d,);
    then lnf_g, lnf_b (d,); and head (V, d) only if untied.
    """
    sizes = _sizes(cfg)
    specs = param_specs(cfg)
    return {name: resolve(spec, **sizes) for name, spec in specs.items()}


def count_params(cfg: GPTConfig, *, without: Iterable[str] = ()) -> int:
    """Total number of parameters, summed over the shape table.

    ``without`` leaves out entries by their short name (``"b_qkv"`` drops the QKV bias of
    every block; ``("tok_emb", "pos_emb")`` gives the non-embedding count), which is how the
    chapter explains other published counts of the "same" model.
    """
    without = set(without) if not isinstance(without, str) else {without}
    known = {*_EMBEDDING_SPECS, *_BLOCK_SPECS, *_FINAL_SPECS, *_HEAD_SPECS}
    unknown = sorted(without - known)
    if unknown:
        raise ValueError(f"without: unknown parameter name {unknown[0]!r} (expected short "
                         f"names from the shape table: {', '.join(sorted(known))})")
    return count_table(param_shapes(cfg), without)


def _positive_sizes(args: dict, sizes: dict) -> None:
    """The ``where=`` check of the closed forms: every size a positive integer."""
    for name, value in args.items():
        check_positive_int(value, name)


@validated(where=_positive_sizes)
def count_block(d: int, d_ff: int) -> int:
    """Parameters of one pre-norm block, in closed form (chapter 7, exercise 7.1).

    Attention 4d^2 + 4d, MLP 2 d d_ff + d_ff + d, two LayerNorms 4d.
    """
    attention = d * 3 * d + 3 * d + d * d + d          # W_qkv, b_qkv, W_o, b_o
    mlp = d * d_ff + d_ff + d_ff * d + d               # W_1, b_1, W_2, b_2
    norms = 2 * (d + d)                                # ln1 and ln2, each a gain g and a shift b
    return attention + mlp + norms


@validated(where=_positive_sizes)
def count_non_embedding(d: int, L: int) -> int:
    """Parameters outside the two tables of a GPT with d_ff = 4d: L blocks and the final
    LayerNorm, i.e. ``count_params(cfg, without=("tok_emb", "pos_emb"))`` of a tied model
    (Kaplan et al. 2020's non-embedding count; their approximation N ~ 12 L d^2 also drops
    biases and other sub-leading terms)."""
    return L * count_block(d, 4 * d) + 2 * d


SHAPE_ASPECT = (32, 256)     # d / L of the shapes exercise 7.5 accepts (GPT-2 small has 64)


def _shape_args(args: dict, sizes: dict) -> None:
    N = args["N"]
    if isinstance(N, bool) or not isinstance(N, (int, float)) or not N >= 1e5:
        raise ValueError(f"N: expected a number of parameters of at least 1e5, got {N!r}")
    check_positive_int(args["d_head"], "d_head")


@validated(where=_shape_args)
def shape_for(N: float, d_head: int = 64) -> tuple[int, int]:
    """A width d (a multiple of d_head) and depth L for a GPT of about N non-embedding
    parameters, with the aspect ratio d / L within ``SHAPE_ASPECT`` (exercise 7.5).

    12 L d^2 ~ N and d = r L give d ~ (r N / 12)^(1/3) for the aspect ratio r; every width
    the allowed ratios reach is tried with the depth that comes closest to N, and the pair
    whose count is nearest N wins.
    """
    low, high = ((r * N / 12) ** (1 / 3) for r in SHAPE_ASPECT)
    best = None
    for d in range(d_head * max(1, int(low // d_head)), int(high) + 2 * d_head, d_head):
        for L in {max(1, math.floor(N / count_block(d, 4 * d))),
                  math.ceil(N / count_block(d, 4 * d))}:
            if not SHAPE_ASPECT[0] <= d / L <= SHAPE_ASPECT[1]:
                continue
            miss = abs(count_non_embedding(d, L) / N - 1)
            if best is None or miss < best[0]:
                best = (miss, d, L)
    if best is None:
        raise ValueError(f"N: no width that is a multiple of {d_head} reaches N = {N:,.0f} "
                         f"with d / L in {SHAPE_ASPECT}")
    return best[1], best[2]


def _module(args: dict, sizes: dict) -> None:
    if not callable(getattr(args["model"], "parameters", None)):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(args['model']).__name__}")


@validated(where=_module)
def count_module_params(model) -> int:
    """Parameters of a PyTorch module (``torch.nn.Module``), each tensor once.

    ``parameters()`` yields a tensor that two modules share (a head tied to the token table)
    only once, and leaves out buffers, which are state but not learned (a registered causal
    mask, BatchNorm's running statistics). Frozen parameters (requires_grad False) count.
    """
    return sum(p.numel() for p in model.parameters())


def count_approx(cfg: GPTConfig) -> int:
    """The rule of thumb N ~ L (4d^2 + 2 d d_ff) + V d + ctx d, i.e. 12 L d^2 + V d + ctx d
    when d_ff = 4d: only the matrices and the tables, no biases or LayerNorms (an untied
    head adds another V d)."""
    per_block = 4 * cfg.d**2 + 2 * cfg.d * cfg.d_ff
    tables = (cfg.V + cfg.ctx + (0 if cfg.tied else cfg.V)) * cfg.d
    return cfg.L * per_block + tables


class ShapeRow(NamedTuple):
    """One line of the printed shape table: a per-block entry appears once, with times = L."""

    name: str
    spec: str
    shape: tuple[int, ...]
    times: int

    @property
    def count(self) -> int:
        return math.prod(self.shape) * self.times


def shape_table(cfg: GPTConfig) -> list[ShapeRow]:
    """The shape table folded for printing: tok_emb, pos_emb, the 12 entries of a block
    (each counted L times), the final LayerNorm and (if untied) the head.

    The counts sum to :func:`count_params`.
    """
    specs, shapes = param_specs(cfg), param_shapes(cfg)
    rows = []
    for name, spec in specs.items():
        if name.startswith("blocks.") and not name.startswith("blocks.0."):
            continue
        block = name.startswith("blocks.0.")
        rows.append(ShapeRow(short_name(name) if block else name, spec, shapes[name],
                             cfg.L if block else 1))
    return rows


def count_by_kind(cfg: GPTConfig) -> dict[str, int]:
    """Where the parameters live: "embeddings" (token + position tables), "attention" and
    "MLP" (all blocks, biases included), "LayerNorms" (all of them, the final one included),
    "head" (only if untied) and "total"."""
    rows = count_breakdown(cfg)
    kinds = {
        "embeddings": rows["token embedding"] + rows["position embedding"],
        "attention": cfg.L * rows["attention per block"],
        "MLP": cfg.L * rows["MLP per block"],
        "LayerNorms": cfg.L * rows["LayerNorms per block"] + rows["final LayerNorm"],
    }
    if not cfg.tied:
        kinds["head"] = rows["untied head"]
    kinds["total"] = rows["total"]
    return kinds


def count_breakdown(cfg: GPTConfig) -> dict[str, int]:
    """The rows of chapter 7's count, each summed from the shape table.

    Keys: "attention per block", "MLP per block", "LayerNorms per block", "one block",
    "all blocks", "token embedding", "position embedding", "final LayerNorm",
    "untied head" (only if untied) and "total".
    """
    size = {name: math.prod(shape) for name, shape in param_shapes(cfg).items()}
    one = {name: size.get(f"blocks.0.{name}", 0) for name in _BLOCK_SPECS}   # 0: attn_only
    rows = {
        "attention per block": one["W_qkv"] + one["b_qkv"] + one["W_o"] + one["b_o"],
        "MLP per block": one["W_1"] + one["b_1"] + one["W_2"] + one["b_2"],
        "LayerNorms per block": one["ln1_g"] + one["ln1_b"] + one["ln2_g"] + one["ln2_b"],
        "one block": sum(one.values()),
        "all blocks": sum(n for name, n in size.items() if name.startswith("blocks.")),
        "token embedding": size["tok_emb"],
        "position embedding": size["pos_emb"],
        "final LayerNorm": size["lnf_g"] + size["lnf_b"],
    }
    if not cfg.tied:
        rows["untied head"] = size["head"]
    rows["total"] = sum(size.values())
    return rows


def init_params(cfg: GPTConfig, rng: np.random.Generator | int,
                dtype: np.dtype | type = np.float64) -> dict[str, np.ndarray]:
    """Random weights in the GPT-2 style, drawn in shape-table order.

    nanoGPT's and Hugging Face's version of GPT-2's recipe: matrices and both embedding
    tables ~ N(0, 0.02^2) (OpenAI's released code draws the position table at 0.01); the two
    projections that write into the residual stream (W_o and W_2) get std 0.02 / sqrt(2L), as
    the GPT-2 paper describes, so that the total variance the 2L writes add does not grow with
    the number of blocks L (the stream still grows from block to block); biases 0;
    LayerNorm g = 1, b = 0. Draws are made in float64 and then cast, so the same seed gives
    the same model in every dtype.

    ``rng`` is a ``np.random.Generator`` (or a seed for one).
    """
    return draw_table(param_shapes(cfg), rng, cfg.L, ("W_o", "W_2"), dtype)


def check_params(params: Mapping[str, np.ndarray], cfg: GPTConfig) -> None:
    """Every name of the shape table present, nothing else, and every shape right."""
    check_table(params, param_specs(cfg), _sizes(cfg))


def block_params(params: Mapping[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    """Block i's weights under their short names (``blocks.{i}.W_qkv`` -> ``W_qkv``)."""
    prefix = f"blocks.{i}."
    p = {name[len(prefix):]: value for name, value in params.items()
         if name.startswith(prefix)}
    if not p:
        L = len({name.split(".")[1] for name in params if name.startswith("blocks.")})
        raise ValueError(f"i: expected a block index in [0, L) = [0, {L}), got {i!r}")
    return p
