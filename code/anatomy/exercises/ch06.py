"""Chapter 6 exercises: LayerNorm, GELU, and one pre-norm block (the challenge)."""

from __future__ import annotations

import math

import numpy as np

from ..blocks import block, gelu, layer_norm, mlp, relu
from ..heads import multi_head_attention
from ..params import GPTConfig, block_params, init_params
from . import register
from ._core import Exercise, Wrong, as_array, expect_close, expect_shape, run

# ---- 6.1 LayerNorm ----------------------------------------------------------------------

EPS = 1e-5


def _normalise(x, axis=-1, ddof=0, eps=EPS, eps_inside=True):
    """LayerNorm's core with one knob per classic mistake (no g, b)."""
    mean = x.mean(axis=axis, keepdims=True)
    var = x.var(axis=axis, ddof=ddof, keepdims=True)
    spread = np.sqrt(var + eps) if eps_inside else np.sqrt(var) + eps
    return (x - mean) / spread


def _layer_norm_mistakes(x, g, b) -> list[tuple[np.ndarray, str]]:
    """What common wrong versions return on (x, g, b), each with its explanation."""
    d = x.shape[-1]
    names = ["the sequence, T"] if x.ndim == 2 else ["the batch, B", "the sequence, T"]
    with np.errstate(all="ignore"):
        wrong_axes = [
            (_normalise(x, axis=axis) * g + b,
             f"the statistics were taken over axis {axis} ({name}): normalise over the last "
             "axis, each token's own d features (axis=-1)")
            for axis, name in enumerate(names)]
        others = [
            (_normalise(x, axis=None) * g + b,
             "the statistics were taken over the whole array: normalise each token over its "
             "own d features (axis=-1, keepdims=True)"),
            (_normalise(x, eps_inside=False) * g + b,
             "eps belongs inside the square root: divide by sqrt(var + eps), not sqrt(var) + eps"),
            (_normalise(x, eps=0.0) * g + b,
             "eps is missing: divide by sqrt(var + eps), which keeps a token of (nearly) equal "
             "features from dividing by zero"),
            (_normalise(x, ddof=1) * g + b,
             f"that is the unbiased variance (divide by d - 1 = {d - 1}): LayerNorm uses the "
             f"biased one (divide by d = {d}, ddof=0, np.var's default; torch's x.var() is "
             "unbiased by default)"),
            (_normalise(x),
             "the learned scale g and shift b were not applied: return x_hat * g + b"),
            ((_normalise(x) + b) * g, "shift after scaling: x_hat * g + b, not (x_hat + b) * g"),
            (_normalise(x) * b + g, "g is the scale and b the shift: x_hat * g + b"),
        ]
    return wrong_axes + others


def _diagnose_layer_norm(fn, rng) -> None:
    rng = np.random.default_rng(61)
    cases = [
        ("x [T, d] = [4, 6] with random g and b", rng.standard_normal((4, 6)) * 3 + 1),
        ("x of tiny spread (std 0.001), [T, d] = [4, 6]", rng.standard_normal((4, 6)) * 1e-3),
        ("a batch x [B, T, d] = [2, 3, 6]", rng.standard_normal((2, 3, 6)) * 2 - 1),
        ("a single token, x [T, d] = [1, 6]", rng.standard_normal((1, 6)) + 5),
    ]
    g, b = rng.standard_normal(6) + 1, rng.standard_normal(6)
    for case, x in cases:
        want = layer_norm(x, g, b)
        got = expect_shape(run(fn, x.copy(), g.copy(), b.copy(), case=case), want.shape,
                           case=case)
        if np.allclose(got, want, rtol=0, atol=1e-6):
            continue
        for wrong, message in _layer_norm_mistakes(x, g, b):
            if np.allclose(got, wrong, rtol=1e-7, atol=1e-9, equal_nan=True):
                raise Wrong(f"on {case}, {message}")
        expect_close(got, want, case=case, hint="each token's d features should end at "
                     "mean 0, variance 1 before g and b are applied")


