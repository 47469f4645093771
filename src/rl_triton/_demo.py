"""``python -m rl_triton``: every estimator on a realistic rollout, timed and checked against float64.

Also home of the estimator catalogue (how to build realistic inputs for each public function)
that the benchmark in ``rl_triton._bench`` shares.
"""

from __future__ import annotations

import importlib.metadata
import math
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import rl_triton
from rl_triton import _checks, _dispatch, reference

GAMMA = 0.99
LAMBDA = 0.95
# per-step probability of each boundary kind in generated rollouts
TERMINATION_RATE = 0.05
TRUNCATION_RATE = 0.05
# a float32 result this close to the float64 oracle (relative L2 norm) counts as correct
FLOAT32_TOLERANCE = 1e-4

Inputs = dict[str, Any]


@dataclass(frozen=True)
class Estimator:
    """One public function, called on one kind of realistic input."""

    name: str
    public: Callable[..., Any]
    reference: Callable[..., Any]
    make_inputs: Callable[[int, int, torch.device, torch.Generator, torch.dtype], Inputs]
    # backward scans (A[t] from A[t+1]) or forward scans (z[t] from z[t-1]); the benchmark's
    # long-sequence oracle needs to know which end of a time slice is exact
    direction: str = "backward"


def _episode_flags(
    num_envs: int, seq_len: int, device: torch.device, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Boolean terminated and truncated flags, never both at one step; callers without truncations drop the second."""
    draw = torch.rand(num_envs, seq_len, device=device, generator=generator)
    terminated = draw < TERMINATION_RATE
    truncated = (draw >= TERMINATION_RATE) & (draw < TERMINATION_RATE + TRUNCATION_RATE)
    return terminated, truncated


def _bootstrap_values(terminated: torch.Tensor, truncated: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """V(s_{t+1}^true) at truncated steps and in the last column (unless the episode terminated there)."""
    values = torch.randn(terminated.shape, device=terminated.device, generator=generator)
    placed = truncated.clone()
    placed[:, -1] = ~terminated[:, -1]
    return values * placed


def _normal(shape: tuple[int, ...], device: torch.device, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, device=device, generator=generator)


def _window_end(
    with_truncations: bool, terminated: torch.Tensor, truncated: torch.Tensor, generator: torch.Generator,
    flag_dtype: torch.dtype,
) -> Inputs:
    """``last_value`` alone, or ``truncateds`` with ``bootstrap_values`` at truncated steps and the last column."""
    if not with_truncations:
        return {"last_value": _normal(terminated.shape[:1], terminated.device, generator)}
    return {
        "truncateds": truncated.to(flag_dtype),
        "bootstrap_values": _bootstrap_values(terminated, truncated, generator),
    }


def _gae_inputs(with_truncations: bool) -> Callable[..., Inputs]:
    def make(
        num_envs: int, seq_len: int, device: torch.device, generator: torch.Generator, flag_dtype: torch.dtype
    ) -> Inputs:
        terminated, truncated = _episode_flags(num_envs, seq_len, device, generator)
        inputs: Inputs = {
            "rewards": _normal((num_envs, seq_len), device, generator),
            "values": _normal((num_envs, seq_len), device, generator),
            "terminateds": terminated.to(flag_dtype),
            "gamma": GAMMA,
            "lambda_": LAMBDA,
        }
        return inputs | _window_end(with_truncations, terminated, truncated, generator, flag_dtype)

    return make


def _vtrace_inputs(with_truncations: bool) -> Callable[..., Inputs]:
    def make(
        num_envs: int, seq_len: int, device: torch.device, generator: torch.Generator, flag_dtype: torch.dtype
    ) -> Inputs:
        shape = (num_envs, seq_len)
        terminated, truncated = _episode_flags(num_envs, seq_len, device, generator)
        # behaviour log-probabilities of sampled actions, and a target policy that has drifted from it
        log_pi_behavior = torch.rand(shape, device=device, generator=generator).mul_(0.95).add_(0.05).log_()
        log_pi_target = log_pi_behavior + 0.3 * _normal(shape, device, generator)
        inputs: Inputs = {
            "log_pi_target": log_pi_target,
            "log_pi_behavior": log_pi_behavior,
            "values": _normal(shape, device, generator),
            "rewards": _normal(shape, device, generator),
            "terminateds": terminated.to(flag_dtype),
            "gamma": GAMMA,
        }
        return inputs | _window_end(with_truncations, terminated, truncated, generator, flag_dtype)

    return make


def _retrace_inputs(num_actions: int) -> Callable[..., Inputs]:
    def make(
        num_envs: int, seq_len: int, device: torch.device, generator: torch.Generator, flag_dtype: torch.dtype
    ) -> Inputs:
        shape = (num_envs, seq_len)
        terminated, truncated = _episode_flags(num_envs, seq_len, device, generator)
        behavior_logits = _normal((*shape, num_actions), device, generator)
        target_logits = behavior_logits + 0.5 * _normal((*shape, num_actions), device, generator)
        # actions sampled from the behaviour policy (Gumbel-max: one vectorised pass, any row count)
        gumbel = -torch.empty_like(behavior_logits).exponential_(generator=generator).log_()
        actions = (behavior_logits + gumbel).argmax(dim=-1)
        behavior_probs = behavior_logits.softmax(dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        del behavior_logits, gumbel
        return {
            "action_probs_target": target_logits.softmax(dim=-1),
            "action_probs_behavior": behavior_probs,
            "q_values": _normal(shape, device, generator),
            "next_q_values_all": _normal((*shape, num_actions), device, generator),
            "actions": actions,
            "rewards": _normal(shape, device, generator),
            "terminateds": terminated.to(flag_dtype),
            "truncateds": truncated.to(flag_dtype),
            "gamma": GAMMA,
            "lambda_": LAMBDA,
        }

    return make


def _lambda_returns_inputs(
    num_envs: int, seq_len: int, device: torch.device, generator: torch.Generator, flag_dtype: torch.dtype
) -> Inputs:
    terminated, truncated = _episode_flags(num_envs, seq_len, device, generator)
    # the caller zeroes next_values at truncated steps; the true value arrives through bootstrap_values
    next_values = _normal((num_envs, seq_len), device, generator) * ~truncated
    return {
        "rewards": _normal((num_envs, seq_len), device, generator),
        "next_values": next_values,
        "terminateds": terminated.to(flag_dtype),
        "truncateds": truncated.to(flag_dtype),
        "gamma": GAMMA,
        "lambda_": LAMBDA,
        "bootstrap_values": _bootstrap_values(terminated, truncated, generator),
    }


def _discounted_returns_inputs(
    num_envs: int, seq_len: int, device: torch.device, generator: torch.Generator, flag_dtype: torch.dtype
) -> Inputs:
    terminated, truncated = _episode_flags(num_envs, seq_len, device, generator)
    return {
        "rewards": _normal((num_envs, seq_len), device, generator),
        "terminateds": terminated.to(flag_dtype),
        "truncateds": truncated.to(flag_dtype),
        "gamma": GAMMA,
        "bootstrap_values": _bootstrap_values(terminated, truncated, generator),
    }


def _eligibility_traces_inputs(
    num_envs: int, seq_len: int, device: torch.device, generator: torch.Generator, flag_dtype: torch.dtype
) -> Inputs:
    dones, _ = _episode_flags(num_envs, seq_len, device, generator)
    return {
        "gradients": _normal((num_envs, seq_len), device, generator),
        "dones": dones.to(flag_dtype),
        "gamma": GAMMA,
        "lambda_": LAMBDA,
        "seed_values": _normal((num_envs,), device, generator),
    }


def _prefix_sum_inputs(
    num_envs: int, seq_len: int, device: torch.device, generator: torch.Generator, flag_dtype: torch.dtype
) -> Inputs:
    dones, _ = _episode_flags(num_envs, seq_len, device, generator)
    return {
        "inputs": _normal((num_envs, seq_len), device, generator),
        "dones": dones.to(flag_dtype),
        "seed_values": _normal((num_envs,), device, generator),
    }


ESTIMATORS: dict[str, Estimator] = {
    estimator.name: estimator
    for estimator in (
        Estimator("gae", rl_triton.compute_gae, reference.compute_gae, _gae_inputs(False)),
        Estimator("gae+trunc", rl_triton.compute_gae, reference.compute_gae, _gae_inputs(True)),
        Estimator("vtrace", rl_triton.compute_vtrace, reference.compute_vtrace, _vtrace_inputs(False)),
        Estimator("vtrace+trunc", rl_triton.compute_vtrace, reference.compute_vtrace, _vtrace_inputs(True)),
        Estimator("retrace-a4", rl_triton.compute_retrace, reference.compute_retrace, _retrace_inputs(4)),
        Estimator("retrace-a18", rl_triton.compute_retrace, reference.compute_retrace, _retrace_inputs(18)),
        Estimator(
            "lambda-returns",
            rl_triton.compute_lambda_returns,
            reference.compute_lambda_returns,
            _lambda_returns_inputs,
        ),
        Estimator(
            "discounted-returns",
            rl_triton.compute_discounted_returns,
            reference.compute_discounted_returns,
            _discounted_returns_inputs,
        ),
        Estimator(
            "eligibility-traces",
            rl_triton.compute_eligibility_traces,
            reference.compute_eligibility_traces,
            _eligibility_traces_inputs,
            direction="forward",
        ),
        Estimator(
            "prefix-sum",
            rl_triton.compute_episodic_prefix_sum,
            reference.compute_episodic_prefix_sum,
            _prefix_sum_inputs,
            direction="forward",
        ),
    )
}

DEMO_ESTIMATORS = (
    "gae",
    "gae+trunc",
    "vtrace",
    "retrace-a18",
    "lambda-returns",
    "discounted-returns",
    "eligibility-traces",
    "prefix-sum",
)


def outputs_of(result: torch.Tensor | Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Every estimator's result as a tuple of tensors (V-trace and Retrace return two)."""
    return (result,) if isinstance(result, torch.Tensor) else tuple(result)


def to_float64(inputs: Inputs, device: torch.device | None = None) -> Inputs:
    """Floating tensors as float64 (flags and action indices keep their dtype), optionally moved."""
    converted: Inputs = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor):
            value = value.to(device=device or value.device)
            if value.is_floating_point() and key not in ("terminateds", "truncateds", "dones"):
                value = value.double()
        converted[key] = value
    return converted


