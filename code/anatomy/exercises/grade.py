"""Grade readers' notebooks: run each one and report every exercise of its chapter.

    python -m anatomy.exercises.grade chapters/01_attention.ipynb [more.ipynb ...]
        [--json results.json] [--timeout 600]

Each notebook runs top to bottom in a fresh kernel (nbclient), without the folded solution
cells (so the library's answers do not run) and with network access switched off through
the proxy settings. For every exercise of the notebook's chapter it prints one row: *not
attempted*, *failed: why*, or *passed*, taken from the last verdict the notebook's own
``check`` cells printed. A notebook that crashes half way still reports the exercises
checked before the crash; the rest are *not reached*.

The exit status is 0 when every notebook could be run (whatever the grades), 1 when one
could not be read or its kernel could not start, and 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from . import _module_name, chapter_of

_VERDICT = re.compile(r"^Exercise (\S+): (.*)$")
_CHAPTER = re.compile(r"""\bcheck\(\s*["']([0-9A-Z]+)\.""")
# Unroutable proxies: urllib, requests and pip fail at once instead of reaching the internet.
_OFFLINE = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
            "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
            "no_proxy": "", "NO_PROXY": "", "HF_HUB_OFFLINE": "1", "PIP_NO_INDEX": "1"}


@dataclass
class Row:
    """One exercise's grade in one notebook."""

    notebook: str
    exercise: str
    status: str           # "passed", "failed", "not attempted" or "not reached"
    detail: str = ""

    @property
    def line(self) -> str:
        text = f"{self.exercise:>5}  {self.status}"
        return text + (f": {self.detail}" if self.detail else "")


class CouldNotRun(Exception):
    """The notebook could not be read, or no kernel could run it."""


def _verdicts(nb) -> dict[str, str]:
    """The last printed verdict of each exercise, from the cells' stdout, in order."""
    found: dict[str, str] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") != "stream" or output.get("name") != "stdout":
                continue
            text = output.get("text", "")
            # A verdict may be wrapped over several lines, continuations indented.
            for block in re.split(r"\n(?! {4})", text):
                match = _VERDICT.match(" ".join(block.split()))
                if match:
                    found[match.group(1)] = match.group(2)
    return found


def _chapter(nb) -> str | None:
    sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    chapters = _CHAPTER.findall(sources)
    return max(set(chapters), key=chapters.count) if chapters else None


def _execute(path: Path, timeout: int):
    """Run the notebook; return it with its outputs and the error that stopped it, if any."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as error:
        raise CouldNotRun(f"cannot read {path}: {error}") from None
    nb.cells = [c for c in nb.cells if "solution" not in c.get("metadata", {}).get("tags", [])]
    old = {key: os.environ.get(key) for key in _OFFLINE}
    os.environ.update(_OFFLINE)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}})
    stopped = ""
    try:
        client.execute()
    except CellTimeoutError:
        stopped = f"a cell ran past the {timeout} s timeout"
    except CellExecutionError as error:
        stopped = f"a cell raised {getattr(error, 'ename', 'an error')}"
    except DeadKernelError as error:
        stopped = f"the kernel died ({error})"
    except Exception as error:  # no kernel, a broken kernelspec: the notebook never ran
        raise CouldNotRun(f"cannot run {path}: {type(error).__name__}: {error}") from None
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return nb, stopped


def grade(path: str | os.PathLike, timeout: int = 600) -> list[Row]:
    """Run one notebook and grade every exercise of its chapter."""
    path = Path(path)
    if not path.is_file():
        raise CouldNotRun(f"no notebook at {path}")
    nb, stopped = _execute(path, timeout)
    chapter = _chapter(nb)
    if chapter is None or _module_name(chapter) is None:
        raise CouldNotRun(f"{path}: no check(\"N.x\", ...) cell, so no chapter to grade")
    verdicts = _verdicts(nb)
    rows = []
    for exercise in chapter_of(chapter):
        verdict = verdicts.get(exercise.id)
        if verdict is None:
            status, detail = ("not reached", stopped) if stopped else ("not attempted", "")
        elif verdict.startswith("passed"):
            status, detail = "passed", ""
        elif verdict.startswith("not attempted"):
            status, detail = "not attempted", ""
        else:
            status = "failed"
            detail = verdict.removeprefix("failed: ")
        rows.append(Row(str(path), exercise.id, status, detail))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m anatomy.exercises.grade",
                                     description="Run readers' notebooks and grade every "
                                                 "exercise of their chapter.")
    parser.add_argument("notebooks", nargs="+", help="notebooks to grade")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON here")
    parser.add_argument("--timeout", type=int, default=600,
                        help="seconds allowed per cell (default 600)")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    problems: list[str] = []
    for notebook in args.notebooks:
        print(notebook)
        try:
            graded = grade(notebook, timeout=args.timeout)
        except CouldNotRun as error:
            problems.append(str(error))
            print(f"  could not run: {error}")
            continue
        rows.extend(graded)
        for row in graded:
            print("  " + row.line)
        passed = sum(r.status == "passed" for r in graded)
        print(f"  {passed} of {len(graded)} passed")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"rows": [asdict(r) for r in rows], "could_not_run": problems}, indent=2) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
