#!/usr/bin/env bash
# The GPU check of a checkout, in one command: the CUDA test suite, the speed tests alone, then the
# whole benchmark (the standard shapes with baselines, the few-long-row shapes without), each
# output with a header naming the GPU, driver, Python, torch and triton versions and the date.
#
#     bash benchmarks/gpu_check.sh OUT_DIR [WORKERS]
#
# Runs the checkout in place (PYTHONPATH=src) with the machine's own torch and triton. WORKERS
# (default 12) pytest-xdist workers run the suite, while the two files that compile every launch in
# a process of their own (tests/test_compiles.py, tests/test_residency.py) run beside them
# (docs/testing.md, "Commands"). Writes OUT_DIR/cuda-tests.txt, compiles.txt, cuda-perf-tests.txt,
# std/ and few/ (results.csv, results.json, roofline.png and the printed table, bench.txt), and
# prints each part's summary.
set -uo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: bash benchmarks/gpu_check.sh OUT_DIR [WORKERS]" >&2
    exit 2
fi
out_dir="$1"
workers="${2:-12}"
cd "$(dirname "$0")/.."
export PYTHONPATH=src
if ! python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check.sh: no CUDA device; on a CPU run the README's test command instead" >&2
    exit 2
fi
mkdir -p "$out_dir"

header="$out_dir/header.txt"
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python -c "import sys, torch, triton; print('Python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
    git log --oneline -1 2>/dev/null || true
    date -u
} > "$header"
cat "$header"

status=0
cp "$header" "$out_dir/compiles.txt"
python -m pytest tests/test_compiles.py tests/test_residency.py -q -rxXf -p no:cacheprovider \
    >> "$out_dir/compiles.txt" 2>&1 &
compiles=$!
cp "$header" "$out_dir/cuda-tests.txt"
python -m pytest tests -q -n "$workers" -rxXf -p no:cacheprovider --ignore=tests/test_compiles.py \
    --ignore=tests/test_residency.py --ignore=tests/test_cuda_perf.py >> "$out_dir/cuda-tests.txt" 2>&1 || status=1
wait "$compiles" || status=1
echo "== CUDA suite"; tail -n 1 "$out_dir/cuda-tests.txt"
echo "== compile and residency tests"; tail -n 1 "$out_dir/compiles.txt"

# alone: other processes' kernels would share the GPU
cp "$header" "$out_dir/cuda-perf-tests.txt"
python -m pytest tests/test_cuda_perf.py -q -rxXf -p no:cacheprovider >> "$out_dir/cuda-perf-tests.txt" 2>&1 || status=1
echo "== speed tests"; tail -n 1 "$out_dir/cuda-perf-tests.txt"

python -m rl_triton bench --shapes 4096x128,512x1024,16384x512,4096x4096 --out "$out_dir/std" \
    > "$out_dir/std.log" 2>&1 || status=1
python -m rl_triton bench --shapes '64x16384,8x131072,8x2**21,1x2**24' --no-baselines --out "$out_dir/few" \
    > "$out_dir/few.log" 2>&1 || status=1
for part in std few; do
    mkdir -p "$out_dir/$part"
    # the printed table without the progress bar's lines
    grep -v -e '%|' -e 'it/s]' "$out_dir/$part.log" > "$out_dir/$part/bench.txt" 2>/dev/null
    echo "== benchmark, $part"; grep -i "ceiling" "$out_dir/$part.log" | head -n 1
done
exit $status
