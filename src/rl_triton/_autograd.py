"""Gradients: the linear recurrence as one autograd op whose backward is the adjoint recurrence.

With x[t] = a[t] + b[t] * x[t+1] and x[T] = c (backward direction), the adjoint
lam[t] = dL/dx[t] + b[t-1] * lam[t-1] runs forward in time, and

    dL/da[t] = lam[t],   dL/db[t] = lam[t] * x[t+1],   dL/dc = lam[T-1] * b[T-1];

the forward direction mirrors it. Both directions run on the same engine as the estimators
(Triton on CUDA and under the interpreter, the plain loop otherwise). The estimators' elementwise
prologues and epilogues are ordinary differentiable PyTorch (``rl_triton.reference``).

GAE, lambda-returns and discounted returns are fused instead wherever Triton runs: the forward is
the estimator's own kernel, and the backward one adjoint kernel that writes every input gradient
(``kernels/gae_backward.py``, ``kernels/returns_backward.py``), so neither pass materialises the
composition's temporaries. Elsewhere (the CPU path) they are the reference composition above.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rl_triton import _library, reference
from rl_triton._checks import without_negative_views
from rl_triton._dispatch import use_triton
from rl_triton.reference._loop import (
    backward_loop,
    compute_dtype,
    flag,
    forward_loop,
    forward_recurrence,
    shift_next,
    shift_previous,
)


def solve(a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor | None, backward: bool) -> torch.Tensor:
    """The recurrence's solution, without autograd (the registered op while torch.compile traces)."""
    if torch.compiler.is_compiling():
        return torch.ops.rl_triton.linear_recurrence(a, b, carry, backward)
    if a.numel() == 0:  # no steps or no rows (the reference twins' compositions): nothing to launch or loop over
        return torch.empty_like(a)
    if use_triton(a.device):
        # in a's layout, as the loops below and the op's fake kernel (_library.py) allocate it: torch.compile checks
        # the strides it traced against these (time-major [rows, T] views of [T, N] inputs stay time-major)
        out = torch.empty_like(a)
        _library._kernels().linear_recurrence(out, *without_negative_views((a, b, carry)), backward)
        return out
    carry = torch.zeros_like(a[:, 0]) if carry is None else carry
    return backward_loop(a, b, carry) if backward else forward_loop(a, b, carry)


class LinearRecurrence(torch.autograd.Function):
    """The recurrence as one op. Its backward is differentiable in turn (the adjoint is this op again, and
    the rest elementwise PyTorch), so gradients of gradients (``create_graph=True``) are exact."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor, backward: bool) -> torch.Tensor:
        x = solve(a, b, carry, backward)
        # the output and the carry enter only the decays' gradient: saved only where the decays need one (they
        # are made of flags in most estimators), so that a caller may change the output in place, and pass a
        # carry made under inference mode, as with any linear PyTorch op
        decay_gradient = ctx.needs_input_grad[1]
        ctx.save_for_backward(b, carry if decay_gradient else None, x if decay_gradient else None)
        ctx.backward_direction = backward
        return x

    @staticmethod
    def backward(ctx: Any, grad_x: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        b, carry, x = ctx.saved_tensors
        grad_b = None
        if grad_x.shape[1] == 0:  # no steps: the carry reaches no output
            grad_b = torch.zeros_like(b) if ctx.needs_input_grad[1] else None
            return grad_x, grad_b, grad_x.new_zeros(grad_x.shape[:1]), None
        if ctx.backward_direction:
            adjoint = _adjoint(grad_x, shift_previous(b), backward=False)
            if x is not None:
                grad_b = adjoint * shift_next(x, carry)
            grad_carry = adjoint[:, -1] * b[:, -1]
        else:
            adjoint = _adjoint(grad_x, shift_next(b), backward=True)
            if x is not None:
                grad_b = adjoint * _shift_previous_from(x, carry)
            grad_carry = adjoint[:, 0] * b[:, 0]
        return adjoint, grad_b, grad_carry, None


def _adjoint(grad: torch.Tensor, decay: torch.Tensor, backward: bool) -> torch.Tensor:
    """The adjoint recurrence: a plain solve, or, while autograd records a backward (``create_graph=True``)
    that depends on its inputs, the differentiable op."""
    if torch.is_grad_enabled() and (grad.requires_grad or decay.requires_grad):
        return LinearRecurrence.apply(grad, decay, torch.zeros_like(grad[:, 0]), backward)
    return solve(grad, decay, None, backward)


def _shift_previous_from(x: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """x shifted one step later in time, ``first`` at step 0 (differentiable)."""
    return torch.cat((first.unsqueeze(1), x[:, :-1]), dim=1)


def _step_gradient(like: torch.Tensor, dtype: torch.dtype | None, time_major: bool) -> torch.Tensor:
    """A ``[rows, T]`` gradient buffer in the output's layout, or an empty placeholder if not needed."""
    return like.new_empty(0) if dtype is None else _library._empty(like, dtype, time_major)


