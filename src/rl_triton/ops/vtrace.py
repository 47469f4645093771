"""V-trace off-policy targets and advantages."""

from __future__ import annotations

import torch

from rl_triton import _checks, _library, reference
from rl_triton._autograd import needs_grad
from rl_triton._layout import RowLayout
from rl_triton.ops._common import optional_matching, per_row_or_none, rows_or_none


def compute_vtrace(
    log_pi_target: torch.Tensor,
    log_pi_behavior: torch.Tensor,
    values: torch.Tensor,
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None = None,
    gamma: float = 0.99,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    bootstrap_values: torch.Tensor | None = None,
    last_value: torch.Tensor | None = None,
    *,
    time_dim: int = -1,
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets and advantages (Espeholt et al. 2018, IMPALA, https://arxiv.org/abs/1802.01561).

    Backward recurrence, solved by a chunked associative scan::

        D[t]     = delta[t] + gamma * c[t] * (1 - done[t]) * D[t+1],    D[T] = 0
        delta[t] = rho[t] * (r[t] + gamma * v_next[t] * (1 - terminated[t]) - V(s_t))
        rho[t]   = min(rho_bar, pi/mu),   c[t] = min(c_bar, pi/mu),   pi/mu = exp(log_pi_target - log_pi_behavior)
        vs[t]    = V(s_t) + D[t]                                                  (critic targets)
        A[t]     = rho[t] * (r[t] + gamma * vs_next[t] * (1 - terminated[t]) - V(s_t))   (actor advantages)

    with ``v_next[t] = values[t+1] * (1 - truncated[t]) + bootstrap_values[t]`` and ``vs_next``
    likewise from ``vs`` (``values[T] := vs[T] := 0``). On-policy (equal log-probabilities) with
    rho_bar = c_bar = 1, vs are the lambda = 1 returns. Boundary rules: docs/conventions.md.

    Args:
        log_pi_target: log pi(a_t | s_t) under the target (learner) policy, ``[num_envs, seq_len]``.
        log_pi_behavior: log mu(a_t | s_t) under the behaviour (actor) policy, same shape.
        values: V(s_t), same shape.
        rewards: r[t], same shape.
        terminateds: 1 (any non-zero) where the episode terminated at step t.
        truncateds: 1 where the episode was cut by a time limit at step t. None: no truncations.
        gamma: discount factor in [0, 1].
        rho_bar: clip of the ratio in the TD errors and advantages (>= 0, may be inf).
        c_bar: clip of the ratio in the trace decay (>= 0, may be inf).
        bootstrap_values: V of the true next state at truncated steps and at t = T-1; zero elsewhere.
            Exclusive with ``last_value``.
        last_value: V(s_T) per environment, shape ``[num_envs]``.
        time_dim: the time dimension (default last); other dimensions are batch dimensions.
        out_dtype: dtype of the results (default: ``rewards.dtype``).

    Returns:
        ``(vtrace_targets, vtrace_advantages)``, each with the shape and dimension order of ``rewards``.
    """
    rewards = _checks.tensor("rewards", rewards, _checks.FLOAT_DTYPES)
    layout = RowLayout(rewards.shape, time_dim, "rewards")
    log_pi_target = _checks.matching("log_pi_target", log_pi_target, _checks.FLOAT_DTYPES, rewards, "rewards")
    log_pi_behavior = _checks.matching("log_pi_behavior", log_pi_behavior, _checks.FLOAT_DTYPES, rewards, "rewards")
    values = _checks.matching("values", values, _checks.FLOAT_DTYPES, rewards, "rewards")
    terminateds = _checks.matching("terminateds", terminateds, _checks.FLAG_DTYPES, rewards, "rewards")
    truncateds = optional_matching("truncateds", truncateds, _checks.FLAG_DTYPES, rewards, "rewards")
    gamma = _checks.scalar("gamma", gamma, 0.0, 1.0)
    rho_bar = _checks.scalar("rho_bar", rho_bar, 0.0, include_inf=True)
    c_bar = _checks.scalar("c_bar", c_bar, 0.0, include_inf=True)
    _checks.exclusive(
        "last_value", last_value, "bootstrap_values", bootstrap_values,
        "last_value [num_envs] fills only the last column of bootstrap_values [num_envs, seq_len]",
    )
    bootstrap_values = optional_matching("bootstrap_values", bootstrap_values, _checks.FLOAT_DTYPES, rewards, "rewards")
    if last_value is not None:
        last_value = layout.check_per_row("last_value", last_value, rewards)
    result_dtype = _checks.out_dtype(out_dtype, rewards.dtype)
    if _checks.correctness_checks_enabled():
        _checks.check_flags_exclusive(terminateds, truncateds)
        _checks.check_bootstrap_placement(bootstrap_values, truncateds, layout.time_dim)
        _checks.check_finite("log_pi_target", log_pi_target)
        _checks.check_finite("log_pi_behavior", log_pi_behavior)

    if layout.empty_problem:
        return layout.empty(result_dtype, rewards.device), layout.empty(result_dtype, rewards.device)
    args = (
        layout.rows(log_pi_target), layout.rows(log_pi_behavior), layout.rows(values), layout.rows(rewards),
        layout.rows(terminateds), rows_or_none(layout, truncateds), gamma, rho_bar, c_bar,
        rows_or_none(layout, bootstrap_values), per_row_or_none(layout, last_value),
    )
    if needs_grad(log_pi_target, log_pi_behavior, values, rewards, bootstrap_values, last_value):
        results = reference.compute_vtrace(*args)
    else:
        results = _library.call(_library.vtrace, _library.vtrace_op, *args, result_dtype, layout.time_major_output)
    return tuple(layout.from_rows(result, result_dtype) for result in results)
