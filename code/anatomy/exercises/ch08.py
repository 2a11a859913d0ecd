"""Chapter 8 exercises: the embedding step and the shifted loss (implement), which rows of
logits one token reaches (predict), a generator that forgets its window (debug), a model
that writes "abcabc..." (construct), the trained model's loss on text the check picks
(measure), and the whole forward pass from its pieces (the challenge)."""

from __future__ import annotations

import functools
import math
import os

import numpy as np

from ..blocks import gelu, layer_norm, mlp, relu
from ..gpt_numpy import (
    embed,
    forward,
    generate,
    loss,
    next_token_distribution,
    next_token_loss,
    sample,
)
from ..heads import multi_head_attention
from ..params import GPTConfig, block_params, check_params, init_params, param_shapes
from ..weights import load as load_weights
from ..weights import window_loss
from . import register
from ._core import (
    Exercise,
    Wrong,
    as_array,
    call_quietly,
    expect_close,
    expect_number,
    expect_shape,
    int_set,
    other_convention,
    random_leading,
    run,
)

# ---- shared: small random models --------------------------------------------------------


def _random_cfg(rng: np.random.Generator, *, tied: bool | None = None, max_ctx: int = 8
                ) -> GPTConfig:
    """A small GPT of random shape: V, ctx, d (a multiple of h), L, h, d_ff, tied or not."""
    h = int(rng.choice([1, 2, 4]))
    return GPTConfig(V=int(rng.integers(3, 14)), ctx=int(rng.integers(2, max_ctx + 1)),
                     d=h * 2 * int(rng.integers(1, 4)), L=int(rng.integers(1, 3)), h=h,
                     d_ff=int(rng.integers(4, 33)),
                     tied=bool(rng.integers(0, 2)) if tied is None else tied)


def _random_params(cfg: GPTConfig, rng: np.random.Generator, scale: float = 0.3
                   ) -> dict[str, np.ndarray]:
    """Every weight random, LayerNorm gains and biases included, so no part is a no-op."""
    return {name: value + rng.standard_normal(value.shape) * scale
            for name, value in init_params(cfg, rng).items()}


def _ids(rng: np.random.Generator, V: int, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, V, size=shape)


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


# ---- 8.1 embedding (implement) ----------------------------------------------------------

_SLICE = ("add only the first T rows of the position table, pos_emb[:T] with "
          "T = ids.shape[-1]: the table has ctx rows, the sequence only T")


def _embed_cases(rng) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """(case, tok_emb, pos_emb, ids): fixed edge cases, then fresh random ones."""
    fixed = np.random.default_rng(0)
    tok, pos = fixed.standard_normal((7, 4)), fixed.standard_normal((6, 4))
    cases = [
        # T = 3 < ctx = 6, and every id < ctx, so picking position rows by id would run
        ("tok_emb [V, d] = [7, 4], pos_emb [ctx, d] = [6, 4], ids [T] = [4, 1, 2]",
         tok, pos, np.array([4, 1, 2])),
        ("a batch ids [B, T] = [2, 3]", tok, pos, np.array([[0, 6, 3], [5, 5, 1]])),
        ("a single token (T = 1)", tok, pos, np.array([2])),
        ("a sequence as long as the table (T = ctx = 6)", tok, pos,
         np.array([6, 0, 2, 2, 5, 1])),
    ]
    for i in range(2):
        V, ctx, d = (int(n) for n in rng.integers(2, 12, size=3))
        T = int(rng.integers(1, ctx + 1))
        shape = (T,) if i == 0 else (int(rng.integers(1, 5)), T)
        dtype = np.float32 if i == 1 else np.float64
        cases.append((f"fresh random tables [V, d] = [{V}, {d}], [ctx, d] = [{ctx}, {d}] "
                      f"({np.dtype(dtype).name}) and ids {_shape_text(shape)}",
                      rng.standard_normal((V, d)).astype(dtype),
                      rng.standard_normal((ctx, d)).astype(dtype), _ids(rng, V, shape)))
    return cases


def _diagnose_embed(fn, rng) -> None:
    for case, tok, pos, ids in _embed_cases(rng):
        T, d = ids.shape[-1], tok.shape[1]
        hint = "for a batch [B, T], T is ids.shape[-1], not len(ids)" if ids.ndim == 2 \
            else _SLICE
        got = as_array(run(fn, tok, pos, ids, case=case, hint=hint), case=case)
        want = embed(tok, pos, ids)
        if got.shape == (*ids.shape, 2 * d):
            raise Wrong(f"on {case}, the result has shape {got.shape}; expected "
                        f"{want.shape} = [..., T, d]: add the token and position rows "
                        "instead of concatenating them, so the stream stays d wide")
        got = expect_shape(got, want.shape, case=case)
        if np.allclose(got, want, rtol=1e-6, atol=1e-6):
            continue
        if np.allclose(got, tok[ids]):
            raise Wrong(f"on {case}, the result is tok_emb[ids] alone: the position rows "
                        "are missing, so the model cannot tell 'nasi lemak' from "
                        "'lemak nasi'")
        if ids.max() < pos.shape[0] and np.allclose(got, tok[ids] + pos[ids]):
            raise Wrong(f"on {case}, the position rows were picked by token id "
                        "(pos_emb[ids]); row t of the sequence gets position row t: "
                        "pos_emb[:T]")
        expect_close(got, want, case=case, rtol=1e-6, atol=1e-6,
                     hint="every sequence of a batch gets the same position rows "
                          f"0..T-1 = 0..{T - 1}")