def _in_output_layout(gradients: tuple[torch.Tensor, ...], like: torch.Tensor,
                      time_major: bool) -> tuple[torch.Tensor, ...]:
    """The loops' per-step gradients, which follow the incoming gradient's layout, in the output's layout that
    the ops' fake kernels declare (torch.compile checks the strides it traced); placeholders as they are."""
    laid_out = []
    for gradient in gradients:
        if gradient.dim() == 2:
            buffer = _step_gradient(like, gradient.dtype, time_major)
            if buffer.stride() != gradient.stride():
                gradient = buffer.copy_(gradient)
        laid_out.append(gradient)
    return tuple(laid_out)


def _or_none(gradient: torch.Tensor, needed: bool) -> torch.Tensor | None:
    return gradient if needed else None


def _gae_backward(
    grad_advantages: torch.Tensor, terminateds: torch.Tensor, truncateds: torch.Tensor | None,
    gamma: float, lambda_: float, rewards_dtype: torch.dtype | None, values_dtype: torch.dtype | None,
    bootstrap_values_dtype: torch.dtype | None, last_value_dtype: torch.dtype | None,
    scan_dtype: torch.dtype, time_major: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dL/drewards, dL/dvalues, dL/dbootstrap_values, dL/dlast_value) by GAE's adjoint kernel.

    A gradient whose dtype is None is not computed and comes back as an empty placeholder.
    """
    if not use_triton(grad_advantages.device):
        grads = _gae_backward_loop(grad_advantages, terminateds, truncateds, gamma, lambda_, rewards_dtype,
                                   values_dtype, bootstrap_values_dtype, last_value_dtype, scan_dtype)
        return (*_in_output_layout(grads[:3], grad_advantages, time_major), grads[3])
    # an incoming gradient may be a view with the negation bit, like any input
    (grad_advantages,) = without_negative_views((grad_advantages,))
    grad_rewards = _step_gradient(grad_advantages, rewards_dtype, time_major)
    grad_values = _step_gradient(grad_advantages, values_dtype, time_major)
    grad_bootstrap = _step_gradient(grad_advantages, bootstrap_values_dtype, time_major)
    grad_last = grad_advantages.new_empty(0 if last_value_dtype is None else grad_advantages.shape[0],
                                          dtype=last_value_dtype)
    _library._kernels().gae_backward(
        _or_none(grad_rewards, rewards_dtype is not None), _or_none(grad_values, values_dtype is not None),
        _or_none(grad_bootstrap, bootstrap_values_dtype is not None), _or_none(grad_last, last_value_dtype is not None),
        grad_advantages, terminateds, truncateds, gamma, lambda_, scan_dtype,
    )
    return grad_rewards, grad_values, grad_bootstrap, grad_last


def _returns_backward(
    grad_returns: torch.Tensor, terminateds: torch.Tensor, truncateds: torch.Tensor | None,
    gamma: float, lambda_: float, rewards_dtype: torch.dtype | None, next_values_dtype: torch.dtype | None,
    bootstrap_values_dtype: torch.dtype | None, scan_dtype: torch.dtype, time_major: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dL/drewards, dL/dnext_values, dL/dbootstrap_values) by the return recurrence's adjoint kernel."""
    if not use_triton(grad_returns.device):
        return _in_output_layout(_returns_backward_loop(grad_returns, terminateds, truncateds, gamma, lambda_,
                                                        rewards_dtype, next_values_dtype, bootstrap_values_dtype,
                                                        scan_dtype), grad_returns, time_major)
    (grad_returns,) = without_negative_views((grad_returns,))
    grad_rewards = _step_gradient(grad_returns, rewards_dtype, time_major)
    grad_next_values = _step_gradient(grad_returns, next_values_dtype, time_major)
    grad_bootstrap = _step_gradient(grad_returns, bootstrap_values_dtype, time_major)
    _library._kernels().returns_backward(
        _or_none(grad_rewards, rewards_dtype is not None), _or_none(grad_next_values, next_values_dtype is not None),
        _or_none(grad_bootstrap, bootstrap_values_dtype is not None),
        grad_returns, terminateds, truncateds, gamma, lambda_, scan_dtype,
    )
    return grad_rewards, grad_next_values, grad_bootstrap


