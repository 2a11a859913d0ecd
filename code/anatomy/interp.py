"""Reading a trained model: attention patterns, what each head does, where a logit comes
from, and what the position table learned (for the shipped model of ``anatomy.weights``).

Everything runs the model through :func:`anatomy.gpt_numpy.forward` with ``return_trace``,
so there is one forward pass in the book and these functions only read what it records.

- :func:`attention_patterns`: every block's attention weights, stacked.
- :func:`head_scores`: for each (layer, head), the mean attention on a named kind of key
  (the previous character, itself, the first character of the window, the start of the
  current word or line, the latest space or newline, an earlier copy of the current
  character, the character after such a copy), beside what a head spreading its attention
  evenly would score. A head whose score on one kind is high and far above that baseline has
  a job you can name with a number.
- :func:`direct_logit_attribution`: one logit split into the contributions of the token
  embedding, the position embedding, each attention layer and each MLP (Elhage et al.,
  2021), with the final LayerNorm's scale frozen; the pieces sum to the logit.
- :func:`cosine_similarity` and :func:`position_similarity`: how alike the rows of a
  position table are, trained against freshly initialised.

Shapes: ids [T] or [B, T]; weights [L, ..., h, T, T]; scores [L, h]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ._validate import check_ids, check_shape
from .blocks import LN_EPS
from .gpt_numpy import forward
from .params import GPTConfig, init_params

ROLES = ("previous", "self", "first", "word start", "last space", "line start",
         "last newline", "same char", "induction")
_TEXT_ROLES = ("word start", "last space", "line start", "last newline")   # need a tokenizer
# A few words for each role of ROLES, as in "puts 0.55 on <the previous character>". The
# "last space" role counts any whitespace, so its key may be a newline.
ROLE_WORDS = {
    "previous": "the previous character",
    "self": "itself",
    "first": "the window's first character",
    "word start": "the start of its word",
    "last space": "the latest space or newline",
    "line start": "the start of its line",
    "last newline": "the latest newline",
    "same char": "earlier copies of itself",
    "induction": "what followed earlier copies",
}


def attention_patterns(params: Mapping[str, np.ndarray], ids: np.ndarray,
                       cfg: GPTConfig) -> np.ndarray:
    """Every block's attention weights on ``ids``, stacked: entry [l, ..., k, t, j] is how
    much head k of block l at query position t takes from key position j (each row sums
    to 1 over j <= t; the causal mask makes the rest 0).

    Shapes: ids [T] or [B, T] -> [L, h, T, T] or [L, B, h, T, T]
    """
    _, trace = forward(params, ids, cfg, return_trace=True)
    return np.stack([trace[f"blocks.{i}.weights"] for i in range(cfg.L)])   # [L, ..., h, T, T]


def _last_upto(flags: np.ndarray) -> np.ndarray:
    """For each position t, the last position k <= t where ``flags`` is True, else -1.

    Shapes: flags [B, T] -> [B, T]
    """
    where = np.where(flags, np.arange(flags.shape[-1]), -1)        # [B, T]
    return np.maximum.accumulate(where, axis=-1)                   # [B, T]


def _last_before(flags: np.ndarray) -> np.ndarray:
    """For each position t, the last position k < t where ``flags`` is True, else -1.

    Shapes: flags [B, T] -> [B, T]
    """
    upto = _last_upto(flags)                                       # [B, T]
    return np.concatenate([np.full((len(flags), 1), -1), upto[:, :-1]], axis=-1)   # k < t


def role_targets(ids: np.ndarray, whitespace_ids=(), newline_ids=()
                 ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """For each role of :data:`ROLES`, which keys count (``targets``) and which queries have
    any (``defined``). Roles that overlap "previous" or "self" leave those two keys out, so
    each score measures a separate job, except "last space" and "last newline", which are
    the latest such character wherever it is; the four roles about words and lines need the
    ids of the whitespace and newline characters.

    Shapes: ids [B, T] -> each role: targets [B, T, T] (query t, key j), defined [B, T]
    """
    ids = np.asarray(ids)
    if ids.ndim != 2:
        raise ValueError(f"ids: expected windows [B, T], got shape {ids.shape}")
    B, T = ids.shape
    t = np.arange(T)[:, None]                                      # [T, 1] query positions
    j = np.arange(T)[None, :]                                      # [1, T] key positions
    far = j <= t - 2                                               # keys before t - 1
    out = {}

    def one_key(key: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # key [B, T]: the chosen key of each query; ok [B, T]: where it counts
        targets = (j[None] == key[..., None]) & ok[..., None]      # [B, T, T]
        return targets, ok

    out["previous"] = one_key(np.broadcast_to(t.T - 1, (B, T)), np.broadcast_to(t.T >= 1, (B, T)))
    out["self"] = one_key(np.broadcast_to(t.T, (B, T)), np.ones((B, T), bool))
    out["first"] = one_key(np.zeros((B, T), int), np.broadcast_to(t.T >= 2, (B, T)))
    is_space = np.isin(ids, list(whitespace_ids))                  # [B, T]
    is_newline = np.isin(ids, list(newline_ids))                   # [B, T]
    word = _last_before(is_space) + 1                              # [B, T]
    out["word start"] = one_key(word, (word > 0) & ~is_space & (word <= t.T - 2))
    space = _last_upto(is_space)                                   # [B, T]
    out["last space"] = one_key(space, space >= 0)
    line = _last_before(is_newline) + 1                            # [B, T]
    out["line start"] = one_key(line, (line > 0) & (line <= t.T - 2))
    newline = _last_upto(is_newline)                               # [B, T]
    out["last newline"] = one_key(newline, newline >= 0)
    same = (ids[:, None, :] == ids[:, :, None]) & far              # [B, T, T]: ids[j] == ids[t]
    out["same char"] = same, same.any(axis=-1)
    after = np.zeros_like(same)                                    # key j follows a copy at j-1
    after[:, :, 1:] = (ids[:, None, :-1] == ids[:, :, None]) & far[None, :, 1:]
    out["induction"] = after, after.any(axis=-1)
    return out


@dataclass(frozen=True)
class HeadScores:
    """Mean attention of every (layer, head) on each role's keys, and the baselines.

    ``scores[role]`` [L, h]: the attention weight a head puts on that role's keys, averaged
    over every query where the role is defined; ``uniform[role]``: the same for a head that
    spreads its weight evenly over the t + 1 visible keys (what "no preference" scores);
    ``queries[role]``: how many (window, position) queries were averaged; ``n_windows``.
    """

    scores: dict[str, np.ndarray]
    uniform: dict[str, float]
    queries: dict[str, int]
    n_windows: int

    def named(self, min_score: float = 0.4, min_ratio: float = 5.0
              ) -> list[tuple[int, int, str, float, float]]:
        """Heads with a nameable job: (layer, head, role, score, uniform) for each head whose
        best role holds at least ``min_score`` of its attention and at least ``min_ratio``
        times the uniform baseline; strongest first."""
        found = []
        L, h = next(iter(self.scores.values())).shape
        for layer in range(L):
            for head in range(h):
                role = max(self.scores, key=lambda r: self.scores[r][layer, head])
                score, base = float(self.scores[role][layer, head]), self.uniform[role]
                if score >= min_score and score >= min_ratio * base:
                    found.append((layer, head, role, score, base))
        return sorted(found, key=lambda row: -row[3])


def head_scores(params: Mapping[str, np.ndarray], ids: np.ndarray, cfg: GPTConfig,
                tokenizer=None, batch: int = 64) -> HeadScores:
    """Score every head of the model on each role of :data:`ROLES`, over windows ``ids``.

    ``tokenizer`` (anything with ``encode``) says which ids are spaces and newlines; without
    it the four roles about words and lines are left out. See :class:`HeadScores`.

    Shapes: ids [B, T] (B windows, T <= ctx) -> scores[role] [L, h]
    """
    ids = check_ids(ids, cfg.V, cfg.ctx)
    if ids.ndim != 2 or ids.shape[-1] < 3:
        raise ValueError(f"ids: expected windows [B, T] with T >= 3, got {ids.shape}")
    space, newline = [], []
    if tokenizer is not None:
        vocab = {ch for ch in " \n\t" if _encodes(tokenizer, ch)}
        space = [tokenizer.encode(ch)[0] for ch in sorted(vocab)]
        newline = [tokenizer.encode("\n")[0]] if "\n" in vocab else []
    roles = [r for r in ROLES if tokenizer is not None or r not in _TEXT_ROLES]
    L, h = cfg.L, cfg.h
    total = {r: np.zeros((L, h)) for r in roles}
    base = dict.fromkeys(roles, 0.0)
    count = dict.fromkeys(roles, 0)
    T = ids.shape[-1]
    visible = 1.0 / (np.arange(T) + 1.0)                           # [T] uniform weight per key
    for start in range(0, len(ids), batch):
        chunk = ids[start:start + batch]                           # [b, T]
        weights = attention_patterns(params, chunk, cfg)           # [L, b, h, T, T]
        targets = role_targets(chunk, space, newline)
        for r in roles:
            keys, defined = targets[r]                             # [b, T, T], [b, T]
            # [L, b, h, T, T] * [b, 1, T, T] summed over keys -> [L, b, h, T]
            on = (weights * keys[:, None]).sum(axis=-1)
            total[r] += (on * defined[:, None]).sum(axis=(1, 3))   # [L, b, h, T] -> [L, h]
            base[r] += float((keys.sum(axis=-1) * visible * defined).sum())
            count[r] += int(defined.sum())
    missing = [r for r in roles if count[r] == 0]
    if missing:
        raise ValueError(f"ids: no query in these windows has a key for role {missing[0]!r}; "
                         f"use more or longer windows")
    return HeadScores(scores={r: total[r] / count[r] for r in roles},
                      uniform={r: base[r] / count[r] for r in roles},
                      queries=count, n_windows=len(ids))


def _encodes(tokenizer, ch: str) -> bool:
    try:
        return len(tokenizer.encode(ch)) == 1
    except (ValueError, KeyError):
        return False


def direct_logit_attribution(params: Mapping[str, np.ndarray], ids: np.ndarray,
                             cfg: GPTConfig, pos: int, target: int) -> dict[str, float]:
    """Split the logit of token ``target`` at position ``pos`` into what each part of the
    model wrote into the residual stream.

    The final stream is a sum: token embedding + position embedding + every attention
    layer's write + every MLP's write (biases included). The final LayerNorm is linear in
    it once its per-position scale 1 / sqrt(var + eps) is frozen at the value the real
    stream gives (the standard approximation, and exact for this one position): each piece
    contributes ((piece - mean(piece)) * scale * lnf_g) . head[target], and the LayerNorm's
    shift contributes lnf_b . head[target]. Computed in float64, the pieces sum to the
    model's logit to about 1e-12.

    Keys, in order: "tok_emb", "pos_emb", "blocks.{i}.attn" and "blocks.{i}.mlp" for each
    block, "lnf_b".

    Shapes: ids [T] (T <= ctx), pos in [-T, T), target in [0, V) -> {piece: float}
    """
    ids = check_ids(ids, cfg.V, cfg.ctx)
    if ids.ndim != 1:
        raise ValueError(f"ids: expected one sequence [T], got shape {ids.shape}")
    T = ids.shape[0]
    if isinstance(pos, bool) or not isinstance(pos, (int, np.integer)) or not -T <= pos < T:
        raise ValueError(f"pos: expected an integer position in [-T, T) = [{-T}, {T}), "
                         f"got {pos!r}")
    if (isinstance(target, bool) or not isinstance(target, (int, np.integer))
            or not 0 <= target < cfg.V):
        raise ValueError(f"target: expected a token id in [0, V) = [0, {cfg.V}), got "
                         f"{target!r}")
    pos = int(pos) % T
    p = {name: np.asarray(value, dtype=np.float64) for name, value in params.items()}
    _, trace = forward(p, ids, cfg, return_trace=True)
    pieces = {"tok_emb": p["tok_emb"][ids[pos]], "pos_emb": p["pos_emb"][pos]}   # [d] each
    for i in range(cfg.L):
        pieces[f"blocks.{i}.attn"] = trace[f"blocks.{i}.attn"][pos]             # [d]
        pieces[f"blocks.{i}.mlp"] = trace[f"blocks.{i}.mlp"][pos]               # [d]
    stream = trace[f"blocks.{cfg.L - 1}.out"][pos]                              # [d]
    scale = 1.0 / np.sqrt(stream.var() + LN_EPS)          # frozen, from the real stream
    unembed = (p["tok_emb"] if cfg.tied else p["head"])[target]                  # [d]
    read = p["lnf_g"] * scale * unembed                    # [d]: what one unit of a piece is worth
    out = {name: float((c - c.mean()) @ read) for name, c in pieces.items()}    # [d] @ [d]
    out["lnf_b"] = float(p["lnf_b"] @ unembed)                                   # [d] @ [d]
    return out


def cosine_similarity(table: np.ndarray) -> np.ndarray:
    """Cosine similarity between every pair of rows of a table (e.g. a position table).

    Shapes: table [n, d] -> [n, n] (1 on the diagonal)
    """
    table = np.asarray(table, dtype=np.float64)
    check_shape(table, "table", "[n, d]")
    norms = np.linalg.norm(table, axis=-1, keepdims=True)         # [n, d] -> [n, 1]
    if not np.all(norms > 0):
        raise ValueError(f"table: row {int(np.argmin(norms[:, 0]))} is all zeros and has no "
                         f"direction")
    unit = table / norms                                           # [n, d]
    return unit @ unit.T                                           # [n, d] @ [d, n] -> [n, n]


def position_similarity(params: Mapping[str, np.ndarray], cfg: GPTConfig, seed: int = 0
                        ) -> dict[str, np.ndarray]:
    """The cosine similarity of the trained position table's rows, beside that of an
    untrained one (``init_params(cfg, seed)``, GPT-2's N(0, 0.02^2)): "trained" and
    "untrained".

    Shapes: pos_emb [ctx, d] -> each [ctx, ctx]
    """
    check_shape(params["pos_emb"], "params['pos_emb']", "[ctx, d]", ctx=cfg.ctx, d=cfg.d)
    untrained = init_params(cfg, seed)["pos_emb"]                  # [ctx, d]
    return {"trained": cosine_similarity(params["pos_emb"]),
            "untrained": cosine_similarity(untrained)}
