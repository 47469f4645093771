"""Inputs reach the kernels as views of the caller's storage: no copies for common layouts."""

from __future__ import annotations

import pytest
import torch

from rl_triton._layout import RowLayout


def _same_storage(view: torch.Tensor, base: torch.Tensor) -> bool:
    return view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()


@pytest.mark.parametrize(
    "make, time_dim",
    [
        pytest.param(lambda: torch.randn(6, 10), -1, id="batch-major"),
        pytest.param(lambda: torch.randn(10, 6), 0, id="time-major"),
        pytest.param(lambda: torch.randn(6, 10).t().contiguous().t(), -1, id="transposed-storage"),
        pytest.param(lambda: torch.randn(6, 20)[:, ::2], -1, id="every-other-step"),
        pytest.param(lambda: torch.randn(12, 10)[3:9], -1, id="row-slice"),
        pytest.param(lambda: torch.randn(2, 3, 10), -1, id="leading-batch-dims"),
        pytest.param(lambda: torch.randn(10, 2, 3), 0, id="time-major-batch-dims"),
        pytest.param(lambda: torch.randn(6, 1).expand(6, 10), -1, id="expanded-per-env"),
    ],
)
def test_rows_view_shares_storage(make, time_dim: int) -> None:
    x = make()
    layout = RowLayout(x.shape, time_dim, "x")
    rows = layout.rows(x)
    assert rows.shape == (layout.num_rows, layout.seq_len)
    assert _same_storage(rows, x)
    torch.testing.assert_close(rows, x.movedim(time_dim, -1).reshape(-1, x.shape[time_dim]))


def test_per_row_view_shares_storage() -> None:
    last_value = torch.randn(2, 3)
    layout = RowLayout(torch.Size((2, 3, 10)), -1, "rewards")
    assert _same_storage(layout.per_row(last_value), last_value)


@pytest.mark.parametrize(
    "shape, time_dim, time_major",
    [((6, 10), -1, False), ((10, 6), 0, True), ((10, 2, 3), 0, True), ((2, 10, 3), 1, False), ((1, 10, 3), 1, True)],
)
def test_outputs_follow_the_inputs_dimension_order(shape, time_dim, time_major) -> None:
    layout = RowLayout(torch.Size(shape), time_dim, "rewards")
    assert layout.time_major_output == time_major


@pytest.mark.parametrize(
    "shape, time_dim, num_rows, seq_len, time_major",
    [
        ((6, 10), -1, 6, 10, False),
        ((6, 10), 1, 6, 10, False),
        ((10, 6), 0, 6, 10, True),
        ((10, 6), -2, 6, 10, True),
        ((10, 1), 0, 1, 10, False),
        ((1, 10), -1, 1, 10, False),
        ((0, 10), -1, 0, 10, False),
        ((6, 0), -1, 6, 0, False),
    ],
)
def test_two_dimensional_layouts(shape, time_dim, num_rows, seq_len, time_major) -> None:
    """2-d inputs take a short path; it must describe them exactly as the general one would."""
    x = torch.randn(shape)
    layout = RowLayout(x.shape, time_dim, "rewards")
    assert (layout.num_rows, layout.seq_len, layout.time_major_output) == (num_rows, seq_len, time_major)
    assert layout.time_dim == time_dim % 2
    assert layout.batch_shape == torch.Size((num_rows,))
    assert layout.empty_problem == (num_rows == 0 or seq_len == 0)
    rows = layout.rows(x)
    assert rows.shape == (num_rows, seq_len)
    assert torch.equal(layout.from_rows(rows, x.dtype), x)


@pytest.mark.parametrize("time_dim", [True, 1.0, 2, -3])
def test_two_dimensional_layouts_reject_bad_time_dims(time_dim) -> None:
    with pytest.raises(AssertionError, match="time_dim"):
        RowLayout(torch.Size((6, 10)), time_dim, "rewards")
