"""Auto-checked exercises, one module per chapter (``ch01``, ``ch02``, ...).

In a notebook::

    from anatomy.exercises import check
    check("1.1", softmax)          # prints one line: not attempted / failed: why / passed

``registry()`` maps every exercise id to its :class:`Exercise`, whose ``.reference`` is the
library function that solves it and whose ``.check(fn)`` prints and returns a :class:`Result`.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable

from ._core import FAILED, NOT_ATTEMPTED, PASSED, Exercise, Result, Wrong

__all__ = ["Exercise", "Result", "Wrong", "register", "registry", "check", "solution",
           "NOT_ATTEMPTED", "FAILED", "PASSED"]

_EXERCISES: dict[str, Exercise] = {}


def register(exercise: Exercise) -> Exercise:
    """Add an exercise to the registry (called by the chapter modules at import)."""
    if exercise.id in _EXERCISES and _EXERCISES[exercise.id] is not exercise:
        raise ValueError(f"exercise id {exercise.id!r} is registered twice")
    _EXERCISES[exercise.id] = exercise
    return exercise


def registry() -> dict[str, Exercise]:
    """Every exercise of the book, keyed by id ("1.1", "1.2", "1.C", ...), in book order."""
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("ch"):
            importlib.import_module(f"{__name__}.{info.name}")
    return dict(sorted(_EXERCISES.items(), key=lambda item: _order(item[0])))


def _order(exercise_id: str) -> tuple:
    chapter, _, rest = exercise_id.partition(".")
    return (int(chapter), not rest.isdigit(), int(rest) if rest.isdigit() else rest)


def _lookup(exercise_id: str) -> Exercise:
    # Import the exercise's own chapter module first, and every module only when the id is
    # not there: checking a NumPy chapter's exercise then never imports chapter 9's (torch).
    chapter = exercise_id.partition(".")[0]
    if chapter.isdigit() and importlib.util.find_spec(f"{__name__}.ch{int(chapter):02d}"):
        importlib.import_module(f"{__name__}.ch{int(chapter):02d}")
        if exercise_id in _EXERCISES:
            return _EXERCISES[exercise_id]
    exercises = registry()
    if exercise_id not in exercises:
        raise KeyError(f"no exercise {exercise_id!r}; known: {', '.join(exercises)}")
    return exercises[exercise_id]


def check(exercise_id: str, fn: Callable) -> Result:
    """Check the reader's ``fn`` against exercise ``exercise_id``; prints one line."""
    return _lookup(exercise_id).check(fn)


def solution(exercise_id: str) -> Result:
    """Show the library's solution to an exercise and run the same check on it."""
    return _lookup(exercise_id).solution()
