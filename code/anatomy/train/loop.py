"""The training loop: batches in, AdamW steps, evaluations, checkpoints, a History out.

One step: look up the learning rate for this step, draw a batch, and run ``train_step``
(``anatomy.train.step``): forward under autocast on a GPU, backward through the grad scaler
when fp16, unscale, clip the gradient norm, step, update the scaler, zero the gradients.
Everything random comes from seeded generators whose states go into each checkpoint, so on
the CPU a one-process run killed at step k and resumed ends with exactly the weights of an
uninterrupted run (under torchrun it does not: see ``anatomy.train.distributed``).

The token ids are checked once, when the text is encoded; the steps and evaluations then run
the model inside ``GPT.trusting_id_values``, so no forward pass waits on the GPU to read them.

Shapes: batches x, y [B, T] (this process's rows [B/N, T]) -> loss []
"""

from __future__ import annotations

import dataclasses
import random
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from anatomy.checkpoint import CKPT_NAME, capture_rng, load_checkpoint, restore_rng, save_checkpoint
from anatomy.data import CharTokenizer, DataError, get_batch, load_text, split
from anatomy.gpt_torch import GPT, check_token_ids, configure_optimizer
from anatomy.train import distributed
from anatomy.train.config import TrainConfig
from anatomy.train.hardware import (
    choose_precision,
    enable_tf32,
    mfu,
    pick_device,
    resolve_device,
)
from anatomy.train.history import History
from anatomy.train.schedule import ScheduleChangedWarning, lr_at, restretch_note
from anatomy.train.step import train_step

# Fields a config given on resume may differ in from the saved one without an error: they
# change neither the model nor the arithmetic of a step. The saved values are used, except
# for ``compile`` (a matter of the machine) and ``max_steps`` (the ``max_steps`` argument).
_NOT_CHECKED_ON_RESUME = {"name", "max_steps", "eval_every", "ckpt_every", "compile"}


class ResumeError(ValueError):
    """A resume that cannot continue the saved run: another config or another text."""


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (CPU and every GPU)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    # Pinned host memory lets the copy to the GPU overlap with work already queued there.
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


@torch.no_grad()
def estimate_loss(model: torch.nn.Module, splits: dict[str, torch.Tensor], cfg: TrainConfig,
                  device: torch.device, precision=None,
                  dist: distributed.Dist | None = None) -> dict[str, float]:
    """Mean loss over ``cfg.eval_iters`` batches of each split, in eval mode (no dropout).

    The batches come from a fresh generator seeded from ``cfg.seed`` every time, so every
    evaluation scores the same windows (a smoother curve) and never disturbs the training
    batch stream.

    Shapes: each split [N] -> batches x, y [B, T] -> one float per split
    """
    dist = dist or distributed.Dist()
    was_training = model.training
    model.eval()
    out = {}
    for i, (name, data) in enumerate(splits.items()):
        gen = torch.Generator().manual_seed(cfg.seed + 1 + i)
        total = torch.zeros((), device=device)
        for _ in range(cfg.eval_iters):
            x, y = get_batch(data, cfg.B, cfg.T, gen)                   # [B, T] each
            x = _to_device(distributed.shard(x, dist), device)         # -> [B/N, T]
            y = _to_device(distributed.shard(y, dist), device)         # -> [B/N, T]
            with precision.autocast() if precision is not None else nullcontext():
                _, loss = model(x, y)
            total += loss.float()
        out[name] = float(distributed.mean_over_ranks(total / cfg.eval_iters, dist))
    model.train(was_training)
    return out


class _Throughput:
    """Wall time of the training steps alone: evaluations and checkpoints are paused out,
    and the first step (compilation, allocator warm-up) is not counted."""

    def __init__(self, device: torch.device):
        cuda = device.type == "cuda"
        self._sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
        self.start: float | None = None
        self.paused_s = 0.0
        self.steps = 0

    def step_done(self) -> None:
        if self.start is None:
            self._sync()
            self.start = time.perf_counter()
        else:
            self.steps += 1

    @contextmanager
    def paused(self):
        self._sync()
        t = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            if self.start is not None:
                self.paused_s += time.perf_counter() - t

    def seconds(self) -> float | None:
        if self.start is None or self.steps == 0:
            return None
        self._sync()
        return time.perf_counter() - self.start - self.paused_s


