"""The first code cell of every chapter, generated from _config.yml.

The repository address lives in one place, ``_config.yml`` (``repository.url``). Colab opens a
notebook on its own, without the rest of the repository, so each chapter carries a copy of the
address in its setup cell; this script writes those copies and checks them (tests call
``expected_source`` and ``setup_cell``).

    python .ci/setup_cell.py --write chapters/*.ipynb   # rewrite (make sync)
    python .ci/setup_cell.py chapters/*.ipynb           # check only
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TAG = "remove-cell"  # hidden in the rendered book; it still runs everywhere else

TEMPLATE = '''\
# Setup: make the book's `anatomy` package importable (locally, in CI and in Colab).
import importlib.util
import os
import subprocess
import sys

REPO_URL = os.environ.get("ANATOMY_REPO_URL", "{url}")
if importlib.util.find_spec("anatomy") is None:
    if os.path.isdir("../code/anatomy"):  # a clone of the book without `pip install -e .`
        sys.path.insert(0, os.path.abspath("../code"))
    else:  # Colab: install this package alone; its loose pins keep Colab's numpy, torch, widgets
        source = REPO_URL if os.path.isdir(REPO_URL) else f"git+{{REPO_URL}}"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)
        importlib.invalidate_caches()'''


def repository_url(config: Path = ROOT / "_config.yml") -> str:
    """``repository.url`` from _config.yml (read without a YAML dependency)."""
    text = config.read_text()
    block = re.search(r"^repository:\n((?:[ \t]+.*\n?)+)", text, re.MULTILINE)
    match = block and re.search(r"^\s+url:\s*(\S+)", block.group(1), re.MULTILINE)
    if not match:
        raise SystemExit(f"{config}: no repository.url found")
    return match.group(1).strip("\"'")


def expected_source(url: str | None = None) -> str:
    return TEMPLATE.format(url=url or repository_url())


def setup_cell(notebook: dict) -> dict:
    """The first code cell of a notebook."""
    return next(c for c in notebook["cells"] if c["cell_type"] == "code")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--write", action="store_true", help="rewrite cells that differ")
    args = parser.parse_args(argv)
    want, stale = expected_source(), []
    for path in args.notebooks:
        nb = json.loads(path.read_text())
        cell = setup_cell(nb)
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if "".join(cell["source"]) == want and TAG in tags:
            continue
        stale.append(path)
        if args.write:
            cell["source"] = want.splitlines(keepends=True)
            if TAG not in tags:
                tags.append(TAG)
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    for path in stale:
        print(f"{path}: setup cell {'rewritten' if args.write else 'is out of date (make sync)'}")
    return 0 if args.write or not stale else 1


if __name__ == "__main__":
    sys.exit(main())
