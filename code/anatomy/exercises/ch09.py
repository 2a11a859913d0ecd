"""Chapter 9 exercises: the learning-rate schedule, batches of shifted windows, AdamW's
parameter groups, AdamW's update written out (implement), the order of a mixed-precision
step (predict), a training step that clips the scaled gradients (debug), and a four-block
character model trained from scratch (the challenge).

This module needs torch; ``check`` imports it only for chapter 9's exercises.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import torch

from ..data import get_batch
from ..gpt_torch import GPT, configure_optimizer
from ..params import GPTConfig, count_params
from ..train.adamw import adamw_update
from ..train.char_lm import train_char_lm
from ..train.config import TrainConfig
from ..train.hardware import Precision
from ..train.schedule import lr_at
from ..train.step import train_step
from . import register
from ._core import (
    Exercise,
    Wrong,
    as_array,
    expect_close,
    other_convention,
    random_leading,
    run,
    run_unchanged,
)

# ---- 9.1 warmup, then cosine ------------------------------------------------------------

_SCHEDULE = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=110)
_SCHEDULE_CASE = "lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=110"
_FLAT = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_steps=0, max_steps=50)
_FLAT_CASE = "warmup_steps=0 (no warmup), max_steps=50"


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
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)   # a float32 schedule is right


def _schedules(rng) -> list[tuple[str, TrainConfig, list[int]]]:
    """(case, cfg, steps): the fixed schedules, then fresh random ones, every step of each
    from 0 to a little past max_steps."""
    out = [(_SCHEDULE_CASE, _SCHEDULE, list(range(_SCHEDULE.max_steps + 41))),
           (_FLAT_CASE, _FLAT, list(range(_FLAT.max_steps + 6)))]
    for warmup in (int(rng.integers(1, 40)), 0):
        lr = float(10 ** rng.uniform(-4.5, -1.5))
        min_lr = lr * float(rng.uniform(0.01, 0.5))
        total = warmup + int(rng.integers(2, 150))
        cfg = TrainConfig(lr=lr, min_lr=min_lr, warmup_steps=warmup, max_steps=total)
        out.append((f"fresh random lr={lr:.3g}, min_lr={min_lr:.3g}, warmup_steps={warmup}, "
                    f"max_steps={total}", cfg, list(range(total + 11))))
    return out


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
    for case, cfg, steps in _schedules(rng):
        for step in steps:
            got, want = _rate(fn, step, cfg, case), lr_at(step, cfg)
            if not _close(got, want):
                stage = ("warmup" if step < cfg.warmup_steps else "cosine decay"
                         if step < cfg.max_steps else "after max_steps")
                raise Wrong(f"on {case}, step {step} ({stage}) gets {got:.6g} but should get "
                            f"{want:.6g}: warmup lr * (step + 1) / warmup_steps, then p = "
                            "(step - warmup_steps) / (max_steps - warmup_steps) from 0 to 1, "
                            "then min_lr")


def _lr_battery(rng):
    return [((step, cfg), {}) for _, cfg, steps in _schedules(rng) for step in steps]


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


def _decay_over_all_steps(step, cfg):
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    p = min(1.0, step / cfg.max_steps)
    return cfg.min_lr + 0.5 * (1 + math.cos(math.pi * p)) * (cfg.lr - cfg.min_lr)


register(Exercise(
    id="9.1",
    title="Warmup, then cosine decay",
    kind="implement",
    reference=lr_at,
    diagnose=_diagnose_lr,
    battery=_lr_battery,
    success="linear warmup to the peak, half a cosine down to min_lr, then flat; also "
            "without warmup and on fresh random schedules",
    wrong_answers=(
        (_no_warmup, "there is no warmup"),
        (_cosine_to_zero, "instead of min_lr"),
        (_never_clamped, "climbs back up"),
        (_decay_over_all_steps, "cosine decay"),
    ),
))

# ---- 9.2 batches of shifted windows -----------------------------------------------------

_PAST_END = ("if an index is out of range, a window runs past the end of data: the targets "
             "need one token more than the inputs, so a start s must satisfy s + T + 1 <= N, "
             "i.e. draw starts with torch.randint(N - T, ...)")


def _pair(result, case: str, names: str = "xy"):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Wrong(f"on {case}, expected a pair ({names[0]}, {names[1]}), got a "
                    f"{type(result).__name__}: return both, as `return {names[0]}, "
                    f"{names[1]}`")
    out = []
    for name, value in zip(names, result, strict=True):
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


def _random_batch_case(rng):
    T = int(rng.integers(1, 13))
    N = T + 1 + int(rng.integers(0, 200))
    B = int(rng.integers(1, 21))
    ids = torch.from_numpy(rng.permutation(N) + int(rng.integers(0, 1000)))    # [N], distinct
    dtype = (torch.long, torch.int32)[int(rng.integers(0, 2))]
    return (f"fresh random ids [N] = [{N}] ({dtype}, all distinct), B = {B}, T = {T}",
            ids.to(dtype), B, T, int(rng.integers(0, 2**31)))


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

    case, data, B, T, seed = _random_batch_case(rng)
    x, y = _batch(fn, data, B, T, seed, case)
    where = {int(v): i for i, v in enumerate(data.tolist())}       # id -> its position
    for row in range(B):
        s = where.get(int(x[row, 0]))
        if s is None or s + T + 1 > len(data) or not (
                torch.equal(x[row], data[s:s + T].long())
                and torch.equal(y[row], data[s + 1:s + T + 1].long())):
            raise Wrong(f"on {case}, row {row} is not a window of data and its shifted "
                        f"copy: x = {x[row].tolist()[:6]}..., y = {y[row].tolist()[:6]}... "
                        "(each row of x must be data[s : s + T] and of y data[s + 1 : s + T "
                        "+ 1])")


def _batch_battery(rng):
    fixed = [(torch.arange(50), 4, 8, 0), (torch.arange(12), 256, 8, 2),
             (torch.arange(9), 16, 8, 1), (torch.arange(1000), 16, 8, 3)]
    fixed += [_random_batch_case(rng)[1:] for _ in range(2)]
    return [((data, B, T, torch.Generator().manual_seed(seed)), {})
            for data, B, T, seed in fixed]


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


def _strided(data, B, T, generator):
    starts = torch.randint(len(data) - T, (B,), generator=generator)
    rows = starts[:, None] + 2 * torch.arange(T)[None, :]   # every other token
    rows = rows.clamp(max=len(data) - 2)
    return data[rows], data[rows + 1]


register(Exercise(
    id="9.2",
    title="Random windows and their shifted targets",
    kind="implement",
    reference=get_batch,
    diagnose=_diagnose_batch,
    battery=_batch_battery,
    success="contiguous windows, targets shifted by one, every start reachable and none past "
            "the end, reproducible from the generator, on fresh random data",
    wrong_answers=(
        (_unshifted, "shifted one token to the right"),
        (_past_the_end, "runs past the end"),
        (_never_last, "are never drawn"),
        (_strided, "consecutive"),
    ),
))

# ---- 9.3 AdamW, decay on matrices only --------------------------------------------------

_BETAS = (0.9, 0.99)          # the book's default, nanoGPT's for the baby GPT


def _optimizer_models(rng) -> list[tuple[str, GPT]]:
    L, h = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    d = h * int(rng.integers(2, 6))
    tied = bool(rng.integers(0, 2))
    with torch.random.fork_rng(devices=[]):          # leave the reader's random state alone
        torch.manual_seed(0)
        fixed = GPT(GPTConfig(V=11, ctx=8, d=16, L=2, h=2))
        fresh = GPT(GPTConfig(V=int(rng.integers(2, 30)), ctx=8, d=d, L=L, h=h, tied=tied))
    return [("a two-block GPT", fixed),
            (f"a fresh random GPT (L={L}, h={h}, d={d}, {'tied' if tied else 'untied'} head)",
             fresh)]


def _optimizer_calls(rng):
    """(case, model, args, kwargs, want lr, want weight_decay, want betas)."""
    calls = []
    models = _optimizer_models(rng)
    for name, model in models:
        calls.append((f"{name} with lr=1e-3, weight_decay=0.1 (betas left at the default)",
                      model, (1e-3, 0.1), {}, 1e-3, 0.1, _BETAS))
        lr, wd = float(10 ** rng.uniform(-4, -2)), float(rng.uniform(0.01, 0.5))
        betas = (float(rng.uniform(0.5, 0.95)), float(rng.uniform(0.95, 0.999)))
        calls.append((f"{name} with lr={lr:.3g}, weight_decay={wd:.3g}, betas=({betas[0]:.3g}, "
                      f"{betas[1]:.3g})", model, (lr, wd), {"betas": betas}, lr, wd, betas))
    name, model = models[0]
    calls.append((f"{name} with lr=3e-3 only (weight_decay and betas left at the defaults)",
                  model, (3e-3,), {}, 3e-3, 0.1, _BETAS))
    return calls


def _diagnose_optimizer(fn, rng) -> None:
    for case, model, args, kwargs, lr, wd, betas in _optimizer_calls(rng):
        opt = run(fn, model, *args, case=case, copy_inputs=False, **kwargs)
        _check_groups(opt, model, case, lr, wd, betas)


def _check_groups(opt, model, case, lr, wd, betas) -> None:
    if not isinstance(opt, torch.optim.Optimizer):
        raise Wrong(f"on {case}, expected a torch optimizer, got a {type(opt).__name__}: "
                    "return torch.optim.AdamW(groups, lr=lr, betas=betas)")
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
                    f"need weight_decay={wd:.3g}")
    if vectors:
        raise Wrong(f"on {case}, {len(vectors)} vectors are decayed, e.g. {vectors[0]}: "
                    "LayerNorm gains and shifts and the biases set a scale or an offset; "
                    "pulling them toward 0 only hurts. Decay the 2-D parameters alone "
                    "(p.ndim >= 2) and give the rest weight_decay=0")
    for n in matrices:
        if not math.isclose(where[n].get("weight_decay", 0), wd, rel_tol=1e-9):
            raise Wrong(f"on {case}, {n} (a matrix) has weight_decay="
                        f"{where[n].get('weight_decay')}; expected {wd:.3g}")
    for group in opt.param_groups:
        if not math.isclose(group.get("lr", 0), lr, rel_tol=1e-9):
            raise Wrong(f"on {case}, a group has lr={group.get('lr')}; expected {lr:.3g}")
        got = tuple(group.get("betas", ()))
        if len(got) != 2 or not all(math.isclose(a, b, rel_tol=1e-9)
                                    for a, b in zip(got, betas, strict=True)):
            raise Wrong(f"on {case}, a group has betas={got}; expected ({betas[0]:.3g}, "
                        f"{betas[1]:.3g}): pass betas on to AdamW (its own default is "
                        "(0.9, 0.999); this book's is (0.9, 0.99))")
        if group["weight_decay"] and not (isinstance(opt, torch.optim.AdamW)
                                          or group.get("decoupled_weight_decay")):
            raise Wrong(f"on {case}, the optimizer is {type(opt).__name__}: its weight_decay "
                        "is added to the gradient (L2), which Adam's per-weight scaling then "
                        "distorts. AdamW decays the weights themselves: use torch.optim.AdamW")


def _optimizer_battery(rng):
    return [((model, *args), kwargs) for _, model, args, kwargs, *_ in _optimizer_calls(rng)]


def _decay_everything(model, lr, weight_decay=0.1, betas=_BETAS):
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=betas,
                             weight_decay=weight_decay)


def _plain_adam(model, lr, weight_decay=0.1, betas=_BETAS):
    params = list(model.parameters())
    return torch.optim.Adam([
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}], lr=lr,
        betas=betas)


def _no_decay(model, lr, weight_decay=0.1, betas=_BETAS):
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, weight_decay=0.0)


def _torch_betas(model, lr, weight_decay=0.1, betas=_BETAS):
    params = list(model.parameters())
    return torch.optim.AdamW([
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}], lr=lr)


register(Exercise(
    id="9.3",
    title="AdamW with weight decay on the matrices only",
    kind="implement",
    reference=configure_optimizer,
    diagnose=_diagnose_optimizer,
    battery=_optimizer_battery,
    success="every parameter once; matrices decayed, biases and LayerNorm parameters not; "
            "decoupled (AdamW) decay; lr, weight_decay and betas as asked or defaulted",
    wrong_answers=(
        (_decay_everything, "vectors are decayed"),
        (_plain_adam, "use torch.optim.AdamW"),
        (_no_decay, "no parameter is decayed"),
        (_torch_betas, "pass betas on to AdamW"),
    ),
))

# ---- 9.4 AdamW's update, written out (implement) ----------------------------------------

_HYPER = ("lr", "betas", "eps", "weight_decay")


def _torch_adamw(p, m, v, t0: int, grads, hyper: dict) -> list[tuple[np.ndarray, ...]]:
    """(p, m, v) after each update of ``torch.optim.AdamW`` (float64), from state (m, v)
    after ``t0`` earlier updates."""
    param = torch.nn.Parameter(torch.tensor(p, dtype=torch.float64))
    opt = torch.optim.AdamW([param], foreach=False, **hyper)
    if t0:
        opt.state[param] = {"step": torch.tensor(float(t0)),
                            "exp_avg": torch.tensor(m, dtype=torch.float64),
                            "exp_avg_sq": torch.tensor(v, dtype=torch.float64)}
    out = []
    for g in grads:
        param.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
        state = opt.state[param]
        out.append((param.detach().numpy().copy(), state["exp_avg"].numpy().copy(),
                    state["exp_avg_sq"].numpy().copy()))
    return out


def _hyper(lr, betas, eps, weight_decay) -> dict:
    return {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}


def _adamw_cases(rng):
    """(case, p, m, v, t0, grads, hyper): fixed cases, then fresh random ones. Every array
    is its own (an answer that updates m in place must not change v)."""
    cases = [
        ("one update of p = [0.5, -1, 2] with g = [0.1, -3, 0] from m = v = 0, lr=0.1, "
         "betas=(0.9, 0.999), eps=1e-8, weight_decay=0", np.array([0.5, -1.0, 2.0]),
         np.zeros(3), np.zeros(3), 0, [np.array([0.1, -3.0, 0.0])],
         _hyper(0.1, (0.9, 0.999), 1e-8, 0.0)),
        ("five updates of a [4, 5] matrix, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, "
         "weight_decay=0.1", rng.standard_normal((4, 5)), np.zeros((4, 5)), np.zeros((4, 5)),
         0,
         list(rng.standard_normal((5, 4, 5))), _hyper(1e-2, (0.9, 0.999), 1e-8, 0.1)),
        ("three updates with strong decay, lr=0.1, weight_decay=0.5, betas=(0.9, 0.99)",
         rng.standard_normal(6), np.zeros(6), np.zeros(6), 0,
         list(rng.standard_normal((3, 6))), _hyper(0.1, (0.9, 0.99), 1e-8, 0.5)),
        ("three updates of gradients of about 1e-3 with a large eps=1e-3",
         rng.standard_normal(5), np.zeros(5), np.zeros(5), 0,
         list(1e-3 * rng.standard_normal((3, 5))), _hyper(1e-2, (0.9, 0.999), 1e-3, 0.1)),
        ("two updates resumed at t=51 from m, v of earlier updates, betas=(0.8, 0.95)",
         rng.standard_normal(6), 0.1 * rng.standard_normal(6), 0.01 * rng.random(6) + 1e-4,
         50, list(rng.standard_normal((2, 6))), _hyper(3e-3, (0.8, 0.95), 1e-8, 0.05)),
    ]
    for dtype in (np.float32, np.float64):
        shape = (*random_leading(rng, 2, 3), int(rng.integers(1, 7)))
        n = int(rng.integers(2, 7))
        hyper = _hyper(float(10 ** rng.uniform(-4, -1)),
                       (float(rng.uniform(0.5, 0.95)), float(rng.uniform(0.9, 0.9999))),
                       float(10 ** rng.uniform(-10, -6)), float(rng.uniform(0, 0.5)))
        scale = float(10 ** rng.uniform(-3, 1))
        cases.append((f"{n} fresh random updates of shape {shape} ({np.dtype(dtype).name}), "
                      f"lr={hyper['lr']:.3g}, betas=({hyper['betas'][0]:.3g}, "
                      f"{hyper['betas'][1]:.4g}), weight_decay={hyper['weight_decay']:.3g}",
                      rng.standard_normal(shape).astype(dtype), np.zeros(shape, dtype),
                      np.zeros(shape, dtype), 0,
                      [(scale * rng.standard_normal(shape)).astype(dtype) for _ in range(n)],
                      hyper))
    return cases


def _triple(got, shape, case: str):
    if not (isinstance(got, (tuple, list)) and len(got) == 3):
        raise Wrong(f"on {case}, expected the triple (p, m, v), got a {type(got).__name__}: "
                    "return the new weights and both new running averages")
    out = []
    for name, value in zip("pmv", got, strict=True):
        arr = as_array(value, case=case, name=name)
        if arr.shape != shape:
            raise Wrong(f"on {case}, {name} has shape {arr.shape}; expected {shape}, the "
                        "shape of p: every weight has its own m and v")
        out.append(arr)
    return out


def _near(a, b) -> bool:
    return bool(np.allclose(a, b, rtol=1e-4, atol=1e-6 * float(np.max(np.abs(b), initial=0))
                            + 1e-300))


def _explain_moments(got_m, got_v, p, g, m, v, t, hyper, want_m, want_v, case) -> None:
    b1, b2 = hyper["betas"]
    wd = hyper["weight_decay"]
    l2 = g + wd * p
    if not _near(got_m, want_m) or not _near(got_v, want_v):
        if wd and _near(got_m, b1 * m + (1 - b1) * l2):
            raise Wrong(f"on {case}, m holds weight_decay * p as if it were part of the "
                        "gradient: that is Adam with L2 regularisation, whose decay Adam's "
                        "division by sqrt(v) then weakens. AdamW keeps the decay out of m "
                        "and v and shrinks p itself, p * (1 - lr * weight_decay)")
        if _near(got_m, want_m / (1 - b1**t)) or _near(got_v, want_v / (1 - b2**t)):
            raise Wrong(f"on {case}, m or v came back bias-corrected: return the raw running "
                        "averages and correct a copy, m / (1 - b1^t), on every update")
    if not _near(got_m, want_m):
        if _near(got_m, b1 * m + g):
            raise Wrong(f"on {case}, m = b1 m + g: the new gradient enters with weight "
                        "1 - b1, m = b1 m + (1 - b1) g")
        expect_close(got_m, want_m, case=case, name="m", rtol=1e-4,
                     atol=1e-6 * float(np.max(np.abs(want_m))),
                     hint="m = b1 * m + (1 - b1) * g, with b1 = betas[0]")
    if not _near(got_v, want_v):
        if _near(got_v, b2 * v + (1 - b2) * np.abs(g)):
            raise Wrong(f"on {case}, v averages |g|: it is the running mean of the *square* "
                        "of the gradient, v = b2 v + (1 - b2) g^2")
        expect_close(got_v, want_v, case=case, name="v", rtol=1e-4,
                     atol=1e-6 * float(np.max(np.abs(want_v))),
                     hint="v = b2 * v + (1 - b2) * g**2, with b2 = betas[1]")


def _step_variants(p, g, m, v, t, lr, betas, eps, weight_decay) -> dict:
    """What common slips would have given as the new p."""
    b1, b2 = betas
    m1, v1 = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m1 / (1 - b1**t), v1 / (1 - b2**t)
    step = m_hat / (np.sqrt(v_hat) + eps)
    shrunk = p * (1 - lr * weight_decay)
    return {
        "no correction": shrunk - lr * m1 / (np.sqrt(v1) + eps),
        "ascent": shrunk + lr * step,
        "no decay": p - lr * step,
        "decay after": (p - lr * step) * (1 - lr * weight_decay),
        "decay without lr": p * (1 - weight_decay) - lr * step,
        "eps hat": shrunk - lr * np.sqrt(1 - b2**t) / (1 - b1**t) * m1 / (np.sqrt(v1) + eps),
        "eps inside": shrunk - lr * m_hat / np.sqrt(v_hat + eps),
    }


_WEIGHT_SLIPS = {
    "no correction": "the step is not bias-corrected. m and v start at 0, so for the first "
                     "updates they are too small: divide them by 1 - b1^t and 1 - b2^t, "
                     "with t counted from 1",
    "ascent": "the weights moved *with* the gradient: subtract the step, p - lr * m_hat / "
              "(sqrt(v_hat) + eps)",
    "no decay": "the weights were not decayed: AdamW also shrinks them, p * (1 - lr * "
                "weight_decay)",
    "decay after": "the decay shrank the weights after the Adam step; AdamW decays the "
                   "weights the update started from: p * (1 - lr * weight_decay) - lr * "
                   "m_hat / (sqrt(v_hat) + eps)",
    "eps inside": "eps is inside the square root: add it outside, sqrt(v_hat) + eps",
}
_WEIGHT_CONVENTIONS = {
    "decay without lr": ("a decay of weight_decay * p per update, not scaled by lr (the "
                         "paper's form, where only the schedule multiplier scales it)",
                         "PyTorch's p * (1 - lr * weight_decay)"),
    "eps hat": ("eps added to sqrt(v) before the bias correction (the Adam paper's "
                "'epsilon hat' form)", "PyTorch's: eps added to sqrt(v_hat), after it"),
}


def _same_move(new_a, new_b, p) -> bool:
    """Whether two new weights moved p by the same amount: the moves are compared, not
    the weights, so a slip in a small update is not lost in the weights' size."""
    atol = 2e-6 * float(np.max(np.abs(p), initial=0)) + 1e-300
    return bool(np.allclose(new_a - p, new_b - p, rtol=1e-3, atol=atol))


