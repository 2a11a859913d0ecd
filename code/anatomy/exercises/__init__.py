"""Auto-checked exercises, one module per chapter (``ch01``, ``ch02``, ..., ``appendix``).

In a notebook::

    from anatomy.exercises import check, solution, progress
    check("1.1", my_softmax)   # one line: not attempted / failed: why / passed
    solution("1.1")            # the library's answer, folded until you open it
    progress(1)                # which of chapter 1's exercises you have passed so far

``registry()`` maps every exercise id to its :class:`Exercise` (``.kind``, ``.reference``,
``.check(answer)``); ``python -m anatomy.exercises.grade NOTEBOOK...`` grades whole notebooks.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from typing import Any

from ._core import (
    FAILED,
    KINDS,
    NOT_ATTEMPTED,
    PASSED,
    WIDTH,
    Exercise,
    Result,
    Solution,
    Wrong,
)

__all__ = ["Exercise", "Result", "Wrong", "register", "registry", "check", "solution",
           "progress", "chapter_of", "chapter_title", "NOT_ATTEMPTED", "FAILED", "PASSED",
           "KINDS"]

_EXERCISES: dict[str, Exercise] = {}
# The latest verdict on each exercise in this kernel, from the reader's own check() calls.
_RESULTS: dict[str, Result] = {}
_LAST_CHAPTER: list[str] = []

# Chapters are numbered; the appendix's exercises are "A.1", "A.2", ... in module `appendix`,
# and the unnumbered tokens chapter's "T.1", "T.2", ... in module `tokens`, the inference
# chapter's "I.1", ... in module `inference`, the induction chapter's "N.1", ... in module
# `induction`.
_MODULES = {"A": "appendix", "T": "tokens", "I": "inference", "N": "induction"}
_TITLES = {"T": "Tokens", "I": "Inference", "N": "Induction"}


def register(exercise: Exercise) -> Exercise:
    """Add an exercise to the registry (called by the chapter modules at import)."""
    if exercise.id in _EXERCISES and _EXERCISES[exercise.id] is not exercise:
        raise ValueError(f"exercise id {exercise.id!r} is registered twice")
    _EXERCISES[exercise.id] = exercise
    return exercise


def _module_name(chapter: str) -> str | None:
    if chapter.isdigit():
        return f"ch{int(chapter):02d}"
    return _MODULES.get(chapter)


def registry() -> dict[str, Exercise]:
    """Every exercise of the book, keyed by id ("1.1", "1.2", "1.C", ...), in book order."""
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("ch") or info.name in _MODULES.values():
            importlib.import_module(f"{__name__}.{info.name}")
    return dict(sorted(_EXERCISES.items(), key=lambda item: _order(item[0])))


def _order(exercise_id: str) -> tuple:
    chapter, _, rest = exercise_id.partition(".")
    number = int(chapter) if chapter.isdigit() else 1000 + ord(chapter[:1] or "~")
    return (number, not rest.isdigit(), int(rest) if rest.isdigit() else rest)


def _import_chapter(chapter: str) -> None:
    name = _module_name(chapter)
    if name and importlib.util.find_spec(f"{__name__}.{name}"):
        importlib.import_module(f"{__name__}.{name}")


def _lookup(exercise_id: str) -> Exercise:
    # Import the exercise's own chapter module first, and every module only when the id is
    # not there: checking a NumPy chapter's exercise then never imports chapter 9's (torch).
    _import_chapter(exercise_id.partition(".")[0])
    if exercise_id in _EXERCISES:
        return _EXERCISES[exercise_id]
    exercises = registry()
    if exercise_id not in exercises:
        raise KeyError(f"no exercise {exercise_id!r}; known: {', '.join(exercises)}")
    return exercises[exercise_id]


def chapter_of(chapter: int | str) -> list[Exercise]:
    """The exercises of one chapter (1, "1", or "A" for the appendix), in book order."""
    key = str(chapter)
    _import_chapter(key)
    return [ex for exercise_id, ex in sorted(_EXERCISES.items(), key=lambda i: _order(i[0]))
            if ex.chapter == key]


def check(exercise_id: str, answer: Any) -> Result:
    """Check the reader's answer to exercise ``exercise_id``; prints one line."""
    exercise = _lookup(exercise_id)
    # The chapters import library functions that some exercises ask the reader to write;
    # handing one in is not an answer.
    result = exercise.check(answer, refuse_reference=True)
    _RESULTS[exercise_id] = result
    _LAST_CHAPTER[:] = [exercise.chapter]
    return result


def solution(exercise_id: str) -> Solution:
    """The library's solution to an exercise, folded (open it to read), checked like an answer.

    The check runs on the reference and prints its verdict; it does not count as the
    reader's own pass in ``progress``.
    """
    exercise = _lookup(exercise_id)
    verdict = exercise.check(exercise.reference, quiet=True)
    message = verdict.message
    if not callable(exercise.reference) and verdict.status == PASSED:
        # a predicted value's verdict names the answer, and this line is not folded
        message = "passed (the answer and why are in the folded block)"
    print(Result(f"{exercise_id} (the library's solution)", verdict.status, message).line)
    return exercise.solution()


def chapter_title(chapter: int | str) -> str:
    """How the book names a chapter: "Chapter 1", "Tokens", "Appendix A"."""
    key = str(chapter)
    return f"Chapter {key}" if key.isdigit() else _TITLES.get(key, f"Appendix {key}")


def progress(chapter: int | str | None = None) -> dict[str, str]:
    """Print which of a chapter's exercises the reader has passed in this kernel.

    ``chapter`` defaults to the chapter of the latest check. Returns {id: status}.
    """
    if chapter is None:
        if not _LAST_CHAPTER:
            print("progress: no exercise checked yet in this session")
            return {}
        chapter = _LAST_CHAPTER[0]
    exercises = chapter_of(chapter)
    if not exercises:
        raise KeyError(f"no exercises for chapter {chapter!r}")
    status = {ex.id: _RESULTS[ex.id].status if ex.id in _RESULTS else NOT_ATTEMPTED
              for ex in exercises}
    passed = sum(s == PASSED for s in status.values())
    print(f"{chapter_title(chapter)}: {passed} of {len(status)} exercises passed in this session")
    for ex in exercises:
        mark = {PASSED: "[x]", FAILED: "[!]"}.get(status[ex.id], "[ ]")
        line = f"  {mark} {ex.id} {ex.title} ({ex.kind}): {status[ex.id]}"
        print(line if len(line) <= WIDTH else line[:WIDTH - 3] + "...")
    return status
