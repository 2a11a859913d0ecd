"""Every exercise in the registry: the reference passes, a stub is "not attempted", and each
known-wrong answer fails with its own explanation. Checks print one line and never raise."""

from __future__ import annotations

import numpy as np
import pytest

from anatomy.exercises import FAILED, NOT_ATTEMPTED, PASSED, Exercise, check, registry

EXERCISES = registry()


def _stub(*args, **kwargs):
    raise NotImplementedError("replace this with your code")


def test_registry_is_populated_and_ordered():
    ids = list(EXERCISES)
    assert ids, "no exercises registered"
    assert all(isinstance(ex, Exercise) for ex in EXERCISES.values())
    assert ids[:3] == ["1.1", "1.2", "1.C"]


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
def test_reference_passes(exercise_id, capsys):
    result = EXERCISES[exercise_id].check(EXERCISES[exercise_id].reference)
    line = capsys.readouterr().out
    assert result.status == PASSED, result.message
    assert line.count("\n") == 1 and "passed" in line


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
def test_stub_is_not_attempted(exercise_id, capsys):
    result = EXERCISES[exercise_id].check(_stub)
    assert result.status == NOT_ATTEMPTED
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
def test_known_wrong_answers_fail_with_their_message(exercise_id):
    exercise = EXERCISES[exercise_id]
    assert exercise.wrong_answers, f"exercise {exercise_id} has no known-wrong answer"
    for wrong, fragment in exercise.wrong_answers:
        result = exercise.check(wrong, quiet=True)
        assert result.status == FAILED, f"{wrong.__name__} was not caught"
        assert fragment in result.message, f"{wrong.__name__}: {result.message}"


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
@pytest.mark.parametrize("answer", [None, 42, lambda *a, **k: None,
                                    lambda *a, **k: "text", lambda *a, **k: 1 / 0,
                                    lambda *a, **k: np.full((2, 2), np.nan)])
def test_checks_never_raise(exercise_id, answer):
    result = EXERCISES[exercise_id].check(answer, quiet=True)
    assert result.status == FAILED and result.message.startswith("failed: ")


def test_check_by_id_and_unknown_id(capsys):
    assert check("1.1", EXERCISES["1.1"].reference).status == PASSED
    assert capsys.readouterr().out.startswith("Exercise 1.1: passed")
    with pytest.raises(KeyError, match="no exercise '9.99'"):
        check("9.99", print)


def test_checking_a_numpy_chapter_does_not_import_torch():
    # Chapters 1-8 run without torch; only chapter 9's exercise module imports it.
    import subprocess
    import sys

    code = ("import sys\nfrom anatomy.exercises import check\nfrom anatomy.attention import "
            "softmax\nassert check('1.1', softmax)\nassert 'torch' not in sys.modules, "
            "'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
