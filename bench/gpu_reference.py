"""The book's reference GPU run: train the ``gpu`` preset once and keep what it measured.

Not a test: run it by hand on a CUDA machine (a few minutes on a recent card)::

    PYTHONPATH=code python bench/gpu_reference.py --data path/to/tinyshakespeare.txt

It trains the preset with ``anatomy.train.train`` (bf16 or fp16 autocast as the card allows,
TF32, ``torch.compile``), with evaluations every ``eval_every`` steps and no checkpoints,
then writes the record that chapter 9 renders, ``code/anatomy/train/reference_run.json``:
the hardware, the loss curve with the wall-clock time of every evaluation, the time to a
validation loss of 1.47 (nanoGPT's figure for this model), tokens/s, MFU, final losses and a
sample. Afterwards run ``make record`` so the chapter shows it.

Targets from the brief: time to val 1.47 under 60 s on one H100/H200, MFU of 30% or more.

``bench/on_gpu.sh`` runs the CUDA tests and then this script, in one command. With this
workplace's ``device`` tool, which sends the repository but not ``../shared``: copy the data
into the git-ignored ``.device/`` first (``mkdir -p .device && cp
../shared/data/tinyshakespeare.txt .device/``), then run ``ANATOMY_DATA=.device/
tinyshakespeare.txt bash bench/on_gpu.sh $OUT`` carrying ``.device``, and copy the
``reference_run.json`` that comes back to ``code/anatomy/train/``.

The record only goes to the book's file from a CUDA run; a trial on a CPU (say, ``--preset
tiny --device cpu --json /tmp/trial.json --target 3``) must name another file.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
from pathlib import Path

import torch

from anatomy.train import PRESETS, pick_device, sample, train
from anatomy.train.__main__ import log_row
from anatomy.train.hardware import describe_device
from anatomy.train.reference import (
    REFERENCE_FILE,
    TARGET_VAL_LOSS,
    describe,
    record_run,
    save_record,
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="gpu", choices=list(PRESETS))
    p.add_argument("--target", type=float, default=TARGET_VAL_LOSS,
                   help="validation loss whose first crossing is timed (default 1.47)")
    p.add_argument("--data", help="tinyshakespeare.txt (else $ANATOMY_DATA or the cache)")
    p.add_argument("--device", help="default: the best available")
    p.add_argument("--max-steps", type=int, help="shorter run (a trial; ends the cosine there)")
    p.add_argument("--json", type=Path, help=f"where the record goes (default {REFERENCE_FILE}"
                                             f", CUDA runs only)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)

    device = torch.device(args.device) if args.device else pick_device()
    if args.json is None and device.type != "cuda":
        raise SystemExit(f"the book's reference run is a GPU run; on {device.type!r} pass "
                         f"--json with another file to try the script out")
    cfg = PRESETS[args.preset]
    if args.max_steps is not None:
        cfg = dataclasses.replace(cfg, max_steps=args.max_steps)

    history = train(cfg, progress=not args.no_progress, log=log_row, data_path=args.data,
                    device=device)
    text = sample(history.model, history.tokenizer, "\n", 500, temperature=0.8, top_k=None,
                  generator=torch.Generator().manual_seed(0))
    record = record_run(history, cfg, describe_device(device),
                        datetime.date.today().isoformat(), args.target, text)
    path = save_record(record, args.json or REFERENCE_FILE)
    print(describe(record))
    print(f"record written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
