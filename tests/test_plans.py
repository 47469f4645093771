"""Tile plans: the rules the H200 measurements in benchmarks/NOTES.md chose, kept from drifting."""

import types

import pytest
import torch

from conftest import plan_for_gpu
from rl_triton import _launch

CPU = torch.device("cpu")  # planned as a GPU of 4 multiprocessors


def test_time_split_programs_take_at_most_8_warps_and_64_registers():
    # GAE with truncations asks for up to 16 warps: right for one chunk per row, slower when split
    plan = _launch.plan_tiles(1, 1 << 20, False, CPU, heavy=False, element_bytes=4,
                              single_chunk_steps=_launch.GAE_SINGLE_CHUNK_STEPS, max_warps=16)
    assert plan.split and plan.num_chunks == (1 << 20) // plan.block_time
    assert plan.num_warps == 8 and plan.max_registers == 64
    heavy = _launch.plan_tiles(2, 1 << 16, False, CPU, heavy=True)
    assert heavy.split and heavy.num_warps <= 8 and heavy.max_registers == 64


def test_single_chunk_and_time_major_plans_keep_the_compilers_registers():
    rows = _launch.plan_tiles(4096, 4096, False, CPU, heavy=False, element_bytes=4,
                              single_chunk_steps=_launch.GAE_SINGLE_CHUNK_STEPS, max_warps=16)
    assert not rows.split and rows.num_chunks == 1 and rows.num_warps == 16 and rows.max_registers is None
    time_major = _launch.plan_tiles(64, 1 << 16, True, CPU, heavy=False)
    assert time_major.split and time_major.max_registers is None


def test_register_cap_override():
    with _launch.tile_override(split=True, block_time=64, max_registers=0):
        assert _launch.plan_tiles(1, 4096, False, CPU, heavy=False).max_registers is None
    with _launch.tile_override(split=True, block_time=64, max_registers=96):
        assert _launch.plan_tiles(1, 4096, False, CPU, heavy=False).max_registers == 96


def test_time_major_tiles_follow_the_number_of_programs():
    def tile(rows, seq_len=4096, heavy=False):
        plan = _launch.plan_tiles(rows, seq_len, True, CPU, heavy=heavy)
        assert plan.max_registers is None and not plan.split
        return plan.block_rows, plan.block_time, plan.num_warps

    # at least 512 programs of 32 rows (V-trace: 256); of 16 rows; fewer: longer tiles (not for V-trace)
    assert tile(16384) == tile(8192, heavy=True) == tile(16384, heavy=True) == (32, 32, 4)
    assert tile(8192) == tile(16383) == tile(8191, heavy=True) == (16, 64, 4)
    assert tile(4096) == (16, 128, 4) and tile(4096, heavy=True) == (16, 64, 4)
    assert tile(16384, seq_len=8) == tile(16384, seq_len=8, heavy=True) == (128, 8, 4)
    assert tile(2048) == (16, 128, 4) and _launch.plan_tiles(2047, 4096, True, CPU, heavy=False).split
    retrace = _launch.plan_tiles(16384, 512, True, CPU, heavy=True, time_major_tile=_launch.RETRACE_TIME_MAJOR_TILE)
    assert (retrace.block_rows, retrace.block_time, retrace.num_warps) == (128, 16, 4)


def test_time_major_tiles_of_many_rows_by_kernel(monkeypatch):
    def tile(launcher, *inputs):
        seen = recorded_meta(monkeypatch, launcher, *inputs)
        assert not seen["SPLIT"]
        strided = seen.get("STRIDED_GROUPS", False)
        assert seen.get("VEC", 1) == (8 if strided else 1)
        return seen["BLOCK_ROWS"], seen["BLOCK_TIME"], seen["num_warps"], strided

    def time_major(rows, seq_len=64):
        return torch.zeros(seq_len, rows).t()

    # strided groups of 8 steps: from 16384 rows 32 rows x 32 steps with 4 warps (V-trace 64 x 32 with
    # 4 warps in row pairs), fewer rows 32 x 64 with 8 warps where 16-row programs would not fit two to a
    # multiprocessor (the next test); the plain recurrence reads step by step
    x, flags, out = time_major(16384), time_major(16384), time_major(16384)
    assert tile(_launch.gae, out, x, x, flags, None, 0.99, 0.95, None, x[:, 0]) == (32, 32, 4, True)
    assert tile(_launch.gae, out, x, x, flags, flags, 0.99, 0.95, x, None) == (32, 32, 4, True)
    assert tile(_launch.vtrace, out, time_major(16384), x, x, x, x, flags, None, 0.99, 1.0, 1.0, None,
                x[:, 0]) == (64, 32, 4, 2)
    assert tile(_launch.returns, out, x, None, flags, None, 0.99, 1.0, None) == (32, 32, 4, True)
    assert tile(_launch.returns, out, x, x, flags, flags, 0.99, 0.95, x) == (32, 32, 4, True)
    assert tile(_launch.episodic_scan, out, x, flags, None, 0.9, True) == (32, 32, 4, True)
    assert tile(_launch.linear_recurrence, out, x, x, None, True) == (32, 32, 4, False)
    fewer = time_major(16383)
    assert tile(_launch.gae, fewer, fewer, fewer, fewer, None, 0.99, 0.95, None, fewer[:, 0]) == (32, 64, 8, True)
    assert tile(_launch.vtrace, fewer, fewer, fewer, fewer, fewer, fewer, fewer, None, 0.99, 1.0, 1.0, None,
                fewer[:, 0]) == (32, 64, 8, True)


