"""Chapter 6 exercises: LayerNorm and GELU (implement), what a tenfold input changes in a
block (predict), a stack that counts the stream twice (debug), a block that adds one vector
to every token (construct), and one pre-norm block (the challenge)."""

from __future__ import annotations

import math

import numpy as np

from ..blocks import block, block_stack, block_writes, gelu, layer_norm, mlp, relu
from ..heads import multi_head_attention
from ..params import GPTConfig, block_params, init_params, param_shapes
from . import register
from ._core import (
    Exercise,
    Wrong,
    as_array,
    expect_close,
    expect_finite,
    expect_shape,
    other_convention,
    random_leading,
    run,
)

# ---- 6.1 LayerNorm (implement) ------------------------------------------------------------

EPS = 1e-5
_LN_RTOL, _LN_ATOL = 1e-4, 1e-5     # float32 arithmetic passes; every classic slip does not


def _normalise(x, axis=-1, ddof=0, eps=EPS, eps_inside=True):
    """LayerNorm's core with one knob per classic mistake (no g, b)."""
    mean = x.mean(axis=axis, keepdims=True)
    var = x.var(axis=axis, ddof=ddof, keepdims=True)
    spread = np.sqrt(var + eps) if eps_inside else np.sqrt(var) + eps
    return (x - mean) / spread


def _layer_norm_mistakes(x, g, b, eps) -> list[tuple[np.ndarray, str]]:
    """What common wrong versions return on (x, g, b, eps), each with its explanation."""
    d = x.shape[-1]
    names = {x.ndim - 2: "the sequence, T", x.ndim - 3: "the batch, B"}
    with np.errstate(all="ignore"):
        wrong = [
            (_normalise(x, axis=axis, eps=eps) * g + b,
             f"the statistics were taken over axis {axis} ({names.get(axis, 'a batch axis')})"
             ": normalise over the last axis, each token's own d features (axis=-1)")
            for axis in range(x.ndim - 1)]
        wrong += [
            (_normalise(x, axis=None, eps=eps) * g + b,
             "the statistics were taken over the whole array: normalise each token over its "
             "own d features (axis=-1, keepdims=True)"),
            (_normalise(x, eps=eps, eps_inside=False) * g + b,
             "eps belongs inside the square root: divide by sqrt(var + eps), not sqrt(var) + eps"),
            (_normalise(x, eps=0.0) * g + b,
             "eps is missing: divide by sqrt(var + eps), which keeps a token of (nearly) equal "
             "features from dividing by zero"),
            (_normalise(x, ddof=1, eps=eps) * g + b,
             f"that is the unbiased variance (divide by d - 1 = {d - 1}): LayerNorm uses the "
             f"biased one (divide by d = {d}, ddof=0, np.var's default; torch's x.var() is "
             "unbiased by default)"),
            (_normalise(x, eps=eps),
             "the learned scale g and shift b were not applied: return x_hat * g + b"),
            ((_normalise(x, eps=eps) + b) * g,
             "shift after scaling: x_hat * g + b, not (x_hat + b) * g"),
            (_normalise(x, eps=eps) * b + g, "g is the scale and b the shift: x_hat * g + b"),
        ]
        if eps != EPS:
            wrong.append((_normalise(x) * g + b,
                          f"the eps argument was ignored: this case passes eps={eps:g}, and "
                          f"the result is what eps={EPS:g} gives; use the eps you are given"))
    return wrong


