"""Mutation testing for the checks: small changes to a reference must not get past its check.

A *mutant* is the reference function with one small edit, the kind of slip a reader makes:
an operator swapped (+ for -, < for <=), a constant changed (to c + 1, 0 or -c), ``max``
for ``min`` or ``sum`` for ``mean``, an ``axis=``/``keepdims=``/``eps=`` keyword dropped, or
one statement deleted, an argument ignored (always its default), or, where the spec says to
leave an input unchanged, that input changed in place. A mutant that gives the same outputs
as the reference on the exercise's battery of valid inputs (within the exercise's
tolerance), and leaves the inputs as they were, is *equivalent* and proves nothing; every
other mutant must be reported failed by the exercise's check.

    python -m anatomy.exercises.mutants            # every exercise: counts per exercise
    python -m anatomy.exercises.mutants 1.1 -v     # one exercise, each mutant listed
"""

from __future__ import annotations
import __future__

import argparse
import ast
import copy
import inspect
import signal
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ._core import NOT_ATTEMPTED, PASSED, Exercise, call_quietly, same

_BINOPS = {ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.Div, ast.Add],
           ast.Div: [ast.Mult, ast.FloorDiv], ast.FloorDiv: [ast.Div], ast.Pow: [ast.Mult],
           ast.MatMult: [ast.Mult], ast.Mod: [ast.FloorDiv]}
_COMPARES = {ast.Lt: [ast.LtE, ast.Gt], ast.LtE: [ast.Lt], ast.Gt: [ast.GtE, ast.Lt],
             ast.GtE: [ast.Gt], ast.Eq: [ast.NotEq], ast.NotEq: [ast.Eq],
             ast.Is: [ast.IsNot], ast.IsNot: [ast.Is], ast.In: [ast.NotIn],
             ast.NotIn: [ast.In]}
_NAMES = {"max": "min", "min": "max", "amax": "amin", "amin": "amax", "maximum": "minimum",
          "minimum": "maximum", "argmax": "argmin", "argmin": "argmax", "sum": "mean",
          "mean": "sum", "triu": "tril", "tril": "triu", "sin": "cos", "cos": "sin",
          "any": "all", "all": "any", "exp": "log", "sqrt": "abs", "var": "std", "std": "var"}
_DROPPABLE = {"axis", "keepdims", "eps", "k", "dim", "keepdim", "ddof", "unbiased"}


@dataclass
class Mutant:
    """One edit of a function: where, what, and the edited function itself."""

    line: int
    description: str
    fn: Callable
    argument: str = ""          # the argument an "ignore argument" mutant hard-codes
    in_place: str = ""          # the argument an "in place" mutant changes for its caller


def _sites(tree: ast.AST) -> Iterator[tuple[ast.AST, str, Callable[[ast.AST], object]]]:
    """Every (node, description, apply) edit; ``apply`` changes that node in place."""
    if isinstance(tree, ast.FunctionDef):
        yield from _default_sites(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            for new in _BINOPS[type(node.op)]:
                yield node, f"{type(node.op).__name__} -> {new.__name__}", \
                    lambda n, new=new: setattr(n, "op", new())
        elif isinstance(node, ast.AugAssign) and type(node.op) in _BINOPS:
            for new in _BINOPS[type(node.op)]:
                yield node, f"{type(node.op).__name__}= -> {new.__name__}=", \
                    lambda n, new=new: setattr(n, "op", new())
        elif isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                for new in _COMPARES.get(type(op), []):
                    yield node, f"{type(op).__name__} -> {new.__name__}", \
                        lambda n, i=i, new=new: n.ops.__setitem__(i, new())
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
            # -x becomes +x; `not x` becomes +x, which has x's truth value
            yield node, f"drop unary {type(node.op).__name__}", \
                lambda n: setattr(n, "op", ast.UAdd())
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
            yield from _constant_sites(node)
        elif isinstance(node, ast.Attribute) and node.attr in _NAMES:
            yield node, f".{node.attr} -> .{_NAMES[node.attr]}", \
                lambda n: setattr(n, "attr", _NAMES[n.attr])
        elif isinstance(node, ast.Name) and node.id in _NAMES and isinstance(node.ctx, ast.Load):
            yield node, f"{node.id} -> {_NAMES[node.id]}", \
                lambda n: setattr(n, "id", _NAMES[n.id])
        elif isinstance(node, ast.Call):
            for i, kw in enumerate(node.keywords):
                if kw.arg in _DROPPABLE:
                    yield node, f"drop keyword {kw.arg}=", \
                        lambda n, i=i: n.keywords.pop(i)
        if isinstance(node, (ast.FunctionDef, ast.If, ast.For, ast.While, ast.With)):
            for field_name in ("body", "orelse"):
                body = getattr(node, field_name, [])
                for i, stmt in enumerate(body):
                    if _is_docstring(stmt, i, node):
                        continue
                    yield stmt, "delete statement", \
                        lambda _n, body=body, i=i: body.__setitem__(i, ast.Pass())


def _constant_sites(node: ast.Constant):
    value = node.value
    if isinstance(value, bool):
        yield node, f"{value} -> {not value}", lambda n: setattr(n, "value", not n.value)
        return
    replacements = [value + 1]
    if value != 0:
        replacements += [type(value)(0), -value]
    for new in replacements:
        yield node, f"{value!r} -> {new!r}", lambda n, new=new: setattr(n, "value", new)


def _is_docstring(stmt: ast.stmt, index: int, parent: ast.AST) -> bool:
    return (index == 0 and isinstance(parent, ast.FunctionDef) and isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str))


