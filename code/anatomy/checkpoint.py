"""Checkpoints that survive a crash and resume a run exactly.

Three promises:

- **Atomic.** A checkpoint is written to a temporary file in the same folder, flushed to
  disk, then renamed over ``ckpt.pt``; a process killed mid-write leaves the old file intact.
  Before the rename the old file is kept as ``ckpt.prev.pt``.
- **Checked.** The file carries a SHA-256 digest of its own contents; a truncated or damaged
  file is reported as such (``CheckpointError``), naming the file, instead of resuming from
  garbage.
- **Complete.** Model, optimizer, grad scaler, step, history, config, vocabulary and every
  random state (torch, CUDA, NumPy, Python, the batch generator), so a resumed run on the CPU
  ends with bit-identical weights (in one process; a resume under torchrun is not bit-exact).

Files hold only tensors and plain containers, so they load with ``torch.load(...,
weights_only=True)``, which cannot run code from a file someone handed you.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from anatomy.atomic import atomic_write

FORMAT = 1
CKPT_NAME = "ckpt.pt"
PREV_NAME = "ckpt.prev.pt"


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be trusted: unreadable, truncated or altered."""


def digest(state: object) -> str:
    """SHA-256 over a nested structure of tensors and plain values, in a fixed order."""
    h = hashlib.sha256()

    def walk(obj: object) -> None:
        if isinstance(obj, torch.Tensor):
            t = obj.detach().cpu().contiguous()
            h.update(f"tensor {t.dtype} {tuple(t.shape)};".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy())   # raw bytes, any dtype
        elif isinstance(obj, dict):
            h.update(f"dict {len(obj)};".encode())
            for key in sorted(obj, key=repr):
                h.update(f"{key!r}:".encode())
                walk(obj[key])
        elif isinstance(obj, (list, tuple)):
            h.update(f"{type(obj).__name__} {len(obj)};".encode())
            for item in obj:
                walk(item)
        else:
            h.update(f"{type(obj).__name__} {obj!r};".encode())

    walk(state)
    return h.hexdigest()


def _keep_previous(path: Path, prev: Path) -> None:
    """Make ``prev`` a copy of the current ``path`` without ever leaving ``path`` missing."""
    tmp = prev.with_name(f".{prev.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(path, tmp)              # a second name for the same bytes: instant
    except OSError:
        shutil.copyfile(path, tmp)      # file systems without hard links
    os.replace(tmp, prev)


def save_checkpoint(state: dict, path: str | os.PathLike, keep_previous: bool = True) -> Path:
    """Write ``state`` to ``path`` atomically, keeping the file it replaces as
    ``ckpt.prev.pt`` (``<stem>.prev<suffix>`` in general).
    """
    path = Path(path)
    payload = {**state, "format": FORMAT}
    payload["digest"] = digest(payload)
    prev = path.with_name(f"{path.stem}.prev{path.suffix}")

    def keep_old() -> None:
        if keep_previous and path.exists():
            _keep_previous(path, prev)

    return atomic_write(path, lambda f: torch.save(payload, f), before_replace=keep_old)


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read and verify a checkpoint written by ``save_checkpoint`` (tensors land on the CPU).

    Raises ``FileNotFoundError`` when there is no file and ``CheckpointError`` when the file
    is truncated, corrupt or not one of ours.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    prev = path.with_name(f"{path.stem}.prev{path.suffix}")
    fallback = (f" The previous checkpoint {prev} is kept; to resume from it, copy it over "
                f"{path}." if prev.is_file() and prev != path else "")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        # First sentence only: torch's own advice for this case (weights_only=False) is the
        # wrong one for a damaged file.
        reason = (str(err).strip().splitlines() or [""])[0].split(". ")[0][:160]
        raise CheckpointError(f"{path} is corrupt or truncated and cannot be read "
                              f"({type(err).__name__}: {reason}).{fallback}") from err
    if not isinstance(state, dict) or "digest" not in state or "format" not in state:
        raise CheckpointError(f"{path} is not a checkpoint written by anatomy (no format or "
                              f"digest field).{fallback}")
    if state["format"] != FORMAT:
        raise CheckpointError(f"{path} has checkpoint format {state['format']}; this version "
                              f"of anatomy reads format {FORMAT}")
    stored = state.pop("digest")
    if digest(state) != stored:
        raise CheckpointError(f"{path} is corrupt: its contents do not match the digest "
                              f"stored when it was written.{fallback}")
    return state


def capture_rng(batches: torch.Generator | None = None) -> dict:
    """Every random state a training step can touch, as tensors and plain values."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)),
                  "pos": int(pos), "has_gauss": int(has_gauss), "cached": float(cached)},
        "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
    }
    if batches is not None:
        state["batches"] = batches.get_state()
    return state


def restore_rng(state: dict, batches: torch.Generator | None = None) -> None:
    """Put back the random states saved by ``capture_rng``."""
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["cached"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))
    if batches is not None:
        batches.set_state(state["batches"])
