"""Walked segments: a time split whose programs walk several chunks from a zero carry, look back once,
then redo their segment's first chunks with the true carry until the carry out is the walked one.

How far the redo goes depends on the data: one chunk when a reset follows soon, the whole segment
when nothing resets and the decay never rounds the carry away. Both ends are checked against the
float64 oracle, with every kernel that walks (GAE, V-trace, Retrace's fused kernel and two passes, lambda- and
discounted returns, eligibility traces, prefix sums).
"""

import pytest
import torch

from conftest import HALF_TOLERANCE, TOLERANCE, assert_outputs_rel, plans_for_multiprocessors
from rl_triton import _dispatch, _launch, reference
from rl_triton.ops.gae import compute_gae
from rl_triton.ops.prefix_sum import compute_episodic_prefix_sum
from rl_triton.ops.retrace import compute_retrace
from rl_triton.ops.returns import compute_discounted_returns, compute_eligibility_traces, compute_lambda_returns
from rl_triton.ops.vtrace import compute_vtrace
from test_plans import recorded_meta


def estimator_calls(gamma: float, lambda_: float) -> dict:
    """(public function, kwargs builder) per walking estimator; kwargs read from a rollout."""
    def retrace_kwargs(r):
        # behaviour probabilities of 0.01: every ratio clips to c_bar, so the decay is gamma * lambda
        # (the redo recomputes each chunk's expected next Q and ratios from the inputs)
        return {
            "action_probs_target": r.probs_target, "action_probs_behavior": torch.full_like(r.probs_behavior, 0.01),
            "q_values": r.q_values, "next_q_values_all": r.next_q_values_all, "actions": r.actions,
            "rewards": r.rewards, "terminateds": r.terminateds, "truncateds": r.truncateds, "gamma": gamma,
            "lambda_": lambda_}

    return {
        "gae": (compute_gae, lambda r: {
            "rewards": r.rewards, "values": r.values, "terminateds": r.terminateds, "truncateds": r.truncateds,
            "bootstrap_values": r.bootstrap_values, "gamma": gamma, "lambda_": lambda_}),
        "gae_last_value": (compute_gae, lambda r: {
            "rewards": r.rewards, "values": r.values, "terminateds": r.terminateds, "last_value": r.last_value,
            "gamma": gamma, "lambda_": lambda_}),
        "vtrace": (compute_vtrace, lambda r: {
            "log_pi_target": r.log_pi_target, "log_pi_behavior": r.log_pi_behavior, "values": r.values,
            "rewards": r.rewards, "terminateds": r.terminateds, "truncateds": r.truncateds,
            "bootstrap_values": r.bootstrap_values, "gamma": gamma}),
        "retrace": (compute_retrace, retrace_kwargs),
        "retrace_two_passes": (compute_retrace, retrace_kwargs),
        "lambda": (compute_lambda_returns, lambda r: {
            "rewards": r.rewards, "next_values": r.next_values, "terminateds": r.terminateds,
            "truncateds": r.truncateds, "bootstrap_values": r.bootstrap_values, "gamma": gamma, "lambda_": lambda_}),
        "discounted": (compute_discounted_returns, lambda r: {
            "rewards": r.rewards, "terminateds": r.terminateds, "bootstrap_values": r.bootstrap_values,
            "gamma": gamma}),
        "discounted_truncated": (compute_discounted_returns, lambda r: {
            "rewards": r.rewards, "terminateds": r.terminateds, "truncateds": r.truncateds,
            "bootstrap_values": r.bootstrap_values, "gamma": gamma}),
        "traces": (compute_eligibility_traces, lambda r: {
            "gradients": r.gradients, "dones": r.dones, "gamma": gamma, "lambda_": lambda_,
            "seed_values": r.seed_values}),
        "prefix_sum": (compute_episodic_prefix_sum, lambda r: {
            "inputs": r.inputs, "dones": r.dones, "seed_values": r.seed_values}),
        "prefix_sum_starts_at": (compute_episodic_prefix_sum, lambda r: {
            "inputs": r.inputs, "dones": r.dones, "seed_values": r.seed_values, "boundary": "starts_at"}),
    }


