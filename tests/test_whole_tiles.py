"""Whole tiles: where a call's rows fill whole row tiles and its steps whole chunks, the kernels that
take WHOLE_TILES (GAE, V-trace, lambda- and discounted returns, eligibility traces, prefix sums) read,
scan and write every tile without in-range masks (``kernels/scan.py: tile_rows``).

Plans take whole tiles where they were measured faster (``TilePlan.whole_tiles``); tests force them.
Every such kernel is checked against the float64 oracle at shapes of whole tiles, in each way a
program walks: whole rows building maps and scanning directly (whose prefetch after a row's last
chunk reads that chunk again instead of nothing), a time split of one chunk a program, and walked
segments (prefetch, look-back and redo), batch-major and time-major, in float32 and in bf16 values
with uint8 flags. Steps shifted past a chunk's edge keep their mask: the value after a row's last
step (``last_value``) and the flag before its first (``"ends_at"`` resets) come from it.
"""

import pytest
import torch

from conftest import HALF_TOLERANCE, TOLERANCE, assert_outputs_rel, plan_for_gpu
from rl_triton import _launch
from test_direct import NAMES, TIME_MAJOR
from test_plans import recorded_meta
from test_walk import run

# rows x steps of whole tiles for every plan below: 8 rows of 4-row tiles, 128 steps of 16-step chunks
WHOLE = (8, 128)
PLANS = {
    "maps": {"block_rows": 4, "block_time": 16, "split": False, "vec": 4, "direct": False, "whole_tiles": True},
    "direct": {"block_rows": 4, "block_time": 16, "split": False, "vec": 4, "direct": True, "whole_tiles": True},
    "split": {"block_rows": 4, "block_time": 16, "split": True, "walk_programs": 0, "vec": 4, "whole_tiles": True},
    # segments of 4 chunks of 8 steps
    "walk": {"block_rows": 4, "block_time": 8, "split": True, "walk_programs": 2, "vec": 2, "whole_tiles": True},
}

pytestmark = pytest.mark.usefixtures("four_multiprocessors")


# every kernel in direct scans and walked segments; one of each kind (backward with the next step's value
# shifted in registers, backward with the next-step correction, forward) building maps and split in time
BATCH_MAJOR_CASES = [(name, plan) for plan in PLANS for name in NAMES
                     if plan in ("direct", "walk") or name in ("gae_last_value", "vtrace", "traces")]


@pytest.mark.parametrize("name, plan", BATCH_MAJOR_CASES)
def test_whole_tiles_batch_major(name, plan, make_rollout):
    ro = make_rollout(*WHOLE)
    out, expected = run(name, ro, tile=PLANS[plan])
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])


@pytest.mark.parametrize("plan", ["maps", "direct", "walk"])
@pytest.mark.parametrize("name", ["gae", "gae_last_value", "vtrace", "lambda", "traces"])
def test_whole_tiles_time_major(name, plan, make_rollout):
    ro = make_rollout(*WHOLE)
    out, expected = run(name, ro, tile=PLANS[plan], time_major=True)
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])


@pytest.mark.parametrize("name", ["gae", "gae_last_value", "vtrace", "discounted", "traces", "prefix_sum"])
def test_whole_tiles_bf16_values_with_uint8_flags_in_row_pairs(name, make_rollout):
    # the default tiles of bf16 [T, N] buffers: 32 rows of 64-step chunks, row pairs, direct scans
    ro = make_rollout(32, 128, dtype=torch.bfloat16, flag_dtype=torch.uint8)
    out, expected = run(name, ro, tile={**TIME_MAJOR["pairs"], "direct": True, "whole_tiles": True}, time_major=True)
    assert_outputs_rel(out, expected, HALF_TOLERANCE)


@pytest.mark.parametrize("name", ["gae_last_value", "traces"])
def test_tiles_told_to_mask_read_the_same(name, make_rollout):
    ro = make_rollout(*WHOLE)
    whole, expected = run(name, ro, tile=PLANS["direct"], time_major=True)
    masked, _ = run(name, ro, tile={**PLANS["direct"], "whole_tiles": False}, time_major=True)
    assert_outputs_rel(whole, expected, TOLERANCE[torch.float32])
    assert_outputs_rel(masked, expected, TOLERANCE[torch.float32])


@pytest.mark.parametrize("shape, whole", [((8, 128), True), ((8, 120), False), ((6, 128), False)])
def test_whole_tiles_exactly_where_rows_and_steps_divide(monkeypatch, shape, whole):
    x = torch.rand(shape)
    flags = torch.zeros(shape, dtype=torch.bool)
    with _launch.tile_override(**PLANS["direct"]):
        seen = recorded_meta(monkeypatch, _launch.gae, torch.empty(shape), x, x, flags, None, 0.99, 0.95, None,
                             x[:, 0])
        assert seen["WHOLE_TILES"] is whole
        seen = recorded_meta(monkeypatch, _launch.episodic_scan, torch.empty(shape), x, flags, None, 1.0, True)
        assert seen["WHOLE_TILES"] is whole
    with _launch.tile_override(**{**PLANS["direct"], "whole_tiles": False}):
        assert recorded_meta(monkeypatch, _launch.gae, torch.empty(shape), x, x, flags, None, 0.99, 0.95, None,
                             x[:, 0])["WHOLE_TILES"] is False


def gae_meta(monkeypatch, rows, steps, dtype, time_major):
    x = torch.empty(steps, rows, dtype=dtype).t() if time_major else torch.empty(rows, steps, dtype=dtype)
    flags = torch.zeros(x.shape, dtype=torch.uint8)
    return recorded_meta(monkeypatch, _launch.gae, torch.empty_like(x), x, x, flags, None, 0.99, 0.95, None, x[:, 0])


def vtrace_meta(monkeypatch, rows, steps, dtype, time_major):
    x = torch.empty(steps, rows, dtype=dtype).t() if time_major else torch.empty(rows, steps, dtype=dtype)
    flags = torch.zeros(x.shape, dtype=torch.uint8)
    return recorded_meta(monkeypatch, _launch.vtrace, torch.empty_like(x), torch.empty_like(x), x, x, x, x, flags,
                         None, 0.99, 1.0, 1.0, None, x[:, 0])


def test_default_plans_take_whole_tiles_where_measured(monkeypatch):
    bf16, f32 = torch.bfloat16, torch.float32
    plan_for_gpu(monkeypatch)  # an H100; four_multiprocessors empties the plan cache after
    # bf16 values stored [T, N] from 4096 to 16383 rows, but V-trace's at 4096 (one program of 32-row pairs per
    # multiprocessor)
    assert gae_meta(monkeypatch, 4096, 128, bf16, True)["WHOLE_TILES"] is True
    assert vtrace_meta(monkeypatch, 4096, 128, bf16, True)["WHOLE_TILES"] is False
    assert gae_meta(monkeypatch, 16384, 128, bf16, True)["WHOLE_TILES"] is False
    assert gae_meta(monkeypatch, 4096, 128, f32, True)["WHOLE_TILES"] is False
    # batch-major whole rows of bf16 values in GAE and V-trace, not of float32
    assert gae_meta(monkeypatch, 256, 512, bf16, False)["WHOLE_TILES"] is True
    assert vtrace_meta(monkeypatch, 256, 512, bf16, False)["WHOLE_TILES"] is True
    assert gae_meta(monkeypatch, 256, 512, f32, False)["WHOLE_TILES"] is False
    # whole tiles only: steps of no whole number of chunks keep their masks
    assert gae_meta(monkeypatch, 256, 500, bf16, False)["WHOLE_TILES"] is False
