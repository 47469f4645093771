"""The two plain time loops every reference estimator is built on."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import torch

# dtypes whose CPU tensors the loops step through as numpy arrays of the same memory
_NUMPY_DTYPES = (torch.float32, torch.float64)


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """float64 if any of ``tensors`` (the value inputs; callers leave flags out) is float64, else float32."""
    for tensor in tensors:
        if tensor is not None and tensor.dtype == torch.float64:
            return torch.float64
    return torch.float32


def flag(tensor: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """A boolean/uint8/float flag tensor as 0/1 in ``like``'s dtype (any non-zero value is set)."""
    if tensor is None:
        return torch.zeros_like(like)
    return (tensor != 0).to(like.dtype)


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def clipped_ratios(
    ratio: Callable[[torch.Tensor | None], torch.Tensor], bars: tuple[float, ...], *inputs: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """``min(ratio(None), bar)`` for each of ``bars``: the importance weight clipped at each.

    ``ratio(clipped)`` computes the ratio from ``inputs``; given ``clipped`` (True where the ratio exceeds a bar) it
    must stay finite there. Where inputs need gradients, clipped steps take the bar through a select and their ratio
    is computed from finite stand-ins: a clamp there would pass back 0 * d(ratio), which is NaN where the ratio
    overflows (a log-ratio above 88.7 in float32, a behaviour probability of 1e-30) though the clipped value is finite.
    """
    if not _needs_grad(*inputs):
        ratios = ratio(None)
        return tuple(torch.clamp(ratios, max=bar) for bar in bars)
    with torch.no_grad():
        ratios = ratio(None)
    weights = []
    for bar in bars:
        clipped = ratios > bar  # NaN ratios are not clipped: NaN stays NaN, as through the clamp
        weights.append(torch.where(clipped, bar, ratio(clipped)))
    return tuple(weights)


def backward_recurrence(a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor) -> torch.Tensor:
    """x[:, t] = a[:, t] + b[:, t] * x[:, t + 1] with x[:, T] = carry; rows in parallel.

    Differentiable: under autograd the recurrence runs as one op whose backward is the
    recurrence in the opposite direction (``rl_triton._autograd``).
    """
    if _needs_grad(a, b, carry):
        from rl_triton._autograd import LinearRecurrence

        return LinearRecurrence.apply(a, b, carry, True)
    return backward_loop(a, b, carry)


def forward_recurrence(a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor) -> torch.Tensor:
    """x[:, t] = a[:, t] + b[:, t] * x[:, t - 1] with x[:, -1] = carry; rows in parallel (differentiable)."""
    if _needs_grad(a, b, carry):
        from rl_triton._autograd import LinearRecurrence

        return LinearRecurrence.apply(a, b, carry, False)
    return forward_loop(a, b, carry)


def backward_loop(a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor) -> torch.Tensor:
    """The plain time loop of ``backward_recurrence``."""
    return _time_loop(a, b, carry, range(a.shape[-1] - 1, -1, -1))


def forward_loop(a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor) -> torch.Tensor:
    """The plain time loop of ``forward_recurrence``."""
    return _time_loop(a, b, carry, range(a.shape[-1]))


def _time_loop(a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor, steps: Iterable[int]) -> torch.Tensor:
    """x = a[:, t] + b[:, t] * x at each of ``steps`` in turn, from x = carry; out[:, t] = x.

    Float32 and float64 CPU tensors of one dtype step through numpy arrays of the same memory: the
    same two operations per step, rounded the same way (the results are bit for bit those of the
    PyTorch loop), at a fraction of PyTorch's cost per operation, which dominates short columns
    (public estimators 2.8-5.4x faster at 8x2048 and 64x128, 1.0-1.9x at 1024x256 and 4096x128;
    ``benchmarks/cpu_loops.py``). Everything else (CUDA, other dtypes, torch.compile's tracing)
    steps in PyTorch.
    """
    if _numpy_steps_possible(a, b, carry):
        a_array, b_array, x = (tensor.detach().resolve_neg().numpy() for tensor in (a, b, carry))
        out_array = np.empty_like(a_array)
        # NaN and inf pass through as in PyTorch's steps, without numpy's floating-point warnings
        with np.errstate(all="ignore"):
            for t in steps:
                column = out_array[:, t]
                np.multiply(b_array[:, t], x, out=column)
                np.add(a_array[:, t], column, out=column)
                x = column
        return torch.from_numpy(out_array)
    out = torch.empty_like(a)
    x = carry
    for t in steps:
        x = a[:, t] + b[:, t] * x
        out[:, t] = x
    return out


def _numpy_steps_possible(a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor) -> bool:
    tensors = (a, b, carry)
    # one dtype throughout: PyTorch would promote a wider carry and keep x in its dtype
    return (all(type(tensor) is torch.Tensor and tensor.device.type == "cpu" and tensor.dtype == a.dtype
                for tensor in tensors)
            and a.dtype in _NUMPY_DTYPES and a.dim() == 2 and carry.dim() <= 1
            and not torch.compiler.is_compiling())


def row_zeros(like: torch.Tensor) -> torch.Tensor:
    """Zeros of ``like``'s dtype and device, one per row (a carry), also for rows of no steps."""
    return like.new_zeros(like.shape[:1])


def shift_next(x: torch.Tensor, fill: torch.Tensor | float = 0.0) -> torch.Tensor:
    """y[:, t] = x[:, t + 1] for t < T - 1 and y[:, T - 1] = fill (nothing to fill where T = 0)."""
    out = torch.empty_like(x)
    out[:, :-1] = x[:, 1:]
    if x.shape[1]:
        out[:, -1] = fill
    return out


def shift_previous(x: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """y[:, t] = x[:, t - 1] for t > 0 and y[:, 0] = fill (nothing to fill where T = 0)."""
    out = torch.empty_like(x)
    out[:, 1:] = x[:, :-1]
    if x.shape[1]:
        out[:, 0] = fill
    return out


def next_state_values(
    values: torch.Tensor,
    truncated: torch.Tensor,
    bootstrap: torch.Tensor | None,
    last_value: torch.Tensor | None,
) -> torch.Tensor:
    """v_next[t] = values[t + 1] * (1 - truncated[t]) + bootstrap_values[t]; values[T] := 0.

    ``last_value`` stands for a bootstrap tensor that is zero except in its last column.
    """
    next_values = shift_next(values) * (1.0 - truncated)
    if bootstrap is not None:
        next_values = next_values + bootstrap
    elif last_value is not None and values.shape[1]:
        next_values[:, -1] = next_values[:, -1] + last_value
    return next_values
