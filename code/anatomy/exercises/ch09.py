"""Chapter 9 exercises: the learning-rate schedule, batches of shifted windows, AdamW's
parameter groups, and a four-block character model trained from scratch (the challenge).

This module needs torch; ``check`` imports it only for chapter 9's exercises.
"""

from __future__ import annotations

import math

import torch

from ..data import get_batch
from ..gpt_torch import GPT, configure_optimizer
from ..params import GPTConfig, count_block, count_params
from ..train.char_lm import train_char_lm
from ..train.config import TrainConfig
from ..train.schedule import lr_at
from . import register
from ._core import Exercise, Wrong, run

# ---- 9.1 warmup, then cosine ------------------------------------------------------------

_SCHEDULE = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=110)
_SCHEDULE_CASE = "lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=110"


def _rate(fn, step: int, cfg: TrainConfig, case: str) -> float:
    got = run(fn, step, cfg, case=case, hint="with warmup_steps = 0 there is no warmup to "
              "divide by: go straight to the cosine" if cfg.warmup_steps == 0 else "")
    if got is None:
        raise Wrong(f"on {case}, step {step}: the result is None: did you forget to return it?")
    try:
        value = float(got)
    except (TypeError, ValueError):
        raise Wrong(f"on {case}, step {step}: expected a number, got a "
                    f"{type(got).__name__}") from None
    if not math.isfinite(value):
        raise Wrong(f"on {case}, step {step}: the rate is {value}")
    return value


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15)


def _diagnose_lr(fn, rng) -> None:
    cfg, case = _SCHEDULE, _SCHEDULE_CASE
    first = _rate(fn, 0, cfg, case)
    if _close(first, cfg.lr):
        raise Wrong(f"on {case}, step 0 already gets the peak rate {cfg.lr:g}: there is no "
                    "warmup. Climb linearly, lr * (step + 1) / warmup_steps, for the first "
                    "warmup_steps steps")
    if first == 0:
        raise Wrong(f"on {case}, step 0 gets a rate of 0, so the first update does nothing: "
                    "climb as lr * (step + 1) / warmup_steps, reaching the peak at step "
                    "warmup_steps - 1")
    end = _rate(fn, cfg.max_steps, cfg, case)
    if abs(end) < 1e-3 * cfg.min_lr:
        raise Wrong(f"on {case}, the rate at max_steps is {end:.3g}: the cosine ends at 0 "
                    f"instead of min_lr = {cfg.min_lr:g}. Decay between the two: min_lr + "
                    "0.5 (1 + cos(pi p)) (lr - min_lr)")
    late = _rate(fn, cfg.max_steps + 40, cfg, case)
    if late > cfg.min_lr * (1 + 1e-9):
        raise Wrong(f"on {case}, at step {cfg.max_steps + 40} (after max_steps) the rate is "
                    f"{late:.3g}, above min_lr: the cosine climbs back up once p passes 1. "
                    "Hold the rate at min_lr for step >= max_steps")
    for step in range(cfg.max_steps + 5):
        got, want = _rate(fn, step, cfg, case), lr_at(step, cfg)
        if not _close(got, want):
            stage = "warmup" if step < cfg.warmup_steps else "cosine decay"
            raise Wrong(f"on {case}, step {step} ({stage}) gets {got:.6g} but should get "
                        f"{want:.6g}: warmup lr * (step + 1) / warmup_steps, then p = (step - "
                        "warmup_steps) / (max_steps - warmup_steps) from 0 to 1")
    flat = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_steps=0, max_steps=50)
    case = "warmup_steps=0 (no warmup), max_steps=50"
    for step in (0, 25, 50):
        got, want = _rate(fn, step, flat, case), lr_at(step, flat)
        if not _close(got, want):
            raise Wrong(f"on {case}, step {step} gets {got:.6g} but should get {want:.6g}")


def _no_warmup(step, cfg):
    p = min(step, cfg.max_steps) / cfg.max_steps
    return cfg.min_lr + 0.5 * (1 + math.cos(math.pi * p)) * (cfg.lr - cfg.min_lr)


def _cosine_to_zero(step, cfg):
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    p = min(1.0, (step - cfg.warmup_steps) / (cfg.max_steps - cfg.warmup_steps))
    return 0.5 * (1 + math.cos(math.pi * p)) * cfg.lr