def _layer_norm_cases(rng) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray, float | None]]:
    """(case, x, g, b, eps): eps None means the default is left to the reader's function."""
    g, b = rng.standard_normal(6) + 1, rng.standard_normal(6)
    cases = [
        ("x [T, d] = [4, 6] with random g and b", rng.standard_normal((4, 6)) * 3 + 1, None),
        ("x of tiny spread (std 0.001), [T, d] = [4, 6]", rng.standard_normal((4, 6)) * 1e-3,
         None),
        ("a batch x [B, T, d] = [2, 3, 6]", rng.standard_normal((2, 3, 6)) * 2 - 1, None),
        ("a single token, x [T, d] = [1, 6]", rng.standard_normal((1, 6)) + 5, None),
        ("eps=0.1 on x [3, 6] of spread 0.3 (eps as large as the variance)",
         rng.standard_normal((3, 6)) * 0.3, 0.1),
        ("eps=1.0 on a batch x [2, 3, 6] of unit spread", rng.standard_normal((2, 3, 6)), 1.0),
    ]
    out = [(case, x, g, b, eps) for case, x, eps in cases]
    for i in range(2):
        d = int(rng.integers(2, 13))
        shape = (*random_leading(rng), int(rng.integers(1, 6)), d)
        scale = 10.0 ** rng.uniform(-1.5, 1.5)
        x = rng.standard_normal(shape) * scale + rng.uniform(-2, 2) * scale
        eps = float(10.0 ** rng.uniform(-3, 0)) * scale ** 2
        dtype = np.float32 if i == 1 else np.float64
        out.append((f"fresh random x of shape {shape} ({np.dtype(dtype).name}) with "
                    f"eps={eps:.3g}", x.astype(dtype), rng.standard_normal(d) + 1,
                    rng.standard_normal(d), eps))
    return out


def _diagnose_layer_norm(fn, rng) -> None:
    for case, x, g, b, eps in _layer_norm_cases(rng):
        kwargs = {} if eps is None else {"eps": eps}
        want = layer_norm(x.astype(float), g, b, **kwargs)
        got = expect_shape(run(fn, x, g, b, case=case, **kwargs), want.shape, case=case)
        if np.allclose(got, want, rtol=_LN_RTOL, atol=_LN_ATOL):
            continue
        xf = x.astype(float)
        for wrong, message in _layer_norm_mistakes(xf, g, b, EPS if eps is None else eps):
            if np.allclose(got, wrong, rtol=_LN_RTOL, atol=_LN_ATOL, equal_nan=True):
                raise Wrong(f"on {case}, {message}")
        expect_close(got, want, case=case, rtol=_LN_RTOL, atol=_LN_ATOL,
                     hint="each token's d features should end at mean 0, variance "
                          "var / (var + eps) before g and b are applied")


def _layer_norm_battery(rng):
    return [((x, g, b), {} if eps is None else {"eps": eps})
            for _, x, g, b, eps in _layer_norm_cases(rng)]


