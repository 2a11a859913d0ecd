"""The exercise protocol: how a check looks at a reader's answer and explains what it sees.

An exercise cell holds a stub: a function that raises ``NotImplementedError``, or a value
left as ``...``. The next cell calls ``check("1.1", my_softmax)``, which runs the answer on
fixed cases *and* on fresh random inputs (seeded anew on every call, so a typed constant
cannot pass) and prints exactly one line:

- ``not attempted yet`` while the stub is untouched;
- ``failed: <what is wrong, on which case, and the likely cause>`` for the first problem;
- ``a different convention: ...`` when the answer is valid but not the one asked for;
- ``passed`` when every case agrees with the reference.

A check never raises into the notebook: whatever the reader's code does (crash, wrong type,
wrong shape, NaN) becomes the explanation on that line.

Exercises come in five kinds (``KINDS``): *implement* a function from a spec, *predict* a
number, shape or choice before running anything, *debug* a function with one realistic bug,
*construct* weights or inputs that make a mechanism behave, and *measure* with an experiment
of your own.
"""

from __future__ import annotations

import copy
import difflib
import html
import inspect
import math
import secrets
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

NOT_ATTEMPTED = "not attempted"
FAILED = "failed"
PASSED = "passed"

KINDS = {
    "implement": "write a function from its spec",
    "predict": "commit to a number, shape or choice before running anything",
    "debug": "find and fix one realistic bug",
    "construct": "choose weights or inputs that make a mechanism behave",
    "measure": "run an experiment and report a figure",
}

CHALLENGE_POINTS = 3   # a challenge is worth more than a numbered exercise in a grade
WIDTH = 78   # printed lines fit the book's code column at 1280 px (checked in the browser)


class Wrong(Exception):
    """A problem found in the reader's answer; its message is shown to the reader as is."""


class OtherConvention(Wrong):
    """A valid answer that follows a different convention from the one the exercise asks for."""


def other_convention(what: str, asks: str) -> OtherConvention:
    """``raise other_convention("clockwise rotation ...", "the counter-clockwise ...")``."""
    return OtherConvention(f"{what}; this exercise asks for {asks}")


@dataclass(frozen=True)
class Result:
    """What a check found. ``status`` is "not attempted", "failed" or "passed"."""

    exercise: str
    status: str
    message: str

    @property
    def line(self) -> str:
        """The verdict, wrapped to the book's column, continuation lines indented."""
        return textwrap.fill(f"Exercise {self.exercise}: {self.message}", width=WIDTH,
                             subsequent_indent="    ", break_on_hyphens=False,
                             break_long_words=False)

    def __bool__(self) -> bool:
        return self.status == PASSED

    def _ipython_display_(self) -> None:
        # The check has already printed its one line; showing the Result again as a cell's
        # value would only repeat it.
        pass


def _unanswered(answer: object) -> bool:
    return answer is Ellipsis