def _ln_over_axis_0(x, g, b, eps=1e-5):
    mean, var = x.mean(axis=0, keepdims=True), x.var(axis=0, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


def _ln_eps_outside(x, g, b, eps=1e-5):
    mean, std = x.mean(axis=-1, keepdims=True), x.std(axis=-1, keepdims=True)
    return (x - mean) / (std + eps) * g + b


def _ln_unbiased(x, g, b, eps=1e-5):
    mean, var = x.mean(axis=-1, keepdims=True), x.var(axis=-1, ddof=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


register(Exercise(
    id="6.1",
    title="LayerNorm over each token's features",
    kind="implement",
    reference=layer_norm,
    diagnose=_diagnose_layer_norm,
    success="mean 0 and variance 1 over the last axis, eps inside the square root, biased "
            "variance, then * g + b; on a batch, on a tiny spread and on T = 1",
    wrong_answers=(
        (_ln_over_axis_0, "over axis 0"),
        (_ln_eps_outside, "eps belongs inside the square root"),
        (_ln_unbiased, "unbiased variance"),
    ),
))

# ---- 6.2 GELU ---------------------------------------------------------------------------

GELU_ATOL = 1e-5   # accepts sqrt(2/pi) rounded to 5 digits; the exact erf GELU is 4.7e-4 away


def _gelu_with(c: float, x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + c * x ** 3)))


def _gelu_erf(x):
    x = np.asarray(x, dtype=float)
    return 0.5 * x * (1 + np.vectorize(math.erf, otypes=[float])(x / math.sqrt(2)))


def _diagnose_gelu(fn, rng) -> None:
    xs = np.linspace(-5, 5, 201)
    case = "x = 201 points from -5 to 5"
    want = gelu(xs)
    got = expect_shape(run(fn, xs.copy(), case=case), want.shape, case=case)
    if not np.allclose(got, want, rtol=0, atol=GELU_ATOL):
        with np.errstate(all="ignore"):
            if np.allclose(got, relu(xs), atol=1e-9):
                raise Wrong(f"on {case}, that is ReLU: GELU is smooth at 0 and dips slightly "
                            "below zero for negative x (about -0.17 near x = -0.75)")
            gap = float(np.abs(_gelu_erf(xs) - want).max())
            if np.allclose(got, _gelu_erf(xs), atol=1e-9):
                raise Wrong(f"on {case}, that is the exact GELU, x * Phi(x) with erf: close "
                            f"(at most {gap:.1e} away) but not GPT-2's tanh approximation "
                            "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))")
            if np.allclose(got, _gelu_with(0.44715, xs), atol=1e-9):
                raise Wrong(f"on {case}, the cubic's constant is 0.044715, not 0.44715")
            if np.allclose(got, xs / (1 + np.exp(-1.702 * xs)), atol=1e-9):
                raise Wrong(f"on {case}, that is the sigmoid approximation x * sigmoid(1.702 x); "
                            "this exercise asks for the tanh form GPT-2 uses")
        expect_close(got, want, case=case, atol=GELU_ATOL,
                     hint="check 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))")

    x = np.array([[-30.0, -1.0, 0.0], [0.5, 2.0, 30.0]])
    case = "x [2, 3] with entries of +-30"
    got = expect_shape(run(fn, x.copy(), case=case), x.shape, case=case)
    expect_close(got, gelu(x), case=case, atol=GELU_ATOL,
                 hint="GELU is elementwise: any shape in, the same shape out; for large |x| it "
                      "is x (positive side) or 0 (negative side)")


def _gelu_wrong_constant(x):
    return _gelu_with(0.44715, np.asarray(x, dtype=float))


register(Exercise(
    id="6.2",
    title="GELU, GPT-2's tanh approximation",
    kind="implement",
    reference=gelu,
    diagnose=_diagnose_gelu,
    success=f"matches 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) within {GELU_ATOL:g}, "
            "elementwise on any shape",
    wrong_answers=(
        (relu, "that is ReLU"),
        (_gelu_erf, "not GPT-2's tanh approximation"),
        (_gelu_wrong_constant, "0.044715, not 0.44715"),
    ),
))

# ---- 6.C challenge: one pre-norm block ----------------------------------------------------

_CFG = GPTConfig(V=5, ctx=8, d=16, L=1, h=4)


def _random_block(seed: int) -> dict[str, np.ndarray]:
    """One block with every weight random, LayerNorm gains and biases included."""
    rng = np.random.default_rng(seed)
    p = block_params(init_params(_CFG, rng), 0)
    return {k: v + rng.standard_normal(v.shape) * (0.3 if k.startswith(("ln", "b_")) else 0.2)
            for k, v in p.items()}


def _attn(x, p, h, causal=True):
    return multi_head_attention(x, p["W_qkv"], p["W_o"], h, b_qkv=p["b_qkv"], b_o=p["b_o"],
                                causal=causal)[0]


def _mlp(x, p):
    return mlp(x, p["W_1"], p["b_1"], p["W_2"], p["b_2"])


def _post_norm_block(x, p, h):
    x = layer_norm(x + _attn(x, p, h), p["ln1_g"], p["ln1_b"])
    return layer_norm(x + _mlp(x, p), p["ln2_g"], p["ln2_b"])


