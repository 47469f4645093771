"""Host side of the Triton path: tile plans, the look-back workspace and one launcher per kernel.

Everything here receives ``[rows, T]`` (``[rows, T, A]``) views from ``rl_triton.ops`` and
reads them in place through their strides; outputs are written through their strides too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator

import numpy as np
import torch
import triton
import triton.language as tl

from rl_triton._dispatch import interpreter_enabled
from rl_triton.kernels.gae import BOOTSTRAP_FULL, BOOTSTRAP_LAST, BOOTSTRAP_NONE, gae_kernel
from rl_triton.kernels.prefix_sum import episodic_scan_kernel
from rl_triton.kernels.recurrence import linear_recurrence_kernel
from rl_triton.kernels.retrace import retrace_kernel
from rl_triton.kernels.returns import returns_kernel
from rl_triton.kernels.vtrace import vtrace_kernel

# Tile plans measured on an H200 (BENCHMARKS.md): one row of 512 steps per program is the sweet
# spot for many rows; time-split programs take longer chunks so fewer look-backs are chained.
_MANY_ROWS_BLOCK_TIME = 512
_SPLIT_BLOCK_TIME = 2048
_HEAVY_SPLIT_BLOCK_TIME = 512
# short rows are packed so that one warp still holds 128 steps
_MIN_TILE_ELEMENTS = 128
# time-major buffers are read as tiles of many rows and few steps, so each warp reads along rows
_TIME_MAJOR_BLOCK_TIME = 16
_TIME_MAJOR_TILE_ELEMENTS = 2048
_TIME_MAJOR_ELEMENTS_PER_WARP = 512
# predecessors inspected per look-back step
_LOOKBACK_WINDOW = 32


@dataclasses.dataclass(frozen=True)
class TilePlan:
    block_rows: int
    block_time: int
    num_row_tiles: int
    num_chunks: int
    split: bool
    num_warps: int
    num_stages: int
    window: int

    @property
    def prefetch(self) -> bool:
        """Whether a program walks several chunks and so loads each next chunk ahead."""
        return not self.split and self.num_chunks > 1

    @property
    def grid(self) -> tuple[int]:
        return (self.num_row_tiles * self.num_chunks if self.split else self.num_row_tiles,)


@dataclasses.dataclass
class _Override:
    block_rows: int | None = None
    block_time: int | None = None
    split: bool | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    window: int | None = None


_override = _Override()


@contextlib.contextmanager
def tile_override(
    block_rows: int | None = None,
    block_time: int | None = None,
    split: bool | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    window: int | None = None,
) -> Iterator[None]:
    """Force tile sizes (powers of two) and whether time is split across programs.

    For tests (multi-chunk and look-back paths at small sizes) and tuning; None keeps the heuristic.
    """
    global _override
    previous = _override
    _override = _Override(block_rows, block_time, split, num_warps, num_stages, window)
    try:
        yield
    finally:
        _override = previous


@functools.cache
def _multiprocessors(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def plan_tiles(
    num_rows: int, seq_len: int, time_major: bool, device: torch.device, heavy: bool, max_block_time: int = 1 << 30
) -> TilePlan:
    """Tile shape, warps and whether to split time, for one call.

    ``heavy`` kernels (V-trace, Retrace) keep more values live per step and take smaller tiles;
    ``max_block_time`` caps the chunk length (Retrace's tiles also span an action block).
    """
    rows_pow2, time_pow2 = triton.next_power_of_2(num_rows), triton.next_power_of_2(seq_len)
    if time_major:
        block_time = min(time_pow2, _TIME_MAJOR_BLOCK_TIME)
        block_rows = min(rows_pow2, _TIME_MAJOR_TILE_ELEMENTS // block_time)
    else:
        block_time = min(time_pow2, _MANY_ROWS_BLOCK_TIME)
        block_rows = min(rows_pow2, max(1, _MIN_TILE_ELEMENTS // block_time))
    num_chunks = triton.cdiv(seq_len, block_time)
    # too few row tiles to fill the GPU: split time across programs as well
    split = num_chunks > 1 and triton.cdiv(num_rows, block_rows) < 2 * _multiprocessors(device)
    if _override.split is not None:
        split = _override.split
    if split and not time_major:
        block_time = min(time_pow2, _HEAVY_SPLIT_BLOCK_TIME if heavy else _SPLIT_BLOCK_TIME)
    block_time = _override.block_time or min(block_time, max_block_time)
    block_rows = _override.block_rows or block_rows
    num_row_tiles = triton.cdiv(num_rows, block_rows)
    num_chunks = triton.cdiv(seq_len, block_time)
    split = split and num_chunks > 1
    # programs that walk several chunks hold two chunks' loads at once
    elements_per_warp = 128 if heavy or split or num_chunks > 1 else 256
    if time_major and not split:
        elements_per_warp = _TIME_MAJOR_ELEMENTS_PER_WARP
    num_warps = _override.num_warps or max(1, min(8, block_rows * block_time // elements_per_warp))
    num_stages = _override.num_stages or 1
    window = _override.window or _LOOKBACK_WINDOW
    return TilePlan(block_rows, block_time, num_row_tiles, num_chunks, split, num_warps, num_stages, window)


def _is_time_major(x: torch.Tensor) -> bool:
    return x.stride(-1) != 1 and x.stride(0) == 1 and x.shape[0] > 1


def _lookback_workspace(plan: TilePlan, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(status, aggregates, prefixes, ticket counter); only status and counter need zeroing."""
    if not plan.split:
        dummy = torch.empty(0, dtype=torch.int32, device=device)
        return dummy, dummy, dummy, dummy
    slots = plan.num_row_tiles * plan.num_chunks
    flags = torch.zeros(slots + 1, dtype=torch.int32, device=device)
    values = torch.empty(3 * slots * plan.block_rows, dtype=dtype, device=device)
    return flags[:slots], values[: 2 * slots * plan.block_rows], values[2 * slots * plan.block_rows :], flags[slots:]


def _float_arg(value: float) -> object:
    """A float kernel argument that stays float64 on every path.

    Compiled kernels take it through their ``tl.float64`` annotation; Triton's interpreter would
    turn a Python float into a float32 constant, so there it travels as a float64 scalar tensor.
    """
    if not interpreter_enabled():
        return value
    from triton.runtime.interpreter import TensorHandle

    return tl.tensor(TensorHandle(np.array([value], dtype=np.float64), tl.float64), tl.float64)


def _bootstrap_arg(
    bootstrap_values: torch.Tensor | None, last_value: torch.Tensor | None
) -> tuple[torch.Tensor | None, int, tuple[int, int]]:
    """(tensor, BOOTSTRAP mode, (row, time) strides) of GAE's and V-trace's bootstrap input."""
    if last_value is not None:
        return last_value, BOOTSTRAP_LAST, (last_value.stride(0), 0)
    if bootstrap_values is not None:
        return bootstrap_values, BOOTSTRAP_FULL, (bootstrap_values.stride(0), bootstrap_values.stride(1))
    return None, BOOTSTRAP_NONE, (0, 0)


def _compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def _triton_dtype(dtype: torch.dtype) -> tl.dtype:
    return tl.float64 if dtype == torch.float64 else tl.float32


def _strides(x: torch.Tensor | None) -> tuple[int, ...]:
    return (0, 0) if x is None else tuple(x.stride())


def _meta(plan: TilePlan, dtype: torch.dtype) -> dict:
    return {
        "SPLIT": plan.split,
        "BLOCK_ROWS": plan.block_rows,
        "BLOCK_TIME": plan.block_time,
        "WINDOW": plan.window,
        "DTYPE": _triton_dtype(dtype),
        "num_warps": plan.num_warps,
        "num_stages": plan.num_stages,
    }


def gae(
    advantages: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None,
    gamma: float,
    lambda_: float,
    bootstrap_values: torch.Tensor | None,
    last_value: torch.Tensor | None,
) -> None:
    num_rows, seq_len = rewards.shape
    dtype = _compute_dtype(rewards, values, bootstrap_values, last_value)
    plan = plan_tiles(num_rows, seq_len, _is_time_major(rewards), rewards.device, heavy=False)
    status, aggregates, prefixes, counter = _lookback_workspace(plan, dtype, rewards.device)
    bootstrap, mode, boot_strides = _bootstrap_arg(bootstrap_values, last_value)
    gae_kernel[plan.grid](
        rewards, values, terminateds, truncateds, bootstrap, advantages,
        status, aggregates, prefixes, counter,
        num_rows, seq_len, plan.num_chunks, plan.num_row_tiles,
        *rewards.stride(), *values.stride(), *terminateds.stride(), *_strides(truncateds),
        *boot_strides, *advantages.stride(),
        *map(_float_arg, (gamma, lambda_)),
        HAS_TRUNCATED=truncateds is not None, BOOTSTRAP=mode, PREFETCH=plan.prefetch, **_meta(plan, dtype),
    )


def vtrace(
    targets: torch.Tensor,
    advantages: torch.Tensor,
    log_pi_target: torch.Tensor,
    log_pi_behavior: torch.Tensor,
    values: torch.Tensor,
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None,
    gamma: float,
    rho_bar: float,
    c_bar: float,
    bootstrap_values: torch.Tensor | None,
    last_value: torch.Tensor | None,
) -> None:
    num_rows, seq_len = rewards.shape
    dtype = _compute_dtype(log_pi_target, log_pi_behavior, values, rewards, bootstrap_values, last_value)
    plan = plan_tiles(num_rows, seq_len, _is_time_major(rewards), rewards.device, heavy=True)
    status, aggregates, prefixes, counter = _lookback_workspace(plan, dtype, rewards.device)
    bootstrap, mode, boot_strides = _bootstrap_arg(bootstrap_values, last_value)
    if targets.stride() != advantages.stride():
        raise RuntimeError("vtrace outputs must share one layout")
    vtrace_kernel[plan.grid](
        log_pi_target, log_pi_behavior, values, rewards, terminateds, truncateds, bootstrap,
        targets, advantages,
        status, aggregates, prefixes, counter,
        num_rows, seq_len, plan.num_chunks, plan.num_row_tiles,
        *log_pi_target.stride(), *log_pi_behavior.stride(), *values.stride(), *rewards.stride(),
        *terminateds.stride(), *_strides(truncateds), *boot_strides, *targets.stride(),
        *map(_float_arg, (gamma, rho_bar, c_bar)),
        HAS_TRUNCATED=truncateds is not None, BOOTSTRAP=mode, PREFETCH=plan.prefetch, **_meta(plan, dtype),
    )


def retrace(
    targets: torch.Tensor,
    advantages: torch.Tensor,
    action_probs_target: torch.Tensor,
    action_probs_behavior: torch.Tensor,
    q_values: torch.Tensor,
    next_q_values_all: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor,
    gamma: float,
    lambda_: float,
    c_bar: float,
    rho_bar: float,
) -> None:
    num_rows, seq_len, num_actions = action_probs_target.shape
    dtype = _compute_dtype(action_probs_target, action_probs_behavior, q_values, next_q_values_all, rewards)
    block_actions = min(triton.next_power_of_2(num_actions), 32)
    plan = plan_tiles(num_rows, seq_len, _is_time_major(rewards), rewards.device, heavy=True,
                      max_block_time=max(16, 4096 // block_actions))
    status, aggregates, prefixes, counter = _lookback_workspace(plan, dtype, rewards.device)
    if targets.stride() != advantages.stride():
        raise RuntimeError("retrace outputs must share one layout")
    retrace_kernel[plan.grid](
        action_probs_target, action_probs_behavior, q_values, next_q_values_all, actions, rewards,
        terminateds, truncateds, targets, advantages,
        status, aggregates, prefixes, counter,
        num_rows, seq_len, num_actions, plan.num_chunks, plan.num_row_tiles,
        *action_probs_target.stride(), *next_q_values_all.stride(), *action_probs_behavior.stride(),
        *q_values.stride(), *actions.stride(), *rewards.stride(), *terminateds.stride(), *truncateds.stride(),
        *targets.stride(),
        *map(_float_arg, (gamma, lambda_, c_bar, rho_bar)),
        BLOCK_ACTIONS=block_actions, **_meta(plan, dtype),
    )


def returns(
    out: torch.Tensor,
    rewards: torch.Tensor,
    next_values: torch.Tensor | None,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None,
    gamma: float,
    lambda_: float,
    bootstrap_values: torch.Tensor | None,
) -> None:
    """Lambda-returns; discounted returns are ``next_values=None, lambda_=1``."""
    num_rows, seq_len = rewards.shape
    dtype = _compute_dtype(rewards, next_values, bootstrap_values)
    plan = plan_tiles(num_rows, seq_len, _is_time_major(rewards), rewards.device, heavy=False)
    status, aggregates, prefixes, counter = _lookback_workspace(plan, dtype, rewards.device)
    returns_kernel[plan.grid](
        rewards, next_values, terminateds, truncateds, bootstrap_values, out,
        status, aggregates, prefixes, counter,
        num_rows, seq_len, plan.num_chunks, plan.num_row_tiles,
        *rewards.stride(), *_strides(next_values), *terminateds.stride(), *_strides(truncateds),
        *_strides(bootstrap_values), *out.stride(),
        *map(_float_arg, (gamma, lambda_)),
        HAS_NEXT_VALUES=next_values is not None, HAS_TRUNCATED=truncateds is not None,
        HAS_BOOTSTRAP=bootstrap_values is not None, PREFETCH=plan.prefetch, **_meta(plan, dtype),
    )


def episodic_scan(
    out: torch.Tensor,
    inputs: torch.Tensor,
    dones: torch.Tensor,
    seed_values: torch.Tensor | None,
    decay: float,
    reset_after_flag: bool,
) -> None:
    """Prefix sums (decay 1) and eligibility traces (decay gamma * lambda, reset after the flag)."""
    num_rows, seq_len = inputs.shape
    dtype = _compute_dtype(inputs, seed_values)
    plan = plan_tiles(num_rows, seq_len, _is_time_major(inputs), inputs.device, heavy=False)
    status, aggregates, prefixes, counter = _lookback_workspace(plan, dtype, inputs.device)
    episodic_scan_kernel[plan.grid](
        inputs, dones, seed_values, out,
        status, aggregates, prefixes, counter,
        num_rows, seq_len, plan.num_chunks, plan.num_row_tiles,
        *inputs.stride(), *dones.stride(), 0 if seed_values is None else seed_values.stride(0), *out.stride(),
        _float_arg(decay),
        HAS_SEED=seed_values is not None, RESET_AFTER_FLAG=reset_after_flag, PREFETCH=plan.prefetch,
        **_meta(plan, dtype),
    )


def linear_recurrence(
    out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor | None, backward: bool
) -> None:
    """x[t] = a[t] + b[t] * x[t+1] (``backward``) or x[t-1] (forward), x beyond the ends = ``carry``."""
    num_rows, seq_len = a.shape
    dtype = _compute_dtype(a, b, carry)
    plan = plan_tiles(num_rows, seq_len, _is_time_major(a), a.device, heavy=False)
    status, aggregates, prefixes, counter = _lookback_workspace(plan, dtype, a.device)
    linear_recurrence_kernel[plan.grid](
        a, b, carry, out,
        status, aggregates, prefixes, counter,
        num_rows, seq_len, plan.num_chunks, plan.num_row_tiles,
        *a.stride(), *b.stride(), 0 if carry is None else carry.stride(0), *out.stride(),
        HAS_CARRY=carry is not None, BACKWARD=backward, **_meta(plan, dtype),
    )