def test_time_major_strided_tiles_of_fewer_rows_fill_the_multiprocessors(monkeypatch, fresh_plans):
    """Below 8192 rows (lambda-returns: 4096) tiles of 16 rows: twice the programs of 32-row tiles, with
    16 warps (V-trace 8) where one program per multiprocessor covers the rows and half as many where
    more programs than multiprocessors share them (but where 32-row tiles make one program per
    multiprocessor, rows of at least 2048 steps of GAE from 2113 rows take 32 x 256 x 16 and of V-trace from
    4096 rows 32 x 64 x 8 (at 2113-2815 rows, and at 3072-4095 rows of at least 16384 steps, 32 x 128 x 8 in row
    pairs), of at least 1536 steps of GAE with truncations from 3072 rows 32 x 128 x 8 in row pairs, and
    lambda-returns at 2048-4095 rows 32 x 128 x 8 in row pairs); fewer than 2048 rows split time."""
    plan_for_gpu(monkeypatch)  # an H100

    def tile(launcher, *inputs):
        seen = recorded_meta(monkeypatch, launcher, *inputs)
        if seen["SPLIT"]:
            return "split", seen.get("STRIDED_GROUPS", False)
        assert seen["VEC"] == 8 and seen["STRIDED_GROUPS"]
        # STRIDED_GROUPS: the rows each thread holds (True: one)
        return seen["BLOCK_ROWS"], seen["BLOCK_TIME"], seen["num_warps"], int(seen["STRIDED_GROUPS"])

    def calls(rows, seq_len=4096):
        x, flags, out = (torch.zeros(seq_len, rows).t() for _ in range(3))
        return {
            "gae": tile(_launch.gae, out, x, x, flags, None, 0.99, 0.95, None, x[:, 0]),
            "gae+trunc": tile(_launch.gae, out, x, x, flags, flags, 0.99, 0.95, x, None),
            "vtrace": tile(_launch.vtrace, out, torch.zeros(seq_len, rows).t(), x, x, x, x, flags, None, 0.99, 1.0, 1.0,
                           None, x[:, 0]),
            "discounted": tile(_launch.returns, out, x, None, flags, None, 0.99, 1.0, None),
            "lambda": tile(_launch.returns, out, x, x, flags, flags, 0.99, 0.95, x),
            "episodic": tile(_launch.episodic_scan, out, x, flags, None, 0.9, True),
        }

    wide, narrow = (32, 64, 8, 1), {"gae": (16, 128, 8, 1), "vtrace": (16, 64, 4, 1)}
    # 6144 rows: 384 programs of 16 rows would not fit two to a multiprocessor; 4256: 266 of them (and 133 of
    # 32 rows, more than one per multiprocessor)
    for rows in (4256, 6144, 8192, 16383):
        assert set(calls(rows).values()) == {wide}
    # 4096 and 3072 rows: 256 and 192 programs of 16 rows, more than 132 multiprocessors; up to 4224 rows
    # 32-row tiles make one program per multiprocessor
    for rows in (4224, 4096, 3072):
        # GAE from 2113 rows, with truncations from 3072, V-trace from 4096, lambda-returns below 4096
        one_wave = {"gae": (32, 256, 16, 1), "gae+trunc": (32, 128, 8, 2),
                    "vtrace": (32, 64, 8, 1) if rows >= 4096 else narrow["vtrace"],
                    "lambda": wide if rows >= 4096 else (32, 128, 8, 2)}
        assert calls(rows) == {**one_wave, "discounted": narrow["gae"], "episodic": narrow["gae"]}, rows
        # shorter rows read faster in 16-row tiles: GAE and V-trace below 2048 steps, with truncations
        # below 1536 (lambda-returns keep their tiles)
        assert calls(rows, 2048) == calls(rows), rows
        assert calls(rows, 1536) == {**calls(rows), "gae": narrow["gae"], "vtrace": narrow["vtrace"]}, rows
        assert calls(rows, 1024) == {**calls(rows, 1536), "gae+trunc": narrow["gae"]}, rows
    # 2048 rows: 128 programs of 16 rows, one per multiprocessor; lambda-returns in 64 of 32 rows in pairs
    assert calls(2048) == {"gae": (16, 256, 16, 1), "gae+trunc": (16, 256, 16, 1), "vtrace": (16, 128, 8, 1),
                           "discounted": (16, 256, 16, 1), "lambda": (32, 128, 8, 2),
                           "episodic": (16, 256, 16, 1)}
    assert {plan[0] for plan in calls(2047).values()} == {"split"}
    # GAE from 2113 rows, more than 16-row tiles cover with one program per multiprocessor: 32-row tiles
    assert calls(2112)["gae"] == (16, 256, 16, 1)
    assert calls(2176)["gae"] == (32, 256, 16, 1)
    assert calls(2176, 1536)["gae"] == narrow["gae"]
    # V-trace at 2113-2815 rows of at least 2048 steps in 32-row pairs
    assert calls(2112)["vtrace"] == (16, 128, 8, 1)
    for rows in (2176, 2560, 2808):
        assert calls(rows)["vtrace"] == calls(rows, 2048)["vtrace"] == (32, 128, 8, 2), rows
        assert calls(rows, 1536)["vtrace"] != (32, 128, 8, 2), rows
    assert calls(2816)["vtrace"] == narrow["vtrace"]
    # and at 3072-4095 rows of at least 16384 steps
    for rows in (3072, 4088):
        assert calls(rows, 16384)["vtrace"] == (32, 128, 8, 2), rows
        assert calls(rows, 8192)["vtrace"] == narrow["vtrace"], rows
    assert calls(4096, 16384)["vtrace"] == wide
    # V-trace at 4096-4224 rows where the memory's peak bandwidth per multiprocessor passes 30 GB/s (an H200:
    # 36.5; an H100: 25): 16-row tiles below 16384 steps, 32 x 128 x 8 pairs from 16384
    plan_for_gpu(monkeypatch, 37.0)
    for rows in (4096, 4224):
        assert calls(rows)["vtrace"] == calls(rows, 8192)["vtrace"] == narrow["vtrace"], rows
        assert calls(rows, 16384)["vtrace"] == (32, 128, 8, 2), rows
        assert calls(rows) == {"gae": (32, 256, 16, 1), "gae+trunc": (32, 128, 8, 2), "vtrace": narrow["vtrace"],
                               "lambda": wide, "discounted": narrow["gae"], "episodic": narrow["gae"]}, rows
    assert calls(3072, 16384)["vtrace"] == (32, 128, 8, 2)
    plan_for_gpu(monkeypatch, 25.0)
    assert calls(4096)["vtrace"] == calls(4096, 16384)["vtrace"] == wide
    # rows of no whole number of groups, read step by step, keep the tiles they had before 16-row tiles
    for rows, seq_len, expected in ((3000, 4095, (16, 128, 4)), (4096, 4095, (32, 64, 8))):
        x = torch.zeros(seq_len, rows).t()
        seen = recorded_meta(monkeypatch, _launch.gae, x, x, x, x, None, 0.99, 0.95, None, x[:, 0])
        assert (seen["BLOCK_ROWS"], seen["BLOCK_TIME"], seen["num_warps"]) == expected


def test_one_wave_tiles_take_the_first_rule_that_fits():
    # each rule bounds the rows, the fewest steps and the programs (one per multiprocessor at most); the first
    # rule that fits a call of 4-byte steps in whole groups gives its tile, other calls take the tiles below
    long_rows = _launch.OneWaveTile((32, 128, 8, 2), (2048, 4096), min_steps=2048)
    any_rows = _launch.OneWaveTile((32, 64, 8, 1))
    rules = _launch.dataclasses.replace(_launch.STRIDED_TIME_MAJOR, one_wave=(long_rows, any_rows))

    def tiles(rows, multiprocessors=132, seq_len=2048, whole_groups=True, element_bytes=4):
        return [config.tile_of(rows, multiprocessors, whole_groups, element_bytes, seq_len)
                for config in (rules, _launch.STRIDED_TIME_MAJOR)]

    assert tiles(3072) == [(32, 128, 8, 2), (16, 128, 8, 1)]
    assert tiles(4096) == [(32, 64, 8, 1), (16, 128, 8, 1)]  # past long_rows' rows: the next rule
    assert tiles(4096, seq_len=512)[0] == (32, 64, 8, 1)  # any_rows has no fewest steps
    for unfit in (tiles(3072, seq_len=2047),  # too short for long_rows
                  tiles(3072, multiprocessors=95),  # 96 programs on 95 multiprocessors
                  tiles(4225),  # 133 programs of 32 rows
                  tiles(3072, element_bytes=2), tiles(3072, whole_groups=False)):
        assert unfit[0] == unfit[1]


def test_fast_memories_take_their_own_rules():
    # GPUs of more than 30 GB/s of peak memory bandwidth per multiprocessor take fast_memory where a config has it
    for config in (_launch.VTRACE_STRIDED_TIME_MAJOR, _launch.LAMBDA_STRIDED_TIME_MAJOR,
                   _launch.GAE_STRIDED_TIME_MAJOR, _launch.GAE_TRUNCATED_STRIDED_TIME_MAJOR):
        assert config.fast_memory is not None
        assert config.for_memory(25.0) is config.for_memory(30.0) is config
        assert config.for_memory(30.1) is config.for_memory(37.0) is config.fast_memory
    assert _launch.STRIDED_TIME_MAJOR.for_memory(37.0) is _launch.STRIDED_TIME_MAJOR
    assert _launch._dram_gbps_per_multiprocessor(torch.device("cpu")) == 0.0


@pytest.fixture
def fresh_plans():
    """The plan cache emptied before and after a test that makes plans under patched GPU properties."""
    _launch._default_plan.cache_clear()
    yield
    _launch._default_plan.cache_clear()


