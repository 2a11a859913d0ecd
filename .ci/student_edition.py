"""Build the student edition: the same book without solutions (make book-student).

Copies the book's sources to _build/student-src, drops every cell tagged ``solution`` (the
folded library solutions after each exercise check), and builds the HTML into
_build/student-src/_build/html. Exercise stubs and checks stay, so students can still check
their answers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "_build" / "student-src"
SOURCES = ["_config.yml", "_toc.yml", "_ext", "_data", "_static", "references.bib", "chapters"]


def strip_solutions(path: Path) -> int:
    nb = json.loads(path.read_text())
    kept = [c for c in nb["cells"] if "solution" not in c.get("metadata", {}).get("tags", [])]
    removed = len(nb["cells"]) - len(kept)
    nb["cells"] = kept
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return removed


def main() -> int:
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    for name in SOURCES + [p.name for p in ROOT.glob("*.md") if p.name != "README.md"]:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, OUT / name)
    removed = sum(strip_solutions(p) for p in sorted((OUT / "chapters").glob("*.ipynb")))
    print(f"student edition: removed {removed} solution cells")
    jb = Path(sys.executable).with_name("jupyter-book")
    subprocess.run([str(jb), "build", str(OUT), "--all", "-W", "-n", "--keep-going"], check=True)
    print(f"student edition: {OUT / '_build' / 'html' / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