def _embed_battery(rng):
    return [((tok, pos, ids), {}) for _, tok, pos, ids in _embed_cases(rng)]


def _whole_table(tok_emb, pos_emb, ids):
    return tok_emb[ids] + pos_emb


def _concatenated(tok_emb, pos_emb, ids):
    T = ids.shape[-1]
    return np.concatenate([tok_emb[ids], np.broadcast_to(pos_emb[:T], tok_emb[ids].shape)],
                          axis=-1)


def _by_token(tok_emb, pos_emb, ids):
    return tok_emb[ids] + pos_emb[ids]


def _len_of_ids(tok_emb, pos_emb, ids):
    return tok_emb[ids] + pos_emb[:len(ids)]


register(Exercise(
    id="8.1",
    title="Token plus position embeddings",
    kind="implement",
    reference=embed,
    diagnose=_diagnose_embed,
    battery=_embed_battery,
    rtol=1e-6,
    atol=1e-6,
    success="tok_emb[ids] + pos_emb[:T], for one sequence, a batch, T = 1, T = ctx and "
            "fresh random tables in float64 and float32",
    wrong_answers=(
        (_whole_table, "pos_emb[:T]"),
        (_concatenated, "instead of concatenating"),
        (_by_token, "picked by token id"),
        (_len_of_ids, "not len(ids)"),
    ),
))

# ---- 8.2 the language-model loss (implement) -------------------------------------------

_STABLE = ("exp overflows (or the log of a probability that rounded to 0 is -inf); use the "
           "log-softmax z - max - log(sum(exp(z - max))) instead of log(softmax(z))")


