"""Walked segments fit the registers of an H200's multiprocessors, as their plans assume.

Every program of a walk must be resident at once (``rl_triton/kernels/scan.py``); a kernel change
that adds registers can silently halve a walk's speed (benchmarks/NOTES.md, "Fifteenth round"), and
the plans cap the walks' registers at their share (a changed plan must keep that share).
``benchmarks/registers.py`` compiles the walking kernels of the benchmark's calls (float32,
time-major float32, bf16 values with uint8 flags) for sm_90a with Triton's bundled ptxas (no GPU
needed) and counts the registers their programs take per multiprocessor (``--registers-only``: read from the
compiled kernels, as ptxas recorded them there). It runs in a process of its own: under ``TRITON_INTERPRET`` Triton compiles nothing.
"""

import fcntl
import json
import os

import pytest

from conftest import run_benchmark_script

# (layout, estimator, rows, steps) whose walk takes more registers than its plan's programs per
# multiprocessor leave, measured with triton 3.6.0's ptxas: their last programs start only as the
# first ones end. Walks are capped at their plan's budget (rl_triton/_launch.py: _walk_register_budget)
# but for Retrace's scan of two passes, which stored [T, N] takes 255 registers and was slower capped.
# Values: (registers per thread, warps per program, programs that fit, programs the plan puts there).
OVER_BUDGET = {
    ("time-major", "retrace-a4", 8, 2**21): (255, 2, 4, 8),
    ("time-major", "retrace-a18", 8, 2**21): (255, 2, 4, 8),
    ("time-major", "retrace-a4", 64, 2**18): (255, 4, 2, 4),
    ("time-major", "retrace-a18", 64, 2**18): (255, 4, 2, 4),
}


def over_budget_mark(case: tuple) -> list:
    if case not in OVER_BUDGET:
        return []
    registers, warps, fit, planned = OVER_BUDGET[case]
    reason = (f"{registers} registers x {warps} warps: {fit} programs fit per multiprocessor, "
              f"the plan puts {planned} there")
    return [pytest.mark.xfail(reason=reason, strict=True)]


LAYOUTS = ["float32", "time-major", "bf16"]
ESTIMATORS = ["gae", "gae+trunc", "vtrace", "vtrace+trunc", "retrace-a4", "retrace-a18", "lambda-returns",
              "discounted-returns", "eligibility-traces", "prefix-sum"]
CASES = [
    pytest.param(layout, name, rows, steps, id=f"{layout}-{name}-{rows}x{steps}",
                 marks=over_budget_mark((layout, name, rows, steps)))
    for layout in LAYOUTS
    # one row stored [T, 1] is batch-major; 64 rows stored [T, N] walk tiles of 32 rows and 8 warps (Retrace
    # of 16 rows and 4 warps), 8 rows of 2
    for rows, steps in (((8, 2**21), (64, 2**18)) if layout == "time-major" else ((8, 2**21), (1, 2**24)))
    for name in ESTIMATORS
]


@pytest.fixture(scope="module")
def residency(tmp_path_factory):
    # the script compiles 60 kernels (a minute of a CPU; their registers are read from the compiled kernels,
    # without a second ptxas run each): once for a whole test run, whose
    # pytest-xdist workers share the parent of their base temporary folders (one folder per run)
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    with open(shared / "residency.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = shared / "residency.json"
        if not found.exists():
            result = run_benchmark_script("registers.py", "--json", "--registers-only", "--layouts", ",".join(LAYOUTS),
                                          timeout=600)
            assert result.returncode == 0, result.stderr[-2000:]
            found.write_text(result.stdout)
        rows = json.loads(found.read_text())
    return {(row["layout"], row["estimator"], *row["shape"]): row for row in rows}


@pytest.mark.parametrize("layout, name, rows, steps", CASES)
def test_walked_programs_fit_the_registers(residency, layout, name, rows, steps):
    row = residency[layout, name, rows, steps]
    # every estimator walks at these shapes, with at least the 2 programs per multiprocessor of the
    # smallest walk plan (float32 Retrace with 4 actions)
    assert row["programs_per_multiprocessor"] >= 2
    assert row["registers_needed"] <= 65536, (
        f"{row['kernel']}: {row['registers']} registers x {row['warps']} warps x "
        f"{row['programs_per_multiprocessor']} programs per multiprocessor")