def _never_clamped(step, cfg):
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    p = (step - cfg.warmup_steps) / (cfg.max_steps - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (1 + math.cos(math.pi * p)) * (cfg.lr - cfg.min_lr)


register(Exercise(
    id="9.1",
    title="Warmup, then cosine decay",
    kind="implement",
    reference=lr_at,
    diagnose=_diagnose_lr,
    success="linear warmup to the peak, half a cosine down to min_lr, then flat; also "
            "without warmup",
    wrong_answers=(
        (_no_warmup, "there is no warmup"),
        (_cosine_to_zero, "instead of min_lr"),
        (_never_clamped, "climbs back up"),
    ),
))

# ---- 9.2 batches of shifted windows -----------------------------------------------------

_PAST_END = ("if an index is out of range, a window runs past the end of data: the targets "
             "need one token more than the inputs, so a start s must satisfy s + T + 1 <= N, "
             "i.e. draw starts with torch.randint(N - T, ...)")


def _pair(result, case: str):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Wrong(f"on {case}, expected a pair (x, y), got a {type(result).__name__}: "
                    "return both, as `return x, y`")
    out = []
    for name, value in zip("xy", result, strict=True):
        try:
            t = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError):
            raise Wrong(f"on {case}, {name} is a {type(value).__name__}, not a tensor of "
                        "ids") from None
        out.append(t)
    return out


def _batch(fn, data, B: int, T: int, seed: int, case: str):
    gen = torch.Generator().manual_seed(seed)
    x, y = _pair(run(fn, data, B, T, gen, case=case, hint=_PAST_END, copy_inputs=False),
                 case)
    for name, t in (("x", x), ("y", y)):
        if tuple(t.shape) != (B, T):
            raise Wrong(f"on {case}, {name} has shape {tuple(t.shape)}; expected (B, T) = "
                        f"({B}, {T}): one row per window, T tokens each")
        if t.is_floating_point() or t.dtype == torch.bool:
            raise Wrong(f"on {case}, {name} has dtype {t.dtype}: token ids must be integers "
                        "(torch.long) for the embedding lookup")
    return x.long(), y.long()


def _diagnose_batch(fn, rng) -> None:
    N, B, T = 50, 4, 8
    data = torch.arange(N)                   # id = position, so a window shows where it is
    case = f"data = torch.arange({N}), B = {B}, T = {T}"
    x, y = _batch(fn, data, B, T, 0, case)
    steps = x[:, 1:] - x[:, :-1]                                    # [B, T-1]
    if not bool((steps == 1).all()):
        row = int((steps != 1).any(dim=1).nonzero()[0])
        raise Wrong(f"on {case}, row {row} of x is {x[row].tolist()}, not {T} consecutive "
                    "tokens of data: each row must be one contiguous window data[s : s + T]")
    if torch.equal(y, x):
        raise Wrong(f"on {case}, y equals x: the targets must be the same window shifted one "
                    "token to the right, y = data[s + 1 : s + T + 1], so position t is scored "
                    "on the token that follows it")
    if torch.equal(y, x - 1):
        raise Wrong(f"on {case}, y is x shifted to the left (data[s - 1 : s + T - 1]); the "
                    "target of position t is the *next* token: y = data[s + 1 : s + T + 1]")
    if not torch.equal(y, x + 1):
        raise Wrong(f"on {case}, y is not x shifted by one token: expected "
                    f"{(x[0] + 1).tolist()} for the first row, got {y[0].tolist()}")

    N = T + 4
    case = f"data = torch.arange({N}), T = {T}, B = 256: starts 0 to N - T - 1 = {N - T - 1}"
    x, _ = _batch(fn, torch.arange(N), 256, T, 2, case)
    starts = sorted(set(x[:, 0].tolist()))
    if starts[-1] > N - T - 1 or starts[0] < 0:
        raise Wrong(f"on {case}, a window starts at {starts[-1]}: it runs past the end of "
                    "data, where the targets need one token more than the inputs")
    if starts != list(range(N - T)):
        missing = sorted(set(range(N - T)) - set(starts))
        raise Wrong(f"on {case}, the starts drawn were {starts}; start(s) {missing} are never "
                    "drawn. torch.randint(n, ...) draws 0..n-1, so randint(N - T) covers every "
                    "window, the last one included")

    data = torch.arange(T + 1)
    case = f"data of exactly T + 1 = {T + 1} tokens (one possible window), B = 16"
    x, y = _batch(fn, data, 16, T, 1, case)
    if not (torch.equal(x, data[:T].expand(16, T)) and torch.equal(y, data[1:].expand(16, T))):
        raise Wrong(f"on {case}, the only window is start 0 (x = data[0:{T}], y = "
                    f"data[1:{T + 1}]), but the rows start at {sorted(set(x[:, 0].tolist()))}")

    data = torch.arange(1000)
    case = "two generators with different seeds on 1,000 tokens"
    a, _ = _batch(fn, data, 16, T, 3, case)
    b, _ = _batch(fn, data, 16, T, 4, case)
    if torch.equal(a, b):
        raise Wrong(f"on {case}, both gave the same windows: draw the starts from the "
                    "generator you are given (torch.randint(..., generator=generator)), so "
                    "runs are reproducible and independent of other randomness")
    again, _ = _batch(fn, data, 16, T, 3, case)
    if not torch.equal(a, again):
        raise Wrong("the same seed gave different windows: use only the generator passed "
                    "in, not the global random state")


