"""V-trace off-policy targets and advantages."""

from __future__ import annotations

import torch

from rl_triton import _checks, _library, reference
from rl_triton._checks import FLAG_DTYPES, FLOAT_DTYPES
from rl_triton._layout import RowLayout
from rl_triton._replay import replayable
from rl_triton.ops._common import needs_grad


@replayable
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
        log_pi_target: log pi(a_t | s_t) under the target (learner) policy, ``[num_envs, seq_len]``;
            -inf (probability 0) gives rho = c = 0 at that step.
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
        last_value: V(s_T) per environment, of the batch shape (``[num_envs]`` for 2-d rewards).
            With ``truncateds``, interior truncated steps then bootstrap from 0.
        time_dim: the time dimension (default last); other dimensions are batch dimensions.
        out_dtype: dtype of the results (default: ``rewards.dtype``).

    Returns:
        ``(vtrace_targets, vtrace_advantages)``, each with the shape and dimension order of ``rewards``.
    """
    compiling = torch.compiler.is_compiling()
    rewards = _checks.tensor("rewards", rewards, FLOAT_DTYPES)
    shape, device = rewards.shape, rewards.device
    layout = RowLayout(shape, time_dim, "rewards")
    log_pi_target = _checks.matching("log_pi_target", log_pi_target, FLOAT_DTYPES, shape, device, "rewards")
    log_pi_behavior = _checks.matching("log_pi_behavior", log_pi_behavior, FLOAT_DTYPES, shape, device, "rewards")
    values = _checks.matching("values", values, FLOAT_DTYPES, shape, device, "rewards")
    terminateds = _checks.matching("terminateds", terminateds, FLAG_DTYPES, shape, device, "rewards")
    truncateds = _checks.optional_matching("truncateds", truncateds, FLAG_DTYPES, shape, device, "rewards")
    gamma = _checks.scalar("gamma", gamma, 0.0, 1.0, compiling=compiling)
    rho_bar = _checks.scalar("rho_bar", rho_bar, 0.0, include_inf=True, compiling=compiling)
    c_bar = _checks.scalar("c_bar", c_bar, 0.0, include_inf=True, compiling=compiling)
    if last_value is not None and bootstrap_values is not None:
        _checks.exclusive(
            "last_value", last_value, "bootstrap_values", bootstrap_values,
            "last_value [num_envs] fills only the last column of bootstrap_values [num_envs, seq_len]",
        )
    bootstrap_values = _checks.optional_matching(
        "bootstrap_values", bootstrap_values, FLOAT_DTYPES, shape, device, "rewards"
    )
    if last_value is not None:
        last_value = layout.check_per_row("last_value", last_value, device)
    result_dtype = _checks.out_dtype(out_dtype, rewards.dtype)
    if _checks.correctness_checks_enabled(compiling):
        _checks.check_flags(terminateds, truncateds)
        _checks.check_bootstrap_placement(bootstrap_values, truncateds, layout.time_dim, added=True)
        _checks.check_log_probabilities("log_pi_target", log_pi_target, zero_allowed=True)
        _checks.check_log_probabilities("log_pi_behavior", log_pi_behavior, zero_allowed=False)

    if layout.empty_problem:
        empty = layout.empty(result_dtype, device, log_pi_target, log_pi_behavior, values, rewards,
                             bootstrap_values, last_value)
        return empty, empty.clone()
    args = (
        layout.rows(log_pi_target), layout.rows(log_pi_behavior), layout.rows(values), layout.rows(rewards),
        layout.rows(terminateds), layout.rows_or_none(truncateds), gamma, rho_bar, c_bar,
        layout.rows_or_none(bootstrap_values), layout.per_row_or_none(last_value),
    )
    if needs_grad(log_pi_target, log_pi_behavior, values, rewards, bootstrap_values, last_value):
        targets, advantages = reference.compute_vtrace(*args)
        return (layout.from_differentiable_rows(targets, result_dtype),
                layout.from_differentiable_rows(advantages, result_dtype))
    run = _library.vtrace_op if compiling else _library.vtrace
    targets, advantages = run(*args, result_dtype, layout.time_major_output)
    return layout.from_rows(targets, result_dtype), layout.from_rows(advantages, result_dtype)
