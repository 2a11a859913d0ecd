"""`python -m anatomy.exercises.grade` on a reader's notebook: a right, a wrong, an
unattempted and a crashing answer, then exercises the crash never reached."""

from __future__ import annotations

import json

import nbformat
import pytest

from anatomy.exercises import chapter_of, grade


def _notebook(path, *sources, solution_tagged=()):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
    for i in solution_tagged:
        nb.cells[i].metadata["tags"] = ["solution"]
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("grade")
    reader = _notebook(
        folder / "01_attention.ipynb",
        "from anatomy.exercises import check, solution\nfrom anatomy.attention import softmax",
        'check("1.1", softmax)',                                   # right
        'check("1.2", lambda q, k: q @ k.T)',                      # wrong
        'check("1.3", ...)',                                       # not attempted
        'solution("1.4")',                                          # a solution cell: skipped
        "raise RuntimeError('my code crashed')",                   # crash
        'check("1.4", lambda X, query, key: None)',                # never reached
        solution_tagged=(4,))
    out = folder / "grades.json"
    code = grade.main([str(reader), str(folder / "missing.ipynb"), "--json", str(out)])
    return code, json.loads(out.read_text())


def test_rows_for_right_wrong_unattempted_and_crashing_answers(graded):
    code, report = graded
    rows = {row["exercise"]: row for row in report["rows"]}
    assert rows["1.1"]["status"] == "passed"
    assert rows["1.2"]["status"] == "failed" and "on q [3, 4]" in rows["1.2"]["detail"]
    assert rows["1.3"]["status"] == "not attempted"
    # 1.4's solution cell is not run, and the crash stops the notebook before its check.
    assert rows["1.4"]["status"] == "not reached"
    assert "RuntimeError" in rows["1.4"]["detail"]
    assert rows["1.C"]["status"] == "not reached"


def test_exit_status_says_only_whether_every_notebook_ran(graded, tmp_path):
    code, report = graded
    assert code == 1 and len(report["could_not_run"]) == 1      # the missing notebook
    assert "no notebook at" in report["could_not_run"][0]
    ok = _notebook(tmp_path / "01.ipynb", "from anatomy.exercises import check",
                   'check("1.3", {2})')
    assert grade.main([str(ok)]) == 0


def test_printed_rows(tmp_path, capsys):
    nb = _notebook(tmp_path / "reader.ipynb", "from anatomy.exercises import check",
                   'check("1.3", {0, 1, 2, 3})')
    assert grade.main([str(nb)]) == 0
    out = capsys.readouterr().out
    total = len(chapter_of(1))
    assert "1.3  passed" in out and "1.1  not attempted" in out and f"1 of {total} passed" in out
