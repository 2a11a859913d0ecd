"""Reading a trained model: attention patterns, what each head does, where a logit comes
from, and what the position table learned (for the shipped model of ``anatomy.weights``).

Everything runs the model through :func:`anatomy.gpt_numpy.forward`, so there is one forward
pass in the book: these functions read what it records (``return_trace``) or change one
sublayer's write as it runs (``edit``).

- :func:`attention_patterns`: every block's attention weights, stacked.
- :func:`head_scores`: for each (layer, head), the mean attention on a named kind of key
  (the previous character, itself, the first character of the window, the start of the
  current word or line, the latest space or newline, an earlier copy of the current
  character, the character after such a copy), beside what a head spreading its attention
  evenly would score. A head whose score on one kind is high and far above that baseline has
  a pattern you can name with a number; what the model uses it for is a separate question.
- :func:`first_key_weight`: each head's weight on a window's first id before and after a
  newline comes into view, on any windows or, by :func:`windows_by_start`, grouped by how
  they begin.
- :func:`direct_logit_attribution`: one logit split into the contributions of the token
  embedding, the position embedding, each attention layer and each MLP (Elhage et al.,
  2021), with the final LayerNorm's scale frozen; the pieces sum to the logit.
- :func:`logit_diff_attribution`: the same split for a logit difference (against another
  token, or the mean logit), which is what the softmax sees; by head if asked.
- :func:`ablate_heads`: the loss with heads mean- or zero-ablated; :func:`patch_recovery`:
  how much of a logit difference patching one head's or MLP's write from a clean run into
  a corrupted one gives back (activation patching).
- :func:`cosine_similarity` and :func:`position_similarity`: how alike the rows of a
  position table are, trained against freshly initialised.
- :func:`induction_scores`: how much each head attends, on a repeated random sequence,
  to the token after the current token's earlier copy (Olsson et al., 2022);
  :func:`break_path`: one head's write cut from a later block's queries, keys or values
  only, the test of Q-, K- and V-composition (Elhage et al., 2021).

Shapes: ids [T] or [B, T]; weights [L, ..., h, T, T]; scores [L, h]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ._validate import check_ids, check_shape
from .attention import attention
from .blocks import LN_EPS, BlockWrites, layer_norm
from .gpt_numpy import WriteEdit, embed, forward, loss, next_token_loss
from .heads import merge_heads, split_heads
from .induction import check_repeated, repeated_tokens
from .masks import causal_mask
from .params import GPTConfig, block_params, init_params

ROLES = ("previous", "self", "first", "word start", "last space", "line start",
         "last newline", "same char", "induction")
_TEXT_ROLES = ("word start", "last space", "line start", "last newline")   # need a tokenizer
# A few words for each role of ROLES, as in "puts 0.55 on <the previous character>". The
# "last space" role counts any whitespace, so its key may be a newline. Except "previous"
# and "self", no role counts the query's own key or the one just before it.
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
    any (``defined``). Roles other than "previous" and "self" never count those two keys: a
    query whose latest space (or start of word, and so on) is itself or the character just
    before it is left out of that role, not credited to it. The other roles can still share a
    key (the latest newline is often also the latest space). The four roles about words and
    lines need the ids of the whitespace and newline characters; "last space" counts every
    whitespace id, so its key may be a newline (the gap in front of a line's first word).

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
    out["last space"] = one_key(space, (space >= 0) & (space <= t.T - 2))
    line = _last_before(is_newline) + 1                            # [B, T]
    out["line start"] = one_key(line, (line > 0) & (line <= t.T - 2))
    newline = _last_upto(is_newline)                               # [B, T]
    out["last newline"] = one_key(newline, (newline >= 0) & (newline <= t.T - 2))
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
        """Heads with a nameable pattern: (layer, head, role, score, uniform) for each head whose
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
    untrained one (``init_params(cfg, seed)``: N(0, 0.02^2), as nanoGPT and Hugging Face
    draw GPT-2's): "trained" and "untrained".

    Shapes: pos_emb [ctx, d] -> each [ctx, ctx]
    """
    check_shape(params["pos_emb"], "params['pos_emb']", "[ctx, d]", ctx=cfg.ctx, d=cfg.d)
    untrained = init_params(cfg, seed)["pos_emb"]                  # [ctx, d]
    return {"trained": cosine_similarity(params["pos_emb"]),
            "untrained": cosine_similarity(untrained)}


# ---------------------------------------------------------------- causes: ablation, patching

def head_writes(writes: BlockWrites, W_o: np.ndarray) -> np.ndarray:
    """What each head of one block writes to the residual stream: head k's output
    softmax(q k^T / sqrt(d_head)) v through its own d_head rows of W_o. The h writes plus
    the bias b_o sum to the block's attention write.

    Shapes: writes.weights [..., h, T, T], writes.kv[1] [..., h, T, d_head], W_o [d, d]
            -> [..., h, T, d]
    """
    weights, values = writes.weights, writes.kv[1]
    z = weights @ values               # [..., h, T, T] @ [..., h, T, d_head] -> [..., h, T, d_head]
    h, d_head = z.shape[-3], z.shape[-1]
    W = np.asarray(W_o).reshape(h, d_head, -1)              # [d, d] -> [h, d_head, d]
    return z @ W                       # [..., h, T, d_head] @ [h, d_head, d] -> [..., h, T, d]


def _check_heads(heads, cfg: GPTConfig) -> list[tuple[int, int]]:
    """A list of (layer, head) pairs, each inside the model."""
    if isinstance(heads, tuple) and len(heads) == 2 and all(
            isinstance(v, (int, np.integer)) for v in heads):
        raise ValueError(f"heads: expected a list of (layer, head) pairs, got one pair "
                         f"{heads!r}; write [{heads!r}]")
    out = []
    for pair in heads:
        ok = (isinstance(pair, (tuple, list)) and len(pair) == 2
              and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                      for v in pair))
        if not ok:
            raise ValueError(f"heads: expected (layer, head) pairs of integers, got {pair!r}")
        layer, head = int(pair[0]), int(pair[1])
        if not (0 <= layer < cfg.L and 0 <= head < cfg.h):
            raise ValueError(f"heads: no head ({layer}, {head}) in this model: layers "
                             f"0..{cfg.L - 1}, heads 0..{cfg.h - 1}")
        out.append((layer, head))
    return out


def _windows(ids: np.ndarray, cfg: GPTConfig) -> np.ndarray:
    """ids [T] or [B, T] with 2 <= T <= ctx, as windows [B, T]."""
    ids = check_ids(ids, cfg.V, cfg.ctx)
    if ids.shape[-1] < 2:
        raise ValueError(f"ids: expected T >= 2 (one input and one target), got shape "
                         f"{ids.shape}")
    return ids.reshape(-1, ids.shape[-1])


def _recorder(params: Mapping[str, np.ndarray], store: dict) -> WriteEdit:
    """An ``edit`` for :func:`anatomy.gpt_numpy.forward` that changes nothing and keeps every
    head's write: store[i] [..., h, T, d] and store[f"{i}.mlp"] [..., T, d]."""
    def edit(name: str, write: np.ndarray, writes: BlockWrites) -> np.ndarray:
        i = int(name.split(".")[1])
        if name.endswith(".attn"):
            store[i] = head_writes(writes, params[f"blocks.{i}.W_o"])
        else:
            store[f"{i}.mlp"] = write
        return write
    return edit


def ablate_heads(params: Mapping[str, np.ndarray], cfg: GPTConfig, ids: np.ndarray,
                 heads, how: str = "mean", where: np.ndarray | None = None,
                 batch: int = 128) -> float:
    """The mean next-token loss on ``ids`` with the given heads ablated: each head's write
    to the residual stream replaced by its mean over every position and window of ``ids``
    (``how="mean"``, computed on the intact model), or by zero (``how="zero"``). Everything
    downstream, the MLP of the same block included, reads the edited stream. ``heads=[]``
    gives the intact model's loss. Mean-ablation keeps the average the later layers are used
    to and aims to remove only what the head says about this position and window; zeroing
    also removes that average. Neither bounds what the head's information is worth: the mean
    is also written where the head would not have written it, so either can cost more.

    ``where`` (booleans shaped like ``ids``) keeps only the predictions of the ids it marks:
    where[..., j] counts the loss of predicting ids[..., j] from ids[..., :j], so column 0,
    which nothing predicts, must be False. The means are still taken over every position.

    Shapes: ids [T] or [B, T] (2 <= T <= ctx), heads [(layer, head), ...],
            where like ids -> scalar (nats)
    """
    if how not in ("mean", "zero"):
        raise ValueError(f"how: expected 'mean' or 'zero', got {how!r}")
    heads = _check_heads(heads, cfg)
    rows = _windows(ids, cfg)                                      # [B, T]
    keep = _check_where(where, np.shape(ids)).reshape(rows.shape) if where is not None else None
    layers = sorted({layer for layer, _ in heads})
    means = {layer: np.zeros((cfg.h, cfg.d)) for layer in layers}  # [h, d] per layer
    if how == "mean" and heads:
        for start in range(0, len(rows), batch):
            store: dict = {}
            forward(params, rows[start:start + batch], cfg, edit=_recorder(params, store))
            for layer in layers:                                   # [b, h, T, d] -> [h, d]
                means[layer] += store[layer].sum(axis=(0, 2))
        n = rows.size                                              # B * T writes per head
        means = {layer: m / n for layer, m in means.items()}
    by_layer = {layer: [hd for lay, hd in heads if lay == layer] for layer in layers}

    def edit(name: str, write: np.ndarray, writes: BlockWrites) -> np.ndarray:
        i = int(name.split(".")[1])
        if not name.endswith(".attn") or i not in by_layer:
            return write
        each = head_writes(writes, params[f"blocks.{i}.W_o"])     # [b, h, T, d]
        out = write.copy()                                         # [b, T, d]
        for hd in set(by_layer[i]):
            out += means[i][hd] - each[:, hd]                      # [d] - [b, T, d]
        return out

    total, count = 0.0, 0
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]                          # [b, T]
        logits = forward(params, chunk, cfg, edit=edit)            # [b, T, V]
        if keep is None:
            total += next_token_loss(logits, chunk) * len(chunk)
            count += len(chunk)
            continue
        mask = keep[start:start + batch, 1:]                       # [b, T-1]: targets kept
        if mask.any():                   # logits [b, T-1, V][mask] -> [n, V], targets [n]
            total += loss(logits[:, :-1][mask], chunk[:, 1:][mask]) * int(mask.sum())
            count += int(mask.sum())
    return total / count


