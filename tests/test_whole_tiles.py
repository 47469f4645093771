"""Whole tiles: where a call's rows fill whole row tiles and its steps whole chunks, the kernels that
take WHOLE_TILES (GAE, V-trace, lambda- and discounted returns, eligibility traces, prefix sums) read,
scan and write every tile without in-range masks (``kernels/scan.py: tile_rows``).

Every such kernel is checked against the float64 oracle at shapes of whole tiles, in each way a
program walks: whole rows building maps and scanning directly (whose prefetch after a row's last
chunk reads that chunk again instead of nothing), a time split of one chunk a program, and walked
segments (prefetch, look-back and redo), batch-major and time-major, in float32 and in bf16 values
with uint8 flags. Steps shifted past a chunk's edge keep their mask: the value after a row's last
step (``last_value``) and the flag before its first (``"ends_at"`` resets) come from it.
"""

import pytest
import torch

from conftest import HALF_TOLERANCE, TOLERANCE, assert_outputs_rel
from rl_triton import _launch
from test_direct import NAMES, TIME_MAJOR
from test_plans import recorded_meta
from test_walk import run

# rows x steps of whole tiles for every plan below: 8 rows of 4-row tiles, 128 steps of 16-step chunks
WHOLE = (8, 128)
PLANS = {
    "maps": {"block_rows": 4, "block_time": 16, "split": False, "vec": 4, "direct": False},
    "direct": {"block_rows": 4, "block_time": 16, "split": False, "vec": 4, "direct": True},
    "split": {"block_rows": 4, "block_time": 16, "split": True, "walk_programs": 0, "vec": 4},
    # segments of 4 chunks of 8 steps
    "walk": {"block_rows": 4, "block_time": 8, "split": True, "walk_programs": 2, "vec": 2},
}

pytestmark = pytest.mark.usefixtures("four_multiprocessors")


@pytest.mark.parametrize("plan", list(PLANS))
@pytest.mark.parametrize("name", NAMES)
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
    out, expected = run(name, ro, tile={**TIME_MAJOR["pairs"], "direct": True}, time_major=True)
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
    with _launch.tile_override(**PLANS["direct"], whole_tiles=False):
        assert recorded_meta(monkeypatch, _launch.gae, torch.empty(shape), x, x, flags, None, 0.99, 0.95, None,
                             x[:, 0])["WHOLE_TILES"] is False