def _explain_weights(got_p, p, g, m, v, t, hyper, want_p, case) -> None:
    if not np.all(np.isfinite(got_p)):
        raise Wrong(f"on {case}, p contains nan or inf. Two usual causes: a bias "
                    "correction that divides by 0 (1 - b1^t with t counted from 0; the "
                    "first update has t = 1), or eps left out of sqrt(v_hat) + eps, so that "
                    "a weight whose gradients have all been 0 (m = v = 0) gets 0 / 0")
    if _same_move(got_p, want_p, p):
        return
    for name, candidate in _step_variants(p, g, m, v, t, **hyper).items():
        if _same_move(got_p, candidate, p) and not _same_move(candidate, want_p, p):
            if name in _WEIGHT_CONVENTIONS:
                raise other_convention(*_WEIGHT_CONVENTIONS[name])
            raise Wrong(f"on {case}, {_WEIGHT_SLIPS[name]}")
    expect_close(got_p - p, want_p - p, case=case, name="the move p_new - p", rtol=1e-3,
                 atol=2e-6 * float(np.max(np.abs(p))),
                 hint="p * (1 - lr * weight_decay) - lr * m_hat / (sqrt(v_hat) + eps), "
                      "m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t)")


def _diagnose_adamw(fn, rng) -> None:
    for case, p, m, v, t0, grads, hyper in _adamw_cases(rng):
        wanted = _torch_adamw(p, m, v, t0, grads, hyper)
        for k, (g, (want_p, want_m, want_v)) in enumerate(zip(grads, wanted, strict=True)):
            t = t0 + k + 1
            where = f"{case}, update t={t}"
            got = run_unchanged(fn, p, g, m, v, t, case=where, names=("p", "g", "m", "v"),
                                **hyper)
            got_p, got_m, got_v = _triple(got, p.shape, where)
            _explain_moments(got_m, got_v, p, g, m, v, t, hyper, want_m, want_v, where)
            _explain_weights(got_p, p, g, m, v, t, hyper, want_p, where)
            p, m, v = (np.array(x, dtype=p.dtype) for x in (got_p, got_m, got_v))