def _check_where(where, shape: tuple) -> np.ndarray:
    """A boolean mask shaped like the ids, marking at least one predicted id (not column 0)."""
    where = np.asarray(where)
    if where.dtype != bool or where.shape != tuple(shape):
        raise ValueError(f"where: expected booleans shaped like ids {tuple(shape)}, got "
                         f"{where.dtype} {where.shape}")
    if where[..., 0].any():
        raise ValueError("where: column 0 marks the first id of a window, which nothing "
                         "predicts; leave it False")
    if not where.any():
        raise ValueError("where: marks no prediction; nothing to average")
    return where


def after_blank_line(ids: np.ndarray, newline_id: int) -> np.ndarray:
    """Which ids sit on a line that follows a blank line (in a play, the speaker's name),
    not counting the newline that ends it. Only lines whose blank line lies inside the
    window count.

    Shapes: ids [T] or [B, T] -> booleans of the same shape
    """
    ids = np.asarray(ids)
    rows = ids.reshape(-1, ids.shape[-1])                          # [B, T]
    is_newline = rows == newline_id                                # [B, T]
    last = _last_before(is_newline)                                # [B, T]: newline before t
    before = np.take_along_axis(is_newline, np.maximum(last - 1, 0), axis=-1)   # [B, T]
    out = (last >= 1) & before & ~is_newline                       # "\n\n" then this line
    return out.reshape(ids.shape)


