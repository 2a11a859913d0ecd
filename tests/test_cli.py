"""python -m anatomy.train (anatomy/train/__main__.py): a user's mistake is one line on stderr
and exit status 2, as argparse answers a bad flag; a bug keeps its traceback."""

import dataclasses
import os
import subprocess
import sys

import pytest
import torch
from _local_data import DATA, ROOT

from anatomy.train import PRESETS, loop, train
from anatomy.train.__main__ import main

PROG = "python -m anatomy.train"


def _fails(argv: list[str], capsys) -> str:
    """Run the CLI in-process; return its one stderr line after checking the exit status."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PROG}: error: "), err
    return lines[0]


@pytest.fixture
def base(tmp_path) -> list[str]:
    return ["--preset", "tiny", "--no-progress", "--device", "cpu", "--data", str(DATA),
            "--out", str(tmp_path / "run")]


@pytest.mark.parametrize("flags, says", [
    (["--set", "B=0"], "impossible configuration: TrainConfig.B: expected a positive integer, "
                       "got 0; change that value"),
    (["--set", "lr=abc"], "--set 'lr=abc': lr takes a number, got 'abc'"),
    (["--set", "nosuchfield=1"], "--set 'nosuchfield=1': expected FIELD=VALUE with FIELD one "
                                 "of name, L, h, d, T"),
    (["--set", "h=5"], "d=32 is not divisible by h=5 heads"),
    (["--eval-every", "0"], "TrainConfig.eval_every: expected a positive integer, got 0"),
    (["--max-steps", "0"], "--max-steps: expected a positive number of steps, got 0"),
    (["--device", "nonsense"], "--device: expected one of cpu, cuda, cuda:N or mps, got "
                               "'nonsense'"),
    (["--sample", "5", "--top-k", "0"], "--top-k: expected a positive integer, got 0"),
    (["--sample", "5", "--temperature", "-1"], "--temperature: expected >= 0"),
    (["--sample", "-3"], "--sample: expected a number of characters >= 0, got -3"),
])
def test_a_bad_flag_is_one_line_and_status_2(capsys, base, flags, says):
    assert says in _fails([*base, *flags], capsys)


def test_top_k_above_the_vocabulary_is_one_line_after_training(capsys, base):
    line = _fails([*base, "--max-steps", "1", "--sample", "5", "--top-k", "999"], capsys)
    assert "--top-k: top_k: expected an integer in [1, V] = [1, 65], got 999" in line


def test_cuda_asked_for_where_there_is_none(capsys, base, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    line = _fails([*base, "--device", "cuda"], capsys)
    assert "--device 'cuda': CUDA is not available here" in line
    assert "use 'cpu', or leave the device out" in line


def test_missing_or_unusable_data(capsys, base, tmp_path):
    missing = tmp_path / "my_text.txt"
    line = _fails([*base, "--data", str(missing)], capsys)
    assert f"--data {missing}: no such file" in line
    missing.write_text("")
    assert f"{missing} is empty" in _fails([*base, "--data", str(missing)], capsys)
    folder = tmp_path / "empty_folder"
    folder.mkdir()
    assert "nor a folder holding tinyshakespeare.txt" in _fails([*base, "--data", str(folder)],
                                                                 capsys)


def test_a_corrupt_tiny_shakespeare_is_refused_in_one_line(capsys, base, tmp_path):
    bad = tmp_path / "tinyshakespeare.txt"
    bad.write_bytes((DATA / "tinyshakespeare.txt" if DATA.is_dir() else DATA).read_bytes()[:-1])
    assert f"{bad} is not the expected Tiny Shakespeare file: SHA-256" in _fails(
        [*base, "--data", str(bad)], capsys)


def test_resume_with_nothing_or_garbage_to_resume(capsys, base, tmp_path):
    run = tmp_path / "run"
    line = _fails([*base, "--resume"], capsys)
    assert f"--resume: nothing to resume, {run / 'ckpt.pt'} does not exist" in line
    no_out = [a for a in base if a not in ("--out", str(run))]
    assert "--resume needs --out" in _fails([*no_out, "--resume"], capsys)
    run.mkdir()
    (run / "ckpt.pt").write_bytes(bytes(range(256)) * 8)        # garbage
    for extra in ([], ["--no-compile"]):       # read by train(), or first by the CLI itself
        line = _fails(["--resume", *extra, *base[2:]], capsys)
        assert f"{run / 'ckpt.pt'} is corrupt or truncated" in line
        assert "use --overwrite without --resume" in line
    line = _fails(base, capsys)                                    # a fresh run over it
    assert "already exists; add --resume to continue that run, or --overwrite" in line


def test_resume_with_another_config_or_text(capsys, base, tmp_path):
    assert main([*base, "--max-steps", "2", "--eval-every", "2", "--set", "eval_iters=1"]) == 0
    capsys.readouterr()
    line = _fails([*base, "--resume", "--set", "d=64"], capsys)
    assert "the config differs from the one saved in" in line and "d=32 saved vs 64" in line
    own = tmp_path / "my_text.txt"
    own.write_text("to be or not to be, that is the question. " * 20)
    with pytest.raises(SystemExit) as exit_:
        main(["--resume", "--no-progress", "--device", "cpu", "--data", str(own), "--out",
              str(tmp_path / "run")])
    err = capsys.readouterr().err.splitlines()
    assert exit_.value.code == 2
    assert err[0].startswith(f"{PROG}: warning: training on {own}")   # the unchecked text
    assert err[1].startswith(f"{PROG}: error: resume: the checkpoint's vocabulary")
    assert len(err) == 2


def test_a_bug_inside_training_keeps_its_traceback(base, monkeypatch):
    # Only the library's input errors are user errors: a ValueError from a bug in the loop
    # (here planted in lr_at) must come through as itself, not as a one-line message.
    def broken(step, cfg):
        raise ValueError("a bug in the schedule")

    monkeypatch.setattr(loop, "lr_at", broken)
    with pytest.raises(ValueError, match="a bug in the schedule"):
        main([*base, "--max-steps", "2"])


def test_a_mistake_in_a_real_process_is_one_line_and_status_2(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "code"),
                                                      env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "anatomy.train", "--set", "lr=abc",
                           "--out", str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr == f"{PROG}: error: --set 'lr=abc': lr takes a number, got 'abc'\n"
    assert done.stdout == ""


def test_training_on_your_own_text_from_the_command_line(capsys, tmp_path):
    own = tmp_path / "my_text.txt"
    text = "ali makan nasi lemak, siti minum teh tarik. " * 20
    own.write_text(text)
    assert main(["--preset", "tiny", "--max-steps", "2", "--eval-every", "2", "--set",
                 "eval_iters=1", "--no-progress", "--device", "cpu", "--data", str(own),
                 "--sample", "20"]) == 0
    out, err = capsys.readouterr()
    assert err == (f"{PROG}: warning: training on {own} ({len(text):,} characters, "
                   f"{len(set(text))} distinct), not Tiny Shakespeare: checksum not checked\n")
    # "\n" is not in this text's vocabulary, so the sample starts from its first character.
    assert out.splitlines()[-1].startswith(sorted(set(text))[0])
    assert len(out.splitlines()[-1]) == 21


def test_library_errors_keep_their_types_for_callers(tmp_path):
    # train() itself raises, with the messages the CLI prints; only the CLI converts them.
    cfg = dataclasses.replace(PRESETS["tiny"], max_steps=2)
    with pytest.raises(ValueError, match="device: expected one of cpu, cuda"):
        train(cfg, progress=False, data_path=DATA, device="nonsense")
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        train(None, tmp_path, resume=True, progress=False, data_path=DATA, device="cpu")


def test_offline_with_no_copy_of_the_data_is_one_line(capsys, tmp_path, monkeypatch):
    import urllib.error

    from anatomy import text

    def offline(*args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(text.urllib.request, "urlopen", offline)
    monkeypatch.delenv("ANATOMY_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    line = _fails(["--preset", "tiny", "--no-progress", "--device", "cpu",
                   "--out", str(tmp_path / "run")], capsys)
    assert "could not download Tiny Shakespeare" in line and "ANATOMY_DATA" in line