def _adamw_battery(rng):
    calls = []
    for _, p, m, v, t0, grads, hyper in _adamw_cases(rng):
        for k, (g, state) in enumerate(zip(grads, _torch_adamw(p, m, v, t0, grads, hyper),
                                           strict=True)):
            calls.append(((p, g, m, v, t0 + k + 1), hyper))
            p, m, v = (x.astype(p.dtype) for x in state)
    return calls


def _adam_l2(p, g, m, v, t, lr, betas, eps, weight_decay):
    g = g + weight_decay * p
    return adamw_update(p, g, m, v, t, lr, betas, eps, 0.0)


def _uncorrected(p, g, m, v, t, lr, betas, eps, weight_decay):
    b1, b2 = betas
    m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    return p * (1 - lr * weight_decay) - lr * m / (np.sqrt(v) + eps), m, v


def _decay_without_lr(p, g, m, v, t, lr, betas, eps, weight_decay):
    new_p, m, v = adamw_update(p, g, m, v, t, lr, betas, eps, 0.0)
    return new_p - weight_decay * p, m, v


def _eps_inside(p, g, m, v, t, lr, betas, eps, weight_decay):
    b1, b2 = betas
    m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    step = (m / (1 - b1**t)) / np.sqrt(v / (1 - b2**t) + eps)
    return p * (1 - lr * weight_decay) - lr * step, m, v


