"""(Re)make the shipped character model: ``python -m anatomy.weights.make``.

Trains chapter 9's GPT (the ``cpu-long`` preset: L=4, h=4, d=128, T=ctx=64, 2000 AdamW steps
of B=32 windows) on Tiny Shakespeare on the CPU with ``anatomy.train.train``, then writes
``shakespeare-char.npz`` (float32, the shape table's names, [in, out]) and its sidecar
``shakespeare-char.json`` into ``--out`` (default: this package folder).

Changes from the preset, none of which touches a weight: it evaluates every 50 steps
instead of 250, on 10 batches per split instead of 20, and checkpoints every 50 steps.
The checkpoint at ``--record-step`` (200) is read back during the run, and its weights'
digest and loss go into the sidecar's ``record``, with the CPU, torch version and thread
count. ``tests/test_weights.py`` re-runs the same command up to that step and compares:
equal digests where the machine matches, a loss within 0.01 elsewhere. Everything random is
seeded and the thread count is fixed (``--threads``, default 1), so on one machine the
command gives bit-identical weights, and the ``.npz`` is written byte for byte the same
(fixed zip timestamps, the shape table's order).

Options: ``--steps N`` (default: the recipe's, 2000), ``--record-step K`` (default 200; a
multiple of 50 below N), ``--out DIR``, ``--data FILE`` (else ``ANATOMY_DATA``, the cache, a
download), ``--threads N``, ``--name NAME``.

The name picks the recipe: ``--name shakespeare-char-draft`` makes the inference chapter's
draft model for speculative decoding (chapter 9's ``cpu`` preset with one block, L=1, h=4,
d=64, 1500 steps, about two minutes on one CPU thread), evaluated, checkpointed and recorded
like the first; any other name gets the first model's recipe.

``--name induction`` makes the induction chapter's model: two attention-only
blocks (``attn_only``) trained on no text at all, but on windows of distinct random tokens
whose second half copies bigrams of the first (``anatomy.induction.copy_pairs_batch``, from a seeded
generator; the recipe's ``COPY_TASKS`` entry gives V and the number of bigrams). It is
evaluated every 50 steps on fixed repeated sequences, and the loss on their first half and
on their repeated half at every evaluation goes into the sidecar's ``history`` (the curve
the chapter plots); its record holds those two losses at the record step instead of train
and val. It loads with no tokenizer: ``load("induction", folder=...)`` gives ``(params, cfg,
None)``. Its loss counts the copied tokens fully and the others at 0.02
(``anatomy.train.induction``, which says why).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import platform
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from anatomy.atomic import atomic_write
from anatomy.checkpoint import CKPT_NAME, load_checkpoint
from anatomy.gpt_numpy import generate
from anatomy.gpt_torch import GPT, to_numpy_params
from anatomy.params import count_params, param_shapes
from anatomy.text import SHA256, CharTokenizer, load_text, sha256_of, split
from anatomy.train import PRESETS, TrainConfig, train
from anatomy.weights import DEFAULT, FOLDER, file_sha256, params_digest, window_loss, windows

FORMAT = 1
RECORD_STEP = 200
# The preset, evaluated and checkpointed every 50 steps so that step 200 can be recorded,
# each evaluation on 10 batches per split instead of 20: the reproduction test re-runs 200
# steps and five evaluations (steps 0, 50, ..., 200), about a minute on one CPU thread.
RECIPE = dataclasses.replace(PRESETS["cpu-long"], name=DEFAULT, eval_every=50,
                             eval_iters=10, ckpt_every=50)
DRAFT = "shakespeare-char-draft"
# Each shipped model's recipe, by name; a name not listed gets RECIPE.
RECIPES = {
    DEFAULT: RECIPE,
    DRAFT: dataclasses.replace(PRESETS["cpu"], name=DRAFT, L=1, max_steps=1500, eval_every=50,
                               eval_iters=10, ckpt_every=50),
}
INDUCTION = "induction"
RECIPES[INDUCTION] = TrainConfig(
    name=INDUCTION, L=2, h=2, d=64, T=32, B=64, max_steps=2000, lr=3e-3, min_lr=3e-4,
    warmup_steps=100, eval_every=50, eval_iters=1, ckpt_every=50, attn_only=True)
# Recipes trained on the copy task instead of a text: the vocabulary and copied bigrams.
COPY_TASKS = {INDUCTION: {"V": 64, "pairs": 8}}
DESCRIPTIONS = {
    DEFAULT: "Chapter 9's GPT trained on Tiny Shakespeare, one id per character",
    DRAFT: ("The inference chapter's draft model for speculative decoding: one block of "
            "chapter 9's cpu preset, trained on Tiny Shakespeare with the same vocabulary"),
    INDUCTION: ("The induction chapter's model: two attention-only blocks trained "
                "on random tokens whose second half copies bigrams of the first "
                "(anatomy.induction.copy_pairs_batch)"),
}
# What must match for two runs of the same command to give bit-identical weights.
MACHINE_KEYS = ("machine", "processor", "cpu_capability", "mkl_cbwr", "torch", "threads")
# A sidecar recorded before a key existed was recorded without that switch set.
KEY_DEFAULTS = {"mkl_cbwr": ""}
LOSS_TOLERANCE = 0.01          # where the machine differs: |loss - recorded| at the record step
# The losses a record may hold: a text model's train and val, a copy-task model's halves.
RECORD_LOSSES = ("train_loss", "val_loss", "first_loss", "repeat_loss", "step_loss")


class _Stop(Exception):
    """Raised from the evaluation callback to end a run at the record step."""


def _cpu_name() -> str:
    """The CPU's model name with its family and model numbers: virtual machines often report
    a bare "AMD EPYC", and two generations of one name can round differently."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or "unknown"
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def machine() -> dict:
    """The facts that decide whether two CPU runs can agree to the bit."""
    return {"machine": platform.machine(), "processor": _cpu_name(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            # MKL's branch (torch's BLAS); it cannot be read back from torch, only set
            "mkl_cbwr": os.environ.get("MKL_CBWR", ""),
            "torch": torch.__version__, "numpy": np.__version__,
            "threads": torch.get_num_threads()}


def same_machine(record: Mapping) -> bool:
    """Whether this process (as it is now) matches ``record`` on every key of MACHINE_KEYS."""
    return records_match(record, machine())


def records_match(a: Mapping, b: Mapping) -> bool:
    """Whether two machine records agree on every key of MACHINE_KEYS (bit-equal runs)."""
    return all(a.get(key, KEY_DEFAULTS.get(key)) == b.get(key, KEY_DEFAULTS.get(key))
               for key in MACHINE_KEYS)


def compare_record(recorded: Mapping, again: Mapping) -> str:
    """Judge a re-run of the record step against the sidecar's record.

    Where MACHINE_KEYS all match, the weights must be bit-identical (same digest, same
    losses): returns "identical". Elsewhere float32 rounding may differ, so the train, val
    and step losses must each lie within LOSS_TOLERANCE: returns "close". Otherwise raises
    ``ValueError`` saying what differs.
    """
    if again["step"] != recorded["step"]:
        raise ValueError(f"again: the re-run recorded step {again['step']}, the sidecar step "
                         f"{recorded['step']}")
    if records_match(again, recorded):
        if again["params_sha256"] != recorded["params_sha256"]:
            raise ValueError(f"same machine, torch and threads, but the weights at step "
                             f"{recorded['step']} differ: digest {again['params_sha256'][:12]} "
                             f"vs recorded {recorded['params_sha256'][:12]}")
        return "identical"
    for key in (k for k in RECORD_LOSSES if k in recorded):
        if not abs(again[key] - recorded[key]) < LOSS_TOLERANCE:
            raise ValueError(f"{key} at step {recorded['step']}: {again[key]:.4f} vs recorded "
                             f"{recorded[key]:.4f}, more than {LOSS_TOLERANCE} apart")
    return "close"


def recipe(steps: int | None = None, name: str = DEFAULT) -> TrainConfig:
    """The training config of the shipped model ``name``, for a run of ``steps`` steps
    (default: the recipe's own)."""
    base = RECIPES.get(name, RECIPE)
    return dataclasses.replace(base, max_steps=base.max_steps if steps is None else steps)


def _check_record_step(cfg: TrainConfig, record_step: int) -> None:
    if (isinstance(record_step, bool) or not isinstance(record_step, int) or record_step < 1
            or record_step % cfg.eval_every or record_step % cfg.ckpt_every
            or record_step >= cfg.max_steps):
        raise ValueError(f"record_step: expected a multiple of eval_every={cfg.eval_every} "
                         f"and ckpt_every={cfg.ckpt_every} below steps={cfg.max_steps}, "
                         f"got {record_step!r}")


def train_with_record(cfg: TrainConfig, record_step: int = RECORD_STEP, *,
                      data_path: str | Path | None = None, threads: int = 1,
                      stop_at_record: bool = False):
    """Run ``train(cfg)`` on the CPU with ``threads`` threads; return ``(history, record)``.

    ``record`` describes the run at ``record_step``: the evaluated train and val loss, the
    training loss of that step's batch, the digest of its weights (read back from the
    checkpoint written at that step) and :func:`machine`. With ``stop_at_record`` the run
    ends there and ``history`` is None: the first ``record_step`` steps of the full run,
    whose learning-rate schedule still ends at ``cfg.max_steps``.
    """
    _check_record_step(cfg, record_step)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    record: dict = {}
    try:
        if cfg.name in COPY_TASKS:
            return _copy_task_with_record(cfg, record_step, stop_at_record, record)
        with tempfile.TemporaryDirectory() as run_dir:
            def at_evaluation(row: dict) -> None:
                if row["step"] != record_step:
                    return
                # train() writes the checkpoint of a step before that step's evaluation.
                state = load_checkpoint(Path(run_dir) / CKPT_NAME)
                if state["step"] != record_step:
                    raise RuntimeError(f"expected the checkpoint of step {record_step}, found "
                                       f"step {state['step']}")
                model = GPT(cfg.model_config(len(state["vocab"])))
                model.load_state_dict(state["model"])
                record.update({
                    "step": record_step, "train_loss": row["train_loss"],
                    "val_loss": row["val_loss"],
                    "step_loss": state["history"]["step_loss"][record_step - 1],
                    "params_sha256": params_digest(to_numpy_params(model)), **machine()})
                if stop_at_record:
                    raise _Stop

            try:
                history = train(cfg, out_dir=run_dir, progress=False, log=at_evaluation,
                                data_path=data_path, device="cpu")
            except _Stop:
                history = None
    finally:
        torch.set_num_threads(old_threads)
    if not record:
        raise RuntimeError(f"the run never evaluated step {record_step}")
    return history, record


def _copy_task_with_record(cfg: TrainConfig, record_step: int, stop_at_record: bool,
                           record: dict):
    """:func:`train_with_record` for a recipe of ``COPY_TASKS``: the run of
    ``anatomy.train.induction``, its weights read directly at the record step."""
    from anatomy.train.induction import CopyRun, train_copy_task

    def at_evaluation(row: dict, so_far: CopyRun) -> None:
        if row["step"] != record_step:
            return
        record.update({"step": record_step, "first_loss": row["first_loss"],
                       "repeat_loss": row["repeat_loss"],
                       "step_loss": so_far.step_loss[record_step - 1],
                       "params_sha256": params_digest(to_numpy_params(so_far.model)),
                       **machine()})
        if stop_at_record:
            raise _Stop

    try:
        run = train_copy_task(cfg, log=at_evaluation, **COPY_TASKS[cfg.name])
    except _Stop:
        run = None
    if not record:
        raise RuntimeError(f"the run never evaluated step {record_step}")
    return run, record


@torch.no_grad()
def torch_window_loss(model: GPT, ids: np.ndarray, batch: int = 128) -> float:
    """:func:`anatomy.weights.window_loss` computed by the PyTorch model, for parity.

    Shapes: ids [N] -> windows [N // ctx, ctx] -> scalar
    """
    rows = torch.from_numpy(windows(np.asarray(ids, dtype=np.int64), model.cfg.ctx))
    n = len(rows)                                              # [n, ctx]
    model.eval()
    total = 0.0
    for start in range(0, n, batch):
        x = rows[start:start + batch]                          # [b, ctx]
        logits = model(x)                                      # [b, ctx] -> [b, ctx, V]
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),   # [b(ctx-1), V]
                               x[:, 1:].reshape(-1))                            # [b(ctx-1)]
        total += float(loss) * x.shape[0]
    return total / n


