"""Grade a class: run each reader's notebook and judge every exercise of its chapter.

    python -m anatomy.exercises.grade NOTEBOOK_OR_FOLDER... [--json PATH] [--csv PATH]
        [--timeout 1200] [--cell-timeout 600] [--check-timeout 300] [--memory-gb 8]
        [--chapters DIR]

Every verdict is computed by the grader, never read from what the notebook printed. Each
notebook runs in a fresh Python process (``_judge``) in its own temporary folder, under a
memory limit, with the network off (a network namespace through ``unshare -rn`` where the
system allows it; otherwise only proxy variables point nowhere, which a direct socket
ignores, and the report says so). The folded solution cells are left out, and the
chapter's own check cells (matched by cell id in the pristine chapter under ``--chapters``)
replace the reader's. A check cell is not run as written: it only records what the
reader's name holds there, and after the last cell the grader's process judges those
answers with the checking code it imported before the reader's first cell, once it has
verified that no cell replaced any of it. The grades come back on a pipe, each line signed
with a key made for this run, so neither a printed "passed" nor a redefined ``check`` nor a
patched ``_core`` produces a grade.

It prints a table per chapter (a row per notebook, a column per exercise, its kind and its
points in the header, the total at the end of the row), then each failure's reason. The exit
status is 0 when every notebook could be run (whatever the grades), 1 when one could not be
read or run, and 2 for a usage error (one line on stderr).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import _module_name, chapter_of, chapter_title

_CHECK = re.compile(r"""\bcheck\(\s*["']([0-9A-Z]+)\.""")
_SOLUTION = re.compile(r"""\bsolution\(\s*["']""")
# Unroutable proxies: urllib, requests and pip fail at once instead of reaching the internet.
_OFFLINE = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
            "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
            "no_proxy": "", "NO_PROXY": "", "HF_HUB_OFFLINE": "1", "PIP_NO_INDEX": "1",
            "MPLBACKEND": "Agg"}
_PRISTINE = Path(__file__).resolve().parents[3] / "chapters"
_MARK = {"passed": "ok", "failed": "FAIL", "not attempted": "-", "not reached": "n/r"}
_KIND = {"implement": "impl", "predict": "pred", "debug": "debug", "construct": "constr",
         "measure": "meas"}


@dataclass
class Row:
    """One exercise's grade in one notebook."""

    notebook: str
    exercise: str
    kind: str
    points: int
    status: str           # "passed", "failed", "not attempted" or "not reached"
    detail: str = ""

    @property
    def line(self) -> str:
        text = f"{self.exercise:>5}  {self.status}"
        return text + (f": {self.detail}" if self.detail else "")


@dataclass
class Graded:
    """One notebook's grades."""

    notebook: str
    chapter: str
    rows: list[Row] = field(default_factory=list)

    @property
    def points(self) -> int:
        return sum(r.points for r in self.rows if r.status == "passed")

    @property
    def max_points(self) -> int:
        return sum(r.points for r in self.rows)


class CouldNotRun(Exception):
    """The notebook could not be read, or no process could run it."""


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit status 2."""


@functools.cache
def network_namespace() -> bool:
    """Whether ``unshare -rn`` can give the reader's process a network of its own (none)."""
    if not shutil.which("unshare"):
        return False
    try:
        done = subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def network_note() -> str:
    if network_namespace():
        return "network: off (a network namespace of its own, unshare -rn)"
    return ("network: NOT off: unshare -rn is not available here, so only proxy variables "
            "are set, which a direct socket ignores")


# ---- which cells run ---------------------------------------------------------------------


def _code_cells(nb) -> list[dict]:
    return [c for c in nb["cells"] if c.get("cell_type") == "code"]


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _is_solution(cell: dict) -> bool:
    return "solution" in cell.get("metadata", {}).get("tags", [])


