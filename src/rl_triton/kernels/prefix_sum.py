"""Episodic forward scan: prefix sums that reset at boundaries, and eligibility traces.

x[t] = inputs[t] + decay * (1 - flag) * x[t-1], where ``flag`` is done[t-1] (boundary
"ends_at", done[-1] := 0) or done[t] ("starts_at"); prefix sums use decay 1, eligibility
traces gamma * lambda with "ends_at".
"""

import triton
import triton.language as tl

from rl_triton.kernels.scan import (
    chunk_carry,
    chunk_window,
    claim_segment,
    last_step,
    load_chunk,
    per_step,
    redo_advance,
    scan_chunk,
    store_chunk,
    tile_rows,
    walk_lookback,
)


@triton.jit
def episodic_chunk_inputs(inputs_ptr, dones_ptr, s_inputs_row, s_inputs_time, s_dones_row, s_dones_time,
                          rows, row_ok, chunk, seq_len, RESET_AFTER_FLAG: tl.constexpr, DTYPE: tl.constexpr,
                          BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr):
    """The loads of one chunk: inputs and the reset flag of each step."""
    inputs = load_chunk(inputs_ptr, rows, row_ok, s_inputs_row, chunk, s_inputs_time, seq_len, 0.0, DTYPE,
                        BLOCK_ROWS, BLOCK_TIME, VEC, False)
    # "ends_at": the flag of the previous step resets (done[-1] := 0)
    shift: tl.constexpr = -1 if RESET_AFTER_FLAG else 0
    reset = load_chunk(dones_ptr, rows, row_ok, s_dones_row, chunk, s_dones_time, seq_len, 0, DTYPE,
                       BLOCK_ROWS, BLOCK_TIME, VEC, False, SHIFT=shift, FLAG=True)
    return inputs, reset


@triton.jit
def episodic_chunk(inputs, reset, mask, carry, step_decay, out_ptr, status_ptr, aggregate_ptr, prefix_ptr, row_tile,
                   order, num_chunks, rows, row_ok, s_out_row, s_out_time, chunk, seq_len, LOOKBACK: tl.constexpr,
                   BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr, VEC: tl.constexpr):
    """Outputs of one chunk from its inputs and the carry into it (LOOKBACK: the carry comes from the
    look-back instead). Returns the chunk's map (a, b): carry out = a + b * carry in, and the carry in."""
    scan_a, scan_b = scan_chunk(tl.where(mask, inputs, 0.0), tl.where(mask, step_decay * (1.0 - reset), 1.0), False,
                                VEC)
    chunk_a, chunk_b = last_step(scan_a, BLOCK_TIME, False, VEC), last_step(scan_b, BLOCK_TIME, False, VEC)
    if LOOKBACK:
        carry = chunk_carry(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, chunk_a, chunk_b,
                            carry, BLOCK_ROWS, WINDOW)
    store_chunk(out_ptr, rows, row_ok, s_out_row, chunk, s_out_time, seq_len, scan_a + scan_b * per_step(carry, VEC),
                BLOCK_ROWS, BLOCK_TIME, VEC, False)
    return chunk_a, chunk_b, carry


@triton.jit
def episodic_scan_kernel(
    inputs_ptr, dones_ptr, seed_ptr, out_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_chunks, num_row_tiles, segment_chunks,
    s_inputs_row, s_inputs_time, s_dones_row, s_dones_time, s_seed_row, s_out_row, s_out_time,
    decay: tl.float64,
    HAS_SEED: tl.constexpr, RESET_AFTER_FLAG: tl.constexpr, SPLIT: tl.constexpr, WALK: tl.constexpr,
    PREFETCH: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr,
    DTYPE: tl.constexpr, VEC: tl.constexpr,
):
    row_tile, order, first, my_chunks = claim_segment(counter_ptr, num_row_tiles, num_chunks, segment_chunks, SPLIT)
    end = first + my_chunks
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    step_decay = tl.cast(decay, DTYPE)
    # x[-1] = seed; a walked segment other than the first in time starts from zero
    carry = tl.zeros([BLOCK_ROWS], DTYPE)
    if HAS_SEED:
        carry = tl.load(seed_ptr + rows * s_seed_row, mask=row_ok & (order == 0), other=0.0).to(DTYPE)
    walk_decay = tl.full([BLOCK_ROWS], 1, DTYPE)
    chunk, _, mask = chunk_window(first, num_chunks, seq_len, row_ok, BLOCK_TIME, False, VEC=VEC)
    inputs, reset = episodic_chunk_inputs(inputs_ptr, dones_ptr, s_inputs_row, s_inputs_time, s_dones_row,
                                          s_dones_time, rows, row_ok, chunk, seq_len, RESET_AFTER_FLAG, DTYPE,
                                          BLOCK_ROWS, BLOCK_TIME, VEC)
    for i in range(my_chunks):
        if PREFETCH:
            next_chunk, _, next_mask = chunk_window(first + i + 1, num_chunks, seq_len, row_ok, BLOCK_TIME, False,
                                                    end, VEC)
            next_inputs = episodic_chunk_inputs(inputs_ptr, dones_ptr, s_inputs_row, s_inputs_time, s_dones_row,
                                                s_dones_time, rows, row_ok, next_chunk, seq_len, RESET_AFTER_FLAG,
                                                DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC)
        chunk_a, chunk_b, carry = episodic_chunk(inputs, reset, mask, carry, step_decay, out_ptr, status_ptr,
                                                 aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, rows,
                                                 row_ok, s_out_row, s_out_time, chunk, seq_len, SPLIT and not WALK,
                                                 BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC)
        carry = chunk_a + chunk_b * carry
        walk_decay *= chunk_b
        if PREFETCH:
            inputs, reset = next_inputs
            chunk, mask = next_chunk, next_mask
    if WALK:
        # redo the segment's first chunks with the true carry until their carry out is the one the walk used
        carry, walked_carry, position, pending = walk_lookback(
            status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, segment_chunks, first, carry,
            walk_decay, BLOCK_ROWS, WINDOW)
        while pending:
            chunk, _, mask = chunk_window(position, num_chunks, seq_len, row_ok, BLOCK_TIME, False, VEC=VEC)
            inputs, reset = episodic_chunk_inputs(inputs_ptr, dones_ptr, s_inputs_row, s_inputs_time, s_dones_row,
                                                  s_dones_time, rows, row_ok, chunk, seq_len, RESET_AFTER_FLAG,
                                                  DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC)
            chunk_a, chunk_b, carry = episodic_chunk(inputs, reset, mask, carry, step_decay, out_ptr, status_ptr,
                                                     aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, rows,
                                                     row_ok, s_out_row, s_out_time, chunk, seq_len, False,
                                                     BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC)
            carry, walked_carry, position, pending = redo_advance(chunk_a, chunk_b, carry, walked_carry, position, end)
