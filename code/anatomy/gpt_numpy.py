"""The whole GPT forward pass, its KV cache, loss and generation, in NumPy (chapter 8).

ids -> token + position embeddings -> L pre-norm blocks -> final LayerNorm -> tied head ->
logits. Weights come in as the flat dict of :func:`anatomy.params.param_shapes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ._validate import check_ids, check_positive_int, check_shape
from .attention import softmax
from .blocks import block_writes, gelu, layer_norm
from .params import GPTConfig, block_params, check_params
from .positions import learned_positions

# One (K, V) pair per block, each [..., h, T_past, d_head].
KVCache = tuple[tuple[np.ndarray, np.ndarray], ...]


def forward(params: Mapping[str, np.ndarray], ids: np.ndarray, cfg: GPTConfig, *,
            act: Callable[[np.ndarray], np.ndarray] = gelu, return_trace: bool = False
            ) -> np.ndarray | tuple[np.ndarray, dict[str, np.ndarray]]:
    """Logits for the next token at every position.

    Causal throughout: the logits at position t depend only on ids[..., :t+1]. ``act`` is
    the MLP nonlinearity (GELU for GPT-2). With ``return_trace`` the result is
    ``(logits, trace)``, where ``trace`` holds the intermediate tensors in order:
    "embed", then for each block i "blocks.{i}.attn" and "blocks.{i}.mlp" (what each
    sublayer writes to the residual stream), "blocks.{i}.weights" and "blocks.{i}.out"
    (the stream after the block), then "lnf" and "logits". The final stream equals
    trace["embed"] plus every write.

    Shapes: ids [T] or [B, T] (integers in [0, V), 1 <= T <= ctx)
            -> logits [T, V] or [B, T, V]
    """
    logits, trace, _ = _run(params, ids, cfg, act, None)
    return (logits, trace) if return_trace else logits


def forward_cached(params: Mapping[str, np.ndarray], ids: np.ndarray, cfg: GPTConfig,
                   cache: KVCache | None = None, *,
                   act: Callable[[np.ndarray], np.ndarray] = gelu) -> tuple[np.ndarray, KVCache]:
    """Logits for tokens that follow the ``cache``d ones, and the cache grown by them.

    The KV cache keeps every block's keys and values of earlier positions, so a new token
    costs one token's projections and MLP plus attention over T_past + 1 keys, instead of a
    full pass over all T_past + 1 tokens. Feeding a sequence in pieces gives the same logits
    as :func:`forward` on the whole of it (to rounding). Start with ``cache=None``.

    Shapes: ids [T] or [B, T], cache: L pairs (K, V) each [..., h, T_past, d_head]
            -> logits [..., T, V], cache: L pairs each [..., h, T_past + T, d_head]
    """
    if cache is not None and len(cache) != cfg.L:
        raise ValueError(f"cache: expected L = {cfg.L} (K, V) pairs, one per block, "
                         f"got {len(cache)}")
    logits, _, cache = _run(params, ids, cfg, act, cache)
    return logits, cache


def _run(params: Mapping[str, np.ndarray], ids: np.ndarray, cfg: GPTConfig,
         act: Callable[[np.ndarray], np.ndarray], cache: KVCache | None
         ) -> tuple[np.ndarray, dict[str, np.ndarray], KVCache]:
    """The forward pass behind :func:`forward` and :func:`forward_cached`.

    Shapes: ids [..., T] -> logits [..., T, V]
    """
    if cache is None:
        ids, T_past = check_ids(ids, cfg.V, cfg.ctx), 0
    else:
        ids, T_past = check_ids(ids, cfg.V), np.shape(cache[0][0])[-2]
        if T_past + ids.shape[-1] > cfg.ctx:
            raise ValueError(f"ids: T_past + T = {T_past} + {ids.shape[-1]} exceeds "
                             f"ctx={cfg.ctx}")
    check_params(params, cfg)
    T = ids.shape[-1]
    tok = params["tok_emb"][ids]                       # [..., T] -> [..., T, d]
    pos = learned_positions(params["pos_emb"], T, start=T_past)   # [T, d]
    x = tok + pos                                      # [..., T, d] + [T, d] -> [..., T, d]
    trace, new_cache = {"embed": x}, []
    for i in range(cfg.L):
        past = None if cache is None else cache[i]
        writes = block_writes(x, block_params(params, i), cfg.h, act=act, past=past)
        x = x + writes.attn + writes.mlp               # [..., T, d], same sums as block()
        trace.update({f"blocks.{i}.attn": writes.attn, f"blocks.{i}.mlp": writes.mlp,
                      f"blocks.{i}.weights": writes.weights, f"blocks.{i}.out": x})
        new_cache.append(writes.kv)
    x = layer_norm(x, params["lnf_g"], params["lnf_b"])     # [..., T, d]
    head = params["tok_emb"] if cfg.tied else params["head"]
    logits = x @ head.T                                # [..., T, d] @ [d, V] -> [..., T, V]
    trace.update({"lnf": x, "logits": logits})
    return logits, trace, tuple(new_cache)


def loss(logits: np.ndarray, targets: np.ndarray) -> float:
    """Mean cross-entropy of the targets under the logits, through a stable log-softmax.

    log p = z - max - log(sum exp(z - max)): never exponentiates anything above 0, so huge
    logits neither overflow nor lose the targets' probabilities to rounding.

    Shapes: logits [..., V], targets [...] (integers in [0, V)) -> scalar
    """
    logits = np.asarray(logits)
    V = check_shape(logits, "logits", "[..., V]")["V"]
    targets = np.asarray(targets)
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets: expected shape [...] = {logits.shape[:-1]} (logits "
                         f"[..., V] without V), got {targets.shape}")
    check_ids(targets.reshape(-1), V, name="targets")         # [...] -> [N]: dtype and range
    z = logits - logits.max(axis=-1, keepdims=True)            # [..., V], max 0 per row
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))  # [..., V] log-softmax
    picked = np.take_along_axis(log_p, targets[..., None], axis=-1)   # [..., V] -> [..., 1]
    return float(-picked.mean())


def lm_loss(params: Mapping[str, np.ndarray], ids: np.ndarray, cfg: GPTConfig) -> float:
    """Next-token loss of a sequence: logits at positions 0..T-2 against ids 1..T-1.

    At initialisation it is about ln V, the loss of a uniform guess (ln 65 = 4.17).

    Shapes: ids [T] or [B, T] (T >= 2) -> scalar
    """
    ids = check_ids(ids, cfg.V, cfg.ctx)
    if ids.shape[-1] < 2:
        raise ValueError(f"ids: expected shape [T] or [B, T] with T >= 2 (inputs "
                         f"ids[..., :-1], targets ids[..., 1:]), got {ids.shape}")
    logits = forward(params, ids, cfg)                         # [..., T, V]
    return loss(logits[..., :-1, :], ids[..., 1:])             # [..., T-1, V] vs [..., T-1]


def generate(params: Mapping[str, np.ndarray], ids: np.ndarray, cfg: GPTConfig, n_new: int,
             temperature: float = 0.0, top_k: int | None = None,
             rng: np.random.Generator | None = None) -> np.ndarray:
    """Extend ``ids`` by ``n_new`` tokens, one at a time.

    ``temperature`` 0 is greedy (argmax). Above 0 the logits are divided by it and a token
    is sampled with ``rng`` (required then); ``top_k`` keeps only the k likeliest tokens
    (ties with the k-th are kept). Only the last ctx tokens are fed to the model: a learned
    position table has no rows beyond ctx. Each step recomputes the whole window, which keeps
    the sliding window simple; :func:`forward_cached` shows what a KV cache saves.

    Shapes: ids [T] or [B, T] -> [T + n_new] or [B, T + n_new]
    """
    ids = check_ids(ids, cfg.V)
    n_new = check_positive_int(n_new, "n_new")
    if not temperature >= 0:
        raise ValueError(f"temperature: expected a number >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and not (isinstance(top_k, (int, np.integer)) and 1 <= top_k <= cfg.V):
        raise ValueError(f"top_k: expected an integer in [1, V] = [1, {cfg.V}] or None, "
                         f"got {top_k!r}")
    if temperature > 0 and not isinstance(rng, np.random.Generator):
        raise ValueError("rng: sampling with temperature > 0 needs a np.random.Generator, "
                         f"got {rng!r}")
    for _ in range(n_new):
        window = ids[..., -cfg.ctx:]                           # [..., T] -> [..., <= ctx]
        logits = forward(params, window, cfg)[..., -1, :]      # [..., T, V] -> [..., V]
        if top_k is not None:
            kth = np.sort(logits, axis=-1)[..., -top_k, None]  # [..., V] -> [..., 1]
            logits = np.where(logits < kth, -np.inf, logits)
        if temperature == 0:
            nxt = logits.argmax(axis=-1)                       # [..., V] -> [...]
        else:
            nxt = _sample(softmax(logits / temperature), rng)  # [..., V] -> [...]
        ids = np.concatenate([ids, nxt[..., None]], axis=-1)   # -> [..., T + 1]
    return ids


def _sample(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per row: the first token whose running total passes a uniform number.

    Using "total > u" (not ">=") means a token of probability 0 is never picked, even when
    u is exactly 0.

    Shapes: probs [..., V] -> [...]
    """
    cdf = np.cumsum(probs, axis=-1)                            # [..., V]
    u = rng.random(probs.shape[:-1] + (1,)) * cdf[..., -1:]    # [..., 1], scaled to the total
    picked = (cdf <= u).sum(axis=-1)                           # [..., V] -> [...]
    return np.minimum(picked, probs.shape[-1] - 1)             # guard against rounding
