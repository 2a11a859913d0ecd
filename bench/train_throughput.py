"""Training throughput on this machine, and what the training loop costs over a bare loop.

Not a test: run it by hand (it takes a few minutes) and read the table::

    PYTHONPATH=code python bench/train_throughput.py [--presets cpu cpu-long] [--rounds 3]

For each preset it times ``anatomy.train.train`` (the full loop: schedule, batch sharding,
autocast context, grad scaler, clipping, loss bookkeeping, progress bar; evaluations are
paused out of its timer) against a bare loop on the same model and the same batches:
draw a batch, forward, backward, AdamW step, zero the gradients. Rounds alternate between
the two so that load from other processes hits both alike; the table shows medians.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from anatomy.data import CharTokenizer, get_batch, load_text, split
from anatomy.gpt_torch import GPT, configure_optimizer
from anatomy.train import PRESETS, train


def bare_ms_per_step(cfg, train_ids: torch.Tensor, V: int, steps: int) -> float:
    """Milliseconds per step of the plainest loop that still trains the same model."""
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model_config(V), dropout=cfg.dropout, attn=cfg.attn)
    opt = configure_optimizer(model, cfg.lr, cfg.weight_decay, cfg.betas)
    gen = torch.Generator().manual_seed(cfg.seed)
    start = None
    for i in range(steps + 1):
        if i == 1:                     # the first step (allocations, first-touch) is not timed
            start = time.perf_counter()
        x, y = get_batch(train_ids, cfg.B, cfg.T, gen)          # [B, T] each
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return 1e3 * (time.perf_counter() - start) / steps


def loop_ms_per_step(cfg, steps: int) -> float:
    """Milliseconds per step of ``anatomy.train.train`` (its own timer, evaluations excluded)."""
    run = dataclasses.replace(cfg, eval_every=10 * steps, eval_iters=1)
    history = train(run, max_steps=steps + 1, progress=False, device="cpu")
    return history.stats["ms_per_step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["cpu", "cpu-long"])
    parser.add_argument("--steps", type=int, default=60, help="timed steps per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    text = load_text()
    tok = CharTokenizer(text)
    train_ids, _ = split(torch.tensor(tok.encode(text)))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{args.rounds} rounds x {args.steps} steps, medians")
    header = (f"{'preset':<9} {'params':>9} {'B x T':>7} {'loop ms':>8} {'bare ms':>8} "
              f"{'loop tok/s':>10} {'bare tok/s':>10} {'loop/bare':>9} {'est. run':>9}")
    print(header)
    print("-" * len(header))
    for name in args.presets:
        cfg = PRESETS[name]
        loop, bare = [], []
        for _ in range(args.rounds):
            loop.append(loop_ms_per_step(cfg, args.steps))
            bare.append(bare_ms_per_step(cfg, train_ids, tok.vocab_size, args.steps))
        loop_ms, bare_ms = statistics.median(loop), statistics.median(bare)
        tokens = cfg.B * cfg.T
        n = GPT(cfg.model_config(tok.vocab_size)).num_params()
        print(f"{name:<9} {n:>9,} {cfg.B:>3}x{cfg.T:<3} {loop_ms:>8.1f} {bare_ms:>8.1f} "
              f"{tokens / loop_ms * 1e3:>10,.0f} {tokens / bare_ms * 1e3:>10,.0f} "
              f"{loop_ms / bare_ms:>9.3f} {loop_ms * cfg.max_steps / 1e3:>8.0f}s")
    print("est. run: max_steps x loop ms, before evaluations")


if __name__ == "__main__":
    main()
