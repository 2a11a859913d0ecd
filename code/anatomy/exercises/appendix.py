"""Appendix exercises (from GPT-2 to a modern open model): RMSNorm and the SwiGLU MLP
(implement), Hugging Face's rotate-half RoPE with a layout bug (debug), the KV cache that
grouped-query attention saves (predict), and one Llama block (the challenge)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..attention import attention
from ..blocks import gelu
from ..heads import merge_heads, split_heads
from ..masks import causal_mask
from ..modern import (
    LLAMA3_8B,
    LlamaConfig,
    kv_cache_bytes,
    llama_block,
    param_shapes,
    rms_norm,
    rope_rotate_half,
    silu,
    swiglu,
)
from ..params import block_params
from ..positions import pair_frequencies, rope
from . import register
from ._core import (
    Exercise,
    Wrong,
    as_array,
    expect_close,
    expect_shape,
    other_convention,
    random_leading,
    run,
)


def _close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-6, atol: float = 1e-9) -> bool:
    """Whether an answer matches one candidate output (a mistake's, to name it)."""
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=rtol, atol=atol))


# ---- A.1 RMSNorm (implement) --------------------------------------------------------------

_RMS = ("divide each token's d features by sqrt(mean(x^2) + eps), the mean taken over the "
        "last axis, then multiply by g")


def _rms_cases(rng) -> list[tuple[str, np.ndarray, np.ndarray, float | None]]:
    """(case, x, g, eps): fixed edge cases, then fresh random ones; eps None = the default."""
    cases = [
        ("x = [3, 4] with g = [1, 1]", np.array([3.0, 4.0]), np.ones(2), None),
        ("a batch x [2, 3, 6] with a random gain g [6]", 3 * rng.standard_normal((2, 3, 6)),
         rng.standard_normal(6), None),
        ("x [4, 8] whose features are all shifted by +5", rng.standard_normal((4, 8)) + 5.0,
         1 + 0.5 * rng.standard_normal(8), None),
        ("tiny features (about 1e-3), where eps = 1e-5 matters",
         1e-3 * rng.standard_normal((3, 8)), np.ones(8), None),
        ("an all-zero token x = [0, 0, 0, 0]", np.zeros(4), np.ones(4), None),
        ("x [2, 5] with eps = 0.5 passed as an argument", rng.standard_normal((2, 5)),
         rng.standard_normal(5), 0.5),
        ("a single feature, x [[-2], [0.5]] with g = [3]", np.array([[-2.0], [0.5]]),
         np.array([3.0]), None),
    ]
    for i in range(3):
        d = int(rng.integers(2, 17))
        shape = (*random_leading(rng, max_axes=3), d)
        x = rng.standard_normal(shape) * 10.0 ** rng.uniform(-2.5, 2) + rng.normal(0, 2)
        eps = [None, 1e-6, 1e-2][int(rng.integers(0, 3))]
        dtype = np.float32 if i == 1 else np.float64
        cases.append((f"fresh random x of shape {shape} ({np.dtype(dtype).name}, eps "
                      f"{'default' if eps is None else eps})", x.astype(dtype),
                      rng.standard_normal(d).astype(dtype), eps))
    return cases


def _rms_mistakes(x, g, eps: float, eps_given: bool) -> list[tuple[np.ndarray, Exception]]:
    ms = (x * x).mean(axis=-1, keepdims=True)                    # [..., 1]
    mu = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    mistakes = [
        ((x - mu) / np.sqrt(var + eps) * g, Wrong(
            "RMSNorm subtracts no mean (that is LayerNorm without its shift): divide x "
            "itself by its root mean square")),
        (x / np.sqrt(var + eps) * g, Wrong(
            "the root mean square is sqrt(mean(x^2)), not the standard deviation (which "
            "centres x first)")),
        (x / (np.sqrt(ms) + eps) * g, other_convention(
            "eps added outside the square root, x / (sqrt(mean(x^2)) + eps)",
            "eps inside it, x / sqrt(mean(x^2) + eps), as in Llama and torch's RMSNorm")),
        (x / np.sqrt(ms) * g, Wrong(
            "eps is missing: with features this small mean(x^2) is close to eps, and Llama "
            "divides by sqrt(mean(x^2) + eps)")),
        (x / np.sqrt((x * x).sum(axis=-1, keepdims=True) + eps) * g, Wrong(
            "take the mean of the squares over the d features, not their sum")),
        (x / np.sqrt((x * x).mean() + eps) * g, Wrong(
            "each token is normalised by its own features: the mean over the last axis "
            "(keepdims=True), not over the whole array")),
        (x / np.sqrt(ms + eps), Wrong("the gain is missing: multiply by g at the end")),
        (x / (ms + eps) * g, Wrong("divide by the square root of the mean square")),
    ]
    if eps_given:                  # first: with a large eps, a fixed 1e-5 is like none
        mistakes.insert(0, (x / np.sqrt(ms + 1e-5) * g, Wrong(
            f"use the eps argument (the check passed eps={eps}), not a fixed 1e-5")))
    return mistakes


