"""Time one estimator's first call in a fresh process with an empty Triton cache (CUDA only).

    python benchmarks/first_call.py retrace4 8 2097152

Builds the inputs of ``benchmarks/tune.py`` for the named call (its names: ``gae``, ``retrace4``,
``retrace4_bf16_u8``, ...), then times the public call to a synchronised result, and a second call.
The cache is a new temporary directory, so the first call includes Triton's one-time work in a
process and a cache (its driver utilities and kernel launchers) as well as the estimator's kernels:
what a first call costs on a machine that has never run Triton.

    python benchmarks/first_call.py retrace4 8 2097152 --after-warm-up

first launches a trivial Triton kernel and times it apart: that launch takes Triton's one-time
work in the process and the cache, so the estimator's first call after it is its own kernels'
compiles and launchers. Each line also says how many kernels Triton compiled in the first call and
how many C modules it built with the system's C compiler (a launcher per kernel signature, and
without the warm-up its driver utilities), and the seconds each took. Kernels that compile at once on
threads (Retrace's two passes) add up their seconds, which can then exceed the call's.
"""

import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
import triton
import triton.backends.nvidia.driver
import triton.compiler
import triton.language as tl

_seconds: dict[str, list[float]] = {"kernel compiles": [], "C module builds": []}


def _timed(function: Callable, kind: str) -> Callable:
    """``function``, adding the seconds of each call to ``_seconds[kind]``."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _seconds[kind].append(time.perf_counter() - start)

    return timed


# Triton's kernels look its compiler up when they are defined, and its CUDA driver builds launchers
# through the name it imported: wrap both before anything defines a kernel
triton.compiler.compile = _timed(triton.compiler.compile, "kernel compiles")
triton.backends.nvidia.driver.compile_module_from_src = _timed(
    triton.backends.nvidia.driver.compile_module_from_src, "C module builds")

import tune


@triton.jit
def _add_one(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr) + 1)


def _warm_up_seconds() -> float:
    """Time the first launch of a trivial Triton kernel: Triton's one-time work in a process."""
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    start = time.perf_counter()
    _add_one[(1,)](x)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    name, rows, seq_len = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    data = tune.rollout(rows, seq_len, tune.NUM_ACTIONS.get(name, 0), 0)
    if name.endswith(("time_major", "bf16_u8")):
        data.update(tune.layout_variants(data))
    call = tune.calls(data)[name][0]
    warm_up = ""
    if "--after-warm-up" in sys.argv:
        warm_up = f"after a trivial kernel's first launch {_warm_up_seconds():5.2f} s  "
    torch.cuda.synchronize()
    for seconds in _seconds.values():
        seconds.clear()
    start = time.perf_counter()
    call()
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    parts = "  ".join(f"{kind} {len(seconds)} in {sum(seconds):4.2f} s" for kind, seconds in _seconds.items())
    start = time.perf_counter()
    call()
    torch.cuda.synchronize()
    second = time.perf_counter() - start
    print(f"{name:18s} {rows}x{seq_len:<9d} {warm_up}first {first:5.2f} s  second {second * 1e3:6.2f} ms  "
          f"(first call: {parts})", flush=True)


if __name__ == "__main__":
    main()
