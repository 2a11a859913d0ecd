"""Chapter 7 exercises: a block's parameter count (implement), the largest batch whose KV
caches fit beside the weights (implement), which changes move N (predict), a PyTorch count
that is too large (debug), a shape for a parameter budget (construct), and (the challenge) the
exact matmul FLOPs of one forward pass."""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..flops import forward_matmul_flops, kv_cache_bytes, max_batch, weight_bytes
from ..params import (
    GPT2_SMALL,
    SHAPE_ASPECT,
    GPTConfig,
    count_block,
    count_module_params,
    count_non_embedding,
    count_params,
    shape_for,
)
from . import register
from ._core import Exercise, Wrong, other_convention, run


def _as_number(got, *, case: str) -> float:
    """The reader's answer as one finite number, or an explanation of why it is not one."""
    if got is None:
        raise Wrong(f"on {case}, the result is None: did you forget to return it?")
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, numbers.Real):
        raise Wrong(f"on {case}, the result is a {type(got).__name__}; expected one number "
                    "(an int)")
    if not math.isfinite(got):
        raise Wrong(f"on {case}, the result is {got}; expected a finite count")
    return got


def _random_config(rng: np.random.Generator) -> GPTConfig:
    """A GPT of random sizes (d = h x d_head, d_ff not always 4d), small enough to be quick."""
    h, d_head = int(rng.integers(1, 17)), int(rng.choice([8, 16, 32, 64, 128]))
    d_ff = int(rng.choice([4 * h * d_head, int(rng.integers(1, 8193))]))
    return GPTConfig(V=int(rng.integers(2, 120_000)), ctx=int(rng.integers(1, 4097)),
                     d=h * d_head, L=int(rng.integers(1, 97)), h=h, d_ff=d_ff)


def _given_only(**kwargs: int) -> dict[str, int]:
    """Keyword arguments without those set to 0, which the check leaves to their defaults."""
    return {name: value for name, value in kwargs.items() if value}


def _describe(cfg: GPTConfig) -> str:
    return (f"V = {cfg.V}, ctx = {cfg.ctx}, d = {cfg.d}, L = {cfg.L}, h = {cfg.h}, "
            f"d_ff = {cfg.d_ff}")


# ---- 7.1 the parameters of one block (implement) ------------------------------------------


def _block_cases(rng) -> list[tuple[str, int, int]]:
    cases = [("d = 512, d_ff = 2048", 512, 2048),
             ("d = 64, d_ff = 100 (d_ff is not 4d)", 64, 100),
             ("GPT-2 small, d = 768, d_ff = 3072", 768, 3072),
             ("d = 1, d_ff = 1", 1, 1)]
    for _ in range(2):
        d, d_ff = int(rng.integers(2, 8193)), int(rng.integers(2, 32769))
        cases.append((f"fresh random d = {d}, d_ff = {d_ff}", d, d_ff))
    return cases


def _block_diagnosis(got: float, d: int, d_ff: int, case: str) -> None:
    want = count_block(d, d_ff)
    if got == want:
        return
    if d_ff != 4 * d and got == count_block(d, 4 * d):
        raise Wrong(f"on {case}, you got {got:,.0f}, the count for d_ff = 4d = {4 * d}: use "
                    "the d_ff argument, not 4d")
    short = want - got
    parts = (f"attention 4d^2 + 4d = {4 * d * d + 4 * d:,}, MLP 2 d d_ff + d_ff + d = "
             f"{2 * d * d_ff + d_ff + d:,}, LayerNorms 4d = {4 * d:,}")
    known = {
        5 * d + d_ff: "every bias is missing (b_qkv 3d, b_o d, b_1 d_ff, b_2 d): each linear "
                      "layer adds one bias per output",
        7 * d + d_ff: "every bias is missing, the LayerNorm shifts included: count b_qkv, b_o, "
                      "b_1, b_2 and each LayerNorm's b",
        4 * d: "that is the two LayerNorms (ln1 and ln2, each a gain g and a shift b of "
               "width d), or equally the attention biases b_qkv (3d) and b_o (d)",
        2 * d: "either one LayerNorm short (a pre-norm block has two, ln1 before attention "
               "and ln2 before the MLP, each with g and b of width d), or b_qkv counted as d "
               "instead of 3d (the fused projection W_qkv [d, 3d] has a bias per output)",
        3 * d: "either b_qkv (3d) is missing (the fused projection W_qkv [d, 3d] has a bias "
               "of 3d), or one LayerNorm (2d) and b_o (d) are",
        d_ff + d: "the MLP biases are missing: b_1 (d_ff) and b_2 (d)",
        2 * d * d: "two d x d matrices short: W_qkv is [d, 3d], three matrices' worth, and "
                   "W_o is a fourth",
    }
    if short in known:
        raise Wrong(f"on {case}, you got {got:,.0f}, {short:,.0f} short of {want:,}: "
                    + known[short])
    raise Wrong(f"on {case}, you got {got:,.0f} but a block has {want:,} ({parts})")


