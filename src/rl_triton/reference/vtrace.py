"""V-trace targets and advantages: plain PyTorch loop over time, vectorised over rows."""

from __future__ import annotations

import torch

from rl_triton.reference._loop import (
    backward_recurrence,
    clipped_ratios,
    compute_dtype,
    flag,
    next_state_values,
    row_zeros,
)


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace (vs[t], A[t]) for ``[num_envs, seq_len]`` inputs; see ``rl_triton.ops.vtrace``."""
    dtype = compute_dtype(log_pi_target, log_pi_behavior, values, rewards, bootstrap_values, last_value)
    rewards = rewards.to(dtype)
    values = values.to(dtype)
    terminated = flag(terminateds, rewards)
    truncated = flag(truncateds, rewards)
    done = torch.maximum(terminated, truncated)
    bootstrap = None if bootstrap_values is None else bootstrap_values.to(dtype)
    last = None if last_value is None else last_value.to(dtype)

    log_ratios = log_pi_target.to(dtype) - log_pi_behavior.to(dtype)

    def ratios(clipped: torch.Tensor | None) -> torch.Tensor:
        return torch.exp(log_ratios if clipped is None else log_ratios.masked_fill(clipped, 0.0))

    rho, c = clipped_ratios(ratios, (rho_bar, c_bar), log_pi_target, log_pi_behavior)

    next_values = next_state_values(values, truncated, bootstrap, last)
    deltas = rho * (rewards + gamma * next_values * (1.0 - terminated) - values)
    decays = gamma * c * (1.0 - done)
    targets = backward_recurrence(deltas, decays, row_zeros(rewards)) + values

    # the targets one step later, bootstrapped as the values are
    next_targets = next_state_values(targets, truncated, bootstrap, last)
    advantages = rho * (rewards + gamma * next_targets * (1.0 - terminated) - values)
    return targets, advantages