def _unshifted(data, B, T, generator):
    x, _ = get_batch(data, B, T, generator)
    return x, x.clone()


def _past_the_end(data, B, T, generator):
    starts = torch.randint(len(data) - T + 1, (B,), generator=generator)
    rows = starts[:, None] + torch.arange(T)[None, :]       # [B, T]
    return data[rows], data[rows + 1]


def _never_last(data, B, T, generator):
    starts = torch.randint(len(data) - T - 1, (B,), generator=generator)
    rows = starts[:, None] + torch.arange(T)[None, :]       # [B, T]
    return data[rows], data[rows + 1]


register(Exercise(
    id="9.2",
    title="Random windows and their shifted targets",
    kind="implement",
    reference=get_batch,
    diagnose=_diagnose_batch,
    success="contiguous windows, targets shifted by one, every start reachable and none past "
            "the end, reproducible from the generator",
    wrong_answers=(
        (_unshifted, "shifted one token to the right"),
        (_past_the_end, "runs past the end"),
        (_never_last, "are never drawn"),
    ),
))

# ---- 9.3 AdamW, decay on matrices only --------------------------------------------------


def _diagnose_optimizer(fn, rng) -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(V=11, ctx=8, d=16, L=2, h=2))
    lr, wd = 1e-3, 0.1
    case = "a two-block GPT with lr=1e-3, weight_decay=0.1"
    opt = run(fn, model, lr, wd, case=case, copy_inputs=False)
    if not isinstance(opt, torch.optim.Optimizer):
        raise Wrong(f"on {case}, expected a torch optimizer, got a {type(opt).__name__}: "
                    "return torch.optim.AdamW(groups, lr=lr)")
    names = {id(p): n for n, p in model.named_parameters()}
    where: dict[str, dict] = {}
    for group in opt.param_groups:
        for p in group["params"]:
            name = names.get(id(p), "a tensor that is not the model's")
            if name in where:
                raise Wrong(f"on {case}, {name} is in two parameter groups: each parameter "
                            "belongs to exactly one")
            where[name] = group
    missing = [n for n in names.values() if n not in where]
    if missing:
        raise Wrong(f"on {case}, {len(missing)} parameters are not in the optimizer (e.g. "
                    f"{missing[0]}), so they would never be trained")
    params = dict(model.named_parameters())
    decayed = [n for n, g in where.items() if g.get("weight_decay", 0) > 0]
    vectors = [n for n in decayed if params[n].ndim < 2]
    matrices = [n for n in params if params[n].ndim >= 2]
    if not decayed:
        raise Wrong(f"on {case}, no parameter is decayed: the matrices ({matrices[0]}, ...) "
                    f"need weight_decay={wd}")
    if vectors:
        raise Wrong(f"on {case}, {len(vectors)} vectors are decayed, e.g. {vectors[0]}: "
                    "LayerNorm gains and shifts and the biases set a scale or an offset; "
                    "pulling them toward 0 only hurts. Decay the 2-D parameters alone "
                    "(p.ndim >= 2) and give the rest weight_decay=0")
    for n in matrices:
        if where[n].get("weight_decay", 0) != wd:
            raise Wrong(f"on {case}, {n} (a matrix) has weight_decay="
                        f"{where[n].get('weight_decay')}; expected {wd}")
    for group in opt.param_groups:
        if group.get("lr") != lr:
            raise Wrong(f"on {case}, a group has lr={group.get('lr')}; expected {lr}")
        if group["weight_decay"] and not (isinstance(opt, torch.optim.AdamW)
                                          or group.get("decoupled_weight_decay")):
            raise Wrong(f"on {case}, the optimizer is {type(opt).__name__}: its weight_decay "
                        "is added to the gradient (L2), which Adam's per-weight scaling then "
                        "distorts. AdamW decays the weights themselves: use torch.optim.AdamW")