def _loss_cases(rng) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(case, logits [..., T, V], ids [..., T]): fixed edge cases, then fresh random ones."""
    fixed = np.random.default_rng(1)
    logits, ids = fixed.standard_normal((5, 6)), fixed.integers(0, 6, size=5)
    cases = [
        ("logits [T, V] = [5, 6] and ids [T] = [5]", logits, ids),
        ("logits of size 1000 (a confident model)", logits * 1000.0, ids),
        ("a batch: logits [B, T, V] = [2, 5, 6] and ids [B, T] = [2, 5]",
         fixed.standard_normal((2, 5, 6)), fixed.integers(0, 6, size=(2, 5))),
        ("T = 2: a single prediction", np.array([[0.0, 2.0, -1.0], [3.0, 0.0, 0.0]]),
         np.array([2, 1])),
    ]
    for i in range(3):
        lead = random_leading(rng)
        T, V = int(rng.integers(2, 9)), int(rng.integers(2, 11))
        scale = 10.0 ** rng.uniform(-1, 2.5)
        dtype = np.float32 if i == 1 else np.float64
        z = (rng.standard_normal((*lead, T, V)) * scale + rng.uniform(-50, 50)).astype(dtype)
        cases.append((f"fresh random logits {_shape_text(z.shape)} ({np.dtype(dtype).name}, "
                      f"scale {scale:.3g}) and ids {_shape_text(z.shape[:-1])}", z,
                      _ids(rng, V, z.shape[:-1])))
    return cases


def _diagnose_next_token_loss(fn, rng) -> None:
    for case, logits, ids in _loss_cases(rng):
        want = next_token_loss(logits.astype(float), ids)
        got = as_array(run(fn, logits, ids, case=case), case=case)
        if got.size != 1:
            raise Wrong(f"on {case}, the result has shape {got.shape}; expected a single "
                        "number: the mean over all (sequence, position) predictions, not "
                        "over one axis")
        got = float(got.reshape(()))
        if not math.isfinite(got):
            raise Wrong(f"on {case}, the loss is {got}: {_STABLE}")
        close = functools.partial(math.isclose, rel_tol=1e-5, abs_tol=1e-5)
        if close(got, want):
            continue
        if close(got, loss(logits.astype(float), ids)):
            raise Wrong(f"on {case}, you scored row t of the logits against token t, but "
                        "row t predicts token t + 1: compare logits[..., :-1, :] with "
                        "ids[..., 1:]")
        if close(got, loss(logits[..., 1:, :].astype(float), ids[..., :-1])):
            raise Wrong(f"on {case}, the shift goes the wrong way: row t predicts token "
                        "t + 1, so drop the LAST row of the logits and the FIRST token")
        n = ids[..., 1:].size
        if close(got, want * n):
            raise Wrong(f"on {case}, the loss is {n} times too large: take the mean over "
                        "every prediction, not the sum")
        if close(got, want / math.log(2)):
            raise Wrong(f"on {case}, the loss is in bits (log base 2); this exercise asks "
                        "for nats, the natural log")
        expect_close(got, want, case=case, name="the loss", rtol=1e-5, atol=1e-5,
                     hint="the mean of -log p(correct next token) over every "
                          "(sequence, position) pair")


def _loss_battery(rng):
    return [((logits, ids), {}) for _, logits, ids in _loss_cases(rng)]


def _no_shift(logits, ids):
    return loss(logits, ids)


def _log_of_softmax(logits, ids):
    p = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    picked = np.take_along_axis(np.log(p[..., :-1, :]), ids[..., 1:, None], axis=-1)
    return float(-picked.mean())


def _mean_over_first_axis(logits, ids):
    z = logits[..., :-1, :] - logits[..., :-1, :].max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(log_p, ids[..., 1:, None], axis=-1)[..., 0]
    return -picked.mean(axis=0)


def _summed(logits, ids):
    return next_token_loss(logits, ids) * ids[..., 1:].size


register(Exercise(
    id="8.2",
    title="The next-token loss, shifted by one",
    kind="implement",
    reference=next_token_loss,
    diagnose=_diagnose_next_token_loss,
    battery=_loss_battery,
    rtol=1e-5,
    atol=1e-5,
    success="the shift, a stable log-softmax and the mean over every prediction, for any "
            "leading axes, logits of size 1000 and float32",
    wrong_answers=(
        (_no_shift, "row t predicts token t + 1"),
        (_log_of_softmax, "use the log-softmax"),
        (_mean_over_first_axis, "a single number"),
        (_summed, "times too large"),
    ),
))

# ---- 8.3 which rows does one token reach? (predict) -------------------------------------

_ROWS = frozenset(range(5))
_ANSWER_ROWS = frozenset({2, 3, 4})


def _diagnose_rows(answer, rng) -> None:
    rows = int_set(answer, what="row indices", example="{0, 4}")
    if not rows <= _ROWS:
        raise Wrong(f"rows {sorted(rows - _ROWS)} do not exist: the logits have 5 rows, "
                    "0 to 4")
    if rows & {0, 1}:
        raise Wrong(f"rows {sorted(rows & {0, 1})} come before position 2: the causal mask "
                    "hides token 2 from them, and every other layer works on each "
                    "position alone, so they cannot change")
    if 2 not in rows:
        raise Wrong("row 2 changes too: it reads token 2 itself (its own embedding, and "
                    "attention to itself)")
    if rows != _ANSWER_ROWS:
        raise Wrong(f"rows {sorted(_ANSWER_ROWS - rows)} change too: every later position "
                    "attends to position 2 with a weight above 0, so token 2's key and "
                    "value reach them")


register(Exercise(
    id="8.3",
    title="Which rows of logits does one token reach?",
    kind="predict",
    reference={2, 3, 4},
    diagnose=_diagnose_rows,
    success="rows 2, 3 and 4: the changed position and every one after it",
    explain="Rows 2, 3 and 4. Row 2 reads token 2 directly; rows 3 and 4 attend to "
            "position 2 (no softmax weight is exactly 0), so its new key and value reach "
            "them. Rows 0 and 1 never see position 2: the mask removed it from their "
            "attention, and LayerNorm, the MLP and the head work on each position alone.",
    wrong_answers=(({2}, "change too"), ({3, 4}, "row 2 changes too"),
                   ({0, 1, 2, 3, 4}, "causal mask"), ({2, 3, 4, 5}, "do not exist"),
                   ("234", "answer with a set"), (234, "answer with a set")),
))

# ---- 8.4 a generator that forgets its window (debug) ------------------------------------


def _given_generate(params, ids, cfg, n_new, temperature=0.0, top_k=None,
                    rng=None):
    """Extend ids [T] or [B, T] by n_new tokens: greedy, or sampled with rng."""
    for _ in range(n_new):
        window = ids[..., :cfg.ctx]                 # [..., T] -> [..., <= ctx]
        logits = forward(params, window, cfg)       # [..., <= ctx, V]
        last = logits[..., -1, :]                   # [..., V]
        if temperature == 0:
            nxt = last.argmax(axis=-1)              # [..., V] -> [...]
        else:
            probs = next_token_distribution(last, temperature, top_k)
            nxt = sample(probs, rng)                # [..., V] -> [...]
        ids = np.concatenate([ids, nxt[..., None]], axis=-1)  # [..., T + 1]
    return ids


_GEN_CFG = GPTConfig(V=11, ctx=6, d=16, L=2, h=2, d_ff=32)


def _generate_cases(rng) -> list[tuple[str, tuple, dict]]:
    """(case, (params, ids, cfg, n_new), kwargs): inside ctx, past it, batched, sampled."""
    params = _random_params(_GEN_CFG, np.random.default_rng(4), scale=0.5)
    fixed = np.random.default_rng(5)
    c = _GEN_CFG.ctx
    cases = [
        (f"one prompt of 3 tokens and 3 new ones (inside ctx = {c})",
         (params, fixed.integers(0, 11, size=3), _GEN_CFG, 3), {}),
        (f"a prompt of 4 tokens and 8 new ones (the text outgrows ctx = {c})",
         (params, fixed.integers(0, 11, size=4), _GEN_CFG, 8), {}),
        ("a batch of 2 prompts of 5 tokens and 6 new ones",
         (params, fixed.integers(0, 11, size=(2, 5)), _GEN_CFG, 6), {}),
        (f"a prompt of 9 tokens, longer than ctx = {c}, and 3 new ones",
         (params, fixed.integers(0, 11, size=9), _GEN_CFG, 3), {}),
        ("sampling at temperature 1.5 with top_k = 4 and a seeded rng, past ctx",
         (params, fixed.integers(0, 11, size=(2, 4)), _GEN_CFG, 7),
         {"temperature": 1.5, "top_k": 4, "rng": np.random.default_rng(6)}),
    ]
    cfg = _random_cfg(rng, max_ctx=6)
    shape = random_leading(rng, max_axes=1) + (int(rng.integers(1, cfg.ctx + 3)),)
    n_new = cfg.ctx + int(rng.integers(1, 4))
    cases.append((f"fresh random weights (ctx = {cfg.ctx}), prompt {_shape_text(shape)} "
                  f"and {n_new} new tokens",
                  (_random_params(cfg, rng, 0.5), _ids(rng, cfg.V, shape), cfg, n_new), {}))
    seed = int(rng.integers(2**31))
    cases.append((f"sampling at temperature 0.8 with a fresh seed (ctx = {cfg.ctx})",
                  (_random_params(cfg, rng, 0.5), _ids(rng, cfg.V, (3,)), cfg, n_new),
                  {"temperature": 0.8, "rng": np.random.default_rng(seed)}))
    return cases


def _diagnose_generate(fn, rng) -> None:
    for case, args, kwargs in _generate_cases(rng):
        params, ids, cfg, n_new = args
        want = call_quietly(generate, args, kwargs)   # copies: the rng is drawn afresh
        got = as_array(run(fn, *args, case=case, hint="feed the model at most ctx "
                                                      "tokens: the last ones", **kwargs),
                       case=case, name="the tokens")
        got = expect_shape(got, want.shape, case=case, name="the tokens")
        T = ids.shape[-1]
        if not np.array_equal(got[..., :T], ids):
            raise Wrong(f"on {case}, the prompt is not kept: the result must start with "
                        "the prompt's own tokens")
        if np.array_equal(got, want):
            continue
        at = np.argwhere(got != want)[0]
        t = int(at[-1])
        where = f"token {t}" + (f" of sequence {int(at[0])}" if got.ndim == 2 else "")
        why = (f"; when it is chosen the text already holds {t} tokens, ctx = {cfg.ctx} "
               "or more: the model must read the last ctx tokens, the ones right before "
               "the token it predicts" if t >= cfg.ctx else "")
        if kwargs.get("temperature", 0) > 0:
            why += ("; with the same seeded rng, draw once per step from "
                    "next_token_distribution with sample, as given")
        raise Wrong(f"on {case}, {where} is {int(got[tuple(at)])} but should be "
                    f"{int(want[tuple(at)])}{why}")


def _generate_battery(rng):
    return [(args, kwargs) for _, args, kwargs in _generate_cases(rng)]


def _window_one_short(params, ids, cfg, n_new, temperature=0.0, top_k=None, rng=None):
    for _ in range(n_new):
        last = forward(params, ids[..., -cfg.ctx + 1:], cfg)[..., -1, :]
        if temperature == 0:
            nxt = last.argmax(axis=-1)
        else:
            nxt = sample(next_token_distribution(last, temperature, top_k), rng)
        ids = np.concatenate([ids, nxt[..., None]], axis=-1)
    return ids


def _no_window(params, ids, cfg, n_new, temperature=0.0, top_k=None, rng=None):
    for _ in range(n_new):
        last = forward(params, ids, cfg)[..., -1, :]
        if temperature == 0:
            nxt = last.argmax(axis=-1)
        else:
            nxt = sample(next_token_distribution(last, temperature, top_k), rng)
        ids = np.concatenate([ids, nxt[..., None]], axis=-1)
    return ids


def _first_row_logits(params, ids, cfg, n_new, temperature=0.0, top_k=None, rng=None):
    for _ in range(n_new):
        first = forward(params, ids[..., -cfg.ctx:], cfg)[..., 0, :]
        if temperature == 0:
            nxt = first.argmax(axis=-1)
        else:
            nxt = sample(next_token_distribution(first, temperature, top_k), rng)
        ids = np.concatenate([ids, nxt[..., None]], axis=-1)
    return ids


register(Exercise(
    id="8.4",
    title="A generator that forgets where the text ends",
    kind="debug",
    reference=generate,
    given=_given_generate,
    diagnose=_diagnose_generate,
    battery=_generate_battery,
    success="the same tokens as anatomy.gpt_numpy.generate inside ctx and past it, for a "
            "batch, a prompt longer than ctx, and sampling with a seeded rng",
    explain="The bug is ids[..., :cfg.ctx]: it feeds the model the FIRST ctx tokens. "
            "While the text is shorter than ctx that is the whole text, so nothing shows; "
            "once it is longer, the model keeps re-reading the opening and predicting the "
            "token after position ctx - 1, again and again. The window must be the last "
            "ctx tokens, ids[..., -cfg.ctx:].",
    wrong_answers=(
        (_window_one_short, "must read the last ctx tokens"),
        (_no_window, "exceeds ctx"),
        (_first_row_logits, "should be"),
    ),
))

# ---- 8.5 a model that writes "abcabc..." (construct) ------------------------------------

_ABC = GPTConfig(V=3, ctx=8, d=8, L=1, h=2, d_ff=8)
_MARGIN = 1e-3


def cycle_params(cfg: GPTConfig) -> dict[str, np.ndarray]:
    """Weights under which the top next token after id i is always (i + 1) mod V.

    Attention is switched off (W_qkv = 0, so every value is 0) and so are the positions;
    the stream starts as a one-hot row, x = e_i. With a tied head a stream of e_i would
    score token i itself highest, so block 0's MLP writes the next token's direction:
    hidden unit i fires only for token i (LayerNorm makes e_i's coordinate i large and
    every other one slightly negative), and W_2 sends it, scaled by 10, to coordinate
    (i + 1) mod V. The final stream is then mostly e_(i+1), which the head scores highest.

    Shapes: cfg with V <= d and V <= d_ff -> params with param_shapes(cfg)
    """
    V = cfg.V
    params = {name: np.zeros(shape) for name, shape in param_shapes(cfg).items()}
    for name in params:
        if name.endswith("_g"):
            params[name][:] = 1.0                      # LayerNorm gains: plain normalising
    params["tok_emb"][:, :V] = np.eye(V)               # [V, d]: token i is e_i
    params["blocks.0.W_1"][:V, :V] = np.eye(V)         # [d, d_ff]: unit i reads coordinate i
    nxt = (np.arange(V) + 1) % V
    params["blocks.0.W_2"][np.arange(V), nxt] = 10.0   # [d_ff, d]: unit i writes e_(i+1)
    return params


def _abc_configs(rng) -> list[tuple[str, GPTConfig]]:
    cases = [("the three letters a, b, c (V = 3, d = 8, L = 1, h = 2, d_ff = 8)", _ABC)]
    for _ in range(2):
        V = int(rng.integers(2, 7))
        h = int(rng.choice([1, 2, 4]))
        d = h * int(math.ceil(2 * V / h)) + h * int(rng.integers(0, 3))
        cfg = GPTConfig(V=V, ctx=int(rng.integers(2, 11)), d=d, L=int(rng.integers(1, 4)),
                        h=h, d_ff=int(rng.integers(V, 4 * V + 1)))
        cases.append((f"fresh random sizes V = {V}, ctx = {cfg.ctx}, d = {d}, "
                      f"L = {cfg.L}, h = {h}, d_ff = {cfg.d_ff}", cfg))
    return cases


def _name(i: int, V: int) -> str:
    return f"'{'abc'[i]}'" if V == 3 else f"id {i}"


def _diagnose_cycle(fn, rng) -> None:
    for case, cfg in _abc_configs(rng):
        params = run(fn, cfg, case=case)
        if not hasattr(params, "keys"):
            raise Wrong(f"on {case}, expected a dict of weights, got a "
                        f"{type(params).__name__}")
        try:
            check_params(params, cfg)
        except ValueError as error:
            raise Wrong(f"on {case}, the weights do not fit the config: {error}") from None
        V = cfg.V
        prompts = [("every one-token prompt", np.arange(V)[:, None])]
        shape = (int(rng.integers(1, 5)), int(rng.integers(1, cfg.ctx + 1)))
        prompts.append((f"fresh random prompts {_shape_text(shape)}",
                        _ids(rng, V, shape)))
        for what, ids in prompts:
            logits = forward(params, ids, cfg)                      # [B, T, V]
            _expect_finite_logits(logits, case)
            top = logits.argmax(axis=-1)                            # [B, T]
            runner_up = np.sort(logits, axis=-1)[..., -2]           # [B, T]
            want = (ids + 1) % V
            bad = np.argwhere(top != want)
            if len(bad):
                b, t = (int(i) for i in bad[0])
                got, read = int(top[b, t]), int(ids[b, t])
                why = ""
                if np.all(top == ids):
                    why = (": your model predicts the token it just read. With a tied "
                           "head the stream still holds that token's own row, which "
                           "scores highest; something must move the stream towards the "
                           "next token's row")
                elif V > 2 and np.all(top == (ids - 1) % V):
                    why = ": your model runs the cycle backwards"
                raise Wrong(f"on {case}, {what}: after {_name(read, V)} (position {t}) "
                            f"the top choice is {_name(got, V)} but should be "
                            f"{_name(int(want[b, t]), V)}{why}")
            gap = np.take_along_axis(logits, want[..., None], axis=-1)[..., 0] - runner_up
            if gap.min() < _MARGIN:
                raise Wrong(f"on {case}, {what}: the right token leads the next one by "
                            f"only {gap.min():.2g} in the logits; make it win by at least "
                            f"{_MARGIN} so rounding cannot flip the choice")
        text = generate(params, np.array([0]), cfg, n_new=2 * cfg.ctx + 1)
        if not np.array_equal(text, np.arange(len(text)) % V):
            raise Wrong(f"on {case}, greedy generation from {_name(0, V)} gives "
                        f"{text.tolist()}, not the cycle")


def _expect_finite_logits(logits: np.ndarray, case: str) -> None:
    if not np.all(np.isfinite(logits)):
        raise Wrong(f"on {case}, the logits contain nan or inf: keep the weights finite "
                    "(and a LayerNorm gain of 0 with a shift of 0 makes every logit equal)")


def _same_again(cfg):
    params = {name: np.zeros(shape) for name, shape in param_shapes(cfg).items()}
    for name in params:
        if name.endswith("_g"):
            params[name][:] = 1.0
    params["tok_emb"][:, :cfg.V] = np.eye(cfg.V)
    return params


def _backwards(cfg):
    params = cycle_params(cfg)
    V = cfg.V
    params["blocks.0.W_2"][:] = 0.0
    params["blocks.0.W_2"][np.arange(V), (np.arange(V) - 1) % V] = 10.0
    return params


def _untrained(cfg):
    return init_params(cfg, 0)


register(Exercise(
    id="8.5",
    title="Weights that write abcabc...",
    kind="construct",
    reference=cycle_params,
    diagnose=_diagnose_cycle,
    success="after every token the next one in the cycle wins, by a margin, for a, b, c "
            "and fresh random sizes, and greedy generation cycles past ctx",
    explain="One construction of many: switch attention off, make each token a one-hot "
            "row, and let one MLP unit per token write the next token's row into the "
            "stream, strongly enough to outvote the token's own row in the tied head.",
    wrong_answers=(
        (_same_again, "predicts the token it just read"),
        (_backwards, "backwards"),
        (_untrained, "should be"),
        (lambda cfg: {}, "missing key"),
        (lambda cfg: [], "expected a dict"),
    ),
))

# ---- 8.6 the trained model's loss on text the check picks (measure) ---------------------


@functools.lru_cache(maxsize=1)
def _trained():
    """The shipped character model (float32, as trained)."""
    return load_weights("shakespeare-char")


@functools.lru_cache(maxsize=1)
def _validation_text() -> str | None:
    """Tiny Shakespeare's validation split when a local copy is at hand; never downloads."""
    from ..text import ENV_VAR, FILENAME, default_cache_dir, load_text, split

    if not (os.environ.get(ENV_VAR) or (default_cache_dir() / FILENAME).is_file()):
        return None
    try:
        return split(load_text())[1]
    except Exception:
        return None


