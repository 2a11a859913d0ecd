"""The induction chapter's exercises ("N.1" ... "N.C"): an induction score of your own,
re-run on sequences you never saw (measure), which head's ablation costs the repeated half
most (predict), mean-ablation (implement), and, as the challenge, weights set by hand for a
two-block attention-only model that copies (construct)."""

from __future__ import annotations

import numpy as np

from ..gpt_numpy import forward
from ..induction import copier_weights, half_masks, repeated_tokens
from ..interp import _recorder, ablate_heads, head_writes, repeat_attention
from ..params import GPTConfig, check_params, init_params
from . import register
from ._core import Exercise, Wrong, expect_close, expect_number, expect_shape, run

_SMALL = GPTConfig(V=11, ctx=12, d=16, L=3, h=4, attn_only=True)
_WITH_MLP = GPTConfig(V=13, ctx=12, d=16, L=2, h=2)


def _noisy(cfg: GPTConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random weights loud enough that every head attends somewhere in particular."""
    return {k: v + rng.normal(0, 0.4, v.shape) for k, v in init_params(cfg, rng).items()}


def _shipped():
    from ..weights import load

    params, cfg, _ = load("induction")
    return params, cfg


# ---- N.1 an induction score of your own (measure) ------------------------------------------


def _score_cases(rng) -> list[tuple[str, dict, GPTConfig, np.ndarray]]:
    params, cfg = _shipped()
    seeds = rng.integers(0, 2**31, size=5)
    small, mlp = _noisy(_SMALL, rng), _noisy(_WITH_MLP, rng)
    return [
        ("the induction model on 24 fresh sequences of 32 tokens", params, cfg,
         repeated_tokens(int(seeds[0]), 24, 32, cfg.V)),
        ("the induction model on 3 fresh sequences of 8 tokens", params, cfg,
         repeated_tokens(int(seeds[1]), 3, 8, cfg.V)),
        ("a random 3-block model (h = 4) on one sequence of 4 tokens", small, _SMALL,
         repeated_tokens(int(seeds[2]), 1, 4, _SMALL.V)),
        ("a random 3-block model on 70 fresh sequences of 12 tokens", small, _SMALL,
         repeated_tokens(int(seeds[3]), 70, 12, _SMALL.V)),
        ("a random 2-block model with MLPs on 5 sequences of 10 tokens", mlp, _WITH_MLP,
         repeated_tokens(int(seeds[4]), 5, 10, _WITH_MLP.V)),
    ]


def _diagnose_scores(fn, rng) -> None:
    for case, params, cfg, ids in _score_cases(rng):
        got = run(fn, params, cfg, ids, case=case)
        want = repeat_attention(params, cfg, ids)
        arr = expect_shape(got, want.shape, case=case, name="your scores")
        if np.allclose(arr, want, rtol=1e-4, atol=1e-6):
            continue
        if np.allclose(arr, _key_offset(params, cfg, ids, 0), rtol=1e-4, atol=1e-6):
            raise Wrong(f"on {case}, you measured the attention on the earlier copy of the "
                        "current token itself (key t - T/2); an induction head looks one "
                        "further, at the token that followed it (key t - T/2 + 1)")
        if np.allclose(arr, _key_offset(params, cfg, ids, 2), rtol=1e-4, atol=1e-6):
            raise Wrong(f"on {case}, you measured key t - T/2 + 2, two after the earlier "
                        "copy; the token that followed it is key t - T/2 + 1")
        if arr.max() > 1 + 1e-6:
            raise Wrong(f"on {case}, a score is {arr.max():.3g}, above 1: an attention "
                        "weight is at most 1, so average over the queries and sequences, "
                        "do not add them up")
        expect_close(arr, want, case=case, name="your scores", rtol=1e-4, atol=1e-6,
                     hint="average, for each head, the weight from each query of the "
                          "repeated half (t = T/2 .. T-1) on key t - T/2 + 1, over every "
                          "query and sequence")


def _key_offset(params, cfg, ids, shift):
    """The same average with the key moved: shift 0 is the copy itself."""
    from ..interp import attention_patterns

    half = ids.shape[-1] // 2
    t = np.arange(half, 2 * half)                                       # [T/2]
    weights = attention_patterns(params, ids, cfg)                       # [L, n, h, T, T]
    keys = np.minimum(t - half + shift, t)
    return weights[..., t, keys].mean(axis=(1, 3))                      # [L, h]


def _score_battery(rng):
    return [((params, cfg, ids), {}) for _, params, cfg, ids in _score_cases(rng)]


def _copy_itself(params, cfg, ids):
    return _key_offset(params, cfg, ids, 0)


def _two_on(params, cfg, ids):
    return _key_offset(params, cfg, ids, 2)


def _summed(params, cfg, ids):
    return repeat_attention(params, cfg, ids) * ids.size / 2


def _flat(params, cfg, ids):
    return repeat_attention(params, cfg, ids).ravel()


register(Exercise(
    id="N.1",
    title="an induction score of your own",
    kind="measure",
    reference=repeat_attention,
    diagnose=_diagnose_scores,
    battery=_score_battery,
    success="your score matches the library's for every head, on fresh sequences of the "
            "induction model you never saw, on random models with and without MLPs, one "
            "sequence or seventy",
    wrong_answers=(
        (_copy_itself, "the earlier copy of the current token itself"),
        (_two_on, "two after the earlier copy"),
        (_summed, "above 1"),
        (_flat, "has shape"),
    ),
))


# ---- N.2 which head's ablation costs the repeated half most (predict) -------------------------

# The head whose mean-ablation raises the loss on the repeated half most, on the shipped
# model; tests/test_weights.py holds the model to it (test_the_costliest_head_...).
WORST_HEAD = (0, 0)


def _costs(rng) -> dict[tuple[int, int], float]:
    params, cfg = _shipped()
    ids = repeated_tokens(rng, 64, 32, cfg.V)
    _, repeat = half_masks(*ids.shape)
    base = ablate_heads(params, cfg, ids, [], where=repeat)
    return {(i, k): ablate_heads(params, cfg, ids, [(i, k)], where=repeat) - base
            for i in range(cfg.L) for k in range(cfg.h)}


def _diagnose_worst(answer, rng) -> None:
    if isinstance(answer, (str, bytes)) or not (isinstance(answer, (tuple, list))
                                                and len(answer) == 2):
        raise Wrong(f"answer with a (layer, head) pair, e.g. (1, 1), not {answer!r}")
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
               for v in answer):
        raise Wrong(f"answer with a (layer, head) pair of whole numbers, not {answer!r}")
    pair = tuple(int(v) for v in answer)
    if pair == WORST_HEAD:
        return
    costs = _costs(rng)
    if pair not in costs:
        raise Wrong(f"the model has no head {pair}: layers 0..1, heads 0..{max(costs)[1]}")
    raise Wrong(f"mean-ablating head {pair} raises the repeated half's loss by "
                f"{costs[pair]:.2f} nats; another head's ablation costs "
                f"{max(costs.values()):.2f}. Two heads copy; which head do both of them "
                "need?")


register(Exercise(
    id="N.2",
    title="the most costly head",
    kind="predict",
    reference=WORST_HEAD,
    diagnose=_diagnose_worst,
    success="the head whose mean-ablation costs the repeated half most",
    wrong_answers=(
        ((1, 1), "raises the repeated half's loss by"),
        ((1, 0), "which head do both of them need"),
        ((2, 0), "the model has no head (2, 0)"),
        ("layer 0", "answer with a (layer, head) pair"),
        ((0, 0.7), "of whole numbers"),
    ),
    explain="The previous-token head of layer 0. Both heads of layer 1 find the earlier "
            "copy through their keys, and their keys need what that one head wrote: without "
            "it, neither can copy, and the loss rises about as much as when both induction "
            "heads are ablated together. The two induction heads share the copying, so "
            "each alone costs less than the previous-token head that both depend on.",
))


# ---- N.3 mean-ablation (implement) ------------------------------------------------------------


def _ablation_cases(rng) -> list[tuple[str, dict, GPTConfig, np.ndarray, list]]:
    params, cfg = _shipped()
    mlp, small = _noisy(_WITH_MLP, rng), _noisy(_SMALL, rng)
    k = int(rng.integers(0, cfg.h))
    return [
        ("the induction model, heads [(1, 0)], 16 fresh repeated sequences", params, cfg,
         repeated_tokens(rng, 16, 32, cfg.V), [(1, 0)]),
        (f"the induction model, heads [(0, {k}), (1, 1)]", params, cfg,
         repeated_tokens(rng, 6, 20, cfg.V), [(0, k), (1, 1)]),
        ("a random model with MLPs, heads [(0, 1)], 4 random windows", mlp, _WITH_MLP,
         rng.integers(0, _WITH_MLP.V, size=(4, 9)), [(0, 1)]),
        ("a random 3-block model, two heads of one block", small, _SMALL,
         rng.integers(0, _SMALL.V, size=(3, 12)), [(1, 0), (1, 3)]),
        ("a random model with MLPs, no heads (the intact loss)", mlp, _WITH_MLP,
         rng.integers(0, _WITH_MLP.V, size=(2, 6)), []),
    ]


def _diagnose_ablation(fn, rng) -> None:
    for case, params, cfg, ids, heads in _ablation_cases(rng):
        got = expect_number(run(fn, params, cfg, ids, list(heads), case=case), case=case,
                            name="your loss")
        want = ablate_heads(params, cfg, ids, heads)
        if abs(got - want) <= 1e-5 + 1e-4 * abs(want):
            continue
        if heads and abs(got - ablate_heads(params, cfg, ids, heads, how="zero")) < 1e-5:
            raise Wrong(f"on {case}, your loss {got:.5f} is the zero-ablated one: you "
                        "removed the heads' writes; mean-ablation puts back each head's "
                        f"mean write (expected {want:.5f})")
        if heads and abs(got - _per_window(params, cfg, ids, heads)) < 1e-5:
            raise Wrong(f"on {case}, your loss {got:.5f} uses each window's own mean; take "
                        "each head's mean over every position of every window together "
                        f"(expected {want:.5f})")
        raise Wrong(f"on {case}, your loss is {got:.5f} but should be {want:.5f}: replace "
                    "each listed head's write (its output through its rows of W_o) by its "
                    "mean over every position and window, keep every other write, then "
                    "take the mean next-token loss")


def _ablation_battery(rng):
    return [((params, cfg, ids, heads), {}) for _, params, cfg, ids, heads in
            _ablation_cases(rng)]


def _per_window(params, cfg, ids, heads):
    """Mean-ablation with each window's own mean (a known wrong answer)."""
    from ..gpt_numpy import next_token_loss

    store: dict = {}
    forward(params, ids, cfg, edit=_recorder(params, store))
    layers = {layer for layer, _ in heads}

    def edit(name, write, writes):
        i = int(name.split(".")[1])
        if not name.endswith(".attn") or i not in layers:
            return write
        each = head_writes(writes, params[f"blocks.{i}.W_o"])             # [B, h, T, d]
        out = write.copy()
        for layer, k in heads:
            if layer == i:
                mean = store[i][:, k].mean(axis=1, keepdims=True)          # [B, 1, d]
                out += mean - each[:, k]
        return out

    return next_token_loss(forward(params, ids, cfg, edit=edit), ids)


def _zero(params, cfg, ids, heads):
    return ablate_heads(params, cfg, ids, heads, how="zero")


def _intact(params, cfg, ids, heads):
    return ablate_heads(params, cfg, ids, [])


register(Exercise(
    id="N.3",
    title="mean-ablation",
    kind="implement",
    reference=ablate_heads,
    diagnose=_diagnose_ablation,
    battery=_ablation_battery,
    success="the mean-ablated loss, for one head or several, in one block or two, with "
            "and without MLPs, and the intact loss for no heads",
    wrong_answers=(
        (_zero, "zero-ablated"),
        (_per_window, "each window's own mean"),
        (_intact, "should be"),
    ),
))


# ---- N.C weights that copy (construct, the challenge) -----------------------------------------

# The two models the check builds: d = 2V + ctx (a token, a position and a previous token).
COPIER_CONFIGS = (GPTConfig(V=10, ctx=20, d=40, L=2, h=1, attn_only=True),
                  GPTConfig(V=6, ctx=12, d=24, L=2, h=1, attn_only=True))
COPIER_ACCURACY = 0.98


def _diagnose_copier(fn, rng) -> None:
    for cfg in COPIER_CONFIGS:
        case = f"GPTConfig(V={cfg.V}, ctx={cfg.ctx}, d={cfg.d}, L=2, h=1, attn_only=True)"
        params = run(fn, cfg, case=case)
        if not isinstance(params, dict):
            raise Wrong(f"on {case}, your function returned a {type(params).__name__}; "
                        "expected a dict of weights named as param_shapes(cfg)")
        try:
            check_params(params, cfg)
        except ValueError as err:
            raise Wrong(f"on {case}, {err}") from None
        right = other = total = 0
        for _ in range(40):
            half = int(rng.integers(2, min(cfg.V, cfg.ctx // 2) + 1))
            first = rng.permutation(cfg.V)[:half]                       # distinct tokens
            ids = np.concatenate([first, first])                        # [T]
            guess = forward(params, ids, cfg)[half:-1].argmax(axis=-1)  # [T/2 - 1]
            right += int((guess == ids[half + 1:]).sum())
            other += int((guess == ids[half:-1]).sum())
            total += half - 1
        if right >= COPIER_ACCURACY * total:
            continue
        message = (f"on {case}, your model's likeliest next token is the right one at "
                   f"{right} of {total} positions of fresh repeated halves")
        if other > total / 2:
            raise Wrong(message + ": it mostly predicts the current token again; the "
                        "second head must look at the token after the earlier copy; one "
                        "way: its keys read the previous token, written by the first head")
        raise Wrong(message + f"; it must be right at {COPIER_ACCURACY:.0%} of them")


def _repeat_current(cfg):
    """Weights that echo the current token (a known wrong answer)."""
    p = copier_weights(cfg)
    p["blocks.1.W_o"] = np.zeros_like(p["blocks.1.W_o"])
    return p


def _all_zero(cfg):
    return {k: np.zeros_like(v) for k, v in copier_weights(cfg).items()}


def _missing_key(cfg):
    p = copier_weights(cfg)
    del p["blocks.1.W_o"]
    return p


register(Exercise(
    id="N.C",
    title="Challenge: weights that copy",
    kind="construct",
    reference=copier_weights,
    diagnose=_diagnose_copier,
    success=f"on fresh repeated sequences your model's likeliest next token is the one "
            f"that followed the earlier copy at least {COPIER_ACCURACY:.0%} of the time, "
            "for both sizes",
    wrong_answers=(
        (_repeat_current, "predicts the current token again"),
        (_all_zero, "it must be right"),
        (_missing_key, "missing key"),
    ),
))
