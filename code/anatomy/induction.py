"""The data of the induction chapter: random tokens whose second half repeats the first.

Nothing in a random token predicts the next one, so on such a sequence no model can do
better than ln V per prediction on the first half, on average (a model can do much worse).
The second half is another matter: once a model has seen "... A B ..." it can predict B the
next time A comes, by looking back for the earlier A and copying what followed it. That is
the job of an induction head (Olsson et al., 2022), and the gap between the two halves'
losses measures how well a model does it.

- :func:`repeated_tokens`: sequences [n, T] whose second half repeats the first (what the
  chapter scores and measures on, and what :func:`anatomy.interp.induction_scores` draws).
- :func:`copy_pairs_batch`: the training windows of the chapter's model: distinct random
  tokens, in whose second half some bigrams of the first half come again, at random places.
- :func:`half_masks` and :func:`half_losses`: which predictions belong to each half, and the
  model's mean loss on each.

NumPy only; the PyTorch training run lives in ``anatomy.train.induction``.

Shapes: ids [n, T] (T even for repeated_tokens), masks [n, T]
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ._validate import check_ids, check_positive_int
from .gpt_numpy import forward, loss
from .params import GPTConfig, param_shapes


def _generator(rng) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0:
        return np.random.default_rng(int(rng))
    raise ValueError(f"rng: expected a np.random.Generator or a seed (an integer >= 0), "
                     f"got {rng!r}")


def repeated_tokens(rng, n_seq: int, seq_len: int, V: int) -> np.ndarray:
    """``n_seq`` sequences of ``seq_len`` ids: seq_len / 2 ids drawn uniformly from [0, V),
    then the same ids again. ``rng`` is a generator or a seed.

    Shapes: -> [n_seq, seq_len]   (seq_len even, >= 4)
    """
    check_positive_int(n_seq, "n_seq")
    check_positive_int(V, "V")
    check_positive_int(seq_len, "seq_len")
    if seq_len % 2 or seq_len < 4:
        raise ValueError(f"seq_len: expected an even length >= 4 (two halves of at least two "
                         f"tokens), got {seq_len}")
    half = _generator(rng).integers(0, V, size=(n_seq, seq_len // 2))   # [n, T/2]
    return np.concatenate([half, half], axis=-1)                          # [n, T]


def copy_pairs_batch(rng: np.random.Generator, B: int, T: int, V: int, pairs: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Training windows: each is ``T`` distinct ids drawn at random from [0, V), in whose
    second half ``pairs`` bigrams of the first half are then written again: for each, a
    random j in the first half and a random place p in the second, ids[p], ids[p + 1] =
    ids[j], ids[j + 1]. The places are sorted and never overlap, and the room left over
    falls between them at random (with many pairs they nearly tile the second half, so a
    position says much about whether a copy is there, and nothing about which id it is):
    ids[p + 1] is the id that followed the first-half occurrence of ids[p], which is unique
    since the ids were distinct. ``copied[b, p + 1]`` marks those copied ids (in the
    ``where=`` form of :func:`anatomy.interp.ablate_heads`). The other ids are not copies;
    a few become predictable by chance, when two bigrams were copied from neighbouring
    places.

    Shapes: -> ids [B, T], copied [B, T]   (T <= V, pairs <= (T - T // 2) // 2)
    """
    for value, name in ((B, "B"), (T, "T"), (V, "V"), (pairs, "pairs")):
        check_positive_int(value, name)
    if T > V:
        raise ValueError(f"T: expected at most V = {V} ids (they are distinct), got {T}")
    half = T // 2
    room = T - half - 2 * pairs                       # free slots left in the second half
    if room < 0 or half < pairs + 1:
        raise ValueError(f"pairs: expected at most {min((T - half) // 2, half - 1)} bigrams "
                         f"for windows of T = {T}, got {pairs}")
    ids = np.argsort(rng.random((B, V)), axis=-1)[:, :T]                  # [B, T] distinct
    starts = np.sort(rng.integers(0, room + 1, size=(B, pairs)), axis=-1)  # [B, K]
    places = half + starts + 2 * np.arange(pairs)                         # [B, K]: p, gaps >= 2
    sources = rng.integers(0, half - 1, size=(B, pairs))                  # [B, K]: j
    rows = np.arange(B)[:, None]                                          # [B, 1]
    for shift in (0, 1):                                  # ids[p] = ids[j], ids[p+1] = ids[j+1]
        ids[rows, places + shift] = ids[rows, sources + shift]
    copied = np.zeros((B, T), dtype=bool)
    copied[rows, places + 1] = True
    return ids, copied


def check_repeated(ids: np.ndarray, cfg: GPTConfig) -> np.ndarray:
    """``ids`` as an int array, checked to be sequences whose second half repeats the first
    (as :func:`repeated_tokens` makes them), with ids below V and at most ctx long.

    Shapes: ids [n, T] (T even, >= 4) -> [n, T]
    """
    ids = check_ids(ids, cfg.V, cfg.ctx)
    if ids.ndim != 2 or ids.shape[-1] % 2 or ids.shape[-1] < 4:
        raise ValueError(f"ids: expected repeated sequences [n, T] with T even and >= 4, "
                         f"got shape {ids.shape}")
    half = ids.shape[-1] // 2
    if not np.array_equal(ids[:, :half], ids[:, half:]):
        raise ValueError("ids: expected sequences whose second half repeats the first "
                         "(anatomy.induction.repeated_tokens)")
    return ids