ORACLES = {
    compute_gae: reference.compute_gae,
    compute_vtrace: reference.compute_vtrace,
    compute_retrace: reference.compute_retrace,
    compute_lambda_returns: reference.compute_lambda_returns,
    compute_discounted_returns: reference.compute_discounted_returns,
    compute_eligibility_traces: reference.compute_eligibility_traces,
    compute_episodic_prefix_sum: reference.compute_episodic_prefix_sum,
}
# discounted returns with truncations (the returns kernel without next values, with truncation flags)
# run where the tiles differ most: walks with and without resets, direct scans, strided groups
NAMES = [name for name in estimator_calls(0.99, 0.95) if name != "discounted_truncated"]

# 2 rows of 300 steps in chunks of 8: 4 segments of 10 chunks per row (the last one 8 chunks),
# planned as for 4 multiprocessors on every device
WALK = {"block_rows": 1, "block_time": 8, "split": True, "walk_programs": 2}


pytestmark = pytest.mark.usefixtures("four_multiprocessors")


def run(name, ro, gamma=0.99, lambda_=0.95, tile=WALK, time_major=False):
    """(Triton outputs, oracle outputs); ``time_major``: the inputs stored [T, N], outputs read back as [N, T]."""
    compute, build = estimator_calls(gamma, lambda_)[name]
    kwargs = build(ro)
    if time_major:
        # [N, T] -> [T, N], per-action [N, T, A] -> [T, N, A]
        kwargs = {key: value.transpose(0, 1).contiguous() if torch.is_tensor(value) and value.dim() >= 2 else value
                  for key, value in kwargs.items()}
        kwargs["time_dim"] = 0
    if compute is compute_retrace:
        # Retrace walks in both of its multi-pass forms: the fused kernel, and the scan of two passes
        # (whose redo recomputes the first pass's values, overwritten by the walk, from the inputs)
        tile = {**tile, "retrace_kernels": "two-pass" if name == "retrace_two_passes" else "fused"}
    with _dispatch.use_backend("triton"), _launch.tile_override(**tile):
        out = compute(**kwargs)
    if time_major:
        out = tuple(o.t() for o in out) if isinstance(out, tuple) else out.t()
    return out, ORACLES[compute](**build(ro.oracle_inputs()))


@pytest.mark.parametrize("name", NAMES)
def test_without_resets_the_redo_spans_whole_segments(name, make_rollout):
    # no episode ends: every segment's carry reaches its last step (gamma * lambda = 0.999 decays
    # by a factor 0.92 per segment of 80 steps, far from rounding away)
    ro = make_rollout(2, 300, term_rate=0.0, trunc_rate=0.0)
    out, expected = run(name, ro, gamma=0.9995, lambda_=0.9995)
    assert_outputs_rel(out, expected, 1e-4)


@pytest.mark.parametrize("name", [*NAMES, "discounted_truncated"])
def test_with_resets_the_redo_stops_early(name, make_rollout):
    ro = make_rollout(2, 300)
    out, expected = run(name, ro)
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])


@pytest.mark.parametrize("name", ["gae", "lambda", "traces", "prefix_sum", "retrace_two_passes"])
def test_segment_edges_at_episode_ends(name, make_rollout):
    # episodes that end at the last step before a segment edge or at the first step after it, where
    # the carry into the next segment is zero or the reset is the first step the redo reads.
    # Segments of 10 chunks of 8 steps start at steps 80, 160, 240 (forward scans) and, counted
    # from the end of the 38 chunks, at 64, 144, 224 (backward recurrences)
    ro = make_rollout(2, 300, term_rate=0.0, trunc_rate=0.0)
    before_edges, after_edges = [63, 79, 143, 159, 223, 239], [64, 80, 144, 160, 224, 240]
    for flags in (ro.terminateds, ro.dones):
        flags[0, before_edges] = 1
        flags[1, after_edges] = 1
    out, expected = run(name, ro, gamma=0.999, lambda_=0.999)
    assert_outputs_rel(out, expected, 1e-4)