def _diagnose_block(fn, rng) -> None:
    for case, d, d_ff in _block_cases(rng):
        got = _as_number(run(fn, d, d_ff, case=case), case=case)
        _block_diagnosis(got, d, d_ff, case)


def _block_battery(rng):
    return [((d, d_ff), {}) for _, d, d_ff in _block_cases(rng)]


def _no_biases(d, d_ff):
    return 4 * d * d + 2 * d * d_ff + 4 * d


def _no_layernorms(d, d_ff):
    return 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d


def _one_layernorm(d, d_ff):
    return 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d + 2 * d


def _four_d(d, d_ff):
    return count_block(d, 4 * d)


def _b_qkv_as_d(d, d_ff):
    return count_block(d, d_ff) - 2 * d


_D, _DFF = 512, 2048          # the worked case of the exercise

register(Exercise(
    id="7.1",
    title="The parameters of one block",
    kind="implement",
    reference=count_block,
    diagnose=_diagnose_block,
    battery=_block_battery,
    rtol=0.0,
    atol=0.0,
    success=(f"d = {_D}, d_ff = {_DFF}: attention {4 * _D**2 + 4 * _D:,} + MLP "
             f"{2 * _D * _DFF + _DFF + _D:,} + LayerNorms {4 * _D:,} = {count_block(_D, _DFF):,}; "
             "also right for d_ff != 4d, GPT-2 small and fresh random sizes"),
    wrong_answers=(
        (_no_biases, "every bias is missing"),
        (_no_layernorms, "two LayerNorms"),
        (_one_layernorm, "one LayerNorm short"),
        (_four_d, "use the d_ff argument"),
        (_b_qkv_as_d, "b_qkv counted as d"),
    ),
))

# ---- 7.2 the largest batch that fits (implement) -------------------------------------------

# Every factor differs here (L = 6, h = 8, 4 bytes, ctx / T = 5.12), so each slip gives its
# own number.
_ODD = GPTConfig(V=100, ctx=512, d=256, L=6, h=8, d_ff=1024)


def _fits(cfg: GPTConfig, T: int, nbytes: int, B: int, extra: int) -> int:
    """Memory that holds the weights and exactly B caches of T tokens, plus extra bytes."""
    return weight_bytes(cfg, nbytes) + kv_cache_bytes(cfg, T, B, nbytes) + extra


def _batch_cases(rng) -> list[tuple[str, GPTConfig, int, int, int]]:
    """(case, cfg, T, memory, bytes); bytes = 0 stands for "left to its default" (2)."""
    cases = [("GPT-2 small, T = 1024, 16 GiB, bytes_per_value left to its default (2: fp16)",
              GPT2_SMALL, 1024, 16 * 2**30, 0),
             ("L = 6, h = 8, d = 256, T = 100 (ctx = 512), fp32, memory for exactly 5 "
              "sequences", _ODD, 100, _fits(_ODD, 100, 4, 5, 0), 4),
             ("L = 6, h = 8, d = 256, T = 100, fp32, memory one byte short of 3 sequences",
              _ODD, 100, _fits(_ODD, 100, 4, 3, -1), 4),
             ("GPT-2 small, T = 1, fp16, memory one byte short of the weights alone",
              GPT2_SMALL, 1, weight_bytes(GPT2_SMALL, 2) - 1, 2)]
    for _ in range(2):
        cfg = _random_config(rng)
        T, nbytes = int(rng.integers(1, cfg.ctx + 1)), int(rng.choice([1, 2, 4]))
        B = int(rng.integers(1, 200))
        extra = int(rng.integers(0, kv_cache_bytes(cfg, T, 1, nbytes)))
        cases.append((f"fresh random {_describe(cfg)}, T = {T}, {nbytes} bytes, memory for "
                      f"{B} sequences and {extra:,} bytes more", cfg, T,
                      _fits(cfg, T, nbytes, B, extra), nbytes))
    return cases


