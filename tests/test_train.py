"""anatomy.train: presets, the schedule, hardware facts, the loop, the CLI and torchrun."""

import dataclasses
import math
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from _local_data import DATA, ROOT

from anatomy import gpt_torch
from anatomy.checkpoint import load_checkpoint
from anatomy.data import DataError, UncheckedTextWarning
from anatomy.params import BABY_GPT, count_params
from anatomy.train import (
    PRESETS,
    History,
    TrainConfig,
    loop,
    lr_at,
    mfu,
    peak_flops,
    preset,
    preset_for,
    train,
)
from anatomy.train.__main__ import build_parser, parse_overrides
from anatomy.train.hardware import choose_precision, pick_device
from anatomy.train.schedule import ScheduleChangedWarning, restretch_note

# A few seconds of training: the tiny preset, shortened further.
QUICK = dataclasses.replace(PRESETS["tiny"], max_steps=12, eval_every=4, eval_iters=2)


def _env() -> dict:
    env = dict(os.environ, ANATOMY_DATA=str(DATA))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "code"),
                                                      env.get("PYTHONPATH")]))
    return env


# ---- config and presets --------------------------------------------------------------------

def test_gpu_preset_is_the_baby_gpt():
    cfg = PRESETS["gpu"]
    assert (cfg.L, cfg.h, cfg.d, cfg.T, cfg.B) == (6, 6, 384, 256, 64)
    assert (cfg.dropout, cfg.lr, cfg.max_steps, cfg.min_lr) == (0.2, 1e-3, 5000, 1e-4)
    assert cfg.model_config(65) == BABY_GPT
    assert round(count_params(cfg.model_config(65)) / 1e6, 1) == 10.8   # ~10.7M w/o pos_emb


def test_cpu_preset_is_chapter_7s_toy_model():
    assert count_params(PRESETS["cpu"].model_config(65)) == 108_352


def test_preset_for_device():
    assert preset_for("cpu") is PRESETS["cpu"]
    assert preset_for("mps") is PRESETS["cpu-long"]
    cpu_long = PRESETS["cpu-long"]
    assert (cpu_long.L, cpu_long.h, cpu_long.d, cpu_long.T) == (4, 4, 128, 64)
    with pytest.raises(ValueError, match="unknown name 'gpu2'.*cpu-long"):
        preset("gpu2")


def test_config_rejects_impossible_runs_and_round_trips():
    with pytest.raises(ValueError, match="d=64 is not divisible by h=5"):
        TrainConfig(h=5)
    with pytest.raises(ValueError, match="min_lr"):
        TrainConfig(lr=1e-4, min_lr=1e-3)
    with pytest.raises(ValueError, match="warmup_steps"):
        TrainConfig(warmup_steps=-1)
    cfg = PRESETS["gpu"]
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown field 'n_layer'"):
        TrainConfig.from_dict({"n_layer": 3})


def test_cli_set_is_typed_by_the_field():
    got = parse_overrides(["L=4", "dropout=0.1", "compile=false", "betas=0.9,0.95",
                           "attn=explicit"])
    assert got == {"L": 4, "dropout": 0.1, "compile": False, "betas": (0.9, 0.95),
                   "attn": "explicit"}
    with pytest.raises(ValueError, match="FIELD=VALUE"):
        parse_overrides(["layers=4"])
    with pytest.raises(ValueError, match="'L=2.5': L takes an integer, got '2.5'"):
        parse_overrides(["L=2.5"])
    with pytest.raises(ValueError, match="betas takes numbers separated by commas"):
        parse_overrides(["betas=0.9;0.95"])
    with pytest.raises(ValueError, match="expected true, false or none"):
        parse_overrides(["tied=yes"])


def test_cli_resume_keeps_the_saved_config_and_checks_the_flags(tmp_path, capsys):
    from anatomy.train.__main__ import main

    common = ["--no-progress", "--device", "cpu", "--data", str(DATA), "--out", str(tmp_path)]
    assert main(["--preset", "tiny", "--max-steps", "4", "--eval-every", "2", *common]) == 0
    assert main(["--resume", "--max-steps", "6", "--no-compile", *common]) == 0
    saved = load_checkpoint(tmp_path / "ckpt.pt")
    assert saved["step"] == 6 and saved["config"]["eval_every"] == 2
    out, err = capsys.readouterr()
    assert "float32" in out
    # The schedule's change is said in one line, not a warning with a source path.
    note = restretch_note(4, dataclasses.replace(PRESETS["tiny"], max_steps=4),
                          dataclasses.replace(PRESETS["tiny"], max_steps=6))
    assert err.splitlines() == [f"python -m anatomy.train: warning: {note}"]
    with pytest.raises(SystemExit) as exit_:
        main(["--resume", "--max-steps", "8", "--precision", "float16", *common])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "precision='auto' saved vs 'float16' given" in err
    assert "the precision cannot change on a resume" in err
    assert "no --preset, --set or --precision" in err