START_KINDS = ("a line", "a capital", "a lower-case letter", "a space", "punctuation")


def windows_by_start(text: str, tokenizer, T: int) -> dict[str, np.ndarray]:
    """Every window of T characters of ``text`` but the first (whose previous character is
    unknown), grouped by how it begins (:data:`START_KINDS`): "a line" just after a
    newline, otherwise on a capital, a lower-case letter, a space or anything else
    ("punctuation"). Windows that begin on a newline are left out. For tokenizers with one
    id per character.

    Shapes: text of N characters -> each kind: windows [B, T]
    """
    ids = np.asarray(tokenizer.encode(text))
    if len(ids) != len(text):
        raise ValueError("tokenizer: expected one id per character of text")
    if len(text) < T + 1:
        raise ValueError(f"text: expected at least T + 1 = {T + 1} characters, got {len(text)}")
    rows = np.lib.stride_tricks.sliding_window_view(ids, T)[1:]   # [N - T, T]
    first = np.array(list(text[1:len(rows) + 1]))                 # each window's first char
    mid = np.array(list(text[:len(rows)])) != "\n"                # previous char not a newline
    kinds = {"a line": ~mid & (first != "\n"),
             "a capital": mid & np.char.isupper(first),
             "a lower-case letter": mid & np.char.islower(first),
             "a space": mid & (first == " ")}
    kinds["punctuation"] = mid & (first != "\n") & ~np.any(list(kinds.values()), axis=0)
    return {kind: rows[where] for kind, where in kinds.items()}