def _diagnose_rms(fn, rng) -> None:
    for case, x, g, eps in _rms_cases(rng):
        kwargs = {} if eps is None else {"eps": eps}
        want = rms_norm(x.astype(float), g.astype(float), **kwargs)
        got = expect_shape(run(fn, x, g, case=case, **kwargs), x.shape, case=case)
        if _close(got, want, rtol=1e-5, atol=1e-6):
            continue
        for wrong, problem in _rms_mistakes(x.astype(float), g.astype(float),
                                            1e-5 if eps is None else eps, eps is not None):
            if _close(got, wrong, rtol=1e-5, atol=1e-6):
                raise type(problem)(f"on {case}, {problem}")
        hint = ("an all-zero token has mean square 0; eps inside the square root keeps it "
                "finite" if not x.any() else _RMS)
        expect_close(got, want, case=case, rtol=1e-5, atol=1e-6, hint=hint)


def _rms_battery(rng):
    return [((x, g), {} if eps is None else {"eps": eps}) for _, x, g, eps in _rms_cases(rng)]


def _layer_norm_like(x, g, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(axis=-1, keepdims=True) + eps) * g


def _eps_outside(x, g, eps=1e-5):
    return x / (np.sqrt((x * x).mean(axis=-1, keepdims=True)) + eps) * g


def _no_eps(x, g, eps=1e-5):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True)) * g


def _sum_of_squares(x, g, eps=1e-5):
    return x / np.sqrt((x * x).sum(axis=-1, keepdims=True) + eps) * g


def _fixed_eps(x, g, eps=1e-5):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5) * g


def _whole_array(x, g, eps=1e-5):
    return x / np.sqrt((x * x).mean() + eps) * g


register(Exercise(
    id="A.1",
    title="RMSNorm",
    kind="implement",
    reference=rms_norm,
    diagnose=_diagnose_rms,
    battery=_rms_battery,
    rtol=1e-5,
    atol=1e-7,
    success="a root-mean-square scale per token, eps inside the square root, no mean "
            "removed, for batches, tiny and zero tokens, d = 1, float32 and fresh random "
            "inputs",
    wrong_answers=(
        (_layer_norm_like, "subtracts no mean"),
        (_eps_outside, "eps added outside"),
        (_no_eps, "eps is missing"),
        (_sum_of_squares, "not their sum"),
        (_fixed_eps, "use the eps argument"),
        (_whole_array, "over the last axis"),
    ),
))

# ---- A.2 the SwiGLU MLP (implement) --------------------------------------------------------

_SWIGLU = "the MLP is (SiLU(x W_gate) * (x W_up)) W_down, the product taken feature by feature"


