#!/usr/bin/env bash
# The GPU machine's check: the environment, the CUDA test suite, then the benchmark.
# Runs the checkout in place (nothing is installed): bash scripts/gpu_check.sh [quick]
# Logs and benchmark results go to $OUT (default: ./gpu-check-output).
# Exit status: 1 if the tests failed, 2 if only the benchmark failed, 0 otherwise.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
OUT="${OUT:-$PWD/gpu-check-output}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1
# the progress bar redraws in place; in a log file, fewer redraws keep it readable
export TQDM_MININTERVAL=10

bench_args=(--out "$OUT/bench")
if [ "${1:-}" = quick ]; then
    bench_args+=(--quick)
fi

echo "== nvidia-smi"
nvidia-smi || echo "nvidia-smi failed"
echo "== versions"
"$PYTHON" - <<'PY'
import platform

import torch

print("python", platform.python_version())
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
try:
    import triton

    print("triton", triton.__version__)
except ImportError as error:
    print("triton not importable:", error)
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(0))
PY

echo "== tests"
# pytest-xdist, where present, spreads the suite over the machine's cores
parallel_args=()
if "$PYTHON" -c "import xdist" 2>/dev/null; then
    parallel_args=(-n 8)
fi
"$PYTHON" -m pytest tests -q "${parallel_args[@]}" 2>&1 | tee "$OUT/tests.log"
tests_status=${PIPESTATUS[0]}

echo "== benchmark"
"$PYTHON" -m rl_triton bench "${bench_args[@]}" 2>&1 | tee "$OUT/bench.log"
bench_status=${PIPESTATUS[0]}

echo "== summary: tests exit ${tests_status}, benchmark exit ${bench_status}"
if [ "$tests_status" -ne 0 ]; then
    exit 1
fi
if [ "$bench_status" -ne 0 ]; then
    exit 2
fi
exit 0
