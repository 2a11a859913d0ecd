"""Command line: ``python -m anatomy.train --preset cpu --out runs/cpu``.

The same command runs data-parallel under ``torchrun --nproc_per_node=N -m anatomy.train
...``. ``--set FIELD=VALUE`` changes any ``TrainConfig`` field (``--set L=4 --set
dropout=0.1``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from anatomy.checkpoint import CKPT_NAME, load_checkpoint
from anatomy.sampling import sample
from anatomy.train.config import PRESETS, TrainConfig, preset, preset_for
from anatomy.train.hardware import PRECISIONS, pick_device
from anatomy.train.loop import train


def parse_overrides(items: list[str]) -> dict:
    """``["L=4", "dropout=0.1"]`` -> {"L": 4, "dropout": 0.1}, typed by the field."""
    types = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in types:
            raise SystemExit(f"--set {item!r}: expected FIELD=VALUE with FIELD one of "
                             f"{', '.join(types)}")
        kind = types[key]
        if "tuple" in kind:
            out[key] = tuple(float(v) for v in raw.split(","))
        elif "bool" in kind:
            if raw.lower() not in ("true", "false", "none"):
                raise SystemExit(f"--set {item!r}: expected true or false")
            out[key] = None if raw.lower() == "none" else raw.lower() == "true"
        elif kind == "int":
            out[key] = int(raw)
        elif kind == "float":
            out[key] = float(raw)
        else:
            out[key] = raw
    return out


def log_row(row: dict) -> None:
    """Print one evaluation (a ``train`` log row) as a line, above any progress bar."""
    tqdm.write(f"step {row['step']:>5}: train {row['train_loss']:.4f}  "
               f"val {row['val_loss']:.4f}  lr {row['lr']:.2e}", file=sys.stdout)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m anatomy.train", description=(
        "Train the book's GPT on Tiny Shakespeare. Without --preset, the preset is chosen "
        "for the device (CUDA, MPS or CPU)."))
    p.add_argument("--preset", choices=list(PRESETS), help="named configuration")
    p.add_argument("--out", help="run folder for ckpt.pt and ckpt.prev.pt")
    p.add_argument("--max-steps", type=int, help="stop (and end the cosine) at this step")
    p.add_argument("--resume", action="store_true",
                   help="continue from OUT/ckpt.pt with its saved config (only --max-steps and "
                        "--compile may change; a --preset or --set must agree with it)")
    p.add_argument("--overwrite", action="store_true",
                   help="start afresh even if OUT already holds a checkpoint")
    p.add_argument("--data", help="path to tinyshakespeare.txt (else $ANATOMY_DATA, the "
                                  "cache, or a download)")
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    device = torch.device(args.device) if args.device else None
    changes = parse_overrides(args.set)
    for flag, field in (("eval_every", "eval_every"), ("ckpt_every", "ckpt_every"),
                        ("compile", "compile"), ("precision", "precision")):
        if getattr(args, flag) is not None:
            changes[field] = getattr(args, flag)
    saved = Path(args.out or ".") / CKPT_NAME
    if args.resume and args.preset is None and not args.set:
        cfg = None                       # take everything from the checkpoint...
        if changes and saved.is_file():  # ...but --compile or --precision as given
            cfg = dataclasses.replace(
                TrainConfig.from_dict(load_checkpoint(saved)["config"]), **changes)
    else:
        base = preset(args.preset) if args.preset else preset_for(device or pick_device())
        cfg = dataclasses.replace(base, **changes)
    is_main = int(os.environ.get("RANK", "0")) == 0

    history = train(cfg, out_dir=args.out, max_steps=args.max_steps, resume=args.resume,
                    progress=not args.no_progress, log=log_row, data_path=args.data,
                    device=device, overwrite=args.overwrite)
    if is_main:
        s = history.stats
        rate = f"{s['tokens_per_s']:,.0f} tokens/s" if s["tokens_per_s"] else "rate n/a"
        util = f", MFU {s['mfu']:.1%}" if s["mfu"] is not None else ""
        print(f"done: val loss {history.final_val_loss:.4f} after {history.step[-1]} steps; "
              f"{rate}{util}; {s['wall_s']:.1f} s on {s['device_name']} ({s['precision']}, "
              f"{s['n_params']:,} parameters, {s['world_size']} process(es))")
        if args.sample:
            gen = torch.Generator().manual_seed(0)
            print(sample(history.model, history.tokenizer, "\n", args.sample,
                         temperature=args.temperature, top_k=args.top_k, generator=gen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
