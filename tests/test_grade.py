"""`python -m anatomy.exercises.grade` on a class: every verdict computed by the grader.

A class of four notebooks (honest, forged, crashing, never-ending) is graded once; the forged
one prints verdicts, redefines `check`, patches the package's checking code and writes
unsigned grade lines to every file descriptor, and none of it produces "passed"."""

from __future__ import annotations

import csv
import json

import nbformat
import pytest

from anatomy.exercises import chapter_of, grade

IMPORTS = "import numpy as np\nfrom anatomy.exercises import check"
SOFTMAX = ("def my_softmax(z, axis=-1):\n    e = np.exp(z - z.max(axis=axis, keepdims=True))\n"
           "    return e / e.sum(axis=axis, keepdims=True)")
# The chapter's own check cells, by id (chapters/01_attention.ipynb).
CHECK_1_1, CHECK_1_3 = "8421a0b0", "cbb0725f"
FORGE = """\
import os
import numpy
import anatomy.exercises as ex
import anatomy.exercises._core as core
for i in ["1.1", "1.2", "1.3", "1.4", "1.C"]:
    print(f"Exercise {i}: passed")
core.Exercise.check = lambda self, *a, **k: core.Result(self.id, "passed", "passed")
ex.check = lambda *a, **k: core.Result("1.1", "passed", "passed")
numpy.allclose = lambda *a, **k: True
line = b'{"record": {"exercise": "1.3", "message": "", "status": "passed"}, "mac": "0"}\\n'
for fd in range(3, 30):
    try:
        os.write(fd, line)
    except OSError:
        pass
def check(*args):
    print("Exercise 1.1: passed")
my_softmax = lambda z, axis=-1: z
my_rows = {2}
"""


def _notebook(path, *cells):
    """cells: source strings, or (cell id, source) pairs."""
    nb = nbformat.v4.new_notebook()
    for cell in cells:
        cell_id, source = cell if isinstance(cell, tuple) else (None, cell)
        made = nbformat.v4.new_code_cell(source)
        if cell_id:
            made.id = cell_id
        nb.cells.append(made)
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("class")
    _notebook(folder / "honest.ipynb", IMPORTS, SOFTMAX, (CHECK_1_1, 'check("1.1", my_softmax)'),
              "my_rows = {0, 1, 2, 3}", (CHECK_1_3, 'check("1.3", my_rows)'))
    # The reader's check cell is replaced by the chapter's own (same id): its edit is lost.
    _notebook(folder / "forged.ipynb", IMPORTS, FORGE,
              (CHECK_1_1, 'print("Exercise 1.1: passed")'),
              (CHECK_1_3, 'check("1.3", my_rows)'))
    _notebook(folder / "crashing.ipynb", IMPORTS, "my_rows = {0, 1, 2, 3}",
              (CHECK_1_3, 'check("1.3", my_rows)'), "raise RuntimeError('my code crashed')",
              SOFTMAX, (CHECK_1_1, 'check("1.1", my_softmax)'))
    _notebook(folder / "never_ending.ipynb", IMPORTS, SOFTMAX,
              (CHECK_1_1, 'check("1.1", my_softmax)'), "while True:\n    pass")
    out, table = folder / "grades.json", folder / "grades.csv"
    code = grade.main([str(folder), "--json", str(out), "--csv", str(table),
                       "--timeout", "60", "--cell-timeout", "8"])
    report = json.loads(out.read_text())
    rows = {(r["notebook"].rsplit("/", 1)[-1].split(".")[0], r["exercise"]): r
            for r in report["rows"]}
    return code, report, rows, table


def test_honest_answers_pass(graded):
    _, _, rows, _ = graded
    assert rows["honest", "1.1"]["status"] == "passed"
    assert rows["honest", "1.3"]["status"] == "passed"
    assert rows["honest", "1.2"]["status"] == "not attempted"


def test_nothing_forged_passes(graded):
    _, _, rows, _ = graded
    assert not any(r["status"] == "passed" for (nb, _), r in rows.items() if nb == "forged")
    assert "changed the checking code" in rows["forged", "1.1"]["detail"]


def test_a_crash_and_a_cell_that_never_ends_stop_the_run(graded):
    _, _, rows, _ = graded
    assert rows["crashing", "1.3"]["status"] == "passed"
    assert rows["crashing", "1.1"]["status"] == "not reached"
    assert "RuntimeError: my code crashed" in rows["crashing", "1.1"]["detail"]
    assert rows["never_ending", "1.1"]["status"] == "passed"       # checked before the loop
    assert rows["never_ending", "1.3"]["status"] == "not reached"
    assert "time limit" in rows["never_ending", "1.3"]["detail"]


def test_points_kinds_table_and_csv(graded, capsys):
    code, report, _, table = graded
    assert code == 0 and not report["could_not_run"]
    challenge = next(ex for ex in chapter_of(1) if ex.is_challenge)
    assert challenge.points > 1
    honest = next(n for n in report["notebooks"] if n["notebook"].endswith("honest.ipynb"))
    assert honest["points"] == 2 and honest["max_points"] == sum(e.points for e in chapter_of(1))
    with table.open() as handle:
        header, *body = list(csv.reader(handle))
    assert "1.1 (implement, 1 pt)" in header and len(body) == 4
    assert header[-2:] == ["points", "max_points"]
    assert "network" in report


def test_printed_table_and_no_tcp_warning(tmp_path, capsys):
    nb = _notebook(tmp_path / "reader.ipynb", IMPORTS, "my_rows = {0, 1, 2, 3}",
                   (CHECK_1_3, 'check("1.3", my_rows)'))
    assert grade.main([str(nb)]) == 0
    out = capsys.readouterr().out
    assert "reader.ipynb" in out and "pred" in out and "implement" in out
    assert "without encryption" not in out
    assert "network:" in out


@pytest.mark.parametrize("argv, fragment", [
    (["missing.ipynb"], "no notebook or folder at missing.ipynb"),
    (["--timeout", "-1", "x.ipynb"], "must be more than 0"),
    (["--cell-timeout", "soon", "x.ipynb"], "expected a number of seconds"),
    ([], "the following arguments are required"),
    (["--bogus", "x.ipynb"], "unrecognized arguments"),
])
def test_bad_input_is_one_line_and_status_2(argv, fragment, capsys):
    assert grade.main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1, err


def test_an_empty_folder_is_bad_input(tmp_path, capsys):
    assert grade.main([str(tmp_path)]) == 2
    assert "no notebooks" in capsys.readouterr().err


def test_a_notebook_without_checks_could_not_run(tmp_path, capsys):
    nb = _notebook(tmp_path / "empty.ipynb", "x = 1")
    assert grade.main([str(nb)]) == 1
    assert "no chapter to grade" in capsys.readouterr().out


def test_a_chapter_heading_is_the_title_progress_uses():
    from anatomy.exercises import chapter_title, registry
    prefixes = dict.fromkeys(ex.chapter for ex in registry().values())
    assert chapter_title("T") == "Tokens" and chapter_title(1) == "Chapter 1"
    for prefix in prefixes:
        rows = [grade.Row("x.ipynb", ex.id, ex.kind, ex.points, "passed")
                for ex in chapter_of(prefix)]
        heading = grade.table([grade.Graded("x.ipynb", prefix, rows)]).splitlines()[0]
        assert heading == chapter_title(prefix), (prefix, heading)
