"""The grader's child process: run one reader's cells, then judge their answers.

    python -m anatomy.exercises._judge PLAN.json RESULT_FD      (the key arrives on stdin)

Started by ``grade`` in a fresh interpreter, in its own temporary folder, under a memory
limit and (where the system allows) without a network. It

1. reads the run's key from stdin and imports the chapter's exercises, *before* any of the
   reader's code runs, and notes every function of the checking machinery (``anatomy``,
   ``numpy``, ``builtins``, ``math``, ...; the chapter's Exercise objects);
2. runs the reader's cells in order. A check cell (the chapter's own, put back by the
   grader) is not run as written: its ``check("1.1", my_softmax)`` only records which object
   the reader's name held at that point;
3. verifies that no cell replaced a function of the machinery (or installed a tracer), then
   judges each recorded answer with the saved ``Exercise.check``, verifying again after
   each answer ran;
4. writes one line per exercise to ``RESULT_FD``, each signed with the key (HMAC-SHA256), so
   a line that the reader's code wrote there, or printed, is not taken for a grade.

What it cannot defend against: code that searches this process's memory for the key, and an
answer written to attack the checker while it is being called. README.md says so.
"""

from __future__ import annotations

import ast
import builtins
import hmac
import json
import linecache
import os
import signal
import sys
import threading
import time
from typing import Any

# Module families whose functions the checks call; a reader's cell that replaces any of them
# (or their code objects) makes the notebook ungradeable rather than graded by a forgery.
_WATCHED = ("anatomy", "numpy", "builtins", "math", "copy", "secrets", "inspect", "hmac",
            "json", "signal", "torch")
_TORCH_MODULES = ("torch", "torch.nn", "torch.nn.functional")


class _OutOfTime(BaseException):
    """Raised by the alarm; a BaseException, so a reader's `except Exception` lets it by."""


def _alarm(signum, frame):
    raise _OutOfTime


def _marks(modules: list[tuple[str, Any]], exercises: list) -> dict[str, tuple]:
    """What every watched function is now: the object, its code and its defaults."""
    marks = {}

    def note(key: str, value: Any) -> None:
        marks[key] = (value, getattr(value, "__code__", None),
                      getattr(value, "__defaults__", None),
                      getattr(value, "__kwdefaults__", None))

    for name, module in modules:
        for attr, value in list(vars(module).items()):
            note(f"{name}.{attr}", value)
            if name.startswith("anatomy") and isinstance(value, type):
                for sub, member in list(vars(value).items()):
                    note(f"{name}.{attr}.{sub}", member)
    for exercise in exercises:
        for attr, value in vars(exercise).items():
            note(f"exercise {exercise.id}.{attr}", value)
    return marks


def _watched_modules() -> list[tuple[str, Any]]:
    found = []
    for name, module in list(sys.modules.items()):
        family = name.split(".")[0]
        if module is None or family not in _WATCHED:
            continue
        if family == "torch" and name not in _TORCH_MODULES:
            continue
        found.append((name, module))
    return found


def _changed(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    return [key for key, was in before.items()
            if key not in after or any(a is not b for a, b in zip(was, after[key], strict=True))]


def _hooks() -> list[str]:
    """Interpreter hooks that let code run in the middle of a check."""
    found = []
    if sys.gettrace() is not None or getattr(threading, "_trace_hook", None) is not None:
        found.append("a trace function (sys.settrace)")
    if sys.getprofile() is not None or getattr(threading, "_profile_hook", None) is not None:
        found.append("a profile function (sys.setprofile)")
    import gc

    if gc.callbacks:
        found.append("a garbage-collector callback")
    return found


def _split_check(source: str) -> tuple[str, list[tuple[str, str]]]:
    """A check cell's code without its ``check("ID", NAME)`` calls, and those calls' pairs."""
    tree = ast.parse(source)
    kept, calls = [], []
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "check" and len(call.args) == 2
                and isinstance(call.args[0], ast.Constant) and isinstance(call.args[1], ast.Name)):
            calls.append((str(call.args[0].value), call.args[1].id))
        else:
            kept.append(stmt)
    return ast.unparse(ast.Module(body=kept, type_ignores=[])), calls