def _function_tree(fn: Callable) -> ast.FunctionDef:
    raw = inspect.unwrap(fn)
    tree = ast.parse(textwrap.dedent(inspect.getsource(raw)))
    func = tree.body[0]
    if not isinstance(func, ast.FunctionDef):
        raise TypeError(f"{fn!r} is not a plain function")
    func.decorator_list = []                       # the body alone; validation is not mutated
    return func


def _default_sites(func: ast.FunctionDef):
    """Each argument with a constant default, ignored: every use of it reads the default
    (``base`` always 10000, ``eps`` always 1e-5), the slip of a hard-coded value."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults,
                     strict=True))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d]
    for arg, default in pairs:
        try:
            value = ast.literal_eval(default)          # 1e-5, "cpu", (0.9, 0.999)
        except ValueError:
            continue
        if value is None or isinstance(value, (list, dict, set)):
            continue
        uses = [n for stmt in func.body for n in ast.walk(stmt)
                if isinstance(n, ast.Name) and n.id == arg.arg and isinstance(n.ctx, ast.Load)]
        if uses:
            yield func, f"ignore argument {arg.arg} (always {value!r})", \
                lambda _n, uses=uses, value=value: [
                    _to_constant(u, value) for u in uses]


def _to_constant(node: ast.Name, value) -> None:
    # A Name node turned into a Constant in place, so the parents need not be found.
    node.__class__ = ast.Constant
    node.value, node.kind = value, None
    del node.id, node.ctx


def _clobber(x):
    """A copy of ``x`` for the function to compute with, while ``x`` itself, the caller's
    input, is changed in place: the slip of ``p -= lr * g`` on an argument."""
    if isinstance(x, np.ndarray):
        keep = x.copy()
        if x.flags.writeable and x.size:
            x[...] = np.logical_not(x) if x.dtype == bool else x * 2 + 1
        return keep
    if hasattr(x, "clone") and hasattr(x, "add_"):           # a torch tensor
        import torch

        keep = x.clone()
        with torch.no_grad():
            x.mul_(2).add_(1)
        return keep
    if isinstance(x, dict):
        return {k: _clobber(v) for k, v in x.items()}
    if isinstance(x, list):
        keep = [_clobber(v) for v in x]
        x.append(x[-1] if x else 0)
        return keep
    return x


_CLOBBER = "__anatomy_clobber__"


def _in_place_sites(func: ast.FunctionDef, names: tuple[str, ...]):
    """Each named argument changed in place at the start of the body (the function itself
    computes with a copy, so only its caller sees the change)."""
    params = {a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)}
    start = 1 if func.body and _is_docstring(func.body[0], 0, func) else 0
    for name in names:
        if name in params:
            stmt = ast.parse(f"{name} = {_CLOBBER}({name})").body[0]
            yield func, f"change argument {name} in place", \
                lambda n, stmt=stmt: n.body.insert(start, stmt)


def mutants(fn: Callable, in_place: tuple[str, ...] = ()) -> list[Mutant]:
    """Every single-point mutant of ``fn``'s body, compiled in ``fn``'s own module globals;
    ``in_place`` names the arguments to change in place, one mutant each."""
    raw = inspect.unwrap(fn)
    base = _function_tree(fn)
    found = []
    for _, description, apply in _in_place_sites(base, tuple(in_place)):
        tree = copy.deepcopy(base)
        apply(tree)
        found.append(Mutant(raw.__code__.co_firstlineno, description, _compile(tree, raw),
                            in_place=description.split()[2]))
    count = sum(1 for _ in _sites(base))
    for index in range(count):
        tree = copy.deepcopy(base)
        node, description, apply = list(_sites(tree))[index]
        line = getattr(node, "lineno", 0) + raw.__code__.co_firstlineno - 1
        apply(node)
        argument = description.split()[2] if description.startswith("ignore argument") else ""
        found.append(Mutant(line, description, _compile(tree, raw), argument))
    return found


def _compile(func: ast.FunctionDef, raw: Callable) -> Callable:
    module = ast.fix_missing_locations(ast.Module(body=[func], type_ignores=[]))
    code = compile(module, f"<mutant of {raw.__qualname__}>", "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    namespace = dict(raw.__globals__)
    namespace[_CLOBBER] = _clobber
    exec(code, namespace)
    return namespace[func.name]


# ---- the audit -------------------------------------------------------------------------


class _Timeout(Exception):
    pass


@contextmanager
def _time_limit(seconds: float):
    def stop(signum, frame):
        raise _Timeout
    if not hasattr(signal, "SIGALRM"):
        yield
        return
    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _differs(exercise: Exercise, mutant: Callable, inputs: list[tuple[tuple, dict]],
             outputs: list) -> bool:
    """Whether the mutant's outputs differ from the reference's on any battery input."""
    for (args, kwargs), want in zip(inputs, outputs, strict=True):
        try:
            with _time_limit(10.0):
                got = call_quietly(mutant, args, kwargs)
        except _Timeout:
            return True
        except Exception:
            return True
        if not exercise.same(got, want):
            return True
    return False


def _changes_inputs(mutant: Callable, inputs: list[tuple[tuple, dict]]) -> bool:
    """Whether the mutant changes any of its inputs in place on the battery."""
    for args, kwargs in inputs:
        mine, kw = copy.deepcopy(tuple(args)), copy.deepcopy(dict(kwargs))
        try:
            with _time_limit(10.0), np.errstate(all="ignore"):
                mutant(*mine, **kw)
        except Exception:
            return True
        if not (same(mine, tuple(args), 0.0, 0.0) and same(kw, dict(kwargs), 0.0, 0.0)):
            return True
    return False


def _passed(fn: Callable, argument: str, inputs: list[tuple[tuple, dict]]) -> bool:
    """Whether any battery call gives ``argument`` a value (by keyword or by position)."""
    names = list(inspect.signature(inspect.unwrap(fn)).parameters)
    at = names.index(argument) if argument in names else len(names)
    return any(argument in kwargs or len(args) > at for args, kwargs in inputs)


@dataclass
class Audit:
    """What became of one exercise's mutants."""

    exercise: str
    total: int = 0
    equivalent: int = 0
    killed: int = 0
    survivors: list[Mutant] = field(default_factory=list)

    @property
    def line(self) -> str:
        return (f"{self.exercise}: {self.total} mutants, {self.killed} failed by the check, "
                f"{self.equivalent} equivalent on the battery, {len(self.survivors)} passed")


