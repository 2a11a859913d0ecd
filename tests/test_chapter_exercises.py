"""The exercises as a reader meets them in the chapters.

- Kinds: every chapter has at least 4 exercises and a challenge, of at least 3 kinds, and
  the book uses all five kinds (the appendix: at least 3 exercises of 3 kinds).
- Every registered exercise has, in its chapter and in this order, a stub, a check cell and
  a folded solution cell; a debug exercise's stub is the library's buggy function as given.
- No answer before its question: no cell before an exercise's solution shows, prints or
  glues the reference's code (its distinctive lines, in code, prose or outputs), and nothing
  asks for its source.
"""

from __future__ import annotations

import inspect
import json
import re
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from anatomy.exercises import KINDS, chapter_of, registry

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))
EXERCISES = registry()
_CHECK = re.compile(r"""\bcheck\(\s*["']([0-9A-Z]+\.\w+)["']""")
_SOLUTION = re.compile(r"""\bsolution\(\s*["']([0-9A-Z]+\.\w+)["']\s*\)""")


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _chapter(path: Path) -> str:
    ids = [m for c in _cells(path) if c["cell_type"] == "code" for m in _CHECK.findall(
        _source(c))]
    assert ids, f"{path.name} checks no exercise"
    return Counter(i.split(".")[0] for i in ids).most_common(1)[0][0]


def _outputs_text(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if "text" in out:
            parts.append("".join(out["text"]))
        for value in out.get("data", {}).values():
            parts.append(value if isinstance(value, str) else "".join(value)
                         if isinstance(value, list) else json.dumps(value))
    return "\n".join(parts)


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _fragments(fn) -> set[str]:
    """Distinctive pieces of a function's body: each statement's right-hand side, squashed."""
    source = textwrap.dedent(inspect.getsource(inspect.unwrap(fn)))
    body = re.sub(r'(?s)^.*?:\n\s*("""|\'\'\').*?\1\n', "", source, count=1)   # def + docstring
    found = set()
    for line in body.splitlines():
        code = line.split("#")[0].strip()
        if not code or code.startswith(("def ", "@", "return out", "if ", "else", "for ")):
            continue
        code = re.sub(r"^(return\s+|[\w\[\], ]+?\s*[-+*/]?=\s*)", "", code)
        squashed = _squash(code)
        if len(squashed) >= 14 and not _GENERIC.search(squashed):
            found.add(squashed)
    return found


# Lines that say nothing about the answer: input validation and seeding.
_GENERIC = re.compile(r"check_|^np\.random\.default_rng\(\w+\)$|^np\.asarray\(\w+\)$")


def test_every_chapter_meets_the_kinds_rule():
    kinds_used = set()
    for path in NOTEBOOKS:
        chapter = _chapter(path)
        exercises = chapter_of(chapter)
        kinds = {ex.kind for ex in exercises}
        kinds_used |= kinds
        numbered = [ex for ex in exercises if ex.id.split(".")[1].isdigit()]
        challenges = [ex for ex in exercises if not ex.id.split(".")[1].isdigit()]
        if chapter.isdigit():
            assert len(numbered) >= 4 and challenges, (
                f"chapter {chapter}: {len(numbered)} exercises and {len(challenges)} "
                "challenges; the rule is at least 4 and 1")
        else:
            assert len(exercises) >= 3, f"appendix {chapter}: {len(exercises)} exercises"
        assert len(kinds) >= 3, f"chapter {chapter} uses only {sorted(kinds)}"
    assert kinds_used == set(KINDS), f"the book never uses {set(KINDS) - kinds_used}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_exercise_has_stub_check_and_folded_solution_in_order(path):
    cells = _cells(path)
    chapter = _chapter(path)
    for exercise in chapter_of(chapter):
        checks = [i for i, c in enumerate(cells) if c["cell_type"] == "code"
                  and exercise.id in _CHECK.findall(_source(c))
                  and "solution" not in c["metadata"].get("tags", [])]
        solutions = [i for i, c in enumerate(cells) if c["cell_type"] == "code"
                     and _SOLUTION.findall(_source(c)) == [exercise.id]]
        assert checks, f"{exercise.id} has no check cell in {path.name}"
        assert len(solutions) == 1, f"{exercise.id}: {len(solutions)} solution cells"
        check_at, solution_at = checks[0], solutions[0]
        assert check_at < solution_at, f"{exercise.id}: the solution comes before the check"
        tags = cells[solution_at]["metadata"].get("tags", [])
        assert "solution" in tags and "remove-input" in tags, (exercise.id, tags)
        html = _outputs_text(cells[solution_at])
        assert "<details" in html and " open" not in html.split(">")[0], (
            f"{exercise.id}: the recorded solution is not folded")
        if exercise.kind == "debug":
            stub = _source(cells[check_at - 1])
            given = textwrap.dedent(inspect.getsource(exercise.given))
            mine = re.sub(r"def \w+\(", "def f(", given.split('"""', 2)[-1] if '"""' in given
                          else given)
            assert _squash(mine) in _squash(re.sub(r"def \w+\(", "def f(", stub)), (
                f"{exercise.id}: the stub cell must hold the library's buggy function")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_answer_appears_before_its_question(path):
    cells = _cells(path)
    chapter = _chapter(path)
    for exercise in chapter_of(chapter):
        solution_at = next(i for i, c in enumerate(cells) if c["cell_type"] == "code"
                           and _SOLUTION.findall(_source(c)) == [exercise.id])
        fragments = set()
        if callable(exercise.reference):
            fragments = _fragments(exercise.reference)
            if exercise.given is not None:
                fragments -= {_squash(f) for f in _fragments(exercise.given)}
        else:               # a predicted value: it must not be printed or written above
            ref = exercise.reference
            fragments = {_squash(repr(ref))} | ({f"{ref:,}"} if isinstance(ref, int) else set())
            fragments = {f for f in fragments if len(f) >= 4}   # long enough to mean it
        name = getattr(exercise.reference, "__name__", None)
        for i, cell in enumerate(cells[:solution_at]):
            text = _source(cell) + "\n" + _outputs_text(cell)
            if name and re.search(rf"getsource\(\s*{re.escape(name)}\b", text):
                pytest.fail(f"{path.name} cell {i} prints the source of {name} before "
                            f"exercise {exercise.id}'s solution")
            squashed = _squash(text)
            leaked = sorted(f for f in fragments if f in squashed)
            assert not leaked, (f"{path.name} cell {i} shows code of {name} before exercise "
                                f"{exercise.id}'s solution: {leaked[:3]}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_ends_its_exercises_with_progress(path):
    chapter = _chapter(path)
    sources = [_source(c) for c in _cells(path) if c["cell_type"] == "code"]
    wanted = f"progress({chapter if chapter.isdigit() else repr(chapter)})"
    assert any(wanted in s.replace('"', "'") for s in sources), f"no {wanted} cell"
