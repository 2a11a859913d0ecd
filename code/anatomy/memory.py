"""What training keeps for the backward pass, measured rather than counted (chapter 7).

``anatomy.flops.training_memory_bytes`` counts activations from the table of tensors one
forward pass makes, each tensor once. Autograd keeps less: only what each backward formula
needs, a view shares its base's memory, and a fused attention kernel keeps no T x T table.
This module measures what it keeps, with ``torch.autograd.graph.saved_tensors_hooks``: every
tensor saved for backward is seen once, and the bytes of the distinct storages behind them are
summed, so q, k and v (views of one qkv tensor) count once. ``training_state`` adds up
the other side, what a step leaves behind for the next: weights, gradients, optimizer state,
and ``weight_copies`` finds the 16-bit copies of the weights that a step under autocast keeps
from its forward pass until its backward pass.

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


def weight_copies(model: torch.nn.Module, fn: Callable[[], object]) -> dict[str, int]:
    """Parameters whose copy in another dtype autograd keeps for the backward pass while
    ``fn()`` runs, each with the bytes of that copy.

    Under ``torch.autocast`` a matrix product reads a 16-bit copy of its float32 weight and
    saves that copy for its backward formula, so the copy lives from the forward pass until
    the backward pass has used it. A saved tensor is taken as such a copy when its whole
    storage holds exactly the values of one parameter cast to its dtype (so a transposed view
    of the copy is found too). The parameters themselves, saved in their own dtype, are not
    copies and are not listed. Nothing is run backward; what ``fn`` returns is dropped.

    Shapes: parameters [any] -> {name: bytes}
    """
    params = dict(model.named_parameters())
    casts: dict[tuple[str, torch.dtype], torch.Tensor] = {}
    found: dict[str, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if not t.is_floating_point() or not storage.nbytes():
            return t
        flat = t.new_empty(0).set_(storage, 0, (storage.nbytes() // t.element_size(),))
        for name, p in params.items():
            if p.dtype == t.dtype or p.numel() != flat.numel() or name in found:
                continue
            key = (name, t.dtype)
            if key not in casts:
                casts[key] = p.detach().to(t.dtype).reshape(-1)
            if torch.equal(flat, casts[key]):
                found[name] = storage.nbytes()
                break
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return found


def training_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer
                   ) -> dict[str, tuple[tuple[str, ...], int]]:
    """What training holds at the moment of the call, part by part: ``"weights"``,
    ``"gradients"`` and ``"optimizer state"`` (AdamW's two moments per weight; scalar
    entries such as its step counters are left out), each as (the dtypes found, bytes), and
    ``"in all"``. Parameters without a gradient count no gradient bytes: called after
    ``optimizer.step()`` it counts the gradients, called after
    ``zero_grad(set_to_none=True)`` (the end of ``train_step``, so between steps) it
    counts none.
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
