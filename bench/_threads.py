"""Command-line options shared by the NumPy benchmarks, applied before NumPy is imported."""

from __future__ import annotations

import argparse
import os


def parse_args(description: str, repeats: int, parts: tuple[str, ...] = ()
               ) -> argparse.Namespace:
    """``--threads`` (default 1, as in ``make test``), ``--repeats`` and, where a bench has
    ``parts``, ``--part`` (default: all of them).

    Call this before importing NumPy or torch: BLAS reads its thread count once, at load time.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=repeats)
    if parts:
        parser.add_argument("--part", choices=parts, action="append",
                            help="run only this part (repeatable); default: every part")
    args = parser.parse_args()
    if parts and not args.part:
        args.part = list(parts)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    return args
