"""Measure chapter 9's expected bands: the `cpu` and the `tiny` preset runs the chapter trains
live, over several seeds and under two kernel families, and the same runs broken on purpose.

    .venv/bin/python bench/training_band.py [--seeds 1337 1 2 3] [--broken]
    .venv/bin/python .ci/kernels.py run -- .venv/bin/python bench/training_band.py

Prints one JSON line per run: the preset, the seed, the kernel family and the final losses.
anatomy.train.bands records the bands drawn from these lines, and says how.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import torch

from anatomy.train import train
from anatomy.train.bands import chapter_runs

# what each broken run changes in a chapter run's config
BROKEN = {
    "lr x10": lambda c: {"lr": c.lr * 10, "min_lr": c.min_lr * 10},
    "lr / 30": lambda c: {"lr": c.lr / 30, "min_lr": c.min_lr / 30},
    "mask flipped": lambda c: {"causal": not c.causal},
    "optimizer frozen (lr 1e-9)": lambda c: {"lr": 1e-9, "min_lr": 1e-9},
    "weight decay x100": lambda c: {"weight_decay": c.weight_decay * 100},
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1337, 1, 2, 3])
    parser.add_argument("--broken", action="store_true", help="the broken runs instead")
    parser.add_argument("--runs", nargs="+", default=list(chapter_runs()),
                        choices=list(chapter_runs()), help="which of the chapter's runs")
    args = parser.parse_args(argv)
    family = torch.backends.cpu.get_cpu_capability()
    runs = {name: chapter_runs()[name] for name in args.runs}
    for name, cfg in runs.items():
        variants = ({k: dataclasses.replace(cfg, **change(cfg)) for k, change in BROKEN.items()}
                    if args.broken else
                    {f"seed {s}": dataclasses.replace(cfg, seed=s) for s in args.seeds})
        for label, run in variants.items():
            h = train(run, device="cpu", progress=False)
            print(json.dumps({"run": name, "variant": label, "torch": family,
                              "val": round(h.val_loss[-1], 4),
                              "train": round(h.train_loss[-1], 4)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
