"""Kernel families: which SIMD kernels torch, MKL, OpenBLAS and NumPy pick on this CPU, and how
to force another family, so that `make test` proves the recorded outputs on two of them.

    python .ci/kernels.py show              what each library uses here, natively
    python .ci/kernels.py env               the settings of another family, one KEY=VALUE a line
    python .ci/kernels.py run -- CMD ...    run CMD under another family, after checking that
                                            every switch took effect (exit 1 if one did not)

Each library has its own switch, and each is read back from the library itself:
- torch's ATen kernels: ATEN_CPU_CAPABILITY, read by torch.backends.cpu.get_cpu_capability();
- MKL (torch's BLAS on x86): MKL_CBWR, read from MKL_VERBOSE's "CNR:" field. On a CPU that is
  not Intel's, MKL honours only COMPATIBLE, so that is the one forced;
- OpenBLAS (NumPy's BLAS): OPENBLAS_CORETYPE, read by threadpoolctl's "architecture";
- NumPy's own SIMD loops (exp, log, reductions): NPY_DISABLE_CPU_FEATURES, read from
  numpy's table of CPU features.
A family "other" than the native one is one step down for each library: AVX-512 kernels give
way to AVX2 ones, AVX2 to the generic ones. Where a library is already on its lowest family,
it is left as it is and said so; at least one library must change, or there is nothing to
prove and the command fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

# One step down, per library. Keys are what the library reports; values what its switch takes.
TORCH_DOWN = {"AVX512": "avx2", "AVX2": "default", "SVE256": "default"}
OPENBLAS_DOWN = {"skylakex": "Haswell", "cooperlake": "Haswell", "sapphirerapids": "Haswell",
                 "zen": "Sandybridge", "haswell": "Sandybridge", "sandybridge": "Nehalem",
                 "neoversen2": "ARMV8", "neoversen1": "ARMV8", "neoversev1": "ARMV8",
                 "cortexa57": "ARMV8"}
# NumPy's dispatch targets above AVX2 (names of NumPy 2.4 and of NumPy 1.x/2.0-2.3): the
# loops it may pick at run time. Only targets can be disabled, not single features.
NUMPY_ABOVE_AVX2 = ("X86_V4", "AVX512_ICL", "AVX512_SPR", "AVX512F", "AVX512_SKX",
                    "AVX512_CLX", "AVX512_CNL")

_PROBE = r"""
import json, os, sys
out = {}
import numpy as np
from threadpoolctl import threadpool_info
blas = [i for i in threadpool_info() if i.get("internal_api") == "openblas"]
out["openblas"] = blas[0].get("architecture") if blas else None
umath = (getattr(np, "_core", None) or np.core)._multiarray_umath
feats = umath.__cpu_features__
targets = umath.__cpu_dispatch__
out["numpy_on"] = sorted(k for k in targets if feats.get(k))
try:
    import torch
except ImportError:
    out["torch"] = out["mkl"] = None
else:
    out["torch"] = torch.backends.cpu.get_cpu_capability()
    out["mkl"] = torch.backends.mkl.is_available()
    if out["mkl"]:
        a = torch.ones(8, 8)
        sys.stdout.flush()
        (a @ a).sum().item()          # MKL_VERBOSE prints one line for this SGEMM
        sys.stdout.flush()
print("\nPROBE " + json.dumps(out))
"""


def probe(env: dict[str, str]) -> dict:
    """What each library reports in a fresh interpreter started with ``env``."""
    done = subprocess.run([sys.executable, "-c", _PROBE], env={**env, "MKL_VERBOSE": "1"},
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"kernels: the probe failed: {done.stderr.strip()[-500:]}")
    lines = done.stdout.splitlines()
    found = json.loads(next(line for line in lines if line.startswith("PROBE "))[6:])
    cnr = [word[4:] for line in lines if line.startswith("MKL_VERBOSE") for word in
           line.split() if word.startswith("CNR:")]
    found["mkl_cnr"] = cnr[-1] if cnr else None
    return found


def _base_env() -> dict[str, str]:
    """This environment without any of the four switches: the machine's own choice."""
    switches = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")
    return {k: v for k, v in os.environ.items() if k not in switches}


