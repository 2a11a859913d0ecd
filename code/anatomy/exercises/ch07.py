"""Chapter 7 exercises: a block's parameter count, the KV cache's bytes, and (the challenge)
the exact matmul FLOPs of one forward pass."""

from __future__ import annotations

import math
import numbers

from ..flops import forward_matmul_flops, kv_cache_bytes
from ..params import GPT2_SMALL, GPTConfig, count_block, count_params
from . import register
from ._core import Exercise, Wrong, run


def _as_number(got, *, case: str) -> float:
    """The reader's answer as one finite number, or an explanation of why it is not one."""
    if got is None:
        raise Wrong(f"on {case}, the result is None: did you forget to return it?")
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        raise Wrong(f"on {case}, the result is a {type(got).__name__}; expected one number "
                    "(an int)")
    if not math.isfinite(got):
        raise Wrong(f"on {case}, the result is {got}; expected a finite count")
    return got


# ---- 7.1 the parameters of one block ------------------------------------------------------


def _block_diagnosis(got: float, d: int, d_ff: int, case: str) -> None:
    want = count_block(d, d_ff)
    if got == want:
        return
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
        2 * d: "one LayerNorm short (2d): a pre-norm block has two, ln1 before attention and "
               "ln2 before the MLP, each with g and b",
        3 * d: "b_qkv (3d) is missing: the fused projection W_qkv [d, 3d] has a bias of 3d",
        d_ff + d: "the MLP biases are missing: b_1 (d_ff) and b_2 (d)",
    }
    if short in known:
        raise Wrong(f"on {case}, you got {got:,.0f}, {short:,.0f} short of {want:,}: "
                    + known[short])
    raise Wrong(f"on {case}, you got {got:,.0f} but a block has {want:,} ({parts})")


def _diagnose_block(fn, rng) -> None:
    case = "d = 512, d_ff = 2048"
    _block_diagnosis(_as_number(run(fn, 512, 2048, case=case), case=case), 512, 2048, case)

    case = "d = 64, d_ff = 100 (d_ff is not 4d)"
    got = _as_number(run(fn, 64, 100, case=case), case=case)
    if got == count_block(64, 256) != count_block(64, 100):
        raise Wrong(f"on {case}, you got {got:,.0f}, the count for d_ff = 4d = 256: use the "
                    "d_ff argument, not 4d")
    _block_diagnosis(got, 64, 100, case)

    case = "GPT-2 small, d = 768, d_ff = 3072"
    _block_diagnosis(_as_number(run(fn, 768, 3072, case=case), case=case), 768, 3072, case)


def _no_biases(d, d_ff):
    return 4 * d * d + 2 * d * d_ff + 4 * d


def _no_layernorms(d, d_ff):
    return 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d


def _one_layernorm(d, d_ff):
    return 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d + 2 * d


_D, _DFF = 512, 2048          # the worked case of the exercise

register(Exercise(
    id="7.1",
    title="The parameters of one block",
    kind="implement",
    reference=count_block,
    diagnose=_diagnose_block,
    success=(f"d = {_D}, d_ff = {_DFF}: attention {4 * _D**2 + 4 * _D:,} + MLP "
             f"{2 * _D * _DFF + _DFF + _D:,} + LayerNorms {4 * _D:,} = {count_block(_D, _DFF):,}; "
             "also right for d_ff != 4d and for GPT-2 small"),
    wrong_answers=(
        (_no_biases, "every bias is missing"),
        (_no_layernorms, "two LayerNorms"),
        (_one_layernorm, "one LayerNorm short"),
    ),
))

# ---- 7.2 the KV cache in bytes ------------------------------------------------------------

# Every factor of the formula is different here (L = 6, h = 8, B = 3, 4 bytes, ctx / T = 5.12),
# so a missing factor can be named from the ratio alone.
_ODD = GPTConfig(V=100, ctx=512, d=256, L=6, h=8, d_ff=1024)