@pytest.mark.parametrize("name", ["gae", "prefix_sum"])
def test_float64_walks(name, make_rollout):
    ro = make_rollout(2, 300, dtype=torch.float64, term_rate=0.01, trunc_rate=0.01)
    out, expected = run(name, ro)
    assert_outputs_rel(out, expected, TOLERANCE[torch.float64])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("name", ["gae", "vtrace", "lambda", "traces", "prefix_sum", "retrace_two_passes"])
def test_half_precision_walks(name, dtype, make_rollout):
    # batch-major 16-bit values with uint8 flags across chunk edges and walked segments (the
    # redo included), each output rounded to the 16-bit dtype once
    ro = make_rollout(2, 304, dtype=dtype, flag_dtype=torch.uint8)
    out, expected = run(name, ro)
    assert all(o.dtype == dtype for o in (out if isinstance(out, tuple) else (out,)))
    assert_outputs_rel(out, expected, HALF_TOLERANCE)


@pytest.mark.parametrize(
    ("name", "look_behind"),
    [(name, 0) for name in ["gae_last_value", "vtrace", "discounted", "prefix_sum", "retrace_two_passes"]]
    + [(name, 4) for name in ["gae_last_value", "vtrace", "discounted", "prefix_sum"]],
)
def test_time_major_walks(name, look_behind, make_rollout):
    # [T, N] buffers walked in tiles of 4 rows x 8 steps: 2 row tiles of 4 segments; with episodes ending at a
    # quarter of the steps, some segments take their carry from the 4 steps before them
    ro = make_rollout(5, 300, term_rate=0.02 if look_behind == 0 else 0.25, trunc_rate=0.02)
    out, expected = run(name, ro, tile={**WALK, "block_rows": 4, "look_behind": look_behind}, time_major=True)
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])


@pytest.fixture
def h200_multiprocessors(monkeypatch):
    """Plans made as for an H200's 132 multiprocessors."""
    yield from plans_for_multiprocessors(monkeypatch, 132)