def test_cli_help_says_a_new_max_steps_restretches_the_cosine():
    helps = {a.dest: " ".join(a.help.split()) for a in build_parser()._actions if a.help}
    assert "with --resume, a value other than the saved one re-stretches the cosine" in \
        helps["max_steps"]
    assert "a new --max-steps re-stretches the cosine" in helps["resume"]
    # A resume refuses another precision, so the help must not offer it as a change.
    assert "only --max-steps and --compile may change" in helps["resume"]
    assert "a --precision, --preset or --set must agree" in helps["resume"]


# ---- learning-rate schedule ----------------------------------------------------------------

def test_lr_schedule_warms_up_then_follows_a_cosine():
    cfg = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=110)
    assert lr_at(0, cfg) == pytest.approx(1e-4)                  # 1/10 of the peak
    assert lr_at(9, cfg) == pytest.approx(1e-3) == lr_at(10, cfg)
    assert lr_at(60, cfg) == pytest.approx((1e-3 + 1e-4) / 2)    # half way down the cosine
    assert lr_at(110, cfg) == pytest.approx(1e-4) == lr_at(500, cfg)
    warm = [lr_at(s, cfg) for s in range(10)]
    decay = [lr_at(s, cfg) for s in range(10, 111)]
    assert all(a < b for a, b in zip(warm, warm[1:], strict=False))
    assert all(a > b for a, b in zip(decay, decay[1:], strict=False))
    no_warmup = dataclasses.replace(cfg, warmup_steps=0)
    assert lr_at(0, no_warmup) == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="step must be >= 0"):
        lr_at(-1, cfg)


def test_a_new_end_on_resume_is_explained_with_the_jump_in_lr():
    saved = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=110)
    assert restretch_note(60, saved, saved) is None
    longer = dataclasses.replace(saved, max_steps=210)
    # A finished run extended: at step 110 the floor, 1e-4, becomes the middle of the new
    # cosine, (110 - 10) / (210 - 10) = half way down: (1e-3 + 1e-4) / 2.
    assert lr_at(110, saved) == pytest.approx(1e-4)
    assert lr_at(110, longer) == pytest.approx(5.5e-4)
    assert restretch_note(110, saved, longer) == (
        "resume: max_steps=210 instead of the saved 110 redraws the whole cosine, from the "
        "end of warmup (step 10) to the new end (step 210), and the run joins it at step 110: "
        "the learning rate jumps from 1.00e-04 to 5.50e-04 at the resume. To continue the "
        "saved schedule unchanged, resume with max_steps=110.")
    shorter = dataclasses.replace(saved, max_steps=70)
    assert lr_at(60, shorter) < lr_at(60, saved)                        # an earlier end: down
    assert f"jumps from {lr_at(60, saved):.2e} to {lr_at(60, shorter):.2e}" in \
        restretch_note(60, saved, shorter)
    assert "at step 5 stays 6.00e-04 but then follows the new curve" in \
        restretch_note(5, saved, longer)                               # still warming up


# ---- hardware: peak FLOP/s, MFU, precision -------------------------------------------------

@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA H200", 989e12), ("NVIDIA A100-SXM4-40GB", 312e12), ("NVIDIA L4", 121e12),
    ("NVIDIA L40S", 362e12), ("Tesla T4", 65e12), ("Tesla V100-SXM2-16GB", 125e12),
    ("NVIDIA A10G", None), ("NVIDIA GeForce GTX 1080", None),
])
def test_peak_flops_come_from_the_gpu_name(monkeypatch, name, peak):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert peak_flops("cuda") == peak


def test_mfu_is_none_off_known_gpus_and_exact_on_them(monkeypatch):
    assert peak_flops("cpu") is None and mfu(1e6, BABY_GPT, "cpu") is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100")
    flops = 6 * count_params(BABY_GPT) + 12 * 6 * 256 * 384     # 6N + 12 L T d
    assert mfu(1e5, BABY_GPT, "cuda") == pytest.approx(flops * 1e5 / 312e12)
    assert mfu(1e5, BABY_GPT, "cuda", world_size=2) == pytest.approx(flops * 1e5 / 624e12)


