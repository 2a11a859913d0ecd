"""Re-record chapter outputs: execute each notebook top to bottom, in place (make record).

Outputs in the committed notebooks are what the book shows and what nbval compares against;
this is the only sanctioned way to change them. Each chapter's execution time is stored in
``_data/runtimes.json`` (read by the runtimes page), so no timing is ever typed by hand.

    python .ci/record.py [--jobs 2] chapters/*.ipynb

Two chapters run at a time by default, one per core, the longest first.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
RUNTIMES = ROOT / "_data" / "runtimes.json"


def record(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    # No widget state: the labs are live-only (their outputs are removed from the book), and
    # their stored PNG frames would only bloat the notebooks.
    nb.metadata.pop("widgets", None)
    client = NotebookClient(nb, timeout=900, kernel_name="python3", record_timing=False,
                            store_widget_state=False,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nbformat.write(nb, path)
    return seconds


def machine() -> str:
    threads = os.environ.get("OMP_NUM_THREADS", "all")
    return (f"a {os.cpu_count()}-core CPU using {threads} thread{'s' if threads != '1' else ''} "
            f"({platform.machine()}, Python {platform.python_version()})")


def main(paths: list[str]) -> int:
    # Record under the same thread settings as `make nbval` (the Makefile exports these), so a
    # direct `python .ci/record.py` records exactly what CI will compare against.
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    jobs, paths = (int(paths[1]), paths[2:]) if paths[:1] == ["--jobs"] else (2, paths)
    # the longest first, so that two workers finish at about the same time
    known = json.loads(RUNTIMES.read_text())["seconds"] if RUNTIMES.exists() else {}
    order = sorted((Path(p) for p in paths), key=lambda p: -known.get(p.stem, 0.0))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for path, took in zip(order, pool.map(record, order), strict=True):
            _store_runtime(path.stem, took)
            print(f"recorded {path} in {took:.1f} s", flush=True)
    return 0


def _store_runtime(chapter: str, took: float) -> None:
    # Read, update, replace after every chapter, so that two record runs side by side (one
    # per core, on different chapters) keep each other's entries.
    seconds = json.loads(RUNTIMES.read_text())["seconds"] if RUNTIMES.exists() else {}
    seconds[chapter] = round(took, 1)
    RUNTIMES.parent.mkdir(exist_ok=True)
    data = {"machine": machine(), "seconds": dict(sorted(seconds.items()))}
    tmp = RUNTIMES.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, RUNTIMES)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