def _stretch(rng, n: int) -> tuple[str, np.ndarray]:
    """(where it comes from, ids [n]) of text for the shipped model, at a random offset."""
    _, cfg, tok = _trained()
    text = _validation_text()
    if text is None:
        ids = rng.integers(0, cfg.V, size=n)
        return "random characters (no local copy of Tiny Shakespeare here)", ids
    start = int(rng.integers(0, len(text) - n))
    return (f"Tiny Shakespeare's validation text from character {start:,}",
            np.array(tok.encode(text[start:start + n])))


def _text_loss_cases(rng) -> list[tuple[str, tuple]]:
    """(case, (params, ids, cfg)): windows exact and with a tail, many windows, the shipped
    model on text the check picks, and a fresh random model."""
    cfg = GPTConfig(V=9, ctx=5, d=8, L=1, h=2, d_ff=16)
    params = _random_params(cfg, np.random.default_rng(7), scale=0.5)
    fixed = np.random.default_rng(8)
    sh_params, sh_cfg, _ = _trained()
    n_windows = int(rng.integers(2, 6))
    where, ids = _stretch(rng, n_windows * sh_cfg.ctx + int(rng.integers(0, sh_cfg.ctx)))
    cases = [
        ("a small model (ctx = 5) on 15 ids: exactly 3 windows",
         (params, fixed.integers(0, 9, size=15), cfg)),
        ("the same model on 23 ids: 4 windows and a tail of 3 ids",
         (params, fixed.integers(0, 9, size=23), cfg)),
        ("exactly one window (5 ids)", (params, fixed.integers(0, 9, size=5), cfg)),
        ("700 ids: 140 windows", (params, fixed.integers(0, 9, size=700), cfg)),
        (f"the shipped model on {len(ids)} ids of {where}", (sh_params, ids, sh_cfg)),
    ]
    cfg = _random_cfg(rng, max_ctx=7)
    n = int(rng.integers(cfg.ctx, 12 * cfg.ctx))
    cases.append((f"a fresh random model (ctx = {cfg.ctx}) on {n} random ids",
                  (_random_params(cfg, rng, 0.5), _ids(rng, cfg.V, (n,)), cfg)))
    return cases


