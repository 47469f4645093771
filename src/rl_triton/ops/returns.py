"""Lambda-returns, discounted returns and eligibility traces."""

from __future__ import annotations

import torch

from rl_triton import _autograd, _checks, _library, reference
from rl_triton._checks import FLAG_DTYPES, FLOAT_DTYPES
from rl_triton._layout import RowLayout
from rl_triton._replay import replayable
from rl_triton.ops._common import needs_grad


@replayable
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
        next_values: V(s_{t+1}), same shape, with V(s_T) in the last column. Its entries at
            terminated or truncated steps are not used (a truncated step's continuation value
            comes from ``bootstrap_values``).
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
    compiling = torch.compiler.is_compiling()
    rewards = _checks.tensor("rewards", rewards, FLOAT_DTYPES)
    layout = RowLayout(rewards.shape, time_dim, "rewards")
    next_values = _checks.matching("next_values", next_values, FLOAT_DTYPES, rewards.shape, rewards.device, "rewards")
    return _returns(
        layout, rewards, next_values, terminateds, truncateds, gamma, lambda_, bootstrap_values, out_dtype, compiling
    )


@replayable
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
    compiling = torch.compiler.is_compiling()
    rewards = _checks.tensor("rewards", rewards, FLOAT_DTYPES)
    layout = RowLayout(rewards.shape, time_dim, "rewards")
    return _returns(
        layout, rewards, None, terminateds, truncateds, gamma, None, bootstrap_values, out_dtype, compiling
    )


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
    compiling: bool,
) -> torch.Tensor:
    """Lambda-returns; discounted returns when ``next_values`` and ``lambda_`` are None."""
    shape, device = rewards.shape, rewards.device
    terminateds = _checks.matching("terminateds", terminateds, FLAG_DTYPES, shape, device, "rewards")
    truncateds = _checks.optional_matching("truncateds", truncateds, FLAG_DTYPES, shape, device, "rewards")
    gamma = _checks.scalar("gamma", gamma, 0.0, 1.0, compiling=compiling)
    discounted = lambda_ is None
    lambda_ = 1.0 if discounted else _checks.scalar("lambda_", lambda_, 0.0, 1.0, compiling=compiling)
    bootstrap_values = _checks.optional_matching(
        "bootstrap_values", bootstrap_values, FLOAT_DTYPES, shape, device, "rewards"
    )
    result_dtype = _checks.out_dtype(out_dtype, rewards.dtype)
    if _checks.correctness_checks_enabled(compiling):
        _checks.check_flags(terminateds, truncateds)
        _checks.check_bootstrap_placement(bootstrap_values, truncateds, layout.time_dim, added=False)

    if layout.empty_problem:
        return layout.empty(result_dtype, device, rewards, next_values, bootstrap_values)
    rows = (layout.rows(rewards), layout.rows_or_none(next_values), layout.rows(terminateds))
    truncated_rows, bootstrap_rows = layout.rows_or_none(truncateds), layout.rows_or_none(bootstrap_values)
    if needs_grad(rewards, next_values, bootstrap_values):
        result = _autograd.returns(*rows, truncated_rows, gamma, lambda_, bootstrap_rows, result_dtype,
                                   layout.time_major_output)
        return layout.from_differentiable_rows(result, result_dtype)
    run = _library.returns_op if compiling else _library.returns
    result = run(*rows, truncated_rows, gamma, lambda_, bootstrap_rows, result_dtype, layout.time_major_output)
    return layout.from_rows(result, result_dtype)


@replayable
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
        seed_values: z[-1] per environment, of the batch shape (``[num_envs]`` for 2-d
            gradients; default 0).
        time_dim: the time dimension (default last); other dimensions are batch dimensions.
        out_dtype: dtype of the result (default: ``gradients.dtype``).

    Returns:
        z[t], the shape and dimension order of ``gradients``.
    """
    compiling = torch.compiler.is_compiling()
    gradients = _checks.tensor("gradients", gradients, FLOAT_DTYPES)
    layout = RowLayout(gradients.shape, time_dim, "gradients")
    gamma = _checks.scalar("gamma", gamma, 0.0, 1.0, compiling=compiling)
    lambda_ = _checks.scalar("lambda_", lambda_, 0.0, 1.0, compiling=compiling)
    return episodic_scan(
        layout, "gradients", gradients, dones, seed_values, gamma * lambda_, True, out_dtype, compiling
    )


def episodic_scan(
    layout: RowLayout,
    inputs_name: str,
    inputs: torch.Tensor,
    dones: object,
    seed_values: object,
    decay: float,
    reset_after_flag: bool,
    out_dtype: object,
    compiling: bool,
) -> torch.Tensor:
    """x[t] = inputs[t] + decay * (1 - flag) * x[t-1] with flag done[t-1] (reset after) or done[t]."""
    device = inputs.device
    dones = _checks.matching("dones", dones, FLAG_DTYPES, inputs.shape, device, inputs_name)
    if seed_values is not None:
        seed_values = layout.check_per_row("seed_values", seed_values, device)
    result_dtype = _checks.out_dtype(out_dtype, inputs.dtype)
    if _checks.correctness_checks_enabled(compiling):
        _checks.check_flags_zero_or_one("dones", dones)

    if layout.empty_problem:
        return layout.empty(result_dtype, device, inputs, seed_values)
    input_rows, done_rows, seed_rows = layout.rows(inputs), layout.rows(dones), layout.per_row_or_none(seed_values)
    if needs_grad(inputs, seed_values):
        # resetting after the flag with any decay is the eligibility-trace recurrence ("ends_at" is decay 1)
        if reset_after_flag:
            result = reference.compute_eligibility_traces(input_rows, done_rows, decay, 1.0, seed_rows)
        else:
            result = reference.compute_episodic_prefix_sum(input_rows, done_rows, seed_rows, "starts_at")
        return layout.from_differentiable_rows(result, result_dtype)
    run = _library.episodic_scan_op if compiling else _library.episodic_scan
    result = run(input_rows, done_rows, seed_rows, decay, reset_after_flag, result_dtype, layout.time_major_output)
    return layout.from_rows(result, result_dtype)