class FirstKey(NamedTuple):
    """Mean weight on key 0 per (layer, head), [L, h], of the queries before and after a
    newline comes into view, and what a head with no preference would put there."""

    before: np.ndarray
    after: np.ndarray
    uniform_before: float
    uniform_after: float


def first_key_weight(params: Mapping[str, np.ndarray], ids: np.ndarray, cfg: GPTConfig,
                     newline_id: int) -> FirstKey:
    """How much each head attends to key 0, the window's first id, before and after a
    newline comes into view. Only queries t >= 2 count (for t < 2 key 0 is the query
    itself or the id just before it). ``before``: the mean weight on key 0 of the queries
    with no newline at or before t; ``after``: the same for the queries at or after the
    window's first newline (nan where no window has one). The uniform baselines are what a
    head spreading its weight evenly over the t + 1 visible keys would put there.

    Shapes: ids [T] or [B, T] (3 <= T <= ctx) -> before [L, h], after [L, h]
    """
    rows = _windows(ids, cfg)                                      # [B, T]
    T = rows.shape[-1]
    if T < 3:
        raise ValueError(f"ids: expected T >= 3 (a query t >= 2), got shape {np.shape(ids)}")
    on_first = attention_patterns(params, rows, cfg)[..., 2:, 0]  # [L, B, h, T-2]
    seen = (np.cumsum(rows == newline_id, axis=-1) > 0)[:, 2:]     # [B, T-2]: a newline by t
    if seen.all():
        raise ValueError("ids: every query t >= 2 has a newline in view; nothing before one")
    even = np.broadcast_to(1.0 / np.arange(3, T + 1), seen.shape)  # 1 / (t + 1) for t >= 2

    def mean(where: np.ndarray) -> tuple[np.ndarray, float]:
        if not where.any():
            return np.full((cfg.L, cfg.h), np.nan), float("nan")
        # [L, B, h, T-2] * [1, B, 1, T-2] summed over windows and queries -> [L, h]
        total = (on_first * where[None, :, None]).sum(axis=(1, 3))
        return total / where.sum(), float(even[where].mean())

    (before, even_before), (after, even_after) = mean(~seen), mean(seen)
    return FirstKey(before, after, even_before, even_after)