def _ln_over_axis_0(x, g, b, eps=1e-5):
    mean, var = x.mean(axis=0, keepdims=True), x.var(axis=0, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


def _ln_eps_outside(x, g, b, eps=1e-5):
    mean, std = x.mean(axis=-1, keepdims=True), x.std(axis=-1, keepdims=True)
    return (x - mean) / (std + eps) * g + b


def _ln_unbiased(x, g, b, eps=1e-5):
    mean, var = x.mean(axis=-1, keepdims=True), x.var(axis=-1, ddof=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


def _ln_fixed_eps(x, g, b, eps=1e-5):
    mean, var = x.mean(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * g + b


register(Exercise(
    id="6.1",
    title="LayerNorm over each token's features",
    kind="implement",
    reference=layer_norm,
    diagnose=_diagnose_layer_norm,
    battery=_layer_norm_battery,
    rtol=1e-5,
    atol=1e-6,
    success="mean 0 and variance 1 over the last axis, eps inside the square root and "
            "taken from the argument, biased variance, then * g + b; on batches, a tiny "
            "spread, T = 1, float32 and fresh random inputs",
    wrong_answers=(
        (_ln_over_axis_0, "over axis 0"),
        (_ln_eps_outside, "eps belongs inside the square root"),
        (_ln_unbiased, "unbiased variance"),
        (_ln_fixed_eps, "the eps argument was ignored"),
    ),
))

# ---- 6.2 GELU (implement) -----------------------------------------------------------------

GELU_ATOL = 1e-5   # accepts sqrt(2/pi) rounded to 5 digits; the exact erf GELU is 4.7e-4 away


def _gelu_with(c: float, x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + c * x ** 3)))


def _gelu_erf(x):
    x = np.asarray(x, dtype=float)
    return 0.5 * x * (1 + np.vectorize(math.erf, otypes=[float])(x / math.sqrt(2)))


def _gelu_cases(rng) -> list[tuple[str, np.ndarray]]:
    cases = [("x = 201 points from -5 to 5", np.linspace(-5, 5, 201)),
             ("x [2, 3] with entries of +-30", np.array([[-30.0, -1.0, 0.0],
                                                         [0.5, 2.0, 30.0]]))]
    shape = (*random_leading(rng), int(rng.integers(1, 9)))
    cases.append((f"fresh random x of shape {shape}", rng.standard_normal(shape) * 2.5))
    cases.append(("fresh random float32 x of shape (7,)",
                  (rng.standard_normal(7) * 3).astype(np.float32)))
    return cases


def _diagnose_gelu(fn, rng) -> None:
    for case, x in _gelu_cases(rng):
        want = gelu(x.astype(float))
        got = expect_shape(run(fn, x, case=case), want.shape, case=case,
                           name="the result (GELU is elementwise: any shape in, the same "
                                "shape out)")
        if np.allclose(got, want, rtol=1e-5, atol=GELU_ATOL):
            continue
        xf = x.astype(float)
        with np.errstate(all="ignore"):
            if np.allclose(got, relu(xf), atol=1e-6):
                raise Wrong(f"on {case}, that is ReLU: GELU is smooth at 0 and dips slightly "
                            "below zero for negative x (about -0.17 near x = -0.75)")
            if np.allclose(got, _gelu_erf(xf), atol=1e-6):
                gap = float(np.abs(_gelu_erf(xf) - want).max())
                raise Wrong(f"on {case}, that is the exact GELU, x * Phi(x) with erf: close "
                            f"(at most {gap:.1e} away here) but not GPT-2's tanh "
                            "approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))")
            if np.allclose(got, _gelu_with(0.44715, xf), atol=1e-6):
                raise Wrong(f"on {case}, the cubic's constant is 0.044715, not 0.44715")
            if np.allclose(got, xf / (1 + np.exp(-1.702 * xf)), atol=1e-6):
                raise Wrong(f"on {case}, that is the sigmoid approximation x * sigmoid(1.702 "
                            "x); this exercise asks for the tanh form GPT-2 uses")
        expect_close(got, want, case=case, rtol=1e-5, atol=GELU_ATOL,
                     hint="check 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); for large "
                          "|x| GELU is x (positive side) or 0 (negative side)")


def _gelu_battery(rng):
    return [((x,), {}) for _, x in _gelu_cases(rng)]


def _gelu_wrong_constant(x):
    return _gelu_with(0.44715, np.asarray(x, dtype=float))


register(Exercise(
    id="6.2",
    title="GELU, GPT-2's tanh approximation",
    kind="implement",
    reference=gelu,
    diagnose=_diagnose_gelu,
    battery=_gelu_battery,
    rtol=1e-5,
    atol=GELU_ATOL,
    success=f"matches 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) within {GELU_ATOL:g}, "
            "elementwise on any shape, float32 included",
    wrong_answers=(
        (relu, "that is ReLU"),
        (_gelu_erf, "not GPT-2's tanh approximation"),
        (_gelu_wrong_constant, "0.044715, not 0.44715"),
    ),
))

# ---- 6.3 a tenfold input (predict) --------------------------------------------------------

_PARTS = frozenset({"attn", "mlp", "out"})
_WHY_ATTN = ("attention reads LN1(10 x), and a LayerNorm removes any positive scale: "
             "LN1(10 x) = LN1(x) up to eps, so attention writes the same a")
_WHY_MLP = ("the MLP reads LN2(10 x + a), and 10 x + a is not a multiple of x + a (the "
            "write a did not grow tenfold), so the MLP sees a different vector")
_WHY_OUT = ("the output is 10 x + a + m: the skip path carries 10 x itself, so the output "
            "changes")


def _diagnose_tenfold(answer, rng) -> None:
    if isinstance(answer, str):
        answer = {answer}
    try:
        parts = {str(p).strip().lower() for p in answer}
    except TypeError:
        raise Wrong("answer with a set of names from 'attn', 'mlp', 'out', e.g. {'mlp'}, "
                    "or set() for none") from None
    unknown = sorted(parts - _PARTS)
    if unknown:
        raise Wrong(f"{unknown[0]!r} is not one of 'attn', 'mlp', 'out'")
    if "attn" not in parts:
        raise Wrong("attention's write is unchanged too: " + _WHY_ATTN)
    if "mlp" in parts:
        raise Wrong("the MLP's write changes: " + _WHY_MLP)
    if "out" in parts:
        raise Wrong("the block's output changes: " + _WHY_OUT)


register(Exercise(
    id="6.3",
    title="A tenfold input: what does the block notice?",
    kind="predict",
    reference={"attn"},
    diagnose=_diagnose_tenfold,
    success="only attention's write: LN1 forgets the scale, the MLP reads 10 x + a",
    explain="Only attention's write. A LayerNorm divides by the standard deviation, so "
            "LN1(10 x) = LN1(x) (up to eps), and attention computes exactly what it did. The "
            "MLP reads the stream after that write, 10 x + a, which points in a different "
            "direction from x + a because a did not grow; and the output carries 10 x "
            "along the skip path.",
    wrong_answers=(
        (set(), "attention's write is unchanged too"),
        ({"attn", "mlp"}, "the MLP's write changes"),
        ({"attn", "mlp", "out"}, "the MLP's write changes"),
        ({"attn", "out"}, "the block's output changes"),
        ("all", "is not one of"),
        (3, "answer with a set"),
    ),
))

# ---- 6.4 a stack that counts the stream twice (debug) -------------------------------------


def _given_stack(x, blocks, h):
    """Run pre-norm blocks in order: x [..., T, d] -> [..., T, d]."""
    for p in blocks:
        x = x + block(x, p, h)
    return x


def stack(x, blocks, h):
    """Run pre-norm blocks in order: x [..., T, d] -> [..., T, d]."""
    for p in blocks:
        x = block(x, p, h)
    return x


def _noisy_blocks(cfg: GPTConfig, rng, scale: float = 0.3) -> list[dict[str, np.ndarray]]:
    """cfg.L blocks with every weight random, LayerNorm gains and biases included."""
    params = init_params(cfg, rng)
    return [{k: v + rng.standard_normal(v.shape) * scale for k, v in
             block_params(params, i).items()} for i in range(cfg.L)]


def _stack_cases(rng) -> list[tuple[str, np.ndarray, list, int]]:
    cfg = GPTConfig(V=5, ctx=8, d=8, L=3, h=2)
    zeros = [{k: np.zeros_like(v) for k, v in p.items()} for p in _noisy_blocks(cfg, rng)]
    cases = [("no blocks at all, x [4, 8]", rng.standard_normal((4, 8)), [], 2),
             ("three blocks whose every weight is zero, x [4, 8]",
              rng.standard_normal((4, 8)), zeros, 2),
             ("one block with random weights, x [4, 8]", rng.standard_normal((4, 8)),
              _noisy_blocks(GPTConfig(V=5, ctx=8, d=8, L=1, h=2), rng), 2)]
    h = int(rng.choice([1, 2, 4]))
    cfg = GPTConfig(V=5, ctx=8, d=h * int(rng.integers(2, 5)), L=int(rng.integers(2, 5)), h=h)
    shape = (*random_leading(rng, max_axes=1), int(rng.integers(1, 7)), cfg.d)
    cases.append((f"fresh random x {list(shape)} through {cfg.L} random blocks, h = {h}",
                  rng.standard_normal(shape), _noisy_blocks(cfg, rng), h))
    return cases


_TWICE = ("block() already returns the whole new stream, x plus its writes; adding x to it "
          "again counts the stream twice at every block. Pass the block's output on as it is")


def _diagnose_stack(fn, rng) -> None:
    for case, x, blocks, h in _stack_cases(rng):
        want = block_stack(x, blocks, h)
        got = expect_shape(run(fn, x, blocks, h, case=case), want.shape, case=case)
        if np.allclose(got, want, rtol=1e-6, atol=1e-9):
            continue
        if not any(np.any(v) for p in blocks for v in p.values()):
            k = float(np.sum(got * x) / np.sum(x * x))
            raise Wrong(f"on {case}, nothing is written to the stream, so the stack must "
                        f"return x; yours returns {k:.3g} x" + (f": {_TWICE}" if k > 1.5
                                                                 else ""))
        if np.allclose(got, _given_stack(x, blocks, h), rtol=1e-6, atol=1e-9):
            raise Wrong(f"on {case}, {_TWICE}")
        if np.allclose(got, x, rtol=1e-6, atol=1e-9):
            raise Wrong(f"on {case}, the stack returned its input unchanged: keep each "
                        "block's output, x = block(x, p, h)")
        if np.allclose(got, block(x, blocks[-1], h), rtol=1e-6, atol=1e-9):
            raise Wrong(f"on {case}, only the last block's output came back, computed from "
                        "the original x: each block must read the previous block's output")
        expect_close(got, want, case=case, rtol=1e-6, atol=1e-9,
                     hint="each block reads the previous block's output and returns the "
                          "whole new stream")


def _stack_battery(rng):
    return [((x, blocks, h), {}) for _, x, blocks, h in _stack_cases(rng)]


def _stack_from_input(x, blocks, h):
    out = x
    for p in blocks:
        out = block(x, p, h)
    return out


def _stack_minus(x, blocks, h):
    for p in blocks:
        x = block(x, p, h) - x
    return x


register(Exercise(
    id="6.4",
    title="A stack that counts the stream twice",
    kind="debug",
    reference=block_stack,
    # The fix as the reader's stub has it: block_stack also takes causal= and act=.
    shown=stack,
    given=_given_stack,
    diagnose=_diagnose_stack,
    battery=_stack_battery,
    rtol=1e-6,
    atol=1e-9,
    success="the identity for zero weights, and the library's stack on fresh random "
            "blocks",
    explain="The bug is x = x + block(x, p, h). A block already adds its input to its "
            "writes, so the extra x doubles the stream at every block (with zero weights the "
            "stack returns 2^L x). Pass the output on: x = block(x, p, h).",
    wrong_answers=(
        (_stack_from_input, "only the last block's output came back"),
        (_stack_minus, "the stack must return x"),
        (lambda x, blocks, h: 2 * block_stack(x, blocks, h), "counts the stream twice"),
        (lambda x, blocks, h: x, "returned its input unchanged"),
    ),
))

# ---- 6.5 a block that adds one vector to every token (construct) --------------------------


def constant_write_block(v: np.ndarray, d_ff: int, h: int) -> dict[str, np.ndarray]:
    """Weights for one pre-norm block that adds ``v`` to every token of any input, with the
    output biases b_o and b_2 left at zero.

    Attention writes nothing (W_o = 0). LN2's gain is 0, so every token reads the same
    vector, LN2's shift b; W_1 = 0 and b_1[0] = 1 make one hidden unit GELU(1) for every
    token, and W_2's first row turns that unit into v.

    Shapes: v [d], d_ff and h ints (d % h == 0) -> p with the shape table's block shapes
    """
    v = np.asarray(v, dtype=float)
    d = v.shape[-1]
    p = {name.split(".", 2)[-1]: np.zeros(shape) for name, shape in param_shapes(
        GPTConfig(V=1, ctx=1, d=d, L=1, h=h, d_ff=d_ff)).items() if name.startswith("blocks.0.")}
    p["b_1"][0] = 1.0                              # hidden unit 0 = GELU(1) for every token
    p["W_2"][0] = v / gelu(np.float64(1.0))        # [d_ff, d]: unit 0 writes v
    return p


_BLOCK_NAMES = ("ln1_g", "ln1_b", "W_qkv", "b_qkv", "W_o", "b_o", "ln2_g", "ln2_b", "W_1",
                "b_1", "W_2", "b_2")


def _block_shapes(d: int, d_ff: int) -> dict[str, tuple[int, ...]]:
    return {"ln1_g": (d,), "ln1_b": (d,), "W_qkv": (d, 3 * d), "b_qkv": (3 * d,),
            "W_o": (d, d), "b_o": (d,), "ln2_g": (d,), "ln2_b": (d,), "W_1": (d, d_ff),
            "b_1": (d_ff,), "W_2": (d_ff, d), "b_2": (d,)}


def _diagnose_constant_block(fn, rng) -> None:
    h = int(rng.choice([1, 2, 4]))
    d, d_ff = h * int(rng.integers(2, 5)), int(rng.integers(2, 20))
    v = rng.standard_normal(d) * rng.uniform(0.5, 3)
    setups = [("v [4] = [1, -2, 0.5, 3], d_ff = 8, h = 2", np.array([1.0, -2.0, 0.5, 3.0]),
               8, 2), (f"a fresh random v [{d}], d_ff = {d_ff}, h = {h}", v, d_ff, h)]
    for setup, v, d_ff, h in setups:
        d = len(v)
        p = run(fn, v, d_ff, h, case=setup)
        if not isinstance(p, dict):
            raise Wrong(f"for {setup}, expected a dict of block weights, got a "
                        f"{type(p).__name__}")
        missing = [k for k in _BLOCK_NAMES if k not in p]
        if missing:
            raise Wrong(f"for {setup}, the weights lack {missing[0]!r}: return all twelve "
                        f"({', '.join(_BLOCK_NAMES)})")
        p = {k: expect_shape(p[k], shape, case=setup, name=k)
             for k, shape in _block_shapes(d, d_ff).items()}
        for k, w in p.items():
            expect_finite(w, case=setup, name=k)
        for k in ("b_o", "b_2"):
            if np.any(p[k] != 0):
                raise Wrong(f"for {setup}, {k} must stay zero: the writing projections "
                            "W_o and W_2 have to do the writing, not an output bias")
        inputs = [("x [5, d]", rng.standard_normal((5, d))),
                  ("a batch x [2, 3, d] of large entries (std 100)",
                   rng.standard_normal((2, 3, d)) * 100),
                  ("a single token x [1, d]", rng.standard_normal((1, d)) + 3)]
        for name, x in inputs:
            case = f"{setup}, {name}"
            written = block(x, p, h) - x                       # [..., T, d]
            gap = written - v
            if np.allclose(gap, 0, atol=1e-6 * (1 + np.abs(v).max())):
                continue
            flat = written.reshape(-1, d)
            if not np.allclose(flat, flat[0], atol=1e-6 * (1 + np.abs(flat).max())):
                raise Wrong(f"on {case}, the block writes different vectors to different "
                            "tokens: whatever the MLP (or attention) reads must be the same "
                            "for every token (a LayerNorm's g and b decide what it passes on)")
            c = float(flat[0] @ v / (v @ v))
            if np.allclose(flat[0], c * v, atol=1e-6 * (1 + np.abs(v).max())):
                raise Wrong(f"on {case}, every token gets {c:.3f} v, not v: check what the "
                            "nonlinearity makes of the value you feed it (GELU(1) is "
                            f"{float(gelu(np.float64(1.0))):.4f}, not 1)")
            expect_close(written, np.broadcast_to(v, written.shape), case=case,
                         name="block(x) - x", rtol=1e-6, atol=1e-6)


def _bias_writer(v, d_ff, h):
    p = constant_write_block(v, d_ff, h)
    return {**p, "W_2": np.zeros_like(p["W_2"]), "b_1": np.zeros_like(p["b_1"]),
            "b_2": np.asarray(v, dtype=float)}


def _forgot_gelu(v, d_ff, h):
    p = constant_write_block(v, d_ff, h)
    p["W_2"][0] = v                                 # as if GELU(1) were 1
    return p


def _token_dependent(v, d_ff, h):
    p = constant_write_block(v, d_ff, h)
    p["ln2_g"][:] = 1.0                             # LN2 now passes each token's own x_hat
    p["W_1"][0, 0] = 1.0                            # and unit 0 reads its first feature
    return p


register(Exercise(
    id="6.5",
    title="A block that adds one vector to every token",
    kind="construct",
    reference=constant_write_block,
    diagnose=_diagnose_constant_block,
    success="block(x) = x + v for every token of every input, with b_o = b_2 = 0",
    explain="One construction of many: whatever a sublayer reads must not depend on the "
            "token, and a LayerNorm with g = 0 passes on its shift b alone. Any weights that "
            "give every token the same hidden activity and map it to v work.",
    wrong_answers=(
        (_bias_writer, "b_2 must stay zero"),
        (_forgot_gelu, "not 1"),
        (_token_dependent, "different vectors to different tokens"),
        (lambda v, d_ff, h: {"W_2": np.zeros((d_ff, len(v)))}, "the weights lack"),
    ),
))

# ---- 6.C challenge: one pre-norm block ----------------------------------------------------


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
    """GPT-J's and PaLM's parallel block: one LayerNorm of x, read by both sublayers."""
    ln = layer_norm(x, p["ln1_g"], p["ln1_b"])
    return x + _attn(ln, p, h) + _mlp(ln, p)


def _parallel_two_norms(x, p, h):
    """GPT-NeoX's parallel block: each sublayer reads its own LayerNorm of x."""
    return (x + _attn(layer_norm(x, p["ln1_g"], p["ln1_b"]), p, h)
            + _mlp(layer_norm(x, p["ln2_g"], p["ln2_b"]), p))


def _block_mistakes(x, p, h) -> list[tuple[np.ndarray, str]]:
    writes = block_writes(x, p, h)
    a1 = x + writes.attn
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
        (writes.attn + _mlp(layer_norm(writes.attn, p["ln2_g"], p["ln2_b"]), p),
         "the attention's residual is missing: x = x + Attn(LN1(x)) before the MLP"),
        (block(x, swapped, h),
         "the two LayerNorms are swapped: ln1_g, ln1_b before attention, ln2_g, ln2_b before "
         "the MLP"),
        (block(x, p, h, causal=False),
         "the attention is not causal: a GPT block must not let a token see later ones "
         "(multi_head_attention's causal=True)"),
    ]


