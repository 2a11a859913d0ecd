"""What training keeps for the backward pass, measured rather than counted (chapter 7).

``anatomy.flops.training_memory_bytes`` counts activations from the table of tensors one
forward pass makes, each tensor once. Autograd keeps less: only what each backward formula
needs, a view shares its base's memory, and a fused attention kernel keeps no T x T table.
This module measures what it keeps, with ``torch.autograd.graph.saved_tensors_hooks``: every
tensor saved for backward is seen once, and the bytes of the distinct storages behind them are
summed, so q, k and v (views of one qkv tensor) count once. ``training_state`` adds up
the other side, what a step leaves behind for the next: weights, gradients, optimizer state.

Shapes: a model's ids [B, T] -> bytes (a plain number)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


def saved_bytes(fn: Callable[[], object], exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes that autograd keeps for the backward pass while ``fn()`` runs.

    Every tensor saved for backward during the call is looked up by the storage it lives in,
    and each distinct storage counts once, whole. Storages of the tensors in ``exclude`` (a
    model's parameters, say, which are counted as weights) are left out. Nothing is run
    backward; what ``fn`` returns is dropped.

    Needs tensors with real memory: on the ``meta`` device every storage has address 0, so
    distinct storages could not be told apart.
    """
    skip = {_address(t) for t in exclude}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.nbytes():                        # an empty storage holds nothing
            address = _address(t)
            if address not in skip:
                kept[address] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(kept.values())


def activation_bytes(model: torch.nn.Module, ids: torch.Tensor,
                     targets: torch.Tensor | None = None) -> int:
    """Bytes of activations autograd keeps for one forward pass of ``model`` on ``ids``
    (and the loss, if ``targets`` are given): :func:`saved_bytes` without the parameters.

    Shapes: ids [B, T], targets [B, T] or None -> bytes
    """
    args = (ids,) if targets is None else (ids, targets)
    return saved_bytes(lambda: model(*args), exclude=model.parameters())


def training_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer
                   ) -> dict[str, tuple[tuple[str, ...], int]]:
    """What training keeps from one step to the next, part by part: ``"weights"``,
    ``"gradients"`` and ``"optimizer state"`` (AdamW's two moments per weight; scalar
    entries such as its step counters are left out), each as (the dtypes found, bytes), and
    ``"in all"``. Parameters without a gradient yet count no gradient bytes.
    """
    params = list(model.parameters())
    parts = {"weights": params,
             "gradients": [p.grad for p in params if p.grad is not None],
             "optimizer state": [t for state in optimizer.state.values()
                                 for t in state.values()
                                 if isinstance(t, torch.Tensor) and t.ndim > 0]}
    out = {}
    for name, tensors in parts.items():
        dtypes = tuple(sorted({str(t.dtype).removeprefix("torch.") for t in tensors}))
        out[name] = (dtypes, sum(t.numel() * t.element_size() for t in tensors))
    every = tuple(sorted({d for dtypes, _ in out.values() for d in dtypes}))
    out["in all"] = (every, sum(n for _, n in out.values()))
    return out


def _address(t: torch.Tensor) -> int:
    if t.device.type == "meta":
        raise ValueError("saved_bytes: meta tensors have no memory, so their storages "
                         "cannot be told apart; build the model on a real device (the "
                         "values do not matter, torch.nn.Module.to_empty is enough)")
    return t.untyped_storage().data_ptr()
