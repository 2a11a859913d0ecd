"""The inference chapter's exercises ("I.1" ... "I.C"): the online-softmax update
(implement), the acceptance rate at which speculative decoding breaks even (predict), an int8
quantizer whose largest positive weight changes sign (debug), how much a text repeats itself
(implement), and attention in tiles under a memory budget (the challenge)."""

from __future__ import annotations

import numpy as np

from ..attention import attention
from ..inference.decoding import repeated_ngrams
from ..inference.quantize import absmax_int8
from ..inference.tiled import naive_attention, online_softmax_update, peak_bytes, tiled_attention
from . import register
from ._core import (
    Exercise,
    Wrong,
    as_array,
    expect_close,
    expect_number,
    expect_shape,
    other_convention,
    run,
)


def _shape(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


# ---- I.1 the online-softmax update (implement) ----------------------------------------------


def _state(rng, lead, T_q, d_v, blocks):
    """The running (m, l, acc) after folding ``blocks`` random blocks, by the reference."""
    m = np.full((*lead, T_q), -np.inf)
    l = np.zeros((*lead, T_q))                              # noqa: E741
    acc = np.zeros((*lead, T_q, d_v))
    for _ in range(blocks):
        s = rng.standard_normal((*lead, T_q, 5)) * 3
        m, l, acc = online_softmax_update(m, l, acc, s, rng.standard_normal((*lead, 5, d_v)))  # noqa: E741
    return m, l, acc


def _update_cases(rng):
    """(case, m, l, acc, scores, v): the first block, later blocks with a larger and a
    smaller maximum, masked keys, huge scores, a batch, fresh random ones."""
    fixed = np.random.default_rng(3)
    cases = []
    m, l, acc = _state(fixed, (), 3, 2, 0)                  # noqa: E741
    cases.append(("the first block (m = -inf, l = 0, acc = 0)", m, l, acc,
                  fixed.standard_normal((3, 4)), fixed.standard_normal((4, 2))))
    m, l, acc = _state(fixed, (), 3, 2, 1)                  # noqa: E741
    cases.append(("a second block whose scores are larger than any so far", m, l, acc,
                  fixed.standard_normal((3, 4)) + 8, fixed.standard_normal((4, 2))))
    cases.append(("a second block whose scores are all smaller", m, l, acc,
                  fixed.standard_normal((3, 4)) - 8, fixed.standard_normal((4, 2))))
    s = fixed.standard_normal((3, 4)) + 1
    s[:, 2:] = -np.inf
    cases.append(("a block with masked keys (-inf scores)", m, l, acc, s,
                  fixed.standard_normal((4, 2))))
    m, l, acc = _state(fixed, (), 2, 3, 1)                  # noqa: E741
    cases.append(("huge scores (about 1000)", m + 1000, l, acc,
                  fixed.standard_normal((2, 6)) + 1001, fixed.standard_normal((6, 3))))
    m, l, acc = _state(fixed, (2, 3), 4, 2, 2)              # noqa: E741
    cases.append(("a batch of heads [B, h] = [2, 3]", m, l, acc,
                  fixed.standard_normal((2, 3, 4, 7)) * 2, fixed.standard_normal((2, 3, 7, 2))))
    for _ in range(2):
        lead = tuple(int(n) for n in rng.integers(1, 4, size=rng.integers(0, 3)))
        T_q, T_b, d_v = (int(n) for n in rng.integers(1, 7, size=3))
        m, l, acc = _state(rng, lead, T_q, d_v, int(rng.integers(0, 3)))   # noqa: E741
        cases.append((f"fresh random scores {_shape((*lead, T_q, T_b))}", m, l, acc,
                      rng.standard_normal((*lead, T_q, T_b)) * 4,
                      rng.standard_normal((*lead, T_b, d_v))))
    return cases


def _diagnose_update(fn, rng) -> None:
    for case, m, l, acc, s, v in _update_cases(rng):        # noqa: E741
        got = run(fn, m, l, acc, s, v, case=case)
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise Wrong(f"on {case}, expected a tuple (m, l, acc), got "
                        f"{type(got).__name__}")
        want = online_softmax_update(m, l, acc, s, v)
        names = ("the new m", "the new l", "the new acc")
        hints = ("the running maximum is the larger of the old one and this block's",
                 "the old sum must be rescaled by exp(m_old - m_new) before this block's "
                 "exponentials are added",
                 "the old acc must be rescaled by exp(m_old - m_new) too, like l")
        for g, w, name, hint in zip(got, want, names, hints, strict=True):
            expect_close(as_array(g, case=case, name=name), w, case=case, name=name,
                         rtol=1e-6, atol=1e-9, hint=hint)
    # The end result of folding blocks one at a time: softmax attention itself.
    q, k, v = (rng.standard_normal((5, 4)) for _ in range(3))
    s = q @ k.T / 2.0                                        # [5, 5] scores, d = 4
    m, l, acc = np.full(5, -np.inf), np.zeros(5), np.zeros((5, 4))   # noqa: E741
    for j in range(0, 5, 2):
        m, l, acc = run(fn, m, l, acc, s[:, j:j + 2], v[j:j + 2], case="a fold of 3 blocks")  # noqa: E741
    expect_close(np.asarray(acc) / np.asarray(l)[:, None], attention(q, k, v)[0],
                 case="three blocks folded one after another, then acc / l", rtol=1e-6,
                 atol=1e-9, name="acc / l")


def _update_battery(rng):
    return [((m, l, acc, s, v), {}) for _, m, l, acc, s, v in _update_cases(rng)]  # noqa: E741


def _no_rescale(m, l, acc, scores, v):                      # noqa: E741
    m_new = np.maximum(m, scores.max(axis=-1))
    p = np.exp(scores - m_new[..., None])
    return m_new, l + p.sum(axis=-1), acc + p @ v


def _rescale_l_only(m, l, acc, scores, v):                  # noqa: E741
    m_new = np.maximum(m, scores.max(axis=-1))
    p = np.exp(scores - m_new[..., None])
    return m_new, l * np.exp(m - m_new) + p.sum(axis=-1), acc + p @ v


def _unstable(m, l, acc, scores, v):                        # noqa: E741
    m_new = np.maximum(m, scores.max(axis=-1))
    scale = np.exp(m) / np.exp(m_new)
    p = np.exp(scores) / np.exp(m_new)[..., None]
    return m_new, l * scale + p.sum(axis=-1), acc * scale[..., None] + p @ v


register(Exercise(
    id="I.1",
    title="The online-softmax update",
    kind="implement",
    reference=online_softmax_update,
    diagnose=_diagnose_update,
    battery=_update_battery,
    success="the running max, sum and weighted values after each block, on a first block, "
            "larger and smaller maxima, masked keys, huge scores, a batch, fresh random "
            "blocks, and three blocks folding into softmax attention",
    wrong_answers=(
        (_no_rescale, "must be rescaled by exp(m_old - m_new)"),
        (_rescale_l_only, "the old acc must be rescaled"),
        (_unstable, "huge scores"),
    ),
))

# ---- I.2 where the draft breaks even (predict) ----------------------------------------------

_K, _COST = 2, 0.375
# break even: 1 + a + a^2 = k c + 1, so a^2 + a - k c = 0 and a = (-1 + sqrt(1 + 4 k c)) / 2
_ALPHA = round((-1 + (1 + 4 * _K * _COST) ** 0.5) / 2, 2)


def _diagnose_break_even(answer, rng) -> None:
    value = expect_number(answer, case="your answer", name="your answer")
    if abs(value - _ALPHA) <= 0.011:
        return
    if abs(value - _COST) < 0.02:
        raise Wrong(f"{value:g} solves 1 + 2 alpha = 2c + 1, which counts the second draft "
                    "as if judged on its own; it only counts when the first was accepted "
                    "too (probability alpha^2)")
    if abs(value - 0.75) < 0.02:
        raise Wrong(f"{value:g} solves 1 + alpha = 2c + 1, which leaves out the last term: "
                    "when both drafts are accepted the target's pass gives one token more "
                    "(probability alpha^2)")
    if abs(value - 1.0) < 0.02 or abs(value) < 0.02:
        raise Wrong(f"{value:g} is not where the speed-up (1 + alpha + alpha^2) / (2c + 1) "
                    "equals 1: set the tokens per round equal to the cost of a round")
    raise Wrong(f"{value:g} is not it: the round yields 1 + alpha + alpha^2 tokens and "
                "costs 2c + 1 target steps; solve for the alpha where the two are equal "
                "(two decimals)")


register(Exercise(
    id="I.2",
    title="Where the draft breaks even",
    kind="predict",
    reference=_ALPHA,
    diagnose=_diagnose_break_even,
    success="1 + alpha + alpha^2 = 2 * 0.375 + 1, so alpha^2 + alpha - 0.75 = 0 and "
            "alpha = 0.5",
    explain="A round of k = 2 drafts costs 2c + 1 = 1.75 target steps and yields "
            "1 + alpha + alpha^2 tokens: the first always, the second when draft 1 is "
            "accepted, the third (the bonus) when both are. Break even is where the two are "
            "equal: alpha^2 + alpha - 0.75 = 0, whose positive root is "
            "(-1 + sqrt(1 + 3)) / 2 = 0.5. Below it, the drafts cost more than they save.",
    wrong_answers=((0.375, "counts the second draft"), (0.75, "leaves out the last term"),
                   (1.0, "set the tokens per round equal"), (0.6, "is not it")),
))

# ---- I.3 an int8 quantizer (debug) ----------------------------------------------------------


# The given function rounds into int64 and only then narrows to int8. Narrowing an integer
# keeps its low 8 bits, so 128 wraps to -128 the same way on every CPU; a cast straight from
# the float 128.0 is undefined behaviour in C, and NumPy does not pin its result down.


def int8_as_given(W):
    """Int8 per output channel: q [n_in, n_out], scale [n_out]."""
    W = np.asarray(W, dtype=np.float64)
    scale = np.abs(W).max(axis=0) / 128                     # [n_out]
    scale = np.where(scale > 0, scale, 1.0)
    q = np.round(W / scale)                                 # [n_in, n_out]
    q = q.astype(np.int64)                  # [n_in, n_out] as integers
    return q.astype(np.int8), scale.astype(np.float32)


def _int8_fixed(W):
    """Int8 per output channel: q [n_in, n_out], scale [n_out]."""
    W = np.asarray(W, dtype=np.float64)
    scale = np.abs(W).max(axis=0) / 127                     # [n_out]
    scale = np.where(scale > 0, scale, 1.0)
    q = np.round(W / scale)                                 # [n_in, n_out]
    q = q.astype(np.int64)                  # [n_in, n_out] as integers
    return q.astype(np.int8), scale.astype(np.float32)


def _int8_cases(rng):
    fixed = np.random.default_rng(5)
    W = fixed.standard_normal((6, 4))
    W[2, 1] = 3.0                                           # a positive largest |w|
    W[4, 3] = -3.0                                          # a negative one
    zero = fixed.standard_normal((5, 3))
    zero[:, 1] = 0.0
    cases = [("W [6, 4] with largest weights +3 and -3", W),
             ("W [5, 3] with an all-zero column", zero),
             ("W [1, 1] = [[0.5]]", np.array([[0.5]])),
             ("W [3, 2] of float32", fixed.standard_normal((3, 2)).astype(np.float32))]
    for _ in range(2):
        n_in, n_out = (int(n) for n in rng.integers(1, 40, size=2))
        cases.append((f"fresh random W {_shape((n_in, n_out))}",
                      rng.standard_normal((n_in, n_out)) * rng.uniform(0.01, 3)))
    return cases


def _diagnose_int8(fn, rng) -> None:
    for case, W in _int8_cases(rng):
        got = run(fn, W, case=case)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Wrong(f"on {case}, expected a tuple (q, scale), got {type(got).__name__}")
        q, scale = got
        q = np.asarray(q)
        if q.dtype != np.int8:
            raise Wrong(f"on {case}, q has dtype {q.dtype}; expected int8")
        q = expect_shape(q, W.shape, case=case, name="q")
        scale = expect_shape(scale, (W.shape[1],), case=case, name="scale")
        if not np.all(np.isfinite(scale) & (scale > 0)):
            raise Wrong(f"on {case}, a scale is {scale.min():g}: every scale must be a "
                        "positive number (an all-zero column can take any, say 1)")
        want_q, want_scale = absmax_int8(W)
        live = np.abs(W).max(axis=0) > 0                    # columns with a weight
        expect_close(scale[live], want_scale[live], case=case, name="scale", rtol=1e-6,
                     atol=0.0, hint="the scale maps each column's largest |w| to 127")
        if np.any(scale[~live] != 1):
            raise other_convention(f"on {case}, an all-zero column has scale "
                                   f"{scale[~live][0]:g} (any positive scale dequantizes "
                                   "it to zeros)", "scale 1 there, as the library uses")
        back = q * scale.astype(np.float64)                 # [n_in, n_out]
        err = np.abs(back - W)
        if np.any(np.sign(back) * np.sign(W) < 0) and err.max() > 1.5 * np.abs(W).max() / 127:
            at = np.unravel_index(int(np.argmax(err)), err.shape)
            raise Wrong(f"on {case}, W[{at[0]}, {at[1]}] = {W[at]:g} comes back as "
                        f"{back[at]:g}: its sign flipped, so a value of q fell outside "
                        "int8's range [-128, 127] and wrapped around")
        expect_close(q, want_q, case=case, name="q", rtol=0.0, atol=0.0,
                     hint="q = round(W / scale), in [-127, 127]")


def _int8_battery(rng):
    return [((W,), {}) for _, W in _int8_cases(rng)]


def _wraps(W):
    return int8_as_given(W)


def _floor(W):
    W = np.asarray(W, dtype=np.float64)
    scale = np.abs(W).max(axis=0) / 127
    scale = np.where(scale > 0, scale, 1.0)
    return np.floor(W / scale).astype(np.int8), scale.astype(np.float32)


def _per_row(W):
    W = np.asarray(W, dtype=np.float64)
    scale = np.abs(W).max() / 127
    return np.round(W / scale).astype(np.int8), np.full(W.shape[1], scale, np.float32)


register(Exercise(
    id="I.3",
    title="An int8 quantizer whose largest positive weight flips",
    kind="debug",
    reference=absmax_int8,
    given=int8_as_given,
    fix=_int8_fixed,
    diagnose=_diagnose_int8,
    battery=_int8_battery,
    success="each column's largest |w| maps to 127, q = round(W / scale) stays inside "
            "int8, for +3 and -3 maxima, a zero column (scale 1), float32 and fresh random "
            "matrices",
    wrong_answers=(
        (_floor, "q = round(W / scale)"),
        (_per_row, "scale"),
    ),
))

# ---- I.4 how much a text repeats itself (implement) -----------------------------------------


def _loopy(rng, T: int, V: int) -> np.ndarray:
    """A random text that falls into loops: each id follows the last one by a fixed random
    table most of the time, as a greedy decoder does."""
    follow = rng.integers(0, V, size=V)
    ids = [int(rng.integers(0, V))]
    for _ in range(T - 1):
        ids.append(int(follow[ids[-1]]) if rng.random() < 0.8 else int(rng.integers(0, V)))
    return np.array(ids)


def _ngram_cases(rng):
    cases = [("'abcabc' as ids [0, 1, 2, 0, 1, 2] with n = 3", np.array([0, 1, 2, 0, 1, 2]), 3),
             ("ids [7, 7, 7, 7, 7] with n = 2", np.array([7, 7, 7, 7, 7]), 2),
             ("ids [1, 2, 3, 4] with n = 4 (one n-gram)", np.array([1, 2, 3, 4]), 4),
             ("ids [3, 1, 3, 1, 3] with n = 1", np.array([3, 1, 3, 1, 3]), 1),
             ("ids [0, 1, 2, 3, 4, 5] (no repeats) with n = 2", np.arange(6), 2)]
    for _ in range(3):
        T, V, n = int(rng.integers(8, 80)), int(rng.integers(2, 9)), int(rng.integers(1, 6))
        cases.append((f"a fresh random looping text of {T} ids with n = {n}",
                      _loopy(rng, T, V), n))
    return cases


def _diagnose_ngrams(fn, rng) -> None:
    for case, ids, n in _ngram_cases(rng):
        got = expect_number(run(fn, ids, n, case=case), case=case)
        want = repeated_ngrams(ids, n)
        total = len(ids) - n + 1
        if abs(got - want) <= 1e-9:
            continue
        seen = len({tuple(ids[i:i + n]) for i in range(total)})
        if abs(got - seen / total) <= 1e-9:
            raise Wrong(f"on {case}, got {got:.4g}, the fraction of distinct n-grams; "
                        f"expected {want:.4g}, the fraction that already occurred earlier")
        if abs(got * total - want * total) > 0.5 and abs(got * (total - 1) - want * total) < 1e-6:
            raise Wrong(f"on {case}, got {got:.4g} but expected {want:.4g}: there are "
                        f"T - n + 1 = {total} n-grams, the last one included")
        raise Wrong(f"on {case}, got {got:.4g} but expected {want:.4g} (count the n-grams "
                    "that already occurred earlier, over all T - n + 1 of them)")


def _ngram_battery(rng):
    return [((ids, n), {}) for _, ids, n in _ngram_cases(rng)]


def _distinct(ids, n=4):
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams)


