"""Time-major tiles read in strided groups: each thread holds VEC steps of one row, every step loaded
across the tile's rows (``kernels/scan.py: strided_offsets``), scanned in registers as batch-major
groups are. Every kernel that reads them (GAE, V-trace, lambda- and discounted returns, eligibility
traces, prefix sums) is checked against the float64 oracle on [T, N] buffers, in each kind of plan:
rows walked chunk by chunk (tiles of 4 and of 16 rows), a time split of one chunk per program, and walked
segments (tiles of 4 and of 32 rows).
"""

import pytest
import torch

from conftest import HALF_TOLERANCE, TOLERANCE, assert_outputs_rel
from rl_triton import _dispatch, _launch
from test_walk import ORACLES, estimator_calls, run

NAMES = ["gae", "gae_last_value", "vtrace", "lambda", "discounted", "discounted_truncated", "traces", "prefix_sum",
         "prefix_sum_starts_at"]

PLANS = {
    # 3 row tiles of 4 rows, every row walked in chunks of 4 groups of 4 steps by one program
    "chunks": {"block_rows": 4, "block_time": 16, "split": False, "vec": 4},
    # the tiles of 2048-8191 rows: 16 rows, two groups of 8 steps across a warp's lanes, 4 warps (a
    # partial tile of 11 rows here)
    "narrow": {"block_rows": 16, "block_time": 64, "num_warps": 4, "split": False, "vec": 8},
    # one chunk of 2 groups of 8 steps per program, carries by look-back
    "split": {"block_rows": 4, "block_time": 16, "split": True, "walk_programs": 0, "vec": 8},
    # segments of several chunks of 4 groups of 2 steps
    "walk": {"block_rows": 4, "block_time": 8, "split": True, "walk_programs": 2, "vec": 2},
    # the walk of at least 32 rows: segments of chunks of 32 rows x 64 steps, 8 warps
    "walk32": {"block_rows": 32, "block_time": 64, "num_warps": 8, "split": True, "walk_programs": 2, "vec": 8},
    # row pairs (two neighbouring rows per thread), 32-row tiles walked chunk by chunk: the interpreter runs
    # their code (hints aside) as compiled walks of row pairs do (tests/test_cuda.py)
    "pairs": {"block_rows": 32, "block_time": 64, "num_warps": 4, "split": False, "vec": 8, "rows_per_thread": 2},
    # four neighbouring rows per thread, 64-row tiles walked chunk by chunk
    "fours": {"block_rows": 64, "block_time": 64, "num_warps": 4, "split": False, "vec": 8, "rows_per_thread": 4},
}
# rows x steps of each plan's rollout: 11 rows make partial row tiles of 4 and 16; the 32-row walk takes
# 34 rows (a second row tile of 2) and enough steps for segments of several chunks; row pairs take 48 rows
# (a multiple of 16, as they need, and a second row tile of 16), four rows per thread 80 (a second tile of 16)
ROLLOUTS = {"walk32": (34, 264), "pairs": (48, 200), "fours": (80, 136)}


pytestmark = pytest.mark.usefixtures("four_multiprocessors")


@pytest.mark.parametrize("plan", list(PLANS))
@pytest.mark.parametrize("name", NAMES)
def test_time_major_strided_groups(name, plan, make_rollout):
    ro = make_rollout(*ROLLOUTS.get(plan, (11, 200)))
    out, expected = run(name, ro, tile=PLANS[plan], time_major=True)
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])


@pytest.mark.parametrize("plan", ["chunks", "pairs", "fours"])
@pytest.mark.parametrize("name", ["gae", "gae_last_value", "vtrace", "lambda", "traces"])
def test_bf16_values_with_uint8_flags(name, plan, make_rollout):
    # 2-byte values and 1-byte flags: runs of rows load as vectors of 4 or 8 bytes where compiled
    ro = make_rollout(*ROLLOUTS.get(plan, (11, 200))[:1], 96, dtype=torch.bfloat16, flag_dtype=torch.uint8)
    out, expected = run(name, ro, tile=PLANS[plan], time_major=True)
    assert_outputs_rel(out, expected, HALF_TOLERANCE)


@pytest.mark.parametrize("name", ["gae", "vtrace", "traces"])
def test_rows_of_no_whole_number_of_groups_read_step_by_step(name, make_rollout, monkeypatch):
    """A row length that is not a multiple of VEC falls back to one step per thread position."""
    metas = []
    launch = _launch._launch

    def record(kernel, grid, *args, **meta):
        metas.append(_launch._grouped_meta(args, meta))
        launch(kernel, grid, *args, **meta)

    monkeypatch.setattr(_launch, "_launch", record)
    ro = make_rollout(5, 201)
    out, expected = run(name, ro, tile=PLANS["chunks"], time_major=True)
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])
    assert metas and all(meta["VEC"] == 1 and not meta.get("STRIDED_GROUPS") for meta in metas)
    metas.clear()
    run(name, make_rollout(5, 200), tile=PLANS["chunks"], time_major=True)
    assert metas and all(meta["VEC"] == 4 and meta["STRIDED_GROUPS"] for meta in metas)


@pytest.mark.parametrize("name", ["gae_last_value", "vtrace", "prefix_sum"])
def test_strided_groups_of_sliced_time_major_buffers(name, make_rollout):
    """Rows that are not adjacent in memory (every other env of a [T, 2N] buffer) are read in place."""
    compute, build = estimator_calls(0.99, 0.95)[name]
    ro = make_rollout(6, 64)

    def every_other_env(x):
        if not torch.is_tensor(x) or x.dim() != 2:
            return x
        wide = torch.full((x.shape[1], 2 * x.shape[0]), float("nan") if x.is_floating_point() else 1, dtype=x.dtype,
                          device=x.device)
        wide[:, ::2] = x.t()
        return wide[:, ::2]

    kwargs = {key: every_other_env(value) for key, value in build(ro).items()}
    with _dispatch.use_backend("triton"), _launch.tile_override(**PLANS["chunks"]):
        out = compute(**kwargs, time_dim=0)
    out = tuple(o.t() for o in out) if isinstance(out, tuple) else out.t()
    assert_outputs_rel(out, ORACLES[compute](**build(ro.oracle_inputs())), TOLERANCE[torch.float32])