@dataclass(frozen=True)
class Exercise:
    """One auto-checked exercise.

    ``diagnose(answer, rng)`` looks at the reader's answer (a function, or a value for
    *predict* and some *construct* exercises) and raises ``Wrong`` with an explanation at the
    first problem; ``rng`` is seeded afresh on every check, for the random cases.

    ``reference`` solves the exercise: the library function (implement, debug, measure), the
    right value (predict), or a function that builds a valid answer (construct).
    ``wrong_answers`` are known-wrong answers, each with a fragment of the message its check
    must print; the tests hold every exercise to them. ``battery(rng)`` lists valid inputs as
    ``(args, kwargs)`` pairs: the mutation test runs the reference and its mutants on them,
    and a *debug* check uses them to tell an untouched ``given`` function from a fix.
    ``rtol``/``atol`` are the tolerance a right answer is allowed (float32 where the spec
    allows it); two outputs closer than that count as the same. ``explain`` is shown with the
    solution (the reasoning behind a predict answer, say). ``no_mutants`` gives the reason an
    exercise with a function reference is left out of the mutation test, if it is.
    ``points`` is what the exercise is worth in a teacher's grade; by default 1, and
    ``CHALLENGE_POINTS`` for a chapter's challenge ("1.C"). ``shown`` is the function the folded
    solution shows, when the reference's signature is not the reader's (a debug stub with
    fewer arguments); it must pass the check too. ``helpers`` are library functions the
    solution calls and shows before it, pasted with it (the slopes of ALiBi, say, where the
    hard part lives), so that the folded solution does not import them from the library.
    ``fix`` is the smallest repair of a debug exercise's ``given``, the fixed side of the
    solution's diff, when the library's function differs from ``given`` in more than the bug
    (a ``math.sqrt`` where the chapter has only NumPy, say); by default ``shown`` or the
    reference. Pasted over the stub in its chapter, it must pass the check.
    ``unchanged`` names the arguments the spec says to leave unchanged: the check runs the
    answer through ``run_unchanged``, and the mutation test changes each in place.
    """

    id: str
    title: str
    kind: str
    reference: Any
    diagnose: Callable[[Any, np.random.Generator], None]
    success: str = "passed"
    wrong_answers: tuple[tuple[Any, str], ...] = field(default=(), repr=False)
    given: Callable | None = field(default=None, repr=False)
    battery: Callable[[np.random.Generator], list[tuple[tuple, dict]]] | None = field(
        default=None, repr=False)
    rtol: float = 1e-5
    atol: float = 1e-8
    explain: str = ""
    no_mutants: str = ""
    points: int = 0
    shown: Callable | None = field(default=None, repr=False)
    helpers: tuple[Callable, ...] = field(default=(), repr=False)
    unchanged: tuple[str, ...] = ()
    fix: Callable | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.points:
            object.__setattr__(self, "points", CHALLENGE_POINTS if self.is_challenge else 1)
        if self.kind not in KINDS:
            raise ValueError(f"exercise {self.id}: kind must be one of {', '.join(KINDS)}, "
                             f"got {self.kind!r}")
        if self.kind == "debug" and (self.given is None or self.battery is None):
            raise ValueError(f"exercise {self.id}: a debug exercise needs `given` (the buggy "
                             "function) and a `battery` of inputs")
        if self.kind == "predict" and not self.explain:
            raise ValueError(f"exercise {self.id}: a predict exercise needs `explain`")

    @property
    def chapter(self) -> str:
        return self.id.partition(".")[0]

    @property
    def is_challenge(self) -> bool:
        """A chapter's challenge has a letter for a number: "1.C"."""
        return not self.id.partition(".")[2].isdigit()

    @property
    def takes_function(self) -> bool:
        """Whether the reader answers with a function (else with a value)."""
        return self.kind in ("implement", "debug", "measure") or callable(self.reference)

    def check(self, answer: Any, *, quiet: bool = False, seed: int | None = None,
              refuse_reference: bool = False) -> Result:
        """Judge ``answer``, print one line (unless ``quiet``) and return the Result.

        The random cases are drawn from ``seed``; by default a fresh one on every call.
        ``refuse_reference`` fails the library's own function handed in as the answer (the
        reader's ``check`` and the grader ask for it; the library's tests do not).
        """
        rng = np.random.default_rng(secrets.randbits(64) if seed is None else seed)
        if refuse_reference and is_library_function(answer, self.reference):
            name = getattr(self.reference, "__name__", "function")
            module = getattr(self.reference, "__module__", "the library")
            result = Result(self.id, FAILED, f"failed: this is the library's own {name} "
                            f"(from {module}), not an answer of yours: write your own "
                            "function")
        else:
            result = self._judge(answer, rng)
        if not quiet:
            print(result.line)
        return result

    def _judge(self, answer: Any, rng: np.random.Generator) -> Result:
        if _unanswered(answer):
            return Result(self.id, NOT_ATTEMPTED, "not attempted yet (replace the ... with "
                          "your answer)")
        if self.takes_function and not callable(answer):
            return Result(self.id, FAILED, f"failed: expected a function, got "
                          f"{type(answer).__name__}")
        try:
            if self.kind == "debug" and self._behaves_like_given(answer, rng):
                if same_code(answer, self.given):
                    return Result(self.id, NOT_ATTEMPTED, "not attempted yet (this is "
                                  "still the function as given: find the bug and fix it)")
                # Edited, yet indistinguishable from the bug: a wrong fix, not an untouched
                # stub, so the grade counts it as tried.
                return Result(self.id, FAILED, "failed: your edit still behaves exactly "
                              "like the function as given on every case: the bug is still "
                              "there")
            self.diagnose(answer, rng)
        except NotImplementedError:
            return Result(self.id, NOT_ATTEMPTED, "not attempted yet (the stub still raises "
                          "NotImplementedError: replace it with your code)")
        except OtherConvention as problem:
            return Result(self.id, FAILED, f"a different convention: {problem}")
        except Wrong as problem:
            return Result(self.id, FAILED, f"failed: {problem}")
        except Exception as error:  # the check itself must never raise into the notebook
            return Result(self.id, FAILED, f"failed: {type(error).__name__}: {error}")
        return Result(self.id, PASSED, f"passed ({self.success})")

    def _behaves_like_given(self, answer: Callable, rng: np.random.Generator) -> bool:
        """Whether ``answer`` does exactly what the buggy ``given`` does on the battery
        (the same outputs, or an error wherever ``given`` raises one)."""
        for args, kwargs in self.battery(rng):
            outcomes = []
            for fn in (answer, self.given):
                try:
                    outcomes.append((True, call_quietly(fn, args, kwargs)))
                except NotImplementedError:
                    raise
                except Exception as error:
                    outcomes.append((False, type(error)))
            (ok_mine, mine), (ok_given, given) = outcomes
            if ok_mine != ok_given or (ok_mine and not self.same(mine, given)) or (
                    not ok_mine and mine is not given):
                return False
        return True

    def same(self, a: Any, b: Any) -> bool:
        """Whether two outputs agree within this exercise's tolerance."""
        return same(a, b, self.rtol, self.atol)

    def solution(self) -> Solution:
        """The folded solution: the reference's source (or the answer and why)."""
        return Solution(self)


