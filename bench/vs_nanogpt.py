"""Training on the CPU side by side with nanoGPT itself, at nanoGPT's CPU setting (issue 24).

Not a test: run it by hand (about twenty minutes for three pairs on an idle laptop core)::

    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT      # a scratch folder
    .venv/bin/python bench/vs_nanogpt.py --nanogpt /tmp/nanoGPT [--data FILE] [--pairs 3]
    .venv/bin/python bench/vs_nanogpt.py --nanogpt /tmp/nanoGPT --profile    # where time goes
    .venv/bin/python bench/vs_nanogpt.py --nanogpt /tmp/nanoGPT --ops        # ... by operator

nanoGPT is run from its own checkout, as its README says (its ``prepare.py`` writes its data
from the same Tiny Shakespeare file, then its ``train.py`` trains); nothing of it is copied
here. Both sides train the same model shape with the same schedule, one thread each (4
layers, 4 heads, d = 128, T = 64, B = 12, lr 1e-3 to 1e-4 with 100 warmup steps, 2,000
steps, an evaluation of 20 batches per split every 250 steps): nanoGPT with
``config/train_shakespeare_char.py --device=cpu --compile=False ...``, this book with
``python -m anatomy.train --preset cpu --set ...``. Each run is a whole process, timed from
start to exit; peak memory is its maximum resident set. The runs alternate (nanoGPT first
in odd pairs, the book first in even ones), so load from other processes hits both alike,
and the table shows the median of the pairs' ratios with their range.

nanoGPT's model has no biases and uses the exact (erf) GELU; the book's is GPT-2's (biases,
the tanh GELU). nanoGPT's loop runs one step more than ``max_iters`` (it counts from 0 to
2,000 inclusive); its final loss is that of its evaluation at step 2,000, as the book's is.

``--profile`` runs each side once more under cProfile (``--profile-steps`` steps) and prints
where a step's time goes: forward, backward, gradient clipping, the optimizer (step and
zero_grad), batch sampling, evaluation, the rest (imports, data, the loop itself). cProfile
counts the process's CPU time (not the time the machine gives to others) but slows
Python-heavy code more than kernels, so the profile says where the time goes, and the
side-by-side run without it says how fast.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
HOW_TO_GET = """\
vs_nanogpt: give the path of a nanoGPT checkout with --nanogpt. Get one in a scratch folder
(never inside this repository), for example:

    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT
    .venv/bin/python bench/vs_nanogpt.py --nanogpt /tmp/nanoGPT
"""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def prepare_nanogpt_data(nanogpt: Path, data: Path) -> None:
    """nanoGPT's own prepare.py, reading our copy of the text instead of downloading it."""
    folder = nanogpt / "data" / "shakespeare_char"
    if all((folder / name).is_file() for name in ("train.bin", "val.bin", "meta.pkl")):
        return
    shutil.copyfile(data, folder / "input.txt")        # prepare.py downloads only without it
    subprocess.run([sys.executable, "prepare.py"], cwd=folder, check=True,
                   stdout=subprocess.DEVNULL)


def commands(nanogpt: Path, data: Path, steps: int, out_dir: Path, entry: str
             ) -> dict[str, tuple[list[str], Path]]:
    """Each side's command line and working folder, at the same config."""
    nano = [sys.executable, "train.py", "config/train_shakespeare_char.py", "--device=cpu",
            "--compile=False", "--eval_iters=20", "--block_size=64", "--batch_size=12",
            "--n_layer=4", "--n_head=4", "--n_embd=128", f"--max_iters={steps}",
            f"--lr_decay_iters={steps}", "--dropout=0.0", f"--out_dir={out_dir}"]
    sets = ["L=4", "d=128", "B=12", "lr=1e-3", "min_lr=1e-4", "warmup_steps=100",
            f"max_steps={steps}"]
    book = [sys.executable, "-m", entry, "--preset", "cpu", "--no-progress", "--data",
            str(data)] + [arg for s in sets for arg in ("--set", s)]
    return {"nanoGPT": (nano, nanogpt), "this book": (book, REPO)}