def bf16_time_major_plans(monkeypatch, rows: int, seq_len: int = 4096,
                          dram_gbps_per_multiprocessor: float = 25.0) -> dict[str, tuple]:
    """(rows, steps, warps, rows per thread, direct, whole tiles) of each strided estimator's call on bf16 values
    with uint8 flags stored [T, N] of ``rows`` rows of ``seq_len`` steps, planned afresh for a GPU of 132
    multiprocessors and that peak memory bandwidth per multiprocessor (``plan_for_gpu``)."""
    plan_for_gpu(monkeypatch, dram_gbps_per_multiprocessor)

    def tile(launcher, *inputs):
        seen = recorded_meta(monkeypatch, launcher, *inputs)
        assert seen["VEC"] == 8 and not seen["SPLIT"]
        return (seen["BLOCK_ROWS"], seen["BLOCK_TIME"], seen["num_warps"], seen["STRIDED_GROUPS"], seen["DIRECT"],
                seen["WHOLE_TILES"])

    x, out = (torch.zeros(seq_len, rows, dtype=torch.bfloat16).t() for _ in range(2))
    flags = torch.zeros(seq_len, rows, dtype=torch.uint8).t()
    return {
        "gae": tile(_launch.gae, out, x, x, flags, None, 0.99, 0.95, None, x[:, 0]),
        "gae+trunc": tile(_launch.gae, out, x, x, flags, flags, 0.99, 0.95, x, None),
        "vtrace": tile(_launch.vtrace, out, torch.zeros(seq_len, rows, dtype=torch.bfloat16).t(), x, x, x, x, flags,
                       None, 0.99, 1.0, 1.0, None, x[:, 0]),
        "discounted": tile(_launch.returns, out, x, None, flags, None, 0.99, 1.0, None),
        "lambda": tile(_launch.returns, out, x, x, flags, flags, 0.99, 0.95, x),
        "episodic": tile(_launch.episodic_scan, out, x, flags, None, 0.9, True),
    }


def test_time_major_bf16_tiles_from_3072_rows_hold_row_pairs(monkeypatch, fresh_plans):
    """bf16 values with uint8 flags stored [T, N] of 3072 rows to as many as 32-row tiles cover with one program
    per multiprocessor: 32-row tiles in row pairs that recur directly without in-range masks, of 16 warps (GAE
    without truncations, discounted returns, the episodic scans) or 8 (GAE with truncations, lambda-returns);
    from there to 8191 rows 32 x 128 x 8 pairs the same way (V-trace and lambda-returns: 32 x 64 x 4 pairs,
    test_time_major_bf16_tiles_on_slow_memory); V-trace in 32 x 128 x 8 pairs the same way below 4096 rows, with
    maps from 4096 as before; fewer rows and 8192 keep their plans (planned for an H100)."""

    def calls(rows):
        return bf16_time_major_plans(monkeypatch, rows)

    for rows in (3072, 4096, 4224):
        wide, short = (32, 256, 16, 2, True, True), (32, 128, 8, 2, True, True)
        # V-trace: 32 x 128 x 8 in pairs, direct and whole below 4096 rows, building maps from 4096
        vtrace = (32, 128, 8, 2, False, False) if rows >= 4096 else short
        assert calls(rows) == {"gae": wide, "gae+trunc": short, "vtrace": vtrace, "discounted": wide,
                               "lambda": short, "episodic": wide}
    # 4256 rows make 133 programs of 32 rows: 32 x 128 x 8 pairs, two programs per multiprocessor
    narrow_pairs = (32, 64, 4, 2, True, True)
    for rows in (4256, 6144, 8160):
        short = (32, 128, 8, 2, True, True)
        assert calls(rows) == {"gae": short, "gae+trunc": short, "vtrace": narrow_pairs, "discounted": short,
                               "lambda": narrow_pairs, "episodic": short}, rows
    # 8192 rows: pairs of 32 x 128 x 8 as before, recurring directly where direct_rows say
    assert calls(8192) == {"gae": (32, 128, 8, 2, True, True), "gae+trunc": (32, 128, 8, 2, True, True),
                           "vtrace": narrow_pairs, "discounted": (32, 128, 8, 2, True, True),
                           "lambda": narrow_pairs, "episodic": (32, 128, 8, 2, True, True)}
    assert calls(2048)["episodic"][:3] == (16, 256, 16)


def test_time_major_bf16_tiles_on_fast_memory(monkeypatch, fresh_plans):
    """On GPUs of more than 30 GB/s of peak memory bandwidth per multiprocessor (an H200), bf16 V-trace and
    lambda-returns stored [T, N] recur directly without in-range masks from 3072 rows: 32 x 128 x 8 pairs up to
    4224 rows (one program per multiprocessor), 32 x 64 x 4 pairs to 16383 rows, and from 16384 rows 64 x 64 x 4
    of four rows per thread where the rows and steps fill whole tiles (else the plans of slower memories); the
    other estimators keep their plans, GAE those it had before slower memories took their own
    (test_time_major_bf16_gae_tiles_on_slow_memory)."""

    def plans(dram_gbps_per_multiprocessor, rows, seq_len=4096):
        return bf16_time_major_plans(monkeypatch, rows, seq_len, dram_gbps_per_multiprocessor)

    pairs, narrow_pairs, fours = (32, 128, 8, 2, True, True), (32, 64, 4, 2, True, True), (64, 64, 4, 4, True, True)
    for rows, seq_len, expected in ((3072, 4096, pairs), (4096, 4096, pairs), (4224, 4096, pairs),
                                    (4256, 4096, narrow_pairs), (8192, 512, narrow_pairs),
                                    (16320, 2048, narrow_pairs), (16384, 512, fours), (16384, 4096, fours),
                                    (32768, 512, fours)):
        slow, fast = plans(25.0, rows, seq_len), plans(37.0, rows, seq_len)
        assert fast["vtrace"] == fast["lambda"] == expected, (rows, seq_len)
        changed = {name for name in fast if fast[name] != slow[name]}
        # GAE's own plans of slower memories begin above 8448 rows
        assert changed <= {"vtrace", "lambda"} | ({"gae", "gae+trunc"} if rows > 8448 else set()), (rows, seq_len)
        if 4224 < rows < 16384:
            assert fast["gae"][:4] == fast["gae+trunc"][:4] == (32, 128, 8, 2), (rows, seq_len)
    # rows ragged in whole tiles' steps or rows: masks, so the plans of slower memories
    for rows, seq_len in ((16384, 264), (16384, 4104), (16400, 512)):
        assert plans(37.0, rows, seq_len) == plans(25.0, rows, seq_len), (rows, seq_len)
    # ragged rows below 16384 keep direct scans in 32 x 64 x 4 pairs, masked (WHOLE_TILES off at launch)
    assert plans(37.0, 6152, 512)["vtrace"] == (32, 64, 4, 2, True, False)
    assert plans(37.0, 2048)["vtrace"] == plans(25.0, 2048)["vtrace"]


