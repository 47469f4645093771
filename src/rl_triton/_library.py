"""The estimators on ``[rows, T]`` tensors, callable directly (eager) or as ``torch.library`` ops.

Eager calls run the implementations below directly: no dispatcher on the hot path. Under
``torch.compile`` the public functions call the registered ``rl_triton::<name>`` ops instead,
which the compiler treats as opaque kernels with fake (meta) implementations, so a function
calling any estimator traces with ``fullgraph=True``; gamma, lambda and the clips are runtime
kernel arguments, so changing them never recompiles a Triton kernel (torch.compile re-traces
its graph once per distinct float value passed to a custom op).

Each op returns fresh ``[rows, T]`` tensors, time-last in memory or, with ``time_major``,
time-first (the layout of time-major user buffers).
"""

import functools
from collections.abc import Callable

import torch

from rl_triton import _dispatch, reference
from rl_triton._checks import without_negative_views
from rl_triton._dispatch import use_triton


def _empty(like: torch.Tensor, dtype: torch.dtype, time_major: bool) -> torch.Tensor:
    """A ``[rows, T]`` output of ``like``'s first two sizes: one allocation, no view op."""
    shape = like.shape
    num_rows, seq_len = shape[0], shape[1]
    if time_major:
        # time-first in memory: the transpose of a [T, rows] buffer
        return torch.empty_strided((num_rows, seq_len), (1, num_rows), dtype=dtype, device=like.device)
    return torch.empty(num_rows, seq_len, dtype=dtype, device=like.device)


_launch_module = None


def _kernels():
    """``rl_triton._launch``, imported on first use (it imports Triton) and kept: an import
    statement on every call costs about a microsecond."""
    global _launch_module
    if _launch_module is None:
        _launch_module = _dispatch.kernels_module()
    return _launch_module


def gae(
    rewards: torch.Tensor, values: torch.Tensor, terminateds: torch.Tensor, truncateds: torch.Tensor | None,
    gamma: float, lambda_: float, bootstrap_values: torch.Tensor | None, last_value: torch.Tensor | None,
    out_dtype: torch.dtype, time_major: bool,
) -> torch.Tensor:
    advantages = _empty(rewards, out_dtype, time_major)
    args = (rewards, values, terminateds, truncateds, gamma, lambda_, bootstrap_values, last_value)
    if use_triton(rewards.device):
        _kernels().gae(advantages, *without_negative_views(args))
    else:
        advantages.copy_(reference.compute_gae(*args))
    return advantages


def vtrace(
    log_pi_target: torch.Tensor, log_pi_behavior: torch.Tensor, values: torch.Tensor, rewards: torch.Tensor,
    terminateds: torch.Tensor, truncateds: torch.Tensor | None, gamma: float, rho_bar: float, c_bar: float,
    bootstrap_values: torch.Tensor | None, last_value: torch.Tensor | None, out_dtype: torch.dtype, time_major: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    targets, advantages = _empty(rewards, out_dtype, time_major), _empty(rewards, out_dtype, time_major)
    args = (log_pi_target, log_pi_behavior, values, rewards, terminateds, truncateds, gamma, rho_bar, c_bar,
            bootstrap_values, last_value)
    if use_triton(rewards.device):
        _kernels().vtrace(targets, advantages, *without_negative_views(args))
    else:
        for out, result in zip((targets, advantages), reference.compute_vtrace(*args)):
            out.copy_(result)
    return targets, advantages


def retrace(
    action_probs_target: torch.Tensor, action_probs_behavior: torch.Tensor, q_values: torch.Tensor,
    next_q_values_all: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, terminateds: torch.Tensor,
    truncateds: torch.Tensor, gamma: float, lambda_: float, c_bar: float, rho_bar: float,
    out_dtype: torch.dtype, time_major: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    targets, advantages = _empty(rewards, out_dtype, time_major), _empty(rewards, out_dtype, time_major)
    args = (action_probs_target, action_probs_behavior, q_values, next_q_values_all, actions, rewards,
            terminateds, truncateds, gamma, lambda_, c_bar, rho_bar)
    if use_triton(rewards.device):
        _kernels().retrace(targets, advantages, *without_negative_views(args))
    else:
        for out, result in zip((targets, advantages), reference.compute_retrace(*args)):
            out.copy_(result)
    return targets, advantages


def returns(
    rewards: torch.Tensor, next_values: torch.Tensor | None, terminateds: torch.Tensor,
    truncateds: torch.Tensor | None, gamma: float, lambda_: float, bootstrap_values: torch.Tensor | None,
    out_dtype: torch.dtype, time_major: bool,
) -> torch.Tensor:
    """Lambda-returns; discounted returns when ``next_values`` is None (then ``lambda_`` is 1)."""
    out = _empty(rewards, out_dtype, time_major)
    if use_triton(rewards.device):
        _kernels().returns(out, *without_negative_views((rewards, next_values, terminateds, truncateds, gamma, lambda_,
                                                          bootstrap_values)))
    elif next_values is None:
        out.copy_(reference.compute_discounted_returns(rewards, terminateds, truncateds, gamma, bootstrap_values))
    else:
        out.copy_(reference.compute_lambda_returns(rewards, next_values, terminateds, truncateds, gamma, lambda_,
                                                   bootstrap_values))
    return out


def episodic_scan(
    inputs: torch.Tensor, dones: torch.Tensor, seed_values: torch.Tensor | None, decay: float,
    reset_after_flag: bool, out_dtype: torch.dtype, time_major: bool,
) -> torch.Tensor:
    """Prefix sums (decay 1) and eligibility traces (decay gamma*lambda, reset after the flag)."""
    out = _empty(inputs, out_dtype, time_major)
    if use_triton(inputs.device):
        _kernels().episodic_scan(out, *without_negative_views((inputs, dones, seed_values, decay, reset_after_flag)))
    elif reset_after_flag:
        out.copy_(reference.compute_eligibility_traces(inputs, dones, decay, 1.0, seed_values))
    else:
        out.copy_(reference.compute_episodic_prefix_sum(inputs, dones, seed_values, "starts_at"))
    return out


def linear_recurrence(a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor | None, backward: bool) -> torch.Tensor:
    from rl_triton._autograd import solve

    return solve(a, b, carry, backward)


def _register(name: str, fn: Callable, num_outputs: int) -> Callable:
    op = torch.library.custom_op(f"rl_triton::{name}", mutates_args=())(fn)

    @functools.wraps(fn)
    def fake(*args: object) -> torch.Tensor | tuple[torch.Tensor, ...]:
        like = next(a for a in args if isinstance(a, torch.Tensor))
        out_dtype, time_major = args[-2], args[-1]
        if name == "retrace":
            like = args[5]
        outs = tuple(_empty(like, out_dtype, time_major) for _ in range(num_outputs))
        return outs if num_outputs > 1 else outs[0]

    op.register_fake(fake)
    return op


gae_op = _register("gae", gae, 1)
vtrace_op = _register("vtrace", vtrace, 2)
retrace_op = _register("retrace", retrace, 2)
returns_op = _register("returns", returns, 1)
episodic_scan_op = _register("episodic_scan", episodic_scan, 1)
linear_recurrence_op = torch.library.custom_op("rl_triton::linear_recurrence", mutates_args=())(linear_recurrence)


@linear_recurrence_op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor | None, backward: bool) -> torch.Tensor:
    return torch.empty_like(a)


def call(eager: Callable, op: Callable, *args: object):
    """``eager(*args)``, or the registered op while torch.compile traces."""
    return op(*args) if torch.compiler.is_compiling() else eager(*args)