def _corrected_state(p, g, m, v, t, lr, betas, eps, weight_decay):
    b1, b2 = betas
    m = (b1 * m + (1 - b1) * g) / (1 - b1**t)
    v = (b2 * v + (1 - b2) * g * g) / (1 - b2**t)
    return p * (1 - lr * weight_decay) - lr * m / (np.sqrt(v) + eps), m, v


register(Exercise(
    id="9.4",
    title="AdamW's update, written out",
    kind="implement",
    reference=adamw_update,
    diagnose=_diagnose_adamw,
    battery=_adamw_battery,
    unchanged=("p", "g", "m", "v"),
    rtol=1e-4,
    atol=1e-12,
    success="the weights, m and v of torch.optim.AdamW after every update: from zero state, "
            "with strong decay, a large eps, a resumed run, float32 and fresh random shapes",
    wrong_answers=(
        (_adam_l2, "Adam with L2 regularisation"),
        (_uncorrected, "not bias-corrected"),
        (_decay_without_lr, "not scaled by lr"),
        (_eps_inside, "inside the square root"),
        (_corrected_state, "came back bias-corrected"),
    ),
))

# ---- 9.5 the order of a mixed-precision step (predict) ----------------------------------

STEP_ORDER = ("autocast-forward", "scale", "backward", "unscale_", "clip", "step", "update",
              "zero_grad")
