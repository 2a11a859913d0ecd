"""Run chapters as Colab would (make colab-check).

Builds a fresh virtual environment holding only what Colab preinstalls (.ci/colab-env.txt:
numpy, torch, matplotlib, tqdm, ipywidgets 7.7, a Jupyter kernel), clones this repository,
copies chapters 1 and 9 to a folder outside any checkout, points ANATOMY_REPO_URL at the clone,
and executes them end to end. The chapters' setup cell must install the anatomy package from
that URL, and the install must leave every preinstalled package exactly as it was.

By hand, other environments and chapters: ``python .ci/colab_check.py --env
.ci/colab-env-torch28.txt --chapters all`` runs every chapter on the oldest torch that Colab
ships (2.8; it downloads a CUDA build of several GB, so ``make test`` does not do this).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "_build" / "colab"
ENV_FILE = ROOT / ".ci" / "colab-env.txt"
CHAPTERS = ["01_attention", "09_training"]

EXECUTE = """
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=900, kernel_name="python3",
               resources={"metadata": {"path": sys.argv[2]}}).execute()
nbformat.write(nb, sys.argv[1])
"""


def sh(*cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def fresh_venv(env_file: Path) -> Path:
    venv = WORK / ("venv" if env_file == ENV_FILE else f"venv-{env_file.stem}")
    stamp = venv / ".colab-env-sha"
    want = hashlib.sha256(env_file.read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == want:
        sh(venv / "bin/python", "-m", "pip", "uninstall", "-q", "-y", "anatomy")
    else:
        shutil.rmtree(venv, ignore_errors=True)
        sh(sys.executable, "-m", "venv", venv)
        sh(venv / "bin/python", "-m", "pip", "install", "-q", "-r", env_file)
        stamp.write_text(want)
    # The kernelspec the notebooks ask for ("python3") must be this environment's.
    sh(venv / "bin/python", "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3")
    return venv / "bin/python"


def freeze(python: Path) -> dict[str, str]:
    out = sh(python, "-m", "pip", "freeze", capture_output=True, text=True).stdout
    pairs = (re.split(r"==| @ ", line, maxsplit=1) for line in out.splitlines())
    return {pair[0].lower(): pair[1] for pair in pairs if len(pair) == 2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", type=Path, default=ENV_FILE,
                        help="requirements file of the Colab-like environment")
    parser.add_argument("--chapters", nargs="+", default=CHAPTERS,
                        help="chapter names (e.g. 04_heads), or 'all'")
    args = parser.parse_args(argv)
    chapters = args.chapters
    if chapters == ["all"]:
        chapters = sorted(p.stem for p in (ROOT / "chapters").glob("*.ipynb"))
    python = fresh_venv(args.env.resolve())
    venv_bin = python.parent
    before = freeze(python)
    clone, run = WORK / "repo", WORK / "run" / "chapters"
    shutil.rmtree(clone, ignore_errors=True)
    shutil.rmtree(run.parent, ignore_errors=True)
    sh("git", "clone", "-q", ROOT, clone)
    run.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["ANATOMY_REPO_URL"] = str(clone)
    env["PATH"] = f"{venv_bin}{os.pathsep}{env['PATH']}"
    failures = 0
    for name in chapters:
        source = ROOT / "chapters" / f"{name}.ipynb"
        if not source.exists():
            print(f"colab-check: {name}: not written yet, skipped")
            continue
        target = run / source.name
        shutil.copy(source, target)
        result = subprocess.run([str(python), "-c", EXECUTE, str(target), str(run)], env=env,
                                capture_output=True, text=True)
        status = "ran end to end" if result.returncode == 0 else "FAILED"
        print(f"colab-check: {name}: {status}")
        if result.returncode:
            failures += 1
            print(result.stderr[-3000:])
    after = freeze(python)
    changed = {k: (v, after.get(k)) for k, v in before.items() if after.get(k) != v}
    if changed:
        failures += 1
        print(f"colab-check: the setup cell changed preinstalled packages: {changed}")
    if "anatomy" not in after:
        failures += 1
        print("colab-check: the setup cell did not install the anatomy package")
    print(f"colab-check: {'passed' if not failures else f'{failures} problem(s)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