def test_time_major_bf16_tiles_on_slow_memory(monkeypatch, fresh_plans):
    """On GPUs of at most 30 GB/s of peak memory bandwidth per multiprocessor (an H100), bf16 V-trace and
    lambda-returns stored [T, N] take 32 x 64 x 4 pairs, direct and whole, above the rows that 32-row tiles cover
    with one program per multiprocessor up to 12287 rows, and 64 x 64 x 4 of four rows per thread the same way from
    10240 rows where the rows and steps fill whole tiles (lambda-returns: below 32768 rows); V-trace keeps maps in
    32 x 128 x 8 pairs at 4096-4224 rows."""

    def plans(rows, seq_len=4096):
        return bf16_time_major_plans(monkeypatch, rows, seq_len)

    narrow_pairs, fours = (32, 64, 4, 2, True, True), (64, 64, 4, 4, True, True)
    maps = (32, 128, 8, 2, False, False)
    for rows, seq_len, vtrace, lambda_returns in (
            (4096, 4096, maps, (32, 128, 8, 2, True, True)), (4224, 512, maps, (32, 128, 8, 2, True, True)),
            (4256, 2048, narrow_pairs, narrow_pairs), (10176, 2048, narrow_pairs, narrow_pairs),
            (10240, 2048, fours, fours), (12288, 512, fours, fours), (16320, 4096, fours, fours),
            (24576, 512, fours, fours)):
        found = plans(rows, seq_len)
        assert found["vtrace"] == vtrace, (rows, seq_len)
        assert found["lambda"] == lambda_returns, (rows, seq_len)
    # ragged steps below 12288 rows: the pairs, masked at launch; from 12288 rows the plans of before
    assert plans(10240, 520)["vtrace"] == (32, 64, 4, 2, True, False)
    assert plans(12352, 520)["vtrace"][4:] == (False, False)
    # lambda-returns from 32768 rows keep the halved tiles of narrow_many_rows, with maps and masks
    found = plans(32768, 512)
    assert found["lambda"] == (64, 32, 2, 4, False, False)
    assert found["vtrace"] == fours


def test_time_major_bf16_gae_tiles_on_slow_memory(monkeypatch, fresh_plans):
    """On GPUs of at most 30 GB/s of peak memory bandwidth per multiprocessor (an H100), bf16 GAE stored [T, N]
    takes 32 x 64 x 4 pairs, direct and whole, above the rows that 32 x 128 x 8 pairs cover with two programs per
    multiprocessor (8448 on 132) to 16383 rows; with truncations to 13311 rows, and from 13312 64 x 64 x 4 of four
    rows per thread the same way where the rows and steps fill whole tiles. Fewer rows, and any on faster memory,
    keep 32 x 128 x 8 pairs."""

    def plans(rows, seq_len=2048, dram_gbps_per_multiprocessor=25.0):
        found = bf16_time_major_plans(monkeypatch, rows, seq_len, dram_gbps_per_multiprocessor)
        return found["gae"], found["gae+trunc"]

    short, narrow_pairs, fours = (32, 128, 8, 2, True, True), (32, 64, 4, 2, True, True), (64, 64, 4, 4, True, True)
    for rows, seq_len, gae, truncated in (
            (6144, 2048, short, short), (8192, 512, short, short), (8448, 2048, short, short),
            (8480, 2048, narrow_pairs, narrow_pairs), (12288, 2048, narrow_pairs, narrow_pairs),
            (13280, 512, narrow_pairs, narrow_pairs), (13312, 2048, narrow_pairs, fours),
            (16320, 512, narrow_pairs, fours)):
        assert plans(rows, seq_len) == (gae, truncated), (rows, seq_len)
        assert plans(rows, seq_len, 37.0) == (short, short), (rows, seq_len)
    # ragged steps: the same tiles, masked at launch; from 13312 rows with truncations the plans of before
    assert plans(10240, 520) == ((32, 64, 4, 2, True, False), (32, 64, 4, 2, True, False))
    assert plans(14336, 520)[1] == (32, 128, 8, 2, True, False)
    # from 16384 rows the plans of before
    assert plans(16384, 512) == plans(16384, 512, 37.0)


def test_time_major_strided_groups_walk_tiles_of_64_steps_and_split_chunks_step_by_step():
    cpu = torch.device("cpu")
    walk = _launch.plan_tiles(8, 1 << 21, True, cpu, heavy=False, walk_split=_launch._GAE_WALK,
                              time_major_walk=_launch._TIME_MAJOR_SHORT_WALK,
                              strided_time_major=_launch.STRIDED_TIME_MAJOR)
    assert walk.walk and walk.strided_groups and walk.vec == 8
    assert (walk.block_rows, walk.block_time, walk.num_warps) == (8, 64, 2)
    # from 32 rows of float32 steps, tiles of 32 rows x 64 steps, 8 warps, two programs per multiprocessor
    def walk_of_64_rows(element_bytes, seq_len=1 << 18):
        return _launch.plan_tiles(64, seq_len, True, cpu, heavy=False, element_bytes=element_bytes,
                                  walk_split=_launch._LAMBDA_WALK, time_major_walk=_launch._TIME_MAJOR_SHORT_WALK,
                                  strided_time_major=_launch.STRIDED_TIME_MAJOR)

    wide = walk_of_64_rows(4)
    assert wide.walk and wide.strided_groups and wide.vec == 8
    assert (wide.block_rows, wide.block_time, wide.num_warps) == (32, 64, 8)
    assert wide.num_segments == 2 * 4 // 2  # two programs on each of 4 multiprocessors, two row tiles
    # 2-byte steps (bf16 values, uint8 flags) keep 16 x 64
    narrow = walk_of_64_rows(2)
    assert narrow.walk and narrow.strided_groups and (narrow.block_rows, narrow.block_time) == (16, 64)
    # and so do rows of no whole number of groups (read step by step)
    odd = walk_of_64_rows(4, (1 << 18) - 1)
    assert odd.walk and (odd.block_rows, odd.block_time) == (16, 64)
    split = _launch.plan_tiles(64, 4096, True, cpu, heavy=False, strided_time_major=_launch.STRIDED_TIME_MAJOR)
    assert split.split and not split.walk and not split.strided_groups and split.vec == 1


def recorded_meta(monkeypatch, launcher, *inputs) -> dict:
    """The compile options and constexprs a launcher would launch its kernel with, and its ``grid`` (nothing
    runs)."""
    seen = {}
    monkeypatch.setattr(_launch, "_launch", lambda kernel, grid, *args, **meta: seen.update(meta, grid=grid))
    launcher(*inputs)
    return seen


