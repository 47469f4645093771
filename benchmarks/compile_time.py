"""Where a kernel's compile time goes: seconds per Triton stage, for sm_90a, on any machine (no GPU).

    PYTHONPATH=src python benchmarks/compile_time.py retrace-a4 8x2097152
    PYTHONPATH=src python benchmarks/compile_time.py gae,vtrace,retrace-a18 8x2097152 --layout bf16
    MLIR_ENABLE_TIMING=1 PYTHONPATH=src python benchmarks/compile_time.py retrace-a4 8x2097152

Plans the named calls (``registers.walking_calls``' names) as on an H200, then compiles each of their
launches with Triton's own specialisation rules into an empty cache, timing each of Triton's stages
(``ttir``, ``ttgir``, ``llir``, ``ptx``, ``cubin``) and the Python front end that builds the first IR.
A first call on a machine that has never run Triton (``benchmarks/first_call.py``, CUDA only) spends
these seconds, plus Triton's one-time work in a process and the C compiler's builds of its driver
utilities and each kernel's launcher. With ``MLIR_ENABLE_TIMING=1`` Triton also prints the seconds
of every MLIR pass of each stage (on stderr). The first launch compiled in a process also pays for
Triton's hash of its own files (about 0.3 s), which the first line's total includes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable

os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import registers
import triton
import triton.compiler.compiler
from triton import knobs

_STAGES = ("ttir", "ttgir", "llir", "ptx", "cubin")
_seconds: dict[str, float] = {}


def _timed(name: str, stage: Callable) -> Callable:
    def run(*args: object, **kwargs: object) -> object:
        start = time.perf_counter()
        try:
            return stage(*args, **kwargs)
        finally:
            _seconds[name] = _seconds.get(name, 0.0) + time.perf_counter() - start

    return run


def _time_stages(backend: object, stages: dict, options: object, language: object, capability: object) -> None:
    """Triton's hook on a compile's stages: wrap each in a timer."""
    for name in list(stages):
        stages[name] = _timed(name, stages[name])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("calls", help=f"comma-separated, of {','.join(registers.walking_calls(1, 1))}")
    parser.add_argument("shape", help="RxT")
    parser.add_argument("--layout", default="float32", help="float32, time-major, bf16 or bf16-time-major")
    args = parser.parse_args()
    num_rows, seq_len = (int(v) for v in args.shape.split("x"))
    calls = registers.walking_calls(num_rows, seq_len, args.layout)
    knobs.runtime.add_stages_inspection_hook = _time_stages
    # the Python front end (ast_to_ttir) runs before the stages, inside ASTSource.make_ir
    source_make_ir = triton.compiler.compiler.ASTSource.make_ir
    triton.compiler.compiler.ASTSource.make_ir = _timed("front end", source_make_ir)
    print(f"triton {triton.__version__}, sm_90a, {args.layout} {args.shape}; seconds")
    print(f"{'call':20s} {'kernel':28s} {'front end':>9s} " + " ".join(f"{s:>6s}" for s in _STAGES)
          + f" {'total':>6s}")
    for name in args.calls.split(","):
        for launch in registers.record_launches(calls[name]):
            _seconds.clear()
            start = time.perf_counter()
            registers._sm90_kernel(launch)
            total = time.perf_counter() - start
            print(f"{name:20s} {launch.kernel.__name__:28s} {_seconds.get('front end', 0.0):9.3f} "
                  + " ".join(f"{_seconds.get(stage, 0.0):6.3f}" for stage in _STAGES) + f" {total:6.3f}", flush=True)


if __name__ == "__main__":
    main()