def is_library_function(answer: Any, reference: Any) -> bool:
    """Whether ``answer`` is the reference itself: the same function, a wrapper made with
    ``functools.wraps`` or ``partial``, or a copy built from its code object."""
    if not callable(reference) or not callable(answer):
        return False
    import functools

    while isinstance(answer, functools.partial):
        answer = answer.func
    try:
        mine, ref = inspect.unwrap(answer), inspect.unwrap(reference)
    except ValueError:          # a wrapper cycle: not the library's function
        return False
    code = getattr(mine, "__code__", None)
    return mine is ref or (code is not None and code is getattr(ref, "__code__", None))


def same_code(a: Callable, b: Callable) -> bool:
    """Whether two functions have the same statements (names, comments, layout and
    docstring aside): an untouched debug stub, re-run, still counts as untouched."""
    import ast

    if a is b:
        return True
    try:
        dumps = [ast.dump(ast.parse("\n".join(_body(fn)))) for fn in (a, b)]
    except (OSError, TypeError, SyntaxError, IndexError, AttributeError):
        ca, cb = getattr(a, "__code__", None), getattr(b, "__code__", None)
        return ca is not None and cb is not None and ca.co_code == cb.co_code
    return dumps[0] == dumps[1]


# ---- the folded solution ---------------------------------------------------------------


def source_of(fn: Callable) -> str:
    """A function's source as written in the library (decorators included)."""
    return textwrap.dedent(inspect.getsource(fn))


