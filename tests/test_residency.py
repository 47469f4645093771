"""Walked segments fit the registers of an H200's multiprocessors, as their plans assume.

Every program of a walk must be resident at once (``rl_triton/kernels/scan.py``); a kernel change
that adds registers can silently halve a walk's speed (benchmarks/NOTES.md, "Fifteenth round").
``benchmarks/registers.py`` compiles the walking kernels of the benchmark's calls for sm_90a with
Triton's bundled ptxas (no GPU needed) and counts the registers their programs take per
multiprocessor. It runs in a process of its own: under ``TRITON_INTERPRET`` Triton compiles nothing.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest
import triton

ROOT = pathlib.Path(__file__).resolve().parents[1]
PTXAS = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"

# (estimator, rows, steps) whose walk takes more registers than its plan's programs per multiprocessor
# leave, measured with triton 3.6.0's ptxas: their last programs start only as the first ones end
OVER_BUDGET = {
    ("retrace-a4", 8, 2**21): "244 registers x 4 warps: 2 programs fit per multiprocessor, the plan takes 4",
    ("retrace-a4", 1, 2**24): "234 registers x 4 warps: 2 programs fit per multiprocessor, the plan takes 4",
    ("vtrace+trunc", 1, 2**24): "96 registers with the look-back window of 128: 5 programs fit, the plan takes 6",
    ("discounted-returns", 1, 2**24): "88 registers with the look-back window of 128: 5 programs fit, the plan takes 6",
}
ESTIMATORS = ["gae", "gae+trunc", "vtrace", "vtrace+trunc", "retrace-a4", "retrace-a18", "lambda-returns",
              "discounted-returns", "eligibility-traces", "prefix-sum"]
CASES = [
    pytest.param(name, rows, steps, id=f"{name}-{rows}x{steps}",
                 marks=[pytest.mark.xfail(reason=OVER_BUDGET[name, rows, steps], strict=True)]
                 if (name, rows, steps) in OVER_BUDGET else [])
    for rows, steps in ((8, 2**21), (1, 2**24))
    for name in ESTIMATORS
]


@pytest.fixture(scope="module")
def residency():
    if not PTXAS.exists():
        pytest.skip(f"this Triton has no ptxas at {PTXAS}")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "registers.py"), "--json"],
                            check=False, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return {(row["estimator"], *row["shape"]): row for row in json.loads(result.stdout)}


@pytest.mark.parametrize("name, rows, steps", CASES)
def test_walked_programs_fit_the_registers(residency, name, rows, steps):
    row = residency[name, rows, steps]
    # a walk of every estimator at these shapes, of about as many programs as the plan asks
    assert row["programs_per_multiprocessor"] * 132 >= row["programs"] > (row["programs_per_multiprocessor"] - 1) * 132
    assert row["registers_needed"] <= 65536, (
        f"{row['kernel']}: {row['registers']} registers x {row['warps']} warps x "
        f"{row['programs_per_multiprocessor']} programs per multiprocessor")