_ALIASES = {"forward": "autocast-forward", "autocast": "autocast-forward",
            "autocast_forward": "autocast-forward", "unscale": "unscale_",
            "clip_grad_norm_": "clip", "clip_grad_norm": "clip", "zero": "zero_grad",
            "zero_grad_": "zero_grad"}
# Each link of the chain: why the first must come before the second.
_BEFORE = {
    ("autocast-forward", "scale"): "the scaler multiplies the loss, and the loss is what "
        "the forward pass computes: run the model under autocast first",
    ("scale", "backward"): "backward must run on the scaled loss, scaler.scale(loss)"
        ".backward(): scaling afterwards leaves the float16 gradients unscaled, and the "
        "small ones have already rounded to 0",
    ("backward", "unscale_"): "unscale_ divides the gradients by S, and before backward "
        "there are none to divide",
    ("unscale_", "clip"): "clipping before unscale_ clips the scaled gradients: their norm "
        "is S (65,536 at the start) times the true one, so clip_grad_norm_ reports a norm S "
        "times too large and scales the gradients down to a norm of grad_clip; unscale_ then "
        "divides by S, so every step is clipped to a norm of grad_clip / S. With SGD the "
        "step then barely moves the weights. AdamW rescales each gradient by its own running "
        "size, which hides much of the shrinking in a small model, but its steps still come "
        "out shorter, and far shorter in a larger one, whose gradients fall near or below "
        "AdamW's eps (the chapter measures both after exercise 9.6)",
    ("clip", "step"): "clipping after the step is too late: the update has already used "
        "the unclipped gradients",
    ("step", "update"): "update sets the next S from what step found (an inf or nan "
        "gradient halves S and skips the step); before step there is nothing to go on, and "
        "PyTorch raises an error",
}
_CHAIN = STEP_ORDER[:-1]
# The names as the exercise lists them, in no particular order (a message must not give
# the answer away).
_SHUFFLED = ("step", "zero_grad", "clip", "backward", "update", "autocast-forward",
             "unscale_", "scale")


def _operation(item) -> str:
    name = str(item).strip().lower().replace(" ", "")
    for prefix in ("scaler.", "optimizer.", "torch.nn.utils.", "loss."):
        name = name.removeprefix(prefix)
    name = name.removesuffix("()")
    return _ALIASES.get(name, name)


def _diagnose_order(answer, rng) -> None:
    if isinstance(answer, (set, frozenset, dict)) or isinstance(answer, str) or not hasattr(
            answer, "__iter__"):
        raise Wrong(f"answer with a list of the eight operations in order, e.g. "
                    f"[\"{STEP_ORDER[0]}\", ...]; got a {type(answer).__name__}, which has "
                    "no order" if isinstance(answer, (set, frozenset)) else
                    f"answer with a list of the eight operations in order, e.g. "
                    f"[\"{STEP_ORDER[0]}\", ...], not a {type(answer).__name__}")
    items = list(answer)
    order = [_operation(item) for item in items]
    unknown = [item for item, name in zip(items, order, strict=True) if name not in STEP_ORDER]
    if unknown:
        raise Wrong(f"{unknown[0]!r} is not one of the eight operations: use the names "
                    f"{', '.join(_SHUFFLED)}")
    twice = sorted({name for name in order if order.count(name) > 1})
    missing = [name for name in STEP_ORDER if name not in order]
    if twice or missing:
        raise Wrong("each of the eight operations appears once; "
                    + (f"{', '.join(twice)} appear(s) more than once" if twice else
                       f"{', '.join(missing)} is missing"))
    at = {name: i for i, name in enumerate(order)}
    for first, second in zip(_CHAIN, _CHAIN[1:], strict=False):
        if at[first] > at[second]:
            raise Wrong(f"{second} comes before {first}: {_BEFORE[first, second]}")
    if at["backward"] < at["zero_grad"] < at["step"]:
        raise Wrong("zero_grad between backward and step erases the gradients before the "
                    "step can use them: reset them after the step (or before the next "
                    "backward)")