def _token(value, cfg: GPTConfig, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not (
            0 <= value < cfg.V):
        raise ValueError(f"{name}: expected a token id in [0, V) = [0, {cfg.V}), got "
                         f"{value!r}")
    return int(value)


def _direction(params: Mapping[str, np.ndarray], cfg: GPTConfig, target, other
               ) -> np.ndarray:
    """The unembedding direction whose dot product with LN_f(x) is the logit difference:
    head[target] - head[other], or head[target] - the mean row (``other="mean"``: the
    centred logit, the logit minus the mean of all V logits).

    Shapes: -> [d]
    """
    unembed = np.asarray(params["tok_emb"] if cfg.tied else params["head"], np.float64)
    target = _token(target, cfg, "target")
    if isinstance(other, str):
        if other != "mean":
            raise ValueError(f"other: expected a token id or 'mean', got {other!r}")
        return unembed[target] - unembed.mean(axis=0)              # [d]
    other = _token(other, cfg, "other")
    if other == target:
        raise ValueError(f"other: expected a token other than target = {target}")
    return unembed[target] - unembed[other]                        # [d]


def logit_diff(logits: np.ndarray, target: int, other) -> np.ndarray:
    """logit[target] - logit[other], or minus the mean logit when ``other="mean"``.

    Shapes: logits [..., V] -> [...]
    """
    ref = logits.mean(axis=-1) if isinstance(other, str) else logits[..., other]
    return logits[..., target] - ref


def logit_diff_attribution(params: Mapping[str, np.ndarray], cfg: GPTConfig,
                           ids: np.ndarray, target: int, other, by_head: bool = False
                           ) -> dict[str, float]:
    """Split the logit difference logit[target] - logit[other] at the last position of
    ``ids`` into what each part of the model wrote into the residual stream; the parts sum
    to it exactly (in float64, to about 1e-12).

    ``other`` is a token id, or "mean" for the centred logit (the target's logit minus the
    mean of all V). Either way a push that raises every logit alike, which the softmax
    ignores, scores zero here, unlike in the raw logit of :func:`direct_logit_attribution`.
    The final LayerNorm's scale 1 / sqrt(var + eps) is frozen at the value the real stream
    gives at that position, the standard direct logit attribution (Elhage et al., 2021):
    each piece counts ((piece - mean(piece)) * scale * lnf_g) . (head[target] - head[other]),
    and the LayerNorm's shift counts lnf_b . (head[target] - head[other]).

    Keys, in order: "tok_emb", "pos_emb", then for each block i "blocks.{i}.attn" (or with
    ``by_head`` its heads "blocks.{i}.head{k}" and the bias "blocks.{i}.b_o") and
    "blocks.{i}.mlp", then "lnf_b".

    Shapes: ids [T] (1 <= T <= ctx), target, other in [0, V) -> {part: float}
    """
    ids = check_ids(ids, cfg.V, cfg.ctx)
    if ids.ndim != 1:
        raise ValueError(f"ids: expected one sequence [T], got shape {ids.shape}")
    direction = _direction(params, cfg, target, other)            # [d]
    p = {name: np.asarray(value, dtype=np.float64) for name, value in params.items()}
    store: dict = {}
    _, trace = forward(p, ids, cfg, return_trace=True, edit=_recorder(p, store))
    pos = len(ids) - 1
    pieces = {"tok_emb": p["tok_emb"][ids[pos]], "pos_emb": p["pos_emb"][pos]}   # [d] each
    for i in range(cfg.L):
        if by_head:
            for k in range(cfg.h):
                pieces[f"blocks.{i}.head{k}"] = store[i][k, pos]               # [d]
            b_o = p.get(f"blocks.{i}.b_o")
            pieces[f"blocks.{i}.b_o"] = np.zeros(cfg.d) if b_o is None else b_o
        else:
            pieces[f"blocks.{i}.attn"] = trace[f"blocks.{i}.attn"][pos]         # [d]
        pieces[f"blocks.{i}.mlp"] = trace[f"blocks.{i}.mlp"][pos]               # [d]
    stream = trace[f"blocks.{cfg.L - 1}.out"][pos]                              # [d]
    scale = 1.0 / np.sqrt(stream.var() + LN_EPS)          # frozen, from the real stream
    read = p["lnf_g"] * scale * direction                  # [d]
    out = {name: float((c - c.mean()) @ read) for name, c in pieces.items()}    # [d] @ [d]
    out["lnf_b"] = float(p["lnf_b"] @ direction)                                 # [d] @ [d]
    return out


@dataclass(frozen=True)
class PatchRecovery:
    """What patching one head's (or one MLP's) write from a clean run into a corrupted one
    gives back, as a share of the gap between the two runs' logit differences: 0 = the
    corrupted run's, 1 = the clean run's. ``heads`` [L, h], ``mlps`` [L]; ``clean`` and
    ``corrupt``: the two runs' logit differences at the last position. ``attns`` [L]: every
    head of a layer patched at once (its whole attention write, since b_o is the same in
    both runs); None where not measured."""

    heads: np.ndarray
    mlps: np.ndarray
    clean: float
    corrupt: float
    attns: np.ndarray | None = None


def patch_recovery(params: Mapping[str, np.ndarray], cfg: GPTConfig, clean: np.ndarray,
                   corrupt: np.ndarray, target: int, other) -> PatchRecovery:
    """Activation patching: run ``corrupt``, but with one head's write (at every position)
    taken from the run on ``clean``, and measure how much of the logit difference
    logit[target] - logit[other] at the last position comes back:
    (patched - corrupt) / (clean - corrupt). The same for each MLP's write. Every head and
    every MLP is patched alone, the rest of the corrupted run recomputed around it; then all
    the heads of each layer together (``attns``), since single shares need not add up.

    Shapes: clean [T], corrupt [T] (same T <= ctx), target, other in [0, V)
            -> heads [L, h], mlps [L], attns [L]
    """
    clean, corrupt = check_ids(clean, cfg.V, cfg.ctx, name="clean"), check_ids(
        corrupt, cfg.V, cfg.ctx, name="corrupt")
    if clean.ndim != 1 or clean.shape != corrupt.shape:
        raise ValueError(f"clean, corrupt: expected two sequences [T] of the same length, "
                         f"got shapes {clean.shape} and {corrupt.shape}")
    _direction(params, cfg, target, other)                         # checks target, other
    store: dict = {}
    ld_clean = float(logit_diff(forward(params, clean, cfg, edit=_recorder(params, store))[-1],
                                target, other))
    ld_corrupt = float(logit_diff(forward(params, corrupt, cfg)[-1], target, other))
    if abs(ld_clean - ld_corrupt) < 1e-6:
        raise ValueError(f"clean, corrupt: the two runs give the same logit difference "
                         f"({ld_clean:.3g}), so there is nothing to recover")

    def patched(layer: int, heads: list[int] | None) -> float:
        # heads: the layer's heads to patch together; None patches the layer's MLP instead
        def edit(name: str, write: np.ndarray, writes: BlockWrites) -> np.ndarray:
            if name == f"blocks.{layer}.mlp" and heads is None:
                return store[f"{layer}.mlp"]
            if name == f"blocks.{layer}.attn" and heads is not None:
                mine = head_writes(writes, params[f"blocks.{layer}.W_o"])   # [h, T, d]
                swap = store[layer][heads] - mine[heads]                    # [k, T, d]
                return write + swap.sum(axis=0)                             # [T, d]
            return write
        logits = forward(params, corrupt, cfg, edit=edit)          # [T, V]
        return float(logit_diff(logits[-1], target, other))

    span = ld_clean - ld_corrupt
    heads = np.array([[(patched(i, [k]) - ld_corrupt) / span for k in range(cfg.h)]
                      for i in range(cfg.L)])                      # [L, h]
    mlps = np.array([(patched(i, None) - ld_corrupt) / span for i in range(cfg.L)])   # [L]
    attns = np.array([(patched(i, list(range(cfg.h))) - ld_corrupt) / span
                      for i in range(cfg.L)])                      # [L]
    return PatchRecovery(heads=heads, mlps=mlps, clean=ld_clean, corrupt=ld_corrupt,
                         attns=attns)


# ---------------------------------------------------------------- induction heads and composition


def induction_scores(params: Mapping[str, np.ndarray], cfg: GPTConfig, n_seq: int,
                     seq_len: int, seed: int) -> np.ndarray:
    """Every head's induction score: :func:`repeat_attention` on ``n_seq`` sequences of
    ``seq_len`` random tokens whose second half repeats the first
    (:func:`anatomy.induction.repeated_tokens`, drawn from ``seed``).

    Shapes: -> [L, h]
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
    if isinstance(seq_len, (int, np.integer)) and not isinstance(seq_len, bool) \
            and seq_len > cfg.ctx:
        raise ValueError(f"seq_len: expected at most ctx = {cfg.ctx} tokens, got {seq_len}")
    return repeat_attention(params, cfg, repeated_tokens(int(seed), n_seq, seq_len, cfg.V))


def repeat_attention(params: Mapping[str, np.ndarray], cfg: GPTConfig, ids: np.ndarray
                     ) -> np.ndarray:
    """On sequences whose second half repeats the first, each head's mean attention from
    every token of the repeated half to the token just after its earlier occurrence: query
    T/2 + i looks at key i + 1, averaged over the T/2 queries and the n sequences. A head
    that finds the earlier copy and moves on by one (an induction head, Olsson et al.,
    2022) scores near 1; one spreading its weight evenly, about the mean of 1 / (t + 1).

    Shapes: ids [n, T] (T even, ids[:, T/2:] == ids[:, :T/2]) -> [L, h]
    """
    ids = check_repeated(ids, cfg)
    half = ids.shape[-1] // 2
    queries = np.arange(half, 2 * half)                                   # [T/2]
    total = np.zeros((cfg.L, cfg.h))
    for start in range(0, len(ids), 64):
        weights = attention_patterns(params, ids[start:start + 64], cfg)  # [L, b, h, T, T]
        on = weights[..., queries, queries - half + 1]                    # [L, b, h, T/2]
        total += on.sum(axis=(1, 3))                                      # -> [L, h]
    return total / (len(ids) * half)


PATHS = ("q", "k", "v")


@dataclass(frozen=True)
class PathBreak:
    """An edited run of :func:`break_path`: its ``logits`` [..., T, V] and the reading
    layer's attention ``weights`` [..., h, T, T]."""

    logits: np.ndarray
    weights: np.ndarray


def break_path(params: Mapping[str, np.ndarray], cfg: GPTConfig, ids: np.ndarray,
               head: tuple[int, int], layer: int, path: str, how: str = "mean") -> PathBreak:
    """Cut one path of composition: what ``head`` (layer i, head k) writes, as read by the
    queries, the keys or the values (``path`` "q", "k" or "v") of every head of the later
    block ``layer``, and nothing else.

    That block computes the chosen projection from the stream with the head's write
    replaced by its mean over every position and window of ``ids`` (``how="mean"``) or
    removed (``how="zero"``); the other two projections, the rest of the stream and every
    other block read the head's real write. With path "k" this tests K-composition
    (Elhage et al., 2021): whether the block's keys need what the head wrote.

    Shapes: ids [T] or [B, T] (T <= ctx) -> logits [..., T, V], weights [..., h, T, T]
    """
    if path not in PATHS:
        raise ValueError(f"path: expected one of 'q', 'k', 'v', got {path!r}")
    if how not in ("mean", "zero"):
        raise ValueError(f"how: expected 'mean' or 'zero', got {how!r}")
    (src, k), = _check_heads([head], cfg)
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) \
            or not src < layer < cfg.L:
        raise ValueError(f"layer: expected a block after the head's (layer {src}), in "
                         f"({src}, {cfg.L}), got {layer!r}")
    ids = check_ids(ids, cfg.V, cfg.ctx)
    state: dict = {"x": embed(params["tok_emb"], params["pos_emb"], ids)}   # [..., T, d]

    def edit(name: str, write: np.ndarray, writes: BlockWrites) -> np.ndarray:
        i = int(name.split(".")[1])
        if name == f"blocks.{layer}.attn":
            return _attend_broken(params, cfg, layer, state, path, write, writes)
        if i < layer:
            if name == f"blocks.{src}.attn":
                mine = head_writes(writes, params[f"blocks.{src}.W_o"])[..., k, :, :]
                lead = tuple(range(mine.ndim - 1))                         # every window, t
                keep = mine.mean(axis=lead) if how == "mean" else 0.0      # [d] or 0
                state["swap"] = keep - mine                                # [..., T, d]
            state["x"] = state["x"] + write                                # [..., T, d]
        return write

    logits = forward(params, ids, cfg, edit=edit)
    return PathBreak(logits=logits, weights=state["weights"])