def test_long_rows_plan_walked_segments(h200_multiprocessors):
    """Default plans walk segments of 8 or more chunks, one per resident program; shorter rows
    keep one chunk per program."""
    cpu = torch.device("cpu")

    def plan(rows, seq_len, walk, heavy=False, **options):
        return _launch.plan_tiles(rows, seq_len, False, cpu, heavy=heavy, element_bytes=4, walk_split=walk,
                                  **options)

    one_row = plan(1, 1 << 24, _launch._GAE_WALK)
    assert one_row.walk and one_row.block_time == 512 and one_row.num_warps == 4 and one_row.vec == 4
    # each segment first scans the 256 steps before it
    assert one_row.look_behind == 256
    assert one_row.segment_chunks == 32 and one_row.grid == (1024,) and one_row.prefetch
    # every program of a walk resident at once: 8 programs of 4 warps share 65536 registers
    assert one_row.max_registers == 64
    eight_rows = plan(8, 1 << 21, _launch._EPISODIC_WALK)
    assert eight_rows.walk and eight_rows.block_time == 512 and eight_rows.segment_chunks == 32
    assert eight_rows.grid == (8 * 128,)  # 8 x 132 programs asked, 4096 chunks per row in segments of 32
    # a long walk (eligibility traces and prefix sums of steps other than 4 bytes): 2048-step chunks, 3
    # programs per multiprocessor, where segments still hold 8 of them
    long_walk = {"walk_split": _launch._EPISODIC_WALK, "long_walk_split": _launch._EPISODIC_LONG_WALK}
    eight_rows = _launch.plan_tiles(8, 1 << 21, False, cpu, heavy=False, element_bytes=4, **long_walk)
    assert eight_rows.walk and eight_rows.block_time == 2048 and eight_rows.segment_chunks == 21
    assert eight_rows.grid == (8 * 49,)  # 3 x 132 programs asked, 1024 chunks per row in segments of 21
    assert eight_rows.look_behind == 256
    # 1 x 2^22: 2048 chunks of 2048 steps over 396 segments is too few; 512-step chunks still walk
    one_row = _launch.plan_tiles(1, 1 << 22, False, cpu, heavy=False, element_bytes=4, **long_walk)
    assert one_row.walk and one_row.block_time == 512 and one_row.segment_chunks == 8
    # time-major tiles keep the walk plan of before
    time_major = _launch.plan_tiles(8, 1 << 21, True, cpu, heavy=False, **long_walk)
    assert time_major.walk and time_major.block_time == 64 and time_major.look_behind == 64
    vtrace = plan(2, 1 << 23, _launch._VTRACE_WALK, heavy=True)
    assert vtrace.walk and vtrace.grid[0] <= 6 * 132 and vtrace.segment_chunks == 42
    assert vtrace.num_warps == 4 and vtrace.max_registers == 80  # 65536 / (6 x 128) = 85, in units of 8
    # 64 x 16384: 4 chunks per segment, so one chunk per program (2048 steps, capped registers)
    short = plan(64, 16384, _launch._GAE_WALK)
    assert short.split and not short.walk and short.block_time == 2048 and short.max_registers == 64
    assert short.look_behind == 0
    assert short.grid == (64 * 8,)
    # time-major [T, N] buffers of few rows walk tiles of 16 rows x 64 steps (8 rows: 8 x 64)
    time_major = _launch.plan_tiles(8, 1 << 21, True, cpu, heavy=False, walk_split=_launch._GAE_WALK)
    assert time_major.walk and (time_major.block_rows, time_major.block_time) == (8, 64)
    assert time_major.num_warps == 2 and time_major.max_registers == 128
    # three programs of 4 warps may take 168 registers; no cap at all where one program may take 255
    assert eight_rows.num_warps == 4 and eight_rows.max_registers == 168
    with _launch.tile_override(walk_programs=1):
        assert plan(1, 1 << 24, _launch._GAE_WALK).max_registers is None
    with _launch.tile_override(max_registers=0):
        assert plan(1, 1 << 24, _launch._GAE_WALK).max_registers is None
    assert plan(1, 1 << 24, _launch._GAE_WALK, walk_register_cap=False).max_registers is None
    # kernels that cannot walk, and overrides
    assert not plan(1, 1 << 24, None).walk and plan(1, 1 << 24, None).look_behind == 0
    with _launch.tile_override(look_behind=0):
        assert plan(1, 1 << 24, _launch._GAE_WALK).look_behind == 0
    with _launch.tile_override(look_behind=1 << 16):
        assert plan(1, 1 << 24, _launch._GAE_WALK).look_behind == 512  # at most a chunk
    with _launch.tile_override(look_behind=2):
        assert plan(1, 1 << 24, _launch._GAE_WALK).look_behind == 4  # a whole group of 4 steps
    with _launch.tile_override(walk_programs=0):
        assert not plan(1, 1 << 24, _launch._GAE_WALK).walk


