"""Plumbing shared by the public functions: optional inputs, dispatch and empty problems."""

from __future__ import annotations

import torch

from rl_triton import _checks
from rl_triton._layout import RowLayout


def rows_or_none(layout: RowLayout, x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else layout.rows(x)


def per_row_or_none(layout: RowLayout, x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else layout.per_row(x)


def optional_matching(
    name: str, value: object, dtypes: tuple[torch.dtype, ...], like: torch.Tensor, like_name: str
) -> torch.Tensor | None:
    return None if value is None else _checks.matching(name, value, dtypes, like, like_name)
