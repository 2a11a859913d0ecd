"""Decoding strategies on a NumPy GPT: temperature, top-k, top-p, min-p, a repetition
penalty and beam search, all with a KV cache, and measures of the text they write.

Every truncation keeps a set of tokens and renormalises the softmax over it:

- top-k keeps the k likeliest tokens (ties with the k-th kept);
- top-p (nucleus, Holtzman et al., 2020) keeps the smallest set of likeliest tokens whose
  probabilities add up to at least p;
- min-p keeps the tokens whose probability is at least p times the largest one.

Shapes: logits [..., V] -> probs [..., V]; ids [T] -> [T + n_new]
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .._validate import check_ids, check_positive_int, check_positive_number, check_top_k
from ..attention import softmax
from ..gpt_numpy import forward, forward_cached, sample
from ..params import GPTConfig


def _check_fraction(value: object, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) \
            or not 0 < value <= 1:
        raise ValueError(f"{name}: expected a number in (0, 1], or None to keep every token, "
                         f"got {value!r}")
    return float(value)


def truncate(logits: np.ndarray, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, min_p: float | None = None) -> np.ndarray:
    """The distribution to sample from: logits / temperature, softmaxed, then cut by every
    rule given (a token must survive all of them) and renormalised.

    Shapes: logits [..., V] -> probs [..., V] (each row sums to 1)
    """
    logits = np.asarray(logits, dtype=float)
    V = logits.shape[-1]
    check_positive_number(temperature, "temperature")
    top_k = check_top_k(top_k, V)
    top_p, min_p = _check_fraction(top_p, "top_p"), _check_fraction(min_p, "min_p")
    probs = softmax(logits / temperature)                   # [..., V]
    keep = np.ones(probs.shape, dtype=bool)                 # [..., V]
    if top_k is not None:
        kth = np.sort(probs, axis=-1)[..., -top_k, None]    # [..., 1]
        keep &= probs >= kth
    if top_p is not None:
        order = np.argsort(-probs, axis=-1, kind="stable")  # [..., V], likeliest first
        ranked = np.take_along_axis(probs, order, axis=-1)  # [..., V]
        before = np.cumsum(ranked, axis=-1) - ranked        # mass of the likelier tokens
        inside = np.empty_like(keep)
        np.put_along_axis(inside, order, before < top_p, axis=-1)   # back to token order
        keep &= inside
    if min_p is not None:
        keep &= probs >= min_p * probs.max(axis=-1, keepdims=True)
    kept = np.where(keep, probs, 0.0)                       # [..., V]
    return kept / kept.sum(axis=-1, keepdims=True)


def repetition_penalty(logits: np.ndarray, ids: np.ndarray, penalty: float) -> np.ndarray:
    """Make tokens that already occur in ``ids`` (prompt included) less likely, after the
    penalised sampling of CTRL (Keskar et al., 2019). CTRL divides every such logit by the
    penalty, which raises a negative one; here a positive logit is divided by ``penalty``
    and a negative one multiplied, so either way it moves down for penalty > 1.
    ``penalty`` 1 changes nothing.

    Shapes: logits [V], ids [T] -> [V]
    """
    logits = np.array(logits, dtype=float)                  # a copy
    check_positive_number(penalty, "penalty")
    seen = np.unique(check_ids(ids, logits.shape[-1]))
    logits[seen] = np.where(logits[seen] > 0, logits[seen] / penalty, logits[seen] * penalty)
    return logits


def decode(params: Mapping[str, np.ndarray], cfg: GPTConfig, ids: np.ndarray, n_new: int,
           *, temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
           min_p: float | None = None, penalty: float = 1.0,
           rng: np.random.Generator | None = None) -> np.ndarray:
    """Extend one sequence by ``n_new`` tokens with a KV cache: greedy at temperature 0
    (after the repetition ``penalty``), else sampled from :func:`truncate` with ``rng``.

    Shapes: ids [T] -> [T + n_new]   (T + n_new <= ctx)
    """
    ids = check_ids(ids, cfg.V, cfg.ctx)
    n_new = check_positive_int(n_new, "n_new")
    if ids.ndim != 1 or ids.shape[0] + n_new > cfg.ctx:
        raise ValueError(f"ids: expected one sequence [T] with T + n_new <= ctx={cfg.ctx}, "
                         f"got shape {ids.shape} and n_new={n_new}")
    if temperature != 0 and not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng: sampling needs a np.random.Generator, got {rng!r}")
    logits, cache = forward_cached(params, ids, cfg)        # prefill: [T, V]
    out = list(ids)
    for step in range(n_new):
        last = repetition_penalty(logits[-1], np.array(out), penalty)   # [V]
        if temperature == 0:
            nxt = int(last.argmax())
        else:
            nxt = int(sample(truncate(last, temperature, top_k, top_p, min_p), rng))
        out.append(nxt)
        if step + 1 < n_new:
            logits, cache = forward_cached(params, np.array([nxt]), cfg, cache)   # [1, V]
    return np.array(out)


def log_likelihood(params: Mapping[str, np.ndarray], cfg: GPTConfig, ids: np.ndarray,
                   start: int) -> float:
    """Mean log-probability (nats) the model gives each token of ``ids[start:]`` after the
    ones before it: how natural the model finds a continuation of a prompt of ``start``.

    Shapes: ids [T] (T <= ctx) -> scalar
    """
    ids = check_ids(ids, cfg.V, cfg.ctx)
    if not 1 <= start < ids.shape[-1]:
        raise ValueError(f"start: expected 1 <= start < T = {ids.shape[-1]}, got {start!r}")
    logits = forward(params, ids, cfg)                      # [T, V]
    z = logits - logits.max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))   # [T, V]
    rows = np.arange(start - 1, ids.shape[-1] - 1)          # the rows that predict ids[start:]
    return float(log_p[rows, ids[start:]].mean())


def repeated_ngrams(ids: np.ndarray, n: int = 4) -> float:
    """The fraction of the text's n-grams that already occurred earlier in it: 0 for a text
    that never repeats itself, near 1 for one caught in a loop.

    Shapes: ids [T] -> scalar
    """
    ids = [int(i) for i in np.asarray(ids).reshape(-1)]
    n = check_positive_int(n, "n")
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    if not grams:
        raise ValueError(f"ids: expected at least n = {n} ids, got {len(ids)}")
    seen, repeats = set(), 0
    for gram in grams:
        repeats += gram in seen
        seen.add(gram)
    return repeats / len(grams)


def text_stats(params: Mapping[str, np.ndarray], cfg: GPTConfig, ids: np.ndarray,
               start: int, n: int = 4) -> dict[str, float]:
    """What a decoding strategy did to the text it wrote after a prompt of ``start`` ids:
    "repeated" (:func:`repeated_ngrams` of the continuation), "distinct" (how many distinct
    tokens it uses) and "loglik" (:func:`log_likelihood`, nats per token).

    Shapes: ids [T] -> three numbers
    """
    ids = check_ids(ids, cfg.V, cfg.ctx)
    new = ids[start:]
    return {"repeated": repeated_ngrams(new, n), "distinct": float(len(set(new.tolist()))),
            "loglik": log_likelihood(params, cfg, ids, start)}


def _reorder(cache, rows: np.ndarray):
    """Every block's (K, V) with its beams put in the order of ``rows``.

    Shapes: K, V [beams, h, T, d_head] -> [len(rows), h, T, d_head]
    """
    return tuple((K[rows], V[rows]) for K, V in cache)


def beam_search(params: Mapping[str, np.ndarray], cfg: GPTConfig, ids: np.ndarray,
                n_new: int, beams: int = 4) -> tuple[np.ndarray, float]:
    """The continuation of ``n_new`` tokens with the highest total log-probability that a
    beam of ``beams`` candidates finds, with one KV cache row per beam.

    At each step every beam is extended by every token, the ``beams`` best sums of log
    probabilities survive (ties to the earlier beam and the smaller id), and the cache rows
    are reordered to follow their beams. One beam is greedy decoding. Returns the best
    sequence and its total log-probability (nats) of the new tokens.

    Shapes: ids [T] -> ([T + n_new], scalar)   (T + n_new <= ctx)
    """
    ids = check_ids(ids, cfg.V, cfg.ctx)
    n_new, beams = check_positive_int(n_new, "n_new"), check_positive_int(beams, "beams")
    if ids.ndim != 1 or ids.shape[0] + n_new > cfg.ctx:
        raise ValueError(f"ids: expected one sequence [T] with T + n_new <= ctx={cfg.ctx}, "
                         f"got shape {ids.shape} and n_new={n_new}")
    logits, cache = forward_cached(params, ids[None], cfg)  # [1, T, V]
    seqs = ids[None]                                        # [1, T], one beam so far
    scores = np.zeros(1)                                    # [beams_now]
    for step in range(n_new):
        z = logits[:, -1]                                   # [beams_now, V]
        z = z - z.max(axis=-1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))   # [beams_now, V]
        total = (scores[:, None] + log_p).reshape(-1)       # [beams_now * V]
        best = np.argsort(-total, kind="stable")[:beams]    # flat indices, best first
        rows, tokens = np.divmod(best, cfg.V)               # which beam, which token
        seqs = np.concatenate([seqs[rows], tokens[:, None]], axis=-1)   # [beams, T + step + 1]
        scores = total[best]
        if step + 1 < n_new:
            logits, cache = forward_cached(params, tokens[:, None], cfg, _reorder(cache, rows))
    return seqs[0], float(scores[0])
