"""Lambda-returns, discounted returns and eligibility traces."""

from __future__ import annotations

import torch

from rl_triton import _checks, _library, reference
from rl_triton._autograd import needs_grad
from rl_triton._layout import RowLayout
from rl_triton.ops._common import optional_matching, per_row_or_none, rows_or_none


def compute_lambda_returns(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None = None,
    gamma: float = 0.99,
    lambda_: float = 0.95,
    bootstrap_values: torch.Tensor | None = None,
    *,
    time_dim: int = -1,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """TD(lambda) targets, the lambda-returns (Sutton & Barto 2018, ch. 12).

    Backward recurrence, solved by a chunked associative scan::

        G[t] = r[t] + gamma * (1 - done[t]) * ((1 - lambda) * next_values[t] + lambda * G[t+1])
                    + gamma * truncated[t] * bootstrap_values[t]
        G[T] = bootstrap_values[:, T-1]   (0 without bootstrap_values)

    lambda = 0 gives one-step TD targets; lambda = 1 gives discounted returns bootstrapped from
    ``bootstrap_values[:, T-1]``. With ``next_values[t] = V(s_{t+1})`` (zeroed at truncated steps)
    and the same bootstrap values, ``G = compute_gae(...) + values``. Boundary rules:
    docs/conventions.md.

    Args:
        rewards: r[t], ``[num_envs, seq_len]``.
        next_values: V(s_{t+1}), same shape; zero it at truncated steps (their continuation value
            comes from ``bootstrap_values``), and put V(s_T) in the last column.
        terminateds: 1 (any non-zero) where the episode terminated at step t.
        truncateds: 1 where a time limit cut the episode at step t. None: no truncations (then
            only the last column of ``bootstrap_values`` is used).
        gamma: discount factor in [0, 1].
        lambda_: trace parameter in [0, 1].
        bootstrap_values: V of the true next state at truncated steps and at t = T-1 when the
            window ends mid-episode; zero elsewhere.
        time_dim: the time dimension (default last); other dimensions are batch dimensions.
        out_dtype: dtype of the result (default: ``rewards.dtype``).

    Returns:
        G[t], the shape and dimension order of ``rewards``.
    """
    rewards = _checks.tensor("rewards", rewards, _checks.FLOAT_DTYPES)
    layout = RowLayout(rewards.shape, time_dim, "rewards")
    next_values = _checks.matching("next_values", next_values, _checks.FLOAT_DTYPES, rewards, "rewards")
    return _returns(layout, rewards, next_values, terminateds, truncateds, gamma, lambda_, bootstrap_values, out_dtype)


def compute_discounted_returns(
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None = None,
    gamma: float = 0.99,
    bootstrap_values: torch.Tensor | None = None,
    *,
    time_dim: int = -1,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Discounted returns (reward-to-go), reset at episode ends.

    Backward recurrence, solved by a chunked associative scan::

        G[t] = r[t] + gamma * (1 - done[t]) * G[t+1] + gamma * truncated[t] * bootstrap_values[t]
        G[T] = bootstrap_values[:, T-1]   (0 without bootstrap_values)

    Args:
        rewards: r[t], ``[num_envs, seq_len]``.
        terminateds: 1 (any non-zero) where the episode terminated at step t (G[t+1] is not used).
        truncateds: 1 where a time limit cut the episode at step t (``bootstrap_values[t]`` is used
            instead of G[t+1]). None: no truncations.
        gamma: discount factor in [0, 1].
        bootstrap_values: V of the true next state at truncated steps and at t = T-1 when the
            window ends mid-episode; zero elsewhere.
        time_dim: the time dimension (default last); other dimensions are batch dimensions.
        out_dtype: dtype of the result (default: ``rewards.dtype``).

    Returns:
        G[t], the shape and dimension order of ``rewards``.
    """
    rewards = _checks.tensor("rewards", rewards, _checks.FLOAT_DTYPES)
    layout = RowLayout(rewards.shape, time_dim, "rewards")
    return _returns(layout, rewards, None, terminateds, truncateds, gamma, None, bootstrap_values, out_dtype)


def _returns(
    layout: RowLayout,
    rewards: torch.Tensor,
    next_values: torch.Tensor | None,
    terminateds: object,
    truncateds: object,
    gamma: object,
    lambda_: object,
    bootstrap_values: object,
    out_dtype: object,
) -> torch.Tensor:
    """Lambda-returns; discounted returns when ``next_values`` and ``lambda_`` are None."""
    terminateds = _checks.matching("terminateds", terminateds, _checks.FLAG_DTYPES, rewards, "rewards")
    truncateds = optional_matching("truncateds", truncateds, _checks.FLAG_DTYPES, rewards, "rewards")
    gamma = _checks.scalar("gamma", gamma, 0.0, 1.0)
    discounted = lambda_ is None
    lambda_ = 1.0 if discounted else _checks.scalar("lambda_", lambda_, 0.0, 1.0)
    bootstrap_values = optional_matching("bootstrap_values", bootstrap_values, _checks.FLOAT_DTYPES, rewards, "rewards")
    result_dtype = _checks.out_dtype(out_dtype, rewards.dtype)
    if _checks.correctness_checks_enabled():
        _checks.check_flags_exclusive(terminateds, truncateds)
        _checks.check_bootstrap_placement(bootstrap_values, truncateds, layout.time_dim)

    if layout.empty_problem:
        return layout.empty(result_dtype, rewards.device)
    rows = (layout.rows(rewards), rows_or_none(layout, next_values), layout.rows(terminateds))
    truncated_rows, bootstrap_rows = rows_or_none(layout, truncateds), rows_or_none(layout, bootstrap_values)
    if needs_grad(rewards, next_values, bootstrap_values):
        if discounted:
            result = reference.compute_discounted_returns(rows[0], rows[2], truncated_rows, gamma, bootstrap_rows)
        else:
            result = reference.compute_lambda_returns(*rows, truncated_rows, gamma, lambda_, bootstrap_rows)
    else:
        result = _library.call(
            _library.returns, _library.returns_op, *rows, truncated_rows, gamma, lambda_, bootstrap_rows,
            result_dtype, layout.time_major_output,
        )
    return layout.from_rows(result, result_dtype)


def compute_eligibility_traces(
    gradients: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    lambda_: float,
    seed_values: torch.Tensor | None = None,
    *,
    time_dim: int = -1,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Accumulating eligibility traces (Sutton & Barto 2018, ch. 12.2), a forward scan.

    ::

        z[t] = g[t] + gamma * lambda * (1 - done[t-1]) * z[t-1],    z[-1] = seed,  done[-1] := 0

    ``done[t] = 1`` means the episode ends at t (the same convention as every other function
    here; do not shift it): the trace is cut when step t starts a new episode.

    Args:
        gradients: g[t], the value gradient or feature of s_t (one scalar per step),
            ``[num_envs, seq_len]``.
        dones: 1 (any non-zero) where the episode ended at step t.
        gamma: discount factor in [0, 1].
        lambda_: trace decay in [0, 1].
        seed_values: z[-1] per environment, shape ``[num_envs]`` (default 0).
        time_dim: the time dimension (default last); other dimensions are batch dimensions.
        out_dtype: dtype of the result (default: ``gradients.dtype``).

    Returns:
        z[t], the shape and dimension order of ``gradients``.
    """
    gradients = _checks.tensor("gradients", gradients, _checks.FLOAT_DTYPES)
    layout = RowLayout(gradients.shape, time_dim, "gradients")
    gamma = _checks.scalar("gamma", gamma, 0.0, 1.0)
    lambda_ = _checks.scalar("lambda_", lambda_, 0.0, 1.0)
    return episodic_scan(layout, "gradients", gradients, dones, seed_values, gamma * lambda_, True, out_dtype)


def episodic_scan(
    layout: RowLayout,
    inputs_name: str,
    inputs: torch.Tensor,
    dones: object,
    seed_values: object,
    decay: float,
    reset_after_flag: bool,
    out_dtype: object,
) -> torch.Tensor:
    """x[t] = inputs[t] + decay * (1 - flag) * x[t-1] with flag done[t-1] (reset after) or done[t]."""
    dones = _checks.matching("dones", dones, _checks.FLAG_DTYPES, inputs, inputs_name)
    if seed_values is not None:
        seed_values = layout.check_per_row("seed_values", seed_values, inputs)
    result_dtype = _checks.out_dtype(out_dtype, inputs.dtype)

    if layout.empty_problem:
        return layout.empty(result_dtype, inputs.device)
    input_rows, done_rows, seed_rows = layout.rows(inputs), layout.rows(dones), per_row_or_none(layout, seed_values)
    if needs_grad(inputs, seed_values):
        # resetting after the flag with any decay is the eligibility-trace recurrence ("ends_at" is decay 1)
        if reset_after_flag:
            result = reference.compute_eligibility_traces(input_rows, done_rows, decay, 1.0, seed_rows)
        else:
            result = reference.compute_episodic_prefix_sum(input_rows, done_rows, seed_rows, "starts_at")
    else:
        result = _library.call(
            _library.episodic_scan, _library.episodic_scan_op, input_rows, done_rows, seed_rows, decay,
            reset_after_flag, result_dtype, layout.time_major_output,
        )
    return layout.from_rows(result, result_dtype)
