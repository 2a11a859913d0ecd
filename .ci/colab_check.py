"""Run chapters as Colab would (make colab-check).

Builds a fresh virtual environment holding only what Colab preinstalls (.ci/colab-env.txt:
numpy, torch, matplotlib, tqdm, ipywidgets 7.7, a Jupyter kernel), clones this repository,
copies chapters 1 and 9 to a folder outside any checkout, points ANATOMY_REPO_URL at the clone,
and executes them end to end. The chapters' setup cell must install the anatomy package from
that URL, and the install must leave every preinstalled package exactly as it was.

Each executed chapter's text outputs (printed lines and ``text/plain`` results, sanitised as
nbval sanitises them, cells tagged to escape nbval left out) are then compared with the
recorded ones, and every difference is reported and fails the check.

By hand, other environments, interpreters and chapters: ``python .ci/colab_check.py --env
.ci/colab-env-torch28.txt --python ~/.pyenv/versions/3.12.1/bin/python3 --chapters all``
runs every chapter on Colab's Python with the oldest torch that Colab ships (2.8; it
downloads a CUDA build of several GB, so ``make test`` does not do this).
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import json
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
SANITIZE = ROOT / ".ci" / "nbval-sanitize.cfg"
# Cells whose output nbval does not hold to the recorded one (an error's traceback shows paths).
ESCAPES_NBVAL = {"nbval-ignore-output", "nbval-skip", "skip-execution", "raises-exception"}

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


def python_version(python: Path) -> str:
    return sh(python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])",
              capture_output=True, text=True).stdout.strip()


def fresh_venv(env_file: Path, base_python: Path) -> Path:
    name = "venv" if env_file == ENV_FILE else f"venv-{env_file.stem}"
    if base_python.resolve() != Path(sys.executable).resolve():
        name += f"-py{python_version(base_python)}"
    venv = WORK / name
    stamp = venv / ".colab-env-sha"
    want = hashlib.sha256(env_file.read_bytes() + str(base_python).encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == want:
        sh(venv / "bin/python", "-m", "pip", "uninstall", "-q", "-y", "anatomy")
    else:
        shutil.rmtree(venv, ignore_errors=True)
        sh(base_python, "-m", "venv", venv)
        sh(venv / "bin/python", "-m", "pip", "install", "-q", "-r", env_file)
        stamp.write_text(want)
    # The kernelspec the notebooks ask for ("python3") must be this environment's.
    sh(venv / "bin/python", "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3")
    return venv / "bin/python"


def freeze(python: Path) -> dict[str, str]:
    out = sh(python, "-m", "pip", "freeze", capture_output=True, text=True).stdout
    pairs = (re.split(r"==| @ ", line, maxsplit=1) for line in out.splitlines())
    return {pair[0].lower(): pair[1] for pair in pairs if len(pair) == 2}


def _sanitizers() -> list[tuple[re.Pattern, str]]:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(SANITIZE)
    return [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]


def _text_outputs(cell: dict, sanitizers) -> str:
    """What nbval compares of a code cell, as one sanitised string."""
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream" and out["name"] == "stdout":
            parts.append("".join(out["text"]))
        elif out["output_type"] in ("execute_result", "display_data"):
            parts.append("".join(out["data"].get("text/plain", "")))
    text = "".join(parts)
    for pattern, replacement in sanitizers:
        text = pattern.sub(replacement, text)
    return text


def compare_outputs(recorded: Path, executed: Path) -> list[str]:
    """One line per code cell whose text output differs from the recorded one."""
    sanitizers = _sanitizers()
    old, new = (json.loads(p.read_text())["cells"] for p in (recorded, executed))
    problems = []
    code = [(a, b) for a, b in zip(old, new, strict=True) if a["cell_type"] == "code"]
    for i, (a, b) in enumerate(code):
        if ESCAPES_NBVAL & set(a["metadata"].get("tags", [])) or i == 0:  # 0: setup cell
            continue
        want, got = _text_outputs(a, sanitizers), _text_outputs(b, sanitizers)
        if want != got:
            pairs = zip(want.splitlines() + [""], got.splitlines() + [""], strict=False)
            first = next(((w, g) for w, g in pairs if w != g), (want[-80:], got[-80:]))
            problems.append(f"code cell {i}: recorded {first[0]!r}, got {first[1]!r}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", type=Path, default=ENV_FILE,
                        help="requirements file of the Colab-like environment")
    parser.add_argument("--chapters", nargs="+", default=CHAPTERS,
                        help="chapter names (e.g. 04_heads), or 'all'")
    parser.add_argument("--python", type=Path, default=Path(sys.executable),
                        help="interpreter the environment is made from (Colab: 3.12)")
    args = parser.parse_args(argv)
    chapters = args.chapters
    if chapters == ["all"]:
        chapters = sorted(p.stem for p in (ROOT / "chapters").glob("*.ipynb"))
    python = fresh_venv(args.env.resolve(), args.python.expanduser())
    torch_version = sh(python, "-c", "import torch; print(torch.__version__)",
                       capture_output=True, text=True).stdout.strip()
    print(f"colab-check: Python {python_version(python)}, torch {torch_version}")
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
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")   # as `make record`: one thread, the recorded numbers
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
        if result.returncode:
            failures += 1
            print(f"colab-check: {name}: FAILED\n{result.stderr[-3000:]}")
            continue
        differences = compare_outputs(source, target)
        failures += bool(differences)
        n_code = sum(c["cell_type"] == "code" for c in json.loads(source.read_text())["cells"])
        print(f"colab-check: {name}: ran end to end; {len(differences)} of {n_code} code "
              f"cells differ from the recorded outputs")
        for line in differences[:10]:
            print(f"    {line}")
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