def npz_bytes(params: Mapping[str, np.ndarray]) -> bytes:
    """``params`` as an ``.npz`` (uncompressed), byte for byte the same for the same arrays:
    every member has a fixed timestamp, unlike ``np.savez``'s current time."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, value in params.items():
            member = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            member.external_attr = 0o644 << 16
            with z.open(member, "w") as f:
                np.lib.format.write_array(f, np.ascontiguousarray(value), allow_pickle=False)
    return buf.getvalue()


def table_params(model: GPT) -> dict[str, np.ndarray]:
    """The model's weights as NumPy arrays, in the shape table's order (the file's order)."""
    params = to_numpy_params(model)
    return {key: params[key] for key in param_shapes(model.cfg)}


def write_npz(out: Path, name: str, params: Mapping[str, np.ndarray]) -> Path:
    """Write ``out/NAME.npz`` atomically (creating ``out``); return its path."""
    out.mkdir(parents=True, exist_ok=True)
    npz = out / f"{name}.npz"
    atomic_write(npz, npz_bytes(params))
    return npz


def command(steps: int, record_step: int, threads: int, name: str) -> str:
    """The command line that makes these files (``--out`` and ``--data`` change no number)."""
    extra = "" if name == DEFAULT else f" --name {name}"
    return (f"python -m anatomy.weights.make --steps {steps} --record-step {record_step} "
            f"--threads {threads}{extra}")


def make(steps: int | None = None, out: str | Path = FOLDER, *, name: str = DEFAULT,
         data_path: str | Path | None = None, threads: int = 1,
         record_step: int = RECORD_STEP, echo=print) -> dict:
    """Train, then write ``NAME.npz`` and ``NAME.json`` into ``out``; return the sidecar."""
    t0 = time.perf_counter()
    cfg = recipe(steps, name)
    steps = cfg.max_steps
    _check_record_step(cfg, record_step)
    if name in COPY_TASKS:
        return _make_copy_task(cfg, record_step, out, threads, echo, t0)
    text = load_text(data_path)
    if sha256_of(text.encode("utf-8")) != SHA256:
        raise ValueError("data: the shipped model is trained on Tiny Shakespeare only; the "
                         "given text has another SHA-256")
    echo(f"training {cfg.name}: L={cfg.L} h={cfg.h} d={cfg.d} T={cfg.T} B={cfg.B}, "
         f"{steps} steps on {threads} CPU thread(s)")
    history, record = train_with_record(cfg, record_step, data_path=data_path,
                                         threads=threads)
    model = history.model.eval()
    model_cfg = model.cfg
    params = table_params(model)
    tokenizer = CharTokenizer(text)
    _, val = split(np.array(tokenizer.encode(text), dtype=np.int64))
    val_numpy = window_loss(params, val, model_cfg)
    val_torch = torch_window_loss(model, val)
    out = Path(out)
    npz = write_npz(out, name, params)
    sidecar = {
        "format": FORMAT,
        "name": name,
        "description": (DESCRIPTIONS.get(name, DESCRIPTIONS[DEFAULT]) + "; float32 "
                        "weights named and shaped as anatomy.params.param_shapes."),
        "command": command(steps, record_step, threads, name),
        "config": dataclasses.asdict(model_cfg),
        "n_params": count_params(model_cfg),
        "train_config": cfg.to_dict(),
        "vocab": tokenizer.vocab,
        "data": {"file": "tinyshakespeare.txt", "sha256": SHA256, "n_chars": len(text),
                 "split": "first 90% train, last 10% validation (anatomy.data.split)"},
        "weights": {"file": npz.name, "sha256": file_sha256(npz), "dtype": "float32",
                    "params_sha256": params_digest(params)},
        "final": {
            "step": steps, "train_loss": history.train_loss[-1],
            "val_loss": history.val_loss[-1],
            "val_loss_windows": {"numpy": val_numpy, "torch": val_torch,
                                 "n_windows": len(val) // model_cfg.ctx},
        },
        "val_loss_windows_definition": (
            "anatomy.weights.window_loss: mean next-character loss in nats over the "
            "validation split cut into consecutive non-overlapping windows of ctx "
            "characters (ctx - 1 predictions each)"),
        "record": record,
        "history": [[s, round(tr, 4), round(va, 4)] for s, tr, va in
                    zip(history.step, history.train_loss, history.val_loss, strict=True)],
    }
    atomic_write(out / f"{name}.json",
                 (json.dumps(sidecar, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
    prompt = np.array(tokenizer.encode("ROMEO:\n"))
    sample = generate(params, prompt, model_cfg, 200, temperature=0.8,
                      rng=np.random.default_rng(0))
    echo(f"{sidecar['n_params']:,} parameters; step {steps}: train "
         f"{sidecar['final']['train_loss']:.4f}, val {sidecar['final']['val_loss']:.4f}; "
         f"val over {sidecar['final']['val_loss_windows']['n_windows']} windows: numpy "
         f"{val_numpy:.5f}, torch {val_torch:.5f}")
    echo(f"record at step {record_step}: val {record['val_loss']:.4f}, weights "
         f"{record['params_sha256'][:12]}")
    echo(f"wrote {npz} ({npz.stat().st_size:,} bytes) and {name}.json in "
         f"{time.perf_counter() - t0:.0f} s")
    echo("sample (temperature 0.8, seed 0):\n" + tokenizer.decode(sample))
    return sidecar


def _make_copy_task(cfg: TrainConfig, record_step: int, out: str | Path, threads: int,
                    echo, t0: float) -> dict:
    """:func:`make` for a recipe of ``COPY_TASKS``: no text, no tokenizer; the sidecar's
    history holds the loss on each half of the fixed evaluation sequences."""
    from anatomy.induction import half_losses, repeated_tokens
    from anatomy.train.induction import EVAL_SEQUENCES, OTHER_WEIGHT, evaluate_halves

    name, task = cfg.name, COPY_TASKS[cfg.name]
    echo(f"training {name}: L={cfg.L} h={cfg.h} d={cfg.d} T={cfg.T} B={cfg.B}, attention "
         f"only, V={task['V']}, {cfg.max_steps} steps on {threads} CPU thread(s)")
    run, record = train_with_record(cfg, record_step, threads=threads)
    model = run.model.eval()
    model_cfg = model.cfg
    params = table_params(model)
    held_out = repeated_tokens(cfg.seed + 1, EVAL_SEQUENCES, cfg.T, task["V"])
    numpy_halves = half_losses(params, model_cfg, held_out)
    torch_halves = evaluate_halves(model, held_out)
    out = Path(out)
    npz = write_npz(out, name, params)
    last = run.rows[-1]
    sidecar = {
        "format": FORMAT,
        "name": name,
        "description": (DESCRIPTIONS[name] + "; float32 weights named and shaped as "
                        "anatomy.params.param_shapes."),
        "command": command(cfg.max_steps, record_step, threads, name),
        "config": dataclasses.asdict(model_cfg),
        "n_params": count_params(model_cfg),
        "train_config": cfg.to_dict(),
        "vocab": None,
        "data": {"task": "copy", **task, "windows": "anatomy.induction.copy_pairs_batch(rng, "
                 "B, T + 1, V, pairs), rng = numpy.random.default_rng(seed)",
                 "loss": f"weighted cross-entropy: copied tokens 1, others {OTHER_WEIGHT} "
                 "(anatomy.train.induction.OTHER_WEIGHT)",
                 "evaluation": f"anatomy.induction.repeated_tokens(seed + 1, "
                 f"{EVAL_SEQUENCES}, T, V): first half and repeated half"},
        "weights": {"file": npz.name, "sha256": file_sha256(npz), "dtype": "float32",
                    "params_sha256": params_digest(params)},
        "final": {"step": cfg.max_steps, "first_loss": last["first_loss"],
                  "repeat_loss": last["repeat_loss"],
                  "halves": {"numpy": list(numpy_halves), "torch": list(torch_halves)}},
        "record": record,
        "history_columns": ["step", "first_loss", "repeat_loss"],
        "history": [[r["step"], round(r["first_loss"], 4), round(r["repeat_loss"], 4)]
                    for r in run.rows],
    }
    atomic_write(out / f"{name}.json",
                 (json.dumps(sidecar, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
    echo(f"{sidecar['n_params']:,} parameters; step {cfg.max_steps}: first half "
         f"{last['first_loss']:.4f}, repeated half {last['repeat_loss']:.4f} (numpy "
         f"{numpy_halves[1]:.5f}, torch {torch_halves[1]:.5f})")
    echo(f"record at step {record_step}: repeated half {record['repeat_loss']:.4f}, weights "
         f"{record['params_sha256'][:12]}")
    echo(f"wrote {npz} ({npz.stat().st_size:,} bytes) and {name}.json in "
         f"{time.perf_counter() - t0:.0f} s")
    return sidecar


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m anatomy.weights.make", description=(
        "Train the shipped character model on the CPU and write NAME.npz and NAME.json."))
    p.add_argument("--steps", type=int, default=None,
                   help=f"training steps (default: the recipe's, {RECIPE.max_steps} for "
                        f"{DEFAULT})")
    p.add_argument("--record-step", type=int, default=RECORD_STEP,
                   help=f"the step recorded for the reproduction test (default {RECORD_STEP})")
    p.add_argument("--out", type=Path, default=FOLDER, help="output folder (default: the "
                   "package's anatomy/weights)")
    p.add_argument("--data", type=Path, default=None, help="the Tiny Shakespeare file")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads; the record is bit-exact only at the same count (default 1)")
    p.add_argument("--name", default=DEFAULT, help=f"model name (default {DEFAULT}); "
                   f"{DRAFT} picks the draft model's recipe, {INDUCTION} the induction "
                   "chapter's (no data needed)")
    args = p.parse_args(argv)
    if args.steps is None:
        args.steps = recipe(None, args.name).max_steps
    if args.steps < 1 or args.threads < 1:
        p.error("--steps and --threads must be positive integers")
    try:
        _check_record_step(recipe(args.steps, args.name), args.record_step)
        if args.name not in COPY_TASKS:
            load_text(args.data)                   # the data is there and is the right file
    except (ValueError, OSError, RuntimeError) as err:
        p.error(str(err))
    make(args.steps, args.out, name=args.name, data_path=args.data, threads=args.threads,
         record_step=args.record_step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