def _drops_last(ids, n=4):
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n)]
    return sum(g in grams[:i] for i, g in enumerate(grams)) / max(len(grams), 1)


register(Exercise(
    id="I.4",
    title="How much a text repeats itself",
    kind="implement",
    reference=repeated_ngrams,
    diagnose=_diagnose_ngrams,
    battery=_ngram_battery,
    success="the fraction of n-grams seen before, on loops, no repeats, one n-gram, n = 1 "
            "and fresh random looping texts",
    wrong_answers=((_distinct, "fraction of distinct"), (_drops_last, "expected")),
))

# ---- I.C attention in tiles (challenge) -----------------------------------------------------

_BUDGET_T = 1024
_BUDGET_D = 4        # narrow heads: a [T, d] float64 array is 32 KiB
_BUDGET_BLOCK = 64   # the budget is one [T, block] float64 slab of scores, 512 KiB


def _tile_cases(rng):
    fixed = np.random.default_rng(11)

    def qkv(lead, T_q, T_k, d_k, gen=fixed):                # d_v = d_k here
        return (gen.standard_normal((*lead, T_q, d_k)), gen.standard_normal((*lead, T_k, d_k)),
                gen.standard_normal((*lead, T_k, d_k)))

    cases = [("T = 8, block = 4, not causal", *qkv((), 8, 8, 4), 4, False),
             ("T = 8, block = 4, causal", *qkv((), 8, 8, 4), 4, True),
             ("T = 11, block = 4 (T not a multiple of the block), causal",
              *qkv((), 11, 11, 3), 4, True),
             ("T = 1", *qkv((), 1, 1, 5), 3, True),
             ("a batch of heads [B, h] = [2, 3], T = 10, block = 3, causal",
              *qkv((2, 3), 10, 10, 4), 3, True),
             ("T_q = 3 queries (the last 3 of T_k = 9 positions), block = 2, causal",
              *qkv((), 3, 9, 4), 2, True),
             ("T_q = 5, T_k = 7, block = 3, not causal", *qkv((), 5, 7, 2), 3, False),
             ("block = 64, larger than T = 20, causal", *qkv((), 20, 20, 4), 64, True),
             ("scores of about 100", *(x * 10 for x in qkv((), 6, 6, 4)), 2, True)]
    for _ in range(2):
        lead = tuple(int(n) for n in rng.integers(1, 3, size=rng.integers(0, 3)))
        T = int(rng.integers(1, 30))
        block, causal = int(rng.integers(1, 9)), bool(rng.integers(0, 2))
        cases.append((f"fresh random q, k, v {_shape((*lead, T, 4))}, block = {block}, "
                      f"causal={causal}", *qkv(lead, T, T, 4, rng), block, causal))
    return cases