def pasteable(fn: Callable, helpers: Sequence[Callable] = ()) -> str:
    """A function's source headed by the imports it needs, so that it runs pasted into any
    chapter (the library's module may import ``math``, say, where the chapter does not).

    ``helpers`` come first, in full: ``fn`` calls them instead of importing them.
    """
    fns = [*helpers, fn]
    defined = {inspect.unwrap(f).__name__ for f in helpers}
    lines = sorted({line for f in fns for line in _imports(f)
                    if not (line.startswith("from ") and line.split()[-1] in defined)},
                   key=lambda s: ({"import": 0, "from": 1}.get(s.split()[0], 2), s))
    sources = "\n\n".join(source_of(f) for f in fns)
    return "\n".join([*lines, "", "", sources] if lines else [sources])


def _imports(fn: Callable) -> list[str]:
    """The import lines (and module constants) a function's source needs."""
    import ast

    source = source_of(fn)
    tree = ast.parse(source)
    local = {a.arg for node in ast.walk(tree) if isinstance(node, ast.arguments)
             for a in (*node.posonlyargs, *node.args, *node.kwonlyargs,
                       *filter(None, (node.vararg, node.kwarg)))}
    local |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
              and isinstance(n.ctx, ast.Store)}
    names = dict.fromkeys(n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                          and isinstance(n.ctx, ast.Load) and n.id not in local)
    names.update(dict.fromkeys(n.id for d in getattr(tree.body[0], "decorator_list", [])
                               for n in ast.walk(d) if isinstance(n, ast.Name)))
    scope = getattr(inspect.unwrap(fn), "__globals__", {})
    lines = []
    for name in names:
        if name not in scope:
            continue                             # a builtin, or the function's own name
        value = scope[name]
        if inspect.ismodule(value):
            module = value.__name__
            lines.append(f"import {module}" if module == name else
                         f"import {module} as {name}")
        elif getattr(value, "__module__", None) and getattr(value, "__name__", None) == name:
            lines.append(f"from {value.__module__} import {name}")
        elif isinstance(value, (bool, int, float, str, tuple)):      # a module constant
            lines.append(f"{name} = {value!r}")
    return lines


def _highlight(code: str) -> str:
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import DiffLexer, PythonLexer
    except ImportError:  # pragma: no cover - pygments ships with IPython
        return f"<pre>{html.escape(code)}</pre>"
    lexer = DiffLexer() if code.startswith("--- ") else PythonLexer()
    # Inline styles, so the colours survive in Colab and GitHub as well as in the book.
    formatter = HtmlFormatter(noclasses=True, nowrap=True, style="default")
    return ('<pre style="white-space: pre-wrap; overflow-wrap: anywhere; margin: 0.5em 0; '
            'padding: 0.5em; background: #f8f8f8">'
            + highlight(code, lexer, formatter) + "</pre>")


class Solution:
    """A solution that stays folded until the reader opens it (an HTML ``<details>``).

    Jupyter, Colab, VS Code and the book render the HTML, closed; plain-text front ends get
    the text. It is only ever shown by the cell that asks for it.
    """

    def __init__(self, exercise: Exercise):
        self.exercise = exercise
        self.parts = _solution_parts(exercise)

    def __repr__(self) -> str:
        return "\n\n".join(text for _, text in self.parts)

    def _repr_html_(self) -> str:
        ex = self.exercise
        body = "".join(_highlight(text) if is_code else f"<p>{html.escape(text)}</p>"
                       for is_code, text in self.parts)
        return (f'<details class="anatomy-solution"><summary>Show the solution to '
                f"Exercise {html.escape(ex.id)} ({html.escape(ex.kind)})</summary>"
                f"{body}</details>")


