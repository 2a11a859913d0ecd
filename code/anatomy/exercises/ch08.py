"""Chapter 8 exercises: the embedding step, the shifted language-model loss, and the whole
forward pass from its pieces (the challenge)."""

from __future__ import annotations

import numpy as np

from ..blocks import gelu, layer_norm, mlp, relu
from ..gpt_numpy import embed, forward, loss, next_token_loss
from ..heads import multi_head_attention
from ..params import GPTConfig, block_params, init_params
from . import register
from ._core import Exercise, Wrong, as_array, expect_close, expect_shape, run

# ---- 8.1 embedding ----------------------------------------------------------------------

_SLICE = ("add only the first T rows of the position table, pos_emb[:T] with "
          "T = ids.shape[-1]: the table has ctx rows, the sequence only T")


def _tables(V: int = 7, ctx: int = 6, d: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((V, d)), rng.standard_normal((ctx, d))


def _diagnose_embed(fn, rng) -> None:
    tok_emb, pos_emb = _tables()
    ids = np.array([4, 1, 2])                      # T = 3 < ctx = 6; ids < ctx on purpose
    case = "tok_emb [V, d] = [7, 4], pos_emb [ctx, d] = [6, 4], ids [T] = [4, 1, 2]"
    got = as_array(run(fn, tok_emb, pos_emb, ids, case=case, hint=_SLICE), case=case)
    want = embed(tok_emb, pos_emb, ids)
    if got.shape == (3, 8):
        raise Wrong(f"on {case}, the result has shape (3, 8); expected (3, 4) = [T, d]: add "
                    "the token and position rows instead of concatenating them, so the "
                    "stream stays d wide")
    got = expect_shape(got, want.shape, case=case)
    if np.allclose(got, tok_emb[ids]):
        raise Wrong(f"on {case}, the result is tok_emb[ids] alone: the position rows are "
                    "missing, so the model cannot tell 'nasi lemak' from 'lemak nasi'")
    if np.allclose(got, tok_emb[ids] + pos_emb[ids]):
        raise Wrong(f"on {case}, the position rows were picked by token id (pos_emb[ids]); "
                    "row t of the sequence gets position row t: pos_emb[:T]")
    expect_close(got, want, case=case)

    ids = np.array([[0, 6, 3], [5, 5, 1]])
    case = "a batch ids [B, T] = [2, 3]"
    got = run(fn, tok_emb, pos_emb, ids, case=case,
              hint="for a batch [B, T], T is ids.shape[-1], not len(ids)")
    expect_close(got, embed(tok_emb, pos_emb, ids), case=case,
                 hint="every sequence of the batch gets the same position rows 0..T-1")

    ids = np.array([2])
    case = "a single token (T = 1)"
    expect_close(run(fn, tok_emb, pos_emb, ids, case=case, hint=_SLICE),
                 embed(tok_emb, pos_emb, ids), case=case)


def _whole_table(tok_emb, pos_emb, ids):
    return tok_emb[ids] + pos_emb


def _concatenated(tok_emb, pos_emb, ids):
    T = ids.shape[-1]
    return np.concatenate([tok_emb[ids], pos_emb[:T]], axis=-1)


def _by_token(tok_emb, pos_emb, ids):
    return tok_emb[ids] + pos_emb[ids]


register(Exercise(
    id="8.1",
    title="Token plus position embeddings",
    kind="implement",
    reference=embed,
    diagnose=_diagnose_embed,
    success="tok_emb[ids] + pos_emb[:T], for one sequence, a batch and T = 1",
    wrong_answers=(
        (_whole_table, "pos_emb[:T]"),
        (_concatenated, "instead of concatenating"),
        (_by_token, "picked by token id"),
    ),
))

# ---- 8.2 the language-model loss --------------------------------------------------------


def _diagnose_next_token_loss(fn, rng) -> None:
    rng = np.random.default_rng(1)
    logits, ids = rng.standard_normal((5, 6)), rng.integers(0, 6, size=5)
    case = "logits [T, V] = [5, 6] and ids [T] = [5]"
    got = as_array(run(fn, logits, ids, case=case), case=case)
    if got.shape != ():
        raise Wrong(f"on {case}, the result has shape {got.shape}; expected a single number: "
                    "the mean over every prediction")
    want = next_token_loss(logits, ids)
    if np.isclose(got, loss(logits, ids)):
        raise Wrong(f"on {case}, you scored row t of the logits against token t, but row t "
                    "predicts token t + 1: compare logits[..., :-1, :] with ids[..., 1:]")
    if np.isclose(got, loss(logits[1:], ids[:-1])):
        raise Wrong(f"on {case}, the shift goes the wrong way: row t predicts token t + 1, "
                    "so drop the LAST row of the logits and the FIRST token")
    _expect_number(got, want, case=case)

    huge = logits * 1000.0
    case = "logits of size 1000 (a confident model)"
    with np.errstate(all="ignore"):
        got = as_array(run(fn, huge, ids, case=case), case=case)
    if not np.isfinite(got):
        raise Wrong(f"on {case}, the loss is {got}: exp overflows (or the log of a "
                    "probability that rounded to 0 is -inf); use the log-softmax "
                    "z - max - log(sum(exp(z - max))) instead of log(softmax(z))")
    _expect_number(got, next_token_loss(huge, ids), case=case)

    logits, ids = rng.standard_normal((2, 5, 6)), rng.integers(0, 6, size=(2, 5))
    case = "a batch: logits [B, T, V] = [2, 5, 6] and ids [B, T] = [2, 5]"
    with np.errstate(all="ignore"):
        got = as_array(run(fn, logits, ids, case=case), case=case)
    if got.shape != ():
        raise Wrong(f"on {case}, the result has shape {got.shape}; expected a single number: "
                    "average over all B x (T - 1) predictions, not over one axis")
    want = next_token_loss(logits, ids)
    if np.isclose(got, want * 4):
        raise Wrong(f"on {case}, the loss is T - 1 = 4 times too large: take the mean over "
                    "positions too, not the sum")
    _expect_number(got, want, case=case, hint="the mean runs over every (sequence, position) "
                   "pair")


def _expect_number(got: np.ndarray, want: float, *, case: str, hint: str = "") -> None:
    if not abs(float(got) - want) <= 1e-6:
        raise Wrong(f"on {case}, the loss is {float(got):.4g} but should be {want:.4g}"
                    + (f": {hint}" if hint else ""))


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


register(Exercise(
    id="8.2",
    title="The next-token loss, shifted by one",
    kind="implement",
    reference=next_token_loss,
    diagnose=_diagnose_next_token_loss,
    success="the shift, a stable log-softmax and the mean over every prediction",
    wrong_answers=(
        (_no_shift, "row t predicts token t + 1"),
        (_log_of_softmax, "use the log-softmax"),
        (_mean_over_first_axis, "a single number"),
    ),
))

# ---- 8.C challenge: the whole forward pass ----------------------------------------------

_CFG = GPTConfig(V=11, ctx=8, d=16, L=2, h=2, d_ff=32)


def _random_params(cfg: GPTConfig, seed: int) -> dict[str, np.ndarray]:
    """Every weight random, LayerNorm gains and biases included, so no part is a no-op."""
    rng = np.random.default_rng(seed)
    return {name: value + rng.standard_normal(value.shape) * 0.3
            for name, value in init_params(cfg, rng).items()}


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


def _compare_forward(fn, params, ids, cfg, case: str) -> None:
    got = as_array(run(fn, params, ids, cfg, case=case), case=case, name="the logits")
    want = forward(params, ids, cfg)
    got = expect_shape(got, want.shape, case=case, name="the logits")
    if np.allclose(got, want, atol=1e-8):
        return
    for switches, why in _KNOWN_SLIPS:
        if np.allclose(got, _variant(params, ids, cfg, **switches), atol=1e-8):
            raise Wrong(f"on {case}, your logits differ from the reference; {why}")
    if not cfg.tied and np.allclose(got, _variant(params, ids, _tied(cfg)), atol=1e-8):
        raise Wrong(f"on {case}, your logits use tok_emb as the head; when cfg.tied is False "
                    "the head is its own matrix, params['head'] [V, d]")
    expect_close(got, want, case=case, name="the logits", atol=1e-8)


def _diagnose_forward(fn, rng) -> None:
    cfg = _CFG
    params = _random_params(cfg, 0)
    rng = np.random.default_rng(3)
    _compare_forward(fn, params, rng.integers(0, cfg.V, size=6), cfg,
                     "one sequence, ids [T] = [6], L = 2 blocks")
    _compare_forward(fn, params, rng.integers(0, cfg.V, size=(3, cfg.ctx)), cfg,
                     "a batch ids [B, T] = [3, 8] (T = ctx)")
    _compare_forward(fn, params, np.array([4]), cfg, "a single token (T = 1)")
    untied = GPTConfig(V=11, ctx=8, d=16, L=1, h=4, d_ff=24, tied=False)
    case = "an untied model (cfg.tied is False: the head is params['head'], not tok_emb)"
    _compare_forward(fn, _random_params(untied, 1), rng.integers(0, 11, size=5), untied, case)


def _no_final_layer_norm(params, ids, cfg):
    return _variant(params, ids, cfg, final_ln=False)


def _no_causal_mask(params, ids, cfg):
    return _variant(params, ids, cfg, causal=False)


def _post_norm(params, ids, cfg):
    return _variant(params, ids, cfg, pre_norm=False)


def _tied(cfg: GPTConfig) -> GPTConfig:
    return GPTConfig(cfg.V, cfg.ctx, cfg.d, cfg.L, cfg.h, cfg.d_ff, tied=True)


def _always_tied(params, ids, cfg):
    return _variant(params, ids, _tied(cfg))


register(Exercise(
    id="8.C",
    title="Challenge: the whole GPT forward pass from its pieces",
    kind="implement",
    reference=forward,
    diagnose=_diagnose_forward,
    success="the same logits as anatomy.gpt_numpy.forward for one sequence, a batch, "
            "T = 1 and an untied head",
    wrong_answers=(
        (_no_final_layer_norm, "without the final LayerNorm"),
        (_no_causal_mask, "without the causal mask"),
        (_post_norm, "post-norm"),
        (_always_tied, "use tok_emb as the head"),
    ),
))
