"""Every exercise in the registry: the reference passes, an untouched stub is "not attempted",
each known-wrong answer fails with its own explanation, and checks print one line and never
raise. The mutation test (test_mutants.py) and the chapter scans (test_chapter_exercises.py)
hold the checks to more."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import anatomy.exercises as exercises_module
from anatomy.exercises import (
    FAILED,
    KINDS,
    NOT_ATTEMPTED,
    PASSED,
    Exercise,
    chapter_of,
    check,
    progress,
    registry,
    solution,
)
from anatomy.exercises._core import Result, Solution, Wrong, same

EXERCISES = registry()


def _stub(*args, **kwargs):
    raise NotImplementedError("replace this with your code")


def _unanswered(exercise: Exercise):
    """What the notebook's exercise cell holds before the reader touches it."""
    if exercise.kind == "debug":
        return exercise.given
    return _stub if exercise.takes_function else ...


def test_registry_is_populated_and_ordered():
    ids = list(EXERCISES)
    assert all(isinstance(ex, Exercise) for ex in EXERCISES.values())
    assert ids[:3] == ["1.1", "1.2", "1.3"]
    chapters = [ex.chapter for ex in EXERCISES.values()]
    assert chapters == sorted(chapters, key=lambda c: (not c.isdigit(), int(c) if c.isdigit()
                                                       else 0, c))


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
def test_reference_passes(exercise_id, capsys):
    exercise = EXERCISES[exercise_id]
    for seed in range(12):              # many draws of the random cases
        result = exercise.check(exercise.reference, seed=seed, quiet=seed > 0)
        assert result.status == PASSED, f"seed {seed}: {result.message}"
    lines = capsys.readouterr().out
    assert lines.startswith(f"Exercise {exercise_id}: passed")
    assert all(len(line) <= 78 for line in lines.splitlines()), lines


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
def test_unanswered_stub_is_not_attempted(exercise_id, capsys):
    exercise = EXERCISES[exercise_id]
    result = exercise.check(_unanswered(exercise))
    assert result.status == NOT_ATTEMPTED, result.message
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
def test_known_wrong_answers_fail_with_their_message(exercise_id):
    exercise = EXERCISES[exercise_id]
    assert exercise.wrong_answers, f"exercise {exercise_id} has no known-wrong answer"
    for wrong, fragment in exercise.wrong_answers:
        for seed in (0, 1, 2):
            result = exercise.check(wrong, quiet=True, seed=seed)
            name = getattr(wrong, "__name__", repr(wrong))
            assert result.status == FAILED, f"{name} was not caught: {result.message}"
            assert fragment in result.message, f"{name}: {result.message}"


@pytest.mark.parametrize("exercise_id", list(EXERCISES))
@pytest.mark.parametrize("answer", [None, 42, lambda *a, **k: None,
                                    lambda *a, **k: "text", lambda *a, **k: 1 / 0,
                                    lambda *a, **k: np.full((2, 2), np.nan)])
def test_checks_never_raise(exercise_id, answer):
    result = EXERCISES[exercise_id].check(answer, quiet=True)
    assert result.status == FAILED and result.message.startswith(("failed: ", "a different"))


@pytest.mark.parametrize("exercise_id", [i for i, ex in EXERCISES.items()
                                         if ex.kind == "debug"])
def test_the_given_buggy_function_fails_once_it_is_changed(exercise_id):
    # The untouched function is "not attempted"; its bug must still be a real failure, so a
    # copy of it under another name with the same behaviour is caught by the check itself.
    exercise = EXERCISES[exercise_id]
    for seed in range(3):
        with pytest.raises(Wrong):
            exercise.diagnose(exercise.given, np.random.default_rng(seed))


def test_kinds_are_declared():
    assert {ex.kind for ex in EXERCISES.values()} <= set(KINDS)
    with pytest.raises(ValueError, match="kind must be one of"):
        Exercise(id="0.1", title="t", kind="guess", reference=1, diagnose=lambda a, r: None)
    with pytest.raises(ValueError, match="needs `given`"):
        Exercise(id="0.1", title="t", kind="debug", reference=print,
                 diagnose=lambda a, r: None)


def _own(fn):
    """The reader's own function in a test: `check` refuses the library's by identity."""
    return lambda *args, **kwargs: fn(*args, **kwargs)


def test_check_by_id_and_unknown_id(capsys):
    assert check("1.1", _own(EXERCISES["1.1"].reference)).status == PASSED
    assert capsys.readouterr().out.startswith("Exercise 1.1: passed")
    with pytest.raises(KeyError, match="no exercise '9.99'"):
        check("9.99", print)


def test_fresh_random_inputs_differ_between_calls():
    # A check with no seed draws new random cases every time, so the failure message for a
    # function that is wrong only on random inputs names different shapes from call to call.
    def wrong_on_random(z, axis=-1):
        if z.dtype == np.float32:          # only the random cases use float32
            return np.zeros_like(z)
        return EXERCISES["1.1"].reference(z, axis=axis)
    messages = {EXERCISES["1.1"].check(wrong_on_random, quiet=True).message for _ in range(8)}
    assert len(messages) > 1, messages


def test_solution_is_folded_html_and_does_not_count_as_progress(capsys):
    exercises_module._RESULTS.clear()
    shown = solution("1.1")
    assert isinstance(shown, Solution)
    html = shown._repr_html_()
    assert html.startswith("<details") and "<summary>" in html and " open" not in html
    assert "def softmax" in repr(shown)
    printed = capsys.readouterr().out
    assert printed.startswith("Exercise 1.1 (the library's solution): passed")
    status = progress(1)
    assert status["1.1"] != PASSED


def test_progress_reports_this_sessions_checks(capsys):
    check("1.3", ...)
    check("1.4", _own(EXERCISES["1.4"].reference))
    status = progress(1)
    out = capsys.readouterr().out
    assert status["1.4"] == PASSED and status["1.3"] == NOT_ATTEMPTED
    assert f"Chapter 1: {sum(s == PASSED for s in status.values())} of " \
           f"{len(chapter_of(1))} exercises passed" in out
    assert all(len(line) <= 78 for line in out.splitlines())


def test_debug_solution_shows_the_fix_as_a_diff():
    debug = next(ex for ex in EXERCISES.values() if ex.kind == "debug")
    text = repr(debug.solution())
    assert "--- as given" in text and "+++ fixed" in text


def test_verdicts_wrap_to_the_column():
    line = Result("1.1", FAILED, "failed: " + "word " * 40).line
    assert all(len(part) <= 78 for part in line.splitlines())
    assert all(part.startswith("    ") for part in line.splitlines()[1:])


def test_same_compares_nested_outputs():
    assert same((np.ones(2), {"a": 1.0}), (np.ones(2) + 1e-9, {"a": 1.0}))
    assert not same((np.ones(2),), [np.ones(2)])
    assert same(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))
    assert not same(np.ones(2), np.ones(3))


def test_checking_a_numpy_chapter_does_not_import_torch():
    # Chapters 1-8 run without torch; only chapter 9's exercise module imports it.
    code = ("import sys\nfrom anatomy.exercises import check\nfrom anatomy.attention import "
            "softmax\nassert check('1.1', lambda z, axis=-1: softmax(z, axis))\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
