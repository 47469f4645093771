"""Host side of the Triton path: tile plans, the look-back workspace and one launcher per kernel.

Everything here receives ``[rows, T]`` (``[rows, T, A]``) views from ``rl_triton.ops`` and
reads them in place through their strides; outputs are written through their strides too.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import dataclasses
import functools
import math
import threading
from collections.abc import Callable, Iterator

import numpy as np
import torch
import triton
import triton.language as tl
from triton import knobs
from triton.runtime import driver

from rl_triton import _packed_launch, _replay
from rl_triton._dispatch import interpreter_enabled
from rl_triton._launcher_builds import building_launchers_aside
from rl_triton.kernels.gae import BOOTSTRAP_FULL, BOOTSTRAP_LAST, BOOTSTRAP_NONE, gae_kernel
from rl_triton.kernels.prefix_sum import episodic_scan_kernel
from rl_triton.kernels.recurrence import linear_recurrence_kernel
from rl_triton.kernels.retrace import (
    retrace_actions_kernel,
    retrace_flat_actions_kernel,
    retrace_kernel,
    retrace_scan_kernel,
)
from rl_triton.kernels.returns import returns_kernel
from rl_triton.kernels.vtrace import vtrace_kernel

# Tile plans measured on an H200 (BENCHMARKS.md): one row of 512 steps per program is the sweet
# spot for many rows; time-split programs take longer chunks so fewer look-backs are chained.
_MANY_ROWS_BLOCK_TIME = 512
# GAE scans rows of up to 4096 steps in one chunk per program: at 4096x4096 on an H200, 77-79% of
# the copy bandwidth (float32; bf16 67%) against 64% (bf16 29%) for 512-step chunks walked with
# prefetch (benchmarks/NOTES.md); with truncations and bootstrap values (more loads per step) it takes
# up to 16 warps (4096x4096: 65-70% with 8, 78-81% with 16). V-trace keeps more values live per step:
# one chunk of up to 1024 steps (4096x1024: 68% -> 77%; at 4096 steps one chunk was slower)
GAE_SINGLE_CHUNK_STEPS = 4096
VTRACE_SINGLE_CHUNK_STEPS = 1024
# Steps of 2 bytes (bf16/fp16 values, bool/uint8 flags) keep fewer bytes live per step: V-trace then scans
# rows of up to 4096 steps in one chunk, one vector per thread up to 8 warps, where the row length is a
# power of two. Measured on an H200, bf16 values with uint8 flags, % of the copy ceiling, 512-step chunks
# walked by one warp -> one chunk, two interleaved runs with 3 input sets rotated
# (benchmarks/results/h200-2026-12-02-run25-one-chunk-ab.txt): 4096x4096 78.4 / 78.3 -> 82.4 / 84.7,
# 2048x4096 60.7 / 61.2 -> 71.9 / 74.6, 1024x4096 57.9 / 58.1 -> 63.4 / 66.7, 4096x2048 71.8 / 71.9 -> 78.0 /
# 80.4, 8192x2048 78.5 / 79.4 -> 85.8 / 83.1; with truncations 81.4 / 81.3 -> 86.4 / 87.2 at 4096x4096, 76.2 /
# 76.3 -> 74.7 / 77.0 at 4096x2048. Rows of 3000 steps, padded to a 4096-step chunk, lost (72.3 / 72.9 ->
# 65.8 / 67.1) and keep the walk.
VTRACE_NARROW_SINGLE_CHUNK_STEPS = 4096
# Eligibility traces and prefix sums over float32 steps scan rows of up to 4096 steps in one chunk per
# program (up to 8 warps) instead of walking 512-step chunks (as the time split of few rows, whose chunks
# are 4096 steps, already did). Float64 and 2-byte steps were not measured and keep the walk. Measured
# on an H200 as above, float32 flags: eligibility traces 4096x4096 86.6 / 88.0 -> 91.6 / 94.0, 8192x4096
# 94.5 / 95.6 -> 96.6 / 98.4, 2048x4096 77.2 / 79.7 -> 82.0 / 85.7, 4096x2048 78.0 / 80.5 -> 84.5 / 87.6,
# 4096x3000 82.0 / 83.3 -> 84.2 / 87.4, 1024x4096 69.7 / 72.7 -> 69.1 / 73.6; prefix sums 4096x4096 87.9 /
# 87.6 -> 90.8 / 93.2, 2048x4096 79.6 / 79.7 -> 83.2 / 84.4, 4096x2048 79.9 / 80.0 -> 84.1 / 87.1, 1024x4096
# 72.5 / 73.1 -> 71.9 / 75.0. Rows longer than 4096 steps keep the walk (one-chunk programs of 4096 steps
# walking 2048x8192 and 1024x16384 read 55-65% against 78-83%, -run25-episodic-plans.txt).
EPISODIC_SINGLE_CHUNK_STEPS = 4096
# GAE with truncations or bootstrap values (five loads per step) over 2-byte steps, one chunk per row:
# one 16-byte vector per thread up to 8 warps, instead of two. Measured as above: 4096x1024 66.9 / 69.6 ->
# 69.5 / 73.9, 8192x1024 76.6 / 78.5 -> 80.2 / 84.0, 4096x2048 75.3 / 75.6 -> 79.4 / 82.5; equal within a
# run's spread at 16384x512 (81.7 / 83.6 -> 81.5 / 85.3), 32768x256 and 4096x4096 (85.2 / 86.3 -> 83.7 /
# 86.7, 8 warps either way). Rows walked in chunks keep 128 steps per warp.
GAE_HEAVIER_NARROW_STEPS_PER_WARP = (256, 128)
_SPLIT_BLOCK_TIME = 2048
_HEAVY_SPLIT_BLOCK_TIME = 512
# Time-split chunks of the kernels with the fewest loads per step. Measured on an H200, % of the copy
# bandwidth at 64x16384 / 8x131072 / 8x2^21 / 1x2^24 (benchmarks/results/h200-2026-11-30-run5-split-*.txt):
# eligibility traces 27 / 24 / 43 / 29 with 2048 steps -> 27 / 28 / 53 / 40 with 4096; prefix sums
# 28 / 23 / 42 / 29 -> 28 / 27 / 51 / 39; discounted returns 23 / 19 / 32 / 25 -> 23 / 23 / 33 / 30
# with 4096 steps and no register cap (18 / 17 / 33 / 32 with the cap of 64). GAE and lambda-returns
# were slower with 4096 (GAE 29 / 25 / 40 / 31 -> 16 / 16 / 21 / 29) and keep 2048.
_LIGHT_SPLIT_BLOCK_TIME = 4096
# Short rows are packed, several to a program of one warp, so that the warp holds at least this many
# steps. 256 for the kernels measured with it, against 128 (one row of 128 steps per program), on an
# H200, % of the copy bandwidth at 4096x128 / 16384x128 (benchmarks/results/h200-2026-11-30-run14-short-rows.txt):
# GAE 41.9 / 61.8 -> 53.1 / 78.6, with truncations 47.8 / 83.9 -> 63.0 / 82.3, lambda-returns 52.4 / 83.2 ->
# 65.9 / 82.8, discounted returns 31.2 / 46.9 -> 42.1 / 70.3, eligibility traces 29.9 / 46.8 -> 42.6 / 70.2,
# prefix sums 31.6 / 47.1 -> 42.9 / 71.1, bf16 GAE 17.7 / 27.4 -> 24.0 / 44.8, bf16 V-trace 31.2 / 49.5 ->
# 41.1 / 68.5; at 8192x64 (4 rows of 64 steps against 2) GAE 41.0 -> 48.8, eligibility traces 32.2 -> 41.1.
# Float32 V-trace keeps 128 (16384x128: 85.8 against 84.1; 8192x64: 63.2 against 58.4), and so do the
# kernels not measured with 256 (Retrace, the gradients, the plain recurrence).
_MIN_TILE_ELEMENTS = 128
PACKED_TILE_ELEMENTS = 256
# Steps per warp of V-trace with 2-byte inputs, batch-major (two 16-byte vectors per thread for the
# other kernels): one vector per thread where a row is one chunk, and one warp per 512-step chunk where
# a program walks its row. On an H200, % of the copy bandwidth, bf16 inputs and uint8 flags
# (benchmarks/results/h200-2026-11-30-run14-*.txt): 16384x512 72.8 / 75.9 -> 81.6 / 82.5 (1 -> 2
# warps, two runs); 4096x4096 65.8 / 65.6 -> 75.6 / 76.2 (4 warps -> 1); 4096x1024 equal (72.8 / 72.4).
VTRACE_NARROW_STEPS_PER_WARP = (256, 512)
# Time-major buffers are read as tiles of (rows, steps), 4 warps each, with every row's steps
# spread over many threads (16 rows x 64 steps: 4 contiguous rows per thread, one 16-byte vector, 4
# lanes along rows, 8 lanes and the warps along time), so a call runs many more threads than rows.
# The tile follows the number of programs it makes (measured on an H200, float32, % of the copy
# bandwidth; benchmarks/results/h200-2026-11-30-run5-time-major-tiles.txt):
#   - from 16384 rows, 32 x 32 (at least 512 programs, 128 contiguous bytes per step); at 16384x512,
#     against 16 x 64: GAE 63.8 -> 70.2, V-trace 62.0 -> 69.4, discounted returns 61.6 -> 68.5,
#     eligibility traces 63.1 -> 68.0, prefix sums 61.1 -> 66.2;
#   - from 8192 rows, 16 x 64 (32 x 32 would leave 256 programs: GAE 8192x1024 63.9% against 53.5%);
#     V-trace, five inputs per step, keeps enough loads in flight with 256 programs and takes 32 x 32
#     from 8192 rows (8192x1024: 63.7 -> 70.6), and from 16384 rows half tiles, 32 x 16 with 2 warps
#     (16384x512: 66.7-69.3 -> 77.3-77.4, 32768x256: 68.0 -> 72.7-73.3; -run5-time-major-warps.txt,
#     -run5-vtrace-time-major-ab.txt);
#   - below 8192 rows (fewer than 512 programs of 16 rows), 16 x 128 for the light kernels, whose
#     programs then keep more loads in flight; at 4096x4096, against 16 x 64: GAE 50.8 -> 61.5,
#     discounted returns 56.3 -> 64.1, eligibility traces 55.5 -> 60.2, prefix sums 56.0 -> 64.2;
#     V-trace keeps 16 x 64 (66.5% against 62.0%).
# (Round 4 had replaced 128 rows x 16 steps with 16 x 64: GAE 16384x512 48.0 -> 63.8, V-trace
# 56.8 -> 62.1; -run4-time-major-tiles.txt.) Below 2048 rows time is split too, in tiles of 64 rows
# x 32 steps. With 16 x 64 tiles the split had been faster at 1024-2048 rows (GAE 28-34% -> 34-38%);
# with the tiles above, not splitting 2048 rows is faster or equal (2048x2048: discounted returns
# 23.4% split -> 41.0%, V-trace 38.6 -> 43.4, GAE 38.7 -> 37.7), while 1024 rows still gain from the
# split (GAE 19.6 -> 27.7; -run5-time-major-split.txt). Retrace's per-action tiles keep 128 x 16
# and the split below 8192 rows (its actions already give each step several lanes).
# From 16384 rows, each kernel takes the tile measured best for it (float32, % of the copy bandwidth at
# 16384x512 / 32768x256 against 32 x 32 with 4 warps; benchmarks/results/h200-2026-11-30-run8-time-major-*.txt):
# with 2 warps, GAE 59-62 / 63 -> 68-69 / 64, lambda-returns 83 / 83 -> 88 / 83, discounted returns 55-57 /
# 60 -> 66-71 / 61, eligibility traces 56-58 / 59 -> 65-66 / 73, prefix sums 58 / 59 -> 66 / 74; GAE with
# truncations or bootstrap values 71 / 72 -> 79 / 77 with 16 x 32 and 1 warp (62 / 61 with 32 x 32 and 2).
# The gradient kernels and the plain recurrence were not measured there and keep 32 x 32 with 4 warps.
_TIME_MAJOR_MANY_ROWS = 16384
# direct scans were measured on tiles of fewer rows (StridedTimeMajor.direct_rows)
_DIRECT_MAX_ROWS = 2 * _TIME_MAJOR_MANY_ROWS
_LIGHT_TIME_MAJOR_MANY_ROWS = (32, 32, 2)
_GAE_HEAVIER_TIME_MAJOR_MANY_ROWS = (16, 32, 1)
_VTRACE_TIME_MAJOR_MANY_ROWS = (32, 16, 2)
_TIME_MAJOR_PROGRAMS = 512
_TIME_MAJOR_TILE_ELEMENTS = 1024
_TIME_MAJOR_UNSPLIT_ROWS = 2048
# Retrace's time-major tile: (rows, steps, fewest rows not split in time, warps)
RETRACE_TIME_MAJOR_TILE = (128, 16, 8192, 4)
_TIME_MAJOR_WARPS = 4
_TIME_MAJOR_SPLIT_BLOCK_TIME = 32
_TIME_MAJOR_SPLIT_BLOCK_ROWS = 64
_TIME_MAJOR_SPLIT_ELEMENTS_PER_WARP = 1024
# Time-major calls of few rows walk segments in tiles of 16 rows x 64 steps (fewer rows: all of
# them), 256 elements per warp. Measured on an H200, % of the copy bandwidth at 8x2^21 / 64x2^18 /
# 1024x2^14 stored [T, N], one chunk of 64 rows x 32 steps per program -> walked
# (benchmarks/results/h200-2026-11-30-run6-time-major-walk.txt): GAE 8.1 / 15.1 / 45.9 -> 39.6 / 51.3 /
# 52.6, V-trace 12.8 / 2.6 / 44.7 -> 44.8 / 44.3 / 45.7, discounted returns 6.1 / 11.0 / 26.0 -> 40.5 /
# 47.8 / 47.2, eligibility traces 5.7 / 12.0 / 36.0 -> 48.4 / 38.4 / 41.6. Tiles of 8 x 128, 16 x 128,
# 32 x 32, 32 x 64 and 16 x 64 with 2 warps were each better for some kernel and shape, none for all.
_TIME_MAJOR_WALK_TILE = (16, 64)
_TIME_MAJOR_WALK_ELEMENTS_PER_WARP = 256
# A time-major walk keeps the warps per multiprocessor of the kernel's walk plan with 2-warp tiles
# (8 rows x 64 steps): tiles of more warps take fewer programs, so the register budget of a thread
# (walks are capped at it, see _walk_register_budget) does not shrink with the tile.
_TIME_MAJOR_WALK_PLAN_WARPS = 2
# GAE with truncations and lambda-returns walked time-major tiles of 32 steps, 16 warps per
# multiprocessor (8 rows: 16 programs of one warp), before strided groups. Their launchers still pass
# it, but plan_tiles drops time_major_walk wherever strided_time_major is given, which these launchers
# always do: their walks take the strided walk tiles (StridedTimeMajor; 64 steps) instead, and this
# plan applies only to plans asked without strided groups. Measured on an H200, 8x2^21 stored [T, N],
# % of the copy bandwidth, 8 x 64 tiles of 2 warps -> 8 x 32 of 1 warp, 16 programs
# (benchmarks/results/h200-2026-12-01-run16-walk-caps-ab2.txt): GAE with truncations 49.0 -> 64.3,
# lambda-returns 59.3 -> 66.9; GAE without them 44.8 -> 44.0, V-trace 55.4 -> 43.3, discounted returns
# 45.9 -> 40.3, eligibility traces 52.2 -> 52.4 keep 64 steps. V-trace with 32 steps and 12 warps read
# 55.9 -> 60.9 at 8x2^21 but 56.5 -> 52.9 at 64x2^18 (-run16-time-major-vtrace.txt).
_TIME_MAJOR_SHORT_WALK = (32, 16)


def _rows_in(ranges: tuple[tuple[int, int] | None, tuple[int, int] | None], num_rows: int,
             element_bytes: int | None) -> bool:
    """Whether ``num_rows`` lies in the range [first, end) given for 2-byte steps (``ranges[0]``) or for
    4-byte steps (``ranges[1]``), whichever ``element_bytes`` names; None: no row count."""
    rows = {2: ranges[0], 4: ranges[1]}.get(element_bytes)
    return rows is not None and rows[0] <= num_rows < rows[1]


@dataclasses.dataclass(frozen=True)
class OneWaveTile:
    """A tile (rows, steps, warps, rows per thread) that calls of 4-byte steps in whole groups take where it makes
    one program per multiprocessor at most, from ``rows[0]`` rows below ``rows[1]``, on rows of at least
    ``min_steps`` steps (shorter rows read faster in the tiles of fewer rows)."""

    tile: tuple[int, int, int, int]
    rows: tuple[int, int] = (4096, 1 << 31)
    min_steps: int = 0

    def fits(self, num_rows: int, seq_len: int, multiprocessors: int) -> bool:
        return (self.rows[0] <= num_rows < self.rows[1] and seq_len >= self.min_steps
                and triton.cdiv(num_rows, self.tile[0]) <= multiprocessors)


@dataclasses.dataclass(frozen=True)
class StridedTimeMajor:
    """Time-major tiles read in strided groups: ``vec`` steps of one row per thread, each step loaded
    across the tile's rows (``kernels/scan.py: strided_offsets``). (rows, steps, warps) of the tiles of
    calls of at least ``_TIME_MAJOR_MANY_ROWS`` rows (``many_rows``) and of at least ``full_tile_rows``
    rows (``tile``). Fewer rows, from ``_STRIDED_TILE_MIN_ROWS``, take tiles of 16 rows
    (``_NARROW_STRIDED_TILE_ROWS``, twice as many programs as 32) where those programs fit two to a
    multiprocessor: ``narrow_warps`` warps where one program per multiprocessor covers the rows, half as
    many otherwise, each thread one group; where they do not fit, ``tile``. Fewer rows than
    ``_STRIDED_TILE_MIN_ROWS`` split time: calls of at least ``walk[0]`` rows of float32 steps walk
    segments in tiles of (rows, steps) ``walk[:2]``, ``walk[2]`` warps per multiprocessor, others the
    time-major walk tile of 64 steps (also where the kernel's step-by-step walk takes shorter chunks); a
    split of one chunk per program reads step by step.

    Some tiles hold two neighbouring rows per thread (row pairs, ``kernels/scan.py: strided_offsets``): those
    of calls of 2-byte steps from ``paired_narrow_min_rows`` rows (``_PAIRED_NARROW_MANY_ROWS``,
    ``_PAIRED_NARROW_TILE``; from ``_TIME_MAJOR_MANY_ROWS`` rows ``narrow_many_rows`` where set, which may
    hold four rows per thread), ``paired_many_rows`` for calls of 4-byte steps of at least
    ``_TIME_MAJOR_MANY_ROWS`` rows, ``paired_walk`` (rows, steps, warps per multiprocessor) for walks of
    4-byte steps, where set, ``one_wave`` tiles whose rows per thread are 2, and those of
    ``direct_whole_tile``. Rows of no whole number of groups never take them.

    GPUs of more than ``_FAST_MEMORY_GBPS_PER_MULTIPROCESSOR`` of peak memory bandwidth per multiprocessor (an
    H200) take the rules of ``fast_memory`` where set (``for_memory``)."""

    vec: int
    many_rows: tuple[int, int, int]
    tile: tuple[int, int, int]
    full_tile_rows: int
    narrow_warps: int
    walk: tuple[int, int, int] = (32, 64, 16)
    paired_many_rows: tuple[int, int, int] | None = None
    paired_walk: tuple[int, int, int] | None = None
    paired_narrow_min_rows: int = 8192
    # (rows, steps, warps, rows per thread) of the tiles of 2-byte steps from _TIME_MAJOR_MANY_ROWS rows,
    # half the steps and warps from twice as many rows; None: _PAIRED_NARROW_MANY_ROWS in row pairs
    narrow_many_rows: tuple[int, int, int, int] | None = None
    # tiles of 4-byte steps in one program per multiprocessor at most, the first that fits; none: the tiles below
    one_wave: tuple[OneWaveTile, ...] = ()
    # (rows, steps, warps) of the tiles of 2-byte steps in row pairs from _NARROW_ONE_WAVE_MIN_ROWS rows below
    # narrow_one_wave_end where those tiles make one program per multiprocessor at most, with
    # narrow_direct_pairs_tile above them up to narrow_direct_pairs_end rows; such tiles recur by direct scans and
    # leave out in-range masks where whole (direct_whole_tile); None: the tiles below
    narrow_one_wave_tile: tuple[int, int, int] | None = None
    narrow_one_wave_end: int = 1 << 31
    narrow_direct_pairs_end: int = 8192
    # (rows, steps, warps) of the tiles in row pairs above those of narrow_one_wave_tile, below
    # narrow_direct_pairs_end rows; None: _PAIRED_NARROW_TILE
    narrow_direct_pairs_tile: tuple[int, int, int] | None = None
    # (rows, steps, warps) of the tiles in row pairs that take the place of narrow_direct_pairs_tile where they make
    # two programs per multiprocessor at most; None: narrow_direct_pairs_tile throughout
    narrow_two_wave_pairs_tile: tuple[int, int, int] | None = None
    # (rows, steps, warps, rows per thread) of the tiles of 2-byte steps of calls of whole_many_rows_range rows
    # [first, end) whose rows and steps fill whole tiles, which recur by direct scans without in-range masks
    # (before the row pairs above); None: the tiles of those calls' other rules
    whole_many_rows: tuple[int, int, int, int] | None = None
    whole_many_rows_range: tuple[int, int] = (_TIME_MAJOR_MANY_ROWS, 1 << 31)
    # the rules of GPUs of faster memory (for_memory); None: these
    fast_memory: StridedTimeMajor | None = None
    # the row counts [first, end) of calls of 2-byte and of 4-byte steps whose tiles walk whole rows by
    # direct scans (TilePlan.direct); None: never
    direct_rows: tuple[tuple[int, int] | None, tuple[int, int] | None] = (None, None)
    # the same for tiles that leave out in-range masks where a call's rows and steps fill whole tiles
    # (TilePlan.whole_tiles)
    whole_rows: tuple[tuple[int, int] | None, tuple[int, int] | None] = (None, None)

    def direct(self, num_rows: int, element_bytes: int | None) -> bool:
        """Whether the tiles of a call of ``num_rows`` rows whose widest step takes ``element_bytes``
        recur directly through each chunk (they walk whole rows)."""
        return _rows_in(self.direct_rows, num_rows, element_bytes)

    def whole(self, num_rows: int, element_bytes: int | None) -> bool:
        """Whether the tiles of such a call leave out in-range masks where they are whole."""
        return _rows_in(self.whole_rows, num_rows, element_bytes)

    def for_memory(self, dram_gbps_per_multiprocessor: float) -> StridedTimeMajor:
        """The rules of a GPU of that peak memory bandwidth per multiprocessor."""
        if self.fast_memory is not None and dram_gbps_per_multiprocessor > _FAST_MEMORY_GBPS_PER_MULTIPROCESSOR:
            return self.fast_memory
        return self

    def direct_whole_tile(self, num_rows: int, seq_len: int, multiprocessors: int, whole_groups: bool,
                          element_bytes: int | None) -> tuple[int, int, int, int] | None:
        """The tile (rows, steps, warps, rows per thread) that recurs directly without in-range masks where whole,
        of a call of 2-byte steps in whole groups: ``whole_many_rows`` where the call's rows (in
        ``whole_many_rows_range``) and steps fill its tiles; else from ``_NARROW_ONE_WAVE_MIN_ROWS`` rows below
        ``narrow_direct_pairs_end``, row pairs of ``narrow_one_wave_tile`` up to as many rows as it covers with
        one program per multiprocessor (below ``narrow_one_wave_end`` rows), of ``narrow_two_wave_pairs_tile``
        above up to as many as it covers with two, of ``narrow_direct_pairs_tile`` above those. None for other
        calls."""
        if not whole_groups or element_bytes != 2:
            return None
        whole, (first, end) = self.whole_many_rows, self.whole_many_rows_range
        if (whole is not None and first <= num_rows < end
                and num_rows % whole[0] == 0 and seq_len % whole[1] == 0):
            return whole
        if self.narrow_one_wave_tile is not None and _NARROW_ONE_WAVE_MIN_ROWS <= num_rows < self.narrow_direct_pairs_end:
            if triton.cdiv(num_rows, self.narrow_one_wave_tile[0]) > multiprocessors:
                two_wave = self.narrow_two_wave_pairs_tile
                if two_wave is not None and triton.cdiv(num_rows, two_wave[0]) <= 2 * multiprocessors:
                    return *two_wave, 2
                return *(self.narrow_direct_pairs_tile or _PAIRED_NARROW_TILE), 2
            if num_rows < self.narrow_one_wave_end:
                return *self.narrow_one_wave_tile, 2
        return None

    def tile_of(self, num_rows: int, multiprocessors: int, whole_groups: bool = True,
                element_bytes: int | None = None, seq_len: int = 1 << 31) -> tuple[int, int, int, int]:
        """(rows, steps, warps, rows per thread) of the tiles of a call of ``num_rows`` rows (at least
        ``_STRIDED_TILE_MIN_ROWS``) of ``seq_len`` steps whose widest step takes ``element_bytes``, on a GPU of
        ``multiprocessors`` multiprocessors; rows of no whole number of groups (read step by step) take ``tile``
        below ``_TIME_MAJOR_MANY_ROWS``."""
        direct_whole = self.direct_whole_tile(num_rows, seq_len, multiprocessors, whole_groups, element_bytes)
        if direct_whole is not None:
            return direct_whole
        if whole_groups and element_bytes == 2 and num_rows >= self.paired_narrow_min_rows:
            if num_rows >= _TIME_MAJOR_MANY_ROWS and self.narrow_many_rows is not None:
                rows, steps, warps, rows_per_thread = self.narrow_many_rows
                if num_rows >= 2 * _TIME_MAJOR_MANY_ROWS:
                    # twice the programs: half the threads each, the same threads in all
                    steps, warps = steps // 2, warps // 2
                return rows, steps, warps, rows_per_thread
            if num_rows >= _TIME_MAJOR_MANY_ROWS:
                return *_PAIRED_NARROW_MANY_ROWS, 2
            return _PAIRED_NARROW_PAIRS
        if num_rows >= _TIME_MAJOR_MANY_ROWS:
            if whole_groups and element_bytes == 4 and self.paired_many_rows is not None:
                return *self.paired_many_rows, 2
            return *self.many_rows, 1
        if whole_groups and element_bytes == 4:
            for one_wave in self.one_wave:
                if one_wave.fits(num_rows, seq_len, multiprocessors):
                    return one_wave.tile
        rows = _NARROW_STRIDED_TILE_ROWS
        if (not whole_groups or num_rows >= self.full_tile_rows
                or triton.cdiv(num_rows, rows) > 2 * multiprocessors):
            return *self.tile, 1
        warps = self.narrow_warps if triton.cdiv(num_rows, rows) <= multiprocessors else self.narrow_warps // 2
        return rows, 32 // rows * self.vec * warps, warps, 1


# the 32-row walk tiles were measured faster with float32 steps (the widest input's bytes) only: bf16
# values with uint8 flags stored [T, N] read slower with them at 64x2^18 (-run27-bf16-time-major-ab.txt,
# round 26 -> 32-row walks, % of the copy ceiling: GAE 39.5 -> 33.9, V-trace 44.2 -> 41.7, eligibility
# traces 37.9 -> 31.6), float64 was not measured
_WIDE_WALK_ELEMENT_BYTES = 4

# Measured on an H200, float32 stored [T, N], % of the copy ceiling, step by step (the tiles above) ->
# strided groups of 8 steps, 3 input sets (benchmarks/results/h200-2026-12-02-run26-strided-ab.txt,
# round 25's tree against this one in one run; sweeps of tiles in -run26-strided-sweep*.txt):
# - 16384x512, 32 rows x 32 steps, 4 warps: GAE 84.1 -> 90.8, with truncations 81.8 -> 89.2,
#   lambda-returns 90.5 -> 90.7, discounted returns 73.2 -> 79.3, eligibility traces 74.5 -> 78.1,
#   prefix sums 74.2 -> 77.4. V-trace read 81.6 -> 78.3 with 32 x 64 and 4 warps (two groups per
#   thread), so it takes the tile of fewer rows (85.1 in the sweep against 78.7 step by step).
# - 4096x4096, 32 x 64, 8 warps: GAE 69.4 -> 77.2, with truncations 51.2 -> 77.1, V-trace 70.7 ->
#   82.3, lambda-returns 76.8 -> 92.1, discounted returns 61.0 -> 66.7, eligibility traces 59.5 ->
#   64.9, prefix sums 59.5 -> 65.5 (32 x 32 with 4 warps makes 128 programs for 4096 rows: 46-65).
# - Walked, 8x2^21 (tiles of 8 rows x 64 steps, 2 warps): GAE 48.9 -> 63.0, with truncations 61.1 ->
#   67.6, V-trace 64.0 -> 72.0, lambda-returns 66.1 -> 76.3, discounted returns 47.2 -> 57.3,
#   eligibility traces 54.6 -> 62.8, prefix sums 56.0 -> 62.9; 64x2^18 (16 x 64, 4 warps): lambda-
#   returns 55.9 -> 69.5, discounted returns 50.9 -> 56.8, eligibility traces 50.7 -> 61.7, prefix
#   sums 50.6 -> 61.7, GAE 53.1 -> 52.8, but GAE with truncations 62.0 -> 55.1 and V-trace 55.2 -> 52.6.
# Fewer rows than 8192 make too few programs of 32-row tiles (128 at 4096 rows, fewer than the
# multiprocessors), so they take 16-row tiles: a sweep (-run27-tm-sweep2.txt, 3 input sets, one run) at
# 4096x4096 / 3072x4096 / 2048x4096, 32 x 64 with 8 warps -> 16-row tiles, the warps by the rule above:
# GAE 77.6 / 63.9 / 46.3 -> 82.2 / 68.5 / 82.8, with truncations 76.5 / 60.0 / 45.3 -> 82.7 / 82.1 / 82.7,
# discounted returns 65.8 / 53.8 / 36.8 -> 85.5 / 72.1 / 59.2, eligibility traces 64.2 / 51.9 / 36.7 ->
# 84.0 / 68.8 / 69.4, prefix sums 64.3 / 52.0 / 36.8 -> 82.5 / 68.5 / 69.0; V-trace (at most 8 warps: 16
# read 52-66) 82.3 / 67.5 / 49.1 -> 91.0 / 77.1 / 85.4. Lambda-returns keep 32-row tiles from 4096 rows
# (93.4 against 80.2 at 4096x4096; 3072x4096 79.1 -> 81.2, 2048x4096 59.2 -> 80.7). 16-row programs
# that do not fit two to a multiprocessor lost (6144x2048, 384 programs, -run27-tm-ab.txt: GAE 86.7 ->
# 77.3, with truncations 85.8 -> 74.9, V-trace 83.6 -> 78.4), as did 512 programs at 8192x2048 (84-98%
# -> 68-84%), so those keep 32-row tiles. Rows fewer than 2048 split time.
# Walked segments of at least 32 rows take tiles of 32 rows x 64 steps, 8 warps, two programs per
# multiprocessor, instead of 16 x 64 with the kernel's walk plan (-run27-tm-walks.txt, 64x2^18): GAE
# 54.0 -> 66.3, with truncations 54.3 -> 73.5, V-trace 51.8 -> 69.4, lambda-returns 68.8 -> 77.2,
# discounted returns 55.4 -> 65.0, eligibility traces and prefix sums 61 -> 60.
# Whole tiles without in-range masks (kernels/scan.py: tile_rows) against the same tiles masked, measured
# on an H200, % of the copy ceiling, 3 input sets (benchmarks/results/h200-2026-12-03-run31-whole-ab.txt, one
# run; -run31-whole-ab2.txt repeats some cells three times), at 4096x4096 / 8192x2048 / 16384x512, masked ->
# whole:
# - bf16 values with uint8 flags stored [T, N]: GAE 63.9 / 79.5 / 69.3 -> 64.6 / 79.6 / 71.6, with truncations
#   51.3 / 74.7 / 65.9 -> 57.8 / 78.3 / 65.5, lambda-returns 52.7 / 65.1 / 70.1 -> 54.8 / 69.3 / 68.3,
#   discounted returns 50.3 / 64.8 / 64.1 -> 53.8 / 67.8 / 64.2, eligibility traces 47.7 / 65.0 / 62.8 ->
#   52.3 / 65.6 / 60.9, prefix sums 48.6 / 65.0 / 63.0 -> 52.5 / 67.8 / 61.0; in the repeats eligibility
#   traces and prefix sums gained 2.5-5.5 points at 4096x4096 and lost 1.5-5.5 at 16384x512 in each.
#   V-trace lost 62.5 / 60.3 / 63.2 -> 60.0 / 56.7 / 63.1 (61.9-63.3 -> 60.1-60.8 at 4096x4096 in the repeats).
# - float32 stored [T, N]: within 3 points but prefix sums at 16384x512, 82.7-83.6 -> 74.0-75.7 in the repeats.
# So tiles of 2-byte steps from 4096 to 16383 rows take whole tiles, but V-trace's.
STRIDED_TIME_MAJOR = StridedTimeMajor(8, (32, 32, 4), (32, 64, 8), 8192, 16, whole_rows=((4096, 16384), None))
# Tiles of 2-byte steps (bf16 values, uint8 flags) of 32 rows in row pairs, recurring by direct scans without
# in-range masks, against the plans above (16-row tiles of one row per thread, or 32 x 128 x 8 pairs for GAE
# without truncations and V-trace), measured on an H100 (132 multiprocessors), % of the copy ceiling,
# 2 input sets (benchmarks/results/h100-2026-12-06-run56-pairs-sweep.txt; prefix sums -run56-pairs-4096.txt),
# at 4096x4096 / 3072x4096, the plan -> 32 x 256 x 16 (one program of 16 warps per multiprocessor) / 32 x 128 x 8:
# - GAE without truncations 80.6 / 47.0 -> 89.7 / 83.1 | 80.7 / 69.8
# - eligibility traces 69.5 / 46.3 -> 81.4 / 71.3 | 68.4 / 57.6 (prefix sums at 4096x4096: 69.4 -> 81.3 | 68.1)
# - discounted returns 70.1 / 47.8 -> 83.2 / 74.0 | 70.7 / 60.6
# - lambda-returns 73.1 / 55.1 -> 85.8 / 82.2 | 91.3 / 78.3
# - GAE with truncations 76.5 / 54.6 -> 79.2 / 63.8 | 82.5 / 69.0
# - V-trace 88.4 / 60.2 -> 72.0 / 58.8 | 82.7 / 72.0 (its plan at 4096 rows: 88.4; taken below 4096 rows only).
# Each estimator but V-trace takes the tile that reads more at 4096 rows, where the tiles make one program per
# multiprocessor at most (3072-4224 rows on 132 multiprocessors); 2048 rows (64 programs) were not measured.
# From there to 8191 rows the same estimators take 32 x 128 x 8 pairs, direct and whole (GAE's plan from 4096
# rows): at 6144x4096 on an H100, the plan -> 32 x 128 x 8 / 32 x 256 x 16, 2 input sets
# (benchmarks/results/h100-2026-12-06-run57-pairs-above-one-wave.txt): GAE with truncations 62.7 -> 72.2 / 68.2,
# lambda-returns 65.7 -> 78.0 / 74.6, discounted returns 64.5 -> 78.0 / 72.9, eligibility traces 63.0 -> 76.2 /
# 69.6 (GAE 90.3: its plan already; V-trace 68.7 -> 70.6, not taken; V-trace below 4096 rows: see its plans).
# The plans above came from H200 runs before direct scans and whole tiles existed; these tiles were not measured
# on an H200.
_NARROW_ONE_WAVE_MIN_ROWS = 3072
# tiles of 32 rows x 256 steps, 16 warps: one program per multiprocessor (2-byte steps in pairs; float32 GAE)
_ONE_WAVE_16_WARPS = (32, 256, 16)
# Direct scans (kernels/scan.py: recur_in_thread) against every step's map, measured on an H200 at 4096,
# 8192 and 16384 rows (4096x4096, 8192x2048, 16384x512), % of the copy ceiling, 3 input sets
# (benchmarks/results/h200-2026-12-03-run30-direct-sweep.txt, one run; the final plans against maps in
# -run30-direct-ab.txt and -run30-final-ab.txt): the estimators and row counts where they read more take them.
# - bf16 values with uint8 flags: GAE 53.8 / 64.0 / 63.5 -> 60.5 / 73.6 / 70.7, with truncations 50.9 /
#   62.2 / 62.8 -> 38.3 / 65.7 / 69.7 (from 8192 rows), lambda-returns 48.3 / 65.6 / 68.2 -> 52.5 / 74.1 /
#   74.0 here but 47.3 / 65.0 / 70.2 -> 52.8 / 55.9 / 65.0 and 47.7 / 65.7 / 70.3 -> 53.8 / 55.8 / 65.7 in
#   the two later runs (below 8192 rows only), discounted returns 43.8 / 47.3 / 50.9 -> 47.0 / 59.7 / 57.9, eligibility traces 40.3 / 50.0 /
#   52.4 -> 43.9 / 59.5 / 54.5, prefix sums 40.7 / 48.9 / 49.8 -> 44.7 / 59.1 / 54.1; V-trace 62.5 / 60.5 /
#   63.8 -> 60.9 / 59.2 / 61.4 (not taken).
# - float32: lambda-returns 93.0 / 96.3 / 84.2 -> 95.1 / 96.6 / 92.4, discounted returns 86.4 / 86.8 /
#   76.2 -> 77.7 / 89.1 / 82.7 (from 8192 rows), eligibility traces 83.9 / 86.4 / 75.9 -> 85.5 / 80.2 /
#   83.7 and prefix sums 84.0 / 86.4 / 76.2 -> 85.5 / 80.3 / 82.8 (from 16384 rows); GAE 86.9 / 93.2 /
#   91.0 -> 88.2 / 93.5 / 89.8, with truncations 80.2 / 94.0 / 91.9 -> 70.3 / 96.1 / 91.9, V-trace
#   91.0 / 87.8 / 91.0 -> 90.8 / 90.3 / 91.8 (not taken: within a run's spread, or losing at 4096 rows).
# Not measured from 32768 rows (other tiles): those build maps.
DISCOUNTED_STRIDED_TIME_MAJOR = dataclasses.replace(STRIDED_TIME_MAJOR, narrow_one_wave_tile=_ONE_WAVE_16_WARPS,
                                                    direct_rows=((4096, _DIRECT_MAX_ROWS), (8192, _DIRECT_MAX_ROWS)))
# Row pairs (two neighbouring rows per thread, each step of both loaded as one vector) cut the
# instructions per element of time-major GAE at 4096x4096 from 77 to 50.5 (float32) and from 83 to 51.5
# (bf16 values, uint8 flags), compiled for sm_90a, but a tile of 32 rows in pairs makes half the programs
# of the 16-row tiles of 2048-4224 rows (tiles of 16 rows in pairs go through shared memory). Measured on
# an H200, % of the copy ceiling, 3 input sets (benchmarks/results/h200-2026-12-03-run28-pairs-ab.txt:
# e22b99c, one row per thread, against row pairs wherever this round first took them, one run each;
# sweeps of tiles in -run28-pairs-sweep-*.txt):
# - 2-byte steps (bf16 values, uint8 flags), 32 x 128 x 8 below 16384 rows, 32 x 64 x 4 from 16384: at
#   8192x2048 GAE 51.8 -> 64.5, with truncations 51.9 -> 64.2, V-trace 49.4 -> 60.7, lambda-returns
#   53.4 -> 64.9, discounted returns 44.8 -> 46.6, eligibility traces and prefix sums 42 -> 50; at
#   16384x512 53.4 -> 63.8, 54.8 -> 50.5, 44.1 -> 64.9, 54.6 -> 56.5, 44.5 -> 51.4, 43 -> 51-53. At
#   4096x4096 (128 programs against 256 of 16 rows) only GAE without truncations (43.2 -> 55.9) and
#   V-trace (55.1 -> 62.4) gained (with truncations 51.4 -> 43.5, discounted returns 42.5 -> 30.3, the
#   others within a point), so they alone take pairs from 4096 rows, the others from 8192.
# - float32: V-trace 16384x512 82.7 -> 90.3 and 32768x256 84.0 -> 87.3 in 64 x 32 x 4 (in the sweep GAE
#   lost 90.7 -> 84.6 and eligibility traces 81.3 -> 66.8 with it); walks of eligibility traces and prefix
#   sums in 32 x 128 x 8 tiles, two programs per multiprocessor, 59.5-65.5 -> 66.5-72.3 at 64x2^18,
#   256x65536, 1024x16384 and 32x2^19 (in the sweep GAE, V-trace and the returns read 5-50 points less
#   walked in pairs). Tiles of 4096-8192 rows of float32 steps read less in pairs but for GAE with
#   truncations (81.1 -> 91.8 at 4096x4096 in 32 x 128 x 8, one sweep; not taken).
_PAIRED_NARROW_MANY_ROWS = (32, 64, 4)
_PAIRED_NARROW_TILE = (32, 128, 8)
_PAIRED_NARROW_PAIRS = (*_PAIRED_NARROW_TILE, 2)
EPISODIC_STRIDED_TIME_MAJOR = dataclasses.replace(STRIDED_TIME_MAJOR, paired_walk=(32, 128, 16),
                                                  narrow_one_wave_tile=_ONE_WAVE_16_WARPS,
                                                  direct_rows=((4096, _DIRECT_MAX_ROWS), (16384, _DIRECT_MAX_ROWS)))
# Four neighbouring rows per thread (8-byte loads of bf16) in 64-row tiles make a quarter of the programs
# of 16-row tiles, and read less than pairs wherever the programs are fewer than about two per
# multiprocessor. Measured on an H200, bf16 values with uint8 flags, % of the copy ceiling, 3 input sets
# (benchmarks/results/h200-2026-12-03-run29-fours-sweep.txt, one run each): row pairs (the plan before) ->
# 64 x 64 x 4 at 16384x512 and 64 x 32 x 2 at 32768x256 (the same threads in all): GAE with truncations
# 53.7 -> 64.0 and 56.0 -> 68.6, lambda-returns 56.2 -> 69.3 and 60.5 -> 75.2; discounted returns lost
# (49.6 -> 44.5, 50.2 -> 51.3 at best), and at 16384x512 GAE without truncations (63.2 -> 53.7), V-trace
# (63.9 -> 46.9), eligibility traces and prefix sums (52 -> 45) lost too; at 4096-8192 rows every
# estimator lost 13-45 points (64 programs of 64 rows at 4096).
_FOUR_ROWS_NARROW_MANY_ROWS = (64, 64, 4, 4)


def _with_direct_narrow_tiles(plan: StridedTimeMajor, pairs_end: int, whole_rows: tuple[int, int] | None,
                              **changes: object) -> StridedTimeMajor:
    """``plan`` with its 2-byte steps read by direct scans in 32 x 64 x 4 row pairs below ``pairs_end`` rows and,
    for calls of ``whole_rows`` rows [first, end) (None: none), in 64 x 64 x 4 tiles of four rows per thread
    where the rows and steps fill whole tiles; ``changes``: its other changed fields."""
    if whole_rows is not None:
        changes.update(whole_many_rows=_FOUR_ROWS_NARROW_MANY_ROWS, whole_many_rows_range=whole_rows)
    return dataclasses.replace(plan, narrow_direct_pairs_end=pairs_end,
                               narrow_direct_pairs_tile=_PAIRED_NARROW_MANY_ROWS, **changes)


# Float32 steps [T, N] of 4096 rows in 16-row tiles (256 programs, two per multiprocessor) read less the longer
# the rows: on an H100, % of the copy ceiling, 2 input sets (benchmarks/results/h100-2026-12-06-run58-layout-ratios.txt,
# 4096x2048 / 4096 / 8192 / 16384), GAE with truncations 90.0 / 86.1 / 79.2 / 75.4, V-trace 93.5 / 88.7 / 87.5 /
# 82.5, against 97.8-100.8 batch-major. 32-row tiles, one program per multiprocessor, hold their pace
# (-run58-f32-time-major-sweep.txt, 4096x4096 / 4096x16384, the plan -> the tile taken):
# - GAE with truncations 86.2 / 75.8 -> 98.0 / 100.9 in 32 x 128 x 8 pairs (32 x 64 x 8: 93.8 / 95.2);
# - V-trace 88.3 / 82.5 -> 96.1 / 96.7 in 32 x 64 x 8 (32 x 128 x 8 pairs: 91.3 / 92.2).
# (Round 28 measured these pairs on an H200 at 4096x4096 for GAE with truncations, 81.1 -> 91.8; round 27 there
# read V-trace's 32 x 64 x 8 at 82.3 against 91.0 in 16-row tiles, before whole tiles and direct scans.)
# Discounted returns and the episodic scans read 90-94 in 16-row tiles at 4096x4096 and 86-88 at 4096x16384, in
# 32 x 256 x 16 90.2-90.4 and 96.1-96.4: both within 10% of batch-major, so they keep their tiles.
_GAE_TRUNCATED_STRIDED_TIME_MAJOR = dataclasses.replace(STRIDED_TIME_MAJOR,
                                                        narrow_many_rows=_FOUR_ROWS_NARROW_MANY_ROWS,
                                                        one_wave=(OneWaveTile(_PAIRED_NARROW_PAIRS, (3072, 1 << 31), 1536),),
                                                        narrow_one_wave_tile=_PAIRED_NARROW_TILE,
                                                        direct_rows=((8192, _DIRECT_MAX_ROWS), None))
# lambda-returns keep 32-row tiles from 4096 rows (see above). Float32 steps of 2048-4095 rows read less the longer
# the rows in 16-row tiles; in 32 x 128 x 8 pairs, one program per multiprocessor, they hold their pace. On an H100,
# % of the copy ceiling, 2-3 input sets (benchmarks/results/h100-2026-12-06-run59-one-wave-ab.txt, 16-row tiles ->
# pairs): 3072x512 / 1024 / 4096 / 16384 76.5 / 80.9 / 78.0 / 69.4 -> 82.0 / 86.6 / 96.6 / 97.4, 2048x1024 / 4096 /
# 16384 77.5 / 82.1 / 77.9 -> 80.6 / 94.9 / 98.8, but 2048x512 74.8 -> 72.5.
# Its 2-byte steps on an H200 (-run65-bf16-mid-rows.txt, -run65-bf16-many-rows.txt, two passes), the plan (32 x 128 x 8
# pairs, by direct scans below 8192 rows; 64 x 64 x 4 of four rows per thread with maps and in-range masks from 16384)
# -> 32 x 64 x 4 pairs, direct and whole, at 6144x2048 / 8192x512 / 8192x4096 / 12288x2048: 59.4 / 59.2 / 75.0 / 72.1 ->
# 62.6 / 65.4 / 77.7 / 88.8; 64 x 64 x 4 direct and whole at 16384x512 / 16384x2048: 76.1 / 90.0 -> 85.0 / 96.3.
_LAMBDA_STRIDED_TIME_MAJOR = dataclasses.replace(STRIDED_TIME_MAJOR, full_tile_rows=4096,
                                                 one_wave=(OneWaveTile(_PAIRED_NARROW_PAIRS, (2048, 4096)),),
                                                 narrow_many_rows=_FOUR_ROWS_NARROW_MANY_ROWS,
                                                 narrow_one_wave_tile=_PAIRED_NARROW_TILE,
                                                 direct_rows=((4096, 8192), (4096, _DIRECT_MAX_ROWS)))
# An H100 reads the same direct, unmasked tiles faster too, from 4225 rows, with the four rows per thread from fewer
# rows (-run66-bf16-rows.txt, -run66-bf16-tiles.txt, two passes): 32 x 64 x 4 pairs at 5120x2048 / 6144x512 /
# 8192x512 / 8192x2048 / 9216x2048 64.3 / 60.9 / 71.5 / 80.4 / 69.3 -> 70.1 / 70.9 / 79.8 / 89.0 / 88.6; 64 x 64 x 4 at
# 10240x2048 / 11264x1024 / 12288x2048 / 13312x2048 / 14336x2048 / 20480x512 / 24576x512 74.0 / 76.2 / 75.5 / 74.8 /
# 75.7 / 75.0 / 79.8 -> 89.3 / 88.0 / 93.2 / 94.0 / 93.0 / 85.9 / 89.7 (pairs: 87.2 / 86.1 / 89.0 / 78.2 / 72.1 /
# 72.3 / 79.4), but at 32768x512, where the plan halves its tiles' steps and warps, 91.0 -> 86.1. So GPUs of slower
# memory take 32 x 64 x 4 pairs to 12287 rows and 64 x 64 x 4 from 10240 to 32767 where whole; in turns against the
# plans of before (-run66-slow-memory-ab.txt) 4608x2048 / 8192x2048 / 12288x2048 / 14336x2048 / 20480x512: 58.5 / 80.5 /
# 73.0 / 75.4 / 74.9 -> 66.3 / 88.6 / 92.8 / 92.5 / 85.4.
LAMBDA_STRIDED_TIME_MAJOR = _with_direct_narrow_tiles(
    _LAMBDA_STRIDED_TIME_MAJOR, 12288, (10240, 2 * _TIME_MAJOR_MANY_ROWS),
    fast_memory=_with_direct_narrow_tiles(_LAMBDA_STRIDED_TIME_MAJOR, _TIME_MAJOR_MANY_ROWS, (_TIME_MAJOR_MANY_ROWS, 1 << 31)))
# GAE without truncations of float32 steps at 4096x4096: 16-row tiles (8 warps, 256 programs) read 81.9%
# of the copy ceiling on an H200, tiles of 32 rows x 256 steps with 16 warps (128 programs, one per
# multiprocessor) 87.7% (-run29-wide-sweep.txt, 3 input sets, one run; with truncations they read 39.9%
# against 85.4%, discounted returns 75.7% against 84.9%: those keep the 16-row tiles). They are taken only
# where they make one program per multiprocessor at most. On an H100 (-run59-one-wave-ab.txt, 2-3 input sets,
# 16-row tiles -> 32-row ones) GAE and with truncations gain from 3072 rows the longer the rows (3072x2048 /
# 4096 / 16384: 81.8 / 85.2 / 82.7 -> 83.4 / 91.0 / 97.0, with truncations 84.9 / 81.0 / 70.8 -> 88.2 / 93.8 /
# 98.0) and lose on short ones (3072x1024 75.4 -> 72.6, with truncations 82.7 -> 78.8; 4096x1024 84.7 ->
# 80.7; with truncations 3072x512 76.8 -> 67.5, 4096x512 81.6 -> 76.3; with truncations at 4096x1536 the
# 32-row pairs lead, 89.3 -> 92.2), hence OneWaveTile.min_steps (V-trace at 4096x512 85.8 -> 83.3, at
# 4096x1024 90.9 -> 90.0). GAE takes them from 2113 rows, more than 16-row tiles cover in one program per
# multiprocessor on 132 (-run59-gae-from-2113-ab.txt, 3 input sets, two turns: 2176x2048 / 4096 / 16384 63.9 /
# 68.4 / 72.8 -> 68.8 / 74.9 / 80.2, 2816x4096 / 16384 80.6 / 81.9 -> 86.8 / 92.6; 2304x1024 61.6 either way).
_GAE_STRIDED_TIME_MAJOR = dataclasses.replace(STRIDED_TIME_MAJOR, paired_narrow_min_rows=4096,
                                              one_wave=(OneWaveTile((*_ONE_WAVE_16_WARPS, 1), (2113, 1 << 31), 2048),),
                                              narrow_one_wave_tile=_ONE_WAVE_16_WARPS,
                                              direct_rows=((4096, _DIRECT_MAX_ROWS), None))
# GAE's 2-byte steps from 4225 to 16383 rows (with and without truncations) are read in 32 x 128 x 8 pairs, direct
# and whole; those make two programs per multiprocessor at most up to 8448 rows on 132, and a second, ragged wave
# of them above. There 32 x 64 x 4 pairs read more (both direct and whole), two
# passes, % of the copy ceiling (benchmarks/results/h100-2026-12-07-run67-gae-bf16-tiles.txt, tune.py, the plan ->
# 32 x 64 x 4 pairs | 64 x 64 x 4 of four rows per thread):
# - without truncations, 9216x1024 / 10240x2048 / 12288x2048 / 14336x2048 67.0 / 72.1 / 82.0 / 87.6 -> 77.1 / 85.6 /
#   91.7 / 91.7 | 68.8 / 76.7 / 83.1 / 89.9; below, the plan leads (6144x2048 / 8192x512 / 8192x2048 85.5 / 89.1 /
#   88.8 -> 70.3 / 80.2 / 79.7), and at 16384x512 and 20480x512 (other tiles) all are within 1.3;
# - with truncations, 9216x1024 / 9216x2048 / 10240x2048 / 11264x1024 / 12288x512 / 12288x2048 65.3 / 66.4 / 70.7 /
#   73.7 / 71.3 / 76.3 -> 80.4 / 84.9 / 88.1 / 86.2 / 81.3 / 89.7 | 66.9 / 69.2 / 72.9 / 74.5 / 72.9 / 79.7, but at
#   13312x2048 / 14336x2048 77.2 / 77.7 -> 81.2 / 75.5 | 82.2 / 85.0; 8192x2048 82.0 -> 82.4 | 67.3, and below the plan
#   leads (6144x2048 / 8192x512 76.7 / 75.9 -> 69.5 / 71.2).
# So on GPUs of slower memory GAE takes 32 x 64 x 4 pairs, direct and whole, above the rows 32 x 128 x 8 pairs cover
# in two programs per multiprocessor, to 16383 rows; with truncations to 13311, and 64 x 64 x 4 direct and whole from
# 13312 to 16383 where the rows and steps fill whole tiles. The H200 keeps its plans (not measured there).
# Against the plans of before on an H100 (benchmarks/results/h100-2026-12-07-run68-gae-slow-memory-ab.txt, one turn):
# GAE 9216x1024 / 10240x2048 / 12288x2048 / 14336x2048 67.2 / 72.4 / 82.3 / 88.1 -> 77.8 / 86.1 / 92.0 / 92.0, with
# truncations 65.7 / 71.1 / 76.6 / 78.3 -> 81.0 / 88.4 / 89.9 / 85.4; within 1 at 8192, 8448 and 16384 rows.
GAE_STRIDED_TIME_MAJOR = _with_direct_narrow_tiles(
    _GAE_STRIDED_TIME_MAJOR, _TIME_MAJOR_MANY_ROWS, None, narrow_two_wave_pairs_tile=_PAIRED_NARROW_TILE,
    fast_memory=_GAE_STRIDED_TIME_MAJOR)
GAE_TRUNCATED_STRIDED_TIME_MAJOR = _with_direct_narrow_tiles(
    _GAE_TRUNCATED_STRIDED_TIME_MAJOR, 13312, (13312, _TIME_MAJOR_MANY_ROWS),
    narrow_two_wave_pairs_tile=_PAIRED_NARROW_TILE, fast_memory=_GAE_TRUNCATED_STRIDED_TIME_MAJOR)
# V-trace of 2-byte steps at 3072-4095 rows in 32 x 128 x 8 pairs on an H100, % of the copy ceiling, 2 input sets
# (benchmarks/results/h100-2026-12-06-run57-pairs-above-one-wave.txt), 3072x4096: 16-row tiles 60.3, pairs with maps
# 68.7, direct and whole 72.1; but its plan at 4096x4096 (pairs with maps) reads 88.9 against 82.7 direct.
# Its float32 steps of 4096 rows: 32 x 64 x 8 (see GAE_TRUNCATED_STRIDED_TIME_MAJOR); of 2113-2815 rows 32 x 128 x 8
# pairs (-run61-vtrace-pairs-sweep.txt, two turns' mean, 3 input sets: 2176x2048 / 4096 / 16384 76.1 / 77.5 / 77.4 ->
# 86.5 / 92.6 / 97.5, 2560x2048 / 8192 82.0 / 84.0 -> 91.1 / 96.6), not from 2816 rows (2816x8192 89.6 -> 88.5,
# 3072x4096 91.9 -> 86.6, 3072x8192 90.5 -> 86.3); of 3072-4095 rows of at least 16384 steps pairs too
# (-run62-vtrace-pairs-3072-3584.txt, two turns: 3072x16384 / 3328x16384 / 3584x16384 83.9 / 78.1 / 79.2 -> 85.1 /
# 87.3 / 88.6; at 8192 steps 3072 rows lose, 89.3 -> 85.2; -run63-vtrace-pairs-ab.txt, 16-row tiles -> pairs, two
# turns: 3328x16384 78.3-78.4 -> 87.1-87.2, 4088x16384 69.0 -> 89.0).
# On an H200 (36.5 GB/s of peak memory bandwidth per multiprocessor against an H100's 25) 32 x 64 x 8 at 4096 rows is
# the slowest of four tiles (-run64-time-major-tiles.txt, two turns, 4096x2048 / 4096 / 8192 / 16384): 80.8 / 82.9 /
# 83.9 / 83.9, 16-row tiles (16 x 64 x 4) 89.9 / 91.9 / 90.2 / 80.7, 32 x 128 x 8 pairs 90.2 / 86.8 / 87.9 / 88.8. There
# 4096-4224 rows take 16-row tiles below 16384 steps and pairs from 16384, as 3072-4095 rows do
# (-run65-vtrace-fast-memory-ab.txt, two turns, 4096x2048 / 4096 / 16384, 4224x8192: 80.7 / 83.0-83.1 / 84.0 / 84.9 ->
# 91.0 / 92.6-93.6 / 90.9-91.8 / 93.2).
# Its 2-byte steps on an H200, the plan (32 x 128 x 8 pairs with maps and in-range masks below 16384 rows, 32 x 64 x 4
# pairs from 16384) against tiles forced to recur directly without masks, two passes (-run65-bf16-tiles.txt,
# -run65-bf16-mid-rows.txt, -run65-bf16-four-rows-per-thread.txt, -run65-bf16-many-rows.txt):
# - 4096x4096 64.6 -> 69.4 in 32 x 128 x 8 pairs (32 x 64 x 4: 54.8, 128 programs of 4 warps);
# - 32 x 64 x 4 pairs at 6144x2048 / 8192x512 / 8192x2048 / 8192x4096 / 12288x2048: 48.1 / 51.2 / 62.8 / 65.6 / 63.8 ->
#   65.4 / 65.9 / 77.8 / 80.4 / 84.9 (32 x 128 x 8: 54.1 / 53.9 / - / 68.8 / 67.1);
# - four rows per thread, 64 x 64 x 4, at 16384x512 / 16384x2048 / 16384x4096 / 24576x512 / 32768x512 / 32768x2048:
#   67.7 / 77.4 / 78.8 / 69.3 / 70.7 / 77.3 -> 83.5 / 95.2 / 97.2 / 74.0 / 85.1 / 92.9 (at 12288x2048 81.2, at 8192
#   rows 55-64); but with in-range masks, where the steps do not fill whole tiles, 16384x264 55.8 -> 46.6 (the same
#   tile masked at 16384x512: 55.4).
# GPUs of faster memory (fast_memory) leave out 32 x 64 x 8 and take those direct, unmasked tiles of 2-byte steps, the
# four rows per thread only where the rows and steps fill whole tiles (StridedTimeMajor.direct_whole_tile).
# An H100 reads the 4096-row plan faster with maps (round 57, above; 4096x4096 89.5 against 82.6 direct and whole,
# -run66-bf16-tiles.txt), and the others faster from 4225 rows, the four rows per thread from 10240 rows
# (-run66-bf16-rows.txt, -run66-bf16-tiles.txt, two passes): 32 x 64 x 4 pairs at 5120x2048 / 6144x512 / 7168x2048 /
# 8192x512 / 8192x2048 / 9216x2048 56.4 / 54.8 / 76.6 / 67.3 / 84.8 / 67.4 -> 72.5 / 70.2 / 86.5 / 79.7 / 90.6 / 87.3;
# 64 x 64 x 4 at 10240x2048 / 11264x1024 / 12288x2048 / 13312x2048 / 14336x2048 / 16384x512 / 32768x512 73.8 / 74.6 /
# 85.5 / 72.4 / 77.3 / 83.0 / 85.2 -> 86.5 / 86.8 / 92.8 / 93.8 / 90.8 / 88.1 / 90.0 (pairs: 83.9 / 85.1 / 81.2 /
# 69.8 / 71.9 / 76.4 / 84.9); at 16384x2048 and 24576x512 89.7 / 83.8 -> 88.6 / 82.7. So GPUs of slower memory take
# 32 x 64 x 4 pairs from 4225 rows to 12287 and 64 x 64 x 4 from 10240 where whole (narrow_one_wave_end keeps the maps at
# 4096-4224 rows); in turns against the plans of before (-run66-slow-memory-ab.txt) 4608x2048 / 5120x512 / 11264x1024 /
# 14336x2048 / 32768x512: 51.2 / 47.7 / 74.5 / 76.9 / 84.3 -> 68.3 / 66.2 / 86.2 / 90.5 / 89.9.
_VTRACE_STRIDED_TIME_MAJOR = StridedTimeMajor(8, (32, 64, 8), (32, 64, 8), 8192, 8, paired_many_rows=(64, 32, 4),
                                              paired_narrow_min_rows=4096,
                                              one_wave=(OneWaveTile((32, 64, 8, 1), min_steps=2048),
                                                        OneWaveTile(_PAIRED_NARROW_PAIRS, (2113, 2816), 2048),
                                                        OneWaveTile(_PAIRED_NARROW_PAIRS, (3072, 1 << 31), 16384)),
                                              narrow_one_wave_tile=_PAIRED_NARROW_TILE,
                                              narrow_direct_pairs_end=4096)
VTRACE_STRIDED_TIME_MAJOR = _with_direct_narrow_tiles(
    _VTRACE_STRIDED_TIME_MAJOR, 12288, (10240, 1 << 31), narrow_one_wave_end=4096,
    fast_memory=_with_direct_narrow_tiles(_VTRACE_STRIDED_TIME_MAJOR, _TIME_MAJOR_MANY_ROWS,
                                          (_TIME_MAJOR_MANY_ROWS, 1 << 31),
                                          one_wave=_VTRACE_STRIDED_TIME_MAJOR.one_wave[1:]))
_STRIDED_TILE_MIN_ROWS = 2048
# Batch-major whole rows without in-range masks where the rows and steps fill whole tiles, against the same
# tiles masked, on an H200, % of the copy ceiling at 16384x512 / 4096x4096, masked -> whole
# (benchmarks/results/h200-2026-12-03-run31-whole-ab.txt, one run; the repeats in -run31-whole-ab2.txt):
# bf16 values with uint8 flags, GAE 74.8 / 77.2 -> 77.0 / 79.1, with truncations 80.5 / 87.1 -> 83.9 / 87.0,
# V-trace 86.0 / 79.6 -> 89.0 / 86.0, with truncations 89.1 / 87.0 -> 89.2 / 88.8; those of float32 steps
# lost (GAE 90.2-92.2 -> 81.8-84.7 at 16384x512 in the repeats, with truncations 97.1-98.6 -> 94.4-96.0 at
# 4096x4096, walks at 8x2^21 82.5 -> 76.8) or moved within 3 points. The other kernels were not measured on
# bf16 batch-major rows: they keep their masks.
_NARROW_WHOLE_ROWS = True
# rows of no whole number of groups take the strided plans (read step by step) from this many rows
_PARTIAL_GROUPS_STRIDED_MIN_ROWS = 4096
_NARROW_STRIDED_TILE_ROWS = 16
# at most 8 contiguous steps per thread are loaded as one vector (16 bytes of bf16), 4 of float32
_MAX_VEC = 8
_VECTOR_BYTES = 16
# predecessors inspected per look-back step: with fewer than 4 row tiles, every program in flight
# is in one of a few chains, so look-backs reach further (measured on an H200, GAE 1x2^24: 264 us
# with 32, 190 us with 128; 8x2^21: 163 us with 32, 174 us with 128)
_LOOKBACK_WINDOW = 32
# registers per thread of time-split programs: 64 instead of the compiler's 80-95 fits 4 programs of
# 8 warps per multiprocessor instead of 3, for a few spilled bytes. Measured on an H200, uncapped ->
# capped in one run (benchmarks/results/h200-2026-11-30-run4-split-cap-ab.txt), device us: GAE 64x16384
# 17.5 -> 13.4, 8x2^21 171 -> 155; discounted returns 16.7 -> 13.0, 171 -> 149; V-trace 20.5 -> 18.7,
# 259 -> 249; lambda-returns 20.1 -> 16.7 (but 1x2^24 209 -> 230); eligibility traces and prefix sums
# equal. Measured for batch-major float32 only: time-major, float64 and Retrace programs keep the
# compiler's choice.
_SPLIT_MAX_REGISTERS = 64
_SPLIT_MAX_WARPS = 8
# Walked segments (the time split of kernels that support it): each program walks a segment of
# several chunks from a zero carry, then looks back once for the segment's carry and redoes the
# segment's first chunks with it until the carry out matches (after a reset, or once the decay has
# rounded it away). The segments are sized so that every program is resident at once (so no program
# waits on one that has not started); kernels give (chunk steps, programs per multiprocessor), and
# the walk's registers are capped at that many programs' share (_walk_register_budget). Rows too
# short for segments of 8 chunks keep one chunk per program: at 64x16384 and 8x131072 (4 chunks per
# segment) walking was slower on an H200 (GAE 24.2% against 27.1% of the copy bandwidth, V-trace
# 23.7% against 36.7%).
_WALK_MIN_SEGMENT_CHUNKS = 8
_WALK_WARPS = 4
# Measured on an H200 with grouped tiles, % of the copy bandwidth at 8x2^21 / 1x2^24
# (benchmarks/results/h200-2026-11-30-run7-walk-sweep.txt): GAE 74 / 70 with 512-step chunks and 8
# programs per multiprocessor (1024 and 4: 68 / 64), with truncations and bootstrap values 84 / 80 (1024
# and 3: 71 / 70); V-trace 85 / 80 with 512 and 6 (512 and 3: 73 / 74; 8 do not fit its 80 registers);
# lambda-returns 85 / 80 with 512 and 4; discounted returns 73 / 66 with 1024 and 4; eligibility traces
# and prefix sums (step by step, see episodic_scan) 71-73 / 65-66 with 512 and 8. Registers per
# thread (ptxas, sm_90) bound the programs that fit: GAE 56, lambda-returns 53, eligibility traces
# 46, discounted returns 72 (1024 steps), V-trace 80. Discounted returns take 6 programs of 1024 steps (7
# fit its registers): with float32 flags, 4 -> 6 -> 8 read 69.8 -> 75.7 -> 74.8 / 66.6 -> 69.6 -> 68.9
# (-run13-walk-plans.txt; device time with bool flags 65.5 -> 57.0 / 70.4 -> 64.6 us for 4 -> 6,
# -run13-walk-flags.txt); lambda-returns there read 85.3 / 81.5 with 4, 85.4 / 79.9 with 6, 86.1 / 82.0
# with 8. Lambda-returns take 1024-step chunks with 3 programs, eligibility traces and prefix sums 2048
# with 3 (16 steps per thread): three runs each (-run14-walk-*.txt), lambda-returns 81.8-84.6 / 80.0-81.1
# -> 86.4 / 82.0-82.9, eligibility traces 68.9-71.4 / 67.5-67.7 -> 74.7 / 68.9-69.8, prefix sums
# 68.1-69.5 / 67.5-67.7 -> 75.1-75.6 / 69.7-69.9.
# Rows too short for segments of 8 such chunks, and time-major tiles, keep the earlier plans.
_GAE_WALK = (512, 8)
_DISCOUNTED_WALK = (1024, 6)
_LAMBDA_WALK = (512, 4)
_LAMBDA_LONG_WALK = (1024, 3)
_EPISODIC_WALK = (512, 8)
# Eligibility traces and prefix sums of 4-byte steps no longer take it: with the look-behind (below) their
# 512-step walks of 8 programs read faster, % of the copy ceiling at 8x2^21 / 1x2^24 on an H200, 2048 and 3
# -> 512 and 8 (benchmarks/results/h200-2026-12-05-run43-walk-sweep.txt): eligibility traces 81.3 / 81.6 ->
# 83.4 / 84.9, prefix sums 81.4 / 81.1 -> 83.8 / 84.5 (1024 and 4 or 6: 82.0-83.9). Other step sizes keep it
# (unmeasured with the look-behind).
_EPISODIC_LONG_WALK = (2048, 3)
_VTRACE_WALK = (512, 6)
# A single row of float32 steps walks with 5 programs per multiprocessor: on an H200 at 1x2^24, % of the copy
# ceiling with 6 -> 5 (tune.py --sets 2, benchmarks/results/h200-2026-12-05-run45-vtrace-rows.txt): V-trace
# 87.8 -> 90.5, with truncations 85.4 -> 91.2. From 2 rows up 6 reads as much or more (2, 4 and 8 rows of 2^24
# steps in all: 89.3-90.0 -> 89.2-90.9, with truncations 92.0-92.8 -> 89.3-90.4).
_VTRACE_ONE_ROW_WALK = (512, 5)
# Steps of 2 bytes (bf16/fp16 values with bool/uint8 flags) walk 1024-step chunks, where segments still
# hold 8 of them: 8 steps (one 16-byte vector) per thread instead of 4. Measured on an H200, bf16 values
# with uint8 flags, % of the copy ceiling at 8x2^21 / 1x2^24, 512-step chunks -> 1024 with 4 / 6 / 8
# programs per multiprocessor (benchmarks/results/h200-2026-12-02-run24-bf16-walks.txt): GAE 36.0 / 37.0
# -> 42.7 / 39.1, 43.7 / 42.0, 43.0 / 41.4; V-trace 53.5 / 52.5 -> 59.5 / 59.1, 38.4 / 35.8, 27.2 / 25.1
# (2048-step chunks of 8 warps, 2 or 3 programs: GAE 35.9-38.2, V-trace 35.8-54.0).
_GAE_NARROW_WALK = (1024, 6)
_VTRACE_NARROW_WALK = (1024, 4)
# Float32 Retrace programs that walk their chunks, 4 warps each. Up to 4 actions per group they take
# ~156 registers per thread; 128 (no spills) fits 4 programs per multiprocessor instead of 3
# (measured on an H200, 4 actions, device us, uncapped -> capped: 16384x512 264 -> 243, 4096x1024
# 127 -> 120, 512x1024 22.7 -> 19.3). Groups of 32 (17-32 actions) take ~240 while the next chunk is
# loaded ahead (2 programs per multiprocessor) and ~178 without; without loading ahead and at 128
# (8 spilled bytes), 4 programs fit: 18 actions 16384x512 811 -> 751 us, 4096x1024 401 -> 386,
# 4096x128 52.7 -> 47.6, 512x1024 equal (benchmarks/results/h200-2026-11-30-run4-retrace-*.txt).
# Groups of 8 and 16 are unmeasured and keep the compiler's choice.
_RETRACE_SMALL_GROUP = 4
_RETRACE_LARGE_GROUP = 32
_RETRACE_MAX_REGISTERS = 128
_FEW_CHAINS_LOOKBACK_WINDOW = 128
_FEW_CHAINS = 4
# Each walked segment (but Retrace's) first scans this many steps before it, from a zero carry: where they
# end an episode in every row of its tile, their carry out is the segment's carry in, so the segment
# neither waits for the ones before it nor redoes its first chunk (kernels/scan.py: look_behind). With
# episodes ending at 5% of steps, 256 steps hold an end in a row but for a chance of 2e-6. Plans take it
# where _LOOK_BEHIND_BY_DEFAULT says so (tile_override(look_behind=0) turns it off). Measured on an H200
# (benchmarks/results/h200-2026-12-05-run42-look-behind-ab.txt), % of the copy ceiling at 1x2^24 without ->
# with: GAE 82.2 -> 89.1, with truncations 86.5 -> 91.1, lambda-returns 87.8 -> 93.0, discounted returns
# 74.6 -> 85.4, eligibility traces 76.5 -> 81.7, prefix sums 76.4 -> 82.5, V-trace 86.3 -> 87.6, with
# truncations 87.4 -> 86.0; at 8x2^21 +0.5 to +3.2 points.
_LOOK_BEHIND_STEPS = 256
_LOOK_BEHIND_BY_DEFAULT = True
# Walked segments are sized so that every program is resident at once, so each walk's registers are
# capped at its share of the multiprocessor's register file (65536 per multiprocessor since sm_70;
# ptxas allocates them in units of 8 per thread). Where a kernel takes more, the programs past the
# register file start only when others end, and their segments, and every segment after them, finish
# a whole walk later. Measured on an H200 (benchmarks/results/h200-2026-12-01-run16-walk-caps.txt), % of
# the copy bandwidth, compiler's choice -> capped: 1x2^24 discounted returns with truncations (88
# registers, 6 programs of 4 warps) 61.5 / 64.4 -> 77.0 / 78.5 in two runs, V-trace with truncations (96)
# 71.2 / 71.9 -> 83.7 / 85.5; stored [T, N] at 8x2^21 (2 warps), GAE (144, 8 programs) 32.6 -> 44.0, with
# truncations (188) 26.5 -> 49.8, V-trace (202, 6 programs) 40.7 -> 54.9 (at 128 instead of 168: 31.5);
# bf16 Retrace with 4 actions (168, 4 programs of 4 warps) 31.8 -> 51.0. Float32 Retrace with 4
# actions (~240 registers) spills at 128 (78 -> 57) and takes fewer programs instead
# (_RETRACE_FUSED_WALK_FLOAT32).
_REGISTERS_PER_MULTIPROCESSOR = 65536
_REGISTER_ALLOCATION_UNIT = 8
_MAX_REGISTERS_PER_THREAD = 255


@dataclasses.dataclass(frozen=True)
class TilePlan:
    block_rows: int
    block_time: int
    num_row_tiles: int
    num_chunks: int
    split: bool
    num_warps: int
    num_stages: int
    window: int
    vec: int
    # a register cap per thread (ptxas .maxnreg), None: the compiler's choice
    max_registers: int | None = None
    # whether programs that walk several chunks load each next chunk ahead: always, but for the one-pass
    # Retrace kernel's (retrace_kernel; the other kernels' loops take their next chunk from the load ahead)
    walk_ahead: bool = True
    # chunks per program of a time split (more than one: walked segments)
    segment_chunks: int = 1
    # time-major groups of ``vec`` steps, each step loaded across the tile's rows (kernels/scan.py:
    # strided_offsets)
    strided_groups: bool = False
    # strided groups of this many neighbouring rows per thread (1, 2: row pairs, or 4), each step of
    # them loaded as one vector (kernels/scan.py: strided_offsets), where the launch's tensors allow it
    # (_grouped_meta)
    rows_per_thread: int = 1
    # grouped programs that walk whole rows recur through each chunk from its carry instead of building
    # every step's map (kernels/scan.py: recur_in_thread), in the kernels that can
    direct: bool = False
    # tiles leave out in-range masks where a call's rows fill whole row tiles and its steps whole chunks
    # (kernels/scan.py: tile_rows), in the kernels that can
    whole_tiles: bool = False
    # steps before each walked segment that its program scans first: where they end an episode in every
    # row of the tile, their carry out is the carry into the segment (kernels/scan.py: look_behind); 0: none
    look_behind: int = 0

    @property
    def walk(self) -> bool:
        """Whether a time split hands each program a segment of several chunks to walk."""
        return self.split and self.segment_chunks > 1

    @property
    def num_segments(self) -> int:
        """Segments per row tile: one per program of a split, one per row tile otherwise."""
        return triton.cdiv(self.num_chunks, self.segment_chunks) if self.split else 1

    @property
    def prefetch(self) -> bool:
        """Whether a program walks several chunks and so loads each next chunk ahead."""
        return self.walk_ahead and self.num_chunks > 1 and (self.walk or not self.split)

    @property
    def grid(self) -> tuple[int]:
        return (self.num_row_tiles * self.num_segments,)


@dataclasses.dataclass
class _Override:
    block_rows: int | None = None
    block_time: int | None = None
    split: bool | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    window: int | None = None
    vec: int | None = None
    max_registers: int | None = None
    prefetch: bool | None = None
    walk_programs: int | None = None
    retrace_kernels: str | None = None
    retrace_flat_values: int | None = None
    rows_per_thread: int | None = None
    direct: bool | None = None
    whole_tiles: bool | None = None
    look_behind: int | None = None


_NO_OVERRIDE = _Override()
_override = _NO_OVERRIDE


@contextlib.contextmanager
def tile_override(
    block_rows: int | None = None,
    block_time: int | None = None,
    split: bool | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    window: int | None = None,
    vec: int | None = None,
    max_registers: int | None = None,
    prefetch: bool | None = None,
    walk_programs: int | None = None,
    retrace_kernels: str | None = None,
    retrace_flat_values: int | None = None,
    rows_per_thread: int | None = None,
    direct: bool | None = None,
    whole_tiles: bool | None = None,
    look_behind: int | None = None,
) -> Iterator[None]:
    """Force tile sizes (powers of two) and whether time is split across programs.

    For tests (multi-chunk and look-back paths at small sizes) and tuning; None keeps the heuristic.
    ``max_registers`` caps registers per thread (0: no cap); ``prefetch=False`` stops the one-pass Retrace
    kernel's (``retrace_kernel``) programs that walk several chunks from loading the next one ahead
    (``True`` makes them, where the plan would not; the other kernels' programs always load ahead);
    ``walk_programs``: a split of a kernel that
    walks segments makes about this many programs per multiprocessor (0: one chunk per program);
    ``retrace_kernels``: Retrace runs ``"one-pass"``, ``"two-pass"`` or ``"fused"`` (``retrace``) whatever
    the call (the tile sizes then apply to the kernel that scans), except outputs narrower than half
    the compute dtype, which always take the one-pass kernel; ``retrace_flat_values``: the first of
    Retrace's two passes reads dense per-action tensors in flat blocks of this many values where it can
    (0: in ``[steps, actions]`` tiles); ``rows_per_thread``: strided time-major tiles hold runs of 1, 2
    (row pairs) or 4 neighbouring rows per thread (``kernels/scan.py: strided_offsets``) where the tile has
    a run for every thread and 16 runs across, and the launch's tensors allow it (``_grouped_meta``); one
    row per thread otherwise; ``direct``: grouped programs that walk whole rows recur from each chunk's
    carry (``TilePlan.direct``), or build every step's map; ``whole_tiles``: the tiles of the kernels that can
    leave out in-range masks where a call's rows and steps fill whole tiles, or keep them (``TilePlan.whole_tiles``);
    ``look_behind``: steps each walked segment scans before it (a power of two up to the chunk's steps; 0: none,
    ``TilePlan.look_behind``).
    """
    global _override
    previous = _override
    _override = _Override(block_rows, block_time, split, num_warps, num_stages, window, vec, max_registers, prefetch,
                          walk_programs, retrace_kernels, retrace_flat_values, rows_per_thread, direct, whole_tiles,
                          look_behind)
    try:
        yield
    finally:
        _override = previous


@functools.cache
def _multiprocessors(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


# GPUs of more peak memory bandwidth per multiprocessor than this (an H200: 36.5; an H100: 25) take
# StridedTimeMajor.fast_memory: the tiles that suit an H100 keep too few loads in flight for them (see
# VTRACE_STRIDED_TIME_MAJOR)
_FAST_MEMORY_GBPS_PER_MULTIPROCESSOR = 30.0


@functools.cache
def _dram_gbps_per_multiprocessor(device: torch.device) -> float:
    """Peak memory bandwidth (GB/s, double data rate over the bus) per multiprocessor; 0 off CUDA or where the
    driver does not report it."""
    if device.type != "cuda":
        return 0.0
    index = device.index if device.index is not None else torch.cuda.current_device()
    properties = driver.active.utils.get_device_properties(index)
    # mem_clock_rate in kHz, mem_bus_width in bits
    gbps = 2 * properties.get("mem_clock_rate", 0) * 1e3 * properties.get("mem_bus_width", 0) / 8 / 1e9
    return gbps / _multiprocessors(device)


def plan_tiles(
    num_rows: int,
    seq_len: int,
    time_major: bool,
    device: torch.device,
    heavy: bool,
    max_block_time: int = 1 << 30,
    element_bytes: int | None = None,
    single_chunk_steps: int = _MANY_ROWS_BLOCK_TIME,
    max_warps: int = 8,
    time_major_tile: tuple[int, int, int, int] | None = None,
    split_block_time: int | None = None,
    split_max_registers: int | None = _SPLIT_MAX_REGISTERS,
    one_row_tile_split: int | None = None,
    walk_split: tuple[int, int] | None = None,
    time_major_many_rows: tuple[int, int, int] | None = None,
    packed_tile_elements: int = _MIN_TILE_ELEMENTS,
    narrow_steps_per_warp: tuple[int, int] | None = None,
    long_walk_split: tuple[int, int] | None = None,
    walk_register_cap: bool = True,
    time_major_walk: tuple[int, int] | None = None,
    strided_time_major: StridedTimeMajor | None = None,
    narrow_whole_rows: bool = False,
) -> TilePlan:
    """Tile shape, warps and whether to split time, for one call.

    ``heavy`` kernels (V-trace, Retrace) keep more values live per step and take smaller tiles;
    ``max_block_time`` caps the chunk length (Retrace's tiles also span an action block);
    ``element_bytes``: the largest element size of the [rows, T] tensors, given by kernels that read
    grouped tiles of several steps per thread (None: the kernel reads step by step); batch-major rows of up to
    ``single_chunk_steps`` steps are scanned in one chunk per program, by up to ``max_warps`` warps;
    time-major calls take tiles of ``time_major_tile`` (rows, steps, fewest rows not split in time,
    warps; None: by the number of rows). Programs of a time split take chunks of
    ``split_block_time`` steps (None: 2048, heavy 512) and at most ``split_max_registers`` registers
    per thread (batch-major float32 and float16/bf16); when all rows fit one row tile, a batch-major
    split takes chunks of ``one_row_tile_split`` steps instead, if given.
    ``walk_split``: (chunk steps, programs per multiprocessor) of walked segments, for kernels that can
    walk a segment of several chunks per program of a split (time-major splits walk tiles of
    ``_TIME_MAJOR_WALK_TILE``, or of ``time_major_walk``, or with strided groups
    ``StridedTimeMajor.walk`` / ``paired_walk`` (float32 steps, at least ``walk[0]`` rows), instead of
    that chunk length).
    ``time_major_many_rows``: (rows, steps, warps) of the time-major tiles of calls of at least
    ``_TIME_MAJOR_MANY_ROWS`` rows, for kernels measured there (None: by the number of rows).
    ``packed_tile_elements``: batch-major rows shorter than this are packed, several to a program of one
    warp, up to this many steps. ``narrow_steps_per_warp``: (one chunk per row, rows walked in chunks)
    steps per warp of batch-major tiles of 2-byte inputs (None: two 16-byte vectors per thread for a
    single chunk, as float32 tiles otherwise). ``long_walk_split``: (chunk steps, programs per
    multiprocessor) of batch-major walked segments, taken instead of ``walk_split`` where it still gives
    segments of at least 8 chunks. Walked segments take at most the registers that let every program of
    the walk be resident at once, unless ``walk_register_cap`` is False. ``time_major_walk``: (chunk
    steps, warps per multiprocessor) of time-major walked segments (None: 64 steps, as many warps as
    ``walk_split``'s programs of 2 warps); ignored where ``strided_time_major`` is given.
    ``strided_time_major``: the tiles of time-major calls read in strided groups
    (``kernels/scan.py: strided_offsets``), for kernels that can (None: step by step).
    ``narrow_whole_rows``: batch-major programs of 2-byte steps that walk whole rows leave out in-range
    masks where the rows and steps fill whole tiles (``TilePlan.whole_tiles``).
    """
    args = (num_rows, seq_len, time_major, device, heavy, max_block_time, element_bytes, single_chunk_steps,
            max_warps, time_major_tile, split_block_time, split_max_registers, one_row_tile_split, walk_split,
            time_major_many_rows, packed_tile_elements, narrow_steps_per_warp, long_walk_split, walk_register_cap,
            time_major_walk, strided_time_major, narrow_whole_rows)
    if _override is _NO_OVERRIDE:
        return _default_plan(*args)
    return _plan(*args)


@functools.lru_cache(maxsize=4096)
def _default_plan(
    num_rows: int, seq_len: int, time_major: bool, device: torch.device, heavy: bool, max_block_time: int,
    element_bytes: int | None, single_chunk_steps: int, max_warps: int,
    time_major_tile: tuple[int, int, int, int] | None,
    split_block_time: int | None, split_max_registers: int | None, one_row_tile_split: int | None,
    walk_split: tuple[int, int] | None, time_major_many_rows: tuple[int, int, int] | None,
    packed_tile_elements: int, narrow_steps_per_warp: tuple[int, int] | None,
    long_walk_split: tuple[int, int] | None, walk_register_cap: bool, time_major_walk: tuple[int, int] | None,
    strided_time_major: StridedTimeMajor | None, narrow_whole_rows: bool,
) -> TilePlan:
    # planning costs more host time than a launch; calls repeat the same shapes
    return _plan(num_rows, seq_len, time_major, device, heavy, max_block_time, element_bytes, single_chunk_steps,
                 max_warps, time_major_tile, split_block_time, split_max_registers, one_row_tile_split, walk_split,
                 time_major_many_rows, packed_tile_elements, narrow_steps_per_warp, long_walk_split,
                 walk_register_cap, time_major_walk, strided_time_major, narrow_whole_rows)


def _time_major_tile(
    num_rows: int, heavy: bool, many_rows_tile: tuple[int, int, int] | None
) -> tuple[int, int, int, int]:
    """(rows, steps, fewest rows not split in time, warps) of a time-major tile, by the programs it makes."""
    if many_rows_tile is not None and num_rows >= _TIME_MAJOR_MANY_ROWS:
        tile_rows, tile_steps, tile_warps = many_rows_tile
        return tile_rows, tile_steps, _TIME_MAJOR_UNSPLIT_ROWS, tile_warps
    programs = _TIME_MAJOR_PROGRAMS // 2 if heavy else _TIME_MAJOR_PROGRAMS
    tile_rows = 32 if num_rows >= 32 * programs else 16
    tile_steps = _TIME_MAJOR_TILE_ELEMENTS // tile_rows
    if num_rows < 16 * programs and not heavy:
        tile_steps *= 2
    return tile_rows, tile_steps, _TIME_MAJOR_UNSPLIT_ROWS, _TIME_MAJOR_WARPS


def _plan(
    num_rows: int, seq_len: int, time_major: bool, device: torch.device, heavy: bool, max_block_time: int,
    element_bytes: int | None, single_chunk_steps: int, max_warps: int,
    time_major_tile: tuple[int, int, int, int] | None,
    split_block_time: int | None, split_max_registers: int | None, one_row_tile_split: int | None,
    walk_split: tuple[int, int] | None, time_major_many_rows: tuple[int, int, int] | None,
    packed_tile_elements: int, narrow_steps_per_warp: tuple[int, int] | None,
    long_walk_split: tuple[int, int] | None, walk_register_cap: bool, time_major_walk: tuple[int, int] | None,
    strided_time_major: StridedTimeMajor | None, narrow_whole_rows: bool,
) -> TilePlan:
    rows_pow2, time_pow2 = triton.next_power_of_2(num_rows), triton.next_power_of_2(seq_len)
    walk_block_time, walk_programs = walk_split or (0, 0)
    if _override.walk_programs is not None:
        walk_programs = _override.walk_programs
    segment_chunks = 1
    rows_per_thread = 1
    if not time_major:
        strided_time_major = None
    if strided_time_major is not None:
        strided_time_major = strided_time_major.for_memory(_dram_gbps_per_multiprocessor(device))
        # strided groups take the walk tiles of StridedTimeMajor (walk / paired_walk for float32 steps
        # from walk[0] rows) or the 16 x 64 time-major walk tile, never time_major_walk
        time_major_walk = None
    # rows of no whole number of groups are read step by step (_grouped_meta) and keep the plans they had
    # before the tiles of 16 rows and the walks of 32 (none of those was measured on such rows)
    whole_groups = strided_time_major is not None and seq_len % strided_time_major.vec == 0
    strided_tile = (time_major and strided_time_major is not None and time_major_tile is None
                    and num_rows >= (_STRIDED_TILE_MIN_ROWS if whole_groups else _PARTIAL_GROUPS_STRIDED_MIN_ROWS))
    if strided_tile:
        tile_rows, tile_steps, tile_warps, rows_per_thread = strided_time_major.tile_of(
            num_rows, _multiprocessors(device), whole_groups, element_bytes, seq_len)
        # the tile names its warps (max_warps is for batch-major single chunks)
        max_warps = max(max_warps, tile_warps)
        unsplit_rows = _TIME_MAJOR_UNSPLIT_ROWS
    elif time_major:
        tile_rows, tile_steps, unsplit_rows, tile_warps = (
            time_major_tile or _time_major_tile(num_rows, heavy, time_major_many_rows))
    if time_major:
        block_time = min(time_pow2, tile_steps)
        block_rows = min(rows_pow2, tile_rows * tile_steps // block_time)
        # too few rows leave too few loads in flight: split time as well
        split = seq_len > block_time and num_rows < unsplit_rows
    else:
        # rows of up to single_chunk_steps steps are one chunk per program, however few the rows (then
        # nothing is split in time: the time split below would cut such a row into one or two chunks)
        block_time = time_pow2 if time_pow2 <= single_chunk_steps else min(time_pow2, _MANY_ROWS_BLOCK_TIME)
        block_rows = min(rows_pow2, max(1, packed_tile_elements // block_time))
        # too few row tiles to fill the GPU: split time across programs as well
        split = seq_len > block_time and triton.cdiv(num_rows, block_rows) < 2 * _multiprocessors(device)
    if _override.split is not None:
        split = _override.split
    if (split and long_walk_split is not None and not time_major and _override.walk_programs is None
            and _override.block_time is None):
        # batch-major rows long enough to walk segments of 8 chunks of the longer plan take it
        long_steps, long_programs = long_walk_split
        segments = max(1, long_programs * _multiprocessors(device) // triton.cdiv(num_rows, block_rows))
        if triton.cdiv(triton.cdiv(seq_len, long_steps), segments) >= _WALK_MIN_SEGMENT_CHUNKS:
            walk_block_time, walk_programs = long_walk_split
    strided_walk_warps = 0
    walk_elements_per_warp = _TIME_MAJOR_WALK_ELEMENTS_PER_WARP
    if split and walk_split is not None and walk_programs:
        # walked segments, if the rows are long enough for segments of several chunks
        walk_rows_per_thread = 1
        walk_rows, walk_steps = _TIME_MAJOR_WALK_TILE if time_major else (block_rows, walk_block_time)
        walk_warps_per_multiprocessor = walk_programs * _TIME_MAJOR_WALK_PLAN_WARPS
        if time_major and time_major_walk is not None:
            walk_steps, walk_warps_per_multiprocessor = time_major_walk
        if (time_major and whole_groups and num_rows >= strided_time_major.walk[0]
                and element_bytes == _WIDE_WALK_ELEMENT_BYTES):
            walk_rows_per_thread = 1 if strided_time_major.paired_walk is None else 2
            walk_rows, walk_steps, walk_warps_per_multiprocessor = strided_time_major.paired_walk or strided_time_major.walk
            # a thread holds a group of each of its rows: that many times the elements per warp
            walk_elements_per_warp *= walk_rows_per_thread
            # the tile names its warps (8, more than other walks take)
            strided_walk_warps = walk_rows * walk_steps // walk_elements_per_warp
        walk_rows = _override.block_rows or min(rows_pow2, walk_rows)
        walk_steps = _override.block_time or min(time_pow2, walk_steps)
        if time_major and _override.walk_programs is None:
            tile_warps = max(1, walk_rows * walk_steps // walk_elements_per_warp)
            walk_programs = max(1, walk_warps_per_multiprocessor // tile_warps)
        segments = max(1, walk_programs * _multiprocessors(device) // triton.cdiv(num_rows, walk_rows))
        segment_chunks = triton.cdiv(triton.cdiv(seq_len, walk_steps), segments)
        if segment_chunks < _WALK_MIN_SEGMENT_CHUNKS and _override.walk_programs is None:
            segment_chunks = 1
        else:
            block_rows, block_time, rows_per_thread = walk_rows, walk_steps, walk_rows_per_thread
    if split and time_major and segment_chunks == 1:
        block_time = min(time_pow2, _TIME_MAJOR_SPLIT_BLOCK_TIME)
        block_rows = min(rows_pow2, _TIME_MAJOR_SPLIT_BLOCK_ROWS)
    elif split and segment_chunks == 1:
        if split_block_time is None:
            split_block_time = _HEAVY_SPLIT_BLOCK_TIME if heavy else _SPLIT_BLOCK_TIME
        if one_row_tile_split is not None and triton.cdiv(num_rows, _override.block_rows or block_rows) == 1:
            split_block_time = one_row_tile_split
        block_time = min(time_pow2, split_block_time)
    block_time = _override.block_time or min(block_time, max_block_time)
    block_rows = _override.block_rows or block_rows
    num_row_tiles = triton.cdiv(num_rows, block_rows)
    num_chunks = triton.cdiv(seq_len, block_time)
    split = split and num_chunks > 1
    if not split:
        segment_chunks = 1
    # Batch-major tiles are grouped: each thread holds 16 contiguous bytes of steps of the widest input
    # (kernels/scan.py: chunk_steps), loaded as one vector and scanned in registers before the groups
    # are scanned across threads. Measured on an H200 against one step per thread, % of the copy
    # bandwidth (benchmarks/results/h200-2026-11-30-run7-*.txt): GAE 4096x4096 50 -> 87, V-trace
    # 4096x4096 71 -> 90, discounted returns 4096x4096 64 -> 84, walked GAE 8x2^21 58 -> 69 (with the
    # same plan), V-trace 57 -> 73, discounted returns 51 -> 73; narrow steps of one chunk per program
    # take two vectors per thread (bf16 GAE 40% -> 58% at 16384x512 against one step per thread).
    single_chunk = not time_major and not split and num_chunks == 1
    vector_loads = element_bytes is not None and element_bytes <= 2 and single_chunk
    if time_major and split and segment_chunks > 1:
        elements_per_warp = walk_elements_per_warp
    elif time_major:
        elements_per_warp = (_TIME_MAJOR_SPLIT_ELEMENTS_PER_WARP if split
                             else tile_rows * tile_steps // tile_warps)
    elif not split and block_time < packed_tile_elements:
        # packed short rows: one warp per tile
        elements_per_warp = packed_tile_elements
    elif narrow_steps_per_warp is not None and element_bytes is not None and element_bytes <= 2 and not split:
        elements_per_warp = narrow_steps_per_warp[0 if single_chunk else 1]
    elif vector_loads:
        # two vectors per thread: 1 warp per 512 steps (at 16384x512 on an H200, bf16 GAE 56% -> 67% of
        # the copy bandwidth, V-trace 55% -> 59%, against one vector per thread)
        elements_per_warp = 2 * 32 * _MAX_VEC
    else:
        # 4 warps per 512 steps: at 16384x512, lambda-returns 66% -> 91% of the copy bandwidth and
        # GAE with truncations 70% -> 87% against 2 warps (GAE without them equal)
        elements_per_warp = 128
    if split and segment_chunks > 1:
        max_warps = strided_walk_warps or min(max_warps, _WALK_WARPS)
    elif split:
        # more warps are for single chunks of many loads per step (GAE with truncations: 1x2^24 took
        # 316 us with 16 warps against 219 with 8 on an H200)
        max_warps = min(max_warps, _SPLIT_MAX_WARPS)
    num_warps = _override.num_warps or max(1, min(max_warps, block_rows * block_time // elements_per_warp))
    num_stages = _override.num_stages or 1
    window = _override.window or (_FEW_CHAINS_LOOKBACK_WINDOW if num_row_tiles < _FEW_CHAINS else _LOOKBACK_WINDOW)
    vec = 1
    if element_bytes and not time_major:
        vec = min(_MAX_VEC, _VECTOR_BYTES // element_bytes)
    elif strided_time_major is not None and (strided_tile or (split and segment_chunks > 1)):
        vec = strided_time_major.vec
    # every thread holds at least one group, and a group lies inside one chunk
    while vec > 1 and (block_time < vec or block_rows * block_time < 32 * num_warps * vec):
        vec //= 2
    vec = _override.vec or vec
    strided_groups = strided_time_major is not None and vec > 1
    # a run of rows for every thread, and at least 16 runs across a tile (tiles of 16 rows in pairs went
    # through shared memory when compiled for sm_90a)
    if _override.rows_per_thread is not None:
        rows_per_thread = _override.rows_per_thread
    if not (strided_groups and block_rows >= rows_per_thread * _NARROW_STRIDED_TILE_ROWS
            and block_rows * block_time >= rows_per_thread * 32 * num_warps * vec):
        rows_per_thread = 1
    if split and segment_chunks > 1:
        default_cap = _walk_register_budget(walk_programs, num_warps) if walk_register_cap else None
    else:
        default_cap = split_max_registers if split and not time_major else None
    max_registers = _register_cap(default_cap)
    default_tiles = not split and _override.block_rows is None and _override.block_time is None
    # the tiles of direct_whole_tile recur directly and leave out in-range masks where whole
    direct_whole = strided_tile and strided_time_major.direct_whole_tile(
        num_rows, seq_len, _multiprocessors(device), whole_groups, element_bytes) is not None
    direct = default_tiles and strided_tile and (direct_whole or strided_time_major.direct(num_rows, element_bytes))
    if _override.direct is not None:
        direct = _override.direct
    if strided_tile:
        whole_tiles = default_tiles and (direct_whole or strided_time_major.whole(num_rows, element_bytes))
    else:
        whole_tiles = default_tiles and not time_major and narrow_whole_rows and element_bytes == 2
    if _override.whole_tiles is not None:
        whole_tiles = _override.whole_tiles
    look_behind = min(block_time, _LOOK_BEHIND_STEPS) if split and segment_chunks > 1 and _LOOK_BEHIND_BY_DEFAULT else 0
    if _override.look_behind is not None:
        look_behind = min(block_time, _override.look_behind)
    if look_behind:
        # a look-behind tile holds whole groups
        look_behind = max(look_behind, vec)
    return TilePlan(block_rows, block_time, num_row_tiles, num_chunks, split, num_warps, num_stages, window, vec,
                    max_registers, True, segment_chunks, strided_groups, rows_per_thread, direct, whole_tiles,
                    look_behind)


def _walk_register_budget(programs_per_multiprocessor: int, num_warps: int) -> int | None:
    """Registers per thread that let ``programs_per_multiprocessor`` programs share a multiprocessor
    (None: more than a thread can take)."""
    threads = programs_per_multiprocessor * num_warps * 32
    budget = _REGISTERS_PER_MULTIPROCESSOR // threads // _REGISTER_ALLOCATION_UNIT * _REGISTER_ALLOCATION_UNIT
    return budget if budget < _MAX_REGISTERS_PER_THREAD else None


def _register_cap(default: int | None) -> int | None:
    """Registers per thread of a plan: ``tile_override``'s cap if it sets one (0: none), else ``default``."""
    if _override.max_registers is None:
        return default
    return _override.max_registers or None


def _is_time_major(x: torch.Tensor) -> bool:
    return x.stride(-1) != 1 and x.stride(0) == 1 and x.shape[0] > 1


# the workspace arguments of calls that do not split time (never read), one per device
_placeholders: dict[torch.device, torch.Tensor] = {}


def _placeholder(device: torch.device) -> torch.Tensor:
    placeholder = _placeholders.get(device)
    if placeholder is None:
        placeholder = _placeholders[device] = torch.empty(0, dtype=torch.int32, device=device)
    return placeholder


class _StreamWorkspaces:
    """The two look-back workspaces of one thread on one stream (or in one graph capture on it), which
    the thread's split launches there take in turn.

    A workspace's int32 flags are `chunk_carry`'s block counters (one per block of `window` chunks of
    each row tile), the status words and the ticket: zeros when a launch starts. A launch leaves the words
    it used behind, and the next split launch on the stream zeroes them while it uses the other workspace
    (kernels/scan.py: ``clear_spent_workspace``), so no call zeroes a workspace before its launch (on an
    H200 a zero fill is a kernel of its own: 1.15-1.2 us of a CUDA graph per call, 5.9 us of host time).
    ``dirty[i]``: the leading words of workspace i that a launch may have left behind and no launch has
    zeroed since. The aggregates and prefixes (written before they are read) are kept per compute dtype.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.flags: list[torch.Tensor | None] = [None, None]
        self.dirty = [0, 0]
        self.turn = 0
        self.values: dict[torch.dtype, torch.Tensor] = {}

    def take(self, flag_words: int, value_count: int, dtype: torch.dtype
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
        """(flags, values, the other workspace's flags, how many of them to zero, the other's index) for the
        next launch; ``cleared`` is to be called with the last two once that launch has been issued."""
        own, other = self.turn, 1 - self.turn
        flags = self.flags[own]
        if flags is None or flags.numel() < flag_words:
            size = flag_words if flags is None else max(flag_words, 2 * flags.numel())
            flags = self.flags[own] = torch.zeros(size, dtype=torch.int32, device=self.device)
        elif self.dirty[own]:
            # the launch that was to zero it was never issued
            flags[: self.dirty[own]].zero_()
        values = self.values.get(dtype)
        if values is None or values.numel() < value_count:
            size = value_count if values is None else max(value_count, 2 * values.numel())
            values = self.values[dtype] = torch.empty(size, dtype=dtype, device=self.device)
        spent = self.flags[other]
        spent_words = self.dirty[other] if spent is not None else 0
        self.dirty[own] = flag_words
        self.turn = other
        return flags, values, flags if spent is None else spent, spent_words, other

    def cleared(self, other: int, words: int) -> None:
        """A launch that zeroes the first ``words`` flags of workspace ``other`` has been issued."""
        if self.dirty[other] <= words:
            self.dirty[other] = 0


# The workspaces of each (device, stream, graph capture), per thread: streams keep their own, since launches
# on two streams may run at once, and so does each graph capture, whose launches run whenever and wherever
# the graph is replayed. A capture's are allocated (and zeroed, by nodes of the graph) at its first split
# launches, and dropped from here when the stream's next capture starts; the graph keeps their memory.
# Threads keep their own too: they share streams, and a launch that another thread issued between this
# thread's taking a workspace and its launch would run before the launch that was to zero its words.
_thread_state = threading.local()
_pending = threading.local()


def _thread_workspaces() -> dict[tuple[torch.device, int, int], _StreamWorkspaces]:
    """This thread's workspaces by (device, stream, capture): they go with the thread."""
    try:
        return _thread_state.workspaces
    except AttributeError:
        workspaces = _thread_state.workspaces = {}
        return workspaces


def _stream_workspaces(key: tuple[torch.device, int, int]) -> _StreamWorkspaces:
    """This thread's workspaces of ``key`` (device, stream, capture), made where it has none yet."""
    table = _thread_workspaces()
    workspaces = table.get(key)
    if workspaces is None:
        workspaces = table[key] = _StreamWorkspaces(key[0])
    return workspaces


def _workspace_key(device: torch.device) -> tuple[torch.device, int, int] | None:
    """(device, stream, capture) of a launch on ``device`` now (capture 0: none), or None where the
    launch takes a workspace of its own (a capture whose id is not known)."""
    if device.type != "cuda":
        return device, 0, 0  # Triton's interpreter runs one launch at a time
    stream = torch._C._cuda_getCurrentRawStream(device.index)
    if not torch.cuda.is_current_stream_capturing():
        return device, stream, 0
    capture = _capture_id(stream)
    if capture is None:
        return None
    table = _thread_workspaces()
    for key in [key for key in table if key[:2] == (device, stream) and key[2] not in (0, capture)]:
        del table[key]
    return device, stream, capture


@functools.cache
def _capture_info_function() -> Callable | None:
    """The driver's ``cuStreamGetCaptureInfo_v2``, or None."""
    try:
        function = ctypes.CDLL("libcuda.so.1").cuStreamGetCaptureInfo_v2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint64),
                         ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    function.restype = ctypes.c_int
    return function


def _capture_id(stream: int) -> int | None:
    """The id of the graph capture under way on ``stream`` (unique per capture in a process), or None."""
    function = _capture_info_function()
    if function is None:
        return None
    status, capture = ctypes.c_int(), ctypes.c_uint64()
    if function(stream, ctypes.byref(status), ctypes.byref(capture), None, None, None) != 0 or status.value != 1:
        return None  # CUDA_SUCCESS and CU_STREAM_CAPTURE_STATUS_ACTIVE expected
    return capture.value


@dataclasses.dataclass(frozen=True)
class WorkspaceGeometry:
    """Where a launch's look-back arguments lie in its stream's workspaces (in elements)."""

    counters: int
    slots: int
    flag_words: int
    aggregate_count: int
    value_count: int
    dtype: torch.dtype

    def views(self, flags: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(status words, aggregates, prefixes, ticket) in a workspace: chunk_carry's block counters come
        first in ``flags``, then the status words, then the ticket (and, for walks with a look-behind, each
        row tile's count of finished segments)."""
        return (flags[self.counters : self.counters + self.slots], values[: self.aggregate_count],
                values[self.aggregate_count : self.value_count], flags[self.counters + self.slots : self.flag_words])

    def pointers(self, workspaces: _StreamWorkspaces) -> tuple[int, ...]:
        """What a replay passes: ``views``' addresses from the next of ``workspaces``, the flags to zero
        and how many, then the index of the workspace they are in (for ``_StreamWorkspaces.cleared``)."""
        flags, values, spent, spent_words, other = workspaces.take(self.flag_words, self.value_count, self.dtype)
        base, value_base, item = flags.data_ptr(), values.data_ptr(), values.element_size()
        return (base + 4 * self.counters, value_base, value_base + item * self.aggregate_count,
                base + 4 * (self.counters + self.slots), spent.data_ptr(), spent_words, other)


def _lookback_workspace(plan: TilePlan, dtype: torch.dtype, device: torch.device) -> tuple[tuple, tuple]:
    """A launch's look-back arguments, (status, aggregates, prefixes, ticket counter), and the arguments of
    its clear of the workspace the launch before used, (flags to zero, how many).

    Kernels take the clear's two after all their other runtime arguments: where they take them sets
    where ptxas finds every later argument, and with them in the middle ptxas scheduled the unchanged
    code of unsplit launches differently (time-major discounted returns at 4096x4096 on an H200: 85-87%
    -> 72-73% of the copy bandwidth; benchmarks/NOTES.md, "Thirty-eighth round").

    Split launches take views of their stream's workspaces (``_StreamWorkspaces``); a launch under a
    graph capture whose id is not known takes fresh ones. The launch (``_launch``) reports itself issued.
    """
    _pending.cleared = None
    if not plan.split:
        dummy = _placeholder(device)
        return (dummy, dummy, dummy, dummy), (dummy, 0)
    slots = plan.num_row_tiles * plan.num_segments
    counters = plan.num_row_tiles * triton.cdiv(plan.num_segments, plan.window)
    # walks with a look-behind count each row tile's finished segments after the ticket (kernels/scan.py:
    # finish_walk_and_mend)
    done_counters = plan.num_row_tiles if plan.walk and plan.look_behind else 0
    geometry = WorkspaceGeometry(counters, slots, counters + slots + 1 + done_counters, 2 * slots * plan.block_rows,
                                 3 * slots * plan.block_rows, dtype)
    key = _workspace_key(device)
    if key is None:
        flags = torch.zeros(geometry.flag_words, dtype=torch.int32, device=device)
        values = torch.empty(geometry.value_count, dtype=dtype, device=device)
        spent, spent_words = _placeholder(device), 0
    else:
        workspaces = _stream_workspaces(key)
        flags, values, spent, spent_words, other = workspaces.take(geometry.flag_words, geometry.value_count, dtype)
        _pending.cleared = functools.partial(workspaces.cleared, other, spent_words)
    lookback, clearing = geometry.views(flags, values), (spent, spent_words)
    recording = _replay.active_recording()
    if recording is not None and key is not None:
        if key[2]:
            # a capture's workspaces are the graph's: a replay outside it must not touch them
            recording.abandon(worth_retrying=True)
        else:
            recording.use_workspace(key, workspaces, geometry, lookback + clearing)
    return lookback, clearing


def _float_arg(value: float) -> object:
    """A float kernel argument that stays float64 on every path.

    Compiled kernels take it through their ``tl.float64`` annotation; Triton's interpreter would
    turn a Python float into a float32 constant, so there it travels as a float64 scalar tensor.
    """
    if not interpreter_enabled():
        return value
    from triton.runtime.interpreter import TensorHandle

    return tl.tensor(TensorHandle(np.array([value], dtype=np.float64), tl.float64), tl.float64)


def _bootstrap_arg(
    bootstrap_values: torch.Tensor | None, last_value: torch.Tensor | None
) -> tuple[torch.Tensor | None, int, tuple[int, int]]:
    """(tensor, BOOTSTRAP mode, (row, time) strides) of a bootstrap input (or its gradient) of GAE or V-trace."""
    if last_value is not None:
        return last_value, BOOTSTRAP_LAST, (last_value.stride(0), 0)
    if bootstrap_values is not None:
        return bootstrap_values, BOOTSTRAP_FULL, (bootstrap_values.stride(0), bootstrap_values.stride(1))
    return None, BOOTSTRAP_NONE, (0, 0)


def _compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def _triton_dtype(dtype: torch.dtype) -> tl.dtype:
    return tl.float64 if dtype == torch.float64 else tl.float32


def _strides(x: torch.Tensor | None) -> tuple[int, ...]:
    return (0, 0) if x is None else tuple(x.stride())


def _element_bytes(*tensors: torch.Tensor | None) -> int:
    """The largest element size of the given tensors (2 for bf16/fp16 values with bool/uint8 flags)."""
    return max(t.element_size() for t in tensors if t is not None)


def _specialisation(args: tuple) -> list:
    """What Triton specialises kernel arguments on, or finer: tensors by dtype and 16-byte
    alignment, ints by value (Triton: equal to 1, divisible by 16, beyond int32); floats not at all
    (the kernels annotate them as float64)."""
    return [
        arg if arg.__class__ is int
        else (arg.dtype, arg.data_ptr() & 15 == 0) if isinstance(arg, torch.Tensor)
        else None
        for arg in args
    ]  # fmt: skip


# compiled kernels by (kernel, device, constexprs, argument specialisation), with their constexpr
# arguments in signature order
_compiled: dict[tuple, tuple] = {}


@dataclasses.dataclass
class _DirectLaunch:
    enabled: bool = True


_direct_launch = _DirectLaunch()


def _profiling_hooks() -> bool:
    """Whether a launch hook is installed (Triton 3.6 keeps them in a HookChain, empty by default)."""
    hook = knobs.runtime.launch_enter_hook
    return hook is not None and bool(getattr(hook, "calls", True))


def full_launch_path_only() -> bool:
    """Whether launches take Triton's own path (or tile plans are overridden), so calls are not replayed."""
    return _override is not _NO_OVERRIDE or not _direct_launch.enabled or _profiling_hooks()


def run_compiled(compiled: object, constexprs: tuple, grid: tuple[int, ...], args: list | tuple) -> None:
    """Launch a compiled kernel on the current stream (Triton 3.6's launcher signature)."""
    device = driver.active.get_current_device()
    compiled.run(grid[0], 1, 1, driver.active.get_current_stream(device), compiled.function,
                 compiled.packed_metadata, None, None, None, *args, *constexprs)


def direct_launch(compiled: object, grid: tuple[int, ...]) -> tuple[Callable, tuple[int, ...], tuple] | None:
    """Triton 3.6's C launch function of ``compiled``, with its arguments before and after the
    stream; the kernel's arguments and constexprs follow them. None where there is none to call.

    Triton's launcher object wraps that C function in Python that allocates scratch memory when
    a kernel needs some. For kernels that need none (all of this library's), replays
    (``rl_triton._replay``) call the C function directly.
    """
    launcher = getattr(compiled, "run", None)
    c_launch = getattr(launcher, "launch", None)
    if (c_launch is None or type(launcher).__name__ != "CudaLauncher"
            or getattr(launcher, "global_scratch_size", 1) != 0 or getattr(launcher, "profile_scratch_size", 1) != 0):
        return None
    after_stream = (compiled.function, launcher.launch_cooperative_grid, launcher.launch_pdl,
                    None, None,  # no scratch memory
                    compiled.packed_metadata, None, None, None)  # no launch metadata or hooks
    return c_launch, (grid[0], 1, 1), after_stream


def replay_launcher(compiled: object, constexprs: tuple, grid: tuple[int, ...]) -> Callable[[int, list], None]:
    """A launch of ``compiled`` for replays that have no ``direct_launch``: ``launch(stream, args)``."""

    def launch_through_triton(stream: int, args: list) -> None:
        run_compiled(compiled, constexprs, grid, args)

    return launch_through_triton


def _grouped_meta(args: tuple, meta: dict) -> dict:
    """``meta`` with VEC = 1 where some ``[rows, time]`` tensor of the launch cannot be read in groups.

    Grouped tiles (VEC > 1) read VEC contiguous steps per thread as one vector, and the kernels tell
    Triton that row strides and the row length are multiples of VEC (``kernels/scan.py: whole_groups``).
    That holds when each 2-d tensor has contiguous steps, a whole number of groups per row, rows a
    whole number of groups apart and 16-byte aligned storage. Otherwise the tiles are not grouped:
    Triton's own layout reads such rows far faster than groups it cannot align (on an H200,
    eligibility traces at 4096x1000: 11% of the copy bandwidth grouped, 52% not; benchmarks/NOTES.md).
    The decision depends only on what the compiled-kernel cache key holds (strides, sizes, 16-byte
    alignment), so a cached kernel carries it.
    """
    vec = meta.get("VEC", 1)
    if vec == 1:
        return meta
    if meta.get("STRIDED_GROUPS", False):
        # strided groups read any strides and alignment; the row length must be a whole number of
        # groups, as the scan's masks and the groups' in-range masks take it
        matrices = [arg for arg in args if isinstance(arg, torch.Tensor) and arg.dim() == 2]
        if any(matrix.shape[1] % vec for matrix in matrices):
            return {**meta, "VEC": 1, "STRIDED_GROUPS": False}
        rows_per_thread = meta["STRIDED_GROUPS"]
        while rows_per_thread is not True and not all(_rows_in_runs(matrix, rows_per_thread) for matrix in matrices):
            # runs of half as many rows, down to one row per thread
            rows_per_thread = True if rows_per_thread == 2 else rows_per_thread // 2
        return meta if rows_per_thread == meta["STRIDED_GROUPS"] else {**meta, "STRIDED_GROUPS": rows_per_thread}
    for arg in args:
        if isinstance(arg, torch.Tensor) and arg.dim() == 2:
            num_rows, seq_len = arg.shape
            if (seq_len % vec or (seq_len > 1 and arg.stride(1) != 1) or (num_rows > 1 and arg.stride(0) % vec)
                    or arg.data_ptr() % _VECTOR_BYTES):
                return {**meta, "VEC": 1}
    return meta


def _rows_in_runs(matrix: torch.Tensor, rows_per_thread: int) -> bool:
    """Whether every run of ``rows_per_thread`` rows (0-1, 2-3, ... for pairs) of a ``[rows, time]``
    tensor lies at one element's distance, each run starting at a multiple of its length, as runs of
    rows tell Triton (``kernels/scan.py: strided_offsets``): rows one element apart and a time stride
    that is a multiple of ``rows_per_thread``. A row count Triton does not know to be a multiple of 16
    would leave the row mask of a run unknown to be equal, so such calls take one row per thread."""
    num_rows, seq_len = matrix.shape
    return (num_rows % 16 == 0 and matrix.stride(0) == 1
            and (seq_len == 1 or matrix.stride(1) % rows_per_thread == 0))


class _CompileBatch:
    """The launches of one call, held back from the first launch whose kernel is not compiled yet,
    while every such kernel compiles on a thread of its own.

    A call of several kernels (Retrace's two passes) would otherwise compile them one after another.
    Triton's compiler leaves Python's lock for part of its work (ptxas, the C compiler of a kernel's
    launcher, some of its passes), so the compiles partly overlap; the held-back launches then run in
    their order. Measured on an H200 host, a first call of Retrace with 18 actions at 8x2^21 after
    Triton's own one-time work: median 3.69 -> 2.99 s in five fresh processes each; with bf16 values
    no gain (benchmarks/results/h200-2026-12-02-run24-first-call-ab*.txt).
    """

    def __init__(self) -> None:
        self.launches: list[tuple[triton.runtime.JITFunction, tuple[int], tuple, dict, Callable | None]] = []
        self.compiles: dict[tuple, concurrent.futures.Future] = {}

    def hold(self, key: tuple, compiled: bool, kernel: triton.runtime.JITFunction, grid: tuple[int],
             args: tuple, meta: dict, cleared: Callable[[], None] | None = None) -> None:
        self.launches.append((kernel, grid, args, meta, cleared))
        if not compiled and key not in self.compiles:
            device = torch.cuda.current_device()
            self.compiles[key] = _compile_threads().submit(
                _compile_for_launch, device, kernel, grid, args, _grouped_meta(args, meta))

    def run(self) -> None:
        for compile_done in self.compiles.values():
            compile_done.result()
        for kernel, grid, args, meta, cleared in self.launches:
            _pending.cleared = cleared
            _launch(kernel, grid, *args, **meta)


@functools.cache
def _compile_threads() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="rl_triton-compile")


def _compile_for_launch(device: int, kernel: triton.runtime.JITFunction, grid: tuple[int], args: tuple,
                        meta: dict) -> None:
    """Compile ``kernel`` for a launch, load it and build its C launcher (on a worker thread, whose
    current CUDA device is set first). Errors are left to the launch itself, which compiles again."""
    try:
        with torch.cuda.device(device), building_launchers_aside():
            compiled = kernel.warmup(*args, grid=grid, **meta)
            getattr(compiled, "run", None)  # loads the kernel and builds its launcher
    except Exception:  # noqa: BLE001, S110 - the launch raises it in the caller's thread
        pass


_batch = threading.local()


@contextlib.contextmanager
def compile_together() -> Iterator[None]:
    """Compile the kernels of the launches inside at once (each on a thread) where some are not
    compiled yet; launches run in their order, the first one held back and every later one after it,
    at the end of the block. Only for launches that no PyTorch work between them depends on."""
    if getattr(_batch, "current", None) is not None:
        yield
        return
    batch = _batch.current = _CompileBatch()
    try:
        yield
    finally:
        _batch.current = None
    batch.run()


def _launch(kernel: triton.runtime.JITFunction, grid: tuple[int], *args: object, **meta: object) -> None:
    """``kernel[grid](*args, **meta)``, with the compiled kernel looked up in one dict.

    Triton's own launch path spends ~40 us of host time per call binding and specialising ~35
    arguments; the compiled kernel's ``run`` takes ~11 us (H200 host, benchmarks/NOTES.md). The
    cache key holds everything Triton specialises on (ints by value: one entry per distinct shape
    and strides, each the kernel Triton would pick). Profiling hooks and the interpreter take
    Triton's path. A call being recorded for replay (``rl_triton._replay``) is told of each
    launch; one through Triton's path cannot be replayed.
    """
    recording = _replay.active_recording()
    # the look-back workspace this launch zeroes counts as zeroed once the launch is issued
    cleared = getattr(_pending, "cleared", None)
    _pending.cleared = None
    if not _direct_launch.enabled or interpreter_enabled() or _profiling_hooks():
        if recording is not None:
            recording.abandon()
        kernel[grid](*args, **_grouped_meta(args, meta))
        _issued(cleared)
        return
    device = driver.active.get_current_device()
    key = (id(kernel), device, *meta.values(), *_specialisation(args))
    entry = _compiled.get(key)
    batch = getattr(_batch, "current", None)
    if batch is not None and (entry is None or batch.launches):
        batch.hold(key, entry is not None, kernel, grid, args, meta, cleared)
        if recording is not None:
            recording.abandon(worth_retrying=True)
        return
    if entry is None:
        # where packed launches are on, replays launch through a C module built beside the first compile
        _packed_launch.start_build()
        meta = _grouped_meta(args, meta)
        with building_launchers_aside():
            compiled = kernel[grid](*args, **meta)
        _issued(cleared)
        if hasattr(compiled, "packed_metadata"):
            names = kernel.arg_names[len(args):]
            defaults = {p.name: p.default for p in kernel.params}
            _compiled[key] = (compiled, tuple(meta.get(name, defaults[name]) for name in names))
        if recording is not None:
            recording.abandon(worth_retrying=True)
        return
    compiled, constexprs = entry
    try:
        run_compiled(compiled, constexprs, grid, args)
        _issued(cleared)
        if recording is not None:
            recording.launch(compiled, constexprs, grid, args, tuple(_placeholders.values()))
    except TypeError:
        # a Triton whose launcher takes other arguments (the signature above is Triton 3.6's):
        # Triton's own path from now on; the arguments are rejected before anything runs
        _direct_launch.enabled = False
        _compiled.clear()
        if recording is not None:
            recording.abandon()
        kernel[grid](*args, **_grouped_meta(args, meta))
        _issued(cleared)


def _issued(cleared: Callable[[], None] | None) -> None:
    if cleared is not None:
        cleared()


def _meta(plan: TilePlan, dtype: torch.dtype, walk: bool = False, shape: tuple[int, int] | None = None) -> dict:
    """Compile-time arguments of a plan; ``walk``: the kernel takes WALK (it can walk segments); ``shape``:
    the call's (rows, steps), for the kernels that take STRIDED_GROUPS, DIRECT (``TilePlan.direct``) and
    WHOLE_TILES (rows a whole number of row tiles and steps of chunks: no in-range masks, ``kernels/scan.py:
    tile_rows``): GAE, V-trace, returns and episodic scans.

    A kernel gets the same names at every call, whatever their values: ``_launch`` keys a compiled
    kernel by the values alone, which a name present at one call and missing at another could confuse
    (DIRECT at one, WHOLE_TILES at another, both True)."""
    meta = {
        "SPLIT": plan.split,
        "BLOCK_ROWS": plan.block_rows,
        "BLOCK_TIME": plan.block_time,
        "WINDOW": plan.window,
        "DTYPE": _triton_dtype(dtype),
        "num_warps": plan.num_warps,
        "num_stages": plan.num_stages,
    }
    if plan.max_registers is not None and (dtype != torch.float64 or _override.max_registers):
        meta["maxnreg"] = plan.max_registers
    if walk:
        meta["WALK"] = plan.walk
    if shape is not None:
        meta["STRIDED_GROUPS"] = False
        if plan.strided_groups:
            meta["STRIDED_GROUPS"] = True if plan.rows_per_thread == 1 else plan.rows_per_thread
        meta["DIRECT"] = plan.direct
        meta["WHOLE_TILES"] = (plan.whole_tiles and shape[0] % plan.block_rows == 0
                               and shape[1] % plan.block_time == 0)
        meta["LOOK_BEHIND"] = plan.look_behind if plan.walk else 0
    return meta


def _on_the_tensors_device(launcher: Callable[..., None]) -> Callable[..., None]:
    """``launcher`` run with its tensors' GPU as the current CUDA device.

    Triton launches on the current device and its current stream, where a PyTorch op follows its
    tensors. Tensors on ``cuda:1`` in a process whose current device is ``cuda:0`` (one that never
    called ``torch.cuda.set_device``) would otherwise be read by kernels launched on the wrong GPU.
    The arguments' first tensor decides (every tensor of a call is on one device, checked before).
    """

    @functools.wraps(launcher)
    def launch(*args: object, **options: object) -> None:
        device = next(arg for arg in args if isinstance(arg, torch.Tensor)).get_device()
        # -1: a CPU tensor under the interpreter
        if device < 0 or device == torch._C._cuda_getDevice():
            launcher(*args, **options)
            return
        with torch.cuda.device(device):
            launcher(*args, **options)

    return launch


@_on_the_tensors_device
def gae(
    advantages: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None,
    gamma: float,
    lambda_: float,
    bootstrap_values: torch.Tensor | None,
    last_value: torch.Tensor | None,
) -> None:
    num_rows, seq_len = rewards.shape
    dtype = _compute_dtype(rewards, values, bootstrap_values, last_value)
    element_bytes = _element_bytes(rewards, values, terminateds, truncateds, bootstrap_values, advantages)
    heavier = truncateds is not None or bootstrap_values is not None
    narrow = element_bytes <= 2
    plan = plan_tiles(num_rows, seq_len, _is_time_major(rewards), rewards.device, heavy=False,
                      element_bytes=element_bytes, single_chunk_steps=GAE_SINGLE_CHUNK_STEPS,
                      max_warps=16 if heavier and not narrow else 8, walk_split=_GAE_WALK,
                      packed_tile_elements=PACKED_TILE_ELEMENTS,
                      narrow_steps_per_warp=GAE_HEAVIER_NARROW_STEPS_PER_WARP if heavier and narrow else None,
                      long_walk_split=_GAE_NARROW_WALK if narrow else None,
                      time_major_many_rows=_GAE_HEAVIER_TIME_MAJOR_MANY_ROWS if heavier else _LIGHT_TIME_MAJOR_MANY_ROWS,
                      time_major_walk=_TIME_MAJOR_SHORT_WALK if truncateds is not None else None,
                      strided_time_major=(GAE_TRUNCATED_STRIDED_TIME_MAJOR if truncateds is not None
                                          else GAE_STRIDED_TIME_MAJOR),
                      narrow_whole_rows=_NARROW_WHOLE_ROWS)
    lookback, clearing = _lookback_workspace(plan, dtype, rewards.device)
    bootstrap, mode, boot_strides = _bootstrap_arg(bootstrap_values, last_value)
    _launch(
        gae_kernel, plan.grid,
        rewards, values, terminateds, truncateds, bootstrap, advantages,
        *lookback,
        num_rows, seq_len, plan.num_chunks, plan.num_row_tiles, plan.segment_chunks,
        *rewards.stride(), *values.stride(), *terminateds.stride(), *_strides(truncateds),
        *boot_strides, *advantages.stride(),
        *map(_float_arg, (gamma, lambda_)),
        *clearing,
        HAS_TRUNCATED=truncateds is not None, BOOTSTRAP=mode, PREFETCH=plan.prefetch, VEC=plan.vec,
        **_meta(plan, dtype, walk=True, shape=(num_rows, seq_len)),
    )


@_on_the_tensors_device
def vtrace(
    targets: torch.Tensor,
    advantages: torch.Tensor,
    log_pi_target: torch.Tensor,
    log_pi_behavior: torch.Tensor,
    values: torch.Tensor,
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None,
    gamma: float,
    rho_bar: float,
    c_bar: float,
    bootstrap_values: torch.Tensor | None,
    last_value: torch.Tensor | None,
) -> None:
    num_rows, seq_len = rewards.shape
    dtype = _compute_dtype(log_pi_target, log_pi_behavior, values, rewards, bootstrap_values, last_value)
    element_bytes = _element_bytes(log_pi_target, log_pi_behavior, values, rewards, terminateds, truncateds,
                                   bootstrap_values, targets)
    single_chunk_steps = VTRACE_SINGLE_CHUNK_STEPS
    if element_bytes <= 2 and seq_len == triton.next_power_of_2(seq_len):
        single_chunk_steps = VTRACE_NARROW_SINGLE_CHUNK_STEPS
    # a float32 split over a single row tile (one chain of look-backs) that does not walk takes
    # 2048-step chunks instead of 512: on an H200, 1x2^24 374-381 us -> 308-313 us in two runs (8 rows:
    # 241-245 -> 276 us, so several row tiles keep the default)
    plan = plan_tiles(num_rows, seq_len, _is_time_major(rewards), rewards.device, heavy=True,
                      element_bytes=element_bytes, single_chunk_steps=single_chunk_steps,
                      one_row_tile_split=_SPLIT_BLOCK_TIME if element_bytes == 4 else None,
                      walk_split=_VTRACE_ONE_ROW_WALK if num_rows == 1 and element_bytes == 4 else _VTRACE_WALK,
                      long_walk_split=_VTRACE_NARROW_WALK if element_bytes <= 2 else None,
                      time_major_many_rows=_VTRACE_TIME_MAJOR_MANY_ROWS,
                      packed_tile_elements=PACKED_TILE_ELEMENTS if element_bytes <= 2 else _MIN_TILE_ELEMENTS,
                      narrow_steps_per_warp=VTRACE_NARROW_STEPS_PER_WARP,
                      strided_time_major=VTRACE_STRIDED_TIME_MAJOR, narrow_whole_rows=_NARROW_WHOLE_ROWS)
    lookback, clearing = _lookback_workspace(plan, dtype, rewards.device)
    bootstrap, mode, boot_strides = _bootstrap_arg(bootstrap_values, last_value)
    if targets.stride() != advantages.stride():
        raise RuntimeError("vtrace outputs must share one layout")
    _launch(
        vtrace_kernel, plan.grid,
        log_pi_target, log_pi_behavior, values, rewards, terminateds, truncateds, bootstrap,
        targets, advantages,
        *lookback,
        num_rows, seq_len, plan.num_chunks, plan.num_row_tiles, plan.segment_chunks,
        *log_pi_target.stride(), *log_pi_behavior.stride(), *values.stride(), *rewards.stride(),
        *terminateds.stride(), *_strides(truncateds), *boot_strides, *targets.stride(),
        *map(_float_arg, (gamma, rho_bar, c_bar)),
        *clearing,
        HAS_TRUNCATED=truncateds is not None, BOOTSTRAP=mode, PREFETCH=plan.prefetch, VEC=plan.vec,
        **_meta(plan, dtype, walk=True, shape=(num_rows, seq_len)),
    )


@_on_the_tensors_device
def retrace(
    targets: torch.Tensor,
    advantages: torch.Tensor,
    action_probs_target: torch.Tensor,
    action_probs_behavior: torch.Tensor,
    q_values: torch.Tensor,
    next_q_values_all: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor,
    gamma: float,
    lambda_: float,
    c_bar: float,
    rho_bar: float,
    *,
    action_lanes: int | None = None,
) -> None:
    """Retrace targets and advantages; ``action_lanes`` overrides the lanes per action group (for tuning).

    ``_retrace_kernels`` picks the kernels (``kernels/retrace.py``): the fused kernel, two passes, or the
    one-pass kernel.
    """
    num_rows, seq_len, num_actions = action_probs_target.shape
    dtype = _compute_dtype(action_probs_target, action_probs_behavior, q_values, next_q_values_all, rewards)
    if targets.stride() != advantages.stride() or targets.dtype != advantages.dtype:
        raise RuntimeError("retrace outputs must share one layout and dtype")
    kernels, halves, plan = _retrace_kernels(targets, q_values, rewards, terminateds, truncateds, num_actions, dtype)
    if kernels != "one-pass":
        # Pairs of neighbouring actions (8-byte loads) across a warp, the rest of a group of up to 32
        # in registers. Measured on an H200, the first pass alone, % of the copy bandwidth (8, 4, 1
        # lanes -> 2; benchmarks/results/h200-2026-11-30-run9-retrace-passes.txt): 18 actions 16384x512
        # 74.6 / 83.9 / 40.1 -> 87.5, 64x16384 63.9 -> 73.0; 4 actions (4 lanes -> 2) 16384x512 86.7 ->
        # 93.7, 4096x4096 70.8 -> 94.8, 8x2^21 70.2 -> 95.9.
        lanes = action_lanes or min(triton.next_power_of_2(num_actions), _RETRACE_ACTIONS_LANES)
        passes = min(triton.next_power_of_2(triton.cdiv(num_actions, lanes)), max(1, 32 // lanes))
        # the two passes' kernels compile at once on a first call (nothing between their launches reads
        # what the first pass writes)
        with compile_together() if kernels == "two-pass" else contextlib.nullcontext():
            if kernels == "two-pass":
                _retrace_actions(targets, advantages, action_probs_target, action_probs_behavior,
                                 next_q_values_all, actions, dtype, lanes, passes, halves)
            _retrace_scan(targets, advantages, action_probs_target, action_probs_behavior, q_values,
                          next_q_values_all, actions, rewards, terminateds, truncateds, gamma, lambda_, c_bar,
                          rho_bar, dtype, lanes, passes, halves, plan, reduce=kernels == "fused")
        return
    lanes = action_lanes or min(triton.next_power_of_2(num_actions), 8)
    passes = min(triton.next_power_of_2(triton.cdiv(num_actions, lanes)), max(1, 32 // lanes))
    group = lanes * passes
    if dtype == torch.float64:
        # about 1024 values of each per-action tile per chunk (8 per thread of up to 8 warps, twice
        # that while the next chunk is loaded ahead): small tiles of many actions spill with fewer warps
        tile_steps = max(32, min(256, 2048 // group)) // 2
    else:
        # 4 warps and up to 4096 values of each per-action tile per chunk (32 per thread at 18-32
        # actions; twice that spills). Measured on an H200, % of the copy bandwidth at 16384x512 and
        # 4096x1024: 18 actions 21 -> 43-44 (128 steps, 4 warps; 64 steps with 8 warps before),
        # 4 actions 39-42 -> 50-52 (256 steps, 4 warps; 8 warps before).
        tile_steps = max(32, min(256, 4096 // group))
    time_major = _is_time_major(rewards)
    plan = plan_tiles(num_rows, seq_len, time_major, rewards.device, heavy=True, max_block_time=tile_steps,
                      time_major_tile=RETRACE_TIME_MAJOR_TILE)
    if plan.split:
        # split programs hold one chunk each (no chunk loaded ahead): twice the steps fit
        tile_steps *= 2
        plan = plan_tiles(num_rows, seq_len, time_major, rewards.device, heavy=True, max_block_time=tile_steps,
                          time_major_tile=RETRACE_TIME_MAJOR_TILE)
    block_rows = _override.block_rows or max(1, min(plan.block_rows, tile_steps // plan.block_time))
    tile = block_rows * plan.block_time
    if dtype == torch.float64:
        num_warps = max(1, min(8, max(tile // 32, tile * group // 128)))
    else:
        num_warps = max(1, min(4, tile // 32))
    num_warps = _override.num_warps or num_warps
    # Retrace's time-split programs hold ~160-250 registers per thread and are not capped at 64
    max_registers, walk_ahead = None, _override.prefetch is not False
    if not plan.split and not time_major and dtype == torch.float32:
        if group <= _RETRACE_SMALL_GROUP:
            max_registers = _RETRACE_MAX_REGISTERS
        elif group >= _RETRACE_LARGE_GROUP and num_actions <= group:
            max_registers = _RETRACE_MAX_REGISTERS
            # no loading ahead, unless tile_override asks for it
            walk_ahead = walk_ahead and _override.prefetch is not None
    plan = dataclasses.replace(plan, block_rows=block_rows, num_row_tiles=triton.cdiv(num_rows, block_rows),
                               num_warps=num_warps, max_registers=_register_cap(max_registers),
                               walk_ahead=walk_ahead)
    lookback, clearing = _lookback_workspace(plan, dtype, rewards.device)
    _launch(
        retrace_kernel, plan.grid,
        action_probs_target, action_probs_behavior, q_values, next_q_values_all, actions, rewards,
        terminateds, truncateds, targets, advantages,
        *lookback,
        num_rows, seq_len, num_actions, plan.num_chunks, plan.num_row_tiles,
        *action_probs_target.stride(), *next_q_values_all.stride(), *action_probs_behavior.stride(),
        *q_values.stride(), *actions.stride(), *rewards.stride(), *terminateds.stride(), *truncateds.stride(),
        *targets.stride(),
        *map(_float_arg, (gamma, lambda_, c_bar, rho_bar)),
        *clearing,
        PREFETCH=plan.prefetch,
        ACTION_LANES=lanes, ACTION_PASSES=passes, MORE_ACTIONS=num_actions > lanes * passes, **_meta(plan, dtype),
    )


# A first-pass Retrace tile: about 4096 values of each per-action tensor (float64: 2048) per program
# of 4 warps, at least 32 steps. Against 2048 and 8192 values, and 8 warps, on an H200 it was equal or
# faster (18 actions 16384x512, % of the copy bandwidth: 74.6 against 74.5 and 59.7; -run9-retrace-passes).
_RETRACE_ACTIONS_TILE_VALUES = 4096
_RETRACE_ACTIONS_WARPS = 4
_RETRACE_ACTIONS_LANES = 2
# Dense per-action tensors of 17-31 actions are read by the first pass in flat blocks of 512 values (float64:
# 256) in one warp. Measured on an H200, the first pass alone, % of the copy ceiling, tiles of pairs of
# lanes -> flat blocks of 512 values in one warp / 1024 in one warp / 1024 in two warps, median of 7
# interleaved rounds (benchmarks/retrace_first_pass.py, benchmarks/results/h200-2026-12-02-run22-first-pass.txt):
# 18 actions 8x2^21 85.8 -> 92.6 / 85.4 / 82.2, 4096x4096 86.1 -> 93.0, 64x16384 76.6 -> 81.4, 8x131072
# 76.7 -> 81.3; 5 actions 97.1 -> 90.0, 12 actions 101.4 -> 100.3, 4 actions 98.9 -> 100.3. A scan across
# warps costs more than the tiles' idle lanes (2048 values in four warps: 78% at 18 actions,
# -run22-flat-first-pass.txt). 16-bit per-action tensors keep the tiles: the whole call with bf16 values
# and uint8 flags, 18 actions, read 50.7 -> 37.2% at 8x2^21 and 46.4 -> 35.1% at 4096x4096 in flat blocks
# (-run22-tune-retrace.txt).
_RETRACE_FLAT_VALUES = 512
_RETRACE_FLAT_MAX_VALUES = 8192
_RETRACE_FLAT_WARP_VALUES = 512


def _flat_first_pass(num_actions: int) -> bool:
    """Whether the first pass reads dense per-action tensors of ``num_actions`` actions in flat blocks:
    where a group of 32 lanes holds them with 1-15 lanes idle (fewer actions fill their tiles better)."""
    return 16 < num_actions < 32


# the longest batch-major rows that the fused Retrace kernel takes by default
_RETRACE_FUSED_MAX_STEPS = 1024
# Walked segments of the fused Retrace kernel: 512-step chunks, about 4 programs per multiprocessor; the
# default for time splits of up to 4 actions (more actions: two passes, whose scan walks)
_RETRACE_FUSED_WALK = (512, 4)
# Float32 values take ~240 registers there, which 2 programs per multiprocessor fit uncapped (measured
# on an H200, 4 actions, % of the copy ceiling, 4 -> 2 programs: 8x2^21 78.0 / 79.1 -> 80.2 / 81.3 in
# two runs, 1x2^24 77.3 -> 79.8; -run16-walk-caps.txt). Rows that walk with 4 programs walk with 2 as
# well, so which rows walk does not change.
_RETRACE_FUSED_WALK_FLOAT32 = (512, 2)
_RETRACE_FUSED_WALK_MAX_ACTIONS = 4
# time splits of rows too short for segments of 8 such chunks: one 512-step chunk per program
_RETRACE_FUSED_SPLIT_BLOCK_TIME = 512
# The second of Retrace's two passes, split in time where rows are too short to walk (more than 4
# actions: fewer take the fused kernel), scans one 1024-step chunk per program instead of 2048 (8 warps
# either way: half the steps a thread, twice the programs). Measured on an H200, 18 actions, % of the copy
# ceiling, 2048 -> 1024 with the 2048-step plan timed again in between
# (benchmarks/results/h200-2026-12-03-run33-retrace18-ab2.txt): 64x16384 61.3-61.7 -> 63.5-63.7, 8x131072
# 61.2-61.8 -> 62.4-62.9; in two more runs, default first (-run34-redo-ahead-ab.txt, 1024 with another
# change that does not reach this kernel): 62.3 / 62.6 -> 66.0 / 65.0 and 61.8 / 62.2 -> 65.4 / 64.5.
# 5-16 actions unmeasured.
_RETRACE_SCAN_SPLIT_BLOCK_TIME = 1024
# Walked segments of the scan of two passes (its redo reduces the per-action tiles like the fused kernel)
_RETRACE_SCAN_WALK = (256, 8)
# values of each per-action tensor that one warp of a fused program reduces at a time (and of the redo
# of a walked segment in the scan of two passes)
_RETRACE_FUSED_WARP_VALUES = 512
_RETRACE_REDO_WARP_VALUES = 128
# Fused programs of one group of 32 actions (17-32 actions, or more in several groups) over rows of 65-128
# steps hold one step per thread (4 warps, no vectors) instead of 4 steps in one warp. Measured on an H200, 18
# actions, float32, % of the copy ceiling, 3 input sets, plans measured in the order new, old, new, old
# (benchmarks/results/h200-2026-12-03-run32-retrace-ab.txt, two runs): 4096x128 70.9 / 72.9 / 73.7 / 73.0 and
# 71.7 / 73.6 / 74.5 / 73.4 (the plan measured first reads 2-3 points low at this shape), 8192x128 83.1 / 81.2 /
# 83.4 / 81.0 and 83.6 / 81.5 / 84.1 / 81.6. Four warps of 4-step vectors were not shown faster at 128, 256 or 1024
# steps (-run32-retrace-vectors.txt, -run32-retrace-warps.txt): those rows keep one warp per 128 steps.
_RETRACE_FUSED_ONE_STEP_CHUNK = 128
_RETRACE_FUSED_ONE_STEP_MIN_ACTIONS = 16


@functools.lru_cache(maxsize=256)
def _one_step_per_thread(plan: TilePlan) -> TilePlan:
    """``plan`` with one step of its chunk per thread (a warp per 32 steps, no vectors); cached, as the plans
    are, since a call's Python would otherwise rebuild it every time."""
    return dataclasses.replace(plan, num_warps=plan.block_time // 32, vec=1)


def _retrace_kernels(
    targets: torch.Tensor, q_values: torch.Tensor, rewards: torch.Tensor, terminateds: torch.Tensor,
    truncateds: torch.Tensor, num_actions: int, dtype: torch.dtype,
) -> tuple[str, bool, TilePlan | None]:
    """(kernels, halves, plan of the kernel that scans) of a Retrace call.

    Kernels: ``"fused"`` for batch-major rows of up to 1024 steps in one chunk and for batch-major time
    splits of up to 4 actions (walked segments, and splits too short to walk: one chunk per program),
    ``"one-pass"`` for time-major splits that do not walk, ``"two-pass"`` otherwise
    (``tile_override(retrace_kernels=...)`` forces one). The two
    multi-pass kernels keep E and the ratios in the outputs between reduction and scan: exactly where
    the outputs hold the compute dtype (or wider); ``halves`` where they are half as wide (bf16/fp16
    outputs of float32 compute, float32 outputs of float64), E split into the high and low halves of its
    bits across the two outputs and the ratios recomputed from the inputs. Narrower outputs take the
    one-pass kernel.
    """
    num_rows, seq_len = rewards.shape
    out_bytes, compute_bytes = targets.element_size(), dtype.itemsize
    halves = out_bytes < compute_bytes
    kernels = _override.retrace_kernels
    if 2 * out_bytes < compute_bytes:
        return "one-pass", False, None
    time_major = _is_time_major(rewards)
    element_bytes = _element_bytes(q_values, rewards, terminateds, truncateds, targets)
    if kernels == "fused" or (kernels is None and not time_major):
        # Walked segments where time is split: 512-step chunks, about 4 programs per multiprocessor.
        # Narrow steps take float32's plan: the program also reduces the per-action tiles, whose sub-tiles
        # follow its warps. Measured on an H200, bf16 values with uint8 flags, % of the copy ceiling, the
        # bf16 plan -> float32's (-run10-retrace-bf16-plans.txt): 16384x512 4 actions 50.0 -> 74.7, 18
        # actions 42.9 -> 67.6; 512x1024 29.3 -> 40.6 and 30.3 -> 48.3; 4096x4096 (4) 34.9 -> 45.3.
        def fused_plan(walk_split: tuple[int, int] | None, split_block_time: int = _SPLIT_BLOCK_TIME) -> TilePlan:
            return plan_tiles(num_rows, seq_len, time_major, rewards.device, heavy=True,
                              element_bytes=max(element_bytes, 4), single_chunk_steps=GAE_SINGLE_CHUNK_STEPS,
                              max_warps=16, split_block_time=split_block_time, split_max_registers=None,
                              walk_split=walk_split, time_major_many_rows=_VTRACE_TIME_MAJOR_MANY_ROWS)

        plan = fused_plan(_RETRACE_FUSED_WALK)
        few_actions = num_actions <= _RETRACE_FUSED_WALK_MAX_ACTIONS and kernels is None
        if plan.walk and few_actions and element_bytes == 4 and _override.walk_programs is None:
            plan = fused_plan(_RETRACE_FUSED_WALK_FLOAT32)
        elif few_actions and plan.split and not plan.walk:
            # Splits too short to walk 512-step chunks: the fused kernel, one 512-step chunk per program (4
            # warps). Measured on an H200, 4 actions, % of the copy ceiling at 64x16384 / 8x131072
            # (-run13-retrace-short-walks.txt): two passes of one chunk per program 46.4 / 42.9, the fused
            # kernel of one chunk per program in that round's plan 47.9 / 46.2, fused walks of 256-step
            # chunks with 4 programs per multiprocessor 49.9 / 48.3 (128-step chunks 36-47; 18 actions walked
            # in two passes 40-50 against 58-59 in one chunk per program, so more actions keep that). Round 34
            # (benchmarks/results/h200-2026-12-04-run34-retrace4-sweep.txt, -sweep2.txt): those walks
            # 49.9-50.9 / 49.5-49.9, one 512-step chunk per program 56.5-57.0 / 53.5-54.6, 256-step chunks of
            # 2 warps 55.9 / 52.9, 1024 of 8 warps 49.4 / 48.4, two passes of 512 or 1024 steps 47.1-49.5.
            return "fused", halves, fused_plan(None, _RETRACE_FUSED_SPLIT_BLOCK_TIME)
        if plan.walk and few_actions:
            # Walked segments of few actions, whose programs load each next chunk's per-action tiles ahead.
            # Measured on an H200, 4 actions, % of the copy ceiling at 8x2^21 / 1x2^24, two passes (scan
            # walked) -> fused (-run12-retrace-walks.txt): 67.2 / 66.1 -> 74.5 / 74.3. With 18 actions (one
            # group of 32) fewer programs fit: 72.5 / 68.0 in two passes, 63.9-66.0 / 63.8-70.3 fused.
            return "fused", halves, plan
        if kernels == "fused" or (plan.num_chunks == 1 and plan.block_time <= _RETRACE_FUSED_MAX_STEPS):
            # Batch-major rows of up to 1024 steps (one chunk per program); longer rows, whose program
            # reduces many sub-tiles, keep two passes (4096x4096: 4 actions 78.8% of the copy ceiling
            # fused, 79% in two passes; 18 actions 63.3% against 85%; -run10-std-shapes.csv and round 9's
            # -run9-std-shapes.csv). Measured on an H200, % of the copy ceiling, two passes
            # -> fused (benchmarks/results/h200-2026-11-30-run10-retrace-kernels.txt): 4 actions 4096x128
            # 50.0 -> 68.0, 512x1024 55.7 -> 70.4, 16384x512 76.0 -> 95.3, 4096x4096 77.8 -> 77.5; 18
            # actions 4096x128 68.0 -> 68.9, 512x1024 63.8 -> 70.5, 16384x512 80.2 -> 89.7. bf16 values
            # with uint8 flags (-run10-retrace-bf16-plans.txt): 16384x512 58.7 -> 74.7 (4 actions) and
            # 56.3 -> 67.6 (18) with the same plan.
            if (num_actions > _RETRACE_FUSED_ONE_STEP_MIN_ACTIONS and element_bytes == 4 and plan.num_chunks == 1
                    and plan.block_rows == 1 and plan.block_time == _RETRACE_FUSED_ONE_STEP_CHUNK
                    and _override.num_warps is None and _override.vec is None):
                plan = _one_step_per_thread(plan)
            return "fused", halves, plan
    # The scan reads V-trace's kind of inputs (the ratio of step t+1 inside a chunk, Q of step t+1) and
    # takes V-trace's time-major tiles. Measured on an H200, the second pass alone, % of the copy
    # bandwidth (-run9-retrace-passes): rows of up to 4096 steps in one chunk with up to 16 warps
    # (4096x4096: 73-75 in 512-step chunks walked -> 94.4), split chunks of 2048 steps (8x2^21 45 ->
    # 51-54 against 512; 64x16384 34 -> 38). Time splits long enough walk segments of 256-step chunks,
    # about 8 programs per multiprocessor; the whole call, % of the copy ceiling, 8x2^21 / 1x2^24, one
    # chunk per program -> walked (-run12-retrace-walks.txt): 4 actions 58.6 / 53.0 -> 67.0 / 66.1 (the
    # fused kernel's walks now take these), 18 actions 71.1 / 67.2 -> 72.7 / 72.8.
    # Its walks keep the compiler's registers: stored [T, N] they take 255, and capped at the 128 of 8
    # programs of 2 warps they spill (measured on an H200, % of the copy ceiling, uncapped -> capped:
    # 8x2^20 18 actions 53.3 -> 49.1, 4 actions 45.7 -> 35.9; -run16-time-major-walks.txt)
    plan = plan_tiles(num_rows, seq_len, time_major, rewards.device, heavy=True,
                      element_bytes=element_bytes, single_chunk_steps=GAE_SINGLE_CHUNK_STEPS, max_warps=16,
                      split_block_time=_RETRACE_SCAN_SPLIT_BLOCK_TIME, walk_split=_RETRACE_SCAN_WALK,
                      time_major_many_rows=_VTRACE_TIME_MAJOR_MANY_ROWS, walk_register_cap=False)
    if kernels is None and plan.split and time_major and not plan.walk:
        # a time-major split that does not walk would chain hundreds of small chunks in one look-back,
        # where the one-pass kernel is faster (measured on an H200, 4 actions, 64x16384 stored [T, N]:
        # 17.6% of the copy bandwidth in one pass, 4.4% in two; -run9-retrace-time-major.txt; 18 actions
        # 22.2% against 10.5%, -run12-retrace-walks.txt). Walked segments take two passes (18 actions,
        # 8x2^21 stored [T, N]: 25.2% in one pass, 62.3% in two).
        return "one-pass", False, None
    if kernels is None:
        # Two passes for the rest (batch-major splits of one chunk per program reach here only with more
        # than 4 actions). Batch-major splits of one chunk per program: the fused kernel about
        # equal (64x16384: 44.7 -> 50.0 with 4 actions, 62.7 -> 61.3 with 18; -run9-retrace-fused.txt;
        # 45.0 -> 46.8 and 59.2 -> 47.9, -run12-retrace-walks.txt).
        # Time-major rows not split in time: fused against two passes, 18 actions, 4096x128 35.8 / 58.4,
        # 16384x512 53.0 / 75.0 (-run10-retrace-kernels.txt).
        kernels = "two-pass"
    return kernels, halves and kernels != "one-pass", plan


def _retrace_flat_plan(
    action_probs_target: torch.Tensor, next_q_values_all: torch.Tensor, targets: torch.Tensor,
    advantages: torch.Tensor, dtype: torch.dtype,
) -> tuple[int, int] | None:
    """(steps, values) of a block of ``retrace_flat_actions_kernel``, or None where that kernel does not
    apply: per-action tensors or outputs that are not dense and row-major, action counts that
    ``_flat_first_pass`` leaves to the tiled kernel, 16-bit per-action tensors, 2^31 values or more, and
    too many actions for a block.

    A block holds as many whole steps as fill most of a power-of-two block (its tail is masked off), in
    a multiple that starts every block 16-byte aligned.
    """
    num_actions = action_probs_target.shape[2]
    values = _override.retrace_flat_values
    if values is None:
        wide = min(action_probs_target.element_size(), next_q_values_all.element_size()) >= 4
        values = _RETRACE_FLAT_VALUES if _flat_first_pass(num_actions) and wide else 0
        values //= 2 if dtype == torch.float64 else 1
    if (not values or not action_probs_target.is_contiguous() or not next_q_values_all.is_contiguous()
            or not targets.is_contiguous() or not advantages.is_contiguous()
            # the kernel bounds its values by a product in 32 bits where the steps fit them
            or action_probs_target.numel() >= 2**31):
        return None
    # steps per block: a multiple of what starts every block 16-byte aligned
    align = 16 // math.gcd(16, num_actions * action_probs_target.element_size(),
                           num_actions * next_q_values_all.element_size())
    while values <= _RETRACE_FLAT_MAX_VALUES:
        steps = values // num_actions // align * align
        if steps and steps * num_actions * 8 >= values * 7:
            return steps, values
        values *= 2
    return None


def _retrace_actions(
    targets: torch.Tensor, advantages: torch.Tensor, action_probs_target: torch.Tensor,
    action_probs_behavior: torch.Tensor, next_q_values_all: torch.Tensor, actions: torch.Tensor,
    dtype: torch.dtype, lanes: int, passes: int, halves: bool,
) -> None:
    """The first of two passes: ``retrace_flat_actions_kernel`` or ``retrace_actions_kernel`` stores E
    and the ratios into the outputs."""
    num_rows, seq_len, num_actions = action_probs_target.shape
    flat = _retrace_flat_plan(action_probs_target, next_q_values_all, targets, advantages, dtype)
    if flat is not None:
        block_steps, block_values = flat
        # a step's offset in the per-step inputs needs no division where both are stored row after row
        row_major = num_rows == 1 or all(x.stride(0) == seq_len * x.stride(1) for x in (action_probs_behavior, actions))
        _launch(
            retrace_flat_actions_kernel, (triton.cdiv(num_rows * seq_len, block_steps),),
            action_probs_target, next_q_values_all, action_probs_behavior, actions, targets, advantages,
            num_rows * seq_len, seq_len, *action_probs_behavior.stride(), *actions.stride(),
            NUM_ACTIONS=num_actions, BLOCK_STEPS=block_steps, STEP_LANES=triton.next_power_of_2(block_steps),
            BLOCK_VALUES=block_values, ROW_MAJOR=row_major, DTYPE=_triton_dtype(dtype), HALVES=halves,
            num_warps=max(1, block_values // _RETRACE_FLAT_WARP_VALUES), num_stages=1,
        )
        return
    group = lanes * passes
    rows_pow2, time_pow2 = triton.next_power_of_2(num_rows), triton.next_power_of_2(seq_len)
    tile_values = _RETRACE_ACTIONS_TILE_VALUES // (2 if dtype == torch.float64 else 1)
    tile_steps = max(32, tile_values // group)
    if action_probs_target.stride(0) < action_probs_target.stride(1):
        # [T, N, A] storage: a tile spans rows, whose actions lie next to each other
        block_rows = min(rows_pow2, tile_steps)
        block_time = min(time_pow2, tile_steps // block_rows)
    else:
        block_time = min(time_pow2, tile_steps)
        block_rows = min(rows_pow2, tile_steps // block_time)
    num_time_tiles = triton.cdiv(seq_len, block_time)
    num_warps = max(1, min(_RETRACE_ACTIONS_WARPS, block_rows * block_time * group // 1024))
    _launch(
        retrace_actions_kernel, (triton.cdiv(num_rows, block_rows) * num_time_tiles,),
        action_probs_target, next_q_values_all, action_probs_behavior, actions, targets, advantages,
        num_rows, seq_len, num_actions, num_time_tiles,
        *action_probs_target.stride(), *next_q_values_all.stride(), *action_probs_behavior.stride(),
        *actions.stride(), *targets.stride(),
        BLOCK_ROWS=block_rows, BLOCK_TIME=block_time, ACTION_LANES=lanes, ACTION_PASSES=passes,
        MORE_ACTIONS=num_actions > group, DTYPE=_triton_dtype(dtype), HALVES=halves, num_warps=num_warps,
        num_stages=1,
    )


def _retrace_scan(
    targets: torch.Tensor, advantages: torch.Tensor, action_probs_target: torch.Tensor,
    action_probs_behavior: torch.Tensor, q_values: torch.Tensor, next_q_values_all: torch.Tensor,
    actions: torch.Tensor, rewards: torch.Tensor, terminateds: torch.Tensor, truncateds: torch.Tensor,
    gamma: float, lambda_: float, c_bar: float, rho_bar: float, dtype: torch.dtype, lanes: int, passes: int,
    halves: bool, plan: TilePlan, reduce: bool,
) -> None:
    """``retrace_scan_kernel``. ``reduce``: the fused kernel, which computes each chunk's E and ratios
    itself; otherwise the second of two passes, after ``_retrace_actions``. Either walks segments where
    the plan says so (a redo recomputes E and the ratios from the inputs)."""
    num_rows, seq_len, num_actions = action_probs_target.shape
    meta = _meta(plan, dtype, walk=True)
    if reduce or plan.walk:
        # the fused kernel, and a walked segment's redo, reduce the per-action tiles themselves; the redo
        # (about one chunk per segment) in smaller sub-tiles, which leave more programs room to be resident
        group = lanes * passes
        warp_values = _RETRACE_FUSED_WARP_VALUES if reduce else _RETRACE_REDO_WARP_VALUES
        sub_steps = max(1, warp_values * plan.num_warps // (group * plan.block_rows))
        sub_steps = min(plan.block_time, 1 << (sub_steps.bit_length() - 1))
        segment_chunks = plan.segment_chunks
    else:
        # the kernel does not read the action grouping: one value for every call, one compiled kernel
        lanes = passes = sub_steps = segment_chunks = 1
    lookback, clearing = _lookback_workspace(plan, dtype, rewards.device)
    _launch(
        retrace_scan_kernel, plan.grid,
        q_values, rewards, terminateds, truncateds, targets, advantages,
        action_probs_target, action_probs_behavior, actions, next_q_values_all,
        *lookback,
        num_rows, seq_len, num_actions, plan.num_chunks, plan.num_row_tiles, segment_chunks,
        *q_values.stride(), *rewards.stride(), *terminateds.stride(), *truncateds.stride(), *targets.stride(),
        *action_probs_target.stride(), *action_probs_behavior.stride(), *actions.stride(),
        *next_q_values_all.stride(),
        *map(_float_arg, (gamma, lambda_, c_bar, rho_bar)),
        *clearing,
        REDUCE=reduce, PREFETCH=plan.prefetch, VEC=plan.vec, ACTION_LANES=lanes, ACTION_PASSES=passes,
        MORE_ACTIONS=num_actions > lanes * passes if reduce or plan.walk else False, SUB_STEPS=sub_steps,
        HALVES=halves, AHEAD=reduce and plan.walk and num_actions <= lanes * passes, **meta,
    )


@_on_the_tensors_device
def returns(
    out: torch.Tensor,
    rewards: torch.Tensor,
    next_values: torch.Tensor | None,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None,
    gamma: float,
    lambda_: float,
    bootstrap_values: torch.Tensor | None,
) -> None:
    """Lambda-returns; discounted returns are ``next_values=None, lambda_=1``."""
    num_rows, seq_len = rewards.shape
    dtype = _compute_dtype(rewards, next_values, bootstrap_values)
    element_bytes = _element_bytes(rewards, next_values, terminateds, truncateds, bootstrap_values, out)
    # discounted returns (one input per step) split time into longer chunks, uncapped
    discounted = next_values is None
    plan = plan_tiles(num_rows, seq_len, _is_time_major(rewards), rewards.device, heavy=False,
                      element_bytes=element_bytes, split_block_time=_LIGHT_SPLIT_BLOCK_TIME if discounted else None,
                      split_max_registers=None if discounted else _SPLIT_MAX_REGISTERS,
                      walk_split=_DISCOUNTED_WALK if discounted else _LAMBDA_WALK,
                      long_walk_split=None if discounted else _LAMBDA_LONG_WALK,
                      time_major_many_rows=_LIGHT_TIME_MAJOR_MANY_ROWS, packed_tile_elements=PACKED_TILE_ELEMENTS,
                      time_major_walk=None if discounted else _TIME_MAJOR_SHORT_WALK,
                      strided_time_major=DISCOUNTED_STRIDED_TIME_MAJOR if discounted else LAMBDA_STRIDED_TIME_MAJOR)
    lookback, clearing = _lookback_workspace(plan, dtype, rewards.device)
    _launch(
        returns_kernel, plan.grid,
        rewards, next_values, terminateds, truncateds, bootstrap_values, out,
        *lookback,
        num_rows, seq_len, plan.num_chunks, plan.num_row_tiles, plan.segment_chunks,
        *rewards.stride(), *_strides(next_values), *terminateds.stride(), *_strides(truncateds),
        *_strides(bootstrap_values), *out.stride(),
        *map(_float_arg, (gamma, lambda_)),
        *clearing,
        HAS_NEXT_VALUES=next_values is not None, HAS_TRUNCATED=truncateds is not None,
        HAS_BOOTSTRAP=bootstrap_values is not None, PREFETCH=plan.prefetch, VEC=plan.vec,
        **_meta(plan, dtype, walk=True, shape=(num_rows, seq_len)),
    )


@_on_the_tensors_device
def episodic_scan(
    out: torch.Tensor,
    inputs: torch.Tensor,
    dones: torch.Tensor,
    seed_values: torch.Tensor | None,
    decay: float,
    reset_after_flag: bool,
) -> None:
    """Prefix sums (decay 1) and eligibility traces (decay gamma * lambda, reset after the flag)."""
    num_rows, seq_len = inputs.shape
    dtype = _compute_dtype(inputs, seed_values)
    element_bytes = _element_bytes(inputs, dones, seed_values, out)
    plan = plan_tiles(num_rows, seq_len, _is_time_major(inputs), inputs.device, heavy=False,
                      element_bytes=element_bytes,
                      single_chunk_steps=EPISODIC_SINGLE_CHUNK_STEPS if element_bytes == 4 else _MANY_ROWS_BLOCK_TIME,
                      split_block_time=_LIGHT_SPLIT_BLOCK_TIME, walk_split=_EPISODIC_WALK,
                      long_walk_split=None if element_bytes == 4 else _EPISODIC_LONG_WALK,
                      time_major_many_rows=_LIGHT_TIME_MAJOR_MANY_ROWS, packed_tile_elements=PACKED_TILE_ELEMENTS,
                      strided_time_major=EPISODIC_STRIDED_TIME_MAJOR)
    if plan.split and not plan.strided_groups and not _override.vec:
        # A forward scan's loads ascend, so Triton reads its steps in vectors anyway; split in time it
        # was slower with grouped tiles (H200, % of the copy bandwidth, step by step -> grouped:
        # eligibility traces 8x2^21 73 -> 66-69, 8x131072 29 -> 26; benchmarks/results/h200-2026-11-30-run7-*)
        plan = dataclasses.replace(plan, vec=1, strided_groups=False)
    lookback, clearing = _lookback_workspace(plan, dtype, inputs.device)
    _launch(
        episodic_scan_kernel, plan.grid,
        inputs, dones, seed_values, out,
        *lookback,
        num_rows, seq_len, plan.num_chunks, plan.num_row_tiles, plan.segment_chunks,
        *inputs.stride(), *dones.stride(), 0 if seed_values is None else seed_values.stride(0), *out.stride(),
        _float_arg(decay),
        *clearing,
        HAS_SEED=seed_values is not None, RESET_AFTER_FLAG=reset_after_flag, PREFETCH=plan.prefetch, VEC=plan.vec,
        **_meta(plan, dtype, walk=True, shape=(num_rows, seq_len)),
    )


@_on_the_tensors_device
def linear_recurrence(
    out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor | None, backward: bool
) -> None:
    """x[t] = a[t] + b[t] * x[t+1] (``backward``) or x[t-1] (forward), x beyond the ends = ``carry``."""
    num_rows, seq_len = a.shape
    dtype = _compute_dtype(a, b, carry)
    plan = plan_tiles(num_rows, seq_len, _is_time_major(a), a.device, heavy=False,
                      element_bytes=_element_bytes(a, b, out))
    lookback, clearing = _lookback_workspace(plan, dtype, a.device)
    _launch(
        linear_recurrence_kernel, plan.grid,
        a, b, carry, out,
        *lookback,
        num_rows, seq_len, plan.num_chunks, plan.num_row_tiles,
        *a.stride(), *b.stride(), 0 if carry is None else carry.stride(0), *out.stride(),
        *clearing,
        HAS_CARRY=carry is not None, BACKWARD=backward, PREFETCH=plan.prefetch, VEC=plan.vec,
        **_meta(plan, dtype),
    )


@_on_the_tensors_device
def gae_backward(
    grad_rewards: torch.Tensor | None,
    grad_values: torch.Tensor | None,
    grad_bootstrap_values: torch.Tensor | None,
    grad_last_value: torch.Tensor | None,
    grad_advantages: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None,
    gamma: float,
    lambda_: float,
    dtype: torch.dtype,
) -> None:
    """GAE's input gradients from dL/dA by one adjoint scan; None outputs are not computed.

    ``dtype`` is the forward's compute dtype (float64 if any floating input was float64).
    """
    from rl_triton.kernels.gae_backward import gae_backward_kernel

    num_rows, seq_len = grad_advantages.shape
    plan = plan_tiles(num_rows, seq_len, _is_time_major(terminateds), terminateds.device, heavy=False)
    lookback, clearing = _lookback_workspace(plan, dtype, terminateds.device)
    grad_bootstrap, mode, boot_strides = _bootstrap_arg(grad_bootstrap_values, grad_last_value)
    _launch(
        gae_backward_kernel, plan.grid,
        grad_advantages, terminateds, truncateds, grad_rewards, grad_values, grad_bootstrap,
        *lookback,
        num_rows, seq_len, plan.num_chunks, plan.num_row_tiles,
        *grad_advantages.stride(), *terminateds.stride(), *_strides(truncateds),
        *_strides(grad_rewards), *_strides(grad_values), *boot_strides,
        *map(_float_arg, (gamma, lambda_)),
        *clearing,
        HAS_TRUNCATED=truncateds is not None, BOOTSTRAP_GRAD=mode,
        REWARDS_GRAD=grad_rewards is not None, VALUES_GRAD=grad_values is not None,
        PREFETCH=plan.prefetch, **_meta(plan, dtype),
    )


@_on_the_tensors_device
def returns_backward(
    grad_rewards: torch.Tensor | None,
    grad_next_values: torch.Tensor | None,
    grad_bootstrap_values: torch.Tensor | None,
    grad_returns: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor | None,
    gamma: float,
    lambda_: float,
    dtype: torch.dtype,
) -> None:
    """Input gradients of lambda-returns (discounted returns: ``lambda_=1``) from dL/dG by one adjoint scan.

    None outputs are not computed; ``dtype`` is the forward's compute dtype.
    """
    from rl_triton.kernels.returns_backward import returns_backward_kernel

    num_rows, seq_len = grad_returns.shape
    plan = plan_tiles(num_rows, seq_len, _is_time_major(terminateds), terminateds.device, heavy=False)
    lookback, clearing = _lookback_workspace(plan, dtype, terminateds.device)
    _launch(
        returns_backward_kernel, plan.grid,
        grad_returns, terminateds, truncateds, grad_rewards, grad_next_values, grad_bootstrap_values,
        *lookback,
        num_rows, seq_len, plan.num_chunks, plan.num_row_tiles,
        *grad_returns.stride(), *terminateds.stride(), *_strides(truncateds),
        *_strides(grad_rewards), *_strides(grad_next_values), *_strides(grad_bootstrap_values),
        *map(_float_arg, (gamma, lambda_)),
        *clearing,
        HAS_TRUNCATED=truncateds is not None, REWARDS_GRAD=grad_rewards is not None,
        NEXT_VALUES_GRAD=grad_next_values is not None, BOOTSTRAP_GRAD=grad_bootstrap_values is not None,
        PREFETCH=plan.prefetch, **_meta(plan, dtype),
    )