def _tail_included(params, ids, cfg):
    """The loss if the incomplete last window counted too, per prediction."""
    total, count = 0.0, 0
    for start in range(0, len(ids) - 1, cfg.ctx):
        w = ids[start:start + cfg.ctx]
        if len(w) >= 2:
            total += next_token_loss(forward(params, w, cfg), w) * (len(w) - 1)
            count += len(w) - 1
    return total / count


def _diagnose_text_loss(fn, rng) -> None:
    for case, (params, ids, cfg) in _text_loss_cases(rng):
        want = window_loss(params, ids, cfg)
        got = expect_number(run(fn, params, ids, cfg, case=case,
                                hint=f"cut the ids into windows of cfg.ctx = {cfg.ctx}"),
                            case=case, name="the loss")
        close = functools.partial(math.isclose, rel_tol=1e-4, abs_tol=1e-6)
        if close(got, want):
            continue
        if close(got, want / math.log(2)):
            raise Wrong(f"on {case}, the loss is in bits per character; report nats (the "
                        "natural log), as next_token_loss does")
        if len(ids) % cfg.ctx > 1 and close(got, _tail_included(params, ids, cfg)):
            raise Wrong(f"on {case}, the incomplete last window of {len(ids) % cfg.ctx} "
                        "ids was counted; drop it, so every window has ctx ids")
        raise Wrong(f"on {case}, the loss is {got:.5g} nats but should be {want:.5g}: "
                    f"cut the ids into consecutive windows of cfg.ctx = {cfg.ctx} (drop "
                    "the tail), score each window's logits 0..ctx-2 against its ids "
                    "1..ctx-1, and average over every prediction")


