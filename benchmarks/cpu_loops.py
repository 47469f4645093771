"""The CPU path's time loops: public estimators stepping through numpy views of their tensors against the same
loop stepped in PyTorch, and against Stable-Baselines3's GAE where it is installed (docs/interop.md).

    python benchmarks/cpu_loops.py
"""

from __future__ import annotations

import functools
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

if importlib.util.find_spec("rl_triton") is None:
    # a checkout measures its own sources, installed or not
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import rl_triton
from rl_triton.reference import _loop

SHAPES = ((8, 2048), (64, 128), (1024, 256), (4096, 128), (1, 100000))
SB3_SHAPES = ((2048, 8), (128, 64))  # (steps, environments)


def timed(call: Callable[[], object], repeats: int = 7) -> float:
    """Median milliseconds of ``repeats`` calls, after one untimed call."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def estimator_calls(rows: int, steps: int, generator: torch.Generator) -> dict[str, Callable[[], object]]:
    rewards, values, log_probs = (torch.randn(rows, steps, generator=generator) for _ in range(3))
    terminateds = torch.rand(rows, steps, generator=generator) < 0.01
    last_value = torch.randn(rows, generator=generator)
    calls = {
        "compute_gae": functools.partial(rl_triton.compute_gae, rewards, values, terminateds, gamma=0.99,
                                         lambda_=0.95, last_value=last_value),
        "compute_vtrace": functools.partial(rl_triton.compute_vtrace, log_probs, log_probs * 0.9, values, rewards,
                                            terminateds, last_value=last_value),
        "compute_discounted_returns": functools.partial(rl_triton.compute_discounted_returns, rewards, terminateds,
                                                        gamma=0.99),
        "compute_episodic_prefix_sum": functools.partial(rl_triton.compute_episodic_prefix_sum, rewards,
                                                         terminateds),
    }
    # a 100000-step row in PyTorch steps takes a second a call: GAE alone
    return calls if steps <= 4096 else {"compute_gae": calls["compute_gae"]}


def compare_steppings() -> None:
    numpy_steps = _loop._numpy_steps_possible
    generator = torch.Generator().manual_seed(0)
    print(f"{'call':30s} {'shape':>12s} {'torch steps':>12s} {'numpy steps':>12s} {'ratio':>6s}")
    for rows, steps in SHAPES:
        repeats = 7 if steps <= 4096 else 3
        for name, call in estimator_calls(rows, steps, generator).items():
            _loop._numpy_steps_possible = lambda *tensors: False  # the loop stepped in PyTorch
            try:
                before = timed(call, repeats)
            finally:
                _loop._numpy_steps_possible = numpy_steps
            after = timed(call, repeats)
            print(f"{name:30s} {rows:>6d}x{steps:<6d} {before:12.2f} {after:12.2f} {before / after:5.1f}x")


def sb3_buffers_gae(steps: int, envs: int) -> tuple[Callable[[], object], Callable[[], object]]:
    """SB3's ``compute_returns_and_advantage`` and docs/interop.md's call on the same buffer."""
    from gymnasium import spaces
    from stable_baselines3.common.buffers import RolloutBuffer

    buffer = RolloutBuffer(steps, spaces.Box(-1, 1, (1,)), spaces.Discrete(2), device="cpu", n_envs=envs)
    rng = np.random.default_rng(0)
    buffer.rewards[:] = rng.standard_normal((steps, envs))
    buffer.values[:] = rng.standard_normal((steps, envs))
    buffer.episode_starts[:] = rng.random((steps, envs)) < 0.01
    last_values, dones = torch.randn(envs, 1), np.zeros(envs, bool)

    def rl_triton_gae() -> torch.Tensor:
        starts = torch.from_numpy(buffer.episode_starts[1:])
        ended = torch.cat([starts, torch.as_tensor(dones, dtype=torch.float32)[None]])
        return rl_triton.compute_gae(torch.from_numpy(buffer.rewards), torch.from_numpy(buffer.values), ended,
                                     gamma=buffer.gamma, lambda_=buffer.gae_lambda,
                                     last_value=last_values.flatten(), time_dim=0)

    return functools.partial(buffer.compute_returns_and_advantage, last_values, dones), rl_triton_gae


def main() -> None:
    print(f"torch {torch.__version__}, numpy {np.__version__}, {torch.get_num_threads()} threads; "
          "ms per call, median of 7 (3 for 100000 steps)")
    compare_steppings()
    if importlib.util.find_spec("stable_baselines3") is None:
        return
    print("\nSB3 RolloutBuffer.compute_returns_and_advantage against compute_gae on its arrays (time_dim=0)")
    for steps, envs in SB3_SHAPES:
        sb3, ours = sb3_buffers_gae(steps, envs)
        print(f"{steps} steps x {envs} environments: SB3 {timed(sb3):.2f} ms, rl_triton {timed(ours):.2f} ms")


if __name__ == "__main__":
    main()
