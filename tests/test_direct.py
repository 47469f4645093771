"""Direct scans: grouped programs that walk whole rows recur through each chunk from its carry
(``kernels/scan.py: recur_in_thread``) instead of building every step's map first.

Every kernel that takes them (GAE, V-trace, lambda- and discounted returns, eligibility traces,
prefix sums) is checked against the float64 oracle: in batch-major groups (backward kernels rename
each group into processing order and back), in time-major strided groups (loaded in processing order,
one, two and four rows per thread), with one group a chunk (no fold across threads) and several, in
float32 and in bf16 values with uint8 flags. Plans that split time keep building maps (the carry
comes by look-back), whatever ``direct`` says.
"""

import pytest
import torch

from conftest import HALF_TOLERANCE, TOLERANCE, assert_outputs_rel
from rl_triton import _launch
from test_walk import run

NAMES = ["gae", "gae_last_value", "vtrace", "lambda", "discounted", "discounted_truncated", "traces", "prefix_sum",
         "prefix_sum_starts_at"]

BATCH_MAJOR = {
    # rows of 200 steps in chunks of 32 (a partial last chunk): 8 groups of 4 steps across a warp's lanes
    "groups": {"block_rows": 2, "block_time": 32, "split": False, "vec": 4},
    # chunks of one group: each row's chunk in one thread
    "one-group": {"block_rows": 4, "block_time": 4, "split": False, "vec": 4},
}
TIME_MAJOR = {
    # 3 row tiles of 4 rows (a partial one), chunks of 4 groups of 4 steps
    "groups": {"block_rows": 4, "block_time": 16, "split": False, "vec": 4},
    # 16-row tiles, chunks of one group of 8 steps
    "one-group": {"block_rows": 16, "block_time": 8, "split": False, "vec": 8},
    # row pairs and runs of four rows per thread
    "pairs": {"block_rows": 32, "block_time": 64, "num_warps": 4, "split": False, "vec": 8, "rows_per_thread": 2},
    "fours": {"block_rows": 64, "block_time": 64, "num_warps": 4, "split": False, "vec": 8, "rows_per_thread": 4},
}
# a time split of one chunk a program, and walked segments: maps and look-back, DIRECT ignored
SPLITS = {
    "split": {"block_rows": 4, "block_time": 16, "split": True, "walk_programs": 0, "vec": 8},
    "walk": {"block_rows": 4, "block_time": 8, "split": True, "walk_programs": 2, "vec": 2},
}
# rows x steps: partial row tiles of 4 and 16; pairs and fours need a multiple of 16 rows
ROLLOUTS = {"pairs": (48, 200), "fours": (80, 136)}

pytestmark = pytest.mark.usefixtures("four_multiprocessors")


@pytest.mark.parametrize("plan", list(BATCH_MAJOR))
@pytest.mark.parametrize("name", NAMES)
def test_batch_major_direct(name, plan, make_rollout):
    ro = make_rollout(5, 200)
    out, expected = run(name, ro, tile={**BATCH_MAJOR[plan], "direct": True})
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])


# four rows per thread (the slowest tiles in the interpreter) for a kernel of each kind: backward with
# the next step's value shifted in registers, backward with the next-step correction, forward
TIME_MAJOR_CASES = [(name, plan) for plan in TIME_MAJOR for name in NAMES
                    if plan != "fours" or name in ("gae", "vtrace", "traces")]


@pytest.mark.parametrize("name, plan", TIME_MAJOR_CASES)
def test_time_major_direct(name, plan, make_rollout):
    ro = make_rollout(*ROLLOUTS.get(plan, (11, 200)))
    out, expected = run(name, ro, tile={**TIME_MAJOR[plan], "direct": True}, time_major=True)
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])


@pytest.mark.parametrize("plan", list(SPLITS))
@pytest.mark.parametrize("name", ["gae", "vtrace", "traces"])
def test_splits_ignore_direct(name, plan, make_rollout):
    ro = make_rollout(11, 200)
    out, expected = run(name, ro, tile={**SPLITS[plan], "direct": True}, time_major=True)
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])


@pytest.mark.parametrize("plan", ["groups", "pairs"])
@pytest.mark.parametrize("name", ["gae", "gae_last_value", "vtrace", "lambda", "traces"])
def test_bf16_values_with_uint8_flags_direct(name, plan, make_rollout):
    ro = make_rollout(ROLLOUTS.get(plan, (11,))[0], 96, dtype=torch.bfloat16, flag_dtype=torch.uint8)
    out, expected = run(name, ro, tile={**TIME_MAJOR[plan], "direct": True}, time_major=True)
    assert_outputs_rel(out, expected, HALF_TOLERANCE)


def test_direct_reaches_the_kernels_that_take_it():
    cpu = torch.device("cpu")
    with _launch.tile_override(direct=True):
        plan = _launch.plan_tiles(64, 1024, False, cpu, False)
    assert plan.direct
    assert _launch._meta(plan, torch.float32, walk=True, shape=(64, 1024))["DIRECT"] is True
    # Retrace's kernels and the backward passes take no DIRECT
    assert "DIRECT" not in _launch._meta(plan, torch.float32, walk=True)
    assert not _launch.plan_tiles(64, 1024, False, cpu, False).direct