def _text_loss_battery(rng):
    return [(args, {}) for _, args in _text_loss_cases(rng)]


def _in_bits(params, ids, cfg):
    return window_loss(params, ids, cfg) / math.log(2)


def _no_shift_windows(params, ids, cfg):
    n = len(ids) // cfg.ctx
    rows = ids[:n * cfg.ctx].reshape(n, cfg.ctx)
    return loss(forward(params, rows, cfg), rows)


def _fixed_width(params, ids, cfg):
    n = len(ids) // 64
    rows = ids[:n * 64].reshape(n, 64)
    return next_token_loss(forward(params, rows, cfg), rows)


register(Exercise(
    id="8.6",
    title="Measure the trained model's loss on text",
    kind="measure",
    reference=window_loss,
    diagnose=_diagnose_text_loss,
    battery=_text_loss_battery,
    rtol=1e-4,
    atol=1e-6,
    success="the mean next-character loss in nats over consecutive ctx-id windows, on "
            "small random models and on the shipped model at a stretch of text the check "
            "picked",
    wrong_answers=(
        (lambda params, ids, cfg: 1.64, "should be"),
        (_in_bits, "in bits per character"),
        (_tail_included, "incomplete last window"),
        (_no_shift_windows, "should be"),
        (_fixed_width, "your function raised"),
    ),
))