def relative_error(result: Any, expected: Any) -> float:
    """max over outputs of ||result - expected|| / ||expected||, in float64; inf on NaN or shape mismatch."""
    worst = 0.0
    for got, want in zip(outputs_of(result), outputs_of(expected), strict=True):
        if got.shape != want.shape:
            return math.inf
        got = got.to(device=want.device, dtype=torch.float64)
        want = want.double()
        difference = float(torch.linalg.vector_norm(got - want))
        scale = float(torch.linalg.vector_norm(want))
        error = difference / scale if scale > 0 else difference
        worst = max(worst, error if math.isfinite(error) else math.inf)
    return worst


def execution_path(device: torch.device) -> str:
    """Which implementation rl_triton picks for tensors on ``device`` (the documented backend rule)."""
    if device.type == "cuda":
        return "triton"
    if _dispatch.interpreter_enabled():
        return "triton-interpreter"
    return "reference"


def best_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def median_call_seconds(call: Callable[[], Any], device: torch.device, warmup: int = 2, repeats: int = 5) -> float:
    """Median wall time of ``call()``: CUDA events on the GPU (the call is asynchronous), a clock on the CPU."""
    for _ in range(warmup):
        call()
    samples = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
    else:
        for _ in range(repeats):
            began = time.perf_counter()
            call()
            samples.append(time.perf_counter() - began)
    return statistics.median(samples)