@pytest.mark.parametrize("capability, dtype, scaled", [
    ((7, 5), torch.float16, True), ((8, 0), torch.bfloat16, False),
    ((9, 0), torch.bfloat16, False)])
def test_precision_follows_compute_capability(monkeypatch, capability, dtype, scaled):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # T4 says so
    precision = choose_precision("cuda")
    assert precision.dtype == dtype
    assert precision.scaler.is_enabled() == scaled


def test_cpu_trains_in_float32():
    precision = choose_precision("cpu")
    assert precision.dtype is None and precision.name == "float32"
    assert not precision.scaler.is_enabled()
    assert pick_device().type in ("cpu", "cuda", "mps")


def test_precision_can_be_asked_for_and_is_refused_where_it_cannot_run(monkeypatch):
    assert choose_precision("cpu", "float32").dtype is None
    assert choose_precision("cpu", "bfloat16").dtype == torch.bfloat16
    half = choose_precision("cpu", "float16")
    assert half.dtype == torch.float16 and half.scaler.is_enabled() and half.name == "float16"
    with pytest.raises(ValueError, match="expected one of auto, float32, bfloat16, float16, "
                                         "got 'fp8'"):
        choose_precision("cpu", "fp8")
    with pytest.raises(ValueError, match="TrainConfig.precision: expected one of .* got 'bf16'"):
        TrainConfig(precision="bf16")
    with pytest.raises(ValueError, match="not on 'mps'"):
        choose_precision("mps", "float16")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    with pytest.raises(ValueError, match="needs compute capability 8.0 or later; Tesla T4 is "
                                         "7.5"):
        choose_precision("cuda", "bfloat16")
    assert choose_precision("cuda", "float32").dtype is None


# ---- the loop ------------------------------------------------------------------------------

def test_same_seed_gives_a_bitwise_identical_run():
    runs = [train(QUICK, progress=False, data_path=DATA, device="cpu") for _ in range(2)]
    a, b = runs
    assert len(a.step_loss) == 12
    assert a.step_loss == b.step_loss                # bitwise: floats compared exactly
    assert a.val_loss == b.val_loss and a.train_loss == b.train_loss
    for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values(),
                            strict=True):
        assert torch.equal(p, q), name
    other = train(dataclasses.replace(QUICK, seed=7), max_steps=2, progress=False,
                  data_path=DATA, device="cpu")
    assert other.step_loss != a.step_loss[:2]


def test_history_records_every_evaluation_and_learns():
    rows = []
    history = train(QUICK, progress=False, log=rows.append, data_path=DATA, device="cpu")
    assert history.step == [0, 4, 8, 12]
    assert [r["step"] for r in rows] == history.step
    assert set(rows[0]) == {"step", "train_loss", "val_loss", "lr"}
    assert abs(history.val_loss[0] - math.log(65)) < 0.1
    assert history.val_loss[-1] < history.val_loss[0] - 0.3
    assert history.lr == [lr_at(s, QUICK) for s in history.step]
    s = history.stats
    assert s["tokens_per_s"] > 0 and s["wall_s"] > 0 and s["steps_run"] == 12
    assert s["mfu"] is None and s["precision"] == "float32" and s["n_params"] == 15_872
    table = history.table(digits=2)
    assert table.splitlines()[1].split() == ["0", f"{history.train_loss[0]:.2f}",
                                             f"{history.val_loss[0]:.2f}"]
    assert "tok" not in table and "/s" not in table          # no timings in printed output
    assert History.from_dict(history.to_dict()) == history
    assert len(history.time_s) == 4 and history.time_s == sorted(history.time_s)
    assert 0 < history.time_s[0] <= history.time_s[-1] <= s["wall_s"]


def test_time_to_a_loss_is_the_first_evaluation_at_or_below_it():
    h = History(step=[0, 250, 500, 750], train_loss=[4.2, 2.0, 1.5, 1.4],
                val_loss=[4.2, 2.1, 1.47, 1.46], lr=[0.0] * 4, time_s=[1.0, 9.0, 17.5, 26.0])
    assert h.time_to(1.47) == (500, 17.5)
    assert h.time_to(4.2) == (0, 1.0)
    assert h.time_to(1.0) is None
    old = {k: v for k, v in h.to_dict().items() if k != "time_s"}   # an older checkpoint
    assert History.from_dict(old).time_s == [0.0] * 4