def _decay_everything(model, lr, weight_decay):
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)


def _plain_adam(model, lr, weight_decay):
    params = list(model.parameters())
    return torch.optim.Adam([
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}], lr=lr)


def _no_decay(model, lr, weight_decay):
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)


register(Exercise(
    id="9.3",
    title="AdamW with weight decay on the matrices only",
    kind="implement",
    reference=configure_optimizer,
    diagnose=_diagnose_optimizer,
    success="every parameter once; matrices decayed, biases and LayerNorm parameters not; "
            "decoupled (AdamW) decay",
    wrong_answers=(
        (_decay_everything, "vectors are decayed"),
        (_plain_adam, "use torch.optim.AdamW"),
        (_no_decay, "no parameter is decayed"),
    ),
))

# ---- 9.C challenge: a four-block character model ----------------------------------------

RHYME = ("nasi lemak for breakfast, nasi lemak for lunch,\n"
         "sambal on the side and peanuts for the crunch.\n")
_SIZES = {"steps": 150, "T": 16, "d": 32, "h": 4}


def _logits(model, ids: torch.Tensor, case: str) -> torch.Tensor:
    with torch.no_grad():
        out = run(model, ids, case=case)
    if isinstance(out, tuple):
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise Wrong(f"on {case}, model(ids) gave a {type(out).__name__}; expected logits "
                    "[B, T, V]")
    return out.float()


def _check_count(model, V: int, T: int, d: int, h: int, case: str) -> None:
    n = sum(p.numel() for p in model.parameters())
    want = count_params(GPTConfig(V=V, ctx=T, d=d, L=4, h=h, tied=True))
    if n == want:
        return
    block = count_block(d, 4 * d)
    if n - want == V * d:
        raise Wrong(f"on {case}, the model has {n:,} parameters, V * d = {V * d:,} more than "
                    f"a tied model ({want:,}): the head has its own [V, d] table. Tie it: "
                    "logits = x @ tok_emb.T")
    if want - n == T * d:
        raise Wrong(f"on {case}, the model has {n:,} parameters, T * d = {T * d:,} fewer "
                    f"than expected ({want:,}): the position table pos_emb [T, d] is missing")
    if (n - want) % block == 0:
        L = 4 + (n - want) // block
        raise Wrong(f"on {case}, the model has {n:,} parameters, which is {L} blocks of "
                    f"{block:,}; the challenge asks for 4")
    raise Wrong(f"on {case}, the model has {n:,} parameters; four pre-norm blocks of width "
                f"{d} (MLP 4d, biases, two LayerNorms each), the two tables, a final "
                f"LayerNorm and a tied head have {want:,}")