def _attend_broken(params, cfg: GPTConfig, layer: int, state: dict, path: str,
                   write: np.ndarray, writes: BlockWrites) -> np.ndarray:
    """Block ``layer``'s attention write with projection ``path`` read from the stream
    with the swap of :func:`break_path` applied; records the new weights in ``state``.

    Shapes: state["x"], state["swap"] [..., T, d] -> [..., T, d]
    """
    p = block_params(params, layer)
    d, h = cfg.d, cfg.h
    streams = {name: state["x"] for name in PATHS}
    streams[path] = state["x"] + state["swap"]                            # [..., T, d]
    b = p.get("b_qkv")
    proj = []
    for i, name in enumerate(PATHS):                                       # columns i*d:(i+1)*d
        x = layer_norm(streams[name], p["ln1_g"], p["ln1_b"])             # [..., T, d]
        y = x @ p["W_qkv"][:, i * d:(i + 1) * d]                          # [..., T, d]
        proj.append(split_heads(y if b is None else y + b[i * d:(i + 1) * d], h))
    T = state["x"].shape[-2]
    out, weights = attention(*proj, causal_mask(T))   # [..., h, T, d_head], [..., h, T, T]
    state["weights"] = weights
    out = merge_heads(out) @ p["W_o"]                 # [..., T, d] @ [d, d] -> [..., T, d]
    return out if p.get("b_o") is None else out + p["b_o"]