register(Exercise(
    id="9.5",
    title="Order the mixed-precision step",
    kind="predict",
    reference=list(STEP_ORDER),
    diagnose=_diagnose_order,
    success="each operation runs after everything it needs (the order is in the "
            "solution)",
    explain="Forward under autocast to get the loss; scale it by S and backward, so small "
            "float16 gradients do not round to 0; unscale_ divides the gradients by S, in "
            "float32, before anything reads them; clip reads them, so it comes next, on the "
            "true norm; scaler.step updates the weights unless a gradient is inf or nan; "
            "scaler.update then sets S for the next step (halved after a skip, doubled after "
            "a long calm); zero_grad clears .grad, which backward adds to. zero_grad may "
            "equally come first, before the forward: anywhere but between backward and "
            "step. anatomy.train.step.train_step is this order.",
    wrong_answers=(
        (["autocast-forward", "scale", "backward", "clip", "unscale_", "step", "update",
          "zero_grad"], "clips the scaled gradients"),
        (["autocast-forward", "backward", "scale", "unscale_", "clip", "step", "update",
          "zero_grad"], "backward must run on the scaled loss"),
        (["autocast-forward", "scale", "backward", "unscale_", "clip", "update", "step",
          "zero_grad"], "nothing to go on"),
        (["autocast-forward", "scale", "backward", "zero_grad", "unscale_", "clip", "step",
          "update"], "erases the gradients"),
        (["autocast-forward", "scale", "backward", "unscale_", "step", "clip", "update",
          "zero_grad"], "too late"),
        (set(STEP_ORDER), "no order"),
        (list(STEP_ORDER[:-1]), "zero_grad is missing"),
    ),
))

# ---- 9.6 a training step that clips the scaled gradients (debug) ------------------------


def _given_step(model, x, y, optimizer, precision, grad_clip):
    """One optimizer step on the batch (x, y); returns the loss and the norm."""
    scaler = precision.scaler
    with precision.autocast():              # 16-bit matmuls on a GPU
        _, loss = model(x, y)               # x, y [B, T] -> loss []
    scaler.scale(loss).backward()           # the gradients of S * loss
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.unscale_(optimizer)              # divided by S, in float32
    scaler.step(optimizer)                  # skipped if a grad is inf or nan
    scaler.update()                         # S halves after a skip
    optimizer.zero_grad(set_to_none=True)   # backward adds to .grad
    return loss.detach(), grad_norm


@dataclasses.dataclass
class _StepCase:
    """One run of a few training steps: the model, its batches and how they are stepped."""

    name: str
    seed: int
    size: tuple[int, int, int, int]           # V, d, L, h
    batches: list[tuple[torch.Tensor, torch.Tensor]]
    dtype: torch.dtype | None                 # autocast dtype; None = float32
    scale: float                              # the scaler's initial S
    sgd: bool                                 # SGD (update = lr * grad) or AdamW
    lr: float
    grad_clip: float

    def build(self):
        """A fresh (model, optimizer, precision) for this case, the same on every call."""
        V, d, L, h = self.size
        with torch.random.fork_rng(devices=[]):      # leave the reader's random state alone
            torch.manual_seed(self.seed)
            model = GPT(GPTConfig(V=V, ctx=self.batches[0][0].shape[1], d=d, L=L, h=h))
        opt = (torch.optim.SGD(model.parameters(), lr=self.lr) if self.sgd else
               torch.optim.AdamW(model.parameters(), lr=self.lr))
        scaler = torch.amp.GradScaler("cpu", init_scale=self.scale)
        return model, opt, Precision("cpu", self.dtype, scaler)


def _step_cases(rng) -> list[_StepCase]:
    def batches(V, n, B=4, T=8, seed=0):
        gen = torch.Generator().manual_seed(seed)
        return [(torch.randint(V, (B, T), generator=gen), torch.randint(V, (B, T),
                                                                        generator=gen))
                for _ in range(n)]

    fixed = [
        _StepCase("float32 with a scaler at S = 2^16, SGD (lr=0.1), grad_clip=0.25", 0,
                  (11, 16, 1, 2), batches(11, 3), None, 2.0**16, True, 0.1, 0.25),
        _StepCase("float16 autocast (on the CPU), S = 2^16, AdamW, grad_clip=1.0", 1,
                  (11, 16, 2, 2), batches(11, 3, seed=1), torch.float16, 2.0**16, False,
                  1e-2, 1.0),
        # S = 1 keeps a gradient left in .grad at full size (a large S divides it away).
        _StepCase("float32 with a scaler at S = 1, SGD (lr=0.1), grad_clip=1.0", 3,
                  (11, 16, 1, 2), batches(11, 3, seed=3), None, 1.0, True, 0.1, 1.0),
        _StepCase("float16 autocast with S = 2^40, so the scaled gradients overflow: the "
                  "step must be skipped and S halved", 2, (11, 16, 1, 2),
                  batches(11, 2, seed=2), torch.float16, 2.0**40, True, 0.1, 1.0),
    ]
    V, h = int(rng.integers(3, 20)), int(rng.integers(1, 4))
    d, L = h * int(rng.integers(2, 6)), int(rng.integers(1, 3))
    dtype = (None, torch.float16)[int(rng.integers(0, 2))]
    k, sgd = int(rng.integers(6, 20)), bool(rng.integers(0, 2))
    clip = float(rng.uniform(0.05, 0.5))
    fixed.append(_StepCase(
        f"fresh random GPT (V={V}, d={d}, L={L}, h={h}), "
        f"{'float16 autocast' if dtype else 'float32'}, S = 2^{k}, "
        f"{'SGD' if sgd else 'AdamW'}, grad_clip={clip:.2f}", int(rng.integers(0, 2**31)),
        (V, d, L, h), batches(V, int(rng.integers(2, 4)), int(rng.integers(1, 5)),
                              int(rng.integers(2, 9)), int(rng.integers(0, 2**31))),
        dtype, 2.0**k, sgd, float(10 ** rng.uniform(-3, -1)), clip))
    return fixed


_SCALER_ORDER = ("the scaler's calls have an order: scale(loss) before backward, "
                 "unscale_ at most once per step and before step, update after step")


def _weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _diagnose_step(fn, rng) -> None:
    for case in _step_cases(rng):
        mine, mine_opt, mine_prec = case.build()
        ref, ref_opt, ref_prec = case.build()
        for k, (x, y) in enumerate(case.batches, start=1):
            where = f"{case.name}, step {k}"
            before = _weights(ref)
            scale = ref_prec.scaler.get_scale()
            want_loss, want_norm = train_step(ref, x, y, ref_opt, ref_prec, case.grad_clip)
            # Gradients left in .grad by the step before (a fix may equally zero them first).
            stale = k > 1 and any(p.grad is not None and bool(p.grad.any())
                                  for p in mine.parameters())
            got = run(fn, mine, x, y, mine_opt, mine_prec, case.grad_clip, case=where,
                      copy_inputs=False, hint=_SCALER_ORDER)
            _check_step(got, mine, mine_prec, ref, ref_prec, before, scale, want_loss,
                        want_norm, stale, where)
            # The next step starts from the reader's weights and AdamW state, which agree
            # with the reference's within rounding: AdamW divides by the gradients' own size,
            # so rounding carried over several steps would grow past any fair tolerance.
            ref.load_state_dict(mine.state_dict())
            ref_opt.load_state_dict(copy.deepcopy(mine_opt.state_dict()))


