"""The CI scripts that are not tests themselves: kernel families and the stage timer."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _ci import ROOT, ci_script

kernels = ci_script("kernels")
stages = ci_script("stages")

AVX512_HOST = {"torch": "AVX512", "mkl": True, "mkl_cnr": "OFF", "openblas": "SkylakeX",
               "numpy_on": ["X86_V3", "X86_V4", "AVX512_ICL"]}


def test_the_other_family_is_one_step_down_for_every_library():
    env, said = kernels.other_family(AVX512_HOST)
    assert env == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE",
                   "OPENBLAS_CORETYPE": "Haswell", "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL"}
    assert said == []
    avx2 = {**AVX512_HOST, "torch": "AVX2", "openblas": "Haswell", "numpy_on": ["X86_V3"]}
    env, _ = kernels.other_family(avx2)
    assert env["ATEN_CPU_CAPABILITY"] == "default" and env["OPENBLAS_CORETYPE"] == "Sandybridge"
    assert "NPY_DISABLE_CPU_FEATURES" not in env          # nothing above AVX2 to switch off


def test_a_library_on_its_lowest_family_is_said_not_forced():
    lowest = {"torch": "DEFAULT", "mkl": False, "mkl_cnr": None, "openblas": "Prescott",
              "numpy_on": []}
    env, said = kernels.other_family(lowest)
    assert env == {}
    assert said == ["torch: DEFAULT is its lowest family here; not forced",
                    "OpenBLAS: no lower family known for Prescott; not forced"]
    with pytest.raises(SystemExit, match="no library has another kernel family"):
        kernels.verify(lowest, env)


def test_a_switch_that_did_not_take_effect_fails_loudly(monkeypatch):
    # the library reports its native family although the switch asked for another one
    monkeypatch.setattr(kernels, "probe", lambda env: AVX512_HOST)
    env, _ = kernels.other_family(AVX512_HOST)
    with pytest.raises(SystemExit, match=r"did not take effect: torch AVX512 -> AVX512 "
                                         r"\(asked for AVX2\)"):
        kernels.verify(AVX512_HOST, env)


def test_the_switches_take_effect_on_this_machine():
    native = kernels.probe(kernels._base_env())
    env, _ = kernels.other_family(native)
    lines = kernels.verify(native, env)                   # raises if one was ignored
    assert lines and all("->" in line for line in lines)


def test_kernels_cli_refuses_a_wrong_command_in_one_line():
    done = subprocess.run([sys.executable, str(ROOT / ".ci" / "kernels.py"), "bogus"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "kernels: expected show, env or run; got bogus. usage: kernels.py show | env | run "
        "-- CMD ..."]


def test_stages_time_each_stage_and_stop_at_the_first_failure(tmp_path, monkeypatch, capsys):
    makefile = tmp_path / "Makefile"
    makefile.write_text("ok:\n\t@true\nbad:\n\t@false\nnever:\n\t@true\n")
    monkeypatch.chdir(tmp_path)
    assert stages.main(["ok", "bad", "never"]) != 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("make test: failed; seconds per stage: ok 0 s, bad 0 s (FAILED);")
    assert "never" not in last
    assert stages.main(["ok"]) == 0
    assert "all checks passed" in capsys.readouterr().out
    assert stages.main([]) == 2
