"""Grouped tiles (VEC steps per thread, read as one vector) only where every row allows them.

The kernels tell Triton that the row strides and the row length of a grouped tile are multiples of
VEC (``kernels/scan.py: whole_groups``), so the launcher must not group other rows, nor storage it
cannot align: such launches read step by step (``_launch._grouped_meta``).
"""

from __future__ import annotations

import pytest
import torch

from conftest import ACTION_FIELDS, FLAG_FIELDS, STEP_FIELDS, TOLERANCE, assert_rel, padded_rows, unaligned_storage
from rl_triton import _launch
from test_cuda import ESTIMATORS, oracle, run


def grouped(meta: dict, *tensors: torch.Tensor) -> int:
    return _launch._grouped_meta(tensors, meta).get("VEC", 1)


def test_rows_a_whole_number_of_groups_apart_are_grouped():
    meta = {"VEC": 4, "BLOCK_TIME": 512}
    rows = torch.zeros(3, 1000)
    # rows of 1000 steps: 250 groups of 4 apart, whatever Triton can learn from the stride alone
    assert grouped(meta, rows, torch.zeros(3), torch.zeros(3, 1000, 4)) == 4
    # one row: its stride is never used; one value per env repeated along rows (row stride 0)
    assert grouped(meta, torch.zeros(1, 1000).as_strided((1, 1000), (1001, 1))) == 4
    assert grouped(meta, torch.zeros(1, 1000).expand(3, 1000)) == 4
    # step by step: rows of 1001 steps (also in storage a whole number of groups wide, also one row),
    # rows a view of wider storage, storage off a 16-byte boundary, steps not contiguous (every
    # other step, stored time-major, one value per env along time)
    assert grouped(meta, rows, torch.zeros(3, 1001)) == 1
    assert grouped(meta, torch.zeros(3, 1004)[:, :1001]) == grouped(meta, torch.zeros(1, 1001)) == 1
    assert grouped(meta, torch.zeros(3, 1002)[:, :1000]) == 1
    assert grouped(meta, torch.zeros(3001)[1:].view(3, 1000)) == 1
    assert grouped(meta, torch.zeros(3, 2000)[:, ::2]) == 1
    assert grouped(meta, torch.zeros(1000, 3).t()) == 1
    assert grouped(meta, torch.zeros(3, 1).expand(3, 1000)) == 1
    # bf16 groups of 8 steps
    assert grouped({"VEC": 8}, torch.zeros(3, 1000, dtype=torch.bfloat16)) == 8
    assert grouped({"VEC": 8}, torch.zeros(3, 1004, dtype=torch.bfloat16)) == 1
    # launches that do not group are left alone
    assert _launch._grouped_meta((torch.zeros(3, 1001),), {"BLOCK_TIME": 16}) == {"BLOCK_TIME": 16}


@pytest.mark.parametrize("backend", ["triton"], indirect=True)
@pytest.mark.parametrize(
    "layout, grouped_rows",
    [
        pytest.param(lambda x: x, True, id="contiguous"),
        pytest.param(padded_rows, False, id="rows-1001-apart"),
        pytest.param(unaligned_storage, False, id="unaligned-storage"),
    ],
)
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_rows_of_1000_steps(backend, monkeypatch, estimator, layout, grouped_rows, make_rollout):
    ro = make_rollout(3, 1000)
    view = ro.map(layout, fields=(*STEP_FIELDS, *FLAG_FIELDS, *ACTION_FIELDS, "actions"))
    decisions = []
    decide = _launch._grouped_meta

    def record(args, meta):
        chosen = decide(args, meta)
        decisions.append((meta.get("VEC", 1), chosen.get("VEC", 1)))
        return chosen

    monkeypatch.setattr(_launch, "_grouped_meta", record)
    # a compiled kernel carries its decision: decide again for this call
    monkeypatch.setattr(_launch, "_compiled", {})
    got = run(estimator, view)
    planned = [vec for vec, _ in decisions if vec > 1]
    assert planned, "the plan groups steps at 3x1000"
    assert all(chosen == (vec if grouped_rows else 1) for vec, chosen in decisions)
    for out, want in zip(got, oracle(estimator, ro), strict=True):
        assert_rel(out, want, TOLERANCE[torch.float32])
