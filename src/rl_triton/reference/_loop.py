"""The two plain time loops every reference estimator is built on."""

from __future__ import annotations

import torch


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """float64 if any floating input is float64, else float32."""
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
    out = torch.empty_like(a)
    x = carry
    for t in range(a.shape[-1] - 1, -1, -1):
        x = a[:, t] + b[:, t] * x
        out[:, t] = x
    return out


def forward_loop(a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor) -> torch.Tensor:
    """The plain time loop of ``forward_recurrence``."""
    out = torch.empty_like(a)
    x = carry
    for t in range(a.shape[-1]):
        x = a[:, t] + b[:, t] * x
        out[:, t] = x
    return out


def shift_next(x: torch.Tensor, fill: torch.Tensor | float = 0.0) -> torch.Tensor:
    """y[:, t] = x[:, t + 1] for t < T - 1 and y[:, T - 1] = fill."""
    out = torch.empty_like(x)
    out[:, :-1] = x[:, 1:]
    out[:, -1] = fill
    return out


def shift_previous(x: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """y[:, t] = x[:, t - 1] for t > 0 and y[:, 0] = fill."""
    out = torch.empty_like(x)
    out[:, 1:] = x[:, :-1]
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
    elif last_value is not None:
        next_values[:, -1] = next_values[:, -1] + last_value
    return next_values
