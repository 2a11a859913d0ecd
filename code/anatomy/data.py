"""Tiny Shakespeare as PyTorch training data: random windows and their shifted targets.

The text itself (the verified file, the split, the character tokenizer) is in
:mod:`anatomy.text`, which needs no torch; it is re-exported here, so ``from anatomy.data
import load_text, CharTokenizer, get_batch`` keeps working.

Shapes: ids [N] -> x, y [B, T]
"""

from __future__ import annotations

import functools

import torch

from anatomy.text import (  # noqa: F401  (re-exported: the text side needs no torch)
    DATA_URL,
    ENV_VAR,
    FILENAME,
    SHA256,
    CharTokenizer,
    DataError,
    DataUnavailableError,
    UncheckedTextWarning,
    default_cache_dir,
    load_text,
    sha256_of,
    split,
)


def _checked_batch_args(fn):
    """``get_batch``'s input checks, kept out of its body so that the body reads as the
    recipe (a plain wrapper: ``anatomy._validate.validated`` would turn the tensor into a
    NumPy array)."""
    @functools.wraps(fn)
    def wrapper(data: torch.Tensor, B: int, T: int, generator: torch.Generator):
        if not isinstance(data, torch.Tensor) or data.ndim != 1:
            raise ValueError(f"data: expected a 1-D tensor of ids [N], got "
                             f"{getattr(data, 'shape', type(data).__name__)}")
        if B < 1 or T < 1:
            raise ValueError(f"get_batch: B and T must be at least 1, got B={B}, T={T}")
        if T >= len(data):
            raise ValueError(f"get_batch: T={T} needs at least T + 1 = {T + 1} tokens (one "
                             f"extra for the shifted targets), but data has {len(data)}")
        return fn(data, B, T, generator)

    return wrapper


@_checked_batch_args
def get_batch(data: torch.Tensor, B: int, T: int,
              generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """B random windows of T tokens, and the same windows shifted by one as targets.

    ``generator`` (a seeded ``torch.Generator``) makes the draw reproducible and keeps it
    independent of every other use of randomness (dropout, initialisation).

    Shapes: data [N] -> x [B, T], y [B, T] (int64, on data's device)
    """
    starts = torch.randint(len(data) - T, (B,), generator=generator)   # [B]
    rows = starts[:, None] + torch.arange(T)[None, :]    # [B, 1] + [1, T] -> [B, T]
    data = data.long()
    return data[rows.to(data.device)], data[(rows + 1).to(data.device)]  # x, y [B, T]