def _launched_strided_groups(monkeypatch) -> list:
    """The STRIDED_GROUPS of every launch from now on, as ``_grouped_meta`` settles it."""
    settled = []
    launch = _launch._launch

    def record(kernel, grid, *args, **meta):
        settled.append(_launch._grouped_meta(args, meta).get("STRIDED_GROUPS"))
        launch(kernel, grid, *args, **meta)

    monkeypatch.setattr(_launch, "_launch", record)
    return settled


@pytest.mark.parametrize("name", ["vtrace", "prefix_sum"])
def test_row_pairs_only_where_every_pair_of_rows_is_contiguous(name, make_rollout, monkeypatch):
    """Row pairs are asked for on [T, N] buffers of N a multiple of 16; N = 40 (an even time stride, but a
    row count not a multiple of 16) and the first 48 envs of a [T, 49] buffer (an odd time stride) get one
    row per thread, with the same results."""
    settled = _launched_strided_groups(monkeypatch)
    compute, build = estimator_calls(0.99, 0.95)[name]
    ro = make_rollout(48, 64)
    out, expected = run(name, ro, tile=PLANS["pairs"], time_major=True)
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])
    assert settled and set(settled) == {2}

    settled.clear()
    ro = make_rollout(40, 64)
    out, expected = run(name, ro, tile=PLANS["pairs"], time_major=True)
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])
    assert settled and set(settled) == {True}

    settled.clear()
    ro = make_rollout(48, 64)

    def first_envs_of_a_wider_buffer(x):
        if not torch.is_tensor(x) or x.dim() != 2:
            return x
        wide = torch.zeros((x.shape[1], x.shape[0] + 1), dtype=x.dtype, device=x.device)
        wide[:, :-1] = x.t()
        return wide[:, :-1]

    kwargs = {key: first_envs_of_a_wider_buffer(value) for key, value in build(ro).items()}
    assert all(value.stride() == (49, 1) for value in kwargs.values() if torch.is_tensor(value) and value.dim() == 2)
    with _dispatch.use_backend("triton"), _launch.tile_override(**PLANS["pairs"]):
        out = compute(**kwargs, time_dim=0)
    out = tuple(o.t() for o in out) if isinstance(out, tuple) else out.t()
    assert_outputs_rel(out, ORACLES[compute](**build(ro.oracle_inputs())), TOLERANCE[torch.float32])
    assert settled and set(settled) == {True}


def test_row_pairs_need_rows_one_element_apart_and_an_even_time_stride():
    def pairs(matrix):
        return _launch._rows_in_runs(matrix, 2)

    buffer = torch.zeros(64, 32)  # [T, N]
    assert pairs(buffer.t())  # rows one element apart, time stride 32
    assert not pairs(buffer[:, ::2].t())  # rows two apart
    assert not pairs(torch.zeros(64, 33)[:, :32].t())  # an odd time stride
    assert not pairs(torch.zeros(64, 24).t())  # 24 rows: not a multiple of 16
    assert pairs(torch.zeros(1, 32).t())  # one step: no time stride to check
    assert not pairs(torch.zeros(32, 64))  # batch-major: rows 64 apart
    assert pairs(torch.zeros(32).expand(8, 32).t())  # time stride 0: every step of a row in one place


def test_runs_of_four_rows_need_a_time_stride_of_a_multiple_of_four():
    buffer = torch.zeros(64, 48)  # [T, N]
    assert _launch._rows_in_runs(buffer.t(), 4)
    assert not _launch._rows_in_runs(torch.zeros(64, 50)[:, :48].t(), 4)  # time stride 50: pairs only
    assert _launch._rows_in_runs(torch.zeros(64, 50)[:, :48].t(), 2)
    assert not _launch._rows_in_runs(buffer[:, ::2].t(), 4)


@pytest.mark.parametrize("name", ["gae", "traces"])
def test_runs_of_four_rows_fall_back_to_pairs_then_one_row(name, make_rollout, monkeypatch):
    """Four rows per thread where every tensor allows it; a time stride of 2 mod 4 takes row pairs, an
    odd one a row per thread, with the same results."""
    settled = _launched_strided_groups(monkeypatch)
    compute, build = estimator_calls(0.99, 0.95)[name]
    ro = make_rollout(64, 64)
    expected = ORACLES[compute](**build(ro.oracle_inputs()))
    for padding, want in ((0, 4), (2, 2), (1, True)):
        settled.clear()

        def first_envs_of_a_wider_buffer(x, padding=padding):
            if not torch.is_tensor(x) or x.dim() != 2:
                return x
            wide = torch.zeros((x.shape[1], x.shape[0] + padding), dtype=x.dtype, device=x.device)
            wide[:, :x.shape[0]] = x.t()
            return wide[:, :x.shape[0]]

        kwargs = {key: first_envs_of_a_wider_buffer(value) for key, value in build(ro).items()}
        with _dispatch.use_backend("triton"), _launch.tile_override(**PLANS["fours"]):
            out = compute(**kwargs, time_dim=0)
        out = tuple(o.t() for o in out) if isinstance(out, tuple) else out.t()
        assert_outputs_rel(out, expected, TOLERANCE[torch.float32])
        assert settled and set(settled) == {want}, padding