def _diagnose_kv(fn, rng) -> None:
    cases = ((_ODD, 100, 3, 4, "L = 6, h = 8, d = 256, T = 100 (ctx = 512), B = 3, fp32"),
             (GPT2_SMALL, 1024, 1, 2, "GPT-2 small, T = 1024, B = 1, fp16"),
             (GPT2_SMALL, 1, 2, 2, "GPT-2 small, a single token (T = 1), B = 2, fp16"))
    for cfg, T, B, nbytes, case in cases:
        got = _as_number(run(fn, cfg, T, B=B, bytes_per_value=nbytes, case=case), case=case)
        want = kv_cache_bytes(cfg, T, B, nbytes)
        if got == want:
            continue
        ratio = got / want
        known = {
            0.5: "half the cache: every token keeps both a key and a value (the factor 2)",
            1 / cfg.L: f"one layer's worth: each of the L = {cfg.L} blocks keeps its own keys "
                       "and values",
            1 / cfg.h: f"a factor h = {cfg.h} too small: each head caches d_head values per "
                       "token, so a layer caches h x d_head = d",
            1 / nbytes: "a count of values, not bytes: multiply by bytes_per_value",
            8.0: "bits, not bytes: bytes_per_value is already in bytes",
            1 / B: f"one sequence only: multiply by the batch B = {B}",
            cfg.ctx / T: "sized for cfg.ctx, the longest allowed context; the cache holds the "
                         "T tokens seen so far, not ctx",
        }
        for r, why in known.items():
            if math.isclose(ratio, r, rel_tol=1e-9):
                raise Wrong(f"on {case}, you got {got:,.0f} bytes, {ratio:.3g} x the right "
                            f"{want:,}: {why}")
        raise Wrong(f"on {case}, you got {got:,.0f} bytes but the cache takes 2 x L x T x d x "
                    f"B x bytes = {want:,}")


def _keys_only(cfg, T, B=1, bytes_per_value=2):
    return cfg.L * T * cfg.d * B * bytes_per_value


def _one_layer(cfg, T, B=1, bytes_per_value=2):
    return 2 * T * cfg.d * B * bytes_per_value


def _uses_ctx(cfg, T, B=1, bytes_per_value=2):
    return 2 * cfg.L * cfg.ctx * cfg.d * B * bytes_per_value


register(Exercise(
    id="7.2",
    title="KV-cache bytes",
    kind="implement",
    reference=kv_cache_bytes,
    diagnose=_diagnose_kv,
    success="2 x L x T x d x B x bytes, for fp32 and fp16, a batch and T = 1",
    wrong_answers=(
        (_keys_only, "both a key and a value"),
        (_one_layer, "one layer's worth"),
        (_uses_ctx, "not ctx"),
    ),
))

# ---- 7.C challenge: the exact matmul FLOPs of one forward pass ----------------------------

_SMALL = GPTConfig(V=100, ctx=64, d=32, L=3, h=4, d_ff=96)


def _parts(cfg: GPTConfig, T: int, B: int) -> dict[str, int]:
    d = cfg.d
    return {"weights": 2 * B * T * cfg.L * (3 * d * d + d * d + 2 * d * cfg.d_ff),
            "head": 2 * B * T * d * cfg.V,
            "attention": 4 * B * cfg.L * T * T * d}


def _diagnose_flops(fn, rng) -> None:
    cases = ((_SMALL, 10, 3, "V = 100, d = 32, L = 3, h = 4, d_ff = 96, T = 10, B = 3"),
             (_SMALL, 1, 1, "the same model, a single token (T = 1)"),
             (GPT2_SMALL, 1024, 1, "GPT-2 small, T = 1024"))
    for cfg, T, B, case in cases:
        got = _as_number(run(fn, cfg, T, B=B, case=case), case=case)
        want = forward_matmul_flops(cfg, T, B)
        if got == want:
            continue
        p = _parts(cfg, T, B)
        W, H, A = p["weights"], p["head"], p["attention"]
        causal = 4 * B * cfg.L * cfg.d * T * (T + 1) // 2
        known = {
            want / 2: "half: you counted multiply-adds; each is 2 FLOPs (a matmul "
                      "[rows, in] @ [in, out] costs 2 x rows x in x out)",
            W + A: "the head is missing: logits = x @ tok_emb^T costs 2 d V per token even "
                   "though a tied head has no parameters of its own",
            W + H: "attention's own products are missing: q k^T and weights @ v cost 2 T d "
                   "each per token per layer",
            W + H + A // 2: "half of attention: count both q k^T and weights @ v",
            W + H + causal: "only the causal half of the score table: a dense pass computes "
                            "the full T x T table (then masks it), and that is what runs",
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


def _no_head(cfg, T, B=1):
    return forward_matmul_flops(cfg, T, B) - 2 * B * T * cfg.d * cfg.V


def _macs(cfg, T, B=1):
    return forward_matmul_flops(cfg, T, B) // 2


def _causal_half(cfg, T, B=1):
    dense = 4 * B * cfg.L * T * T * cfg.d
    return forward_matmul_flops(cfg, T, B) - dense + 4 * B * cfg.L * cfg.d * T * (T + 1) // 2


register(Exercise(
    id="7.C",
    title="Challenge: the matmul FLOPs of one forward pass, exactly",
    kind="implement",
    reference=forward_matmul_flops,
    diagnose=_diagnose_flops,
    success="weights, head and the full T x T attention, for a batch, T = 1 and GPT-2 small",
    wrong_answers=(
        (_no_head, "the head is missing"),
        (_macs, "multiply-adds"),
        (_causal_half, "only the causal half"),
    ),
))