def audit(exercise: Exercise, seed: int = 0, verbose: bool = False) -> Audit:
    """Run every mutant of the exercise's reference through the battery and the check."""
    if exercise.battery is None or not callable(exercise.reference):
        raise ValueError(f"exercise {exercise.id} has no battery or no function reference")
    rng = np.random.default_rng(seed)
    inputs = exercise.battery(rng)
    outputs = [call_quietly(exercise.reference, args, kwargs) for args, kwargs in inputs]
    result = Audit(exercise.id)
    for i, mutant in enumerate(mutants(exercise.reference, exercise.unchanged)):
        result.total += 1
        # An argument the exercise never passes is not part of its spec (a device hint, say):
        # hard-coding its default changes nothing a reader is asked for.
        if (mutant.argument and not _passed(exercise.reference, mutant.argument, inputs)) or \
                not (_differs(exercise, mutant.fn, inputs, outputs) or (
                    mutant.in_place and _changes_inputs(mutant.fn, inputs))):
            result.equivalent += 1
            verdict = "equivalent"
        else:
            try:
                with _time_limit(60.0):
                    status = exercise.check(mutant.fn, quiet=True, seed=seed * 1000 + i).status
            except _Timeout:
                status = "timed out"
            if status == PASSED:
                result.survivors.append(mutant)
            else:
                result.killed += 1
            verdict = status if status != NOT_ATTEMPTED else "not attempted (as given)"
        if verbose:
            print(f"  line {mutant.line}: {mutant.description}: {verdict}")
    return result


def main(argv: list[str] | None = None) -> int:
    from . import registry

    parser = argparse.ArgumentParser(prog="python -m anatomy.exercises.mutants",
                                     description="Mutation-test the exercise checks.")
    parser.add_argument("ids", nargs="*", help="exercise ids (default: every one)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every mutant")
    args = parser.parse_args(argv)
    exercises = registry()
    chosen = args.ids or [i for i, ex in exercises.items() if mutation_tested(ex)]
    survivors = 0
    for exercise_id in chosen:
        exercise = exercises[exercise_id]
        if not mutation_tested(exercise):
            why = exercise.no_mutants or (f"a {exercise.kind} exercise: held to its "
                                          "known-wrong answers")
            print(f"{exercise_id}: not mutation-tested ({why})")
            continue
        result = audit(exercise, verbose=args.verbose)
        survivors += len(result.survivors)
        print(result.line)
        for mutant in result.survivors:
            print(f"  SURVIVED line {mutant.line}: {mutant.description}")
    return 1 if survivors else 0


def mutation_tested(exercise: Exercise) -> bool:
    """Exercises whose reference is a function are mutation-tested, unless exempted."""
    return (exercise.kind in ("implement", "debug", "measure") and callable(exercise.reference)
            and not exercise.no_mutants)


if __name__ == "__main__":
    sys.exit(main())