def _cast_or_placeholder(gradient: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    return gradient.new_empty(0) if dtype is None else gradient.to(dtype)


def _gae_backward_loop(
    grad_advantages: torch.Tensor, terminateds: torch.Tensor, truncateds: torch.Tensor | None,
    gamma: float, lambda_: float, rewards_dtype: torch.dtype | None, values_dtype: torch.dtype | None,
    bootstrap_values_dtype: torch.dtype | None, last_value_dtype: torch.dtype | None, scan_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_gae_backward`` by the plain time loop (compiled graphs on the reference path), or composed of
    differentiable ops where autograd records it (gradients of gradients)."""
    grad = grad_advantages.to(scan_dtype)
    terminated = flag(terminateds, grad)
    not_done = 1.0 - torch.maximum(terminated, flag(truncateds, grad))
    adjoint = forward_recurrence(grad, shift_previous(gamma * lambda_ * not_done), torch.zeros_like(grad[:, 0]))
    bootstrap_weight = gamma * (1.0 - terminated)
    return (
        _cast_or_placeholder(adjoint, rewards_dtype),
        _cast_or_placeholder(shift_previous(gamma * not_done * adjoint) - adjoint, values_dtype),
        _cast_or_placeholder(bootstrap_weight * adjoint, bootstrap_values_dtype),
        _cast_or_placeholder(bootstrap_weight[:, -1] * adjoint[:, -1], last_value_dtype),
    )


def _returns_backward_loop(
    grad_returns: torch.Tensor, terminateds: torch.Tensor, truncateds: torch.Tensor | None,
    gamma: float, lambda_: float, rewards_dtype: torch.dtype | None, next_values_dtype: torch.dtype | None,
    bootstrap_values_dtype: torch.dtype | None, scan_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_returns_backward`` by the plain time loop (compiled graphs on the reference path), or composed of
    differentiable ops where autograd records it (gradients of gradients)."""
    grad = grad_returns.to(scan_dtype)
    truncated = flag(truncateds, grad)
    not_done = 1.0 - torch.maximum(flag(terminateds, grad), truncated)
    adjoint = forward_recurrence(grad, shift_previous(gamma * lambda_ * not_done), torch.zeros_like(grad[:, 0]))
    grad_bootstrap = gamma * truncated * adjoint
    # the last column is also the carry G[T]
    grad_bootstrap[:, -1] += gamma * lambda_ * not_done[:, -1] * adjoint[:, -1]
    return (
        _cast_or_placeholder(adjoint, rewards_dtype),
        _cast_or_placeholder(gamma * (1.0 - lambda_) * not_done * adjoint, next_values_dtype),
        _cast_or_placeholder(grad_bootstrap, bootstrap_values_dtype),
    )


# registered so that torch.compile sees the adjoint kernels as opaque ops, like the forward ones
_gae_backward_op = torch.library.custom_op("rl_triton::gae_backward", mutates_args=())(_gae_backward)
_returns_backward_op = torch.library.custom_op("rl_triton::returns_backward", mutates_args=())(_returns_backward)


@_gae_backward_op.register_fake
def _(grad_advantages, terminateds, truncateds, gamma, lambda_, rewards_dtype, values_dtype,
      bootstrap_values_dtype, last_value_dtype, scan_dtype, time_major):
    return (
        _step_gradient(grad_advantages, rewards_dtype, time_major),
        _step_gradient(grad_advantages, values_dtype, time_major),
        _step_gradient(grad_advantages, bootstrap_values_dtype, time_major),
        grad_advantages.new_empty(0 if last_value_dtype is None else grad_advantages.shape[0], dtype=last_value_dtype),
    )


@_returns_backward_op.register_fake
def _(grad_returns, terminateds, truncateds, gamma, lambda_, rewards_dtype, next_values_dtype,
      bootstrap_values_dtype, scan_dtype, time_major):
    return (
        _step_gradient(grad_returns, rewards_dtype, time_major),
        _step_gradient(grad_returns, next_values_dtype, time_major),
        _step_gradient(grad_returns, bootstrap_values_dtype, time_major),
    )


def _fused_input_gradients(ctx: Any, grad: torch.Tensor, needs: tuple[bool, ...], composed: Callable,
                           fused: Callable, fused_op: Callable) -> list[torch.Tensor | None]:
    """The input gradients of a fused estimator (GAE, the returns) that autograd asks for (``needs``), None for
    the others: by the adjoint kernel (``fused``; ``fused_op`` while torch.compile traces) or, where autograd
    records the backward (gradients of gradients), by the differentiable adjoint recurrence (``composed``).
    These estimators are linear in their differentiable inputs, so their gradients depend on the incoming
    gradient alone: nothing else needs to be recorded."""
    terminateds, truncateds = ctx.saved_tensors
    dtypes = [dtype if needed else None for dtype, needed in zip(ctx.dtypes, needs)]
    if torch.is_grad_enabled() and grad.requires_grad:
        grads = composed(grad, terminateds, truncateds, ctx.gamma, ctx.lambda_, *dtypes, ctx.scan_dtype)
    else:
        grads = _library.call(fused, fused_op, grad, terminateds, truncateds, ctx.gamma, ctx.lambda_, *dtypes,
                              ctx.scan_dtype, ctx.time_major)
    return [_or_none(gradient, needed) for gradient, needed in zip(grads, needs)]


def _saved_flags(ctx: Any, terminateds: torch.Tensor, truncateds: torch.Tensor | None) -> None:
    """Save the flags for the backward. Flags made under ``torch.inference_mode`` (a rollout's, say) cannot be
    saved as they are, though they take no gradient: such a flag is saved as a copy, as the reference path's
    composition of PyTorch ops saves tensors computed from it. (torch.compile cannot trace ``is_inference``.)"""
    if torch.compiler.is_compiling():
        ctx.save_for_backward(terminateds, truncateds)
        return
    ctx.save_for_backward(*(flag.clone() if flag is not None and flag.is_inference() else flag
                            for flag in (terminateds, truncateds)))


class FusedGAE(torch.autograd.Function):
    """GAE by its fused kernel; the backward is one adjoint kernel. Saves only the flags."""

    @staticmethod
    def forward(
        ctx: Any, rewards: torch.Tensor, values: torch.Tensor, terminateds: torch.Tensor,
        truncateds: torch.Tensor | None, gamma: float, lambda_: float, bootstrap_values: torch.Tensor | None,
        last_value: torch.Tensor | None, out_dtype: torch.dtype, time_major: bool,
    ) -> torch.Tensor:
        _saved_flags(ctx, terminateds, truncateds)
        ctx.gamma, ctx.lambda_, ctx.time_major = gamma, lambda_, time_major
        ctx.dtypes = tuple(None if t is None else t.dtype for t in (rewards, values, bootstrap_values, last_value))
        ctx.scan_dtype = compute_dtype(rewards, values, bootstrap_values, last_value)
        return _library.call(_library.gae, _library.gae_op, rewards, values, terminateds, truncateds, gamma,
                             lambda_, bootstrap_values, last_value, out_dtype, time_major)

    @staticmethod
    def backward(ctx: Any, grad_advantages: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[6], ctx.needs_input_grad[7])
        grad_rewards, grad_values, grad_bootstrap, grad_last = _fused_input_gradients(
            ctx, grad_advantages, needs, _gae_backward_loop, _gae_backward, _gae_backward_op)
        return grad_rewards, grad_values, None, None, None, None, grad_bootstrap, grad_last, None, None


class FusedReturns(torch.autograd.Function):
    """Lambda-returns (discounted returns: no next values, lambda 1) by the fused kernel and its adjoint."""

    @staticmethod
    def forward(
        ctx: Any, rewards: torch.Tensor, next_values: torch.Tensor | None, terminateds: torch.Tensor,
        truncateds: torch.Tensor | None, gamma: float, lambda_: float, bootstrap_values: torch.Tensor | None,
        out_dtype: torch.dtype, time_major: bool,
    ) -> torch.Tensor:
        _saved_flags(ctx, terminateds, truncateds)
        ctx.gamma, ctx.lambda_, ctx.time_major = gamma, lambda_, time_major
        ctx.dtypes = tuple(None if t is None else t.dtype for t in (rewards, next_values, bootstrap_values))
        ctx.scan_dtype = compute_dtype(rewards, next_values, bootstrap_values)
        return _library.call(_library.returns, _library.returns_op, rewards, next_values, terminateds, truncateds,
                             gamma, lambda_, bootstrap_values, out_dtype, time_major)

    @staticmethod
    def backward(ctx: Any, grad_returns: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[6])
        grad_rewards, grad_next_values, grad_bootstrap = _fused_input_gradients(
            ctx, grad_returns, needs, _returns_backward_loop, _returns_backward, _returns_backward_op)
        return grad_rewards, grad_next_values, None, None, None, None, grad_bootstrap, None, None


def gae(
    rewards: torch.Tensor, values: torch.Tensor, terminateds: torch.Tensor, truncateds: torch.Tensor | None,
    gamma: float, lambda_: float, bootstrap_values: torch.Tensor | None, last_value: torch.Tensor | None,
    out_dtype: torch.dtype, time_major: bool,
) -> torch.Tensor:
    """Differentiable GAE on ``[rows, T]``: fused where Triton runs, the reference composition elsewhere.

    While torch.compile traces, the fused function's registered ops pick the engine when they run.
    """
    if torch.compiler.is_compiling() or use_triton(rewards.device):
        return FusedGAE.apply(rewards, values, terminateds, truncateds, gamma, lambda_, bootstrap_values,
                              last_value, out_dtype, time_major)
    return reference.compute_gae(rewards, values, terminateds, truncateds, gamma, lambda_, bootstrap_values,
                                 last_value)


def returns(
    rewards: torch.Tensor, next_values: torch.Tensor | None, terminateds: torch.Tensor,
    truncateds: torch.Tensor | None, gamma: float, lambda_: float | None, bootstrap_values: torch.Tensor | None,
    out_dtype: torch.dtype, time_major: bool,
) -> torch.Tensor:
    """Differentiable lambda-returns on ``[rows, T]``; discounted returns when ``next_values`` is None.

    Fused where Triton runs (and while torch.compile traces), the reference composition elsewhere.
    """
    if torch.compiler.is_compiling() or use_triton(rewards.device):
        return FusedReturns.apply(rewards, next_values, terminateds, truncateds, gamma,
                                  1.0 if next_values is None else lambda_, bootstrap_values, out_dtype, time_major)
    if next_values is None:
        return reference.compute_discounted_returns(rewards, terminateds, truncateds, gamma, bootstrap_values)
    return reference.compute_lambda_returns(rewards, next_values, terminateds, truncateds, gamma, lambda_,
                                            bootstrap_values)
