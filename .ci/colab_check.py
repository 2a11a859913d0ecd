"""Run chapters as Colab would (make colab-check).

Builds a fresh virtual environment holding only what Colab preinstalls (.ci/colab-env.txt:
numpy, torch, matplotlib, tqdm, ipywidgets 7.7, a Jupyter kernel), clones this repository,
copies chapters 1 and 9 to a folder outside any checkout, points ANATOMY_REPO_URL at the clone,
and executes them end to end. The chapters' setup cell must install the anatomy package from
that URL, and the install must leave every preinstalled package exactly as it was.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "_build" / "colab"
VENV = WORK / "venv"
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


def fresh_venv() -> Path:
    stamp = VENV / ".colab-env-sha"
    want = hashlib.sha256(ENV_FILE.read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == want:
        sh(VENV / "bin/python", "-m", "pip", "uninstall", "-q", "-y", "anatomy")
    else:
        shutil.rmtree(VENV, ignore_errors=True)
        sh(sys.executable, "-m", "venv", VENV)
        sh(VENV / "bin/python", "-m", "pip", "install", "-q", "-r", ENV_FILE)
        stamp.write_text(want)
    # The kernelspec the notebooks ask for ("python3") must be this environment's.
    sh(VENV / "bin/python", "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3")
    return VENV / "bin/python"


def freeze(python: Path) -> dict[str, str]:
    out = sh(python, "-m", "pip", "freeze", capture_output=True, text=True).stdout
    pairs = (re.split(r"==| @ ", line, maxsplit=1) for line in out.splitlines())
    return {pair[0].lower(): pair[1] for pair in pairs if len(pair) == 2}


def main() -> int:
    python = fresh_venv()
    before = freeze(python)
    clone, run = WORK / "repo", WORK / "run" / "chapters"
    shutil.rmtree(clone, ignore_errors=True)
    shutil.rmtree(run.parent, ignore_errors=True)
    sh("git", "clone", "-q", ROOT, clone)
    run.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["ANATOMY_REPO_URL"] = str(clone)
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env['PATH']}"
    failures = 0
    for name in CHAPTERS:
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
