"""Retrace(lambda) off-policy Q-value targets and advantages."""

from __future__ import annotations

import torch

from rl_triton import _checks, _library, reference
from rl_triton._checks import FLAG_DTYPES, FLOAT_DTYPES, INDEX_DTYPES
from rl_triton._layout import RowLayout
from rl_triton._replay import replayable
from rl_triton.ops._common import needs_grad


@replayable
def compute_retrace(
    action_probs_target: torch.Tensor,
    action_probs_behavior: torch.Tensor,
    q_values: torch.Tensor,
    next_q_values_all: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor,
    gamma: float,
    lambda_: float = 1.0,
    c_bar: float = 1.0,
    rho_bar: float = 1.0,
    *,
    time_dim: int = -1,
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Retrace(lambda) Q targets and advantages (Munos et al. 2016, https://arxiv.org/abs/1606.02647).

    Discrete actions. Backward recurrence, solved by a chunked associative scan::

        D[t]     = delta[t] + gamma * c[t+1] * (1 - done[t]) * D[t+1],    D[T] = 0,  c[T] := 0
        delta[t] = r[t] + gamma * E[t] * (1 - terminated[t]) - Q(s_t, a_t)
        E[t]     = sum_a action_probs_target[t, a] * next_q_values_all[t, a]
        c[t]     = lambda * min(c_bar, pi(a_t|s_t) / mu(a_t|s_t)),   rho[t] = min(rho_bar, pi/mu)
        Q_ret[t] = Q(s_t, a_t) + D[t]                                           (targets)
        A[t]     = rho[t] * (r[t] + gamma * Q_ret[t+1] * (1 - terminated[t]) - Q(s_t, a_t)),  Q_ret[T] := 0

    ``pi(a_t|s_t)`` is ``action_probs_target[t, actions[t]]``. As specified, ``Q_ret[t+1]`` enters
    A[t] also at truncated steps, and A[T-1] = rho * (r - Q); see docs/conventions.md.
    An action index outside ``[0, num_actions)`` makes that step's ratio NaN (and raises under
    ``RL_TRITON_CORRECTNESS_WARNINGS=1``).

    Args:
        action_probs_target: pi(. | s) for every action, ``[num_envs, seq_len, num_actions]``.
        action_probs_behavior: mu(a_t | s_t) of the taken action, ``[num_envs, seq_len]``.
        q_values: Q(s_t, a_t) of the taken action, ``[num_envs, seq_len]``.
        next_q_values_all: Q(s_{t+1}, a) for every action, ``[num_envs, seq_len, num_actions]``.
        actions: index of the taken action a_t, ``[num_envs, seq_len]``, int64, int32, int16 or uint8.
        rewards: r[t], ``[num_envs, seq_len]``.
        terminateds: 1 (any non-zero) where the episode terminated at step t; zeroes the bootstrap.
        truncateds: 1 where a time limit cut the episode at step t; keeps the bootstrap, cuts the trace.
        gamma: discount factor in [0, 1].
        lambda_: trace parameter in [0, 1].
        c_bar: clip of the ratio in the traces (>= 0, may be inf).
        rho_bar: clip of the ratio in the advantages (>= 0, may be inf).
        time_dim: the time dimension of the ``[num_envs, seq_len]`` tensors (default last); the
            per-action tensors have their action dimension last.
        out_dtype: dtype of the results (default: ``rewards.dtype``).

    Returns:
        ``(retrace_targets, advantages)``, each with the shape and dimension order of ``rewards``.
    """
    compiling = torch.compiler.is_compiling()
    rewards = _checks.tensor("rewards", rewards, FLOAT_DTYPES)
    shape, device = rewards.shape, rewards.device
    layout = RowLayout(shape, time_dim, "rewards")
    action_probs_target = _checks.tensor("action_probs_target", action_probs_target, FLOAT_DTYPES)
    per_action_shape = action_probs_target.shape
    if len(per_action_shape) != len(shape) + 1 or per_action_shape[-1] == 0 or per_action_shape[:-1] != shape:
        # (also with time_dim=0: the action dimension is last, after rewards' own dimensions in their order)
        raise _checks.InputError(
            f"action_probs_target: expected shape {(*shape, 'num_actions')} with num_actions >= 1 "
            f"(the shape of rewards plus a last action dimension), got {tuple(per_action_shape)}"
        )
    action_probs_target = _checks.matching(
        "action_probs_target", action_probs_target, FLOAT_DTYPES, per_action_shape, device, "rewards"
    )
    next_q_values_all = _checks.matching(
        "next_q_values_all", next_q_values_all, FLOAT_DTYPES, per_action_shape, device,
        "rewards and action_probs_target",
    )
    action_probs_behavior = _checks.matching(
        "action_probs_behavior", action_probs_behavior, FLOAT_DTYPES, shape, device, "rewards"
    )
    q_values = _checks.matching("q_values", q_values, FLOAT_DTYPES, shape, device, "rewards")
    actions = _checks.matching("actions", actions, INDEX_DTYPES, shape, device, "rewards")
    terminateds = _checks.matching("terminateds", terminateds, FLAG_DTYPES, shape, device, "rewards")
    truncateds = _checks.matching("truncateds", truncateds, FLAG_DTYPES, shape, device, "rewards")
    gamma = _checks.scalar("gamma", gamma, 0.0, 1.0, compiling=compiling)
    lambda_ = _checks.scalar("lambda_", lambda_, 0.0, 1.0, compiling=compiling)
    c_bar = _checks.scalar("c_bar", c_bar, 0.0, include_inf=True, compiling=compiling)
    rho_bar = _checks.scalar("rho_bar", rho_bar, 0.0, include_inf=True, compiling=compiling)
    result_dtype = _checks.out_dtype(out_dtype, rewards.dtype)
    if _checks.correctness_checks_enabled(compiling):
        _checks.check_flags(terminateds, truncateds)
        _checks.check_action_indices(actions, per_action_shape[-1])
        _checks.check_positive("action_probs_behavior", action_probs_behavior)

    if layout.empty_problem:
        empty = layout.empty(result_dtype, device, action_probs_target, action_probs_behavior, q_values,
                             next_q_values_all, rewards)
        return empty, empty.clone()
    args = (
        layout.rows_with_actions(action_probs_target), layout.rows(action_probs_behavior), layout.rows(q_values),
        layout.rows_with_actions(next_q_values_all), layout.rows(actions), layout.rows(rewards),
        layout.rows(terminateds), layout.rows(truncateds), gamma, lambda_, c_bar, rho_bar,
    )
    if needs_grad(action_probs_target, action_probs_behavior, q_values, next_q_values_all, rewards):
        targets, advantages = reference.compute_retrace(*args)
        return (layout.from_differentiable_rows(targets, result_dtype),
                layout.from_differentiable_rows(advantages, result_dtype))
    run = _library.retrace_op if compiling else _library.retrace
    targets, advantages = run(*args, result_dtype, layout.time_major_output)
    return layout.from_rows(targets, result_dtype), layout.from_rows(advantages, result_dtype)
