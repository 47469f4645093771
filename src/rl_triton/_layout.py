"""Seeing ``[*batch, T]`` (or ``[T, *batch]``) tensors as ``[rows, T]`` views, without copies."""

from __future__ import annotations

import math

import torch

from rl_triton import _checks


class RowLayout:
    """The shape every per-step input of one call shares, and how it maps to rows x time.

    Moving the time dimension last is a view; merging the batch dimensions into one row
    dimension is a view for every dense layout and for most slices (otherwise
    ``reshape`` copies, which is correct but costs a pass over that input).
    """

    def __init__(self, shape: torch.Size, time_dim: object, primary_name: str) -> None:
        if len(shape) == 0:
            raise _checks.InputError(f"{primary_name}: expected at least one (time) dimension, got a 0-d tensor")
        self.shape = shape
        self.time_dim = _checks.time_dim(time_dim, len(shape))
        self.seq_len = shape[self.time_dim]
        self.batch_shape = shape[: self.time_dim] + shape[self.time_dim + 1 :]
        self.num_rows = math.prod(self.batch_shape)
        self.primary_name = primary_name
        # [num_envs, T] and [T, num_envs] need no dimension shuffling: the common cases stay cheap
        self._rows_are_input = len(shape) == 2 and self.time_dim == 1
        self._rows_are_transpose = len(shape) == 2 and self.time_dim == 0
        # outputs are dense in the inputs' dimension order when time comes first or last: time-major
        # ([T, *batch]) outputs are written time-first; with time between batch dimensions they are
        # written time-last and returned as a permuted view
        before, after = math.prod(shape[: self.time_dim]), math.prod(shape[self.time_dim + 1 :])
        self.time_major_output = before == 1 and after != 1

    @property
    def empty_problem(self) -> bool:
        return self.seq_len == 0 or self.num_rows == 0

    def empty(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """The (empty-problem) result of ``self.shape``."""
        return torch.empty(self.shape, dtype=dtype, device=device)

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """``[rows, T]`` view of a per-step tensor of ``self.shape``."""
        if self._rows_are_input:
            return x
        if self._rows_are_transpose:
            return x.t()
        return x.movedim(self.time_dim, -1).reshape(self.num_rows, self.seq_len)

    def rows_with_actions(self, x: torch.Tensor) -> torch.Tensor:
        """``[rows, T, A]`` view of a per-action tensor of shape ``self.shape + (A,)``."""
        return x.movedim(self.time_dim, -2).reshape(self.num_rows, self.seq_len, x.shape[-1])

    def per_row(self, x: torch.Tensor) -> torch.Tensor:
        """``[rows]`` view of a per-environment tensor of shape ``self.batch_shape``."""
        return x.reshape(self.num_rows)

    def check_per_row(self, name: str, x: object, like: torch.Tensor) -> torch.Tensor:
        """A floating per-environment tensor of shape ``batch_shape`` on ``like``'s device."""
        return _checks.matching(name, x, _checks.FLOAT_DTYPES, like, self.primary_name, shape=self.batch_shape)

    def from_rows(self, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """A ``[rows, T]`` result as a tensor of ``self.shape`` in ``dtype`` (differentiable; may be a view)."""
        if rows.dtype != dtype:
            rows = rows.to(dtype)
        if self._rows_are_input:
            return rows
        if self._rows_are_transpose:
            return rows.t()
        return rows.view(*self.batch_shape, self.seq_len).movedim(-1, self.time_dim)
