"""Races between the programs of a time split, counted: many fresh calls against the float64 oracle.

    PYTHONPATH=src python benchmarks/repeat_check.py [--estimators vtrace,gae] [--plans tm-default,tm-w4]
        [--calls 8] [--processes 8] [--seconds 60] [--rows 256] [--seq-len 96]

A race in the look-back shows as an occasional wrong call, not as a wrong plan, and more often when
several processes share the GPU. This runs the calls of
``tests/test_cuda.py::test_time_split_calls_repeated`` (the same inputs and estimator arguments, from
the test suite's ``Rollout``) ``--calls`` times per estimator and plan in each of ``--processes``
processes at once (each its own seed), and prints, per estimator and plan, how many calls exceeded
the float32 tolerance and the largest relative error seen. ``--done-rate 0.3`` makes most chunks
end an episode in every row (maps that ignore the carry, which the look-back treats apart). It exits
with status 1 if any call was wrong. Plans (``PLANS``): the default plan batch-major or time-major, time-major tiles with other
warp counts, and splits into chunks of 16 steps through the tile override. On a CPU it runs the
kernels through Triton's interpreter (``TRITON_INTERPRET=1``), which runs programs one after
another and so cannot race: there it only checks the script.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time

import torch

TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests")

# name: (time-major inputs, tile override)
SPLIT_16 = {"block_time": 16, "split": True, "walk_programs": 0}
PLANS = {
    "bm-default": (False, {}),
    "tm-default": (True, {}),
    "tm-w1": (True, {"num_warps": 1}),
    "tm-w4": (True, {"num_warps": 4}),
    "bm-split16": (False, SPLIT_16),
    "tm-split16": (True, SPLIT_16),
    "tm-split16-w2": (True, {**SPLIT_16, "num_warps": 2}),
}
DEFAULT_PLANS = "tm-default,bm-split16,tm-split16"
DEFAULT_ESTIMATORS = "gae,vtrace,retrace,lambda_returns,eligibility_traces,prefix_sum-ends_at"


def check(args: tuple[list[str], list[str], int, int, int, int, float, float]) -> dict[tuple[str, str], list]:
    """One process: {(estimator, plan): [wrong calls, calls, largest relative error]}."""
    estimators, plans, calls, seed, rows, seq_len, seconds, done_rate = args
    sys.path.insert(0, TESTS)
    import test_cuda
    from conftest import DEVICE, TOLERANCE, Rollout, rel_err
    from rl_triton import _launch

    by_name = {param.id: param.values[0] for param in test_cuda.ESTIMATORS}
    gen = torch.Generator().manual_seed(seed)
    counts: dict[tuple[str, str], list] = {}
    stop = time.monotonic() + seconds
    for _ in range(calls):
        if time.monotonic() > stop:
            break
        for name in estimators:
            estimator = by_name[name]
            rollout = Rollout(gen, (rows,), seq_len, device=DEVICE, term_rate=done_rate, trunc_rate=done_rate)
            expected = test_cuda.oracle(estimator, rollout)
            time_major = rollout.map(lambda x: x.t().contiguous().t())
            for plan in plans:
                stored_time_major, override = PLANS[plan]
                with _launch.tile_override(**override):
                    got = test_cuda.run(estimator, time_major if stored_time_major else rollout)
                error = max(rel_err(value, want) for value, want in zip(got, expected, strict=True))
                entry = counts.setdefault((name, plan), [0, 0, 0.0])
                entry[0] += error > TOLERANCE[torch.float32]
                entry[1] += 1
                entry[2] = max(entry[2], error)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--estimators", default=DEFAULT_ESTIMATORS,
                        help="ids of tests/test_cuda.py's ESTIMATORS, comma-separated")
    parser.add_argument("--plans", default=DEFAULT_PLANS, help=f"comma-separated, of: {', '.join(PLANS)}")
    parser.add_argument("--calls", type=int, default=8, help="calls per estimator and plan in each process")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=float("inf"),
                        help="each process stops starting new rounds of calls after this long")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--seq-len", type=int, default=96)
    parser.add_argument("--done-rate", type=float, default=0.05,
                        help="share of steps terminated, and the same share truncated (0.3: most chunks of 32 steps "
                             "end an episode in every row, so their maps ignore the carry)")
    parser.add_argument("--seed", type=int, default=101, help="the first process's seed (then +1 each)")
    options = parser.parse_args()
    estimators = options.estimators.split(",")
    plans = options.plans.split(",")
    unknown = [plan for plan in plans if plan not in PLANS]
    if unknown:
        parser.error(f"unknown plans {unknown}; known: {', '.join(PLANS)}")

    jobs = [(estimators, plans, options.calls, options.seed + i, options.rows, options.seq_len, options.seconds,
             options.done_rate)
            for i in range(options.processes)]
    started = time.monotonic()
    # spawned processes: CUDA cannot be used in a forked child of a process that initialised it
    with multiprocessing.get_context("spawn").Pool(options.processes) as pool:
        results = pool.map(check, jobs)
    total: dict[tuple[str, str], list] = {}
    for counts in results:
        for key, (wrong, calls, worst) in counts.items():
            entry = total.setdefault(key, [0, 0, 0.0])
            entry[0] += wrong
            entry[1] += calls
            entry[2] = max(entry[2], worst)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (Triton's interpreter)"
    print(f"{device}: {options.processes} processes, {options.rows}x{options.seq_len}, "
          f"done rate {options.done_rate}, "
          f"{time.monotonic() - started:.0f} s")
    for (name, plan), (wrong, calls, worst) in sorted(total.items()):
        print(f"  {name:20s} {plan:14s} wrong {wrong:4d} of {calls:4d}  largest relative error {worst:.2e}")
    sys.exit(1 if any(wrong for wrong, _, _ in total.values()) else 0)


if __name__ == "__main__":
    main()
