"""The book as a whole: table of contents, setup cells, recorded outputs, tags."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from _ci import ci_script

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))


setup_cell = ci_script("setup_cell")
colab_check = ci_script("colab_check")
IGNORE_TAGS = colab_check.ESCAPES_NBVAL


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _code_cells(path: Path) -> list[dict]:
    return [c for c in _load(path)["cells"] if c["cell_type"] == "code"]


def test_every_chapter_is_in_the_toc_and_every_toc_entry_exists():
    toc = (ROOT / "_toc.yml").read_text()
    listed = re.findall(r"file:\s*(\S+)", toc)
    for entry in listed:
        assert any((ROOT / f"{entry}{ext}").exists() for ext in (".ipynb", ".md")), entry
    for chapter in CHAPTERS:
        assert f"chapters/{chapter.stem}" in listed, f"{chapter.name} is not in _toc.yml"


def test_repository_url_is_read_from_config():
    url = setup_cell.repository_url()
    assert url.startswith("https://github.com/")
    assert url in setup_cell.expected_source()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_setup_cell_is_generated_from_config_and_hidden(chapter):
    cell = setup_cell.setup_cell(_load(chapter))
    assert "".join(cell["source"]) == setup_cell.expected_source(), "run `make sync`"
    assert "remove-cell" in cell["metadata"].get("tags", [])
    # Colab must never get torch, numpy or ipywidgets from the setup cell.
    assert not re.search(r"pip.*install.*(torch|numpy|ipywidgets)", "".join(cell["source"]))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_outputs_are_recorded_and_clean(chapter):
    cells = _code_cells(chapter)
    assert any(c["outputs"] for c in cells), "no recorded outputs: run `make record`"
    for i, cell in enumerate(cells):
        if cell["outputs"]:
            assert cell["execution_count"] is not None, f"code cell {i} has no execution count"
        text = json.dumps(cell["outputs"])
        assert "/work/" not in text and "/home/" not in text and "/tmp/" not in text, (
            f"code cell {i} output shows a path of this machine")
        assert not any(o["output_type"] == "error" for o in cell["outputs"]) or (
            "raises-exception" in cell["metadata"].get("tags", [])), f"code cell {i} errored"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_at_most_one_in_eight_code_cells_escape_nbval(chapter):
    cells = _code_cells(chapter)
    escaped = [c for c in cells if IGNORE_TAGS & set(c["metadata"].get("tags", []))]
    assert len(escaped) * 8 <= len(cells), f"{len(escaped)} of {len(cells)} cells escape nbval"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_has_the_house_sections(chapter):
    text = "\n".join("".join(c["source"]) for c in _load(chapter)["cells"]
                     if c["cell_type"] == "markdown")
    for heading in ("## Summary", "## Common mistakes", "## Exercises", "## Interview questions"):
        assert heading in text, f"missing section {heading!r}"
    assert "**Predict.**" in text and "<details>" in text
    checks = re.findall(r'check\("([0-9A-Z]+)\.(\w+)"', "\n".join(
        "".join(c["source"]) for c in _code_cells(chapter)))
    # The chapter's own exercises: numbered like the file (7.x in 07_...), or the appendix's A.x,
    # or an unnumbered chapter's letter (T.x in tokens.ipynb): its most checked prefix.
    prefix = chapter.stem.split("_")[0]
    number = str(int(prefix)) if prefix.isdigit() else None
    letters = Counter(ch for ch, _ in checks if not ch.isdigit()).most_common(1)
    own = number if any(ch == number for ch, _ in checks) else (
        letters[0][0] if letters else "A")
    ours = [ex for ch, ex in checks if ch == own]
    assert sum(ex.isdigit() for ex in ours) >= 2 and any(not ex.isdigit() for ex in ours), (
        "a chapter needs at least two checked exercises and one challenge")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_cites_a_source_and_links_glossary_terms(chapter):
    text = "\n".join("".join(c["source"]) for c in _load(chapter)["cells"]
                     if c["cell_type"] == "markdown")
    keys = set(re.findall(r"^@\w+\{(\w+),", (ROOT / "references.bib").read_text(), re.M))
    cited = set(re.findall(r"\{cite[pt]?\}`([^`]+)`", text))
    assert cited and all(k.strip() in keys for c in cited for k in c.split(",")), cited
    glossary = (ROOT / "glossary.md").read_text().lower()
    terms = re.findall(r"\{term\}`(?:[^`<]*<)?([^`>]+)>?`", text)
    assert len(set(terms)) >= 3, f"only {len(set(terms))} glossary terms linked"
    for term in terms:
        assert f"\n{term.lower()}\n" in glossary, f"{term!r} is not in the glossary"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_solutions_are_folded(chapter):
    # The solution's recorded output is an HTML <details> block, closed: folded in the book,
    # in Jupyter and in Colab alike. The cell's input (`solution("1.1")`) is left out of the
    # book.
    solutions = [c for c in _code_cells(chapter) if "solution" in c["metadata"].get("tags", [])]
    assert solutions, "no folded solution cells"
    for cell in solutions:
        assert "remove-input" in cell["metadata"]["tags"]
        html = [o["data"]["text/html"] for o in cell["outputs"] if "text/html" in
                o.get("data", {})]
        assert len(html) == 1, "a solution cell records one folded HTML block"
        opening = "".join(html[0]).split(">", 1)[0]
        assert opening.startswith("<details") and " open" not in opening


COLUMN = 80   # characters of code or output that fit the code column at a 1280 px window


def _visible_lines(cell: dict) -> list[tuple[str, str]]:
    """(what, line) for every line the book shows of a code cell: its input and its text."""
    tags = set(cell["metadata"].get("tags", []))
    if "remove-cell" in tags:
        return []
    lines = []
    if "remove-input" not in tags:
        lines += [("code", line) for line in "".join(cell["source"]).splitlines()]
    if "remove-output" not in tags:
        for out in cell["outputs"]:
            data = out.get("data", {})
            if "text" in out:
                lines += [("output", line) for line in "".join(out["text"]).splitlines()]
            elif "text/plain" in data and not {"text/html", "image/png"} & set(data):
                lines += [("output", line) for line in "".join(data["text/plain"]).splitlines()]
    return lines


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_code_and_output_fit_the_column(chapter):
    long = [(i, what, line) for i, cell in enumerate(_code_cells(chapter))
            for what, line in _visible_lines(cell) if len(line) > COLUMN]
    assert not long, (f"{len(long)} lines wider than {COLUMN} characters, e.g. code cell "
                      f"{long[0][0]} ({long[0][1]}): {long[0][2]!r}")


def _notebook(*outputs: str, tags=()) -> dict:
    cells = [{"cell_type": "code", "metadata": {}, "source": "# setup", "outputs": []}]
    cells += [{"cell_type": "code", "metadata": {"tags": list(tags)}, "source": "x",
               "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]}
              for text in outputs]
    return {"cells": cells}


def test_colab_check_compares_outputs_as_nbval_does(tmp_path):
    recorded, executed = tmp_path / "recorded.ipynb", tmp_path / "executed.ipynb"
    recorded.write_text(json.dumps(_notebook("loss 1.234\n", "took 3.2 s\n")))
    executed.write_text(json.dumps(_notebook("loss 1.234\n", "took 0.8 s\n")))
    assert colab_check.compare_outputs(recorded, executed) == []      # timings are sanitised
    executed.write_text(json.dumps(_notebook("loss 1.235\n", "took 3.2 s\n")))
    assert colab_check.compare_outputs(recorded, executed) == [
        "code cell 1: recorded 'loss 1.234', got 'loss 1.235'"]
    recorded.write_text(json.dumps(_notebook("loss 1.234\n", tags=["nbval-ignore-output"])))
    executed.write_text(json.dumps(_notebook("loss 9.999\n", tags=["nbval-ignore-output"])))
    assert colab_check.compare_outputs(recorded, executed) == []