def _cut_at(step: int):
    def log(row):
        if row["step"] == step:
            raise KeyboardInterrupt
    return log


def test_resuming_with_a_new_max_steps_warns_and_with_the_saved_one_does_not(tmp_path):
    cfg = dataclasses.replace(QUICK, max_steps=8, eval_every=2, ckpt_every=2, eval_iters=1)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "a", progress=False, log=_cut_at(6), data_path=DATA,
              device="cpu")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ScheduleChangedWarning)
        same = train(None, tmp_path / "a", max_steps=8, resume=True, progress=False,
                     data_path=DATA, device="cpu")
    assert same.step[-1] == 8
    longer = dataclasses.replace(cfg, max_steps=16)
    with pytest.warns(ScheduleChangedWarning) as caught:
        more = train(None, tmp_path / "b", max_steps=16, resume=True, progress=False,
                     data_path=DATA, device="cpu")
    assert len(caught) == 1 and caught[0].filename == __file__     # points at the caller
    assert str(caught[0].message) == restretch_note(6, cfg, longer)
    assert f"jumps from {lr_at(6, cfg):.2e} to {lr_at(6, longer):.2e}" in str(caught[0].message)
    assert lr_at(6, longer) > lr_at(6, cfg)
    # ...and the run did what the warning says: from step 6 on it follows the longer cosine.
    assert more.lr[more.step.index(8)] == lr_at(8, longer) != lr_at(8, cfg)


def test_the_loop_checks_its_data_once_and_its_steps_read_no_ids(monkeypatch):
    real = gpt_torch.check_token_ids
    in_loop, in_forward = [], []

    def spy(calls):
        def check(ids, V, name="ids"):
            calls.append((ids.numel(), V, name))
            real(ids, V, name)
        return check

    monkeypatch.setattr(loop, "check_token_ids", spy(in_loop))
    monkeypatch.setattr(gpt_torch, "check_token_ids", spy(in_forward))
    cfg = dataclasses.replace(QUICK, max_steps=3, eval_every=3, eval_iters=1)
    history = train(cfg, progress=False, data_path=DATA, device="cpu")
    assert len(history.step_loss) == 3 and history.step == [0, 3]     # 3 steps, 2 evaluations
    assert in_loop == [(1_115_394, 65, "data")]                        # the whole text, once
    assert in_forward == []                                            # no forward checked ids
    with pytest.raises(ValueError, match=r"\[0, 65\), got max 65"):
        history.model(torch.tensor([[0, 65]]))                         # the user's calls are
    assert in_forward == [(2, 65, "ids")]                              # checked again


def test_training_on_a_text_of_your_own(tmp_path):
    cfg = dataclasses.replace(QUICK, max_steps=1, eval_every=1, eval_iters=1)    # T = 32
    own = tmp_path / "my_text.txt"
    text = "the cat sat on the mat; " * 14                                # 336 characters
    own.write_text(text[:321])
    with pytest.warns(UncheckedTextWarning, match=r"training on .*my_text.txt \(321 characters"):
        history = train(cfg, progress=False, data_path=own, device="cpu")
    assert history.tokenizer.vocab == "".join(sorted(set(text)))
    assert history.model.cfg.V == len(set(text)) and len(history.step_loss) == 1
    # 320 characters split 288 / 32: the validation split lacks one window of T + 1 = 33.
    own.write_text(text[:320])
    with pytest.warns(UncheckedTextWarning), pytest.raises(
            DataError, match=r"has 320 character\(s\), too few for T=32: .* at least 321 "):
        train(cfg, progress=False, data_path=own, device="cpu")


def test_sampling_from_the_trained_model():
    from anatomy.sampling import sample

    history = train(QUICK, progress=False, data_path=DATA, device="cpu")
    text = sample(history.model, history.tokenizer, "ROMEO:", 40, temperature=0.8, top_k=10,
                  generator=torch.Generator().manual_seed(0))
    assert text.startswith("ROMEO:") and len(text) == 46


def test_fresh_run_does_not_clobber_a_checkpoint(tmp_path):
    train(QUICK, tmp_path, max_steps=2, progress=False, data_path=DATA, device="cpu")
    with pytest.raises(FileExistsError, match="resume=True"):
        train(QUICK, tmp_path, progress=False, data_path=DATA, device="cpu")
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        train(QUICK, tmp_path / "empty", resume=True, progress=False, data_path=DATA)
    with pytest.raises(ValueError, match="d=32 saved vs 64 given"):
        train(dataclasses.replace(QUICK, d=64), tmp_path, resume=True, progress=False,
              data_path=DATA, device="cpu")


