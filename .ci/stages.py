"""Run `make` targets one after another, and end with one line of seconds per stage.

    python .ci/stages.py lint unit nbval ...

Stops at the first stage that fails (its exit status is this script's), and still prints the
seconds of the stages that ran, so a slow or a failing stage is plain from the last line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def main(stages: list[str]) -> int:
    if not stages:
        print("stages: expected one or more make targets; got none", file=sys.stderr)
        return 2
    make = os.environ.get("MAKE", "make")
    took: list[str] = []
    start = time.perf_counter()
    code = 0
    for stage in stages:
        t0 = time.perf_counter()
        code = subprocess.run([make, "--no-print-directory", stage], check=False).returncode
        took.append(f"{stage} {time.perf_counter() - t0:.0f} s" + ("" if code == 0 else
                                                                  " (FAILED)"))
        if code != 0:
            break
    verdict = "all checks passed" if code == 0 else "failed"
    print(f"make test: {verdict}; seconds per stage: {', '.join(took)}; "
          f"total {time.perf_counter() - start:.0f} s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
