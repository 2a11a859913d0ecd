#!/usr/bin/env bash
# Everything a GPU machine should check for the book, in one command (a few minutes):
# the CUDA tests, then the reference run of the `gpu` preset. From the repository root:
#
#     ANATOMY_DATA=path/to/tinyshakespeare.txt bash bench/on_gpu.sh OUT_DIR [ARGS...]
#
# ARGS go to bench/gpu_reference.py (a dry run on a CPU: --preset tiny --device cpu
# --max-steps 20 --target 3.5).
# OUT_DIR receives nvidia-smi.csv, cuda_tests.log, reference.log and reference_run.json.
# Copy reference_run.json to code/anatomy/train/ and run `make record` to show it in
# chapter 9. Uses the machine's own python3 and torch; nothing is installed.
set -uo pipefail
out=${1:?usage: bash bench/on_gpu.sh OUT_DIR [ARGS for gpu_reference.py]}
shift
mkdir -p "$out"
export PYTHONPATH="$PWD/code${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
: "${ANATOMY_DATA:?set ANATOMY_DATA to a local tinyshakespeare.txt}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
    > "$out/nvidia-smi.csv" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
python3 -m pytest -q tests/test_cuda.py 2>&1 | tee "$out/cuda_tests.log"
python3 bench/gpu_reference.py --data "$ANATOMY_DATA" --json "$out/reference_run.json" \
    --no-progress "$@" 2>&1 | tee "$out/reference.log"