@pytest.mark.parametrize("precision, tolerance", [("bfloat16", 0.05), ("float16", 0.01)])
def test_16_bit_autocast_trains_close_to_float32(precision, tolerance):
    # The GPU's mixed-precision path (autocast, and for float16 the grad scaler's scale,
    # unscale before clipping, step and update) run on the CPU, where autocast works too.
    full = train(QUICK, progress=False, data_path=DATA, device="cpu")
    half = train(dataclasses.replace(QUICK, precision=precision), progress=False,
                 data_path=DATA, device="cpu")
    assert half.stats["precision"] == precision
    assert all(math.isfinite(v) for v in half.step_loss)
    np.testing.assert_allclose(half.val_loss, full.val_loss, rtol=0, atol=tolerance)
    assert half.val_loss[-1] < half.val_loss[0] - 0.3


def test_float16_resume_restores_the_grad_scaler_exactly(tmp_path):
    cfg = dataclasses.replace(QUICK, precision="float16", dropout=0.1, ckpt_every=4)

    def cut_at_8(row):
        if row["step"] == 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path, progress=False, log=cut_at_8, data_path=DATA, device="cpu")
    saved = load_checkpoint(tmp_path / "ckpt.pt")
    assert saved["step"] == 8 and saved["scaler"]["scale"] > 1.0      # a live scaler state
    resumed = train(None, tmp_path, resume=True, progress=False, data_path=DATA, device="cpu")
    whole = train(cfg, progress=False, data_path=DATA, device="cpu")
    assert resumed.step_loss == whole.step_loss
    for (name, p), q in zip(resumed.model.state_dict().items(),
                            whole.model.state_dict().values(), strict=True):
        assert torch.equal(p, q), name
    kept = saved["history"]["time_s"]                                 # evaluations 0 and 4
    assert len(kept) == 2 and resumed.time_s[:2] == kept
    assert resumed.time_s == sorted(resumed.time_s)                   # the clock carried on


def test_torch_compile_gives_the_eager_losses_and_plain_checkpoints(tmp_path):
    # torch.compile is on by default on CUDA; on the CPU it compiles to C++ (needs a C
    # compiler, which this machine has) in about fifteen seconds.
    cfg = dataclasses.replace(QUICK, max_steps=6, eval_every=3)
    eager = train(cfg, progress=False, data_path=DATA, device="cpu")
    compiled = train(dataclasses.replace(cfg, compile=True), tmp_path, progress=False,
                     data_path=DATA, device="cpu")
    assert compiled.stats["compiled"] and not eager.stats["compiled"]
    np.testing.assert_allclose(compiled.step_loss, eager.step_loss, rtol=1e-5)
    np.testing.assert_allclose(compiled.val_loss, eager.val_loss, rtol=1e-5)
    keys = load_checkpoint(tmp_path / "ckpt.pt")["model"].keys()
    assert set(keys) == set(eager.model.state_dict()) and not any("_orig_mod" in k for k in keys)


def test_torchrun_two_processes_follow_the_single_process_curve(tmp_path):
    cfg = dataclasses.replace(PRESETS["tiny"], dropout=0.0, max_steps=16, eval_every=4)
    one = train(cfg, progress=False, data_path=DATA, device="cpu")
    two = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "anatomy.train", "--preset", "tiny", "--set", "dropout=0.0", "--max-steps", "16",
         "--eval-every", "4", "--no-progress", "--device", "cpu", "--data", str(DATA),
         "--out", str(tmp_path)],
        env=dict(_env(), OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=180)
    assert two.returncode == 0, two.stderr[-2000:]
    assert "2 process(es)" in two.stdout and two.stdout.count("done:") == 1  # rank 0 alone
    saved = load_checkpoint(tmp_path / "ckpt.pt")["history"]
    # Tolerance: the all-reduce averages two float32 half-batch means, which reorders sums;
    # over 16 steps that moves the loss by about 1e-7 relative.
    for key in ("step_loss", "train_loss", "val_loss"):
        x, y = np.array(getattr(one, key)), np.array(saved[key])
        assert x.shape == y.shape and len(x) > 0
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=0, err_msg=key)
    assert one.step_loss[-1] < one.step_loss[0] - 0.3           # it did learn