# ---- 8.C challenge: the whole forward pass (implement) ----------------------------------

_CFG = GPTConfig(V=11, ctx=8, d=16, L=2, h=2, d_ff=32)


def _variant(params, ids, cfg, *, final_ln=True, causal=True, positions=True, act=gelu,
             pre_norm=True):
    """A forward pass with one part switched off, to name what a wrong answer left out.

    Shapes: ids [..., T] -> logits [..., T, V]
    """
    T = ids.shape[-1]
    x = params["tok_emb"][ids] + (params["pos_emb"][:T] if positions else 0.0)  # [..., T, d]
    for i in range(cfg.L):
        p = block_params(params, i)

        def attn(a, p=p):
            return multi_head_attention(a, p["W_qkv"], p["W_o"], cfg.h, p["b_qkv"],
                                        p["b_o"], causal=causal)[0]       # [..., T, d]

        def ffn(a, p=p):
            return mlp(a, p["W_1"], p["b_1"], p["W_2"], p["b_2"], act=act)   # [..., T, d]

        if pre_norm:
            x = x + attn(layer_norm(x, p["ln1_g"], p["ln1_b"]))
            x = x + ffn(layer_norm(x, p["ln2_g"], p["ln2_b"]))
        else:                                      # the original transformer's post-norm
            x = layer_norm(x + attn(x), p["ln1_g"], p["ln1_b"])
            x = layer_norm(x + ffn(x), p["ln2_g"], p["ln2_b"])
    if final_ln:
        x = layer_norm(x, params["lnf_g"], params["lnf_b"])
    head = params["tok_emb"] if cfg.tied else params["head"]
    return x @ head.T                              # [..., T, d] @ [d, V] -> [..., T, V]


_ERF = np.vectorize(math.erf, otypes=[float])


def _exact_gelu(x: np.ndarray) -> np.ndarray:
    """GELU's exact form, x Phi(x) with the normal CDF written with erf (torch's F.gelu).

    Shapes: x [...] -> [...]
    """
    return 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0)))


