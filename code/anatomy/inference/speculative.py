"""Speculative decoding: a small draft model proposes k tokens, the target checks them all in
one forward pass, and the rule of Leviathan et al. (2023) and Chen et al. (2023) keeps the
output exactly the target's.

Per round, with the draft's distributions q_1..q_k and the target's p_1..p_{k+1}:

- draft token x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i));
- at the first rejection the token is drawn instead from the residual
  max(0, p_i - q_i), renormalised, and the round ends;
- if all k are accepted, one more token comes free from p_{k+1}.

A token then comes out with probability q(x) min(1, p(x)/q(x)) + P(reject) r(x), which is
p(x) for every x: the output is distributed as the target's own sampling. At temperature 0
the rule becomes "accept while the draft's token is the target's argmax", and the output
is the target's greedy text token for token.

Shapes: ids [T] -> [T + n_new]; p [k + 1, V], q [k, V], drafts [k]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from .._validate import check_ids, check_positive_int
from ..attention import softmax
from ..gpt_numpy import forward_cached, sample
from ..params import GPTConfig, check_params


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """What to draw from after rejecting a draft token: max(0, p - q), renormalised. Where
    p = q (nothing left over) it is p itself.

    Shapes: p [..., V], q [..., V] -> [..., V] (each row sums to 1)
    """
    r = np.maximum(p - q, 0.0)                              # [..., V]
    total = r.sum(axis=-1, keepdims=True)                   # [..., 1]
    return np.where(total > 0, r / np.where(total > 0, total, 1.0), p)


def accept_or_resample(p: np.ndarray, q: np.ndarray, drafts: np.ndarray,
                       rng: np.random.Generator) -> tuple[int, int]:
    """One round's verdict: how many draft tokens to keep, and the token after them.

    Shapes: p [k + 1, V] (the target's), q [k, V] (the draft's), drafts [k]
            -> (n accepted in 0..k, next token id)
    """
    for i, x in enumerate(drafts):
        if rng.random() < min(1.0, p[i, x] / q[i, x]):
            continue
        return i, int(sample(residual(p[i], q[i]), rng))
    return len(drafts), int(sample(p[-1], rng))


def accept_greedy(p: np.ndarray, q: np.ndarray, drafts: np.ndarray,
                  rng: np.random.Generator | None) -> tuple[int, int]:
    """Temperature 0: keep draft tokens while each is the target's argmax; the next token is
    the target's argmax where the first one is not (or after all of them).

    Shapes: p [k + 1, V], q [k, V], drafts [k] -> (n accepted, next token id)
    """
    best = p.argmax(axis=-1)                                # [k + 1]
    for i, x in enumerate(drafts):
        if x != best[i]:
            return i, int(best[i])
    return len(drafts), int(best[-1])


def _check_pair(target_cfg: GPTConfig, draft_cfg: GPTConfig, k: object,
                temperature: object) -> None:
    for cfg, name in ((target_cfg, "target_cfg"), (draft_cfg, "draft_cfg")):
        if not isinstance(cfg, GPTConfig):
            raise ValueError(f"{name}: expected a GPTConfig, got {type(cfg).__name__}")
    if draft_cfg.V != target_cfg.V:
        raise ValueError(f"draft_cfg: the draft must share the target's vocabulary, expected "
                         f"V = {target_cfg.V}, got V = {draft_cfg.V}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k: expected an integer >= 1 (draft tokens per round), got {k!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not temperature >= 0:
        raise ValueError(f"temperature: expected a number >= 0 (0 = greedy), "
                         f"got {temperature!r}")


def _trim(cache, n: int):
    """The first n positions of every block's (K, V).

    Shapes: K, V [h, T_past, d_head] -> [h, n, d_head]
    """
    return tuple((K[..., :n, :], V[..., :n, :]) for K, V in cache)


def _dist(logits: np.ndarray, temperature: float) -> np.ndarray:
    """The distribution a sampler uses, or the logits themselves for the greedy rule.

    Shapes: logits [n, V] -> [n, V]
    """
    return logits if temperature == 0 else softmax(logits / temperature)


def speculative_generate(target_params: Mapping[str, np.ndarray], target_cfg: GPTConfig,
                         draft_params: Mapping[str, np.ndarray], draft_cfg: GPTConfig,
                         ids: np.ndarray, n_new: int, k: int = 4, temperature: float = 0.0,
                         seed: int | None = None, *,
                         accept: Callable | None = None) -> tuple[np.ndarray, dict]:
    """Extend ``ids`` by ``n_new`` tokens, the draft proposing ``k`` at a time and the target
    checking each batch of proposals in one cached forward pass.

    Returns ``(ids, stats)``: the prompt followed by the ``n_new`` tokens, and
    ``stats["accepted"]`` (draft tokens kept), ``stats["proposed"]`` (draft tokens offered),
    ``stats["rejected"]`` (rounds that ended in a rejection; the drafts after it are offered
    but never judged, so accepted / (accepted + rejected) estimates the chance that one
    judged draft token is accepted), ``stats["target_calls"]`` and ``stats["draft_calls"]``
    (forward passes of each model, the prompt's included). At ``temperature`` 0 the tokens
    are the target's greedy ones (``generate_cached`` on the target, to rounding in the
    logits); above 0 they are a draw from the target's distribution at that temperature,
    with ``seed`` for the generator.
    ``accept`` replaces the acceptance rule (for tests: a known-wrong rule must fail them).
    A round near the end proposes fewer than k so that the target never runs past
    T + n_new <= ctx.

    Shapes: ids [T] -> [T + n_new]   (T + n_new <= both ctx)
    """
    _check_pair(target_cfg, draft_cfg, k, temperature)
    ids = check_ids(ids, target_cfg.V)
    n_new = check_positive_int(n_new, "n_new")
    if ids.ndim != 1:
        raise ValueError(f"ids: expected one sequence [T], got shape {ids.shape}")
    ctx = min(target_cfg.ctx, draft_cfg.ctx)
    if ids.shape[0] + n_new > ctx:
        raise ValueError(f"n_new: T + n_new = {ids.shape[0]} + {n_new} exceeds ctx={ctx} "
                         "(the smaller of the two models' ctx)")
    check_params(target_params, target_cfg)
    check_params(draft_params, draft_cfg)
    if accept is None:
        accept = accept_greedy if temperature == 0 else accept_or_resample
    rng = np.random.default_rng(seed)
    seq = [int(i) for i in ids]
    goal = len(seq) + n_new
    t_cache = d_cache = None                                # each holds seq[:cached] only
    t_len = d_len = 0
    stats = {"accepted": 0, "proposed": 0, "rejected": 0, "target_calls": 0,
             "draft_calls": 0}
    while len(seq) < goal:
        n_draft = min(k, goal - len(seq))
        drafts, q_rows = [], []
        for _ in range(n_draft):                            # the draft, one token at a time
            fed = np.array((seq + drafts)[d_len:])          # what the draft's cache lacks
            logits, d_cache = forward_cached(draft_params, fed, draft_cfg, d_cache)  # [n, V]
            d_len = len(seq) + len(drafts)
            stats["draft_calls"] += 1
            q = _dist(logits[-1:], temperature)[0]          # [V]
            drafts.append(int(q.argmax()) if temperature == 0 else int(sample(q, rng)))
            q_rows.append(q)
        fed = np.array((seq + drafts)[t_len:])              # the target checks all at once
        logits, t_cache = forward_cached(target_params, fed, target_cfg, t_cache)
        stats["target_calls"] += 1
        p = _dist(logits[-(n_draft + 1):], temperature)     # [n_draft + 1, V]
        n, nxt = accept(p, np.array(q_rows), np.array(drafts), rng)
        stats["accepted"] += n
        stats["proposed"] += n_draft
        stats["rejected"] += n < n_draft
        seq += drafts[:n] + [nxt]
        # Cached positions past the kept drafts hold rejected tokens: drop them.
        t_len = len(seq) - 1
        t_cache = _trim(t_cache, t_len)
        d_len = min(d_len, t_len)
        d_cache = _trim(d_cache, d_len)
    return np.array(seq[:goal]), stats


def expected_tokens_per_call(alpha: float, k: int) -> float:
    """Tokens one target pass yields on average when each draft token is accepted with
    probability ``alpha``, independently: 1 + alpha + ... + alpha^k
    = (1 - alpha^(k+1)) / (1 - alpha) (Leviathan et al., 2023).
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha: expected an acceptance rate in [0, 1], got {alpha!r}")
    k = check_positive_int(k, "k")
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def output_distribution(p: np.ndarray, q: np.ndarray,
                        resample: Callable[[np.ndarray, np.ndarray], np.ndarray] = residual
                        ) -> np.ndarray:
    """The exact distribution of the token one verification step emits at a position, when
    the draft proposes from ``q`` and a rejection draws from ``resample(p, q)``:
    min(p, q) + (1 - sum min(p, q)) * resample(p, q). With :func:`residual` it is p.

    Shapes: p [..., V], q [..., V] -> [..., V]
    """
    kept = np.minimum(p, q)                                 # q(x) min(1, p(x) / q(x))
    rejected = 1.0 - kept.sum(axis=-1, keepdims=True)       # [..., 1]
    return kept + rejected * resample(p, q)
