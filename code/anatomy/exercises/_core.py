"""The exercise protocol: how a check looks at a reader's function and explains what it sees.

An exercise cell holds a stub that raises ``NotImplementedError``. The next cell calls
``check("1.1", softmax)``, which runs the reader's function on fixed cases and prints exactly
one line:

- ``not attempted yet`` while the stub still raises ``NotImplementedError``;
- ``failed: <what is wrong and where>`` for the first problem found;
- ``passed`` when every case agrees with the library's reference.

A check never raises into the notebook: whatever the reader's code does (crash, wrong type,
wrong shape, NaN) becomes the explanation on that line.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

NOT_ATTEMPTED = "not attempted"
FAILED = "failed"
PASSED = "passed"


class Wrong(Exception):
    """A problem found in the reader's answer; its message is shown to the reader as is."""


@dataclass(frozen=True)
class Result:
    """What a check found. ``status`` is "not attempted", "failed" or "passed"."""

    exercise: str
    status: str
    message: str

    @property
    def line(self) -> str:
        return f"Exercise {self.exercise}: {self.message}"

    def __bool__(self) -> bool:
        return self.status == PASSED

    def _ipython_display_(self) -> None:
        # The check has already printed its one line; showing the Result again as a cell's
        # value would only repeat it.
        pass


@dataclass(frozen=True)
class Exercise:
    """One auto-checked exercise.

    ``diagnose(fn)`` runs the reader's ``fn`` on the exercise's cases and raises ``Wrong`` with
    an explanation at the first problem. ``wrong_answers`` are known-wrong implementations,
    each with a fragment of the message its check must print; the test suite holds every
    exercise to them, so a check that would pass a wrong answer cannot go unnoticed.
    """

    id: str
    title: str
    reference: Callable
    diagnose: Callable[[Callable], None]
    success: str = "passed"
    wrong_answers: tuple[tuple[Callable, str], ...] = field(default=(), repr=False)

    def check(self, fn: Callable, *, quiet: bool = False) -> Result:
        """Run the checks on ``fn``, print one line (unless ``quiet``), return the Result."""
        result = self._judge(fn)
        if not quiet:
            print(result.line)
        return result

    def _judge(self, fn: Callable) -> Result:
        if not callable(fn):
            return Result(self.id, FAILED, f"failed: expected a function, got {type(fn).__name__}")
        try:
            self.diagnose(fn)
        except NotImplementedError:
            return Result(self.id, NOT_ATTEMPTED, "not attempted yet (the stub still raises "
                          "NotImplementedError: replace it with your code)")
        except Wrong as problem:
            return Result(self.id, FAILED, f"failed: {problem}")
        except Exception as error:  # the check itself must never raise into the notebook
            return Result(self.id, FAILED, f"failed: {type(error).__name__}: {error}")
        return Result(self.id, PASSED, f"passed ({self.success})")

    def solution(self) -> Result:
        """Print the reference implementation's source, then check it like any answer."""
        print(inspect.getsource(self.reference))
        return self.check(self.reference)


# ---- helpers the chapter modules use to write their diagnoses ---------------------------


def run(fn: Callable, *args, case: str, hint: str = "", **kwargs):
    """Call the reader's function on one case; turn a crash into an explanation.

    ``hint`` is added to the message when the function raises: the likely cause on this case.
    """
    try:
        return fn(*args, **kwargs)
    except (NotImplementedError, Wrong):
        raise
    except Exception as error:
        raise Wrong(f"on {case}, your function raised {type(error).__name__}: {error}"
                    + (f" ({hint})" if hint else "")) from None


def as_array(got, *, case: str, name: str = "the result") -> np.ndarray:
    """The reader's return value as an array, or an explanation of why it is not one."""
    if got is None:
        raise Wrong(f"on {case}, {name} is None: did you forget to return it?")
    try:
        arr = np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        kind = type(got).__name__
        raise Wrong(f"on {case}, {name} is a {kind}, not an array of numbers") from None
    return arr


def expect_shape(got, want_shape: tuple, *, case: str, name: str = "the result") -> np.ndarray:
    arr = as_array(got, case=case, name=name)
    if arr.shape != tuple(want_shape):
        raise Wrong(f"on {case}, {name} has shape {arr.shape}; expected {tuple(want_shape)}")
    return arr


def expect_finite(arr: np.ndarray, *, case: str, name: str = "the result", hint: str = ""):
    if not np.all(np.isfinite(arr)):
        bad = "nan" if np.isnan(arr).any() else "inf"
        raise Wrong(f"on {case}, {name} contains {bad}" + (f": {hint}" if hint else ""))


def expect_close(got, want, *, case: str, name: str = "the result", atol: float = 1e-6,
                 hint: str = "") -> np.ndarray:
    """Shape, then finiteness, then values; the message points at the worst entry."""
    want = np.asarray(want, dtype=float)
    arr = expect_shape(got, want.shape, case=case, name=name)
    if np.all(np.isfinite(want)):
        expect_finite(arr, case=case, name=name, hint=hint)
    diff = np.array(np.abs(arr - want))  # an array even for 0-d inputs, so it is writable
    diff[np.isnan(diff) & (arr == want)] = 0.0  # matching infinities
    if diff.size and np.nanmax(diff) > atol:
        at = np.unravel_index(int(np.nanargmax(diff)), diff.shape)
        where = f"{name}[{', '.join(map(str, at))}]" if arr.ndim else name
        raise Wrong(f"on {case}, {where} is {arr[at]:.4g} but should be {want[at]:.4g}"
                    + (f": {hint}" if hint else ""))
    return arr
