"""Gradients: the linear recurrence as one autograd op whose backward is the adjoint recurrence.

With x[t] = a[t] + b[t] * x[t+1] and x[T] = c (backward direction), the adjoint
lam[t] = dL/dx[t] + b[t-1] * lam[t-1] runs forward in time, and

    dL/da[t] = lam[t],   dL/db[t] = lam[t] * x[t+1],   dL/dc = lam[T-1] * b[T-1];

the forward direction mirrors it. Both directions run on the same engine as the estimators
(Triton on CUDA and under the interpreter, the plain loop otherwise). The estimators' elementwise
prologues and epilogues are ordinary differentiable PyTorch (``rl_triton.reference``).
"""

from __future__ import annotations

from typing import Any

import torch

from rl_triton._dispatch import use_triton
from rl_triton.reference._loop import backward_loop, forward_loop, shift_next, shift_previous


def solve(a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor | None, backward: bool) -> torch.Tensor:
    """The recurrence's solution, without autograd (the registered op while torch.compile traces)."""
    if torch.compiler.is_compiling():
        return torch.ops.rl_triton.linear_recurrence(a, b, carry, backward)
    if use_triton(a.device):
        from rl_triton import _launch

        out = torch.empty(a.shape, dtype=a.dtype, device=a.device)
        _launch.linear_recurrence(out, a, b, carry, backward)
        return out
    carry = torch.zeros_like(a[:, 0]) if carry is None else carry
    return backward_loop(a, b, carry) if backward else forward_loop(a, b, carry)


class LinearRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor, backward: bool) -> torch.Tensor:
        x = solve(a, b, carry, backward)
        ctx.save_for_backward(b, carry, x)
        ctx.backward_direction = backward
        return x

    @staticmethod
    def backward(ctx: Any, grad_x: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        b, carry, x = ctx.saved_tensors
        if ctx.backward_direction:
            adjoint = solve(grad_x, shift_previous(b), None, backward=False)
            grad_b = adjoint * shift_next(x, carry)
            grad_carry = adjoint[:, -1] * b[:, -1]
        else:
            adjoint = solve(grad_x, shift_next(b), None, backward=True)
            grad_b = adjoint * _shift_previous_from(x, carry)
            grad_carry = adjoint[:, 0] * b[:, 0]
        return adjoint, grad_b, grad_carry, None


def _shift_previous_from(x: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    out[:, 1:] = x[:, :-1]
    out[:, 0] = first
    return out


def needs_grad(*tensors: torch.Tensor | None) -> bool:
    """True when autograd will want gradients of any of ``tensors``."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
