"""Episodic prefix sums: cumulative sums that reset at episode or segment boundaries."""

from __future__ import annotations

import torch

from rl_triton import _checks
from rl_triton._layout import RowLayout
from rl_triton._replay import replayable
from rl_triton.ops.returns import episodic_scan

_BOUNDARIES = ("ends_at", "starts_at")


@replayable
def compute_episodic_prefix_sum(
    inputs: torch.Tensor,
    dones: torch.Tensor,
    seed_values: torch.Tensor | None = None,
    boundary: str = "ends_at",
    *,
    time_dim: int = -1,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Cumulative sum over time that restarts at episode or segment boundaries (a forward scan).

    ``boundary="ends_at"`` (default, the convention of every other function here): ``done[t] = 1``
    means the segment ends at t, and the sum restarts at t+1::

        C[t] = x[t] + (1 - done[t-1]) * C[t-1],    C[-1] = seed,  done[-1] := 0

    ``boundary="starts_at"``: ``done[t] = 1`` marks the first step of a new segment (sequence
    packing: a document-start flag), and the sum restarts at t itself::

        C[t] = x[t] + (1 - done[t]) * C[t-1],      C[-1] = seed

    Args:
        inputs: x[t], ``[num_envs, seq_len]``.
        dones: boundary flags (any non-zero is set), same shape; never shift them yourself.
        seed_values: C[-1] per row, of the batch shape (``[num_envs]`` for 2-d inputs; default 0).
        boundary: "ends_at" or "starts_at", see above.
        time_dim: the time dimension (default last); other dimensions are batch dimensions.
        out_dtype: dtype of the result (default: ``inputs.dtype``).

    Returns:
        C[t], the shape and dimension order of ``inputs``.
    """
    compiling = torch.compiler.is_compiling()
    inputs = _checks.tensor("inputs", inputs, _checks.FLOAT_DTYPES)
    layout = RowLayout(inputs.shape, time_dim, "inputs")
    if boundary not in _BOUNDARIES:
        raise _checks.InputError(f"boundary: expected 'ends_at' or 'starts_at', got {boundary!r}")
    return episodic_scan(
        layout, "inputs", inputs, dones, seed_values, 1.0, boundary == "ends_at", out_dtype, compiling
    )
