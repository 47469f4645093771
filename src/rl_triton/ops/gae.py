"""Generalized Advantage Estimation."""

from __future__ import annotations

import torch

from rl_triton import _autograd, _checks, _library
from rl_triton._checks import FLAG_DTYPES, FLOAT_DTYPES
from rl_triton._layout import RowLayout
from rl_triton._replay import replayable
from rl_triton.ops._common import needs_grad


@replayable
def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None = None,
    gamma: float = 0.99,
    lambda_: float = 0.95,
    bootstrap_values: torch.Tensor | None = None,
    last_value: torch.Tensor | None = None,
    *,
    time_dim: int = -1,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Generalized Advantage Estimation (Schulman et al. 2016, https://arxiv.org/abs/1506.02438).

    Backward recurrence, solved by a chunked associative scan::

        A[t]      = delta[t] + gamma * lambda * (1 - done[t]) * A[t+1],    A[T] = 0
        delta[t]  = r[t] + gamma * (1 - terminated[t]) * v_next[t] - V(s_t)
        v_next[t] = values[t+1] * (1 - truncated[t]) + bootstrap_values[t],   values[T] := 0
        done[t]   = terminated[t] or truncated[t]

    lambda = 0 gives one-step TD errors; lambda = 1 gives Monte Carlo returns minus V(s_t).
    ``last_value`` is shorthand for ``bootstrap_values`` that is zero except its last column.
    Boundary rules in full: docs/conventions.md.

    Args:
        rewards: r[t], reward of the transition from s_t, ``[num_envs, seq_len]``.
        values: V(s_t), same shape.
        terminateds: 1 (any non-zero) where the episode terminated at step t; bool, uint8, int8 or float.
        truncateds: 1 where the episode was cut by a time limit at step t. None: no truncations.
        gamma: discount factor in [0, 1].
        lambda_: GAE trace parameter in [0, 1].
        bootstrap_values: V(s_{t+1}) of the true next state at truncated steps and, if the window
            ends mid-episode, at t = T-1; zero elsewhere. Exclusive with ``last_value``.
        last_value: V(s_T) per environment, of the batch shape (``[num_envs]`` for 2-d rewards);
            only without ``truncateds``.
        time_dim: the time dimension (default last; 0 for time-major ``[seq_len, num_envs]``).
            Other dimensions are batch dimensions.
        out_dtype: dtype of the result (default: ``rewards.dtype``).

    Returns:
        advantages A[t], the shape and dimension order of ``rewards``.
    """
    compiling = torch.compiler.is_compiling()
    rewards = _checks.tensor("rewards", rewards, FLOAT_DTYPES)
    shape, device = rewards.shape, rewards.device
    layout = RowLayout(shape, time_dim, "rewards")
    values = _checks.matching("values", values, FLOAT_DTYPES, shape, device, "rewards")
    terminateds = _checks.matching("terminateds", terminateds, FLAG_DTYPES, shape, device, "rewards")
    truncateds = _checks.optional_matching("truncateds", truncateds, FLAG_DTYPES, shape, device, "rewards")
    gamma = _checks.scalar("gamma", gamma, 0.0, 1.0, compiling=compiling)
    lambda_ = _checks.scalar("lambda_", lambda_, 0.0, 1.0, compiling=compiling)
    if last_value is not None:
        if bootstrap_values is not None:
            _checks.exclusive(
                "last_value", last_value, "bootstrap_values", bootstrap_values,
                "last_value [num_envs] fills only the last column of bootstrap_values [num_envs, seq_len]",
            )
        if truncateds is not None:
            raise _checks.InputError(
                "last_value cannot be combined with truncateds: truncated steps need their own bootstrap "
                "values, so pass bootstrap_values (docs/conventions.md)"
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

    if layout.empty_problem:
        return layout.empty(result_dtype, device, rewards, values, bootstrap_values, last_value)
    args = (
        layout.rows(rewards), layout.rows(values), layout.rows(terminateds), layout.rows_or_none(truncateds),
        gamma, lambda_, layout.rows_or_none(bootstrap_values), layout.per_row_or_none(last_value),
    )
    if needs_grad(rewards, values, bootstrap_values, last_value):
        return layout.from_differentiable_rows(_autograd.gae(*args, result_dtype, layout.time_major_output),
                                               result_dtype)
    run = _library.gae_op if compiling else _library.gae
    return layout.from_rows(run(*args, result_dtype, layout.time_major_output), result_dtype)