def _run_cell(source: str, name: str, namespace: dict) -> None:
    # Registered with linecache as IPython does, so inspect.getsource works on the reader's
    # functions (a debug check compares an answer's code with the function as given).
    lines = source.splitlines(keepends=True)
    linecache.cache[name] = (len(source), None, lines, name)
    exec(compile(source, name, "exec"), namespace)      # noqa: S102 - grading runs it


def main(argv: list[str]) -> int:
    plan = json.loads(open(argv[0]).read())
    out = os.fdopen(int(argv[1]), "w", buffering=1)
    key = bytes.fromhex(sys.stdin.readline().strip())
    sys.stdin.close()
    os.close(0)

    from . import chapter_of
    from ._core import FAILED, NOT_ATTEMPTED, Exercise

    exercises = chapter_of(plan["chapter"])
    judge = Exercise.check                                   # the machinery, as imported
    watched = _watched_modules()
    before = _marks(watched, exercises)

    try:
        from IPython.display import display
    except ImportError:                                       # pragma: no cover
        display = print
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins,
                                 "display": display}
    answers: dict[str, Any] = {}
    stopped = ""
    deadline = time.monotonic() + plan["timeout"]
    signal.signal(signal.SIGALRM, _alarm)
    for number, cell in enumerate(plan["cells"], 1):
        left = deadline - time.monotonic()
        limit = min(plan["cell_timeout"], left)
        name = f"<cell {number}: {cell['id']}>"
        try:
            if limit <= 0:
                raise _OutOfTime
            signal.setitimer(signal.ITIMER_REAL, limit)
            if cell["check"]:
                source, calls = _split_check(cell["source"])
                _run_cell(source, name, namespace)
                for exercise_id, answer_name in calls:
                    answers[exercise_id] = namespace.get(answer_name, ...)
            else:
                _run_cell(cell["source"], name, namespace)
        except _OutOfTime:
            which = ("the notebook's time limit" if limit < plan["cell_timeout"]
                     else "the cell time limit")
            stopped = f"cell {number} ran past {which} ({limit:.0f} s)"
        except SystemExit:
            stopped = f"cell {number} called exit()"
        except BaseException as error:  # the reader's crash ends the run, as in Jupyter
            stopped = f"cell {number} raised {type(error).__name__}: {error}"[:300]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, _alarm)
        if stopped:
            break

    def sign(exercise_id: str, status: str, message: str) -> None:
        record = {"exercise": exercise_id, "status": status, "message": message}
        body = json.dumps(record, sort_keys=True)
        mac = hmac.new(key, body.encode(), "sha256").hexdigest()
        # A newline first: a half line the reader's code left on this pipe ends there.
        out.write("\n" + json.dumps({"record": record, "mac": mac}) + "\n")

    tampered = _changed(before, _marks(watched, exercises)) + _hooks()
    for exercise in exercises:
        if exercise.id not in answers:
            status = "not reached" if stopped else NOT_ATTEMPTED
            sign(exercise.id, status, stopped or "no check cell ran for it")
            continue
        if tampered:
            sign(exercise.id, FAILED, "not graded: a cell changed the checking code ("
                 + ", ".join(tampered[:3]) + ")")
            continue
        signal.setitimer(signal.ITIMER_REAL, plan["check_timeout"])
        try:
            result = judge(exercise, answers[exercise.id], quiet=True, refuse_reference=True)
            status, message = result.status, result.message
        except _OutOfTime:
            status, message = FAILED, (f"failed: the check ran past its "
                                       f"{plan['check_timeout']} s limit on your answer")
        except BaseException as error:       # an answer that escapes the check's own net
            status, message = FAILED, f"failed: {type(error).__name__}: {error}"[:300]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, _alarm)
        tampered = _changed(before, _marks(watched, exercises)) + _hooks()
        if tampered:
            status, message = FAILED, ("not graded: the answer changed the checking code "
                                       "when it ran (" + ", ".join(tampered[:3]) + ")")
        sign(exercise.id, status, message)
    out.flush()
    # Straight out: no atexit handler or finaliser of the reader's runs after the grades.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