def final_val_loss(side: str, output: str) -> float:
    pattern = (r"step \d+: train loss [\d.]+, val loss ([\d.]+)" if side == "nanoGPT"
               else r"done: val loss ([\d.]+)")
    found = re.findall(pattern, output)
    if not found:
        raise RuntimeError(f"{side}: no final val loss in its output:\n{output[-2000:]}")
    return float(found[-1])


def run(side: str, cmd: list[str], cwd: Path) -> dict:
    """One whole process: wall seconds, peak resident memory (MiB), final val loss."""
    path = os.pathsep.join(filter(None, [str(REPO / "code"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": path}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{side} exited with {proc.returncode}:\n{output[-2000:]}")
    scale = 1 if sys.platform == "darwin" else 1024            # ru_maxrss: bytes vs KiB
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
            "peak_mib": usage.ru_maxrss * scale / 2**20, "val": final_val_loss(side, output)}


def side_by_side(cmds: dict, pairs: int) -> None:
    runs: dict[str, list[dict]] = {side: [] for side in cmds}
    for i in range(pairs):
        order = list(cmds) if i % 2 == 0 else list(cmds)[::-1]
        for side in order:
            r = run(side, *cmds[side])
            runs[side].append(r)
            print(f"  pair {i + 1}: {side:<9} {r['wall']:6.1f} s (cpu {r['cpu']:6.1f} s)  "
                  f"val {r['val']:.4f}  "
                  f"peak {r['peak_mib']:.0f} MiB", flush=True)
    nano, book = runs["nanoGPT"], runs["this book"]
    ratios = [b["wall"] / n["wall"] for n, b in zip(nano, book, strict=True)]
    cpu_ratios = [b["cpu"] / n["cpu"] for n, b in zip(nano, book, strict=True)]

    def span(values, fmt):
        return (f"{fmt.format(statistics.median(values))} "
                f"({fmt.format(min(values))}-{fmt.format(max(values))})")

    print("\n| | nanoGPT | this book | ratio |\n|---|---|---|---|")
    print(f"| wall, median (min-max) | {span([r['wall'] for r in nano], '{:.1f}')} s | "
          f"{span([r['wall'] for r in book], '{:.1f}')} s | **{span(ratios, '{:.2f}')}** |")
    print(f"| cpu time, median (min-max) | {span([r['cpu'] for r in nano], '{:.1f}')} s | "
          f"{span([r['cpu'] for r in book], '{:.1f}')} s | {span(cpu_ratios, '{:.2f}')} |")
    v_nano, v_book = (statistics.median(r["val"] for r in rs) for rs in (nano, book))
    print(f"| final val loss | {v_nano:.4f} | {v_book:.4f} | {v_book - v_nano:+.4f} |")
    m_nano, m_book = (statistics.median(r["peak_mib"] for r in rs) for rs in (nano, book))
    print(f"| peak memory | {m_nano:.0f} MiB | {m_book:.0f} MiB | {m_book / m_nano:.2f} |")
    print(f"ratio: this book / nanoGPT per pair, {pairs} alternating pairs; cpu time: user + "
          f"system seconds of the process (less moved by other load than wall time); final "
          f"val loss and peak memory: medians over the pairs")


# ---- where the time goes: each side's own functions, under cProfile ------------------------

PARTS = ("forward", "backward", "clip", "optimizer", "batches", "evaluation", "other")


def _find(stats: pstats.Stats, file_end: str, names: tuple[str, ...]):
    """The profiled function of that name in that file with the largest cumulative time (the
    outermost one: GPT.forward rather than Block.forward), or None."""
    hits = [(key, value) for key, value in stats.stats.items()
            if key[0].replace("\\", "/").endswith(file_end) and key[2] in names]
    return max(hits, key=lambda kv: kv[1][3]) if hits else None


def profile_parts(prof: Path, side: str) -> tuple[dict[str, float], int, int]:
    """Seconds per part of the run, the number of training steps and of evaluations."""
    stats = pstats.Stats(str(prof))
    model, batch_file, eval_file = (("model.py", "train.py", "train.py") if side == "nanoGPT"
                                    else ("anatomy/gpt_torch.py", "anatomy/data.py",
                                          "anatomy/train/loop.py"))
    forward = _find(stats, model, ("forward",))
    backward = _find(stats, "torch/_tensor.py", ("backward",))
    clip = _find(stats, "nn/utils/clip_grad.py", ("clip_grad_norm_",))
    step = _find(stats, "optim/adam.py", ("step",)) or _find(stats, "optim/adamw.py", ("step",))
    zero = _find(stats, "optim/optimizer.py", ("zero_grad",))
    batch = _find(stats, batch_file, ("get_batch",))
    evaluation = _find(stats, eval_file, ("estimate_loss",))
    missing = [n for n, f in (("forward", forward), ("backward", backward), ("clip", clip),
                              ("optimizer", step), ("batches", batch),
                              ("evaluation", evaluation)) if f is None]
    if missing:
        raise RuntimeError(f"{side}: not found in the profile: {', '.join(missing)}")
    ct = {name: f[1][3] for name, f in (("forward", forward), ("backward", backward),
                                        ("clip", clip), ("step", step), ("batch", batch),
                                        ("evaluation", evaluation))}
    zero_ct = zero[1][3] if zero else 0.0
    # get_batch is called by the loop and by estimate_loss; the latter's share is evaluation.
    eval_batches = sum(v[3] for k, v in batch[1][4].items() if k[2] == "estimate_loss")
    # The forward passes of the evaluations are inside estimate_loss: what remains of it
    # once its batches are taken out is (nearly all) forward passes; not a training step's.
    eval_forward = ct["evaluation"] - eval_batches
    parts = {"forward": ct["forward"] - eval_forward, "backward": ct["backward"],
             "clip": ct["clip"], "optimizer": ct["step"] + zero_ct,
             "batches": ct["batch"] - eval_batches, "evaluation": ct["evaluation"]}
    parts["other"] = stats.total_tt - sum(parts.values())
    n_eval = evaluation[1][1]
    return parts, backward[1][1], n_eval


# Runs a script (or -m module) under cProfile with the process's CPU clock, so that time
# the machine gives to other processes is not counted against either side.
PROFILE_RUNNER = """\
import cProfile, os, runpy, sys, time
out, target, *rest = sys.argv[1:]
if target == "-m":
    sys.argv = [rest[0], *rest[1:]]
    call = lambda: runpy.run_module(rest[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = [target, *rest]
    sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
    call = lambda: runpy.run_path(target, run_name="__main__")
prof = cProfile.Profile(time.process_time)
try:
    prof.runcall(call)
except SystemExit as end:
    if end.code:
        raise
finally:
    prof.dump_stats(out)
"""


def profile(cmds: dict, steps: int) -> None:
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for side, (cmd, cwd) in cmds.items():
            prof = Path(tmp) / f"{side.replace(' ', '_')}.prof"
            run(side, [cmd[0], "-c", PROFILE_RUNNER, str(prof), *cmd[1:]], cwd)
            rows[side] = profile_parts(prof, side)
    (nano, n_steps, n_evals), (book, b_steps, b_evals) = rows["nanoGPT"], rows["this book"]
    print(f"\nWhere a step's CPU time goes, under cProfile ({steps} steps: nanoGPT ran {n_steps} "
          f"with {n_evals} evaluations, this book {b_steps} with {b_evals}); ms per step, "
          f"evaluations and the rest spread over the steps")
    print("| part | nanoGPT (ms) | this book (ms) | book / nanoGPT |\n|---|---|---|---|")
    for part in (*PARTS, "total"):
        a = (sum(nano.values()) if part == "total" else nano[part]) / n_steps * 1e3
        b = (sum(book.values()) if part == "total" else book[part]) / b_steps * 1e3
        ratio = f"{b / a:.2f}" if a > 0.05 else "-"
        print(f"| {part} | {a:.2f} | {b:.2f} | {ratio} |")
    print("forward: the training steps' forward passes (the evaluations' are in evaluation); "
          "optimizer: step + zero_grad; other: imports, data, the loop, logging")


def op_profile(nanogpt: Path, steps: int) -> None:
    """Forward + backward of both models in this process, one thread, under torch.profiler:
    ms per step by ATen operator, and how fast the matrix products run (FLOPs counted from
    the shapes: 6 per token per weight of every [d, *] matrix and the output head)."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from anatomy.gpt_torch import GPT
    from anatomy.params import GPTConfig

    torch.set_num_threads(1)
    sys.path.insert(0, str(nanogpt))
    nano_model = importlib.import_module("model")         # nanoGPT's model.py, from its checkout

    V, T, B, L, d = 65, 64, 12, 4, 128
    models = {"nanoGPT": nano_model.GPT(nano_model.GPTConfig(
                  block_size=T, vocab_size=V, n_layer=L, n_head=4, n_embd=d, dropout=0.0,
                  bias=False)),
              "this book": GPT(GPTConfig(V=V, ctx=T, d=d, L=L, h=4))}
    x, y = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
    ms: dict[str, dict[str, float]] = {}
    for side, model in models.items():
        for _ in range(3):                                   # warm-up
            model(x, y)[1].backward()
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                model(x, y)[1].backward()
        ms[side] = {e.key: e.self_cpu_time_total / 1e3 / steps for e in prof.key_averages()}
    top = sorted({op for side in ms.values() for op, v in sorted(
        side.items(), key=lambda kv: -kv[1])[:8]}, key=lambda op: -ms["this book"].get(op, 0))
    print(f"\nForward + backward by operator, torch.profiler, {steps} passes each, one "
          f"thread, B = {B}, T = {T}, L = {L}, d = {d}; self CPU ms per pass")
    print("| operator | nanoGPT (ms) | this book (ms) |\n|---|---|---|")
    for op in top:
        print(f"| {op} | {ms['nanoGPT'].get(op, 0):.2f} | {ms['this book'].get(op, 0):.2f} |")
    totals = {side: sum(v.values()) for side, v in ms.items()}
    print(f"| all operators | {totals['nanoGPT']:.2f} | {totals['this book']:.2f} |")
    flops = 6 * B * T * (L * 12 * d * d + d * V)
    for side, v in ms.items():
        mm = v.get("aten::mm", 0.0)
        print(f"{side}: aten::mm {mm:.1f} ms per pass, {flops / mm / 1e6:.0f} GFLOP/s "
              f"({flops / 1e9:.2f} GFLOP), {mm / totals[side]:.0%} of the operators' time")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nanogpt", type=Path, help="a nanoGPT checkout (a scratch folder)")
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("ANATOMY_DATA",
                                                                          DEFAULT_DATA)),
                        help="tinyshakespeare.txt (default $ANATOMY_DATA)")
    parser.add_argument("--pairs", type=int, default=3, help="alternating pairs of runs")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--profile", action="store_true",
                        help="profile each side once instead of the side-by-side runs")
    parser.add_argument("--profile-steps", type=int, default=500)
    parser.add_argument("--ops", action="store_true",
                        help="profile both models' forward + backward by operator, in-process")
    parser.add_argument("--entry", default="anatomy.train",
                        help="the module run as this book's side (default anatomy.train)")
    args = parser.parse_args()
    if args.nanogpt is None or not (args.nanogpt / "train.py").is_file():
        where = f" ({args.nanogpt} has no train.py)" if args.nanogpt else ""
        print(HOW_TO_GET.replace("checkout with", f"checkout{where} with"), file=sys.stderr)
        return 2
    if not args.data.is_file():
        print(f"vs_nanogpt: no text at {args.data}; give --data tinyshakespeare.txt",
              file=sys.stderr)
        return 2
    import torch

    prepare_nanogpt_data(args.nanogpt.resolve(), args.data)
    print(f"{datetime.date.today()}, {cpu_model()}, torch {torch.__version__}, one thread "
          f"per run\n$ {' '.join(sys.argv)}")
    if args.ops:
        op_profile(args.nanogpt.resolve(), steps=20)
        return 0
    with tempfile.TemporaryDirectory() as out_dir:
        steps = args.profile_steps if args.profile else args.steps
        cmds = commands(args.nanogpt.resolve(), args.data.resolve(), steps, Path(out_dir),
                        args.entry)
        if args.profile:
            profile(cmds, steps)
        else:
            side_by_side(cmds, args.pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
