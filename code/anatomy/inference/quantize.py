"""Weight-only quantization: int8 per output channel, int4 in groups, both absmax.

Each matrix is stored as small integers and a float scale per channel (or per group of
``group`` consecutive inputs of a channel): scale = max |w| / (2^(bits-1) - 1), integer =
round(w / scale). Multiplying back (:func:`dequantize`) gives every weight to within half a
scale step. Every weight matrix except the position table is quantized (the token table,
W_qkv, W_o, W_1, W_2 and an untied head); biases, LayerNorm gains and shifts and the position
table stay float32, being a small fraction of the bytes. Int4 values are packed two to a byte.

Shapes: W [n_in, n_out] -> q [n_in, n_out] int8 and scale [n_in / group, n_out]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from .._validate import check_positive_int


class QTensor(NamedTuple):
    """One quantized matrix: ``data`` (int8, or uint8 holding two int4 values per byte),
    ``scale`` (float32, one per group of each channel), and how to undo it."""

    data: np.ndarray
    scale: np.ndarray
    bits: int
    group: int
    shape: tuple[int, int]
    transposed: bool            # stored as [n_in, n_out] from a [n_out, n_in] table

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.scale.nbytes


def absmax_int8(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Int8 per output channel: each column of ``W`` [n_in, n_out] gets the scale that maps
    its largest |w| to 127. Returns the integers and the scales.

    Shapes: W [n_in, n_out] -> q [n_in, n_out] (int8), scale [n_out]
    """
    W = np.asarray(W, dtype=np.float64)
    scale = np.abs(W).max(axis=0) / 127                     # [n_out]
    scale = np.where(scale > 0, scale, 1.0)                 # an all-zero column: any scale
    q = np.round(W / scale)                                 # [n_in, n_out], in [-127, 127]
    return q.astype(np.int8), scale.astype(np.float32)


def absmax_groups(W: np.ndarray, bits: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric ``bits``-bit integers for ``W``, one scale per ``group`` consecutive rows
    of each column (``group`` = n_in: per channel).

    Shapes: W [n_in, n_out] -> q [n_in, n_out] (int8 holding values in [-(2^(b-1)-1),
            2^(b-1)-1]), scale [n_in / group, n_out]
    """
    W = np.asarray(W, dtype=np.float64)
    n_in, n_out = W.shape
    top = 2 ** (bits - 1) - 1                               # 127 or 7
    blocks = W.reshape(n_in // group, group, n_out)         # [n_g, group, n_out]
    scale = np.abs(blocks).max(axis=1) / top                # [n_g, n_out]
    scale = np.where(scale > 0, scale, 1.0)
    q = np.round(blocks / scale[:, None, :])                # [n_g, group, n_out]
    return q.reshape(n_in, n_out).astype(np.int8), scale.astype(np.float32)


def _pack4(q: np.ndarray) -> np.ndarray:
    """Two int4 values per byte, offset by 8 into 0..15.

    Shapes: q [n_in, n_out] (even size) -> [n_in * n_out / 2] uint8
    """
    u = (q.reshape(-1) + 8).astype(np.uint8)                # [N], each in 1..15
    return u[0::2] | (u[1::2] << 4)                         # [N / 2]


def _unpack4(data: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    u = np.empty(data.size * 2, dtype=np.int16)             # [N]
    u[0::2], u[1::2] = data & 0x0F, data >> 4
    return (u - 8).reshape(shape)                           # [n_in, n_out]


def _quantized_names(params: Mapping[str, np.ndarray]) -> list[str]:
    return [n for n, w in params.items() if np.ndim(w) == 2 and n != "pos_emb"]


def quantize(params: Mapping[str, np.ndarray], bits: int = 8, group: int | None = None,
             channel=absmax_int8) -> dict[str, np.ndarray | QTensor]:
    """Every weight matrix of ``params`` as a :class:`QTensor`, the rest unchanged.

    ``bits`` 8 or 4; ``group`` the number of consecutive inputs sharing a scale (None: a
    whole channel). A matrix is quantized along the axis its matmul sums over: the inputs of
    W [n_in, n_out], and d of the token table [V, d], which the tied head multiplies as
    x @ tok_emb^T. ``group`` must divide every such axis. ``channel`` is the int8
    per-channel quantizer used when ``bits`` is 8 and ``group`` None (another one, such as a
    reader's exercise answer, can be passed in its place).

    Shapes: params with param_shapes(cfg) -> the same names, matrices as QTensor
    """
    if bits not in (4, 8) or isinstance(bits, bool):
        raise ValueError(f"bits: expected 4 or 8, got {bits!r}")
    if group is not None:
        check_positive_int(group, "group")
    out: dict[str, np.ndarray | QTensor] = dict(params)
    for name in _quantized_names(params):
        W = np.asarray(params[name])
        transposed = name in ("tok_emb", "head")            # [V, d]: the head reads it as [d, V]
        Wt = W.T if transposed else W                       # [n_in, n_out]
        n_in = Wt.shape[0]
        g = n_in if group is None else group
        if n_in % g:
            raise ValueError(f"group: expected a divisor of every matrix's input width, but "
                             f"{name} has {n_in} inputs and group={group}")
        q, scale = channel(Wt) if bits == 8 and g == n_in else absmax_groups(Wt, bits, g)
        scale = scale.reshape(-1, Wt.shape[1])              # [n_in / g, n_out]
        data = _pack4(q) if bits == 4 else q
        out[name] = QTensor(data, scale, bits, g, Wt.shape, transposed)
    return out


def dequantize(qparams: Mapping[str, np.ndarray | QTensor]) -> dict[str, np.ndarray]:
    """Float32 weights back from :func:`quantize`'s output: integers times their scales.

    Shapes: the same names, QTensor -> its matrix's original shape
    """
    out = {}
    for name, value in qparams.items():
        if not isinstance(value, QTensor):
            out[name] = value
            continue
        n_in, n_out = value.shape
        q = _unpack4(value.data, value.shape) if value.bits == 4 else value.data
        blocks = q.reshape(n_in // value.group, value.group, n_out)   # [n_g, group, n_out]
        W = (blocks * value.scale[:, None, :]).reshape(n_in, n_out)   # [n_in, n_out]
        out[name] = (W.T if value.transposed else W).astype(np.float32)
    return out


def nbytes(params: Mapping[str, np.ndarray | QTensor]) -> int:
    """Bytes to store every entry: a QTensor's integers and scales, an array's own bytes."""
    return sum(v.nbytes if isinstance(v, QTensor) else np.asarray(v).nbytes
               for v in params.values())
