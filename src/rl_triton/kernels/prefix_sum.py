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
    claim_work,
    last_column,
    load_flag,
    load_tile,
    scan,
    store_tile,
    tile_rows,
)


@triton.jit
def episodic_chunk_inputs(inputs_ptr, dones_ptr, s_inputs_row, s_inputs_time, s_dones_row, s_dones_time,
                          rows, row_ok, steps, mask, seq_len, RESET_AFTER_FLAG: tl.constexpr, DTYPE: tl.constexpr):
    """The loads of one chunk: inputs and the reset flag of each step."""
    inputs = load_tile(inputs_ptr, rows, s_inputs_row, steps, s_inputs_time, mask, 0.0, DTYPE)
    if RESET_AFTER_FLAG:
        in_range = (steps < seq_len) & (steps >= 0)
        flag_mask = row_ok[:, None] & (in_range & (steps >= 1))[None, :]
        reset = load_flag(dones_ptr, rows, s_dones_row, steps - 1, s_dones_time, flag_mask, DTYPE)
    else:
        reset = load_flag(dones_ptr, rows, s_dones_row, steps, s_dones_time, mask, DTYPE)
    return inputs, reset


@triton.jit
def episodic_scan_kernel(
    inputs_ptr, dones_ptr, seed_ptr, out_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_chunks, num_row_tiles,
    s_inputs_row, s_inputs_time, s_dones_row, s_dones_time, s_seed_row, s_out_row, s_out_time,
    decay: tl.float64,
    HAS_SEED: tl.constexpr, RESET_AFTER_FLAG: tl.constexpr, SPLIT: tl.constexpr, PREFETCH: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr, DTYPE: tl.constexpr,
):
    row_tile, order, my_chunks = claim_work(counter_ptr, num_row_tiles, num_chunks, SPLIT)
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    step_decay = tl.cast(decay, DTYPE)
    carry = tl.zeros([BLOCK_ROWS], DTYPE)
    if HAS_SEED:
        carry = tl.load(seed_ptr + rows * s_seed_row, mask=row_ok, other=0.0).to(DTYPE)
    steps, mask = chunk_window(order, num_chunks, seq_len, row_ok, BLOCK_TIME, False)
    inputs, reset = episodic_chunk_inputs(inputs_ptr, dones_ptr, s_inputs_row, s_inputs_time, s_dones_row,
                                          s_dones_time, rows, row_ok, steps, mask, seq_len, RESET_AFTER_FLAG, DTYPE)
    for i in range(my_chunks):
        if PREFETCH:
            next_steps, next_mask = chunk_window(order + i + 1, num_chunks, seq_len, row_ok, BLOCK_TIME, False)
            next_inputs = episodic_chunk_inputs(inputs_ptr, dones_ptr, s_inputs_row, s_inputs_time, s_dones_row,
                                                s_dones_time, rows, row_ok, next_steps, next_mask, seq_len,
                                                RESET_AFTER_FLAG, DTYPE)
        scan_a, scan_b = scan(tl.where(mask, inputs, 0.0), tl.where(mask, step_decay * (1.0 - reset), 1.0))
        if SPLIT:
            carry = chunk_carry(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks,
                                last_column(scan_a, BLOCK_TIME),
                                last_column(scan_b, BLOCK_TIME), carry, BLOCK_ROWS, WINDOW)
        out = scan_a + scan_b * carry[:, None]
        store_tile(out_ptr, rows, s_out_row, steps, s_out_time, out, mask)
        carry = last_column(out, BLOCK_TIME)
        if PREFETCH:
            inputs, reset = next_inputs
            steps, mask = next_steps, next_mask