def _no_residual_block(x, p, h):
    x = _attn(layer_norm(x, p["ln1_g"], p["ln1_b"]), p, h)
    return _mlp(layer_norm(x, p["ln2_g"], p["ln2_b"]), p)


def _parallel_block(x, p, h):
    return (x + _attn(layer_norm(x, p["ln1_g"], p["ln1_b"]), p, h)
            + _mlp(layer_norm(x, p["ln2_g"], p["ln2_b"]), p))


def _block_mistakes(x, p, h) -> list[tuple[np.ndarray, str]]:
    a1 = x + _attn(layer_norm(x, p["ln1_g"], p["ln1_b"]), p, h)
    no_attn_res = a1 - x
    swapped = {**p, "ln1_g": p["ln2_g"], "ln1_b": p["ln2_b"], "ln2_g": p["ln1_g"],
               "ln2_b": p["ln1_b"]}
    return [
        (_post_norm_block(x, p, h),
         "that is post-norm, LN(x + f(x)): in a pre-norm block LayerNorm goes on each "
         "sublayer's input, x = x + Attn(LN1(x)), and the sum is left unnormalised"),
        (_no_residual_block(x, p, h),
         "the residual connections are missing: each sublayer's output must be added to x "
         "(x = x + ...), the block writes a change to the stream, not a replacement"),
        (_mlp(layer_norm(a1, p["ln2_g"], p["ln2_b"]), p),
         "the MLP's residual is missing: return x + MLP(LN2(x)), not MLP(LN2(x))"),
        (no_attn_res + _mlp(layer_norm(no_attn_res, p["ln2_g"], p["ln2_b"]), p),
         "the attention's residual is missing: x = x + Attn(LN1(x)) before the MLP"),
        (_parallel_block(x, p, h),
         "the MLP read the block's input: it must read the stream after the attention's "
         "write, LN2(x + Attn(LN1(x)))"),
        (block(x, swapped, h),
         "the two LayerNorms are swapped: ln1_g, ln1_b before attention, ln2_g, ln2_b before "
         "the MLP"),
        (block(x, p, h, causal=False),
         "the attention is not causal: a GPT block must not let a token see later ones "
         "(multi_head_attention's causal=True)"),
    ]


def _diagnose_block(fn, rng) -> None:
    h = _CFG.h
    rng = np.random.default_rng(63)
    cases = [
        ("x [T, d] = [5, 16] with random weights, h = 4", rng.standard_normal((5, 16)), 1),
        ("a batch x [B, T, d] = [2, 5, 16]", rng.standard_normal((2, 5, 16)), 2),
        ("a single token, x [T, d] = [1, 16]", rng.standard_normal((1, 16)), 3),
    ]
    for case, x, seed in cases:
        p = _random_block(seed)
        want = block(x, p, h)
        got = run(fn, x.copy(), {k: v.copy() for k, v in p.items()}, h, case=case,
                  hint="p holds ln1_g, ln1_b, W_qkv, b_qkv, W_o, b_o, ln2_g, ln2_b, W_1, b_1, "
                       "W_2, b_2")
        got = as_array(got, case=case)
        if got.shape != want.shape:
            raise Wrong(f"on {case}, the result has shape {got.shape}; expected {want.shape}: "
                        "a block returns the same shape it was given, [..., T, d], so that "
                        "blocks can be stacked")
        if np.allclose(got, want, rtol=0, atol=1e-8):
            continue
        for wrong, message in _block_mistakes(x, p, h):
            if np.allclose(got, wrong, rtol=1e-7, atol=1e-8):
                raise Wrong(f"on {case}, {message}")
        expect_close(got, want, case=case, atol=1e-8)

    x = np.random.default_rng(64).standard_normal((4, 16))
    zeros = {k: np.zeros_like(v) for k, v in _random_block(4).items()}
    case = "all-zero weights (LayerNorm gains too)"
    expect_close(run(fn, x.copy(), zeros, h, case=case), x, case=case, atol=1e-12,
                 hint="with every weight zero both sublayers write 0, so a pre-norm block "
                      "must return its input unchanged")


register(Exercise(
    id="6.C",
    title="Challenge: one pre-norm transformer block",
    kind="implement",
    reference=block,
    diagnose=_diagnose_block,
    success="x + Attn(LN1(x)), then + MLP(LN2(x)), causal, on [T, d], [B, T, d] and T = 1, "
            "and the identity when every weight is zero",
    wrong_answers=(
        (_post_norm_block, "that is post-norm"),
        (_no_residual_block, "the residual connections are missing"),
        (_parallel_block, "the MLP read the block's input"),
    ),
))