def _check_step(got, mine, mine_prec, ref, ref_prec, before, scale, want_loss, want_norm,
                stale, where) -> None:
    loss, norm = _pair(got, where, names=("loss", "grad_norm"))
    tol = {"rtol": 1e-4, "atol": 1e-6}
    expect_close(loss.detach().float().numpy(), want_loss.float().numpy(), case=where,
                 name="the loss", hint="the loss of model(x, y), under precision.autocast()",
                 **tol)
    got_norm = float(norm.detach().float().reshape(-1)[0]) if norm.numel() == 1 else None
    true_norm = float(want_norm)
    if got_norm is None:
        raise Wrong(f"on {where}, grad_norm has shape {tuple(norm.shape)}; expected one "
                    "number, the norm clip_grad_norm_ returns")
    if scale != 1 and math.isfinite(true_norm) and math.isclose(got_norm, true_norm * scale,
                                                                rel_tol=1e-3):
        raise Wrong(f"on {where}, the gradient norm is {got_norm:.4g}, S = {scale:,.0f} "
                    f"times the true {true_norm:.4g}: clip_grad_norm_ measured and clipped "
                    "the scaled gradients, so every gradient shrank by about S. Call "
                    "scaler.unscale_(optimizer) before clipping")
    if not (math.isclose(got_norm, true_norm, rel_tol=1e-3, abs_tol=1e-6)
            or (math.isnan(got_norm) and math.isnan(true_norm))):
        why = (" The step before left its gradients in .grad, and backward adds to them: "
               "call optimizer.zero_grad() once per step" if stale else "")
        raise Wrong(f"on {where}, grad_norm is {got_norm:.4g}; expected {true_norm:.4g}, "
                    "the norm of the true (unscaled) gradients before clipping, as "
                    "clip_grad_norm_ returns it." + why)
    got_w, want_w = _weights(mine), _weights(ref)
    if any(not torch.isfinite(w).all() for w in got_w):
        raise Wrong(f"on {where}, the weights became inf or nan: a step with an inf or nan "
                    "gradient must be skipped. Step through the scaler, "
                    "scaler.step(optimizer), which checks the gradients first")
    moved = sum(float((g - b).norm()) for g, b in zip(got_w, before, strict=True))
    should = sum(float((w - b).norm()) for w, b in zip(want_w, before, strict=True))
    if not all(torch.allclose(g, w, rtol=1e-4, atol=1e-6)
               for g, w in zip(got_w, want_w, strict=True)):
        if should == 0:
            raise Wrong(f"on {where}, the weights moved although the step should have been "
                        "skipped (a gradient was inf or nan): step through the scaler, "
                        "scaler.step(optimizer)")
        if moved == 0:
            raise Wrong(f"on {where}, the weights did not move at all: the update never "
                        "ran. Step through the scaler, scaler.step(optimizer)")
        if moved < 1e-2 * should:
            raise Wrong(f"on {where}, the weights moved {moved / should:.2g} of what they "
                        "should: the gradients were shrunk before the step. Clipping before "
                        "scaler.unscale_ clips the scaled gradients")
        raise Wrong(f"on {where}, the weights after the step are not the expected ones: "
                    "forward under autocast, scale, backward, unscale_, clip, step, update, "
                    "zero_grad")
    got_scale, want_scale = mine_prec.scaler.get_scale(), ref_prec.scaler.get_scale()
    if not math.isclose(got_scale, want_scale):
        raise Wrong(f"on {where}, the scaler's S is {got_scale:g} after the step; expected "
                    f"{want_scale:g}: call scaler.update() after scaler.step(optimizer), so "
                    "S is halved after a skipped step")


def _step_battery(rng):
    calls = []
    for case in _step_cases(rng):
        model, opt, precision = case.build()
        x, y = case.batches[0]
        calls.append(((model, x, y, opt, precision, case.grad_clip), {}))
    return calls


def _plain_step(model, x, y, optimizer, precision, grad_clip):
    scaler = precision.scaler
    with precision.autocast():
        _, loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()                            # not through the scaler: no inf check
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach(), grad_norm


def _no_zero_grad(model, x, y, optimizer, precision, grad_clip):
    scaler = precision.scaler
    with precision.autocast():
        _, loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach(), grad_norm


def _clips_scaled_reports_true_norm(model, x, y, optimizer, precision, grad_clip):
    scaler = precision.scaler
    with precision.autocast():
        _, loss = model(x, y)
    scaler.scale(loss).backward()
    scaled_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    grad_norm = scaled_norm / scaler.get_scale()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach(), grad_norm


register(Exercise(
    id="9.6",
    title="A mixed-precision step that reports the wrong norm",
    kind="debug",
    reference=train_step,
    given=_given_step,
    diagnose=_diagnose_step,
    battery=_step_battery,
    rtol=1e-4,
    atol=1e-6,
    success="the library's losses, norms, weights and S over several steps: float32 with "
            "a scaler at S = 2^16 and at S = 1, float16 autocast, an overflow that must be "
            "skipped, and a fresh random model",
    explain="The bug is the order: clip_grad_norm_ ran before scaler.unscale_, so it "
            "measured the scaled gradients, S = 65,536 times too large, and shrank them to "
            "the clip threshold; unscale_ then divided by S once more. Unscale first, then "
            "clip.",
    wrong_answers=(
        (_plain_step, "must be skipped"),
        (_no_zero_grad, "zero_grad"),
        (_clips_scaled_reports_true_norm, "of what they should"),
    ),
))

# ---- 9.C challenge: a four-block character model ----------------------------------------

RHYME = ("nasi lemak for breakfast, nasi lemak for lunch,\n"
         "sambal on the side and peanuts for the crunch.\n")
_SIZES = {"steps": 150, "T": 16, "d": 32, "h": 4}
_LINEAR_BIASES = ("b_qkv", "b_o", "b_1", "b_2")
_NORM_SHIFTS = ("ln1_b", "ln2_b", "lnf_b")


