"""Every kernel launch compiles for an H200 (sm_90a), though CI runs the kernels in Triton's interpreter.

The interpreter runs code that Triton's compiler rejects: a change to the look-back that passed the
interpreter's tests of the walks, the engine and GAE stopped Triton's pass pipeline with an internal
assertion in 146 of these launches (benchmarks/NOTES.md, "Seventeenth round").
``benchmarks/registers.py --compile-all`` records the launches of every estimator in three layouts at shapes that take each kind of plan, and of the autograd kernels, without a GPU, and
compiles each distinct one with Triton's own compiler and ptxas. It runs in a process of its own:
under ``TRITON_INTERPRET`` Triton compiles nothing. It also fails on a warp-collective instruction
under a guard predicate in any launch's SASS: a look-back variant whose compiled time-major V-trace
gave wrong results on an H200 (and right ones in the interpreter) had a warp reduction that ptxas
guarded with a predicate set from the lane index (benchmarks/NOTES.md, "Twentieth round").
"""

import json

from conftest import run_registers_script


def test_every_launch_compiles_for_sm90():
    result = run_registers_script("--compile-all", timeout=1200)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    compiled = int(result.stdout.strip().splitlines()[-1].split()[0])
    # every estimator, layout and kind of plan: far more than the walking kernels alone (60)
    assert compiled >= 150, result.stdout[-500:]


def test_time_major_strided_groups_scan_in_registers():
    """Time-major tiles read in strided groups keep each group's steps in one thread: their SASS holds
    a few shared-memory loads a chunk (the groups' maps across warps), not one set per step. Triton
    chooses that layout from a hint (``kernels/scan.py: strided_offsets``); read step by step, time-major
    GAE at 4096x4096 held 130 shared-memory loads (benchmarks/NOTES.md, "Twenty-sixth round")."""
    estimators = "gae,gae+trunc,vtrace,lambda-returns,discounted-returns,eligibility-traces,prefix-sum"
    result = run_registers_script("--sass", estimators, "--shapes", "2048x4096,4096x4096,16384x512", "--layouts", "time-major",
                                  "--json", timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(rows) == 21
    for row in rows:
        assert row["strided_groups"], row
        # 8 a launch for most, 20 for V-trace's 64-row tiles in pairs at 16384x512 (4 warps of 32 row pairs
        # x 1 group each: the groups' maps cross every warp)
        assert row["opcodes"].get("LDS", 0) <= 24, (row["estimator"], row["shape"], row["opcodes"])