def other_family(native: dict) -> tuple[dict[str, str], list[str]]:
    """The switches for a family other than ``native``, and a line per library saying so."""
    env, said = {}, []
    if native["torch"] in TORCH_DOWN:
        env["ATEN_CPU_CAPABILITY"] = TORCH_DOWN[native["torch"]]
    elif native["torch"] is not None:
        said.append(f"torch: {native['torch']} is its lowest family here; not forced")
    if native["mkl"]:
        env["MKL_CBWR"] = "COMPATIBLE"
    arch = (native["openblas"] or "").lower()
    if arch in OPENBLAS_DOWN:
        env["OPENBLAS_CORETYPE"] = OPENBLAS_DOWN[arch]
    elif native["openblas"] is not None:
        said.append(f"OpenBLAS: no lower family known for {native['openblas']}; not forced")
    high = [name for name in NUMPY_ABOVE_AVX2 if name in native["numpy_on"]]
    if high:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(high)
    return env, said


def verify(native: dict, forced_env: dict[str, str]) -> list[str]:
    """Start an interpreter under ``forced_env`` and check that every switch took effect.
    Returns a line per library; raises SystemExit naming any switch that was ignored."""
    got = probe({**_base_env(), **forced_env})
    lines, failed = [], []

    def judge(name, before, after, wanted):
        line = f"{name} {before} -> {after}"
        (lines if after == wanted else failed).append(
            line if after == wanted else f"{line} (asked for {wanted})")

    if "ATEN_CPU_CAPABILITY" in forced_env:
        judge("torch", native["torch"], got["torch"], forced_env["ATEN_CPU_CAPABILITY"].upper())
    if "MKL_CBWR" in forced_env:
        judge("MKL CNR", native["mkl_cnr"], got["mkl_cnr"], forced_env["MKL_CBWR"])
    if "OPENBLAS_CORETYPE" in forced_env:
        want = forced_env["OPENBLAS_CORETYPE"]
        after = got["openblas"] if (got["openblas"] or "").lower() != want.lower() else want
        judge("OpenBLAS", native["openblas"], after, want)
    if "NPY_DISABLE_CPU_FEATURES" in forced_env:
        off = forced_env["NPY_DISABLE_CPU_FEATURES"].split()
        still = [name for name in off if name in got["numpy_on"]]
        judge("NumPy", "+".join(off), "still " + "+".join(still) if still else "off", "off")
    if failed:
        raise SystemExit("kernels: a switch did not take effect: " + "; ".join(failed))
    if not lines:
        raise SystemExit("kernels: no library has another kernel family on this CPU, so "
                         "nothing can be forced")
    return lines


def main(argv: list[str]) -> int:
    usage = "usage: kernels.py show | env | run -- CMD ..."
    if not argv or argv[0] not in ("show", "env", "run"):
        print(f"kernels: expected show, env or run; got {' '.join(argv) or 'nothing'}. {usage}",
              file=sys.stderr)
        return 2
    native = probe(_base_env())
    env, said = other_family(native)
    if argv[0] == "show":
        print(json.dumps({k: native[k] for k in ("torch", "mkl_cnr", "openblas")}
                         | {"numpy_above_avx2": [n for n in NUMPY_ABOVE_AVX2
                                                 if n in native["numpy_on"]]}))
        return 0
    if argv[0] == "env":
        print("\n".join(f"{k}={v}" for k, v in env.items()))
        return 0
    command = argv[1:]
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print(f"kernels: run expects a command after --; got none. {usage}", file=sys.stderr)
        return 2
    lines = verify(native, env)
    print("kernels: other family: " + ", ".join(lines + said) + "; all switches took effect",
          flush=True)
    return subprocess.run(command, env={**_base_env(), **env}, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