def half_masks(n_seq: int, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Which predictions of a :func:`repeated_tokens` batch belong to each half.

    ``first[i, j]`` marks predicting id j from ids[:j] for j = 1 .. T/2 - 1 (inside the
    first half); ``repeat[i, j]`` for j = T/2 + 1 .. T - 1 (inside the repeat, from its
    second id on: its first id repeats a token that nothing before it announced). Both are
    shaped like the ids, in the ``where=`` form of :func:`anatomy.interp.ablate_heads`.

    Shapes: -> first [n_seq, seq_len], repeat [n_seq, seq_len]
    """
    half = seq_len // 2
    j = np.arange(seq_len)                                               # [T]
    first = np.broadcast_to((j >= 1) & (j < half), (n_seq, seq_len))     # [n, T]
    repeat = np.broadcast_to(j >= half + 1, (n_seq, seq_len))            # [n, T]
    return first.copy(), repeat.copy()


def half_losses(params: Mapping[str, np.ndarray], cfg: GPTConfig, ids: np.ndarray,
                logits: np.ndarray | None = None) -> tuple[float, float]:
    """The model's mean next-token loss (nats) on the first half and on the repeated half
    of :func:`repeated_tokens` sequences ``ids`` (the predictions of :func:`half_masks`).
    ``logits``, if given, are used instead of running ``forward`` (an edited run's, say).

    Shapes: ids [n, T] (T even) -> (first, repeat)
    """
    ids = check_repeated(ids, cfg)
    if logits is None:
        logits = forward(params, ids, cfg)                               # [n, T, V]
    first, repeat = half_masks(*ids.shape)
    pred, target = logits[:, :-1], ids[:, 1:]                            # [n, T-1, V], [n, T-1]
    return (loss(pred[first[:, 1:]], target[first[:, 1:]]),            # [m, V] vs [m]
            loss(pred[repeat[:, 1:]], target[repeat[:, 1:]]))


def copier_weights(cfg: GPTConfig) -> dict[str, np.ndarray]:
    """Weights, set by hand, for a two-block attention-only model that predicts the token
    which followed the previous occurrence of the current token (the induction chapter's
    challenge). ``cfg``: L = 2, h = 1, ``attn_only``, d = 2V + ctx.

    The stream has three blocks of coordinates: the current token (one-hot, 0..V), its
    position (one-hot, V..V+ctx) and, once block 0 has written it, the previous token
    (V+ctx..2V+ctx). Block 0's head is a previous-token head: query position t matches key
    position t - 1, and the value moves the key's token into the third block. Block 1's
    head is the induction head: the query's token matches a key whose previous token is the
    same (K-composition), the value is the key's own token, and the write lands on that
    token's coordinate, which the tied unembedding reads as its logit. Position 0 has no
    previous token (its block-0 head can only attend to itself, so the third block holds its
    own token): each key subtracts its own token, which cancels that false match and also
    keeps the query off the earlier copy of its own token.

    Shapes: -> params with param_shapes(cfg)
    """
    V, ctx, d = cfg.V, cfg.ctx, cfg.d
    if (cfg.L, cfg.h, cfg.attn_only, d) != (2, 1, True, 2 * V + ctx):
        raise ValueError(f"cfg: expected L=2, h=1, attn_only=True and d = 2V + ctx = "
                         f"{2 * V + ctx}, got {cfg}")
    tok, pos, prev = np.arange(V), V + np.arange(ctx), V + ctx + np.arange(V)   # coordinates
    sharp = 4.0                                  # query and key scale: a near-hard attention
    p = {name: np.zeros(shape) for name, shape in param_shapes(cfg).items()}
    p["tok_emb"][tok, tok] = 1.0                 # [V, d]: token v -> coordinate v
    p["pos_emb"][np.arange(ctx), pos] = 1.0      # [ctx, d]: position t -> coordinate V + t
    for name in ("blocks.0.ln1_g", "blocks.1.ln1_g", "lnf_g"):
        p[name][:] = 1.0
    W0 = p["blocks.0.W_qkv"]                     # [d, 3d]: Q, K, V column blocks
    W0[pos[1:], pos[:-1]] = sharp                # Q: position t asks for position t - 1
    W0[pos, d + pos] = sharp                     # K: each position says where it is
    W0[tok, 2 * d + prev] = 1.0                  # V: its token, into the previous-token block
    p["blocks.0.W_o"][:] = np.eye(d)             # [d, d]
    W1 = p["blocks.1.W_qkv"]                     # [d, 3d]
    W1[tok, tok] = sharp                         # Q: the current token
    W1[prev, d + tok] = sharp                    # K: the token before the key
    W1[tok, d + tok] = -sharp                    # K: minus its own token (see above)
    W1[tok, 2 * d + tok] = 1.0                   # V: the key's own token
    p["blocks.1.W_o"][:] = 5.0 * np.eye(d)       # loud enough to beat the current token
    return p
