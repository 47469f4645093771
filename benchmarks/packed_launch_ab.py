"""Host cost of repeated calls whose replays launch packed parameters against Triton's C launch function.

    PYTHONPATH=src python benchmarks/packed_launch_ab.py [--num-envs 4096] [--seq-len 128]

In one process, every case is recorded twice with different gammas (a recording belongs to one call
signature): once with packed launches off (``rl_triton._packed_launch.ENABLED``), once on. Each
packed replay is first checked against the full path (the same call under ``use_backend("triton")``,
which is never replayed), bit for bit. The cases then take turns in rounds with one allocating
``torch.add`` of the same tensors (``benchmarks/host_cost.py``'s rounds); ``/ add`` is the median over
rounds of a case's time per call over the add's in the same round. Needs a GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

if importlib.util.find_spec("rl_triton") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import host_cost

from rl_triton import _packed_launch, _replay
from rl_triton._dispatch import use_backend

# the cases of host_cost.py that take a gamma: each packed setting records its calls with a gamma of its own
_CASES = ("compute_gae", "compute_vtrace", "compute_retrace", "compute_lambda_returns", "compute_eligibility_traces")
_YARDSTICK = host_cost.YARDSTICK["cuda"]


def _as_tuple(result: object) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--num-actions", type=int, default=6)
    parser.add_argument("--calls", type=int, default=300, help="calls per timed batch")
    parser.add_argument("--repeats", type=int, default=31, help="rounds; the median is reported")
    args = parser.parse_args()
    if _packed_launch.module() is None:
        sys.exit("the packed-launch module could not be built")
    shape = (args.num_envs, args.seq_len, args.num_actions)
    cases: dict[str, Callable[[], object]] = {}
    for packed, gamma in ((False, 0.99), (True, 0.98)):
        _packed_launch.ENABLED = packed
        calls = host_cost._cases("cuda", *shape, gamma)
        cases.setdefault(_YARDSTICK, calls[_YARDSTICK])
        for name in _CASES:
            call = calls[name]
            for _ in range(3):  # compiled, recorded, replayed
                call()
            cases[f"{name} ({'packed' if packed else 'Triton launcher'})"] = call
            if packed:
                with use_backend("triton"):
                    expected = _as_tuple(call())
                same = all(torch.equal(got, want) for got, want in zip(_as_tuple(call()), expected, strict=True))
                print(f"{name}: packed replay equals the full path bit for bit: {same}")
    replays = [replay for table in _replay._all_replays[0::3] for replay in table.values()]
    packed_launches = sum(replay.__globals__[name] is _packed_launch.module().launch
                          for replay in replays for name in replay.launchers)
    print(f"{len(replays)} replays recorded, {packed_launches} packed launches among their launches")
    timings = host_cost._us_per_call_interleaved(cases, args.calls, args.repeats, True, time.perf_counter)
    yardstick = timings[_YARDSTICK]
    print(f"{args.num_envs}x{args.seq_len}, torch {torch.__version__}; µs per call (wall clock), "
          f"{args.repeats} rounds of {args.calls} calls")
    print(f"{'call':46s} {'median':>8s} {'/ add':>7s}")
    for name, per_call in timings.items():
        ratio = statistics.median(batch / add for batch, add in zip(per_call, yardstick, strict=True))
        print(f"{name:46s} {statistics.median(per_call):8.2f} {ratio:6.2f}x")


if __name__ == "__main__":
    main()
