"""One call of each named case between ``cudaProfilerStart``/``Stop``, for Nsight Compute (CUDA only).

    ncu --clock-control none --profile-from-start off --section SpeedOfLight --section Occupancy \\
        python benchmarks/profile_calls.py gae:4096:4096:bf16:tm,prefix:4096:4096:f32:tm

A case is ``estimator:rows:steps:dtype:layout``: estimator ``gae`` (with ``last_value``), ``prefix``
(episodic prefix sums) or ``disc`` (discounted returns); dtype ``bf16`` (bf16 values with uint8 flags) or
``f32`` (float32 values and flags); layout ``tm`` (stored ``[T, N]``, ``time_dim=0``) or ``bm``
(``[N, T]``). Inputs are random (normal values, 5% episode ends). Every case is called twice before any
is profiled, so the profiled calls compile nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

import rl_triton


def case(spec: str) -> Callable[[], object]:
    estimator, rows, steps, dtype_name, layout = spec.split(":")
    num_rows, seq_len = int(rows), int(steps)
    dtype, flag_dtype = (torch.bfloat16, torch.uint8) if dtype_name == "bf16" else (torch.float32, torch.float32)
    time_dim = 0 if layout == "tm" else -1
    shape = (seq_len, num_rows) if layout == "tm" else (num_rows, seq_len)
    generator = torch.Generator(device="cuda").manual_seed(0)
    rewards = torch.randn(shape, generator=generator, device="cuda").to(dtype)
    values = torch.randn(shape, generator=generator, device="cuda").to(dtype)
    dones = (torch.rand(shape, generator=generator, device="cuda") < 0.05).to(flag_dtype)
    last_value = torch.randn(num_rows, generator=generator, device="cuda").to(dtype)
    calls = {
        "gae": lambda: rl_triton.compute_gae(rewards, values, dones, last_value=last_value, time_dim=time_dim),
        "prefix": lambda: rl_triton.compute_episodic_prefix_sum(rewards, dones, time_dim=time_dim),
        "disc": lambda: rl_triton.compute_discounted_returns(rewards, dones, time_dim=time_dim),
    }
    return calls[estimator]


def main() -> None:
    cases = [(spec, case(spec)) for spec in sys.argv[1].split(",")]
    for _, call in cases:
        call()
        call()
    torch.cuda.synchronize()
    for spec, call in cases:
        torch.cuda.profiler.start()
        call()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        print("profiled", spec, flush=True)


if __name__ == "__main__":
    main()