def _check_resume_config(cfg: TrainConfig, saved: TrainConfig, path: Path) -> None:
    changed = [f.name for f in dataclasses.fields(TrainConfig)
               if f.name not in _NOT_CHECKED_ON_RESUME
               and getattr(cfg, f.name) != getattr(saved, f.name)]
    if changed:
        diffs = ", ".join(f"{n}={getattr(saved, n)!r} saved vs {getattr(cfg, n)!r} given"
                          for n in changed)
        fixed = "; the precision cannot change on a resume" if "precision" in changed else ""
        raise ResumeError(f"resume: the config differs from the one saved in {path} ({diffs})"
                          f"{fixed}; resume with the same config, or pass cfg=None (on the "
                          f"command line: no --preset, --set or --precision) to use the saved "
                          f"one")


def _check_long_enough(n: int, T: int) -> None:
    """Both splits must hold one window of T tokens plus its shifted target."""
    def fits(size: int) -> bool:
        return all(len(part) > T for part in split(range(size)))

    if not fits(n):
        need = next(size for size in range(2 * (T + 1), 100 * (T + 1)) if fits(size))
        raise DataError(f"data: the text has {n:,} character(s), too few for T={T}: the "
                        f"training split (the first 90%) and the validation split (the rest) "
                        f"each need at least T + 1 = {T + 1}, so the text needs at least "
                        f"{need:,} characters; give a longer text or a smaller T")


def train(cfg: TrainConfig | None, out_dir: str | Path | None = None,
          max_steps: int | None = None, resume: bool = False, progress: bool = True,
          log: Callable[[dict], None] | None = None, *, data_path: str | Path | None = None,
          device: torch.device | str | None = None, overwrite: bool = False) -> History:
    """Train a GPT on Tiny Shakespeare as ``cfg`` says; return its ``History``.

    Args:
        cfg: the run (a preset or your own); may be None when resuming, to use the saved one.
        out_dir: folder for ``ckpt.pt`` (and ``ckpt.prev.pt``); None keeps nothing on disk.
        max_steps: overrides ``cfg.max_steps`` (the cosine then ends there). On a resume, a
            value other than the saved one re-stretches the cosine to the new end, so the
            learning rate jumps at the resume step; a ``ScheduleChangedWarning`` says from
            what to what.
        resume: continue from ``out_dir/ckpt.pt`` with its weights, optimizer, step, history,
            random states and saved config (a ``cfg`` given too must agree with it on the
            model and the optimisation; only ``max_steps`` and ``compile`` may change).
        progress: show a tqdm bar on stderr.
        log: called on every evaluation with {"step", "train_loss", "val_loss", "lr"}.
        data_path: the Tiny Shakespeare file (else ``ANATOMY_DATA``, the cache, a download),
            or a UTF-8 text of your own under another file name (see ``load_text``).
        device: "cuda", "cuda:1", "mps" or "cpu"; default ``pick_device()``.
        overwrite: allow a fresh run to replace a checkpoint already in ``out_dir``.

    Under ``torchrun`` every process calls this; each takes its rows of the global batch and
    only rank 0 writes checkpoints, logs and the progress bar.

    The returned History also carries ``.model`` (the trained GPT, unwrapped) and
    ``.tokenizer``, ready for ``anatomy.sampling.sample``.
    """
    wall_start = time.perf_counter()
    dist, device = distributed.setup(resolve_device(device) if device is not None else None)
    try:
        return _train(cfg, out_dir, max_steps, resume, progress, log, data_path,
                      device or pick_device(), overwrite, dist, wall_start)
    finally:
        distributed.teardown(dist)


