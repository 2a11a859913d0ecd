"""NumPy forward pass vs the PyTorch GPT on the same weights, on the CPU (run by hand).

GPT-2 small's shape (V = 50257, ctx = 1024, d = 768, L = 12, h = 12) with random float32
weights, one sequence of T = 64, 256 and 1,024 tokens. Both sides use the same number of
threads, set before NumPy and torch are imported (``--threads``, default 1: the same as
``make test``). Prints a table of the best time of ``--repeats`` runs, and the ratio
NumPy / PyTorch (1.00 = as fast; the target is at most 1.25). The last columns time the
forward pass's matrix products alone (the four of each block and the head, at their shapes)
in NumPy (its BLAS, OpenBLAS in NumPy's wheels) and in torch (MKL on x86): the share of
NumPy's time they take, and their own ratio, which is the BLAS libraries' and not the
book's code. The rest of NumPy's time is LayerNorm, GELU, softmax, the additions and the
input checks.

    .venv/bin/python bench/forward_numpy_vs_torch.py [--threads N] [--repeats R]
"""

from __future__ import annotations

import sys
import time

from _threads import parse_args  # bench/_threads.py, beside this script

ARGS = parse_args(__doc__.splitlines()[0], repeats=5)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from anatomy.gpt_numpy import forward  # noqa: E402
from anatomy.gpt_torch import from_numpy  # noqa: E402
from anatomy.params import GPT2_SMALL, init_params  # noqa: E402


def best_of(fns, repeats: int) -> list[float]:
    """Fastest of ``repeats`` timed calls of each function, in seconds.

    The functions take turns (one warm-up call each first), so a burst of load from other
    processes slows both sides alike instead of only one of them.
    """
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def matmul_only(params, cfg, T: int, repeats: int) -> tuple[float, float]:
    """Seconds of the forward pass's matrix products alone, NumPy and torch, best of repeats.

    Shapes: per block x [1, T, d] @ W_qkv [d, 3d], W_o [d, d], W_1 [d, d_ff] and
            h [1, T, d_ff] @ W_2 [d_ff, d]; the head x [1, T, d] @ tok_emb^T [d, V]
    """
    rng = np.random.default_rng(T)
    x = rng.standard_normal((1, T, cfg.d), dtype=np.float32)
    h = rng.standard_normal((1, T, cfg.d_ff), dtype=np.float32)
    pairs = [(x if name != "W_2" else h, params[f"blocks.{i}.{name}"])
             for i in range(cfg.L) for name in ("W_qkv", "W_o", "W_1", "W_2")]
    pairs.append((x, params["tok_emb"].T))
    pairs_t = [(torch.from_numpy(a), torch.from_numpy(b)) for a, b in pairs]

    def numpy_side():
        for a, b in pairs:
            a @ b

    def torch_side():
        for a, b in pairs_t:
            a @ b

    return tuple(best_of([numpy_side, torch_side], repeats))


def main() -> int:
    torch.set_num_threads(ARGS.threads)
    cfg = GPT2_SMALL
    params = init_params(cfg, np.random.default_rng(0), dtype=np.float32)
    model = from_numpy(params, cfg).eval()           # float32, the same numbers
    print(f"GPT-2 small shape, random float32 weights, CPU, {ARGS.threads} thread(s), "
          f"best of {ARGS.repeats}")
    print(f"{'T':>5} | {'NumPy (ms)':>10} | {'PyTorch (ms)':>12} | {'NumPy/PyTorch':>13} | "
          f"{'max |diff|':>10} | {'matmuls, share of NumPy':>23} | {'matmuls NumPy/PyTorch':>21}")
    for T in (64, 256, 1024):
        ids = np.random.default_rng(T).integers(0, cfg.V, size=(1, T))
        ids_t = torch.from_numpy(ids)
        with torch.inference_mode():
            t_numpy, t_torch = best_of([lambda ids=ids: forward(params, ids, cfg),
                                        lambda ids_t=ids_t: model(ids_t)], ARGS.repeats)
            ref = model(ids_t).numpy()
        diff = np.abs(forward(params, ids, cfg) - ref).max()
        mm_numpy, mm_torch = matmul_only(params, cfg, T, ARGS.repeats)
        print(f"{T:>5} | {t_numpy * 1e3:>10.1f} | {t_torch * 1e3:>12.1f} | "
              f"{t_numpy / t_torch:>13.2f} | {diff:>10.1e} | {mm_numpy / t_numpy:>23.0%} | "
              f"{mm_numpy / mm_torch:>21.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
