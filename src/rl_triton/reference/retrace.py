"""Retrace(lambda) targets and advantages: plain PyTorch loop over time, vectorised over rows."""

from __future__ import annotations

import torch

from rl_triton.reference._loop import backward_recurrence, clipped_ratios, compute_dtype, flag, row_zeros, shift_next


def taken_action_probs(action_probs_target: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """pi(a_t | s_t) gathered at ``actions``; NaN where the index is outside ``[0, num_actions)``."""
    num_actions = action_probs_target.shape[-1]
    actions = actions.long()
    in_range = (actions >= 0) & (actions < num_actions)
    safe = torch.where(in_range, actions, torch.zeros_like(actions))
    taken = action_probs_target.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return torch.where(in_range, taken, torch.full_like(taken, float("nan")))


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Retrace (Q_ret[t], A[t]) for ``[num_envs, seq_len(, num_actions)]`` inputs; see ``rl_triton.ops.retrace``."""
    dtype = compute_dtype(action_probs_target, action_probs_behavior, q_values, next_q_values_all, rewards)
    probs_target = action_probs_target.to(dtype)
    q_values = q_values.to(dtype)
    rewards = rewards.to(dtype)
    terminated = flag(terminateds, rewards)
    truncated = flag(truncateds, rewards)
    done = torch.maximum(terminated, truncated)

    expected_next_q = (probs_target * next_q_values_all.to(dtype)).sum(dim=-1)
    deltas = rewards + gamma * expected_next_q * (1.0 - terminated) - q_values

    taken_probs = taken_action_probs(probs_target, actions)
    behavior_probs = action_probs_behavior.to(dtype)

    def ratios(clipped: torch.Tensor | None) -> torch.Tensor:
        return taken_probs / (behavior_probs if clipped is None else behavior_probs.masked_fill(clipped, 1.0))

    truncation_weights, rho = clipped_ratios(ratios, (c_bar, rho_bar), action_probs_target, action_probs_behavior)
    traces = lambda_ * truncation_weights
    decays = gamma * shift_next(traces) * (1.0 - done)
    targets = backward_recurrence(deltas, decays, row_zeros(rewards)) + q_values

    advantages = rho * (rewards + gamma * shift_next(targets) * (1.0 - terminated) - q_values)
    return targets, advantages