def _diagnose_tiles(fn, rng) -> None:
    for case, q, k, v, block, causal in _tile_cases(rng):
        got = run(fn, q, k, v, block, causal, case=case)
        want = naive_attention(q, k, v, causal)
        hint = ("with T_q < T_k, query i sits at position T_k - T_q + i" if
                q.shape[-2] < k.shape[-2] and causal else
                "causal: query i sees keys 0..i only" if causal else
                "rescale what was summed so far when a block brings a larger maximum")
        expect_close(got, want, case=case, rtol=1e-9, atol=1e-10, hint=hint)
    # The budget is one [T, block] float64 slab of scores. A pass that tiles only the keys
    # (or only the queries) holds such a slab and its running sums besides, so it cannot fit;
    # the reference's [block, block] tiles and [T, d] arrays take about a quarter of it.
    q, k, v = (rng.standard_normal((_BUDGET_T, _BUDGET_D)) for _ in range(3))
    slab = _BUDGET_T * _BUDGET_BLOCK * 8                    # one [T, block] float64 slab
    used = peak_bytes(run, fn, q, k, v, _BUDGET_BLOCK, True, copy_inputs=False,
                      case=f"T = {_BUDGET_T}, d = {_BUDGET_D}, block = {_BUDGET_BLOCK}")
    if used > slab:
        held = ("about a whole [T, T] table" if used > _BUDGET_T ** 2 * 8 / 2 else
                "every query against a block of keys, or a block of queries against every "
                "key, or a [T, T] mask")
        raise Wrong(f"at T = {_BUDGET_T}, d = {_BUDGET_D}, block = {_BUDGET_BLOCK}, your "
                    f"function's memory peaked at {used / 2**10:.0f} KiB, more than one "
                    f"[T, block] float64 slab of scores ({slab / 2**10:.0f} KiB): it seems to "
                    f"hold {held}; walk the queries in blocks as well as the keys, so that "
                    "only [block, block] tiles of scores are alive at a time")


