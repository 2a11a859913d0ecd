"""Generation with and without a KV cache, in NumPy: tokens per second (run by hand).

Greedy generation from random float32 weights of two shapes (the book's TOY model and
BABY_GPT, chapter 9's model), one sequence: a short prompt, then new tokens up to most of
ctx. ``generate`` reruns the whole window for every new token; ``generate_cached`` runs the
prompt once and then one token per step. Both produce the same tokens (checked). Threads are
set before NumPy is imported (``--threads``, default 1: the same as ``make test``).

    .venv/bin/python bench/kv_cache.py [--threads N] [--repeats R]

Each time is the best of R runs, the two generators taking turns so that load from other
processes slows both alike.
"""

from __future__ import annotations

import sys
import time

from _threads import parse_args  # bench/_threads.py, beside this script

ARGS = parse_args(__doc__.splitlines()[0], repeats=3)

import numpy as np  # noqa: E402

from anatomy.gpt_numpy import generate, generate_cached, step_macs  # noqa: E402
from anatomy.params import BABY_GPT, TOY, init_params  # noqa: E402


def timed(fn, *args) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def total_macs(cfg, T_prompt: int, n_new: int, cached: bool) -> int:
    """Multiply-adds of a whole generation, from anatomy.gpt_numpy.step_macs.

    Without a cache every step reruns the window; with one, the prompt is run once (a full
    pass) and each later step costs one token.
    """
    lengths = range(T_prompt, T_prompt + n_new)        # tokens in the window at each step
    if not cached:
        return sum(step_macs(cfg, T, cached=False)["total"] for T in lengths)
    return step_macs(cfg, T_prompt, cached=False)["total"] + sum(
        step_macs(cfg, T, cached=True)["total"] for T in lengths[1:])


def main() -> int:
    print(f"greedy generation, random float32 weights, NumPy, {ARGS.threads} thread(s), "
          f"best of {ARGS.repeats}")
    print(f"{'model':>8} | {'prompt':>6} | {'new':>4} | {'no cache (tok/s)':>16} | "
          f"{'cache (tok/s)':>13} | {'speed-up':>8} | {'MAC ratio':>9}")
    for name, cfg in (("TOY", TOY), ("BABY_GPT", BABY_GPT)):
        params = init_params(cfg, np.random.default_rng(0), dtype=np.float32)
        prompt = np.random.default_rng(1).integers(0, cfg.V, size=8)
        n_new = cfg.ctx - len(prompt)
        generate(params, prompt, cfg, 2)                          # warm-up
        t_full = t_cache = float("inf")
        for _ in range(ARGS.repeats):
            t, full = timed(generate, params, prompt, cfg, n_new)
            t_full = min(t_full, t)
            t, cached = timed(generate_cached, params, prompt, cfg, n_new)
            t_cache = min(t_cache, t)
        if not np.array_equal(full, cached):
            print(f"{name}: the cached tokens differ from the full recompute's")
            return 1
        macs = [total_macs(cfg, len(prompt), n_new, cached=c) for c in (False, True)]
        print(f"{name:>8} | {len(prompt):>6} | {n_new:>4} | {n_new / t_full:>16.1f} | "
              f"{n_new / t_cache:>13.1f} | {t_full / t_cache:>7.1f}x | {macs[0] / macs[1]:>8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