def _solution_parts(ex: Exercise) -> list[tuple[bool, str]]:
    """(is_code, text) pieces: explanation and source, in reading order."""
    parts: list[tuple[bool, str]] = []
    if ex.explain:
        parts.append((False, ex.explain))
    shown = ex.shown or ex.reference
    if ex.kind == "debug":
        diff = difflib.unified_diff(_body(ex.given), _body(ex.fix or shown), "as given",
                                    "fixed", lineterm="", n=1)
        parts.append((True, "\n".join(diff)))
        parts.append((False, "The fixed function, as the library has it:"))
        parts.append((True, pasteable(shown, ex.helpers)))
    elif callable(shown):
        parts.append((True, pasteable(shown, ex.helpers)))
    else:
        parts.append((False, f"Answer: {ex.reference!r}"))
    return parts


def _body(fn: Callable) -> list[str]:
    """A function's statements without decorators, signature or docstring, dedented."""
    import ast

    source = source_of(inspect.unwrap(fn))
    func = ast.parse(source).body[0]
    first = func.body[0]
    skip_doc = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None),
                                                          ast.Constant)
    start = func.body[1 if skip_doc and len(func.body) > 1 else 0].lineno
    lines = source.splitlines()[start - 1:func.end_lineno]
    return textwrap.dedent("\n".join(lines)).splitlines()


# ---- comparing outputs -----------------------------------------------------------------


def call_quietly(fn: Callable, args: Sequence, kwargs: Mapping) -> Any:
    """Call ``fn`` on deep copies of its inputs (so it cannot change them), warnings hushed."""
    args, kwargs = copy.deepcopy(tuple(args)), copy.deepcopy(dict(kwargs))
    with np.errstate(all="ignore"):
        return fn(*args, **kwargs)


def _numeric(x: Any) -> np.ndarray | None:
    if hasattr(x, "detach") and hasattr(x, "cpu"):          # a torch tensor
        x = x.detach().cpu().numpy()
    if isinstance(x, (bool, int, float, np.number, np.bool_, np.ndarray)):
        return np.asarray(x)
    return None


def same(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    """Deep equality of outputs: arrays within tolerance (NaN equals NaN), containers by item."""
    na, nb = _numeric(a), _numeric(b)
    if na is not None and nb is not None:
        if na.shape != nb.shape:
            return False
        if na.dtype.kind in "biuf" and nb.dtype.kind in "biuf":
            return bool(np.allclose(na.astype(float), nb.astype(float), rtol=rtol, atol=atol,
                                    equal_nan=True))
        return bool(np.array_equal(na, nb))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k], rtol, atol) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(same(x, y, rtol, atol) for x, y in zip(a, b, strict=True)))
    try:
        return bool(a == b)
    except Exception:
        return False


# ---- helpers the chapter modules use to write their diagnoses ---------------------------


def run(fn: Callable, *args, case: str, hint: str | Callable[[Exception], str] = "",
        copy_inputs: bool = True, **kwargs):
    """Call the reader's function on one case; turn a crash into an explanation.

    ``hint`` is added to the message when the function raises: the likely cause on this case.
    A function of the error gives a hint only to the errors it fits (a shape error, not a
    NameError), and "" to the others.
    The inputs are copies, so an answer that changes its arguments in place cannot spoil the
    check's own reference values; ``copy_inputs=False`` passes the objects themselves (when
    the check needs their identity, e.g. a model's parameters).
    """
    try:
        if not copy_inputs:
            with np.errstate(all="ignore"):
                return fn(*args, **kwargs)
        return call_quietly(fn, args, kwargs)
    except (NotImplementedError, Wrong):
        raise
    except Exception as error:
        why = hint(error) if callable(hint) else hint
        raise Wrong(f"on {case}, your function raised {type(error).__name__}: {error}"
                    + (f" ({why})" if why else "")) from None