def _windows(ids: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    starts = torch.arange(len(ids) - T)
    rows = starts[:, None] + torch.arange(T)[None, :]       # [n - T, T]
    return ids[rows], ids[rows + 1]


def _diagnose_char_lm(fn, rng) -> None:
    steps, T, d, h = _SIZES["steps"], _SIZES["T"], _SIZES["d"], _SIZES["h"]
    case = f"a {len(RHYME)}-character rhyme, steps={steps}, T={T}, d={d}, h={h}"
    result = run(fn, RHYME, case=case, seed=0, copy_inputs=False, **_SIZES)
    if not (isinstance(result, tuple) and len(result) == 3):
        raise Wrong(f"on {case}, expected (model, tokenizer, losses), got a "
                    f"{type(result).__name__}")
    model, tokenizer, losses = result
    if not isinstance(model, torch.nn.Module):
        raise Wrong(f"on {case}, the model is a {type(model).__name__}, not a torch.nn.Module")
    V = len(set(RHYME))
    if not callable(getattr(tokenizer, "encode", None)):
        raise Wrong(f"on {case}, the tokenizer (a {type(tokenizer).__name__}) has no encode "
                    "method; return the CharTokenizer you trained with")
    ids = run(tokenizer.encode, RHYME, case=f"{case}, tokenizer.encode")
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.shape != (len(RHYME),) or int(ids.max()) >= V or int(ids.min()) < 0:
        raise Wrong(f"on {case}, tokenizer.encode should give {len(RHYME)} ids in [0, "
                    f"{V}) (one per character, V = {V} distinct characters)")
    model.eval()
    _check_count(model, V, T, d, h, case)

    x, y = _windows(ids, T)                                 # [n - T, T] each
    logits = _logits(model, x, f"{case}, model(ids [B, T])")
    if tuple(logits.shape) != (len(x), T, V):
        raise Wrong(f"on {case}, model(ids) has shape {tuple(logits.shape)}; expected "
                    f"[B, T, V] = [{len(x)}, {T}, {V}]")
    later = x[:2].clone()
    later[:, -1] = (later[:, -1] + 1) % V
    before = _logits(model, x[:2], case)
    after = _logits(model, later, case)
    if not torch.allclose(before[:, :-1], after[:, :-1], atol=1e-5):
        raise Wrong(f"on {case}, changing the last token changed the logits of earlier "
                    "positions: attention must be causal (is_causal=True, or a mask)")
    same = torch.full((1, T), int(ids[0]))                 # one character, T times
    rows = _logits(model, same, case)[0]                    # [T, V]
    if torch.allclose(rows, rows[:1].expand_as(rows), atol=1e-5):
        raise Wrong(f"on {case}, a window of one repeated character gets the same logits at "
                    "every position: the model cannot tell positions apart. Add pos_emb[:T] "
                    "to the token embeddings")

    try:
        losses = [float(v) for v in losses]
    except (TypeError, ValueError):
        raise Wrong(f"on {case}, losses should be a list of {steps} numbers") from None
    if len(losses) != steps or not all(math.isfinite(v) for v in losses):
        raise Wrong(f"on {case}, losses should hold {steps} finite numbers, one per step; "
                    f"got {len(losses)}")
    pred = logits.argmax(-1)                                # [n - T, T]
    hits = float((pred == y).float().mean())
    copies = float((pred == x).float().mean())
    if copies > 0.5 and hits < 0.5:
        raise Wrong(f"on {case}, the model predicts the character it has just read "
                    f"({copies:.0%} of positions): the targets must be the inputs shifted by "
                    "one, y = ids[s + 1 : s + T + 1]")
    if hits < 0.75:
        late = sum(losses[-10:]) / len(losses[-10:])
        raise Wrong(f"on {case}, after {steps} steps the model predicts only {hits:.0%} of "
                    f"the next characters (loss {losses[0]:.2f} -> {late:.2f}); the reference "
                    "gets over 90%. Check the learning rate, zero_grad after each step and "
                    "GPT-2's small initialisation")


def _untied(text, steps=300, T=16, d=32, h=4, B=16, lr=3e-3, seed=0):
    model, tokenizer, losses = _train(text, steps, T, d, h, B, lr, seed, tied=False)
    return model, tokenizer, losses


def _no_positions(text, steps=300, T=16, d=32, h=4, B=16, lr=3e-3, seed=0):
    return _train(text, steps, T, d, h, B, lr, seed, positions=False)


def _unshifted_targets(text, steps=300, T=16, d=32, h=4, B=16, lr=3e-3, seed=0):
    return _train(text, steps, T, d, h, B, lr, seed, shift=False)


class _NoPositionGPT(GPT):
    """A GPT whose forward never adds the position table (it still owns one)."""

    def forward(self, ids, targets=None):
        x = torch.nn.functional.embedding(ids, self.tok_emb)         # [B, T, d]
        for block in self.blocks:
            x = block(x)
        x = torch.nn.functional.layer_norm(x, (self.cfg.d,), self.lnf_g, self.lnf_b)
        logits = x @ self.tok_emb.T                                   # [B, T, V]
        if targets is None:
            return logits
        return logits, torch.nn.functional.cross_entropy(logits.flatten(0, 1),
                                                         targets.flatten())


def _train(text, steps, T, d, h, B, lr, seed, tied=True, positions=True, shift=True):
    from ..data import CharTokenizer

    tokenizer = CharTokenizer(text)
    ids = torch.tensor(tokenizer.encode(text))
    torch.manual_seed(seed)
    cfg = GPTConfig(V=tokenizer.vocab_size, ctx=T, d=d, L=4, h=h, tied=tied)
    model = (GPT if positions else _NoPositionGPT)(cfg)
    optimizer = configure_optimizer(model, lr)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        x, y = get_batch(ids, B, T, gen)
        _, loss = model(x, y if shift else x)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return model, tokenizer, losses


register(Exercise(
    id="9.C",
    title="Challenge: a four-block character model, trained and sampled",
    kind="implement",
    reference=train_char_lm,
    diagnose=_diagnose_char_lm,
    success="four causal blocks with positions and a tied head, trained until it predicts "
            "most next characters of the rhyme",
    wrong_answers=(
        (_untied, "the head has its own"),
        (_no_positions, "cannot tell positions apart"),
        (_unshifted_targets, "predicts the character it has just read"),
    ),
))