def _batch_slips(cfg: GPTConfig, T: int, memory: int, nbytes: int) -> list[tuple[int, str]]:
    """(the answer a slip gives, the slip) on one case."""
    w, kv = weight_bytes(cfg, nbytes), kv_cache_bytes(cfg, T, 1, nbytes)
    free = memory - w
    return [
        (memory // kv, "the weights are left out: they take their bytes before any cache"),
        (max(0, free // (kv // 2)), "half a cache per sequence: every token keeps both a key "
                                    "and a value"),
        (max(0, free // (kv // cfg.L)), f"one layer's cache per sequence: each of the "
                                        f"L = {cfg.L} blocks keeps its own"),
        (max(0, free // kv_cache_bytes(cfg, cfg.ctx, 1, nbytes)),
         "caches sized for cfg.ctx; a sequence of T tokens caches T, not ctx"),
        (max(0, (memory - weight_bytes(cfg, 2)) // kv_cache_bytes(cfg, T, 1, 2)),
         f"bytes_per_value is ignored (always 2): use the argument, {nbytes} bytes here"),
        (max(0, -(-free // kv)), "rounded up: a part of a sequence's cache does not serve it"),
        (max(0, free // kv - 1) if free % kv == 0 else None,
         "memory that holds the caches exactly is enough: B fits when its bytes are <= "
         "memory, not <"),
        (free // kv if free < 0 else None, "a negative batch: when not even one sequence "
                                           "fits, the answer is 0"),
    ]


def _diagnose_batch(fn, rng) -> None:
    for case, cfg, T, memory, nbytes in _batch_cases(rng):
        kwargs = _given_only(bytes_per_value=nbytes)
        got = _as_number(run(fn, cfg, T, memory, case=case, **kwargs), case=case)
        want = max_batch(cfg, T, memory, **kwargs)
        if got == want:
            continue
        if got != int(got):
            raise Wrong(f"on {case}, you got {got:,.3f} sequences; a batch is a whole number "
                        f"(round down: here {want:,})")
        named = [why for slip, why in _batch_slips(cfg, T, memory, nbytes or 2)
                 if slip is not None and slip == got and slip != want]
        if named:
            raise Wrong(f"on {case}, you got {got:,.0f}, not {want:,}: " + "; or ".join(named))
        raise Wrong(f"on {case}, you got {got:,.0f} but {want:,} sequences fit: the weights "
                    "once, then a cache of 2 x L x T x d numbers per sequence")


def _batch_battery(rng):
    return [((cfg, T, memory), _given_only(bytes_per_value=nbytes))
            for _, cfg, T, memory, nbytes in _batch_cases(rng)]


def _no_weights(cfg, T, memory, bytes_per_value=2):
    return memory // kv_cache_bytes(cfg, T, 1, bytes_per_value)


def _uses_ctx(cfg, T, memory, bytes_per_value=2):
    free = memory - weight_bytes(cfg, bytes_per_value)
    return max(0, free // kv_cache_bytes(cfg, cfg.ctx, 1, bytes_per_value))


def _two_bytes(cfg, T, memory, bytes_per_value=2):
    return max(0, (memory - weight_bytes(cfg, 2)) // kv_cache_bytes(cfg, T, 1, 2))


def _keys_only(cfg, T, memory, bytes_per_value=2):
    free = memory - weight_bytes(cfg, bytes_per_value)
    return max(0, free // (cfg.L * T * cfg.d * bytes_per_value))


def _rounds_up(cfg, T, memory, bytes_per_value=2):
    free = memory - weight_bytes(cfg, bytes_per_value)
    return max(0, math.ceil(free / kv_cache_bytes(cfg, T, 1, bytes_per_value)))


def _negative(cfg, T, memory, bytes_per_value=2):
    return (memory - weight_bytes(cfg, bytes_per_value)) // kv_cache_bytes(
        cfg, T, 1, bytes_per_value)


register(Exercise(
    id="7.2",
    title="The largest batch that fits",
    kind="implement",
    reference=max_batch,
    diagnose=_diagnose_batch,
    battery=_batch_battery,
    rtol=0.0,
    atol=0.0,
    success="the weights once and one cache per sequence, rounded down, for GPT-2 small, "
            "fp32, exact fits, too little memory and fresh random models",
    wrong_answers=(
        (_no_weights, "the weights are left out"),
        (_uses_ctx, "not ctx"),
        (_two_bytes, "bytes_per_value is ignored"),
        (_keys_only, "both a key and a value"),
        (_rounds_up, "rounded up"),
        (_negative, "a negative batch"),
    ),
))

# ---- 7.3 which changes move N? (predict) ---------------------------------------------------

_CHANGES = {
    "a": ("twice the heads with d fixed (h from 12 to 24)", False,
          "W_qkv stays [d, 3d] and W_o [d, d]; more heads only cut each into narrower "
          "slices (d_head = d / h halves)"),
    "b": ("twice the context (ctx from 1,024 to 2,048)", True,
          "the learned position table is [ctx, d]: ctx x d more parameters"),
    "c": ("ReLU in the MLP instead of GELU", False,
          "an activation function is applied elementwise and has no weights of its own"),
    "d": ("a wider MLP (d_ff from 4d to 8d)", True,
          "W_1 [d, d_ff], b_1 [d_ff] and W_2 [d_ff, d] all grow with d_ff"),
    "e": ("no causal mask (every token sees every other)", False,
          "the mask decides which scores are kept; it is computed, not learned"),
    "f": ("a larger vocabulary (V from 50,257 to 100,000)", True,
          "the token table, which is also the tied head, is [V, d]: V x d grows with V"),
    "g": ("training with AdamW instead of plain SGD", False,
          "AdamW keeps two running averages per weight, but they are optimizer state, "
          "not parameters of the model"),
}
_MOVES = frozenset(k for k, (_, moves, _) in _CHANGES.items() if moves)


class _Letters(frozenset):
    """A set of letters that prints in order (a plain set of strings prints in an order that
    changes from run to run)."""

    def __repr__(self) -> str:
        return "{" + ", ".join(map(repr, sorted(self))) + "}"


def _diagnose_moves(answer, rng) -> None:
    if isinstance(answer, str) or not hasattr(answer, "__iter__"):
        raise Wrong('answer with a set of letters, e.g. {"a", "c"}')
    try:
        letters = {str(x).strip().lower() for x in answer}
    except TypeError:
        raise Wrong('answer with a set of letters, e.g. {"a", "c"}') from None
    unknown = sorted(letters - set(_CHANGES))
    if unknown:
        raise Wrong(f"there is no change {unknown[0]!r}: the letters are a to g")
    problems = [f"{k}, {_CHANGES[k][0]}, leaves N alone: {_CHANGES[k][2]}"
                for k in sorted(letters - _MOVES)]
    problems += [f"{k}, {_CHANGES[k][0]}, changes N: {_CHANGES[k][2]}"
                 for k in sorted(_MOVES - letters)]
    if problems:
        raise Wrong("; ".join(problems))


register(Exercise(
    id="7.3",
    title="Which changes move N?",
    kind="predict",
    reference=_Letters({"b", "d", "f"}),
    diagnose=_diagnose_moves,
    success="b, d and f: only the shape table's sizes (ctx, d_ff, V) move N",
    explain="b, d and f. N is the sum of the shape table, whose entries are sized by V, ctx, "
            "d, L and d_ff (and a head if untied). The activation function and the mask have "
            "no weights, AdamW's running averages are optimizer state, and h only decides how "
            "d is cut into heads.",
    wrong_answers=(({"a", "b", "d", "f"}, "a, twice the heads"),
                   ({"d", "f"}, "b, twice the context"),
                   ({"b", "d", "f", "g"}, "g, training with AdamW"),
                   ({"b", "d"}, "f, a larger vocabulary"),
                   ("bdf", "answer with a set"),
                   ({"b", "d", "f", "z"}, "no change 'z'")),
))

# ---- 7.4 a PyTorch count that comes out too large (debug) ---------------------------------


def _given_count(model):
    """Parameters of a PyTorch model."""
    return sum(t.numel() for t in model.state_dict().values())


def _lm(V: int, d: int, ctx: int, *, tied: bool, mask: bool, frozen: bool = False):
    """A small language model from stock layers: tables, a LayerNorm, an MLP layer, a head;
    optionally tied (head.weight is tok_emb.weight), with a causal-mask buffer, or with a
    frozen position table."""
    import torch
    from torch import nn

    m = nn.Module()
    m.tok_emb, m.pos_emb = nn.Embedding(V, d), nn.Embedding(ctx, d)
    m.ln, m.mlp = nn.LayerNorm(d), nn.Linear(d, 4 * d)
    m.head = nn.Linear(d, V, bias=False)
    if tied:
        m.head.weight = m.tok_emb.weight              # one tensor, two names
    if mask:
        m.register_buffer("mask", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)))
    if frozen:
        m.pos_emb.weight.requires_grad_(False)
    return m


def _count_models(rng) -> list[tuple[str, object]]:
    import torch

    V, d, ctx = (int(n) for n in rng.integers((20, 4, 4), (200, 33, 33)))
    with torch.random.fork_rng(devices=[]):     # the reader's own random stream is untouched
        return [
            ("a tied model (head.weight is tok_emb.weight), V = 50, d = 16",
             _lm(50, 16, 8, tied=True, mask=False)),
            ("an untied model with a causal-mask buffer [ctx, ctx] = [8, 8]",
             _lm(50, 16, 8, tied=False, mask=True)),
            ("a tied model with a mask buffer and a frozen position table",
             _lm(30, 8, 12, tied=True, mask=True, frozen=True)),
            (f"a fresh random tied model with a mask buffer, V = {V}, d = {d}, ctx = {ctx}",
             _lm(V, d, ctx, tied=True, mask=True)),
            ("an untied model without buffers", _lm(40, 8, 4, tied=False, mask=False)),
        ]


def _diagnose_count(fn, rng) -> None:
    for case, model in _count_models(rng):
        got = _as_number(run(fn, model, case=case), case=case)
        want = count_module_params(model)
        if got == want:
            continue
        listed = sum(t.numel() for t in model.state_dict().values())
        buffers = sum(b.numel() for b in model.buffers())
        twice = listed - buffers - want               # tensors listed under a second name
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        if got == trainable:
            raise other_convention("you counted only the trainable parameters "
                                   "(requires_grad)", "every parameter, frozen ones included: "
                                   "a frozen table is still part of the model and its memory")
        why = []
        if twice and got in (want + twice, want + twice + buffers):
            why.append(f"the tied table is counted twice (+{twice:,}): it is one tensor held "
                       "by tok_emb and head, and state_dict() lists it under both names")
        if buffers and got in (want + buffers, want + twice + buffers):
            why.append(f"the mask buffer is counted (+{buffers:,}): buffers are saved state, "
                       "not learned parameters")
        raise Wrong(f"on {case}, you got {got:,.0f} but the model has {want:,} parameters"
                    + (": " + "; ".join(why) if why else ""))


def _count_battery(rng):
    return [((model,), {}) for _, model in _count_models(rng)]


def _dedup_state_dict(model):
    seen = {t.data_ptr(): t.numel() for t in model.state_dict().values()}
    return sum(seen.values())


def _trainable_only(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _named_parameters_unshared(model):
    return sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))


register(Exercise(
    id="7.4",
    title="A PyTorch count that comes out too large",
    kind="debug",
    reference=count_module_params,
    given=_given_count,
    diagnose=_diagnose_count,
    battery=_count_battery,
    rtol=0.0,
    atol=0.0,
    success="the library's count for tied and untied models, with and without a mask "
            "buffer, with a frozen table, and a fresh random model",
    explain="state_dict() is everything a checkpoint saves: a tensor shared by two modules "
            "appears under each name, and buffers such as a causal mask are in it too. "
            "parameters() yields every learned tensor once.",
    wrong_answers=(
        (_dedup_state_dict, "the mask buffer is counted"),
        (_trainable_only, "a different convention"),
        (_named_parameters_unshared, "the tied table is counted twice"),
    ),
))

# ---- 7.5 a shape for a parameter budget (construct) ---------------------------------------

_MISS = 0.10          # how far from the target the non-embedding count may be
_LOW, _HIGH = SHAPE_ASPECT


def _diagnose_shape(fn, rng) -> None:
    targets = [("N = 85,056,000 (GPT-2 small's non-embedding count)", 85_056_000),
               ("N = 1e9", 1e9), ("N = 1.2e7", 1.2e7)]
    for _ in range(3):
        N = float(10 ** rng.uniform(7, 11))
        targets.append((f"fresh random N = {N:.4g}", N))
    for case, N in targets:
        got = run(fn, N, case=case)
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            raise Wrong(f"on {case}, expected a pair (d, L), got a {type(got).__name__}")
        try:
            d, L = (int(x) for x in got)
        except (TypeError, ValueError):
            raise Wrong(f"on {case}, d and L must be whole numbers, got {got!r}") from None
        if (d, L) != tuple(got):
            raise Wrong(f"on {case}, d and L must be whole numbers, got {got!r}")
        if d < 1 or L < 1:
            raise Wrong(f"on {case}, d = {d} and L = {L} must both be at least 1")
        if d % 64:
            raise Wrong(f"on {case}, d = {d} is not a multiple of d_head = 64: the heads "
                        "h = d / 64 must come out whole")
        ratio = d / L
        if ratio < _LOW:
            raise Wrong(f"on {case}, (d, L) = ({d}, {L}) is too deep and narrow: d / L = "
                        f"{ratio:.1f}; keep d / L between {_LOW} and {_HIGH}")
        if ratio > _HIGH:
            raise Wrong(f"on {case}, (d, L) = ({d}, {L}) is too wide and shallow: d / L = "
                        f"{ratio:.0f}; keep d / L between {_LOW} and {_HIGH}")
        n = count_non_embedding(d, L)
        if abs(n / N - 1) > _MISS:
            raise Wrong(f"on {case}, (d, L) = ({d}, {L}) has {n:,} non-embedding parameters, "
                        f"{n / N - 1:+.0%} from N: a block holds about 12 d^2, so "
                        "12 L d^2 ~ N")


def _gpt2_small_always(N):
    return (768, 12)


def _one_block(N):
    return (64 * max(1, round(math.sqrt(N / 12) / 64)), 1)


def _any_width(N):
    d = (64 * N / 12) ** (1 / 3)                 # aspect 64, but d not rounded to 64
    return (int(d) | 1, max(1, round(N / (12 * d * d))))


def _forgot_twelve(N):
    d = 64 * max(1, round((64 * N) ** (1 / 3) / 64))    # N = L d^2 with d / L = 64
    return (d, max(1, round(N / d**2)))


register(Exercise(
    id="7.5",
    title="A shape for a parameter budget",
    kind="construct",
    reference=shape_for,
    diagnose=_diagnose_shape,
    success=f"within {_MISS:.0%} of every target, d a multiple of 64 and d / L between "
            f"{_LOW} and {_HIGH}, on fixed and fresh random budgets",
    explain="One answer of many: any (d, L) with d a multiple of 64, d / L in range and "
            "12 L d^2 close to N works; this one tries each allowed width with the depth "
            "that comes closest.",
    wrong_answers=(
        (_gpt2_small_always, "from N"),
        (_one_block, "too wide and shallow"),
        (_any_width, "not a multiple of d_head = 64"),
        (_forgot_twelve, "12 L d^2 ~ N"),
    ),
))

# ---- 7.C challenge: the exact matmul FLOPs of one forward pass (implement) ----------------

_SMALL = GPTConfig(V=100, ctx=64, d=32, L=3, h=4, d_ff=96)


def _flops_cases(rng) -> list[tuple[str, GPTConfig, int, int]]:
    cases = [("V = 100, d = 32, L = 3, h = 4, d_ff = 96, T = 10, B = 3", _SMALL, 10, 3),
             ("the same model, a single token (T = 1)", _SMALL, 1, 1),
             ("GPT-2 small, T = 1024, B left to its default (1)", GPT2_SMALL, 1024, 0)]
    for _ in range(2):
        cfg = _random_config(rng)
        T, B = int(rng.integers(1, cfg.ctx + 1)), int(rng.integers(1, 9))
        cases.append((f"fresh random {_describe(cfg)}, T = {T}, B = {B}", cfg, T, B))
    return cases


def _parts(cfg: GPTConfig, T: int, B: int) -> dict[str, int]:
    d = cfg.d
    return {"weights": 2 * B * T * cfg.L * (3 * d * d + d * d + 2 * d * cfg.d_ff),
            "head": 2 * B * T * d * cfg.V,
            "attention": 4 * B * cfg.L * T * T * d}


def _diagnose_flops(fn, rng) -> None:
    for case, cfg, T, B in _flops_cases(rng):
        got = _as_number(run(fn, cfg, T, case=case, **_given_only(B=B)), case=case)
        B = B or 1
        want = forward_matmul_flops(cfg, T, B)
        if got == want:
            continue
        p = _parts(cfg, T, B)
        W, H, A = p["weights"], p["head"], p["attention"]
        causal = 4 * B * cfg.L * cfg.d * T * (T + 1) // 2
        dense = ("the full T x T table that a dense masked pass computes and then "
                 "masks, which is what FlopCounterMode sees")
        if T > 1 and got == W + H + causal:
            raise other_convention(
                f"on {case}, you counted the causal half of the score table, diagonal "
                "included (T(T+1)/2 entries per head), the work a causal kernel needs",
                dense)
        if T > 1 and got == W + H + A // 2:
            # One number, two causes: T^2/2 entries for both products equals the full
            # table for one product, so the message names both.
            raise Wrong(
                f"on {case}, you got {got:,.0f} but it is {want:,}: attention came out at "
                "half. If you counted both q k^T and weights @ v on T^2/2 entries per "
                "head, as FlashAttention's benchmarks count a causal pass, that is a valid "
                f"other convention, but this exercise asks for {dense}; if you counted "
                "only one of the two products, count both")
        known = {
            want / 2: "half: you counted multiply-adds; each is 2 FLOPs (a matmul "
                      "[rows, in] @ [in, out] costs 2 x rows x in x out)",
            W + A: "the head is missing: logits = x @ tok_emb^T costs 2 d V per token even "
                   "though a tied head has no parameters of its own",
            W + H: "attention's own products are missing: q k^T and weights @ v cost 2 T d "
                   "each per token per layer",
            want / B: f"one sequence only: multiply by the batch B = {B}",
            2 * count_params(cfg) * B * T + A: "2N per token is the rule of thumb; the exact "
                   "count has no FLOPs for embedding lookups, biases or LayerNorms",
            W + H + A // cfg.h: f"attention counted for one head: each of the h = {cfg.h} "
                                "heads does its own products (2 T d_head each)",
        }
        if T > 1 and got in known:
            raise Wrong(f"on {case}, you got {got:,.0f} but it is {want:,}: {known[got]}")
        raise Wrong(f"on {case}, you got {got:,.0f} but it is {want:,} = weights {W:,} + "
                    f"head {H:,} + attention {A:,}")


def _flops_battery(rng):
    return [((cfg, T), _given_only(B=B)) for _, cfg, T, B in _flops_cases(rng)]


def _no_head(cfg, T, B=1):
    return forward_matmul_flops(cfg, T, B) - 2 * B * T * cfg.d * cfg.V


def _macs(cfg, T, B=1):
    return forward_matmul_flops(cfg, T, B) // 2


def _causal_half(cfg, T, B=1):
    dense = 4 * B * cfg.L * T * T * cfg.d
    return forward_matmul_flops(cfg, T, B) - dense + 4 * B * cfg.L * cfg.d * T * (T + 1) // 2


def _flash_half(cfg, T, B=1):
    # FlashAttention's benchmarks: a causal pass costs half the dense one, T^2 / 2
    return forward_matmul_flops(cfg, T, B) - 2 * B * cfg.L * T * T * cfg.d


register(Exercise(
    id="7.C",
    title="Challenge: the matmul FLOPs of one forward pass, exactly",
    kind="implement",
    reference=forward_matmul_flops,
    diagnose=_diagnose_flops,
    battery=_flops_battery,
    rtol=0.0,
    atol=0.0,
    success="weights, head and the full T x T attention, for a batch, T = 1, GPT-2 small "
            "and fresh random models",
    wrong_answers=(
        (_no_head, "the head is missing"),
        (_macs, "multiply-adds"),
        (_causal_half, "a different convention"),
        (_flash_half, "as FlashAttention's benchmarks count a causal pass"),
    ),
))
