"""The whole GPT forward pass, its KV cache, loss and generation, in NumPy (chapter 8).

ids -> token + position embeddings -> L pre-norm blocks -> final LayerNorm -> tied head ->
logits. Weights come in as the flat dict of :func:`anatomy.params.param_shapes`;
:func:`params_from_hf` builds that dict from a Hugging Face GPT-2 state_dict, so the real
124M-parameter model runs through the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ._validate import (
    check_ids,
    check_keys,
    check_positive_int,
    check_positive_number,
    check_shape,
    check_top_k,
    validated,
)
from .attention import softmax
from .blocks import BlockWrites, block_writes, gelu, layer_norm, mlp
from .flops import step_flops
from .params import GPTConfig, block_params, check_params, param_specs
from .positions import learned_positions

# One (K, V) pair per block, each [..., h, T_past, d_head].
KVCache = tuple[tuple[np.ndarray, np.ndarray], ...]
# edit(name, write, writes) -> the write to add in its place; see forward.
WriteEdit = Callable[[str, np.ndarray, BlockWrites], np.ndarray]


def _model_inputs(args: dict, sizes: dict) -> None:
    """The ``where=`` check of :func:`forward`: ids in [0, V) with T <= ctx, and weights
    under every name of the shape table with the shapes ``cfg`` gives them."""
    check_ids(args["ids"], args["cfg"].V, args["cfg"].ctx)
    check_params(args["params"], args["cfg"])


@validated(where=_model_inputs)
def forward(params: Mapping[str, np.ndarray], ids: np.ndarray, cfg: GPTConfig, *,
            act: Callable[[np.ndarray], np.ndarray] = gelu, return_trace: bool = False,
            edit: WriteEdit | None = None
            ) -> np.ndarray | tuple[np.ndarray, dict[str, np.ndarray]]:
    """Logits for the next token at every position.

    Causal throughout: the logits at position t depend only on ids[..., :t+1]. ``act`` is
    the MLP nonlinearity (GELU for GPT-2). With ``return_trace`` the result is
    ``(logits, trace)``, where ``trace`` holds the intermediate tensors in order:
    "embed", then for each block i "blocks.{i}.attn" and "blocks.{i}.mlp" (what each
    sublayer writes to the residual stream), "blocks.{i}.weights" and "blocks.{i}.out"
    (the stream after the block), then "lnf" and "logits". The final stream equals
    trace["embed"] plus every write.

    ``edit`` (for ablation and patching, :mod:`anatomy.interp`) may replace a sublayer's
    write before it is added to the stream: it is called as ``edit(name, write, writes)``
    with name "blocks.{i}.attn" or "blocks.{i}.mlp", the write [..., T, d] and the block's
    :class:`~anatomy.blocks.BlockWrites` (its weights and keys/values, for per-head writes),
    and returns the write to use (``write`` itself to leave it). The MLP of an edited block
    reads the stream after the edited attention write, and later blocks read the edited
    stream.

    Shapes: ids [T] or [B, T] (integers in [0, V), 1 <= T <= ctx)
            -> logits [T, V] or [B, T, V]
    """
    x = embed(params["tok_emb"], params["pos_emb"], ids)    # [..., T] -> [..., T, d]
    trace = {"embed": x}
    for i in range(cfg.L):
        p = block_params(params, i)
        writes = block_writes(x, p, cfg.h, act=act)
        if edit is not None:
            writes = _edited(edit, i, x, p, writes, act)
        x = x + writes.attn + writes.mlp                    # [..., T, d], same sums as block()
        trace.update({f"blocks.{i}.attn": writes.attn, f"blocks.{i}.mlp": writes.mlp,
                      f"blocks.{i}.weights": writes.weights, f"blocks.{i}.out": x})
    x = layer_norm(x, params["lnf_g"], params["lnf_b"])     # [..., T, d]
    logits = x @ _head(params, cfg).T             # [..., T, d] @ [d, V] -> [..., T, V]
    trace.update({"lnf": x, "logits": logits})
    return (logits, trace) if return_trace else logits


def _edited(edit: WriteEdit, i: int, x: np.ndarray, p: Mapping[str, np.ndarray],
            writes: BlockWrites, act: Callable[[np.ndarray], np.ndarray]) -> BlockWrites:
    """Block i's writes after ``edit``: attention's first, then the MLP's, which is run again
    on the edited stream when attention's write changed (as :func:`anatomy.blocks.block`
    would run it).

    Shapes: x [..., T, d] -> writes.attn, writes.mlp [..., T, d]
    """
    attn = edit(f"blocks.{i}.attn", writes.attn, writes)
    out = writes.mlp
    if attn is not writes.attn and "W_1" in p:              # the MLP reads x + the new write
        out = mlp(layer_norm(x + attn, p["ln2_g"], p["ln2_b"]), p["W_1"], p.get("b_1"),
                  p["W_2"], p.get("b_2"), act=act)          # [..., T, d]
    writes = writes._replace(attn=attn, mlp=out)
    return writes._replace(mlp=edit(f"blocks.{i}.mlp", out, writes))


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
    if cache is None:
        ids, T_past = check_ids(ids, cfg.V, cfg.ctx), 0
    else:
        if len(cache) != cfg.L:
            raise ValueError(f"cache: expected L = {cfg.L} (K, V) pairs, one per block, "
                             f"got {len(cache)}")
        ids, T_past = check_ids(ids, cfg.V), np.shape(cache[0][0])[-2]
        if T_past + ids.shape[-1] > cfg.ctx:
            raise ValueError(f"ids: T_past + T = {T_past} + {ids.shape[-1]} exceeds "
                             f"ctx={cfg.ctx}")
    check_params(params, cfg)
    x = embed(params["tok_emb"], params["pos_emb"], ids, start=T_past)   # [..., T, d]
    new_cache = []
    for i in range(cfg.L):
        past = None if cache is None else cache[i]
        writes = block_writes(x, block_params(params, i), cfg.h, act=act, past=past)
        x = x + writes.attn + writes.mlp                    # [..., T, d]
        new_cache.append(writes.kv)                         # K, V [..., h, T_past + T, d_head]
    x = layer_norm(x, params["lnf_g"], params["lnf_b"])     # [..., T, d]
    return x @ _head(params, cfg).T, tuple(new_cache)       # [..., T, d] @ [d, V] -> [..., T, V]


def _head(params: Mapping[str, np.ndarray], cfg: GPTConfig) -> np.ndarray:
    """The output head: the token table itself when tied (GPT-2), else its own matrix.

    Shapes: -> [V, d]
    """
    return params["tok_emb"] if cfg.tied else params["head"]


def _token_ids(args: dict, sizes: dict) -> None:
    """The ``where=`` check of :func:`embed`: integer ids in [0, V)."""
    check_ids(args["ids"], sizes["V"])


@validated(where=_token_ids)
def embed(tok_emb: np.ndarray, pos_emb: np.ndarray, ids: np.ndarray, start: int = 0
          ) -> np.ndarray:
    """The residual stream's starting point: each token's row plus its position's row.

    The two tables are added, not concatenated, so the stream stays d wide. Only T rows of
    the position table are used (positions start..start+T-1; ``start`` > 0 when earlier
    tokens sit in a KV cache).

    Shapes: tok_emb [V, d], pos_emb [ctx, d], ids [T] or [B, T] -> [T, d] or [B, T, d]
    """
    tok = tok_emb[ids]                                 # [..., T] -> [..., T, d]
    pos = learned_positions(pos_emb, ids.shape[-1], start=start)   # [ctx, d] -> [T, d]
    return tok + pos                                   # [..., T, d] + [T, d] -> [..., T, d]


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
    _check_two_tokens(ids)
    return next_token_loss(forward(params, ids, cfg), ids)     # [..., T, V] vs [..., T]


def _shifted_targets(args: dict, sizes: dict) -> None:
    """The ``where=`` check of :func:`next_token_loss`: ids shaped exactly like the logits
    without V, and at least two tokens (one input, one target)."""
    logits, ids = args["logits"], args["ids"]
    if ids.shape != logits.shape[:-1]:
        raise ValueError(f"ids: expected shape [..., T] = {logits.shape[:-1]} (logits "
                         f"[..., T, V] without V), got {ids.shape}")
    _check_two_tokens(ids)


@validated(where=_shifted_targets)
def next_token_loss(logits: np.ndarray, ids: np.ndarray) -> float:
    """The language-modelling loss of a sequence, given its logits: shift by one, then
    cross-entropy.

    Row t of the logits predicts token t + 1, so logits[..., :-1, :] are scored against
    ids[..., 1:]. The last row has nothing to predict inside the sequence and is dropped; so
    is the first token, which no row predicts. The mean runs over every one of the
    B x (T - 1) predictions.

    Shapes: logits [..., T, V], ids [..., T] (T >= 2) -> scalar
    """
    return loss(logits[..., :-1, :], ids[..., 1:])             # [..., T-1, V] vs [..., T-1]


def _check_two_tokens(ids: np.ndarray) -> None:
    if ids.shape[-1] < 2:
        raise ValueError(f"ids: expected shape [T] or [B, T] with T >= 2 (inputs "
                         f"ids[..., :-1], targets ids[..., 1:]), got {ids.shape}")


def _sampling_args(args: dict, sizes: dict) -> None:
    """The ``where=`` check of :func:`generate`: ids in [0, V), n_new >= 1, a temperature
    >= 0, top_k in [1, V] or None, and a generator whenever it samples."""
    cfg, temperature, top_k = args["cfg"], args["temperature"], args["top_k"]
    check_ids(args["ids"], cfg.V)
    check_positive_int(args["n_new"], "n_new")
    if not temperature >= 0:
        raise ValueError(f"temperature: expected a number >= 0 (0 = greedy), got {temperature!r}")
    check_top_k(top_k, cfg.V)
    if temperature > 0 and not isinstance(args["rng"], np.random.Generator):
        raise ValueError("rng: sampling with temperature > 0 needs a np.random.Generator, "
                         f"got {args['rng']!r}")


@validated(where=_sampling_args)
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
    for _ in range(n_new):
        window = ids[..., -cfg.ctx:]                # [..., T] -> [..., <= ctx]
        logits = forward(params, window, cfg)       # [..., <= ctx, V]
        last = logits[..., -1, :]                   # [..., V]
        if temperature == 0:
            nxt = last.argmax(axis=-1)              # [..., V] -> [...]
        else:
            probs = next_token_distribution(last, temperature, top_k)
            nxt = sample(probs, rng)                # [..., V] -> [...]
        ids = np.concatenate([ids, nxt[..., None]], axis=-1)  # [..., T + 1]
    return ids


@validated(where=_sampling_args)
def generate_cached(params: Mapping[str, np.ndarray], ids: np.ndarray, cfg: GPTConfig,
                    n_new: int, temperature: float = 0.0, top_k: int | None = None,
                    rng: np.random.Generator | None = None) -> np.ndarray:
    """:func:`generate` with a KV cache: the prompt is run once, then one token per step.

    Same arguments and the same tokens as :func:`generate` (to rounding in the logits), but
    each step projects only the newest token and attends over the cached keys and values.
    There is no sliding window: a learned position table ends at ctx, and sliding would
    shift every cached position, so the prompt plus ``n_new`` must fit in ctx.

    Shapes: ids [T] or [B, T] -> [T + n_new] or [B, T + n_new]   (T + n_new <= ctx)
    """
    ids = check_ids(ids, cfg.V, cfg.ctx)
    if ids.shape[-1] + n_new > cfg.ctx:
        raise ValueError(f"n_new: T + n_new = {ids.shape[-1]} + {n_new} exceeds ctx={cfg.ctx} "
                         "(a KV cache cannot slide a learned position table; use generate)")
    logits, cache = forward_cached(params, ids, cfg)           # prefill: [..., T, V]
    for step in range(n_new):
        last = logits[..., -1, :]                              # [..., V]
        if temperature == 0:
            nxt = last.argmax(axis=-1)                         # [..., V] -> [...]
        else:
            nxt = sample(next_token_distribution(last, temperature, top_k), rng)
        ids = np.concatenate([ids, nxt[..., None]], axis=-1)   # -> [..., T + 1]
        if step + 1 < n_new:                                   # the last token needs no logits
            logits, cache = forward_cached(params, ids[..., -1:], cfg, cache)   # [..., 1, V]
    return ids


def next_token_distribution(logits: np.ndarray, temperature: float = 1.0,
                            top_k: int | None = None) -> np.ndarray:
    """The distribution a sampler draws the next token from.

    ``top_k`` first keeps the k largest logits (ties with the k-th are kept) and gives the
    rest probability 0; the survivors are divided by ``temperature`` and softmaxed. A
    temperature below 1 sharpens the distribution towards the argmax, above 1 flattens it
    towards uniform over the survivors. Temperature 0 means greedy and has no distribution:
    :func:`generate` takes the argmax instead.

    Shapes: logits [..., V] -> probs [..., V] (each row sums to 1)
    """
    logits = np.asarray(logits)
    V = check_shape(logits, "logits", "[..., V]")["V"]
    check_positive_number(temperature, "temperature")
    if check_top_k(top_k, V) is not None:
        kth = np.sort(logits, axis=-1)[..., -top_k, None]      # [..., V] -> [..., 1]
        logits = np.where(logits < kth, -np.inf, logits)       # [..., V]
    return softmax(logits / temperature)                       # [..., V]


def _distribution(args: dict, sizes: dict) -> None:
    """The ``where=`` check of :func:`sample`: rows of probabilities, and a generator."""
    probs = np.asarray(args["probs"], dtype=float)
    if not (np.all(np.isfinite(probs)) and np.all(probs >= 0)
            and np.all(probs.sum(axis=-1) > 0)):
        raise ValueError("probs: expected finite numbers >= 0 with a positive sum in every "
                         "row [..., V]")
    if not isinstance(args["rng"], np.random.Generator):
        raise ValueError(f"rng: expected a np.random.Generator, got {args['rng']!r}")


@validated(where=_distribution)
def sample(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per row: the first token whose running total passes a uniform number.

    Using "total > u" (not ">=") means a token of probability 0 is never picked, even when
    u is exactly 0.

    Shapes: probs [..., V] -> [...]
    """
    cdf = np.cumsum(probs, axis=-1)                            # [..., V]
    u = rng.random(probs.shape[:-1] + (1,)) * cdf[..., -1:]    # [..., 1], scaled to the total
    picked = (cdf <= u).sum(axis=-1)                           # [..., V] -> [...]
    return np.minimum(picked, probs.shape[-1] - 1)             # guard against rounding