def _logits(model, ids: torch.Tensor, case: str) -> torch.Tensor:
    with torch.no_grad():
        out = run(model, ids, case=case)
    if isinstance(out, tuple):
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise Wrong(f"on {case}, model(ids) gave a {type(out).__name__}; expected logits "
                    "[B, T, V]")
    return out.float()


def _expected_counts(V: int, T: int, d: int, h: int, L: int = 4) -> tuple[int, dict[str, int]]:
    """Parameters in matrices, and in vectors for each bias variant the challenge accepts."""
    cfg = GPTConfig(V=V, ctx=T, d=d, L=L, h=h, tied=True)
    matrices = count_params(cfg, without=(*_LINEAR_BIASES, *_NORM_SHIFTS, "ln1_g", "ln2_g",
                                          "lnf_g"))
    variants = {
        "every bias and LayerNorm shift": count_params(cfg) - matrices,
        "no biases in the linear maps": count_params(cfg, without=_LINEAR_BIASES) - matrices,
        "no LayerNorm shifts": count_params(cfg, without=_NORM_SHIFTS) - matrices,
        "no biases and no shifts (nanoGPT's bias=False)":
            count_params(cfg, without=(*_LINEAR_BIASES, *_NORM_SHIFTS)) - matrices,
    }
    return matrices, variants


def _check_count(model, V: int, T: int, d: int, h: int, case: str) -> None:
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    mat = sum(p.numel() for p in params if p.ndim >= 2)
    vec = n - mat
    want_mat, variants = _expected_counts(V, T, d, h)
    if mat == want_mat and vec in variants.values():
        return
    saw = (f"the model has {n:,} parameters, {mat:,} in matrices (2-D and up) and {vec:,} in "
           "vectors (biases, LayerNorm gains and shifts)")
    per_block = 12 * d * d                   # W_qkv 3d^2 + W_o d^2 + W_1, W_2 4d^2 each
    if mat - want_mat == V * d:
        raise Wrong(f"on {case}, {saw}: V * d = {V * d:,} more in matrices than a tied "
                    f"model ({want_mat:,}): the head has its own [V, d] table. Tie it: "
                    "logits = x @ tok_emb.T")
    if want_mat - mat == T * d:
        raise Wrong(f"on {case}, {saw}: T * d = {T * d:,} fewer in matrices than expected "
                    f"({want_mat:,}): the position table pos_emb [T, d] is missing")
    if mat != want_mat and (mat - want_mat) % per_block == 0:
        L = 4 + (mat - want_mat) // per_block
        raise Wrong(f"on {case}, {saw}: the matrices are those of {L} blocks (each "
                    f"12 d^2 = {per_block:,}); the challenge asks for 4")
    if mat != want_mat:
        raise Wrong(f"on {case}, {saw}. Four pre-norm blocks of width d = {d} with an MLP "
                    f"of 4d, the tables tok_emb [V, d] and pos_emb [T, d] and a tied head "
                    f"have {want_mat:,} in matrices (V d + T d + 4 x 12 d^2)")
    accepted = ", ".join(f"{count:,} ({name})" for name, count in variants.items())
    raise Wrong(f"on {case}, {saw}. The matrices are right; the vectors of four blocks and a "
                f"final LayerNorm come to one of {accepted}")


def _windows(ids: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    starts = torch.arange(len(ids) - T)
    rows = starts[:, None] + torch.arange(T)[None, :]       # [n - T, T]
    return ids[rows], ids[rows + 1]


def _diagnose_char_lm(fn, rng) -> None:
    steps, T, d, h = _SIZES["steps"], _SIZES["T"], _SIZES["d"], _SIZES["h"]
    case = f"a {len(RHYME)}-character rhyme, steps={steps}, T={T}, d={d}, h={h}"
    with torch.random.fork_rng(devices=[]):     # the reader's own random state is left alone
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
    return _train(text, steps, T, d, h, B, lr, seed, tied=False)


def _no_positions(text, steps=300, T=16, d=32, h=4, B=16, lr=3e-3, seed=0):
    return _train(text, steps, T, d, h, B, lr, seed, positions=False)


def _unshifted_targets(text, steps=300, T=16, d=32, h=4, B=16, lr=3e-3, seed=0):
    return _train(text, steps, T, d, h, B, lr, seed, shift=False)


def _no_zero_grad(text, steps=300, T=16, d=32, h=4, B=16, lr=3e-3, seed=0):
    return _train(text, steps, T, d, h, B, lr, seed, zero_grad=False)


def without_biases(model: GPT, names=(*_LINEAR_BIASES, *_NORM_SHIFTS)) -> GPT:
    """``model`` with the named biases turned into fixed zeros (buffers, not parameters):
    the bias-free variants the challenge accepts, built from the library's GPT."""
    owners = [model, *model.blocks]
    for owner in owners:
        for name in names:
            value = owner._parameters.pop(name, None)
            if value is not None:
                owner.register_buffer(name, torch.zeros_like(value.detach()))
    return model


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


def _train(text, steps, T, d, h, B, lr, seed, tied=True, positions=True, shift=True, L=4,
           zero_grad=True, biases=True):
    from ..data import CharTokenizer

    tokenizer = CharTokenizer(text)
    ids = torch.tensor(tokenizer.encode(text))
    torch.manual_seed(seed)
    cfg = GPTConfig(V=tokenizer.vocab_size, ctx=T, d=d, L=L, h=h, tied=tied)
    model = (GPT if positions else _NoPositionGPT)(cfg)
    if not biases:
        without_biases(model)
    optimizer = configure_optimizer(model, lr)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        x, y = get_batch(ids, B, T, gen)
        _, loss = model(x, y if shift else x)
        loss.backward()
        optimizer.step()
        if zero_grad:
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
    no_mutants="its check trains a model for 150 steps (seconds), so checking each of the "
               "reference's hundred-odd mutants would take many minutes; known-wrong answers "
               "(untied, no positions, unshifted targets, no zero_grad) hold the check "
               "instead",
    wrong_answers=(
        (_untied, "the head has its own"),
        (_no_positions, "cannot tell positions apart"),
        (_unshifted_targets, "predicts the character it has just read"),
        (_no_zero_grad, "zero_grad"),
    ),
))
