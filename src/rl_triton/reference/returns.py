"""Lambda-returns, discounted returns and eligibility traces: plain PyTorch loops over time."""

from __future__ import annotations

import torch

from rl_triton.reference._loop import (
    backward_recurrence,
    compute_dtype,
    flag,
    forward_recurrence,
    row_zeros,
    shift_previous,
)


def _truncation_bootstrap(
    bootstrap: torch.Tensor | None, truncateds: torch.Tensor | None, truncated: torch.Tensor, gamma: float
) -> torch.Tensor | None:
    """gamma * truncated[t] * bootstrap_values[t], or None without truncation flags: the interior bootstrap values
    are then unused, so a NaN or inf there must not reach the result through 0 * NaN."""
    if bootstrap is None or truncateds is None:
        return None
    return gamma * truncated * bootstrap


def _return_carry(bootstrap: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """G[T]: the last bootstrap column, or zero (also for rows of no steps)."""
    if bootstrap is None or not bootstrap.shape[1]:
        return row_zeros(like)
    return bootstrap[:, -1]


def compute_lambda_returns(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None = None,
    gamma: float = 0.99,
    lambda_: float = 0.95,
    bootstrap_values: torch.Tensor | None = None,
) -> torch.Tensor:
    """TD(lambda) targets G[t]; see ``rl_triton.ops.returns``."""
    dtype = compute_dtype(rewards, next_values, bootstrap_values)
    rewards = rewards.to(dtype)
    next_values = next_values.to(dtype)
    terminated = flag(terminateds, rewards)
    truncated = flag(truncateds, rewards)
    not_done = 1.0 - torch.maximum(terminated, truncated)
    bootstrap = None if bootstrap_values is None else bootstrap_values.to(dtype)

    inputs = rewards + gamma * (1.0 - lambda_) * not_done * next_values
    truncation_bootstrap = _truncation_bootstrap(bootstrap, truncateds, truncated, gamma)
    if truncation_bootstrap is not None:
        inputs = inputs + truncation_bootstrap
    decays = gamma * lambda_ * not_done
    return backward_recurrence(inputs, decays, _return_carry(bootstrap, rewards))


def compute_discounted_returns(
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None = None,
    gamma: float = 0.99,
    bootstrap_values: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reward-to-go G[t]; see ``rl_triton.ops.returns``."""
    dtype = compute_dtype(rewards, bootstrap_values)
    rewards = rewards.to(dtype)
    terminated = flag(terminateds, rewards)
    truncated = flag(truncateds, rewards)
    not_done = 1.0 - torch.maximum(terminated, truncated)
    bootstrap = None if bootstrap_values is None else bootstrap_values.to(dtype)

    truncation_bootstrap = _truncation_bootstrap(bootstrap, truncateds, truncated, gamma)
    inputs = rewards if truncation_bootstrap is None else rewards + truncation_bootstrap
    return backward_recurrence(inputs, gamma * not_done, _return_carry(bootstrap, rewards))


def compute_eligibility_traces(
    gradients: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    lambda_: float,
    seed_values: torch.Tensor | None = None,
) -> torch.Tensor:
    """Accumulating traces z[t] = g[t] + gamma*lambda*(1 - done[t-1]) * z[t-1]; see ``rl_triton.ops.returns``."""
    dtype = compute_dtype(gradients, seed_values)
    gradients = gradients.to(dtype)
    decays = gamma * lambda_ * (1.0 - shift_previous(flag(dones, gradients)))
    seed = row_zeros(gradients) if seed_values is None else seed_values.to(dtype)
    return forward_recurrence(gradients, decays, seed)