_KNOWN_SLIPS = (
    ({"final_ln": False}, "they match a model without the final LayerNorm: normalise the "
                          "stream with lnf_g, lnf_b before the head"),
    ({"causal": False}, "they match a model without the causal mask: each position may only "
                        "attend to itself and earlier positions (causal=True)"),
    ({"positions": False}, "they match a model without position embeddings: add "
                           "pos_emb[:T] to the token rows"),
    ({"pre_norm": False}, "they match a post-norm model (LayerNorm after each residual add); "
                          "GPT-2 is pre-norm: x = x + Attn(LN1(x)), then x = x + MLP(LN2(x))"),
    ({"act": relu}, "they match a model with ReLU in the MLP; GPT-2 uses GELU (anatomy.blocks."
                    "gelu)"),
)


def _tied(cfg: GPTConfig) -> GPTConfig:
    return GPTConfig(cfg.V, cfg.ctx, cfg.d, cfg.L, cfg.h, cfg.d_ff, tied=True)


def _forward_cases(rng) -> list[tuple[str, tuple]]:
    """(case, (params, ids, cfg)): fixed shapes, an untied head, and fresh random models."""
    params = _random_params(_CFG, np.random.default_rng(0))
    fixed = np.random.default_rng(3)
    untied = GPTConfig(V=11, ctx=8, d=16, L=1, h=4, d_ff=24, tied=False)
    cases = [
        ("one sequence, ids [T] = [6], L = 2 blocks",
         (params, fixed.integers(0, 11, size=6), _CFG)),
        ("a batch ids [B, T] = [3, 8] (T = ctx)",
         (params, fixed.integers(0, 11, size=(3, 8)), _CFG)),
        ("a single token (T = 1)", (params, np.array([4]), _CFG)),
        ("an untied model (cfg.tied is False: the head is params['head'], not tok_emb)",
         (_random_params(untied, np.random.default_rng(1)), fixed.integers(0, 11, size=5),
          untied)),
    ]
    for _ in range(2):
        cfg = _random_cfg(rng)
        T = int(rng.integers(1, cfg.ctx + 1))
        shape = random_leading(rng, max_axes=1) + (T,)
        cases.append((f"a fresh random model (V = {cfg.V}, d = {cfg.d}, L = {cfg.L}, "
                      f"h = {cfg.h}, tied = {cfg.tied}) on ids {_shape_text(shape)}",
                      (_random_params(cfg, rng), _ids(rng, cfg.V, shape), cfg)))
    return cases


def _diagnose_forward(fn, rng) -> None:
    for case, (params, ids, cfg) in _forward_cases(rng):
        got = as_array(run(fn, params, ids, cfg, case=case), case=case, name="the logits")
        want = forward(params, ids, cfg)
        got = expect_shape(got, want.shape, case=case, name="the logits")
        if np.allclose(got, want, rtol=1e-4, atol=1e-5):     # float32 passes are right too
            continue
        if np.allclose(got, _variant(params, ids, cfg, act=_exact_gelu), atol=1e-8):
            raise other_convention(
                f"on {case}, your logits match a model whose MLP uses the exact GELU, "
                "x Phi(x) with erf (the textbook form and torch's F.gelu default)",
                "GPT-2's tanh approximation, anatomy.blocks.gelu, which forward uses")
        for switches, why in _KNOWN_SLIPS:
            if np.allclose(got, _variant(params, ids, cfg, **switches), atol=1e-8):
                raise Wrong(f"on {case}, your logits differ from the reference; {why}")
        if not cfg.tied and np.allclose(got, _variant(params, ids, _tied(cfg)), atol=1e-8):
            raise Wrong(f"on {case}, your logits use tok_emb as the head; when cfg.tied is "
                        "False the head is its own matrix, params['head'] [V, d]")
        expect_close(got, want, case=case, name="the logits", rtol=1e-4, atol=1e-5)


def _forward_battery(rng):
    return [(args, {}) for _, args in _forward_cases(rng)]


def _no_final_layer_norm(params, ids, cfg):
    return _variant(params, ids, cfg, final_ln=False)


def _no_causal_mask(params, ids, cfg):
    return _variant(params, ids, cfg, causal=False)


def _post_norm(params, ids, cfg):
    return _variant(params, ids, cfg, pre_norm=False)


def _always_tied(params, ids, cfg):
    return _variant(params, ids, _tied(cfg))


def _erf_gelu_model(params, ids, cfg):
    return _variant(params, ids, cfg, act=_exact_gelu)


register(Exercise(
    id="8.C",
    title="Challenge: the whole GPT forward pass from its pieces",
    kind="implement",
    reference=forward,
    diagnose=_diagnose_forward,
    battery=_forward_battery,
    rtol=1e-6,
    atol=1e-8,
    success="the same logits as anatomy.gpt_numpy.forward for one sequence, a batch, "
            "T = 1, an untied head and fresh random models",
    wrong_answers=(
        (_no_final_layer_norm, "without the final LayerNorm"),
        (_no_causal_mask, "without the causal mask"),
        (_post_norm, "post-norm"),
        (_always_tied, "use tok_emb as the head"),
        (_erf_gelu_model, "the exact GELU"),
    ),
))