@functools.cache
def _pristine(folder: Path) -> dict[str, dict[str, dict]]:
    """{chapter: {cell id: cell}} of the chapters' own check and solution cells."""
    found: dict[str, dict[str, dict]] = {}
    for path in sorted(folder.glob("*.ipynb")):
        try:
            cells = _code_cells(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
        chapter = _chapter_of_cells(cells)
        if chapter:
            found[chapter] = {c["id"]: c for c in cells if c.get("id") and (
                _CHECK.search(_source(c)) or _is_solution(c))}
    return found


def _chapter_of_cells(cells: list[dict]) -> str | None:
    chapters = [m for c in cells if not _is_solution(c) for m in _CHECK.findall(_source(c))]
    return max(set(chapters), key=chapters.count) if chapters else None


def plan(nb: dict, pristine_folder: Path | None = None) -> tuple[str, list[dict]]:
    """The notebook's chapter and the cells to run: solutions left out, the chapter's own
    check cells in place of the reader's (by cell id)."""
    cells = _code_cells(nb)
    own = _pristine(pristine_folder) if pristine_folder and pristine_folder.is_dir() else {}
    ids = {c.get("id") for c in cells}
    # The chapter whose check cells the notebook shares; else the one its checks name.
    chapter = max(own, key=lambda ch: len(ids & own[ch].keys()), default=None)
    if chapter is None or not ids & own[chapter].keys():
        chapter = _chapter_of_cells(cells)
    if chapter is None or _module_name(chapter) is None:
        raise CouldNotRun('no check("N.x", ...) cell, so no chapter to grade')
    originals = own.get(chapter, {})
    run = []
    for cell in cells:
        original = originals.get(cell.get("id"))
        if _is_solution(cell) or (original is not None and _is_solution(original)):
            continue
        source = _source(original if original is not None else cell)
        run.append({"id": str(cell.get("id", "")), "source": source,
                    "check": bool(_CHECK.search(source))})
    return chapter, run


# ---- running one notebook ----------------------------------------------------------------


def _limit_memory(limit_bytes: int):
    def apply() -> None:
        try:
            import resource
        except ImportError:        # pragma: no cover - not on Windows
            return
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    return apply


def _verified(raw: str, key: bytes) -> dict[str, dict]:
    """The records on the pipe whose signature is right; anything else is ignored."""
    import hmac

    records = {}
    for line in raw.splitlines():
        try:
            item = json.loads(line)
            record, mac = item["record"], item["mac"]
            body = json.dumps(record, sort_keys=True).encode()
        except (ValueError, KeyError, TypeError):
            continue
        if hmac.compare_digest(hmac.new(key, body, "sha256").hexdigest(), str(mac)):
            records[record["exercise"]] = record
    return records


def grade(path: str | os.PathLike, timeout: float = 1200, cell_timeout: float = 600,
          check_timeout: float = 300, memory_gb: float = 8,
          chapters: str | os.PathLike | None = _PRISTINE) -> Graded:
    """Run one notebook in a child process and grade every exercise of its chapter."""
    path = Path(path)
    try:
        nb = json.loads(path.read_text())
        chapter, cells = plan(nb, Path(chapters) if chapters else None)
    except CouldNotRun as error:
        raise CouldNotRun(f"{path}: {error}") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CouldNotRun(f"cannot read {path}: {error}") from None
    exercises = chapter_of(chapter)
    key = secrets.token_bytes(32)
    with tempfile.TemporaryDirectory(prefix="anatomy-grade-") as work:
        plan_file = Path(work) / ".plan.json"
        plan_file.write_text(json.dumps({"chapter": chapter, "cells": cells,
                                         "timeout": timeout, "cell_timeout": cell_timeout,
                                         "check_timeout": check_timeout}))
        env = {**os.environ, **_OFFLINE,
               "PYTHONPATH": os.pathsep.join(filter(None, [
                   str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")]))}
        read_end, write_end = os.pipe()
        command = [sys.executable, "-m", "anatomy.exercises._judge", str(plan_file),
                   str(write_end)]
        if network_namespace():
            command = ["unshare", "-rn", *command]
        # The cells run in a folder of their own; the reader's notebook folder is not theirs.
        log = open(Path(work) / ".output", "wb")  # noqa: SIM115 - closed below
        try:
            child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=log,
                                     stderr=subprocess.STDOUT, cwd=work, env=env,
                                     pass_fds=(write_end,), start_new_session=True,
                                     preexec_fn=_limit_memory(int(memory_gb * 2**30)))
        except OSError as error:
            os.close(read_end)
            raise CouldNotRun(f"cannot run {path}: {error}") from None
        finally:
            os.close(write_end)
            log.close()
        chunks: list[bytes] = []
        reader = threading.Thread(target=_drain, args=(read_end, chunks), daemon=True)
        reader.start()
        try:
            child.stdin.write(key.hex().encode() + b"\n")
            child.stdin.close()
        except OSError:
            pass
        # The cells have `timeout`; each check then has `check_timeout` (the child enforces
        # both); past that, and a little slack, the whole process group is killed.
        hard = timeout + check_timeout * len(exercises) + 30
        killed = ""
        started = time.monotonic()
        try:
            child.wait(timeout=hard)
        except subprocess.TimeoutExpired:
            killed = f"the notebook ran past its time limit ({hard:.0f} s in all) and was stopped"
        _kill_group(child)
        reader.join(timeout=5)
        if not killed and child.returncode not in (0, None):
            killed = (f"the notebook's process ended with status {child.returncode} after "
                      f"{time.monotonic() - started:.0f} s (out of memory, or it exited)")
        records = _verified(b"".join(chunks).decode(errors="replace"), key)
    graded = Graded(str(path), chapter)
    for exercise in exercises:
        record = records.get(exercise.id)
        if record is None:
            status, detail = "not reached", killed or "no grade came back"
        else:
            status = record["status"]
            detail = "" if status == "passed" else record["message"]
            detail = detail.removeprefix("failed: ").removeprefix("not attempted yet ")
        graded.rows.append(Row(str(path), exercise.id, exercise.kind, exercise.points,
                               status, detail))
    return graded


def _drain(fd: int, chunks: list[bytes]) -> None:
    with os.fdopen(fd, "rb") as pipe:
        while block := pipe.read(65536):
            chunks.append(block)


def _kill_group(child: subprocess.Popen) -> None:
    """Stop the child and anything it started (its own session)."""
    import signal

    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    child.wait()


# ---- the report ---------------------------------------------------------------------------


def notebooks(paths: list[str]) -> list[Path]:
    """The notebooks named, a folder standing for the notebooks directly inside it."""
    found = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            inside = sorted(p for p in path.glob("*.ipynb") if p.is_file())
            if not inside:
                raise UsageError(f"no notebooks (*.ipynb) in the folder {path}")
            found.extend(inside)
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"no notebook or folder at {path}")
    return found


def table(graded: list[Graded]) -> str:
    """One table per chapter: a row per notebook, a column per exercise, the points."""
    lines = []
    for chapter in dict.fromkeys(g.chapter for g in graded):
        group = [g for g in graded if g.chapter == chapter]
        exercises = chapter_of(chapter)
        width = max(12, *(len(Path(g.notebook).name) for g in group))
        columns = [max(6, len(_KIND[ex.kind]) + 1) for ex in exercises]
        lines.append(chapter_title(chapter))
        lines.append(" " * width + "".join(f"{ex.id:>{w}}" for ex, w in
                                           zip(exercises, columns, strict=True)) + "  points")
        lines.append(f"{'(kind, points)':<{width}}" + "".join(
            f"{_KIND[ex.kind]:>{w}}" for ex, w in zip(exercises, columns, strict=True))
            + f"  of {sum(ex.points for ex in exercises)}")
        lines.append(" " * width + "".join(f"{ex.points:>{w}}" for ex, w in
                                           zip(exercises, columns, strict=True)))
        for g in group:
            marks = {r.exercise: _MARK.get(r.status, r.status) for r in g.rows}
            lines.append(f"{Path(g.notebook).name:<{width}}" + "".join(
                f"{marks[ex.id]:>{w}}" for ex, w in zip(exercises, columns, strict=True))
                + f"  {g.points:>3} / {g.max_points}")
        lines.append("")
    lines.append("ok passed, FAIL failed, - not attempted, n/r not reached. Kinds: "
                 + ", ".join(f"{short} {kind}" for kind, short in _KIND.items()) + ".")
    details = [f"  {Path(r.notebook).name} {r.exercise}: {r.status}: {r.detail}"
               for g in graded for r in g.rows if r.status != "passed" and r.detail]
    if details:
        lines += ["", "Why:", *details]
    return "\n".join(lines)


def _write_csv(path: Path, graded: list[Graded]) -> None:
    exercises = list(dict.fromkeys((r.exercise, r.kind, r.points) for g in graded
                                   for r in g.rows))
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["notebook", "chapter",
                      *(f"{e} ({kind}, {points} pt)" for e, kind, points in exercises),
                      "points", "max_points"])
        for g in graded:
            status = {r.exercise: r.status for r in g.rows}
            out.writerow([g.notebook, g.chapter, *(status.get(e, "") for e, _, _ in exercises),
                          g.points, g.max_points])


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m anatomy.exercises.grade",
                     description="Run readers' notebooks and grade every exercise of their "
                                 "chapter.")
    parser.add_argument("notebooks", nargs="+", help="notebooks, or folders of them")
    parser.add_argument("--json", metavar="PATH", help="also write the grades as JSON here")
    parser.add_argument("--csv", metavar="PATH", help="also write the table as CSV here")
    parser.add_argument("--timeout", type=_positive, default=1200,
                        help="seconds allowed for all of a notebook's cells (default 1200)")
    parser.add_argument("--cell-timeout", type=_positive, default=600,
                        help="seconds allowed per cell (default 600)")
    parser.add_argument("--check-timeout", type=_positive, default=300,
                        help="seconds allowed per exercise's check (default 300)")
    parser.add_argument("--memory-gb", type=_positive, default=8,
                        help="address space allowed to a notebook's process (default 8)")
    parser.add_argument("--chapters", metavar="DIR", default=str(_PRISTINE),
                        help="the book's own chapter notebooks, whose check cells replace "
                             "the reader's (default: this checkout's chapters/)")
    try:
        args = parser.parse_args(argv)
        paths = notebooks(args.notebooks)
    except UsageError as error:
        print(f"grade: error: {error}", file=sys.stderr)
        return 2
    graded: list[Graded] = []
    problems: list[str] = []
    for path in paths:
        try:
            graded.append(grade(path, timeout=args.timeout, cell_timeout=args.cell_timeout,
                                check_timeout=args.check_timeout, memory_gb=args.memory_gb,
                                chapters=args.chapters))
        except CouldNotRun as error:
            problems.append(str(error))
    if graded:
        print(table(graded))
    for problem in problems:
        print(f"could not run: {problem}")
    print(network_note())
    if args.json:
        Path(args.json).write_text(json.dumps({
            "notebooks": [{"notebook": g.notebook, "chapter": g.chapter, "points": g.points,
                           "max_points": g.max_points, "rows": [asdict(r) for r in g.rows]}
                          for g in graded],
            "rows": [asdict(r) for g in graded for r in g.rows],
            "could_not_run": problems, "network": network_note()}, indent=2) + "\n")
    if args.csv:
        _write_csv(Path(args.csv), graded)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