def run_unchanged(fn: Callable, *args, case: str, names: Sequence[str],
                  hint: str | Callable[[Exception], str] = "", **kwargs):
    """``run``, then fail the answer if it changed any of its inputs in place (for a spec
    that says to leave them unchanged); ``names`` name the positional arguments."""
    mine, kw = copy.deepcopy(args), copy.deepcopy(kwargs)
    got = run(fn, *mine, case=case, hint=hint, copy_inputs=False, **kw)
    for name, before, after in zip(names, args, mine, strict=False):
        if not same(before, after, rtol=0.0, atol=0.0):
            raise Wrong(f"on {case}, your function changed its input {name} in place; the "
                        f"spec says to leave the inputs unchanged: compute new arrays "
                        f"({name} = {name} - ..., not {name} -= ...) and return them")
    return got


def as_array(got, *, case: str, name: str = "the result") -> np.ndarray:
    """The reader's return value as an array, or an explanation of why it is not one."""
    if got is None:
        raise Wrong(f"on {case}, {name} is None: did you forget to return it?")
    if hasattr(got, "detach") and hasattr(got, "cpu"):      # a torch tensor is fine too
        got = got.detach().cpu().numpy()
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


def expect_close(got, want, *, case: str, name: str = "the result", atol: float = 1e-8,
                 rtol: float = 1e-5, hint: str = "") -> np.ndarray:
    """Shape, then finiteness, then values within ``atol + rtol * |want|``.

    The defaults accept a float32 answer to a float64 reference; the message points at the
    worst entry.
    """
    want = np.asarray(want, dtype=float)
    arr = expect_shape(got, want.shape, case=case, name=name)
    if np.all(np.isfinite(want)):
        expect_finite(arr, case=case, name=name, hint=hint)
    # atol may be an array (a tolerance per entry); the message reads it at the worst entry.
    allowed = np.broadcast_to(atol + rtol * np.abs(want), want.shape)
    with np.errstate(invalid="ignore"):
        excess = np.array(np.abs(arr - want) - allowed)
    excess[np.isnan(excess) & (arr == want)] = -1.0           # matching infinities
    excess[np.isnan(excess)] = np.inf                          # NaN where a number belongs
    if excess.size and excess.max() > 0:
        at = np.unravel_index(int(np.argmax(excess)), excess.shape)
        where = f"{name}[{', '.join(map(str, at))}]" if arr.ndim else name
        off = abs(float(arr[at]) - float(want[at]))
        raise Wrong(f"on {case}, {where} is {float(arr[at]):.6g} but should be "
                    f"{float(want[at]):.6g} (off by {off:.2g}, allowed "
                    f"{float(allowed[at]):.2g})" + (f": {hint}" if hint else ""))
    return arr


def expect_number(got, *, case: str, name: str = "the result") -> float:
    """One finite number (a Python or NumPy scalar, or a one-element array)."""
    arr = as_array(got, case=case, name=name)
    if arr.size != 1:
        raise Wrong(f"on {case}, {name} has shape {arr.shape}; expected one number")
    value = float(arr.reshape(()))
    if not math.isfinite(value):
        raise Wrong(f"on {case}, {name} is {value}; expected a finite number")
    return value


def int_set(answer, *, what: str, example: str) -> set[int]:
    """The reader's answer as a set of ints; a text or a single number is told the form."""
    form = f"answer with a set of {what}, e.g. {example}"
    if isinstance(answer, (str, bytes)):
        raise Wrong(f"{form}, not the text {answer!r}")
    try:
        items = list(answer)
        whole = {int(i) for i in items}
    except (TypeError, ValueError):
        raise Wrong(form) from None
    if any(i != int(i) for i in items):
        raise Wrong(f"{form}: whole numbers only, got {sorted(map(float, items))}")
    return whole


def random_leading(rng: np.random.Generator, max_axes: int = 2, max_size: int = 3
                   ) -> tuple[int, ...]:
    """A random tuple of 0 to ``max_axes`` leading (batch, head) axes, each 1 to ``max_size``."""
    return tuple(int(n) for n in rng.integers(1, max_size + 1, size=rng.integers(0,
                                                                                 max_axes + 1)))
