"""Command line: ``python -m anatomy.train --preset cpu --out runs/cpu``.

The same command runs data-parallel under ``torchrun --nproc_per_node=N -m anatomy.train
...``. ``--set FIELD=VALUE`` changes any ``TrainConfig`` field (``--set L=4 --set
dropout=0.1``).

A mistake on the command line ends the run with one line on stderr, ``python -m
anatomy.train: error: ...``, and exit status 2 (argparse's convention). The mistakes are the
ones checked here before training (a bad ``--set``, ``--device``, ``--data``, ``--out`` for a
fresh run or a resume) and the library's own input errors raised while starting it
(``USER_ERRORS``). Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import warnings
from pathlib import Path
from typing import NoReturn

import torch
from tqdm import tqdm

from anatomy.checkpoint import CKPT_NAME, CheckpointError, load_checkpoint
from anatomy.data import ENV_VAR, FILENAME, DataError, UncheckedTextWarning
from anatomy.sampling import sample
from anatomy.train.config import PRESETS, TrainConfig, preset, preset_for
from anatomy.train.hardware import PRECISIONS, pick_device, resolve_device
from anatomy.train.loop import ResumeError, train
from anatomy.train.schedule import ScheduleChangedWarning

PROG = "python -m anatomy.train"
# Raised by the library for input that cannot work (a corrupt or mismatched checkpoint, an
# unusable text), never by a bug: the command line reports them in one line.
USER_ERRORS = (CheckpointError, DataError, ResumeError)
# Warnings meant for the person at the terminal, printed as one line each.
_NOTICES = (ScheduleChangedWarning, UncheckedTextWarning)


def parse_overrides(items: list[str]) -> dict:
    """``["L=4", "dropout=0.1"]`` -> {"L": 4, "dropout": 0.1}, typed by the field.

    Raises ``ValueError`` naming the item for an unknown field or a value of the wrong kind.
    """
    types = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in types:
            raise ValueError(f"--set {item!r}: expected FIELD=VALUE with FIELD one of "
                             f"{', '.join(types)}")
        kind = types[key]
        if "bool" in kind:
            if raw.lower() not in ("true", "false", "none"):
                raise ValueError(f"--set {item!r}: expected true, false or none")
            out[key] = None if raw.lower() == "none" else raw.lower() == "true"
            continue
        convert, what = {"int": (int, "an integer"), "float": (float, "a number")}.get(
            kind, (str, "text"))
        try:
            if "tuple" in kind:
                out[key] = tuple(float(v) for v in raw.split(","))
            else:
                out[key] = convert(raw)
        except ValueError:
            what = "numbers separated by commas" if "tuple" in kind else what
            raise ValueError(f"--set {item!r}: {key} takes {what}, got {raw!r}") from None
    return out


def log_row(row: dict) -> None:
    """Print one evaluation (a ``train`` log row) as a line, above any progress bar."""
    tqdm.write(f"step {row['step']:>5}: train {row['train_loss']:.4f}  "
               f"val {row['val_loss']:.4f}  lr {row['lr']:.2e}", file=sys.stdout)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=(
        "Train the book's GPT on Tiny Shakespeare (or a text of your own, with --data). "
        "Without --preset, the preset is chosen for the device (CUDA, MPS or CPU)."))
    p.add_argument("--preset", choices=list(PRESETS), help="named configuration")
    p.add_argument("--out", help="run folder for ckpt.pt and ckpt.prev.pt")
    p.add_argument("--max-steps", type=int,
                   help="stop (and end the cosine) at this step; with --resume, a value "
                        "other than the saved one re-stretches the cosine to the new end, so "
                        "the learning rate jumps at the resume (a warning says by how much)")
    p.add_argument("--resume", action="store_true",
                   help="continue from OUT/ckpt.pt with its saved config and schedule (only "
                        "--max-steps and --compile may change; a new --max-steps "
                        "re-stretches the cosine; --eval-every and --ckpt-every are ignored, "
                        "the saved ones are kept; a --precision, --preset or --set must "
                        "agree with the saved config)")
    p.add_argument("--overwrite", action="store_true",
                   help="start afresh even if OUT already holds a checkpoint")
    p.add_argument("--data", help=f"the text to train on: {FILENAME} (checked against its "
                                  f"SHA-256) or a UTF-8 file of your own under another name "
                                  f"(its own vocabulary, not checked); default ${ENV_VAR}, "
                                  f"the cache, or a download")
    p.add_argument("--eval-every", type=int, help="steps between evaluations")
    p.add_argument("--ckpt-every", type=int, help="steps between checkpoints")
    p.add_argument("--device", help="cuda, cuda:1, mps or cpu (default: the best available)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the model (default: on for CUDA only)")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="auto (default: bf16 or fp16 autocast as the GPU allows, float32 on "
                        "CPU/MPS), or force one")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="change a TrainConfig field; repeatable")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--sample", type=int, default=0, metavar="N",
                   help="print N sampled characters at the end")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=None)
    return p


def _error(message: object) -> NoReturn:
    """End the run as argparse does for a bad flag: one line on stderr, exit status 2."""
    flat = " ".join(str(message).splitlines())
    sys.stderr.write(f"{PROG}: error: {flat}\n")
    raise SystemExit(2)


def _show_notice(message, category, filename, lineno, file=None, line=None, *, _default):
    if issubclass(category, _NOTICES):
        print(f"{PROG}: warning: {message}", file=sys.stderr)
    else:
        _default(message, category, filename, lineno, file, line)


def _check_paths(args) -> Path | None:
    """The run folder's checkpoint and the data file, checked before anything is loaded."""
    for flag, value in (("--data", args.data),
                        (f"${ENV_VAR}", os.environ.get(ENV_VAR) if args.data is None else None)):
        if value:
            where = Path(value).expanduser()
            if not (where / FILENAME if where.is_dir() else where).is_file():
                _error(f"{flag} {value}: no such file (nor a folder holding {FILENAME}); give "
                       f"the path of the text to train on")
    if args.out is None:
        if args.resume:
            _error("--resume needs --out, the run folder holding ckpt.pt")
        return None
    saved = Path(args.out) / CKPT_NAME
    if args.resume and not saved.is_file():
        _error(f"--resume: nothing to resume, {saved} does not exist; start the run without "
               f"--resume first, or give --out the folder of the run to continue")
    if not args.resume and saved.exists() and not args.overwrite:
        _error(f"{saved} already exists; add --resume to continue that run, or --overwrite "
               f"to start afresh over it")
    return saved