def _tile_battery(rng):
    return [((q, k, v, block, causal), {}) for _, q, k, v, block, causal in _tile_cases(rng)]


def _whole_table(q, k, v, block=64, causal=False):
    return naive_attention(q, k, v, causal)


def _no_rescale_tiles(q, k, v, block=64, causal=False):
    T_q, T_k = q.shape[-2], k.shape[-2]
    out = np.zeros((*q.shape[:-1], v.shape[-1]))
    total = np.zeros(q.shape[:-1])
    for j0 in range(0, T_k, block):
        s = q @ np.swapaxes(k[..., j0:j0 + block, :], -1, -2) / np.sqrt(q.shape[-1])
        if causal:
            pos_k = j0 + np.arange(s.shape[-1])
            s = np.where(pos_k[None, :] > (T_k - T_q + np.arange(T_q))[:, None], -np.inf, s)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        total += p.sum(axis=-1)
        out += p @ v[..., j0:j0 + block, :]
    return out / total[..., None]


def _keys_only_tiles(q, k, v, block=64, causal=False):
    """Right to rounding, but every query meets each block of keys at once: a [T_q, block]
    slab of scores per step."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    pos_q = T_k - T_q + np.arange(T_q)[:, None]             # [T_q, 1]
    m = np.full(q.shape[:-1], -np.inf)
    l = np.zeros(q.shape[:-1])                              # noqa: E741
    acc = np.zeros((*q.shape[:-1], v.shape[-1]))
    for j0 in range(0, T_k, block):
        s = q @ np.swapaxes(k[..., j0:j0 + block, :], -1, -2) / np.sqrt(q.shape[-1])
        if causal:                                          # [T_q, b_k]
            s = np.where(j0 + np.arange(s.shape[-1]) > pos_q, -np.inf, s)
        m, l, acc = online_softmax_update(m, l, acc, s, v[..., j0:j0 + block, :])  # noqa: E741
    return acc / l[..., None]


def _queries_only_tiles(q, k, v, block=64, causal=False):
    """Right to rounding, but each block of queries meets every key it may see at once: a
    [block, T_k] slab of scores per step."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    out = []
    for i0 in range(0, T_q, block):
        qi = q[..., i0:i0 + block, :]
        seen = T_k - T_q + i0 + qi.shape[-2] if causal else T_k     # keys up to the last query
        out.append(naive_attention(qi, k[..., :seen, :], v[..., :seen, :], causal))
    return np.concatenate(out, axis=-2)


register(Exercise(
    id="I.C",
    title="Attention in tiles",
    kind="implement",
    reference=tiled_attention,
    diagnose=_diagnose_tiles,
    battery=_tile_battery,
    rtol=1e-9,
    atol=1e-10,
    success="equal to attention within 1e-9, causal or not, T not a multiple of the block, "
            "T = 1, a batch of heads, fewer queries than keys, fresh random inputs, and "
            "under one [T, block] slab of scores (512 KiB) at T = 1024, block = 64",
    wrong_answers=((_whole_table, "a whole [T, T] table"),
                   (_keys_only_tiles, "every query against a block of keys"),
                   (_queries_only_tiles, "every query against a block of keys"),
                   (_no_rescale_tiles, "should be")),
))