def _block_cases(rng) -> list[tuple[str, np.ndarray, dict, int]]:
    cfg = GPTConfig(V=5, ctx=8, d=16, L=1, h=4)
    cases = [("x [T, d] = [5, 16] with random weights, h = 4", rng.standard_normal((5, 16)),
              _noisy_blocks(cfg, rng)[0], 4),
             ("a batch x [B, T, d] = [2, 5, 16]", rng.standard_normal((2, 5, 16)),
              _noisy_blocks(cfg, rng)[0], 4),
             ("a single token, x [T, d] = [1, 16]", rng.standard_normal((1, 16)),
              _noisy_blocks(cfg, rng)[0], 4),
             ("all-zero weights (LayerNorm gains too)", rng.standard_normal((4, 16)),
              {k: np.zeros_like(v) for k, v in _noisy_blocks(cfg, rng)[0].items()}, 4)]
    h = int(rng.choice([1, 2, 4]))
    cfg = GPTConfig(V=5, ctx=8, d=h * int(rng.integers(2, 5)), L=1, h=h,
                    d_ff=int(rng.integers(4, 40)))
    shape = (*random_leading(rng, max_axes=1), int(rng.integers(1, 7)), cfg.d)
    cases.append((f"fresh random x {list(shape)}, d_ff = {cfg.d_ff}, h = {h}",
                  rng.standard_normal(shape), _noisy_blocks(cfg, rng)[0], h))
    return cases


