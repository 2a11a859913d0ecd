"""Trained weights that ship with the package, loaded with NumPy alone (chapters 1-8).

Each model is two files in this folder: ``NAME.npz`` (every parameter of the shape table,
float32, stored [in, out] like the rest of the book) and ``NAME.json``, its sidecar: the
config, the exact command that made it, the training data's SHA-256, the final losses, the
SHA-256 of the ``.npz`` and a record of the run at an early step (its loss and a digest of
its weights, with the CPU, torch version and thread count it was made with), which lets a
test re-run the first steps of the command and compare.

::

    from anatomy.weights import load
    params, cfg, tok = load("shakespeare-char")
    logits = forward(params, np.array(tok.encode("ROMEO:")), cfg)   # anatomy.gpt_numpy

``python -m anatomy.weights.make`` (re)makes the files; it needs torch, this module does not.

Shapes: params with param_shapes(cfg); tok.encode str[n] -> ids [n]
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from anatomy.gpt_numpy import forward, next_token_loss
from anatomy.params import GPTConfig, check_params, param_shapes
from anatomy.text import CharTokenizer

FOLDER = Path(__file__).resolve().parent
DEFAULT = "shakespeare-char"
_REMAKE = "remake it with: python -m anatomy.weights.make"


class WeightsError(ValueError):
    """A shipped weights file that cannot be trusted: altered, truncated or inconsistent
    with its sidecar."""


def names(folder: str | Path | None = None) -> list[str]:
    """The models available in ``folder`` (default: the package's own), by name."""
    folder = Path(folder) if folder is not None else FOLDER
    return sorted(p.stem for p in folder.glob("*.json"))


def _sidecar_path(name: str, folder: Path) -> Path:
    if not isinstance(name, str) or not name:
        raise ValueError(f"name: expected a model name such as {DEFAULT!r}, got {name!r}")
    path = folder / f"{name}.json"
    if path.is_file():
        return path
    known = names(folder)
    npz = folder / f"{name}.npz"
    if npz.is_file():
        raise FileNotFoundError(f"name={name!r}: {npz.name} is there but its sidecar "
                                f"{path.name} (config, vocabulary, checksum) is missing in "
                                f"{folder}; {_REMAKE}")
    raise ValueError(f"name: unknown model {name!r}; known: "
                     f"{', '.join(repr(n) for n in known) or 'none'} (in {folder})")


def info(name: str = DEFAULT, folder: str | Path | None = None) -> dict:
    """The sidecar of model ``name`` as a dict: "config", "command", "data", "weights",
    "final", "record", "history", "vocab" (see ``anatomy.weights.make`` for every field)."""
    folder = Path(folder) if folder is not None else FOLDER
    path = _sidecar_path(name, folder)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise WeightsError(f"{path} is not a readable sidecar ({err}); {_REMAKE}") from None


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def params_digest(params: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over every parameter's name, dtype, shape and bytes, in name order.

    Two weight dicts have the same digest exactly when they hold bit-identical arrays under
    the same names, whatever the file format or the dict's order.
    """
    h = hashlib.sha256()
    for name in sorted(params):
        value = np.ascontiguousarray(params[name])
        h.update(f"{name} {value.dtype.str} {value.shape};".encode())
        h.update(value.tobytes())
    return h.hexdigest()


def load(name: str = DEFAULT, *, folder: str | Path | None = None,
         dtype: np.dtype | type | None = None
         ) -> tuple[dict[str, np.ndarray], GPTConfig, CharTokenizer | None]:
    """A shipped model: ``(params, cfg, tokenizer)``, checked before it is handed out.

    ``params`` is the flat dict of :func:`anatomy.params.param_shapes` (``tok_emb``,
    ``pos_emb``, ``blocks.0.W_qkv``, ...), float32 as trained unless ``dtype`` casts it
    (float64 for exact sums); ``cfg`` is its ``GPTConfig``; ``tokenizer`` is a character
    tokenizer (``encode``, ``decode``, ``vocab_size``), or None for a model trained on token
    ids with no text behind them (``"induction"``, whose sidecar's vocab is null). The
    ``.npz`` must match the SHA-256
    in its sidecar, and every name and shape of the table must be present: a missing file
    raises ``FileNotFoundError``, an altered one ``WeightsError``, an unknown name
    ``ValueError`` listing the known ones. ``folder`` defaults to the package's own.

    Shapes: -> params with param_shapes(cfg), e.g. tok_emb [V, d], blocks.0.W_qkv [d, 3d]
    """
    folder = Path(folder) if folder is not None else FOLDER
    meta = info(name, folder)
    try:
        cfg = GPTConfig(**meta["config"])
        tokenizer = None if meta["vocab"] is None else CharTokenizer(meta["vocab"])
        weights = meta["weights"]
        npz, want = folder / weights["file"], weights["sha256"]
    except (KeyError, TypeError) as err:
        raise WeightsError(f"{folder / (name + '.json')}: sidecar lacks or garbles the field "
                           f"{err}; {_REMAKE}") from None
    except ValueError as err:                   # a config GPTConfig refuses
        raise WeightsError(f"{folder / (name + '.json')}: impossible config: {err}; "
                           f"{_REMAKE}") from None
    if not npz.is_file():
        raise FileNotFoundError(f"name={name!r}: the weights file {npz} is missing; {_REMAKE}")
    got = file_sha256(npz)
    if got != want:
        raise WeightsError(f"{npz} is corrupt or altered: SHA-256 expected {want} (from "
                           f"{name}.json), got {got}; {_REMAKE}")
    with np.load(npz, allow_pickle=False) as f:
        arrays = {key: f[key] for key in f.files}
    try:
        check_params(arrays, cfg)               # every name of the table, right shapes
    except ValueError as err:
        raise WeightsError(f"{npz} does not fit the config in {name}.json: {err}; "
                           f"{_REMAKE}") from None
    if tokenizer is not None and tokenizer.vocab_size != cfg.V:
        raise WeightsError(f"{name}.json: vocabulary of {tokenizer.vocab_size} characters "
                           f"but cfg.V = {cfg.V}; {_REMAKE}")
    params = {key: arrays[key] if dtype is None else arrays[key].astype(dtype)
              for key in param_shapes(cfg)}      # shape-table order
    return params, cfg, tokenizer


def windows(ids: np.ndarray, T: int) -> np.ndarray:
    """Cut a long run of ids into consecutive, non-overlapping windows of T (the tail that
    does not fill a window is dropped).

    Shapes: ids [N] -> [N // T, T]
    """
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"ids: expected shape [N], got {ids.shape}")
    if not isinstance(T, (int, np.integer)) or isinstance(T, bool) or T < 2:
        raise ValueError(f"T: expected an integer >= 2 (one input and one target), got {T!r}")
    n = len(ids) // T
    if n == 0:
        raise ValueError(f"ids: expected at least T = {T} ids for one window, got {len(ids)}")
    return ids[: n * T].reshape(n, T)                  # [N] -> [N // T, T]


def window_loss(params: Mapping[str, np.ndarray], ids: np.ndarray, cfg: GPTConfig,
                batch: int = 128) -> float:
    """The deterministic loss of a text: the mean next-character loss (nats) over its
    consecutive non-overlapping windows of ctx characters.

    Each window of ctx ids is one forward pass; row t predicts id t + 1, so a window gives
    ctx - 1 predictions and its first character is predicted by nothing. No random batches:
    the same weights and text always give the same number (the sidecar's ``val_loss_windows``
    is this, on the validation split). Divide by ln 2 for bits per character.

    Shapes: ids [N] -> windows [N // ctx, ctx] -> scalar
    """
    rows = windows(ids, cfg.ctx)                       # [n, ctx]
    total = 0.0
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]              # [b, ctx]
        logits = forward(params, chunk, cfg)           # [b, ctx] -> [b, ctx, V]
        total += next_token_loss(logits, chunk) * chunk.shape[0]
    return total / len(rows)


def bits(loss_nats: float) -> float:
    """A loss in nats per character as bits per character."""
    return loss_nats / math.log(2)