def _train(cfg, out_dir, max_steps, resume, progress, log, data_path, device, overwrite,
           dist, wall_start) -> History:
    ckpt_path = Path(out_dir) / CKPT_NAME if out_dir is not None else None
    state = None
    if resume:
        if ckpt_path is None:
            raise ValueError("resume=True needs out_dir, the folder holding ckpt.pt")
        if not ckpt_path.is_file():
            raise FileNotFoundError(f"nothing to resume: {ckpt_path} does not exist")
        state = load_checkpoint(ckpt_path)
        saved = TrainConfig.from_dict(state["config"])
        if cfg is not None:
            _check_resume_config(cfg, saved, ckpt_path)
        cfg = saved if cfg is None else dataclasses.replace(saved, compile=cfg.compile)
    elif cfg is None:
        raise ValueError("cfg: a TrainConfig is needed unless resuming (try PRESETS['cpu'])")
    elif ckpt_path is not None and ckpt_path.exists() and not overwrite:
        raise FileExistsError(f"{ckpt_path} already exists; pass resume=True to continue that "
                              f"run or overwrite=True to start again over it")
    if max_steps is not None:
        cfg = dataclasses.replace(cfg, max_steps=max_steps)
    if state is not None:
        note = restretch_note(state["step"], saved, cfg)
        if note is not None and dist.is_main:
            warnings.warn(note, ScheduleChangedWarning, stacklevel=3)
    if cfg.B % dist.world:
        raise ValueError(f"B={cfg.B} rows do not split evenly over {dist.world} processes")

    text = load_text(data_path)
    _check_long_enough(len(text), cfg.T)
    tokenizer = CharTokenizer(text)
    if state is not None and state["vocab"] != tokenizer.vocab:
        raise ResumeError(f"resume: the checkpoint's vocabulary ({len(state['vocab'])} "
                          f"characters) differs from this text's ({tokenizer.vocab_size}); "
                          f"resume with the text the run started on")
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)          # [N]
    check_token_ids(ids, tokenizer.vocab_size, "data")    # once, so no step needs to
    train_ids, val_ids = split(ids)

    seed_everything(cfg.seed)
    model_cfg = cfg.model_config(tokenizer.vocab_size)
    raw = GPT(model_cfg, dropout=cfg.dropout, attn=cfg.attn, causal=cfg.causal).to(device)
    optimizer = configure_optimizer(raw, cfg.lr, cfg.weight_decay, cfg.betas, device.type)
    precision = choose_precision(device, cfg.precision)
    if device.type == "cuda":
        enable_tf32()
    batches = torch.Generator().manual_seed(cfg.seed)    # the training windows, and only them
    history, step = History(), 0
    if state is not None:
        raw.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if state["scaler"]:
            precision.scaler.load_state_dict(state["scaler"])
        history = History.from_dict(state["history"])
        step = state["step"]
        restore_rng(state["rng"], batches)
    if dist.active:
        # Same initial weights everywhere (DDP also broadcasts them), different dropout masks;
        # reseeded from the step on a resume, so a DDP resume is not bit-exact with dropout.
        torch.manual_seed(cfg.seed + 1000 * step + dist.rank)

    compiled = cfg.compile if cfg.compile is not None else device.type == "cuda"
    eval_model = torch.compile(raw) if compiled else raw
    model = eval_model
    if dist.active:
        model = DistributedDataParallel(
            eval_model, device_ids=[device.index] if device.type == "cuda" else None)

    # The step losses not yet in the history, kept on the device (reading each one would make
    # the host wait for it). One buffer, written in place: a list of one small tensor per step
    # fragments the host heap: at 4 layers, d = 128, B = 12 the peak grew by about 50 MiB in
    # the first 250 steps on one CPU thread.
    pending = torch.empty(cfg.eval_every, device=device)       # [eval_every]
    n_pending = 0
    throughput = _Throughput(device)
    bar = tqdm(total=cfg.max_steps, initial=step, disable=not (progress and dist.is_main),
               file=sys.stderr, unit="step", desc=cfg.name, dynamic_ncols=True)

    def flush() -> None:
        nonlocal n_pending
        if n_pending:
            losses = distributed.mean_over_ranks(pending[:n_pending], dist)
            history.step_loss.extend(losses.tolist())
            n_pending = 0

    def evaluate(at: int) -> None:
        with throughput.paused():
            flush()
            losses = estimate_loss(eval_model, {"train": train_ids, "val": val_ids}, cfg,
                                   device, precision, dist)
            row = history.record(at, losses["train"], losses["val"], lr_at(at, cfg),
                                 clock_offset + time.perf_counter() - wall_start)
        if dist.is_main:
            bar.set_postfix(train=f"{row['train_loss']:.3f}", val=f"{row['val_loss']:.3f}")
            if log is not None:
                log(row)

    def checkpoint(at: int) -> None:
        with throughput.paused():
            flush()
            if dist.is_main and ckpt_path is not None:
                save_checkpoint({
                    "step": at, "model": raw.state_dict(), "optimizer": optimizer.state_dict(),
                    "scaler": precision.scaler.state_dict(), "config": cfg.to_dict(),
                    "vocab": tokenizer.vocab, "history": history.to_dict(),
                    "rng": capture_rng(batches)}, ckpt_path)

    start_step = step
    clock_offset = history.time_s[-1] if history.time_s else 0.0   # the resumed run's clock
    # The ids were checked once above; no step or evaluation reads them back from the device.
    with raw.trusting_id_values(), bar:          # the bar closes on the way out, error or not
        while step < cfg.max_steps:
            if step % cfg.eval_every == 0 and (not history.step or history.step[-1] != step):
                evaluate(step)
            lr = lr_at(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            x, y = get_batch(train_ids, cfg.B, cfg.T, batches)           # global [B, T]
            x = _to_device(distributed.shard(x, dist), device)          # -> [B/N, T]
            y = _to_device(distributed.shard(y, dist), device)          # -> [B/N, T]
            loss, _ = train_step(model, x, y, optimizer, precision, cfg.grad_clip)
            pending[n_pending] = loss        # an evaluation every eval_every steps flushes it
            n_pending += 1
            step += 1
            throughput.step_done()
            bar.update(1)
            if step == cfg.max_steps:
                evaluate(step)
            if step % cfg.ckpt_every == 0 or step == cfg.max_steps:
                checkpoint(step)
        flush()

    seconds = throughput.seconds()
    tokens_per_s = throughput.steps * cfg.tokens_per_step / seconds if seconds else None
    history.stats = {
        "device": str(device),
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                        else device.type),
        "precision": precision.name, "compiled": compiled, "world_size": dist.world,
        "n_params": raw.num_params(), "steps_run": step - start_step,
        "tokens_per_s": tokens_per_s,
        "ms_per_step": 1e3 * seconds / throughput.steps if seconds else None,
        "mfu": mfu(tokens_per_s, model_cfg, device, dist.world) if tokens_per_s else None,
        "wall_s": time.perf_counter() - wall_start,
    }
    history.model, history.tokenizer = raw, tokenizer
    return history


def load_trained(path: str | Path, device: torch.device | str = "cpu",
                 ) -> tuple[GPT, CharTokenizer, History]:
    """The model, tokenizer and history saved in a checkpoint (a file or its run folder),
    in eval mode on ``device``, ready for sampling."""
    path = Path(path)
    state = load_checkpoint(path / CKPT_NAME if path.is_dir() else path)
    cfg = TrainConfig.from_dict(state["config"])
    tokenizer = CharTokenizer(state["vocab"])
    model = GPT(cfg.model_config(tokenizer.vocab_size), attn=cfg.attn, causal=cfg.causal)
    model.load_state_dict(state["model"])
    return model.to(device).eval(), tokenizer, History.from_dict(state["history"])
