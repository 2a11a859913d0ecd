"""anatomy.checkpoint: atomic, verified checkpoints, and an exact resume after a real kill."""

import dataclasses
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from _local_data import DATA, ROOT

from anatomy import checkpoint
from anatomy.checkpoint import (
    CheckpointError,
    capture_rng,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)
from anatomy.train import PRESETS, load_trained, train
from anatomy.train.schedule import ScheduleChangedWarning


def _state(step: int) -> dict:
    g = torch.Generator().manual_seed(step)
    return {"step": step, "model": {"w": torch.randn(64, 64, generator=g)},
            "history": {"loss": [1.5, 1.25], "stats": {"mfu": None}}, "vocab": "ab",
            "rng": capture_rng(g)}


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_round_trip_and_plain_weights_only_load(tmp_path):
    path = save_checkpoint(_state(1), tmp_path / "ckpt.pt")
    loaded = load_checkpoint(path)
    assert _same({k: v for k, v in loaded.items() if k != "format"}, _state(1))
    raw = torch.load(path, weights_only=True)          # an ordinary file for torch.load too
    assert raw["step"] == 1 and len(raw["digest"]) == 64


def test_each_save_keeps_the_previous_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    for step in (1, 2, 3):
        save_checkpoint(_state(step), path)
    assert load_checkpoint(path)["step"] == 3
    assert load_checkpoint(tmp_path / "ckpt.prev.pt")["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.prev.pt", "ckpt.pt"]


def test_truncated_checkpoint_is_named_and_the_previous_survives(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(_state(1), path)
    save_checkpoint(_state(2), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    message = str(err.value)
    assert str(path) in message and "corrupt or truncated" in message
    assert "ckpt.prev.pt" in message and "weights_only=False" not in message
    assert load_checkpoint(tmp_path / "ckpt.prev.pt")["step"] == 1


@pytest.mark.parametrize("where", ["middle", "everywhere"])
def test_garbage_bytes_are_caught(tmp_path, where):
    path = save_checkpoint(_state(1), tmp_path / "ckpt.pt")
    data = bytearray(path.read_bytes())
    if where == "middle":
        # Inside the weights (stored uncompressed): torch.load alone returns wrong numbers.
        mid = data.find(_state(1)["model"]["w"].numpy().tobytes()[:256]) + 100
        assert mid > 100
        data[mid:mid + 8] = bytes(b ^ 0xFF for b in data[mid:mid + 8])
        path.write_bytes(bytes(data))
        assert torch.load(path, weights_only=True)["step"] == 1
    else:
        path.write_bytes(np.random.default_rng(0).bytes(len(data)))
    with pytest.raises(CheckpointError, match=f"{path}.* corrupt"):
        load_checkpoint(path)


def test_a_file_that_is_not_ours_is_refused(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(CheckpointError, match="not a checkpoint written by anatomy"):
        load_checkpoint(path)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt")


def test_a_save_that_dies_midway_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    path = save_checkpoint(_state(1), tmp_path / "ckpt.pt")

    def dies_midway(obj, f):
        f.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.torch, "save", dies_midway)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(_state(2), path)
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]      # no temporary left


def test_every_random_state_round_trips():
    gen = torch.Generator().manual_seed(3)
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    state = capture_rng(gen)

    def draws():
        return (torch.rand(3).tolist(), np.random.rand(3).tolist(), random.random(),
                torch.rand(3, generator=gen).tolist())

    first = draws()
    restore_rng(state, gen)
    assert draws() == first


def test_resuming_from_a_corrupt_checkpoint_is_a_clear_error(tmp_path):
    cfg = dataclasses.replace(PRESETS["tiny"], max_steps=4, ckpt_every=2, eval_every=4,
                              eval_iters=1)
    train(cfg, tmp_path, progress=False, data_path=DATA, device="cpu")
    ckpt = tmp_path / "ckpt.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="corrupt or truncated.*ckpt.prev.pt is kept"):
        train(cfg, tmp_path, max_steps=6, resume=True, progress=False, data_path=DATA,
              device="cpu")
    assert load_checkpoint(tmp_path / "ckpt.prev.pt")["step"] == 2


def test_a_finished_run_can_be_extended(tmp_path):
    cfg = dataclasses.replace(PRESETS["tiny"], max_steps=4, eval_every=2, eval_iters=1)
    train(cfg, tmp_path, progress=False, data_path=DATA, device="cpu")
    with pytest.warns(ScheduleChangedWarning, match=r"redraws the whole cosine, from the end "
                                                    r"of warmup \(step 5\) to the new end "
                                                    r"\(step 6\)"):
        more = train(None, tmp_path, max_steps=6, resume=True, progress=False,
                     data_path=DATA, device="cpu")      # cfg=None: the saved config
    assert more.step == [0, 2, 4, 6] and len(more.step_loss) == 6
    assert more.stats["steps_run"] == 2
    assert load_checkpoint(tmp_path / "ckpt.pt")["config"]["max_steps"] == 6


def test_load_trained_gives_back_the_trained_model(tmp_path):
    cfg = dataclasses.replace(PRESETS["tiny"], max_steps=3, eval_every=3, eval_iters=1)
    history = train(cfg, tmp_path, progress=False, data_path=DATA, device="cpu")
    model, tokenizer, saved = load_trained(tmp_path)
    ids = torch.tensor([tokenizer.encode("ROMEO:")])
    assert torch.equal(model(ids), history.model.eval()(ids))
    assert saved.val_loss == history.val_loss and not model.training


# ---- the real thing: SIGKILL a training process, resume it, compare ------------------------

def _cli(out: Path, *extra: str) -> list[str]:
    # Big enough that a step takes tens of milliseconds, so the kill lands mid-run; dropout on,
    # so a resume that failed to restore the torch RNG would draw different masks.
    return [sys.executable, "-m", "anatomy.train", "--preset", "tiny", "--set", "B=32",
            "--set", "T=64", "--set", "d=64", "--set", "L=2", "--set", "dropout=0.1",
            "--max-steps", "60", "--ckpt-every", "5", "--eval-every", "25", "--no-progress",
            "--device", "cpu", "--data", str(DATA), "--out", str(out), *extra]


def test_killed_run_resumes_to_bit_identical_weights(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")     # the same arithmetic in every process
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "code"),
                                                      env.get("PYTHONPATH")]))
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    reference = subprocess.Popen(_cli(whole), env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)
    victim = subprocess.Popen(_cli(killed), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    ckpt, step, deadline = killed / "ckpt.pt", 0, time.monotonic() + 120
    while step < 10 and victim.poll() is None and time.monotonic() < deadline:
        if ckpt.exists():
            step = load_checkpoint(ckpt)["step"]
        time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL, victim.stderr.read().decode()[-2000:]
    k = load_checkpoint(ckpt)["step"]
    assert 10 <= k < 60, f"the kill should land mid-run, checkpoint at step {k}"

    resumed = subprocess.run(_cli(killed, "--resume"), env=env, capture_output=True,
                             text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert reference.wait(timeout=180) == 0, reference.stderr.read().decode()[-2000:]

    a, b = load_checkpoint(whole / "ckpt.pt"), load_checkpoint(ckpt)
    assert a["step"] == b["step"] == 60
    for name, weight in a["model"].items():
        assert torch.equal(weight, b["model"][name]), name
    assert _same(a["optimizer"], b["optimizer"])
    assert a["history"]["step_loss"] == b["history"]["step_loss"]
    assert a["history"]["val_loss"] == b["history"]["val_loss"]
