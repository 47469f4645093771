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

    Built once per call: the 2-d cases ``[num_envs, T]`` and ``[T, num_envs]`` take a short
    path, and 2-d inputs are passed on as they are (or as one transpose), without torch ops.
    """

    __slots__ = (
        "_rows_are_input",
        "_rows_are_transpose",
        "batch_shape",
        "empty_problem",
        "num_rows",
        "primary_name",
        "seq_len",
        "shape",
        "time_dim",
        "time_major_output",
    )

    def __init__(self, shape: torch.Size, time_dim: object, primary_name: str) -> None:
        ndim = len(shape)
        if ndim == 0:
            raise _checks.InputError(f"{primary_name}: expected at least one (time) dimension, got a 0-d tensor")
        self.shape = shape
        self.primary_name = primary_name
        # an exact int test first: bool (an int subclass) and out-of-range values go to the full check
        if ndim == 2 and type(time_dim) is int and -2 <= time_dim < 2:
            time_last = time_dim % 2 == 1
            self.time_dim = 1 if time_last else 0
            self.batch_shape = shape[:1] if time_last else shape[1:]
            self.num_rows = self.batch_shape[0]
            self.seq_len = shape[self.time_dim]
            self._rows_are_input = time_last
            self._rows_are_transpose = not time_last
            # time-major outputs are written time-first; one environment is the same either way
            self.time_major_output = not time_last and self.num_rows != 1
        else:
            self.time_dim = _checks.time_dim(time_dim, ndim)
            self.seq_len = shape[self.time_dim]
            self.batch_shape = shape[: self.time_dim] + shape[self.time_dim + 1 :]
            self.num_rows = math.prod(self.batch_shape)
            # [num_envs, T] and [T, num_envs] need no dimension shuffling: the common cases stay cheap
            self._rows_are_input = ndim == 2 and self.time_dim == 1
            self._rows_are_transpose = ndim == 2 and self.time_dim == 0
            # outputs are dense in the inputs' dimension order when time comes first or last: time-major
            # ([T, *batch]) outputs are written time-first; with time between batch dimensions they are
            # written time-last and returned as a permuted view
            before, after = math.prod(shape[: self.time_dim]), math.prod(shape[self.time_dim + 1 :])
            self.time_major_output = before == 1 and after != 1
        self.empty_problem = self.seq_len == 0 or self.num_rows == 0

    def empty(self, dtype: torch.dtype, device: torch.device, *graph_inputs: torch.Tensor | None) -> torch.Tensor:
        """The (empty-problem) result of ``self.shape``, in the autograd graph of those ``graph_inputs`` that
        require gradients: backward then gives them zero gradients, as PyTorch's own operations do."""
        result = torch.empty(self.shape, dtype=dtype, device=device)
        for tensor in graph_inputs:
            if tensor is not None and tensor.requires_grad:
                result = result + tensor.sum().to(dtype)
        return result

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """``[rows, T]`` view of a per-step tensor of ``self.shape``."""
        if self._rows_are_input:
            return x
        if self._rows_are_transpose:
            return x.t()
        return x.movedim(self.time_dim, -1).reshape(self.num_rows, self.seq_len)

    def rows_or_none(self, x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else self.rows(x)

    def rows_with_actions(self, x: torch.Tensor) -> torch.Tensor:
        """``[rows, T, A]`` view of a per-action tensor of shape ``self.shape + (A,)``."""
        if self._rows_are_input:
            return x
        return x.movedim(self.time_dim, -2).reshape(self.num_rows, self.seq_len, x.shape[-1])

    def per_row(self, x: torch.Tensor) -> torch.Tensor:
        """``[rows]`` view of a per-environment tensor of shape ``self.batch_shape``."""
        # a 1-d tensor of the batch shape already is one value per row: no reshape (a torch op) needed
        return x if x.dim() == 1 else x.reshape(self.num_rows)

    def per_row_or_none(self, x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else self.per_row(x)

    def check_per_row(self, name: str, x: object, device: torch.device) -> torch.Tensor:
        """A floating per-environment tensor of shape ``batch_shape`` on ``device`` (the primary input's)."""
        return _checks.matching(name, x, _checks.FLOAT_DTYPES, self.batch_shape, device, self.primary_name,
                                per_row=True)

    def from_differentiable_rows(self, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``from_rows`` for a result of the differentiable composition (the reference's PyTorch ops), which
        lays out its results as they come: moved into the layout the kernels write (time-first in memory for
        time-major outputs, time-last otherwise), by a copy where it differs."""
        if self.time_major_output:
            return self.from_rows(_dense(rows.t(), dtype).t(), dtype)
        return self.from_rows(_dense(rows, dtype), dtype)

    def from_rows(self, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """A ``[rows, T]`` result as a tensor of ``self.shape`` in ``dtype`` (differentiable; may be a view)."""
        if rows.dtype != dtype:
            rows = rows.to(dtype)
        if self._rows_are_input:
            return rows
        if self._rows_are_transpose:
            return rows.t()
        return rows.view(*self.batch_shape, self.seq_len).movedim(-1, self.time_dim)


def _dense(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` in ``dtype``, dense in its dimension order: one copy at most (``Tensor.to`` with a memory
    format does not copy where the dtype is already ``dtype``)."""
    return x.to(dtype, memory_format=torch.contiguous_format) if x.dtype != dtype else x.contiguous()
