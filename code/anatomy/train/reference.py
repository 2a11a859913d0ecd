"""The book's reference GPU run: one measured training run, kept as data beside the code.

``bench/gpu_reference.py`` trains the ``gpu`` preset on a real card and writes
``reference_run.json`` here with ``record_run``; chapter 9 reads it with ``load_reference``
and tells it with ``describe``. Nothing in it is typed by hand, and while no GPU run has been
measured the file does not exist and the chapter says so.

A record is plain JSON: the hardware, the config, the loss curve with the wall-clock time of
every evaluation, the time to a target validation loss, tokens/s and MFU.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from anatomy.atomic import atomic_write
from anatomy.train.config import TrainConfig
from anatomy.train.history import History

REFERENCE_FILE = Path(__file__).with_name("reference_run.json")
SCHEMA = 1
# nanoGPT's reported best validation loss for the baby GPT over its 5,000 steps (evaluated
# every 250 steps; the README's 1.4697).
TARGET_VAL_LOSS = 1.47
_REQUIRED = {
    "schema": int, "measured_on": str, "hardware": dict, "config": dict, "precision": str,
    "compiled": bool, "world_size": int, "target_val_loss": float, "time_to_target_s": float,
    "step_at_target": int, "wall_s": float, "tokens_per_s": float, "ms_per_step": float,
    "mfu": float, "final_train_loss": float, "final_val_loss": float, "curve": list,
    "sample": str,
}
_MAY_BE_NULL = {"time_to_target_s", "step_at_target", "mfu", "tokens_per_s", "ms_per_step"}


def record_run(history: History, cfg: TrainConfig, hardware: dict, measured_on: str,
               target: float = TARGET_VAL_LOSS, sample: str = "") -> dict:
    """The JSON record of a finished run (``history`` from ``train``)."""
    reached = history.time_to(target)
    s = history.stats
    return {
        "schema": SCHEMA, "measured_on": measured_on, "hardware": hardware,
        "config": cfg.to_dict(), "precision": s["precision"], "compiled": s["compiled"],
        "world_size": s["world_size"], "target_val_loss": float(target),
        "time_to_target_s": None if reached is None else round(reached[1], 1),
        "step_at_target": None if reached is None else reached[0],
        "wall_s": round(s["wall_s"], 1),
        "tokens_per_s": None if s["tokens_per_s"] is None else round(s["tokens_per_s"]),
        "ms_per_step": None if s["ms_per_step"] is None else round(s["ms_per_step"], 2),
        "mfu": None if s["mfu"] is None else round(s["mfu"], 4),
        "final_train_loss": round(history.train_loss[-1], 4),
        "final_val_loss": round(history.val_loss[-1], 4),
        "curve": [[st, round(tr, 4), round(va, 4), round(t, 1)] for st, tr, va, t in
                  zip(history.step, history.train_loss, history.val_loss, history.time_s,
                      strict=True)],
        "sample": sample,
    }


def save_record(record: dict, path: str | os.PathLike = REFERENCE_FILE) -> Path:
    """Check ``record`` and write it atomically (a temporary file renamed over ``path``)."""
    _check(record, path)
    return atomic_write(path, (json.dumps(record, indent=1) + "\n").encode())


def load_reference(path: str | os.PathLike = REFERENCE_FILE) -> dict | None:
    """The stored reference run, or None when none has been measured (no file).

    A file that exists but is not a valid record is an error, never silently ignored.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a reference-run record ({err})") from None
    _check(record, path)
    return record


def _check(record: object, path: str | os.PathLike) -> None:
    if not isinstance(record, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(record).__name__}")
    missing = sorted(set(_REQUIRED) - set(record))
    if missing:
        raise ValueError(f"{path}: reference-run record lacks {', '.join(missing)}")
    for key, kind in _REQUIRED.items():
        value = record[key]
        if not (_is(value, kind) or (value is None and key in _MAY_BE_NULL)):
            raise ValueError(f"{path}: field {key!r} should be {kind.__name__}, got "
                             f"{value!r}")
    if record["schema"] != SCHEMA:
        raise ValueError(f"{path}: schema {record['schema']}; this version reads {SCHEMA}")
    if any(not (isinstance(row, list) and len(row) == 4) for row in record["curve"]):
        raise ValueError(f"{path}: every curve row should be [step, train, val, seconds]")
    TrainConfig.from_dict(record["config"])          # raises on an impossible config


def _is(value: object, kind: type) -> bool:
    if isinstance(value, bool):                   # JSON true is not a number here
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def history_of(record: dict) -> History:
    """The record's loss curve as a ``History`` (for ``draw_loss_curves``)."""
    steps, train, val, times = (list(col) for col in zip(*record["curve"], strict=True))
    return History(step=steps, train_loss=train, val_loss=val, lr=[0.0] * len(steps),
                   time_s=times)


def describe(record: dict | None) -> str:
    """Plain sentences saying what the run measured, or that nothing was measured (78 columns,
    to fit the book's code column)."""
    if record is None:
        return textwrap.fill(
            "No GPU run has been measured for this book yet: no GPU has been available to the "
            "project so far. The figures below are arithmetic, not measurements; "
            "bench/gpu_reference.py will record a real run on the first card the project "
            "gets.", 78)
    hw, cfg = record["hardware"], record["config"]
    where = f"{record['world_size']} x {hw['name']}" if record["world_size"] > 1 \
        else f"one {hw['name']}"
    if "compute_capability" in hw:
        where += f" (compute capability {hw['compute_capability']}, torch {hw['torch']})"
    else:
        where += f" (torch {hw['torch']})"
    lines = [f"Measured on {record['measured_on']}: the '{cfg['name']}' preset on {where}, "
             f"{record['precision']}{', torch.compile' if record['compiled'] else ''}, "
             f"{cfg['max_steps']:,} steps."]
    target = record["target_val_loss"]
    if record["time_to_target_s"] is None:
        lines.append(f"The validation loss never reached {target}: it ended at "
                     f"{record['final_val_loss']:.3f}.")
    else:
        step = record["step_at_target"]
        evals = sum(1 for row in record["curve"] if row[0] <= step)
        text = (f"Validation loss {target} was first reached at step {step:,}: "
                f"{record['time_to_target_s']:.0f} s after the start on the wall clock "
                f"(start-up, compilation and {evals} evaluations included)")
        if record["ms_per_step"] is not None:
            text += (f", {step * record['ms_per_step'] / 1e3:.0f} s of training steps at the "
                     f"steady rate")
        lines.append(text + ".")
    speed = []
    if record["tokens_per_s"] is not None:
        speed.append(f"{record['tokens_per_s']:,.0f} tokens/s ({record['ms_per_step']:.1f} ms "
                     f"a step)")
    if record["mfu"] is not None:
        speed.append(f"MFU {record['mfu']:.1%} of the card's "
                     f"{hw['peak_flops'] / 1e12:.0f} TFLOP/s peak")
    if speed:
        lines.append("Steady state: " + ", ".join(speed) + ".")
    lines.append(f"Final losses: train {record['final_train_loss']:.3f}, validation "
                 f"{record['final_val_loss']:.3f}; the whole run took "
                 f"{record['wall_s']:.0f} s.")
    return "\n".join(textwrap.fill(line, 78) for line in lines)