def walk_grid(rows: int, seq_len: int, chunk_steps: int, programs: int) -> tuple[int]:
    """The grid of a walk asked for ``programs`` per multiprocessor of an H200's 132: each row's chunks in
    equal segments, as many as its share of the programs allows."""
    chunks = -(-seq_len // chunk_steps)
    segments_per_row = programs * 132 // rows
    return (rows * -(-chunks // -(-chunks // segments_per_row)),)


@pytest.mark.parametrize("values, flags, chunk_steps, programs", [
    (torch.float32, torch.bool, 512, 8),  # 4-byte steps: the walk of 512-step chunks, 8 programs each
    (torch.float32, torch.float32, 512, 8),
    (torch.bfloat16, torch.uint8, 2048, 3),  # steps of 2 bytes at most keep the long walk
])
def test_episodic_scans_of_long_rows_walk_by_step_size(h200_multiprocessors, monkeypatch, values, flags,
                                                       chunk_steps, programs):
    """Eligibility traces and prefix sums of 8 x 2^21 steps of 4 bytes (the widest of values, flags and output)
    walk 512-step chunks (8 programs per multiprocessor), not the long walk's 2048 (3), which was slower with the
    look-behind (_launch: _EPISODIC_LONG_WALK); bf16 values with uint8 flags keep the long walk."""
    rows, seq_len = 8, 1 << 21
    x, out = torch.empty(rows, seq_len, dtype=values), torch.empty(rows, seq_len, dtype=values)
    for decay, reset_after_flag in ((0.9, True), (1.0, False)):  # eligibility traces, prefix sums
        seen = recorded_meta(monkeypatch, _launch.episodic_scan, out, x, torch.zeros(rows, seq_len, dtype=flags), None,
                             decay, reset_after_flag)
        assert seen["SPLIT"] and seen["WALK"] and seen["BLOCK_TIME"] == chunk_steps
        assert seen["grid"] == walk_grid(rows, seq_len, chunk_steps, programs)
        assert seen["LOOK_BEHIND"] == 256
        assert seen["maxnreg"] == (64 if programs == 8 else 168)


@pytest.mark.parametrize("rows, programs", [(1, 5), (2, 6), (8, 6)])
def test_vtrace_walks_a_single_row_with_five_programs(h200_multiprocessors, monkeypatch, rows, programs):
    """V-trace of 2^24 steps in all walks 512-step chunks with 5 programs per multiprocessor for one row of
    float32 steps, 6 from two rows up (_launch: _VTRACE_ONE_ROW_WALK); the register cap is each program's share."""
    seq_len = (1 << 24) // rows
    inputs = [torch.zeros(rows, seq_len) for _ in range(5)]
    outputs = [torch.empty(rows, seq_len) for _ in range(2)]
    for truncateds in (None, torch.zeros(rows, seq_len)):
        seen = recorded_meta(monkeypatch, _launch.vtrace, *outputs, *inputs, truncateds, 0.99, 1.0, 1.0, None,
                             torch.zeros(rows))
        assert seen["WALK"] and seen["BLOCK_TIME"] == 512 and seen["num_warps"] == 4
        assert seen["grid"] == walk_grid(rows, seq_len, 512, programs)
        assert seen["maxnreg"] == 65536 // (programs * 128) // 8 * 8  # 96 for 5 programs, 80 for 6


@pytest.mark.parametrize("name", ["retrace", "retrace_two_passes"])
@pytest.mark.parametrize("num_actions", [1, 40])
def test_retrace_walks_any_number_of_actions(name, num_actions, make_rollout):
    # the redo reduces every action group again: 40 actions take two groups of 32, one action a group of one
    ro = make_rollout(2, 300, num_actions=num_actions)
    out, expected = run(name, ro)
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])


# the field a NaN is put in, per estimator, and whether its recurrence runs backward in time
NAN_INPUT = {"gae": ("rewards", True), "vtrace": ("rewards", True), "lambda": ("rewards", True),
             "discounted": ("rewards", True), "traces": ("gradients", False), "prefix_sum": ("inputs", False)}


def assert_a_nan_reaches_the_rest_of_its_row(name: str, ro, tile: dict) -> None:
    """A NaN in the second of four segments of row 1 (in processing order) reaches every later step of the row,
    as in the plain loop (0 * NaN across episode ends), and row 0 stays finite."""
    field, backward = NAN_INPUT[name]
    step = 200 if backward else 100
    getattr(ro, field)[1, step] = float("nan")
    out, expected = run(name, ro, tile=tile)
    expected = expected if isinstance(expected, tuple) else (expected,)
    out = out if isinstance(out, tuple) else (out,)
    reached = expected[0][1, :step] if backward else expected[0][1, step + 1:]
    assert reached.isnan().all() and torch.isfinite(expected[0][0]).all()
    for got, want in zip(out, expected, strict=True):
        torch.testing.assert_close(got.double(), want.double(), rtol=1e-4, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize(
    "tile",
    [WALK, {**WALK, "walk_programs": 0}, {**WALK, "window": 2}, {**WALK, "walk_programs": 0, "window": 2}],
    ids=["walk", "chunk-per-program", "walk-window2", "chunk-per-program-window2"],
)
@pytest.mark.parametrize("name", list(NAN_INPUT))
def test_a_nan_reaches_past_constant_segments(name, tile, make_rollout):
    # With episode ends in every segment, a segment's map ignores its carry, and the look-back stops at
    # the nearest one, unless something before it is NaN or infinite: a plain loop carries a NaN
    # across episode ends (0 * NaN), and so must the split. The NaN must reach through the third
    # segment into the fourth. Windows of 2 put the NaN's segment (or chunk) in an earlier block than
    # the ones it must reach, so they learn of it from that block's counter.
    assert_a_nan_reaches_the_rest_of_its_row(name, make_rollout(2, 300), tile)


@pytest.mark.parametrize("name", list(NAN_INPUT))
def test_a_nan_reaches_segments_whose_chunk_before_ends_an_episode_in_every_row(name, make_rollout):
    # Half the steps end an episode, so the chunk before every segment (8 steps) ends one in each row: its
    # scan from a zero carry alone gives the carry into the segment, but only if nothing before it is NaN.
    # Without a look-behind the segments look back as always.
    assert_a_nan_reaches_the_rest_of_its_row(name, make_rollout(2, 300, term_rate=0.5), {**WALK, "look_behind": 8})
    assert_a_nan_reaches_the_rest_of_its_row(name, make_rollout(2, 300, term_rate=0.5), WALK)


def test_default_walks_scan_256_steps_before_their_segments(monkeypatch):
    # on by default (_launch._LOOK_BEHIND_BY_DEFAULT); tile_override(look_behind=0) turns it off
    monkeypatch.setattr(_launch, "_multiprocessors", lambda device: 132)
    walk = _launch.plan_tiles(1, 1 << 24, False, torch.device("cpu"), heavy=False, element_bytes=4,
                              walk_split=_launch._GAE_WALK)
    assert walk.walk and walk.look_behind == 256
    assert _launch._meta(walk, torch.float32, walk=True, shape=(1, 1 << 24))["LOOK_BEHIND"] == 256
    with _launch.tile_override(look_behind=0):
        walk = _launch.plan_tiles(1, 1 << 24, False, torch.device("cpu"), heavy=False, element_bytes=4,
                                  walk_split=_launch._GAE_WALK)
        assert walk.look_behind == 0
        assert _launch._meta(walk, torch.float32, walk=True, shape=(1, 1 << 24))["LOOK_BEHIND"] == 0


# the walking kernels that take a look-behind (Retrace's walks do not)
LOOK_BEHIND_NAMES = [name for name in NAMES if not name.startswith("retrace")]


@pytest.mark.parametrize(
    "tile",
    [{**WALK, "block_rows": 2, "look_behind": 2}, {**WALK, "block_rows": 2, "look_behind": 4},
     {**WALK, "block_rows": 2, "look_behind": 8},
     {"block_rows": 2, "block_time": 32, "vec": 4, "split": True, "walk_programs": 2, "look_behind": 8}],
    ids=["2-steps", "4-steps", "whole-chunk", "groups-of-4"],
)
@pytest.mark.parametrize("name", LOOK_BEHIND_NAMES)
def test_segments_take_their_carry_from_the_steps_before_them(name, tile, make_rollout):
    # Episodes end at half the steps, so the last 2, 4 or 8 steps before most segments (of 8- or 32-step
    # chunks) end one in each row of the tile, and those segments walk from their carry alone, without
    # waiting or redoing; the others look back. Tiles of 2 rows over 3 rows: the second tile's missing row
    # must not stop it.
    ro = make_rollout(3, 300, term_rate=0.5)
    out, expected = run(name, ro, tile=tile)
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])


@pytest.mark.parametrize("name", list(NAN_INPUT))
def test_a_nan_reaches_segments_that_take_their_carry_from_a_short_look_behind(name, make_rollout):
    # as above with the last 4 steps of the chunk before each segment
    assert_a_nan_reaches_the_rest_of_its_row(name, make_rollout(2, 300, term_rate=0.5), {**WALK, "look_behind": 4})