def step_macs(cfg: GPTConfig, T: int, cached: bool, all_logits: bool = True
              ) -> dict[str, int]:
    """Multiply-adds spent on the logits for the next token when the sequence holds T tokens:
    half of :func:`anatomy.flops.step_flops` (one multiply-add is two FLOPs), part by part.

    Without a cache, the whole window of T tokens is run again, as :func:`generate` does, the
    head by default on all T rows, as ``forward`` computes them (``all_logits=False``: the
    last row only, all that choosing the next token needs). With a cache, as
    :func:`generate_cached` does, only the newest token is projected; its query meets T keys.
    Parts: "projections", "attention", "mlp", "head" and their "total".

    Shapes: -> counts for one new token, every block included
    """
    T = check_positive_int(T, "T")
    if T > cfg.ctx:
        raise ValueError(f"T: T={T} exceeds ctx={cfg.ctx}")
    return {part: n // 2 for part, n in step_flops(cfg, T, cached, all_logits).items()}


# ---------------------------------------------------------------- Hugging Face GPT-2 weights

# Hugging Face GPT-2 names -> the shape table's names. GPT-2's Conv1D layers store their
# weights [in, out], as this book does, so no matrix needs a transpose.
_HF_TOP = {"wte.weight": "tok_emb", "wpe.weight": "pos_emb"}
_HF_BLOCK = {
    "ln_1.weight": "ln1_g", "ln_1.bias": "ln1_b",
    "attn.c_attn.weight": "W_qkv", "attn.c_attn.bias": "b_qkv",
    "attn.c_proj.weight": "W_o", "attn.c_proj.bias": "b_o",
    "ln_2.weight": "ln2_g", "ln_2.bias": "ln2_b",
    "mlp.c_fc.weight": "W_1", "mlp.c_fc.bias": "b_1",
    "mlp.c_proj.weight": "W_2", "mlp.c_proj.bias": "b_2",
}
_HF_FINAL = {"ln_f.weight": "lnf_g", "ln_f.bias": "lnf_b"}
# Saved GPT-2 checkpoints may hold the causal mask as a buffer; it is not a weight.
_HF_BUFFERS = ("attn.bias", "attn.masked_bias")


def _as_numpy(value, dtype) -> np.ndarray:
    """A torch tensor (any device, bfloat16 included) or an array, as a NumPy array."""
    if hasattr(value, "detach"):                       # a torch.Tensor, without importing torch
        value = value.detach().cpu()
        try:
            value = value.numpy()
        except TypeError:                              # bfloat16 has no NumPy dtype
            value = value.float().numpy()
    value = np.asarray(value)
    return value if dtype is None else value.astype(dtype, copy=False)


def params_from_hf(state_dict: Mapping[str, object], h: int, dtype: np.dtype | type | None = None
                   ) -> tuple[dict[str, np.ndarray], GPTConfig]:
    """The book's weights and config from a Hugging Face GPT-2 ``state_dict``.

    Accepts the keys of ``GPT2LMHeadModel`` (``transformer.wte.weight``, ...,
    ``lm_head.weight``) or of ``GPT2Model`` (no ``transformer.`` prefix, no head), with
    torch tensors or NumPy arrays as values. V and d come from the token table, ctx from the
    position table, L from the block numbers and d_ff from ``mlp.c_fc``; the number of heads
    h is not visible in any shape (``model.config.n_head``). The head is tied when
    ``lm_head.weight`` is missing or equal to the token table, and untied otherwise. Causal
    mask buffers (``attn.bias``, ``attn.masked_bias``) are skipped; any other missing or
    unknown key, or a wrong shape, raises ``ValueError`` naming the key.

    The forward pass then matches Hugging Face's for its default GPT-2 settings: GELU in the
    tanh form (``activation_function="gelu_new"``), LayerNorm eps 1e-5, scores divided by
    sqrt(d_head). Arrays may share memory with the tensors; ``dtype`` casts them.

    Shapes: state_dict[...]: wte [V, d], wpe [ctx, d], c_attn [d, 3d], c_fc [d, d_ff], ...
            -> params with param_shapes(cfg)
    """
    arrays = {}
    for key, value in state_dict.items():
        name = key.removeprefix("transformer.")
        if name.startswith("h.") and name.split(".", 2)[-1] in _HF_BUFFERS:
            continue
        arrays[name] = (key, _as_numpy(value, dtype))
    blocks = {name.split(".")[1] for name in arrays if name.startswith("h.")}
    if "wte.weight" not in arrays or not blocks:
        raise ValueError("state_dict: expected a GPT-2 state_dict with keys like "
                         "'transformer.wte.weight' and 'transformer.h.0.ln_1.weight', got "
                         f"keys {list(state_dict)[:4]}")
    if not all(b.isdigit() for b in blocks):
        bad = sorted(b for b in blocks if not b.isdigit())[0]
        raise ValueError(f"state_dict: block numbers must be integers, got 'h.{bad}'")
    L = max(int(b) for b in blocks) + 1
    head_key, head = arrays.pop("lm_head.weight", (None, None))
    names = {**_HF_TOP, **{f"h.{i}.{hf}": f"blocks.{i}.{ours}"
                           for i in range(L) for hf, ours in _HF_BLOCK.items()}, **_HF_FINAL}
    check_keys(arrays, "state_dict (without the 'transformer.' prefix)", names)
    tok_key, tok = arrays["wte.weight"]
    dims = check_shape(tok, f"state_dict[{tok_key!r}]", "[V, d]")
    ctx = check_shape(arrays["wpe.weight"][1], f"state_dict[{arrays['wpe.weight'][0]!r}]",
                      "[ctx, d]", d=dims["d"])["ctx"]
    fc_key, fc = arrays["h.0.mlp.c_fc.weight"]
    d_ff = check_shape(fc, f"state_dict[{fc_key!r}]", "[d, d_ff]", d=dims["d"])["d_ff"]
    tied = head is None or (np.shape(head) == np.shape(tok) and np.array_equal(head, tok))
    cfg = GPTConfig(V=dims["V"], ctx=ctx, d=dims["d"], L=L, h=h, d_ff=d_ff, tied=tied)
    sizes = {"V": cfg.V, "ctx": cfg.ctx, "d": cfg.d, "d_ff": cfg.d_ff}
    specs = param_specs(cfg)
    params = {}
    for hf, ours in names.items():
        key, value = arrays[hf]
        check_shape(value, f"state_dict[{key!r}]", specs[ours], **sizes)
        params[ours] = value
    if not tied:
        check_shape(head, f"state_dict[{head_key!r}]", specs["head"], **sizes)
        params["head"] = head
    return {name: params[name] for name in specs}, cfg       # shape-table order