def test_time_split_chunks_by_kernel(monkeypatch):
    def split_plan(launcher, *inputs):
        seen = recorded_meta(monkeypatch, launcher, *inputs)
        assert seen["SPLIT"]
        return seen["BLOCK_TIME"], seen.get("VEC", 1), seen.get("maxnreg")

    # rows short enough that no kernel walks segments of several chunks (tests/test_walk.py)
    rows, seq_len = 1, 1 << 15
    x, flags, out = torch.randn(rows, seq_len), torch.zeros(rows, seq_len), torch.empty(rows, seq_len)
    # (chunk steps, steps per thread group, register cap); float32: groups of 4 steps
    # eligibility traces and prefix sums: 4096 steps step by step, capped; discounted returns: 4096, uncapped
    assert split_plan(_launch.episodic_scan, out, x, flags, None, 0.9, True) == (4096, 1, 64)
    assert split_plan(_launch.returns, out, x, None, flags, None, 0.99, 1.0, None) == (4096, 4, None)
    # lambda-returns and GAE: 2048, capped
    assert split_plan(_launch.returns, out, x, x, flags, None, 0.99, 0.95, None) == (2048, 4, 64)
    assert split_plan(_launch.gae, out, x, x, flags, None, 0.99, 0.95, None, x[:, 0]) == (2048, 4, 64)
    # V-trace: one row tile of float32 takes 2048-step chunks; several take 512 steps
    vtrace_args = (out, torch.empty_like(out), x, x, x, x, flags, None, 0.99, 1.0, 1.0, None, x[:, 0])
    assert split_plan(_launch.vtrace, *vtrace_args) == (2048, 4, 64)
    two = torch.randn(2, seq_len // 2)
    assert split_plan(_launch.vtrace, two, torch.empty_like(two), two, two, two, two, torch.zeros_like(two), None,
                      0.99, 1.0, 1.0, None, two[:, 0]) == (512, 4, 64)
    # float64: groups of 2 steps (16 bytes)
    double = [t.double() for t in vtrace_args[:6]]
    assert split_plan(_launch.vtrace, *double, flags, None, 0.99, 1.0, 1.0, None, x[:, 0].double())[:2] == (512, 2)


def test_batch_major_tiles_group_16_bytes_of_steps_per_thread():
    def vec(rows, seq_len, element_bytes, time_major=False, **kw):
        return _launch.plan_tiles(rows, seq_len, time_major, CPU, heavy=False, element_bytes=element_bytes, **kw).vec

    # one chunk per row: float32 4 steps, bf16 8 (two groups per thread), float64 2
    assert vec(4096, 512, 4) == 4 and vec(4096, 512, 2) == 8 and vec(4096, 512, 8) == 2
    # rows walked in several chunks per program, and the time split
    assert vec(4096, 4096, 4) == 4 and vec(1, 1 << 20, 4) == 4 and vec(1, 1 << 24, 4, walk_split=(512, 8)) == 4
    # bf16 chunks of 4 warps per 512 steps hold 4 steps per thread; short rows, shorter groups
    assert vec(4096, 4096, 2) == 4 and vec(16384, 2, 4) == 2 and vec(16384, 1, 4) == 1
    # time-major tiles and kernels that read step by step
    assert vec(4096, 512, 4, time_major=True) == 1 and vec(4096, 512, None) == 1


def launch_meta(monkeypatch, launcher, *inputs) -> tuple:
    """(rows, steps, warps, steps per thread group) of the tile a launcher would launch."""
    seen = recorded_meta(monkeypatch, launcher, *inputs)
    return seen["BLOCK_ROWS"], seen["BLOCK_TIME"], seen["num_warps"], seen.get("VEC", 1)


def vtrace_inputs(rows: int, seq_len: int, dtype: torch.dtype) -> tuple:
    x, flags = torch.empty(rows, seq_len, dtype=dtype), torch.empty(rows, seq_len, dtype=torch.uint8)
    return (torch.empty_like(x), torch.empty_like(x), x, x, x, x, flags, None, 0.99, 1.0, 1.0, None, x[:, 0])


def test_short_rows_pack_256_steps_into_one_warp(monkeypatch):
    def tiles(rows, seq_len, dtype=torch.float32):
        x, flags, out = (torch.empty(rows, seq_len, dtype=dtype), torch.empty(rows, seq_len, dtype=torch.uint8),
                         torch.empty(rows, seq_len, dtype=dtype))
        return {
            "gae": launch_meta(monkeypatch, _launch.gae, out, x, x, flags, None, 0.99, 0.95, None, x[:, 0]),
            "lambda": launch_meta(monkeypatch, _launch.returns, out, x, x, flags, None, 0.99, 0.95, None),
            "discounted": launch_meta(monkeypatch, _launch.returns, out, x, None, flags, None, 0.99, 1.0, None),
            "episodic": launch_meta(monkeypatch, _launch.episodic_scan, out, x, flags, None, 0.9, True),
        }

    # 128 steps: two rows per program of one warp (groups of 4 float32 steps, 8 bf16 steps)
    assert set(tiles(4096, 128).values()) == {(2, 128, 1, 4)}
    assert set(tiles(4096, 128, torch.bfloat16).values()) == {(2, 128, 1, 8)}
    # 64 steps: four rows; 256 steps: one row, as before (2 warps)
    assert set(tiles(8192, 64).values()) == {(4, 64, 1, 4)}
    assert set(tiles(4096, 256).values()) == {(1, 256, 2, 4)}
    # float32 V-trace keeps one row of 128 steps per warp; bf16 V-trace packs 256
    assert launch_meta(monkeypatch, _launch.vtrace, *vtrace_inputs(4096, 128, torch.float32)) == (1, 128, 1, 4)
    assert launch_meta(monkeypatch, _launch.vtrace, *vtrace_inputs(8192, 64, torch.float32)) == (2, 64, 1, 4)
    assert launch_meta(monkeypatch, _launch.vtrace, *vtrace_inputs(4096, 128, torch.bfloat16)) == (2, 128, 1, 8)
    # the gradient kernels and the plain recurrence keep 128
    assert _launch.plan_tiles(4096, 128, False, CPU, heavy=False, element_bytes=4).block_rows == 1


def test_bf16_vtrace_warps(monkeypatch):
    def tile(rows, seq_len):
        return launch_meta(monkeypatch, _launch.vtrace, *vtrace_inputs(rows, seq_len, torch.bfloat16))

    # one chunk per row: one 16-byte vector per thread (GAE: two)
    assert tile(16384, 512) == (1, 512, 2, 8) and tile(512, 1024) == (1, 1024, 4, 8)
    x, flags = torch.empty(16384, 512, dtype=torch.bfloat16), torch.empty(16384, 512, dtype=torch.uint8)
    assert launch_meta(monkeypatch, _launch.gae, torch.empty_like(x), x, x, flags, None, 0.99, 0.95, None,
                       x[:, 0]) == (1, 512, 1, 8)
    # rows of up to 4096 steps whose length is a power of two: one chunk, up to 8 warps
    assert tile(4096, 2048) == (1, 2048, 8, 8) and tile(4096, 4096) == (1, 4096, 8, 8)
    # other lengths walk 512-step chunks, one warp per chunk; float32 keeps 4 warps per chunk
    assert tile(4096, 3000) == (1, 512, 1, 8) and tile(4096, 8192) == (1, 512, 1, 8)
    assert launch_meta(monkeypatch, _launch.vtrace, *vtrace_inputs(4096, 4096, torch.float32)) == (1, 512, 4, 4)


def test_bf16_gae_with_truncations_takes_one_vector_per_thread(monkeypatch):
    def tile(rows, seq_len, dtype=torch.bfloat16):
        x, flags = torch.empty(rows, seq_len, dtype=dtype), torch.empty(rows, seq_len, dtype=torch.uint8)
        return launch_meta(monkeypatch, _launch.gae, torch.empty_like(x), x, x, flags, flags, 0.99, 0.95, x, None)

    # 256 steps per warp up to 8 warps (without truncations: two vectors, 512 steps per warp)
    assert tile(16384, 512) == (1, 512, 2, 8) and tile(4096, 1024) == (1, 1024, 4, 8)
    assert tile(4096, 2048) == (1, 2048, 8, 8) and tile(4096, 4096) == (1, 4096, 8, 8)
    # float32 keeps 128 steps per warp, up to 16 warps
    assert tile(4096, 1024, torch.float32) == (1, 1024, 8, 4) and tile(4096, 4096, torch.float32) == (1, 4096, 16, 4)


def test_episodic_scans_of_many_rows_take_one_chunk_of_up_to_4096_steps(monkeypatch):
    def tile(rows, seq_len, dtype=torch.float32):
        x, flags = torch.empty(rows, seq_len, dtype=dtype), torch.empty(rows, seq_len, dtype=torch.bool)
        plan = recorded_meta(monkeypatch, _launch.episodic_scan, torch.empty_like(x), x, flags, None, 0.9, True)
        return plan["BLOCK_TIME"], plan["num_warps"], plan["SPLIT"], plan["PREFETCH"]

    # float32, however many rows (few rows took one chunk before, through the time split's 4096-step chunks)
    assert tile(4096, 4096) == (4096, 8, False, False) and tile(4, 2048) == (2048, 8, False, False)
    assert tile(4096, 3000) == (4096, 8, False, False) and tile(4096, 1024) == (1024, 8, False, False)
    # longer rows walk 512-step chunks, or split time where the rows are few; float64 keeps the walk
    assert tile(4096, 8192) == (512, 4, False, True) and tile(4, 8192)[2]
    assert tile(4096, 4096, torch.float64) == (512, 4, False, True)


def test_narrow_steps_walk_1024_step_chunks(monkeypatch):
    def walk(seq_len, dtype=torch.bfloat16):
        x, flags = torch.empty(1, seq_len, dtype=dtype), torch.empty(1, seq_len, dtype=torch.uint8)
        gae_meta = recorded_meta(monkeypatch, _launch.gae, torch.empty_like(x), x, x, flags, None, 0.99, 0.95, None,
                                 x[:, 0])
        vtrace_meta = recorded_meta(monkeypatch, _launch.vtrace, *vtrace_inputs(1, seq_len, dtype))
        return [(meta["WALK"], meta["BLOCK_TIME"], meta["VEC"], meta["num_warps"], meta["maxnreg"])
                for meta in (gae_meta, vtrace_meta)]

    # bf16 values with uint8 flags: one 16-byte vector of 8 steps per thread, 6 (GAE) and 4 (V-trace)
    # programs per multiprocessor, registers capped at their share
    assert walk(2**21) == [(True, 1024, 8, 4, 80), (True, 1024, 8, 4, 128)]
    # float32 keeps 512-step chunks; V-trace's single row walks with 5 programs per multiprocessor
    # (_VTRACE_ONE_ROW_WALK), so its cap is 96 registers
    assert walk(2**21, torch.float32) == [(True, 512, 4, 4, 64), (True, 512, 4, 4, 96)]
    # rows too short for segments of 8 chunks of 1024 steps (on 4 multiprocessors: 128 chunks in 24
    # segments) keep walking 512-step ones where those make segments of 8 (256 chunks in 32 segments)
    assert walk(2**17)[0] == (True, 512, 4, 4, 64)


def retrace_launches(num_actions: int, rows: int, seq_len: int, out_dtype: torch.dtype,
                     input_dtype: torch.dtype = torch.float32) -> dict:
    """{kernel name: the compile options and constexprs} of the kernels Retrace's launcher would launch."""
    seen = {}

    def record(kernel, grid, *args, **meta):
        seen[kernel.fn.__name__] = meta

    # nothing is launched, so the values are never read: uninitialised memory is not touched at all
    probs = torch.empty((rows, seq_len, num_actions), dtype=input_dtype)
    shape = (rows, seq_len)
    out = [torch.empty(shape, dtype=out_dtype), torch.empty(shape, dtype=out_dtype)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_launch, "_launch", record)
        _launch.retrace(*out, probs, torch.empty(shape), torch.empty(shape), torch.empty(rows, seq_len, num_actions),
                        torch.empty(shape, dtype=torch.int64), torch.empty(shape), torch.empty(shape),
                        torch.empty(shape), 0.99, 0.95, 1.0, 1.0)
    return seen


def retrace_launch_meta(monkeypatch, num_actions: int, rows: int = 64, seq_len: int = 600, **override) -> dict:
    """The compile options and constexprs of Retrace's one-pass kernel (float32 compute, bf16 outputs)."""
    with _launch.tile_override(retrace_kernels="one-pass", **override):
        return retrace_launches(num_actions, rows, seq_len, torch.bfloat16)["retrace_kernel"]


def test_retrace_fused_rows_of_128_steps_with_large_action_groups():
    """Fused rows of 65-128 steps hold one step per thread (4 warps) with one group of 32 actions (17 or more);
    fewer actions and other rows keep one warp per 128 steps in vectors; tile_override wins."""
    def tile(num_actions, rows, seq_len):
        launches = retrace_launches(num_actions, rows, seq_len, torch.float32)
        assert list(launches) == ["retrace_scan_kernel"] and launches["retrace_scan_kernel"]["REDUCE"]
        meta = launches["retrace_scan_kernel"]
        return meta["num_warps"], meta["VEC"]

    assert tile(18, 64, 128) == tile(18, 64, 100) == tile(40, 64, 128) == (4, 1)
    assert tile(16, 64, 128) == tile(4, 64, 128) == (1, 4)
    assert [tile(18, 64, seq_len) for seq_len in (256, 512, 1024)] == [(2, 4), (4, 4), (8, 4)]
    # shorter rows, packed several to a program, keep their tiles
    assert tile(18, 64, 32) == tile(4, 64, 32)
    with _launch.tile_override(num_warps=1):
        assert tile(18, 64, 128) == (1, 4)


def test_retrace_kernels_by_shape_and_output_dtype():
    fused, two = ["retrace_scan_kernel"], ["retrace_actions_kernel", "retrace_scan_kernel"]
    # the first pass of 17-31 actions reads flat blocks
    flat_two = ["retrace_flat_actions_kernel", "retrace_scan_kernel"]

    def halves(launches):
        return {meta["HALVES"] for meta in launches.values()}

    # rows of up to 1024 steps in one chunk: the fused kernel; longer rows and splits: two passes
    launches = retrace_launches(4, 64, 600, torch.float32)
    assert list(launches) == fused
    assert launches["retrace_scan_kernel"]["REDUCE"]
    assert list(retrace_launches(4, 16, 1024, torch.float32)) == fused
    launches = retrace_launches(4, 64, 1025, torch.float32)
    assert list(launches) == two
    # the scan of rows not split in time reads no per-action tensor: one compiled kernel for any grouping
    scan = launches["retrace_scan_kernel"]
    assert not scan["WALK"] and (scan["ACTION_LANES"], scan["ACTION_PASSES"], scan["SUB_STEPS"]) == (1, 1, 1)
    # a time split walks segments: of up to 4 actions in the fused kernel (128 chunks of 512 steps, 8
    # programs per row on 4 multiprocessors), which loads each next chunk's per-action tiles ahead
    launches = retrace_launches(4, 2, 1 << 16, torch.float32)
    assert list(launches) == fused
    scan = launches["retrace_scan_kernel"]
    assert scan["WALK"] and scan["REDUCE"] and scan["AHEAD"] and scan["BLOCK_TIME"] == 512
    # rows too short for segments of 8 such chunks: the fused kernel, one 512-step chunk (4 warps) per
    # program; more actions keep two passes of one chunk per program
    for seq_len in (1 << 14, 1 << 13):
        launches = retrace_launches(4, 2, seq_len, torch.float32)
        assert list(launches) == fused
        scan = launches["retrace_scan_kernel"]
        assert scan["SPLIT"] and not scan["WALK"] and scan["REDUCE"] and scan["BLOCK_TIME"] == 512
        assert scan["num_warps"] == 4
    launches = retrace_launches(18, 2, 1 << 14, torch.float32)
    assert list(launches) == flat_two and not launches["retrace_scan_kernel"]["WALK"]
    # whose scan takes 1024-step chunks of 8 warps, not 2048
    scan = launches["retrace_scan_kernel"]
    assert (scan["BLOCK_TIME"], scan["num_warps"]) == (1024, 8) and scan["SPLIT"]
    # of more actions in two passes (256 chunks of 256 steps, 16 programs per row); the redo of a segment's
    # head reduces the per-action tiles again, so the scan takes the real grouping
    launches = retrace_launches(18, 2, 1 << 16, torch.float32)
    assert list(launches) == flat_two
    scan = launches["retrace_scan_kernel"]
    assert scan["WALK"] and not scan["REDUCE"] and not scan["AHEAD"] and scan["BLOCK_TIME"] == 256
    assert (scan["ACTION_LANES"], scan["ACTION_PASSES"]) == (2, 16) and scan["SUB_STEPS"] > 1
    # outputs as wide as the compute dtype (or wider) hold E and the ratios as they are
    for out_dtype, input_dtype in ((torch.float32, torch.float32), (torch.float64, torch.float32),
                                   (torch.float64, torch.float64)):
        assert halves(retrace_launches(4, 64, 600, out_dtype, input_dtype)) == {False}
    # half as wide: E in the two halves of its bits
    for out_dtype, input_dtype in ((torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                   (torch.float32, torch.float64)):
        launches = retrace_launches(4, 64, 600, out_dtype, input_dtype)
        assert halves(launches) == {True}
        assert list(launches) == fused
        assert halves(retrace_launches(4, 2, 1 << 16, out_dtype, input_dtype)) == {True}
    # narrower still (float64 compute, 16-bit outputs): one pass
    assert list(retrace_launches(4, 64, 600, torch.bfloat16, torch.float64)) == ["retrace_kernel"]
    with _launch.tile_override(retrace_kernels="one-pass"):
        assert list(retrace_launches(4, 64, 600, torch.float32)) == ["retrace_kernel"]
    with _launch.tile_override(retrace_kernels="two-pass"):
        launches = retrace_launches(4, 64, 600, torch.bfloat16)
        assert list(launches) == two
        assert not launches["retrace_scan_kernel"]["REDUCE"] and not launches["retrace_scan_kernel"]["WALK"]
    with _launch.tile_override(retrace_kernels="fused"):
        split = retrace_launches(4, 2, 1 << 16, torch.float32)
        assert list(split) == fused and split["retrace_scan_kernel"]["WALK"] and split["retrace_scan_kernel"]["REDUCE"]
        # its walks load each next chunk's per-action tiles ahead where the actions fit one group (up to 32)
        assert split["retrace_scan_kernel"]["AHEAD"]
        assert not retrace_launches(40, 2, 1 << 16, torch.float32)["retrace_scan_kernel"]["AHEAD"]
        assert not retrace_launches(4, 64, 600, torch.float32)["retrace_scan_kernel"]["AHEAD"]


def test_time_major_retrace_splits_walk_or_take_one_pass():
    def kernels(rows, seq_len, **override):
        probs = torch.zeros(seq_len, rows, 4).transpose(0, 1)
        steps = torch.zeros(seq_len, rows).t()
        out = [torch.empty(seq_len, rows).t() for _ in range(2)]
        seen = []
        with pytest.MonkeyPatch.context() as patch, _launch.tile_override(**override):
            patch.setattr(_launch, "_launch", lambda kernel, grid, *args, **meta: seen.append(kernel.fn.__name__))
            _launch.retrace(*out, probs, steps, steps, probs, steps.long(), steps, steps, steps, 0.99, 0.95, 1.0, 1.0)
        return seen

    # [T, N] buffers of few rows split time: two passes where the scan walks segments of 8 chunks or
    # more (64 x 16384 on the CPU's 4 multiprocessors: 4 row tiles of 16 rows in tiles of 4 warps, 4
    # programs per multiprocessor, so 4 segments of 64 chunks of 64 steps each), the one-pass kernel
    # where it would chain one chunk per program (64 x 1024: segments of 4 chunks); of many rows: two passes
    assert kernels(64, 16384) == ["retrace_actions_kernel", "retrace_scan_kernel"]
    assert kernels(64, 1024) == ["retrace_kernel"]
    assert kernels(4096, 128) == ["retrace_actions_kernel", "retrace_scan_kernel"]
    assert kernels(4096, 128, retrace_kernels="fused") == ["retrace_scan_kernel"]
    assert kernels(64, 1024, retrace_kernels="two-pass") == ["retrace_actions_kernel", "retrace_scan_kernel"]


def test_retrace_two_pass_plans():
    # the first pass: 17-31 actions in flat blocks of whole steps, 512 values (256 of float64) in one warp;
    # other counts of actions in pairs across lanes, ~4096 values per tile; the second: V-trace's kind of
    # tiles, rows of up to 4096 steps in one chunk of up to 16 warps
    with _launch.tile_override(retrace_kernels="two-pass"):
        flat = retrace_launches(18, 4096, 4096, torch.float32)["retrace_flat_actions_kernel"]
        flat64 = retrace_launches(18, 4096, 4096, torch.float64, torch.float64)["retrace_flat_actions_kernel"]
        flat_big = retrace_launches(31, 4096, 4096, torch.float32)["retrace_flat_actions_kernel"]
    assert (flat["BLOCK_STEPS"], flat["BLOCK_VALUES"], flat["num_warps"], flat["ROW_MAJOR"]) == (28, 512, 1, True)
    assert (flat64["BLOCK_STEPS"], flat64["BLOCK_VALUES"], flat64["num_warps"]) == (14, 256, 1)
    assert (flat_big["BLOCK_STEPS"], flat_big["BLOCK_VALUES"]) == (16, 512)
    # 2^31 values or more keep the tiles (the flat kernel's bound on its values is a 32-bit product)
    def flat_plan(rows, steps):
        per_action, per_step = (torch.empty(rows, steps, 18, device="meta"), torch.empty(rows, steps, device="meta"))
        return _launch._retrace_flat_plan(per_action, per_action, per_step, per_step, torch.float32)

    assert flat_plan(2**21 * 113 // 2, 1) == (28, 512) and flat_plan(1, 2**31 // 18 + 1) is None
    # 16-bit per-action tensors keep the tiles
    with _launch.tile_override(retrace_kernels="two-pass"):
        assert "retrace_actions_kernel" in retrace_launches(18, 4096, 4096, torch.bfloat16, torch.bfloat16)
    with _launch.tile_override(retrace_kernels="two-pass", retrace_flat_values=0):
        wide = retrace_launches(18, 4096, 4096, torch.float32)
    assert (wide["retrace_actions_kernel"]["ACTION_LANES"], wide["retrace_actions_kernel"]["ACTION_PASSES"]) == (2, 16)
    assert wide["retrace_actions_kernel"]["BLOCK_TIME"] == 128
    scan = wide["retrace_scan_kernel"]
    assert (scan["BLOCK_TIME"], scan["num_warps"], scan["SPLIT"], scan["VEC"]) == (4096, 16, False, 4)
    with _launch.tile_override(retrace_kernels="two-pass"):
        few = retrace_launches(4, 16384, 512, torch.float32)["retrace_actions_kernel"]
    assert (few["ACTION_LANES"], few["ACTION_PASSES"], few["BLOCK_ROWS"] * few["BLOCK_TIME"]) == (2, 2, 1024)


def test_retrace_programs_that_walk_chunks(monkeypatch):
    # up to 4 actions: loading ahead, 128 registers; 17-32 actions: no loading ahead, 128 registers
    few = retrace_launch_meta(monkeypatch, 4)
    assert not few["SPLIT"] and few["PREFETCH"] and few["maxnreg"] == 128
    many = retrace_launch_meta(monkeypatch, 18)
    assert not many["SPLIT"] and not many["PREFETCH"] and many["maxnreg"] == 128
    # 8 actions: unmeasured, the compiler's choice; a split: no cap
    assert "maxnreg" not in retrace_launch_meta(monkeypatch, 8)
    split = retrace_launch_meta(monkeypatch, 18, rows=2, seq_len=4096)
    assert split["SPLIT"] and "maxnreg" not in split
    assert retrace_launch_meta(monkeypatch, 18, prefetch=True)["PREFETCH"]


def test_only_retrace_programs_can_skip_loading_ahead(monkeypatch):
    # the other kernels' loops take each next chunk from the load ahead, so the override leaves them loading
    with _launch.tile_override(prefetch=False):
        rows = _launch.plan_tiles(4096, 4096, False, CPU, heavy=False, element_bytes=4)
        assert rows.num_chunks > 1 and rows.prefetch
    assert not retrace_launch_meta(monkeypatch, 4, prefetch=False)["PREFETCH"]
    assert retrace_launch_meta(monkeypatch, 4)["PREFETCH"]


def test_row_pairs_where_the_plan_takes_them(monkeypatch, fresh_plans):
    """Two neighbouring rows per thread (STRIDED_GROUPS = 2) for 2-byte steps from 3072 rows, V-trace of
    float32 steps from 16384 rows, GAE with truncations of float32 steps at 3072-4224 rows (of at least 1536
    steps), lambda-returns of float32 steps at 2048-4095 rows and walks of float32 eligibility traces and prefix
    sums; one row per thread elsewhere, and wherever a tensor of the launch has rows that do not pair up."""
    plan_for_gpu(monkeypatch)  # an H100

    def plan(launcher, *inputs):
        seen = {}

        def record(kernel, grid, *args, **meta):
            seen.update(_launch._grouped_meta(args, meta), grid=grid)

        monkeypatch.setattr(_launch, "_launch", record)
        launcher(*inputs)
        return seen["BLOCK_ROWS"], seen["BLOCK_TIME"], seen["num_warps"], seen.get("STRIDED_GROUPS"), seen["grid"]

    def stored(rows, seq_len, dtype=torch.float32):
        return torch.zeros(seq_len, rows, dtype=dtype).t()

    def calls(rows, seq_len, values=torch.float32, flags=torch.float32):
        x, done, out = stored(rows, seq_len, values), stored(rows, seq_len, flags), stored(rows, seq_len, values)
        return {
            "gae": plan(_launch.gae, out, x, x, done, None, 0.99, 0.95, None, x[:, 0]),
            "vtrace": plan(_launch.vtrace, out, stored(rows, seq_len, values), x, x, x, x, done, None, 0.99, 1.0,
                           1.0, None, x[:, 0]),
            "lambda": plan(_launch.returns, out, x, x, done, done, 0.99, 0.95, x),
            "episodic": plan(_launch.episodic_scan, out, x, done, None, 0.9, True),
        }

    low = {"values": torch.bfloat16, "flags": torch.uint8}
    at_8192 = calls(8192, 2048, **low)
    assert at_8192.pop("vtrace") == at_8192.pop("lambda") == (32, 64, 4, 2, (256,))
    for name, got in at_8192.items():
        assert got == (32, 128, 8, 2, (256,)), name
    # 4096 rows: one program of 32 rows in pairs per multiprocessor (test_time_major_bf16_tiles_of_one_wave_...)
    at_4096 = calls(4096, 4096, **low)
    assert at_4096["gae"] == at_4096["episodic"] == (32, 256, 16, 2, (128,))
    assert at_4096["vtrace"] == at_4096["lambda"] == (32, 128, 8, 2, (128,))
    x, done = stored(4096, 4096, torch.bfloat16), stored(4096, 4096, torch.uint8)
    assert plan(_launch.gae, x, x, x, done, done, 0.99, 0.95, x, None) == (32, 128, 8, 2, (128,))
    at_16384 = calls(16384, 512, **low)
    assert at_16384.pop("lambda") == at_16384.pop("vtrace") == (64, 64, 4, 4, (256,))
    for name, got in at_16384.items():
        assert got == (32, 64, 4, 2, (512,)), name
    # GAE with truncations and lambda-returns: four rows per thread from 16384 rows, half the steps
    # and warps from 32768
    x, done = stored(16384, 512, torch.bfloat16), stored(16384, 512, torch.uint8)
    assert plan(_launch.gae, x, x, x, done, done, 0.99, 0.95, x, None) == (64, 64, 4, 4, (256,))
    assert calls(32768, 256, **low)["lambda"] == (64, 32, 2, 4, (512,))
    x, done = stored(32768, 256, torch.bfloat16), stored(32768, 256, torch.uint8)
    assert plan(_launch.gae, x, x, x, done, done, 0.99, 0.95, x, None) == (64, 32, 2, 4, (512,))
    # a time stride of 2 mod 4 (the first 16384 envs of a [T, 16386] buffer): pairs in the same tiles
    wide = torch.zeros(512, 16386, dtype=torch.uint8)[:, :16384].t()
    x = torch.zeros(512, 16386, dtype=torch.bfloat16)[:, :16384].t()
    assert plan(_launch.returns, x, x, x, wide, wide, 0.99, 0.95, x) == (64, 64, 4, 2, (256,))
    # 2048 rows: tiles of 16 rows, one row per thread
    assert {got[0] for got in calls(2048, 4096, **low).values()} == {16}
    assert {got[3] for got in calls(2048, 4096, **low).values()} == {True}
    # bf16 values with float32 flags: 4-byte steps (GAE without truncations: one program of 32 x 256
    # per multiprocessor)
    assert calls(4096, 4096, values=torch.bfloat16)["gae"] == (32, 256, 16, True, (128,))
    assert calls(4096, 4096, values=torch.bfloat16)["vtrace"] == (32, 64, 8, True, (128,))
    # 4104 rows do not pair up (not a multiple of 16): the planned tile, one row per thread
    assert calls(4104, 4096, **low)["gae"][3] is True
    # float32: V-trace from 16384 rows in pairs of 64 x 32 x 4, the others one row per thread
    many = calls(16384, 512)
    assert many["vtrace"] == (64, 32, 4, 2, (256,))
    assert many["gae"] == (32, 32, 4, True, (512,))
    # float32 GAE with truncations at 4096 rows: one program of 32 x 128 x 8 pairs per multiprocessor
    x, done = stored(4096, 4096), stored(4096, 4096)
    assert plan(_launch.gae, x, x, x, done, done, 0.99, 0.95, x, None) == (32, 128, 8, 2, (128,))
    # float32 lambda-returns at 3072 rows: one program of 32 x 128 x 8 pairs per multiprocessor, 96 in all
    assert calls(3072, 4096)["lambda"] == (32, 128, 8, 2, (96,))
    # walks of 64 rows: eligibility traces in pairs, 32 x 128 x 8, two programs per multiprocessor
    walks = calls(64, 1 << 18)
    assert walks["episodic"][:4] == (32, 128, 8, 2)
    # 2 row tiles x 132 segments of 2048 chunks: 16 chunks each, 128 segments
    assert walks["episodic"][4] == (2 * 128,)
    assert walks["gae"][:4] == (32, 64, 8, True)


def test_memory_bandwidth_per_multiprocessor_from_the_driver(monkeypatch):
    # peak bandwidth = 2 transfers a clock (kHz) x the bus (bits) / 8, over the multiprocessors; an H100 SXM's
    # figures (2619 MHz, 5120 bits, 132 multiprocessors) make 25.4 GB/s, under the 30 of faster memories' rules
    properties = {"mem_clock_rate": 2_619_000, "mem_bus_width": 5120}
    utils = types.SimpleNamespace(get_device_properties=lambda index: properties)
    monkeypatch.setattr(_launch, "driver", types.SimpleNamespace(active=types.SimpleNamespace(utils=utils)))
    monkeypatch.setattr(_launch, "_multiprocessors", lambda device: 132)
    per_multiprocessor = _launch._dram_gbps_per_multiprocessor.__wrapped__
    assert per_multiprocessor(torch.device("cuda", 0)) == pytest.approx(2 * 2.619e9 * 5120 / 8 / 1e9 / 132)
    assert per_multiprocessor(torch.device("cuda", 0)) == pytest.approx(25.4, abs=0.05)
    properties.clear()  # a driver that reports neither: the rules of slower memories
    assert per_multiprocessor(torch.device("cuda", 0)) == 0.0
    assert per_multiprocessor(torch.device("cpu")) == 0.0