# A block built from the reader's own float32 LayerNorm and GELU (6.1, 6.2) is right too;
# the named mistakes below are told apart at a much tighter tolerance.
_BLOCK_RTOL, _BLOCK_ATOL = 1e-4, 1e-5


def _diagnose_block(fn, rng) -> None:
    for case, x, p, h in _block_cases(rng):
        want = block(x, p, h)
        got = run(fn, x, p, h, case=case,
                  hint="p holds ln1_g, ln1_b, W_qkv, b_qkv, W_o, b_o, ln2_g, ln2_b, W_1, b_1, "
                       "W_2, b_2")
        got = as_array(got, case=case)
        if got.shape != want.shape:
            raise Wrong(f"on {case}, the result has shape {got.shape}; expected {want.shape}: "
                        "a block returns the same shape it was given, [..., T, d], so that "
                        "blocks can be stacked")
        if np.allclose(got, want, rtol=_BLOCK_RTOL, atol=_BLOCK_ATOL):
            continue
        if not any(np.any(v) for v in p.values()):
            expect_close(got, x, case=case, atol=1e-12,
                         hint="with every weight zero both sublayers write 0, so a pre-norm "
                              "block must return its input unchanged")
        if np.allclose(got, x, rtol=1e-6, atol=1e-9):
            raise Wrong(f"on {case}, the block returned its input unchanged: add what each "
                        "sublayer writes to the stream")
        sequential = ("GPT-2's sequential block, where the MLP reads the stream after "
                      "attention's write, LN2(x + Attn(LN1(x)))")
        if np.allclose(got, _parallel_block(x, p, h), rtol=1e-6, atol=1e-9):
            raise other_convention(
                f"on {case}, that is the parallel block of GPT-J and PaLM, x + Attn(LN1(x)) "
                "+ MLP(LN1(x)), where both sublayers read one LayerNorm of the block's input",
                sequential)
        if np.allclose(got, _parallel_two_norms(x, p, h), rtol=1e-6, atol=1e-9):
            raise other_convention(
                f"on {case}, that is a parallel block with a LayerNorm per sublayer, as in "
                "GPT-NeoX, x + Attn(LN1(x)) + MLP(LN2(x)), where both sublayers read the "
                "block's input", sequential)
        for wrong, message in _block_mistakes(x, p, h):
            if np.allclose(got, wrong, rtol=1e-6, atol=1e-9):
                raise Wrong(f"on {case}, {message}")
        expect_close(got, want, case=case, rtol=_BLOCK_RTOL, atol=_BLOCK_ATOL,
                     hint="x = x + Attn(LN1(x)) with causal attention and the biases, then "
                          "return x + MLP(LN2(x)) with GELU")


def _block_battery(rng):
    return [((x, p, h), {}) for _, x, p, h in _block_cases(rng)]


register(Exercise(
    id="6.C",
    title="Challenge: one pre-norm transformer block",
    kind="implement",
    reference=block,
    diagnose=_diagnose_block,
    battery=_block_battery,
    rtol=1e-6,
    atol=1e-9,
    success="x + Attn(LN1(x)), then + MLP(LN2(x)), causal, on [T, d], [B, T, d], T = 1 and "
            "fresh random sizes, and the identity when every weight is zero",
    wrong_answers=(
        (_post_norm_block, "that is post-norm"),
        (_no_residual_block, "the residual connections are missing"),
        (_parallel_block, "parallel block of GPT-J and PaLM"),
        (_parallel_two_norms, "as in GPT-NeoX"),
        (lambda x, p, h: block(x, p, h, causal=False), "not causal"),
        (lambda x, p, h: x, "returned its input unchanged"),
    ),
))