def package_version(name: str) -> str:
    """Installed version without importing the package (Triton is heavy and optional on CPU)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def library_version() -> str:
    version = getattr(rl_triton, "__version__", None) or package_version("rl-triton")
    return "(source tree)" if version == "not installed" else version


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], right_aligned_from: int = 1) -> str:
    """Plain fixed-width table: first columns left-aligned, the rest (numbers) right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            str(cell).ljust(width) if index < right_aligned_from else str(cell).rjust(width)
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )

    separator = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), separator, *(line(row) for row in rows)])


def shape_label(inputs: Inputs, primary: torch.Tensor) -> str:
    shape = "x".join(str(size) for size in primary.shape)
    per_action = inputs.get("action_probs_target")
    return f"{shape}x{per_action.shape[-1]}" if isinstance(per_action, torch.Tensor) else shape


def demo_shape(device: torch.device) -> tuple[int, int]:
    """A rollout of PPO size on the GPU; smaller on the CPU so the demonstration takes seconds."""
    if device.type == "cuda":
        return 1024, 256
    if execution_path(device) == "triton-interpreter":
        return 16, 64
    return 64, 128


def run_demo(device: torch.device | None = None, seed: int = 0) -> int:
    """Call every estimator through the public API, time it, check it; print a table. Returns an exit code."""
    device = device or best_device()
    num_envs, seq_len = demo_shape(device)
    path = execution_path(device)
    generator = torch.Generator(device=device).manual_seed(seed)
    print(f"rl-triton {library_version()} demonstration on {describe_device(device)}")
    print(f"torch {torch.__version__}, triton {package_version('triton')}, path: {path}")
    print(
        f"rollout: {num_envs} envs x {seq_len} steps, gamma={GAMMA}, lambda={LAMBDA}, "
        f"{TERMINATION_RATE:.0%} terminations, {TRUNCATION_RATE:.0%} truncations where used\n"
    )
    header = ("estimator", "shape", "device/path", "time (median)", "rel. error vs float64", "check")
    rows = []
    failures = 0
    for name in DEMO_ESTIMATORS:
        estimator = ESTIMATORS[name]
        inputs = estimator.make_inputs(num_envs, seq_len, device, generator, torch.float32)
        result = estimator.public(**inputs)
        expected = estimator.reference(**to_float64(inputs))
        error = relative_error(result, expected)
        seconds = median_call_seconds(lambda estimator=estimator, inputs=inputs: estimator.public(**inputs), device)
        verdict = "ok" if error <= FLOAT32_TOLERANCE else "MISMATCH"
        failures += verdict != "ok"
        primary = outputs_of(result)[0]
        rows.append(
            (
                name,
                shape_label(inputs, primary),
                f"{device.type}/{path}",
                format_duration(seconds),
                f"{error:.2e}",
                verdict,
            )
        )
    print(format_table(header, rows, right_aligned_from=3))
    print(
        "\ntime: full Python call"
        + (" (CUDA events, includes launch cost)" if device.type == "cuda" else "")
        + "; rel. error: ||out - ref|| / ||ref|| against rl_triton.reference in float64."
    )
    if path == "reference":
        print("No GPU found: CPU tensors run the PyTorch reference path. `python -m rl_triton bench` measures speed.")
    elif path == "triton-interpreter":
        print("TRITON_INTERPRET=1: the Triton kernels run on the CPU through Triton's interpreter (slow, exact).")
    if _checks.correctness_checks_enabled():
        print("RL_TRITON_CORRECTNESS_WARNINGS: every call also checked its data (the times include those checks).")
    if failures:
        print(f"{failures} estimator(s) disagree with the float64 reference beyond {FLOAT32_TOLERANCE:g}.")
        return 1
    return 0
