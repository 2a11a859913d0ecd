"""The inference chapter's measurements that take too long for a chapter cell (run by hand).

1. Peak memory (tracemalloc) and time of attention over one head of width 64 in float32,
   the whole [T, T] table (``naive_attention``) against tiles of 64 (``tiled_attention``),
   causal, for T = 512 ... 8192.
2. Speculative decoding against plain cached decoding on the shipped models: the target
   ``shakespeare-char`` (L=4, d=128) and the draft ``shakespeare-char-draft`` (L=1, d=64),
   greedy, float64, prompts from the validation split, the rest of ctx generated. Both give
   the same tokens (checked). The times of the two are taken in turns, best of R, so load
   from other processes slows both alike; the ratio is what to read, not the seconds.
3. What the speed-up model of part 2 leaves out: it charges a target pass that checks k
   drafts (k + 1 new positions) as one cached step. Here the target's cached pass over
   n = 1 ... 7 new tokens is timed against one step (each right after a step; the median of
   R such ratios). The inference chapter re-runs part 2's model with that cost.

    .venv/bin/python bench/inference.py [--threads N] [--repeats R] > bench/results/inference.txt
    .venv/bin/python bench/inference.py --part verify > bench/results/inference_verify.txt
"""

from __future__ import annotations

import sys
import time

from _threads import parse_args  # bench/_threads.py, beside this script

PARTS = ("memory", "speculative", "verify")
ARGS = parse_args(__doc__.splitlines()[0], repeats=3, parts=PARTS)

import numpy as np  # noqa: E402

from anatomy.gpt_numpy import forward_cached, generate_cached  # noqa: E402
from anatomy.inference import (  # noqa: E402
    expected_tokens_per_call,
    naive_attention,
    peak_bytes,
    speculative_generate,
    tiled_attention,
)
from anatomy.text import load_text, split  # noqa: E402
from anatomy.weights import load  # noqa: E402


def best_time(fn, *args, **kwargs) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def memory_curve() -> None:
    print("1. attention, one head, d = 64, float32, causal; peak memory by tracemalloc")
    print(f"{'T':>6} | {'naive MiB':>10} | {'tiled MiB':>10} | {'ratio':>7} | "
          f"{'naive s':>8} | {'tiled s':>8} | {'time ratio':>10}")
    rng = np.random.default_rng(0)
    for T in (512, 1024, 2048, 4096, 8192):
        q, k, v = (rng.standard_normal((T, 64)).astype(np.float32) for _ in range(3))
        mem = [peak_bytes(naive_attention, q, k, v, True) / 2**20,
               peak_bytes(tiled_attention, q, k, v, 64, True) / 2**20]
        t_naive = t_tiled = float("inf")
        for _ in range(ARGS.repeats if T <= 2048 else 1):
            t_naive = min(t_naive, best_time(naive_attention, q, k, v, True))
            t_tiled = min(t_tiled, best_time(tiled_attention, q, k, v, 64, True))
        print(f"{T:>6} | {mem[0]:>10.1f} | {mem[1]:>10.2f} | {mem[0] / mem[1]:>6.0f}x | "
              f"{t_naive:>8.3f} | {t_tiled:>8.3f} | {t_naive / t_tiled:>9.2f}x")


def speculative() -> int:
    target, t_cfg, tok = load("shakespeare-char", dtype=np.float64)
    draft, d_cfg, _ = load("shakespeare-char-draft", dtype=np.float64)
    val = split(load_text())[1]
    prompts = [np.array(tok.encode(val[i:i + 8])) for i in range(0, 8000, 1000)]
    n_new = t_cfg.ctx - 8
    # The cost of one cached step of each model, for the cost ratio c = draft / target.
    ids = prompts[0]
    _, t_cache = forward_cached(target, ids, t_cfg)
    _, d_cache = forward_cached(draft, ids, d_cfg)
    one = np.array([5])
    steps = 200
    t_t = best_time(lambda: [forward_cached(target, one, t_cfg, t_cache) for _ in range(steps)])
    t_d = best_time(lambda: [forward_cached(draft, one, d_cfg, d_cache) for _ in range(steps)])
    c = t_d / t_t
    print(f"\n2. speculative decoding, greedy, float64, {len(prompts)} prompts of 8 characters, "
          f"{n_new} new each, best of {ARGS.repeats}")
    print(f"one cached step: draft / target time c = {c:.2f}")
    print(f"{'k':>3} | {'accept':>6} | {'tokens/call':>11} | {'formula':>7} | "
          f"{'plain s':>8} | {'spec s':>8} | {'speed-up':>8} | {'model':>6}")
    for k in (1, 2, 3, 4, 6):
        t_plain = t_spec = float("inf")
        acc = rej = calls = 0
        for r in range(ARGS.repeats):
            plain_total = spec_total = 0.0
            for prompt in prompts:
                t0 = time.perf_counter()
                ref = generate_cached(target, prompt, t_cfg, n_new)
                plain_total += time.perf_counter() - t0
                t0 = time.perf_counter()
                out, stats = speculative_generate(target, t_cfg, draft, d_cfg, prompt, n_new,
                                                  k=k)
                spec_total += time.perf_counter() - t0
                if not np.array_equal(out, ref):
                    print(f"k={k}: speculative tokens differ from the target's greedy ones")
                    return 1
                if r == 0:
                    acc += stats["accepted"]
                    rej += stats["rejected"]
                    calls += stats["target_calls"]
            t_plain, t_spec = min(t_plain, plain_total), min(t_spec, spec_total)
        alpha = acc / (acc + rej)           # per judged draft token
        per_call = len(prompts) * n_new / calls
        formula = expected_tokens_per_call(alpha, k)
        model = formula / (k * c + 1)        # Leviathan et al.'s expected speed-up
        print(f"{k:>3} | {alpha:>6.2f} | {per_call:>11.2f} | {formula:>7.2f} | "
              f"{t_plain:>8.2f} | {t_spec:>8.2f} | {t_plain / t_spec:>7.2f}x | {model:>5.2f}x")
    return 0


def verify_cost() -> None:
    target, t_cfg, tok = load("shakespeare-char", dtype=np.float64)
    prompt = np.array(tok.encode(split(load_text())[1][:30]))
    _, cache = forward_cached(target, prompt, t_cfg)
    sizes, steps = (1, 2, 3, 4, 5, 7), 100

    def timed(n: int) -> float:
        fed = np.arange(n) % t_cfg.V
        return best_time(lambda: [forward_cached(target, fed, t_cfg, cache) for _ in range(steps)])

    # Each pass is timed right after one step, so that load from other processes, which
    # changes slowly, slows both alike; the median of those paired ratios is reported.
    ratios = {n: [] for n in sizes}
    for _ in range(ARGS.repeats):
        for n in sizes:
            one = timed(1)
            ratios[n].append(timed(n) / one)
    print(f"\n3. the target's cached pass over n new tokens (after 30), against one step, "
          f"float64, median of {ARGS.repeats} paired ratios")
    print("  n | " + " | ".join(f"{n:>5}" for n in sizes))
    print("    | " + " | ".join(f"{np.median(ratios[n]):>4.2f}x" for n in sizes))


def main() -> int:
    print(f"NumPy, {ARGS.threads} thread(s)")
    if "memory" in ARGS.part:
        memory_curve()
    if "speculative" in ARGS.part and speculative():
        return 1
    if "verify" in ARGS.part:
        verify_cost()
    return 0


if __name__ == "__main__":
    sys.exit(main())
