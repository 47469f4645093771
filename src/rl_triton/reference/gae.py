"""Generalized Advantage Estimation: plain PyTorch loop over time, vectorised over rows."""

from __future__ import annotations

import torch

from rl_triton.reference._loop import backward_recurrence, compute_dtype, flag, next_state_values, row_zeros


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None = None,
    gamma: float = 0.99,
    lambda_: float = 0.95,
    bootstrap_values: torch.Tensor | None = None,
    last_value: torch.Tensor | None = None,
) -> torch.Tensor:
    """GAE advantages A[t] for ``[num_envs, seq_len]`` inputs; see ``rl_triton.ops.gae``."""
    dtype = compute_dtype(rewards, values, bootstrap_values, last_value)
    rewards = rewards.to(dtype)
    values = values.to(dtype)
    terminated = flag(terminateds, rewards)
    truncated = flag(truncateds, rewards)
    done = torch.maximum(terminated, truncated)
    bootstrap = None if bootstrap_values is None else bootstrap_values.to(dtype)
    last = None if last_value is None else last_value.to(dtype)

    next_values = next_state_values(values, truncated, bootstrap, last)
    deltas = rewards + gamma * (1.0 - terminated) * next_values - values
    decays = gamma * lambda_ * (1.0 - done)
    return backward_recurrence(deltas, decays, row_zeros(rewards))