def _mlp_weights(rng, d: int, d_ff: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """W_gate, W_up [d, d_ff] and W_down [d_ff, d], scaled so activations are of order 1."""
    return (rng.standard_normal((d, d_ff)) / math.sqrt(d),
            rng.standard_normal((d, d_ff)) / math.sqrt(d),
            rng.standard_normal((d_ff, d)) / math.sqrt(d_ff))


def _swiglu_cases(rng) -> list[tuple[str, np.ndarray, tuple]]:
    """(case, x, (W_gate, W_up, W_down))."""
    cases = [
        ("x [3, 4] with d_ff = 6", rng.standard_normal((3, 4)), _mlp_weights(rng, 4, 6)),
        ("a batch x [2, 5, 8] with d_ff = 12", rng.standard_normal((2, 5, 8)),
         _mlp_weights(rng, 8, 12)),
        ("x [2, 3, 4, 6] with two leading axes and d_ff = 5",
         rng.standard_normal((2, 3, 4, 6)), _mlp_weights(rng, 6, 5)),
        ("a single token x [1, 4] with d_ff = 1", rng.standard_normal((1, 4)),
         _mlp_weights(rng, 4, 1)),
    ]
    weights = _mlp_weights(rng, 4, 8)
    u, v = rng.standard_normal((2, 4))
    x = np.stack([u, -u, v]) * 1000 / np.abs(u @ weights[0]).max()   # [3, 4]
    cases.append(("large pre-activations, x W_gate reaching +1000 and -1000", x, weights))
    for i in range(2):
        d, d_ff, T = (int(n) for n in rng.integers(1, 10, size=3))
        lead = random_leading(rng)
        dtype = np.float32 if i == 0 else np.float64
        weights = tuple(w.astype(dtype) for w in _mlp_weights(rng, d, d_ff))
        cases.append((f"fresh random x {list((*lead, T, d))} with d_ff = {d_ff} "
                      f"({np.dtype(dtype).name})",
                      rng.standard_normal((*lead, T, d)).astype(dtype), weights))
    return cases


def _sigmoid(z):
    return 0.5 + 0.5 * np.tanh(0.5 * z)


def _swiglu_mistakes(x, W_gate, W_up, W_down) -> list[tuple[np.ndarray, Exception]]:
    gate, up = x @ W_gate, x @ W_up                       # [..., T, d_ff] each
    return [
        ((silu(up) * gate) @ W_down, Wrong(
            "SiLU goes on the gate x W_gate, and x W_up passes through as it is (you "
            "swapped W_gate and W_up)")),
        ((gelu(gate) * up) @ W_down, other_convention(
            "a GELU gate (GeGLU, as in Gemma)",
            "Llama's SiLU gate, SiLU(z) = z sigmoid(z) (SwiGLU)")),
        ((_sigmoid(gate) * up) @ W_down, Wrong(
            "the gate is SiLU(z) = z * sigmoid(z), not sigmoid(z) alone (that is the "
            "original GLU)")),
        ((np.maximum(gate, 0) * up) @ W_down, Wrong(
            "the gate is SiLU(z) = z * sigmoid(z), not ReLU")),
        ((silu(gate) + up) @ W_down, Wrong(
            "the gate multiplies x W_up feature by feature; you added them")),
        (silu(gate) @ W_down, Wrong("x W_up is missing: the gate multiplies it")),
        (silu(up) @ W_down, Wrong("the gate SiLU(x W_gate) is missing")),
    ]


def _diagnose_swiglu(fn, rng) -> None:
    for case, x, weights in _swiglu_cases(rng):
        want = swiglu(x.astype(float), *(w.astype(float) for w in weights))
        got = as_array(run(fn, x, *weights, case=case), case=case)
        if got.shape != want.shape:
            raise Wrong(f"on {case}, the result has shape {got.shape}; expected {want.shape}"
                        ": the MLP widens to d_ff and projects back to d")
        if _close(got, want, rtol=1e-4, atol=1e-6):
            continue
        for wrong, problem in _swiglu_mistakes(x.astype(float),
                                               *(w.astype(float) for w in weights)):
            if _close(got, wrong, rtol=1e-4, atol=1e-6):
                raise type(problem)(f"on {case}, {problem}")
        hint = ("SiLU(z) must stay finite for |z| near 1000: exp(z) / (1 + exp(z)) is "
                "inf / inf there; 1 / (1 + exp(-z)) or 0.5 (1 + tanh(z / 2)) is not"
                if np.abs(x).max() > 100 else _SWIGLU)
        expect_close(got, want, case=case, rtol=1e-4, atol=1e-6, hint=hint)


def _swiglu_battery(rng):
    return [((x, *weights), {}) for _, x, weights in _swiglu_cases(rng)]


def _swapped_gate(x, W_gate, W_up, W_down):
    return (silu(x @ W_up) * (x @ W_gate)) @ W_down


def _geglu(x, W_gate, W_up, W_down):
    return (gelu(x @ W_gate) * (x @ W_up)) @ W_down


def _glu(x, W_gate, W_up, W_down):
    return (1 / (1 + np.exp(-(x @ W_gate))) * (x @ W_up)) @ W_down


def _added_gate(x, W_gate, W_up, W_down):
    return (silu(x @ W_gate) + x @ W_up) @ W_down


def _overflowing_silu(x, W_gate, W_up, W_down):
    z = x @ W_gate
    return (z * np.exp(z) / (1 + np.exp(z)) * (x @ W_up)) @ W_down


register(Exercise(
    id="A.2",
    title="The SwiGLU MLP",
    kind="implement",
    reference=swiglu,
    diagnose=_diagnose_swiglu,
    battery=_swiglu_battery,
    rtol=1e-5,
    atol=1e-7,
    success="SiLU(x W_gate) gates x W_up feature by feature, then W_down, for any leading "
            "axes, d_ff = 1, pre-activations near 1000, float32 and fresh random shapes",
    wrong_answers=(
        (_swapped_gate, "you swapped W_gate and W_up"),
        (_geglu, "GeGLU"),
        (_glu, "original GLU"),
        (_added_gate, "you added them"),
        (_overflowing_silu, "inf / inf"),
    ),
))

# ---- A.3 rotate-half RoPE with a layout bug (debug) ----------------------------------------


def _given_rope_half(x, base=10000.0):
    """RoPE in Hugging Face's layout: feature i turns with feature i + d/2.

    Shapes: x [..., T, d] (d even) -> [..., T, d]
    """
    T, d = x.shape[-2:]
    freqs = pair_frequencies(d, base)              # [d/2]
    angles = np.arange(T)[:, None] * freqs         # [T, 1] * [d/2] -> [T, d/2]
    angles = np.repeat(angles, 2, axis=-1)         # -> [T, d]
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    x1, x2 = np.split(x, 2, axis=-1)               # 2 x [..., T, d/2]
    turned = np.concatenate([-x2, x1], axis=-1)    # each pair turned a quarter
    return x * cos + turned * sin                  # [..., T, d] * [T, d]


def _half(x, base=10000.0, *, start=0, sign=1.0):
    """Rotate-half RoPE from positions start.., by sign * angle (to recognise mistakes).

    Shapes: x [..., T, d] -> [..., T, d]
    """
    T, d = x.shape[-2:]
    angles = np.arange(start, start + T)[:, None] * pair_frequencies(d, base)   # [T, d/2]
    angles = sign * np.concatenate([angles, angles], axis=-1)                    # [T, d]
    x1, x2 = np.split(x, 2, axis=-1)                     # 2 x [..., T, d/2]
    return x * np.cos(angles) + np.concatenate([-x2, x1], axis=-1) * np.sin(angles)


def _rope_cases(rng) -> list[tuple[str, np.ndarray, dict]]:
    """(case, x, kwargs): kwargs holds base when the case passes one."""
    cases = [
        ("x [4, 8] (one head, positions 0..3)", rng.standard_normal((4, 8)), {}),
        ("a batch of heads x [2, 3, 5, 4]", rng.standard_normal((2, 3, 5, 4)), {}),
        ("x [6, 8] with base = 100", rng.standard_normal((6, 8)), {"base": 100.0}),
        ("one position, x [1, 8]", rng.standard_normal((1, 8)), {}),
        ("one pair, x [5, 2]", rng.standard_normal((5, 2)), {}),
        ("float32 x [3, 6, 16]", rng.standard_normal((3, 6, 16)).astype(np.float32), {}),
    ]
    for _ in range(2):
        T, d = int(rng.integers(2, 10)), 2 * int(rng.integers(2, 9))
        lead = random_leading(rng)
        base = float(10.0 ** rng.uniform(1, 6))
        cases.append((f"fresh random x {list((*lead, T, d))} with base = {base:.4g}",
                      rng.standard_normal((*lead, T, d)), {"base": base}))
    return cases


def _rope_mistakes(x, kwargs) -> list[tuple[np.ndarray, Exception]]:
    base = kwargs.get("base", 10000.0)
    mistakes = [
        (rope(x, base=base), other_convention(
            "chapter 5's interleaved layout, pairs (2i, 2i+1)",
            "Hugging Face's rotate-half layout, pairs (i, i + d/2)")),
        (_half(x, base, sign=-1.0), other_convention(
            "each pair turned clockwise, by minus its angle",
            "Hugging Face's turn, x_i cos - x_(i+d/2) sin and x_(i+d/2) cos + x_i sin")),
        (_half(x, base, start=1), Wrong(
            "every position is one late: positions start at 0, where RoPE changes nothing")),
    ]
    if base != 10000.0:
        mistakes.append((_half(x), Wrong(
            f"use the base argument (the check passed base={base:.4g}), not 10000")))
    return mistakes


def _diagnose_rope_half(fn, rng) -> None:
    for case, x, kwargs in _rope_cases(rng):
        want = rope_rotate_half(x.astype(float), **kwargs)
        got = expect_shape(run(fn, x, case=case, **kwargs), x.shape, case=case)
        if _close(got, want, rtol=1e-5, atol=1e-6):
            continue
        for wrong, problem in _rope_mistakes(x.astype(float), kwargs):
            if _close(got, wrong, rtol=1e-5, atol=1e-6):
                raise type(problem)(f"on {case}, {problem}")
        norms, got_norms = np.linalg.norm(x, axis=-1), np.linalg.norm(got, axis=-1)
        if not np.allclose(got_norms, norms, rtol=1e-4):
            at = np.unravel_index(int(np.argmax(np.abs(got_norms - norms))), norms.shape)
            raise Wrong(f"on {case}, the vector at position {at[-1]} changes its length, "
                        f"from {norms[at]:.4g} to {got_norms[at]:.4g}: a rotation keeps "
                        "every length, so features i and i + d/2, which form one pair "
                        "here, must turn by the same angle, that of frequency i")
        expect_close(got, want, case=case, rtol=1e-5, atol=1e-6,
                     hint="feature i and feature i + d/2 turn together by angle "
                          "p / base^(2i/d)")


def _rope_battery(rng):
    return [((x,), kwargs) for _, x, kwargs in _rope_cases(rng)]


def _interleaved(x, base=10000.0):
    return rope(x, base=base)


def _clockwise(x, base=10000.0):
    return _half(np.asarray(x, dtype=float), base, sign=-1.0)


def _fixed_base(x, base=10000.0):
    return _half(np.asarray(x, dtype=float))


register(Exercise(
    id="A.3",
    title="Rotate-half RoPE that does not rotate",
    kind="debug",
    reference=rope_rotate_half,
    given=_given_rope_half,
    diagnose=_diagnose_rope_half,
    battery=_rope_battery,
    success="features i and i + d/2 turn together by angle p / base^(2i/d), for one head, "
            "a batch of heads, any base, T = 1, d = 2, float32 and fresh random shapes",
    explain="The frequencies were laid out as [f_0, f_0, f_1, f_1, ...] (np.repeat), the "
            "layout of the interleaved RoPE, where features 2i and 2i+1 form pair i. In the "
            "rotate-half layout pair i is features i and i + d/2, so both halves need the "
            "angles in the same order: [f_0, ..., f_(d/2-1), f_0, ..., f_(d/2-1)]. With "
            "np.repeat the two features of a pair turn by different angles, which is not a "
            "rotation: lengths change, from position 1 on.",
    wrong_answers=(
        (_interleaved, "interleaved layout"),
        (_clockwise, "clockwise"),
        (_fixed_base, "use the base argument"),
    ),
))

# ---- A.4 the KV cache grouped-query attention saves (predict) ------------------------------

_T = 8_192
_MHA = dataclasses.replace(LLAMA3_8B, h_kv=LLAMA3_8B.h)
_SAVED = kv_cache_bytes(_MHA, _T) - kv_cache_bytes(LLAMA3_8B, _T)   # one sequence, bf16


def _number(answer) -> float:
    if isinstance(answer, (bool, np.bool_)) or not isinstance(answer, (int, float,
                                                                       np.number)):
        raise Wrong("answer with one number of bytes, e.g. 123_456_789 or 1.5 * 2**30")
    value = float(answer)
    if not math.isfinite(value):
        raise Wrong(f"{value} is not a number of bytes")
    return value


def _bytes(value: float) -> str:
    """The reader's number as given: 1,234 for a whole number, 1,234.5 for another."""
    return f"{value:,.0f}" if value == int(value) else f"{value:,}"


_RATIOS = (   # answer / right answer -> the likely slip
    (4 / 3, "that is the whole cache with h_kv = 32; the question asks what grouped-query "
            "attention saves: subtract the cache it still keeps with h_kv = 8"),
    (1 / 3, "that is the cache grouped-query attention still keeps (h_kv = 8); the saving "
            "is what the other 24 key/value heads would have cached"),
    (1 / 2, "half the saving: each key/value head caches a key AND a value, of d_head "
            "numbers each, and bf16 takes 2 bytes per number"),
    (2.0, "twice the saving: bf16 takes 2 bytes per number, not 4 (float32)"),
    (1 / 32, "every one of the L = 32 layers keeps its own keys and values"),
    (1 / _T, "that is the saving per token; the question asks for a whole sequence of "
             "8,192 tokens"),
    (32.0, "a key/value head is d_head = d / h = 128 numbers wide, not d = 4,096"),
    (8_000 / _T, "an 8k context here means 8,192 tokens"),
    (1e9 / 2**30, "that is a round figure in powers of ten, 7 % short; the cache is a "
                  "product of powers of two (a GiB is 2**30 bytes, not 10**9)"),
)


def _diagnose_saved(answer, rng) -> None:
    value = _number(answer)
    if value <= 0:
        raise Wrong("a saving is a positive number of bytes: the cache with h_kv = 32 "
                    "minus the cache with h_kv = 8")
    ratio = value / _SAVED
    if abs(ratio - 1) <= 0.01:
        return
    if value < 1:
        raise Wrong(f"{value:g} is a fraction, not a number of bytes: the question asks how "
                    "many bytes the cache saves for one sequence")
    for unit, name in ((2**30, "GiB"), (1e9, "GB"), (2**20, "MiB")):
        if value < 1e6 and abs(value * unit / _SAVED - 1) <= 0.08:
            raise Wrong(f"{answer} looks like {name}: answer in bytes (1 {name} = "
                        f"{unit:,.0f} bytes)")
    for r, why in _RATIOS:
        if abs(ratio / r - 1) <= 0.005:
            raise Wrong(f"{_bytes(value)} bytes: {why}")
    raise Wrong(f"{_bytes(value)} bytes is {ratio:.3g} times the saving. Count, for each of the "
                "L layers, each of the h - h_kv key/value heads that are no longer cached "
                "and each of the T tokens, a key and a value of d_head numbers, 2 bytes each")


register(Exercise(
    id="A.4",
    title="The KV cache that grouped-query attention saves",
    kind="predict",
    reference=_SAVED,
    diagnose=_diagnose_saved,
    success="2 x L x T x (h - h_kv) x d_head x 2 bytes",
    explain=(f"{_SAVED:,} bytes = {_SAVED / 2**30:g} GiB. Per layer and per token, every "
             f"key/value head caches a key and a value of d_head = {LLAMA3_8B.d_head} "
             f"numbers, 2 bytes each in bf16. Going from {_MHA.h_kv} to {LLAMA3_8B.h_kv} "
             f"key/value heads drops {_MHA.h_kv - LLAMA3_8B.h_kv} of them: 2 x "
             f"{LLAMA3_8B.L} layers x {_T:,} tokens x {_MHA.h_kv - LLAMA3_8B.h_kv} heads x "
             f"{LLAMA3_8B.d_head} x 2 bytes. That is three quarters of the "
             f"{kv_cache_bytes(_MHA, _T) / 2**30:g} GiB that multi-head attention would "
             "cache for one sequence."),
    wrong_answers=(
        (kv_cache_bytes(_MHA, _T), "the whole cache"),
        (kv_cache_bytes(LLAMA3_8B, _T), "still keeps"),
        (_SAVED // 2, "a key AND a value"),
        (2 * _SAVED, "not 4 (float32)"),
        (_SAVED / 2**30, "looks like GiB"),
        (_SAVED // _T, "per token"),
        ("3 GiB", "answer with one number"),
        (0.75, "0.75 is a fraction"),
        (-_SAVED, "positive number"),
        (1e9, "times the saving"),
        (3e9, "powers of ten"),
    ),
))

# ---- A.C challenge: one Llama block (implement) --------------------------------------------


def _gqa(a, p, cfg, *, order="repeat", turn=rope, base=None, turn_values=False,
         causal=True, swap_kv=False):
    """Grouped-query attention with RoPE, and its usual slips (to recognise a reader's).

    Shapes: a [..., T, d] -> [..., T, d]
    """
    base = cfg.rope_base if base is None else base
    q = split_heads(a @ p["W_q"], cfg.h)                 # [..., T, d] -> [..., h, T, d_head]
    k, v = np.split(a @ p["W_kv"], 2, axis=-1)           # [..., T, 2d_kv] -> 2 x [..., T, d_kv]
    if swap_kv:
        k, v = v, k
    k, v = split_heads(k, cfg.h_kv), split_heads(v, cfg.h_kv)   # [..., h_kv, T, d_head]
    if turn is not None:
        q, k = turn(q, base=base), turn(k, base=base)
        if turn_values:
            v = turn(v, base=base)
    group = cfg.h // cfg.h_kv
    if order == "repeat":                                # heads 0, 0, 1, 1, ...
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    else:                                                # heads 0, 1, 0, 1, ...
        reps = (1,) * (k.ndim - 3) + (group, 1, 1)
        k, v = np.tile(k, reps), np.tile(v, reps)        # -> [..., h, T, d_head]
    T = a.shape[-2]
    out, _ = attention(q, k, v, causal_mask(T) if causal else None)   # [..., h, T, d_head]
    return merge_heads(out) @ p["W_o"]                   # [..., T, d] @ [d, d] -> [..., T, d]


def _variant(x, p, cfg, *, layout="pre", eps=None, gains=("ln1_g", "ln2_g"), **attn):
    """A Llama block with one slip: the norms' placement, eps, the gains or the attention's.

    Shapes: x [..., T, d] -> [..., T, d]
    """
    eps = cfg.eps if eps is None else eps

    def norm(y, gain):
        return rms_norm(y, p[gain], eps)

    def att(y):
        return _gqa(y, p, cfg, **attn)

    def mlp(y):
        return swiglu(y, p["W_gate"], p["W_up"], p["W_down"])

    g1, g2 = gains
    if layout == "post":
        x = norm(x + att(x), g1)
        return norm(x + mlp(x), g2)
    if layout == "parallel":
        return x + att(norm(x, g1)) + mlp(norm(x, g2))
    if layout == "no residual":
        return mlp(norm(att(norm(x, g1)), g2))
    x = x + att(norm(x, g1))
    return x + mlp(norm(x, g2))


def _block_mistakes(cfg) -> list[tuple[dict, Exception]]:
    mistakes = [
        ({"layout": "post"}, Wrong(
            "that is post-norm, RMSNorm(x + f(x)): Llama normalises each sublayer's input, "
            "x = x + GQA(RMSNorm(x)), and leaves the sum unnormalised")),
        ({"layout": "no residual"}, Wrong(
            "the residual connections are missing: each sublayer's output is added to x "
            "(x = x + ...)")),
        ({"layout": "parallel"}, Wrong(
            "the MLP read the block's input: it must read the stream after the attention's "
            "write, RMSNorm(x + GQA(...))")),
        ({"gains": ("ln2_g", "ln1_g")}, Wrong(
            "the two norms' gains are swapped: ln1_g before the attention, ln2_g before the "
            "MLP")),
        ({"causal": False}, Wrong(
            "the attention is not causal: a token must not see later ones")),
        ({"turn": None}, Wrong(
            "RoPE is missing: turn every query and key head by rope(..., "
            "base=cfg.rope_base) after the projection")),
        ({"turn_values": True}, Wrong(
            "RoPE turned the values too: only queries and keys carry positions")),
        ({"swap_kv": True}, Wrong(
            "keys and values are swapped: W_kv holds the keys first, then the values")),
        ({"turn": rope_rotate_half}, other_convention(
            "RoPE in Hugging Face's rotate-half layout, pairs (i, i + d_head/2)",
            "the book's layout, pairs (2i, 2i+1) (chapter 5's rope), which these weights "
            "are stored for")),
    ]
    if 1 < cfg.h_kv < cfg.h:
        mistakes.append(({"order": "tile"}, Wrong(
            "key/value heads are shared in the wrong order: query head j reads key/value "
            "head j // (h / h_kv), i.e. 0, 0, 1, 1 (np.repeat on the head axis), not 0, 1, "
            "0, 1 (np.tile)")))
    if cfg.rope_base != 10000.0:
        mistakes.append(({"base": 10000.0}, Wrong(
            f"RoPE used base 10000, not cfg.rope_base = {cfg.rope_base:g}")))
    if cfg.eps != 1e-5:
        mistakes.append(({"eps": 1e-5}, Wrong(
            f"RMSNorm used eps = 1e-5, not cfg.eps = {cfg.eps:g}")))
    return mistakes


def _block_weights(cfg: LlamaConfig, rng, zero: bool = False) -> dict[str, np.ndarray]:
    """One block's weights with every entry visible: gains near 1, projections ~ 1/sqrt(in)."""
    shapes = block_params(param_shapes(cfg), 0)          # "W_q": (d, d), ...
    if zero:
        return {name: np.zeros(shape) for name, shape in shapes.items()}
    return {name: 1 + 0.3 * rng.standard_normal(shape) if len(shape) == 1
            else rng.standard_normal(shape) / math.sqrt(shape[0])
            for name, shape in shapes.items()}


def _config(d: int, h: int, h_kv: int, d_ff: int, rope_base: float = 10000.0,
            eps: float = 1e-5) -> LlamaConfig:
    return LlamaConfig(V=8, ctx=16, d=d, L=1, h=h, h_kv=h_kv, d_ff=d_ff,
                       rope_base=rope_base, eps=eps)


def _block_cases(rng) -> list[tuple[str, np.ndarray, dict, LlamaConfig]]:
    """(case, x, p, cfg)."""
    gqa = _config(16, 4, 2, 24)
    wide = _config(24, 6, 3, 40, rope_base=100.0, eps=0.05)
    mqa = _config(16, 4, 1, 24, rope_base=500.0)
    mha = _config(16, 4, 4, 24)
    cases = [
        ("x [6, 16], h = 4, h_kv = 2", rng.standard_normal((6, 16)), gqa),
        ("a batch x [2, 5, 24], h = 6, h_kv = 3, rope_base = 100, eps = 0.05",
         rng.standard_normal((2, 5, 24)), wide),
        ("multi-query attention, x [7, 16], h = 4, h_kv = 1, rope_base = 500",
         rng.standard_normal((7, 16)), mqa),
        ("multi-head attention, x [2, 3, 16], h = h_kv = 4",
         rng.standard_normal((2, 3, 16)), mha),
        ("a single token, x [1, 16]", rng.standard_normal((1, 16)), gqa),
    ]
    h_kv, group, d_head = (int(n) for n in rng.integers(1, 4, size=3))
    h = h_kv * group
    d = h * 2 * d_head
    fresh = _config(d, h, h_kv, int(rng.integers(1, 3 * d)),
                    rope_base=float(10.0 ** rng.uniform(1.5, 6)),
                    eps=[1e-5, 1e-6, 1e-3][int(rng.integers(0, 3))])
    lead, T = random_leading(rng, max_axes=2, max_size=2), int(rng.integers(2, 8))
    cases.append((f"fresh random x {list((*lead, T, d))}, h = {h}, h_kv = {h_kv}, "
                  f"rope_base = {fresh.rope_base:.4g}, eps = {fresh.eps:g}",
                  rng.standard_normal((*lead, T, d)), fresh))
    out = [(case, x, _block_weights(cfg, rng), cfg) for case, x, cfg in cases]
    out.append(("all-zero weights (RMSNorm gains too)", rng.standard_normal((4, 16)),
                _block_weights(gqa, rng, zero=True), gqa))
    return out


def _diagnose_block(fn, rng) -> None:
    for case, x, p, cfg in _block_cases(rng):
        want = llama_block(x, p, cfg)
        got = as_array(run(fn, x, p, cfg, case=case,
                           hint="p holds ln1_g, W_q, W_kv, W_o, ln2_g, W_gate, W_up, "
                                "W_down; cfg has h, h_kv, rope_base and eps"), case=case)
        if got.shape != want.shape:
            raise Wrong(f"on {case}, the result has shape {got.shape}; expected "
                        f"{want.shape}: a block returns the shape it was given, "
                        "[..., T, d], so that blocks can be stacked")
        if _close(got, want, rtol=1e-4, atol=1e-5):   # float32 RMSNorm/SwiGLU (A.1, A.2) too
            continue
        if not p["W_q"].any():
            expect_close(got, want, case=case, rtol=1e-5, atol=1e-8,
                         hint="with every weight zero both sublayers write 0, so the "
                              "block must return its input unchanged")
        for options, problem in _block_mistakes(cfg):
            if _close(got, _variant(x, p, cfg, **options), rtol=1e-5, atol=1e-8):
                raise type(problem)(f"on {case}, {problem}")
        expect_close(got, want, case=case, rtol=1e-4, atol=1e-5,
                     hint="x + GQA(RMSNorm(x)) with RoPE and a causal mask, then "
                          "+ SwiGLU(RMSNorm(x))")


def _block_battery(rng):
    return [((x, p, cfg), {}) for _, x, p, cfg in _block_cases(rng)]


def _post_norm(x, p, cfg):
    return _variant(x, p, cfg, layout="post")


def _tiled_heads(x, p, cfg):
    return _variant(x, p, cfg, order="tile")


def _no_rope(x, p, cfg):
    return _variant(x, p, cfg, turn=None)


def _default_base(x, p, cfg):
    return _variant(x, p, cfg, base=10000.0)


def _hf_layout(x, p, cfg):
    return _variant(x, p, cfg, turn=rope_rotate_half)


register(Exercise(
    id="A.C",
    title="Challenge: one Llama block",
    kind="implement",
    reference=llama_block,
    diagnose=_diagnose_block,
    battery=_block_battery,
    rtol=1e-5,
    atol=1e-8,
    success="x + GQA(RMSNorm(x)) with RoPE, causal, then + SwiGLU(RMSNorm(x)), for "
            "grouped, multi-query and multi-head attention, batches, T = 1, any RoPE base "
            "and eps, and the identity when every weight is zero",
    wrong_answers=(
        (_post_norm, "that is post-norm"),
        (_tiled_heads, "wrong order"),
        (_no_rope, "RoPE is missing"),
        (_default_base, "not cfg.rope_base"),
        (_hf_layout, "rotate-half layout"),
    ),
))