def _check_sampling(args) -> None:
    """Refuse bad sampling flags before training, not after it (top_k > V is caught by
    ``sample`` at the end, once the vocabulary is known)."""
    if args.sample < 0:
        _error(f"--sample: expected a number of characters >= 0, got {args.sample}")
    if args.temperature < 0:
        _error(f"--temperature: expected >= 0 (0 = greedy), got {args.temperature}")
    if args.top_k is not None and args.top_k < 1:
        _error(f"--top-k: expected a positive integer, got {args.top_k}")


def _config(args, device: torch.device | None, saved: Path | None) -> TrainConfig | None:
    try:
        changes = parse_overrides(args.set)
    except ValueError as err:
        _error(err)
    for field in ("eval_every", "ckpt_every", "compile", "precision"):
        if getattr(args, field) is not None:
            changes[field] = getattr(args, field)
    if args.max_steps is not None and args.max_steps < 1:
        _error(f"--max-steps: expected a positive number of steps, got {args.max_steps}")
    _check_sampling(args)
    if args.resume and args.preset is None and not args.set:
        if not changes:
            return None                  # take everything from the checkpoint...
        try:                             # ...but check the flags given against it
            base = TrainConfig.from_dict(load_checkpoint(saved)["config"])
        except (CheckpointError, ValueError) as err:   # ValueError: a config not of this version
            _error(f"{err} To start the run afresh instead, use --overwrite without --resume.")
    else:
        base = preset(args.preset) if args.preset else preset_for(device or pick_device())
    try:
        return dataclasses.replace(base, **changes)
    except ValueError as err:            # TrainConfig.__post_init__ refusing a value
        _error(f"impossible configuration: {err}; change that value (--set FIELD=VALUE or "
               f"its flag)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        device = resolve_device(args.device, "--device") if args.device else None
    except ValueError as err:
        _error(err)
    saved = _check_paths(args)
    cfg = _config(args, device, saved)
    is_main = int(os.environ.get("RANK", "0")) == 0

    with warnings.catch_warnings():
        for notice in _NOTICES:
            warnings.simplefilter("always", notice)
        default = warnings.showwarning
        warnings.showwarning = lambda *a, **k: _show_notice(*a, **k, _default=default)
        try:
            history = train(cfg, out_dir=args.out, max_steps=args.max_steps,
                            resume=args.resume, progress=not args.no_progress, log=log_row,
                            data_path=args.data, device=device, overwrite=args.overwrite)
        except CheckpointError as err:
            _error(f"{err} To start the run afresh instead, use --overwrite without --resume.")
        except USER_ERRORS as err:
            _error(err)
    if is_main:
        s = history.stats
        rate = f"{s['tokens_per_s']:,.0f} tokens/s" if s["tokens_per_s"] else "rate n/a"
        util = f", MFU {s['mfu']:.1%}" if s["mfu"] is not None else ""
        print(f"done: val loss {history.final_val_loss:.4f} after {history.step[-1]} steps; "
              f"{rate}{util}; {s['wall_s']:.1f} s on {s['device_name']} ({s['precision']}, "
              f"{s['n_params']:,} parameters, {s['world_size']} process(es))")
        if args.sample:
            gen = torch.Generator().manual_seed(0)
            vocab = history.tokenizer.vocab         # a text of your own may lack "\n"
            prompt = "\n" if "\n" in vocab else vocab[0]
            try:
                print(sample(history.model, history.tokenizer, prompt, args.sample,
                             temperature=args.temperature, top_k=args.top_k, generator=gen))
            except ValueError as err:       # --top-k above this text's vocabulary
                _error(f"--top-k: {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
