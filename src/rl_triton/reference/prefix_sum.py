"""Episodic prefix sum: plain PyTorch loop over time, vectorised over rows."""

from __future__ import annotations

import torch

from rl_triton._checks import InputError
from rl_triton.reference._loop import compute_dtype, flag, forward_recurrence, row_zeros, shift_previous


def compute_episodic_prefix_sum(
    inputs: torch.Tensor,
    dones: torch.Tensor,
    seed_values: torch.Tensor | None = None,
    boundary: str = "ends_at",
) -> torch.Tensor:
    """C[t] = x[t] + keep[t] * C[t-1]; see ``rl_triton.ops.prefix_sum`` for ``boundary``."""
    dtype = compute_dtype(inputs, seed_values)
    inputs = inputs.to(dtype)
    flags = flag(dones, inputs)
    if boundary == "ends_at":
        keep = 1.0 - shift_previous(flags)
    elif boundary == "starts_at":
        keep = 1.0 - flags
    else:
        raise InputError(f"boundary: expected 'ends_at' or 'starts_at', got {boundary!r}")
    seed = row_zeros(inputs) if seed_values is None else seed_values.to(dtype)
    return forward_recurrence(inputs, keep, seed)
