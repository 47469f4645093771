"""Episodic forward scan: prefix sums that reset at boundaries, and eligibility traces.

x[t] = inputs[t] + decay * (1 - flag) * x[t-1], where ``flag`` is done[t-1] (boundary
"ends_at", done[-1] := 0) or done[t] ("starts_at"); prefix sums use decay 1, eligibility
traces gamma * lambda with "ends_at".
"""

import triton
import triton.language as tl

from rl_triton.kernels.scan import (
    carried,
    claim_segment,
    direct_scan,
    in_range,
    load_chunk,
    scan_chunk,
    scan_program,
    store_chunk,
    tile_rows,
)


@triton.jit
def episodic_load(args, CONSTS: tl.constexpr, chunk, steps):
    """The loads of one chunk (``kernels/scan.py``: ``scan_program``): inputs and each step's reset flag."""
    RESET_AFTER_FLAG: tl.constexpr = CONSTS[0]
    DTYPE: tl.constexpr = CONSTS[1]
    BLOCK_ROWS: tl.constexpr = CONSTS[2]
    BLOCK_TIME: tl.constexpr = CONSTS[3]
    VEC: tl.constexpr = CONSTS[4]
    STRIDED: tl.constexpr = CONSTS[5]
    pointers, strides, _, rows, row_ok, seq_len = args
    WHOLE_TILES: tl.constexpr = CONSTS[6]
    if WHOLE_TILES:
        # no in-range masks (kernels/scan.py: tile_rows)
        row_ok = None
    inputs_ptr, dones_ptr, _ = pointers
    s_inputs_row, s_inputs_time, s_dones_row, s_dones_time, _, _ = strides
    inputs = load_chunk(inputs_ptr, rows, row_ok, s_inputs_row, chunk, s_inputs_time, seq_len, 0.0, DTYPE,
                        BLOCK_ROWS, BLOCK_TIME, VEC, False, STRIDED=STRIDED)
    # "ends_at": the flag of the previous step resets (done[-1] := 0)
    shift: tl.constexpr = -1 if RESET_AFTER_FLAG else 0
    reset = load_chunk(dones_ptr, rows, row_ok, s_dones_row, chunk, s_dones_time, seq_len, 0, DTYPE,
                       BLOCK_ROWS, BLOCK_TIME, VEC, False, SHIFT=shift, FLAG=True, STRIDED=STRIDED)
    return inputs, reset


@triton.jit
def episodic_scan(args, CONSTS: tl.constexpr, inputs, mask, carry):
    """One chunk scanned: (A, B) with x = A + B * carry in."""
    VEC: tl.constexpr = CONSTS[4]
    WHOLE_TILES: tl.constexpr = CONSTS[6]
    values, reset = inputs
    return scan_chunk(in_range(mask, values, 0.0, WHOLE_TILES),
                      in_range(mask, args[2] * (1.0 - reset), 1.0, WHOLE_TILES), False, VEC, carry)


@triton.jit
def episodic_store(args, CONSTS: tl.constexpr, inputs, scanned, carry, chunk):
    """The outputs of one chunk, from the carry into it."""
    BLOCK_ROWS: tl.constexpr = CONSTS[2]
    BLOCK_TIME: tl.constexpr = CONSTS[3]
    VEC: tl.constexpr = CONSTS[4]
    STRIDED: tl.constexpr = CONSTS[5]
    pointers, strides, _, rows, row_ok, seq_len = args
    WHOLE_TILES: tl.constexpr = CONSTS[6]
    if WHOLE_TILES:
        # no in-range masks (kernels/scan.py: tile_rows)
        row_ok = None
    scan_a, scan_b = scanned
    store_chunk(pointers[2], rows, row_ok, strides[4], chunk, strides[5], seq_len,
                carried(scan_a, scan_b, carry, VEC), BLOCK_ROWS, BLOCK_TIME, VEC, False, STRIDED)


@triton.jit(do_not_specialize=["spent_words"])
def episodic_scan_kernel(
    inputs_ptr, dones_ptr, seed_ptr, out_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_chunks, num_row_tiles, segment_chunks,
    s_inputs_row, s_inputs_time, s_dones_row, s_dones_time, s_seed_row, s_out_row, s_out_time,
    decay: tl.float64, spent_ptr, spent_words,
    HAS_SEED: tl.constexpr, RESET_AFTER_FLAG: tl.constexpr, SPLIT: tl.constexpr, WALK: tl.constexpr,
    PREFETCH: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr,
    DTYPE: tl.constexpr, VEC: tl.constexpr, STRIDED_GROUPS: tl.constexpr = False, DIRECT: tl.constexpr = False,
    WHOLE_TILES: tl.constexpr = False, LOOK_BEHIND: tl.constexpr = 0,
):
    row_tile, order, first, my_chunks = claim_segment(counter_ptr, spent_ptr, spent_words, num_row_tiles, num_chunks,
                                                      segment_chunks, SPLIT)
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    # x[-1] = seed; a walked segment other than the first in time starts from zero
    carry = tl.zeros([BLOCK_ROWS], DTYPE)
    if HAS_SEED:
        carry = tl.load(seed_ptr + rows * s_seed_row, mask=row_ok & (order == 0), other=0.0).to(DTYPE)
    args = (
        (inputs_ptr, dones_ptr, out_ptr), (s_inputs_row, s_inputs_time, s_dones_row, s_dones_time, s_out_row, s_out_time),
        tl.cast(decay, DTYPE), rows, row_ok, seq_len,
    )
    if WHOLE_TILES:
        # every tile in range: no in-range masks (kernels/scan.py: tile_rows)
        row_ok = None
    # DIRECT: the chunks of a whole-row walk recur from their carry (scan_program)
    direct: tl.constexpr = direct_scan(DIRECT, VEC, SPLIT, WALK)
    scan_program(episodic_load, episodic_load, episodic_scan, episodic_store, args,
                 (RESET_AFTER_FLAG, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC, STRIDED_GROUPS, WHOLE_TILES), carry, row_tile,
                 order, first, my_chunks, num_chunks, segment_chunks, seq_len, row_ok,
                 status_ptr, aggregate_ptr, prefix_ptr, SPLIT, WALK, PREFETCH, False, BLOCK_ROWS, BLOCK_TIME, WINDOW,
                 VEC, direct,
                 BEHIND_CONSTS=(RESET_AFTER_FLAG, DTYPE, BLOCK_ROWS, LOOK_BEHIND, VEC, STRIDED_GROUPS,
                                WHOLE_TILES), LOOK_BEHIND=LOOK_BEHIND)
