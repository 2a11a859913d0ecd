"""The mutation test: small edits of each reference (an operator, a constant, max for min,
a dropped axis=/keepdims=/eps=, a deleted statement, an argument ignored, an input the spec
keeps unchanged changed in place) that change its outputs (or its inputs) on the exercise's
battery of valid inputs must all be reported failed by the exercise's check.

The counts per exercise are printed at the end of the test run (conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest

from anatomy.exercises import registry
from anatomy.exercises.mutants import audit, mutants, mutation_tested

EXERCISES = registry()
TESTED = [i for i, ex in EXERCISES.items() if mutation_tested(ex)]
AUDITS: list[str] = []        # read by conftest.py's terminal summary


def _example(x, axis=-1):
    """A tiny function with one site of each kind."""
    top = np.max(x, axis=axis, keepdims=True)
    if x.size > 2:
        top = top + 1
    return np.sum(x - top, axis=axis) / -2


def test_every_kind_of_mutation_is_generated():
    found = {m.description for m in mutants(_example)}
    for kind in (".max -> .min", ".sum -> .mean", "drop keyword axis=", "drop keyword keepdims=",
                 "Sub -> Add", "Div -> Mult", "Gt -> GtE", "2 -> 3", "2 -> 0", "2 -> -2",
                 "drop unary USub", "delete statement"):
        assert kind in found, (kind, sorted(found))


def test_mutants_run_in_their_module_and_differ_from_the_original():
    x = np.arange(4.0)
    outputs = [m.fn(x) for m in mutants(_example) if m.description in (".max -> .min",
                                                                       "Div -> Mult")]
    assert len(outputs) == 2 and all(not np.allclose(o, _example(x)) for o in outputs)


def test_exercises_with_function_references_are_mutation_tested():
    exempt = {i: ex.no_mutants for i, ex in EXERCISES.items() if ex.no_mutants}
    for exercise_id, reason in exempt.items():
        assert len(reason) > 20, f"{exercise_id}: say why it is exempt"
    assert TESTED and all(EXERCISES[i].battery is not None for i in TESTED)


@pytest.mark.parametrize("exercise_id", TESTED)
def test_no_mutant_passes_the_check(exercise_id):
    result = audit(EXERCISES[exercise_id])
    AUDITS.append(result.line)
    assert result.total > 0
    assert result.killed > 0, f"{exercise_id}: every mutant is equivalent; widen the battery"
    assert not result.survivors, "mutants that passed the check: " + "; ".join(
        f"line {m.line}: {m.description}" for m in result.survivors)


def test_an_ignored_argument_keeps_any_literal_default():
    def step(p, g, lr=0.1, betas=(0.9, 0.99)):
        return p - lr * g * betas[0]
    found = {m.description: m for m in mutants(step)}
    mutant = found["ignore argument betas (always (0.9, 0.99))"]
    assert mutant.argument == "betas" and mutant.fn(1.0, 1.0, 0.1, (0.5, 0.5)) == step(1.0, 1.0)
    assert not any(m.in_place for m in found.values())          # only when asked for
