"""Lambda-returns and discounted returns (one kernel: discounted returns are lambda = 1).

Eligibility traces are the episodic forward scan of ``kernels/prefix_sum.py`` with decay
gamma * lambda.
"""

import triton
import triton.language as tl

from rl_triton.kernels.scan import (
    chunk_carry,
    chunk_window,
    claim_segment,
    last_step,
    load_chunk,
    load_episode_flags,
    per_step,
    redo_advance,
    scan_chunk,
    store_chunk,
    tile_rows,
    walk_lookback,
)


@triton.jit
def returns_chunk_inputs(
    rewards_ptr, next_values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr,
    s_rewards_row, s_rewards_time, s_next_row, s_next_time, s_term_row, s_term_time,
    s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, rows, row_ok, chunk, seq_len,
    HAS_NEXT_VALUES: tl.constexpr, HAS_TRUNCATED: tl.constexpr, HAS_BOOTSTRAP: tl.constexpr, DTYPE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr,
):
    """The loads of one chunk; tensors a call does not pass are zeros."""
    rewards = load_chunk(rewards_ptr, rows, row_ok, s_rewards_row, chunk, s_rewards_time, seq_len, 0.0, DTYPE,
                         BLOCK_ROWS, BLOCK_TIME, VEC, True)
    terminated, truncated = load_episode_flags(terminated_ptr, truncated_ptr, rows, row_ok, s_term_row, s_term_time,
                                               s_trunc_row, s_trunc_time, chunk, seq_len, HAS_TRUNCATED, DTYPE,
                                               BLOCK_ROWS, BLOCK_TIME, VEC, True)
    next_value = tl.zeros_like(rewards)
    if HAS_NEXT_VALUES:
        next_value = load_chunk(next_values_ptr, rows, row_ok, s_next_row, chunk, s_next_time, seq_len, 0.0, DTYPE,
                                BLOCK_ROWS, BLOCK_TIME, VEC, True)
    bootstrap = tl.zeros_like(rewards)
    if HAS_TRUNCATED and HAS_BOOTSTRAP:
        bootstrap = load_chunk(bootstrap_ptr, rows, row_ok, s_boot_row, chunk, s_boot_time, seq_len, 0.0, DTYPE,
                               BLOCK_ROWS, BLOCK_TIME, VEC, True)
    return rewards, terminated, truncated, next_value, bootstrap


@triton.jit
def returns_chunk(
    inputs, terminated, truncated, next_value, bootstrap, mask, carry, discount, value_weight, trace_decay,
    returns_ptr, status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, rows, row_ok, s_out_row,
    s_out_time, chunk, seq_len, HAS_NEXT_VALUES: tl.constexpr, HAS_TRUNCATED: tl.constexpr,
    HAS_BOOTSTRAP: tl.constexpr, LOOKBACK: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr,
    WINDOW: tl.constexpr, VEC: tl.constexpr,
):
    """Returns of one chunk from its inputs and the carry into it (LOOKBACK: the carry comes from
    the look-back instead). Returns the chunk's map (a, b): carry out = a + b * carry in, and the carry in."""
    not_done = 1.0 - tl.maximum(terminated, truncated)
    if HAS_NEXT_VALUES:
        inputs += value_weight * not_done * next_value
    if HAS_TRUNCATED and HAS_BOOTSTRAP:
        inputs += discount * truncated * bootstrap
    scan_a, scan_b = scan_chunk(tl.where(mask, inputs, 0.0), tl.where(mask, trace_decay * not_done, 1.0), True, VEC)
    chunk_a, chunk_b = last_step(scan_a, BLOCK_TIME, True, VEC), last_step(scan_b, BLOCK_TIME, True, VEC)
    if LOOKBACK:
        carry = chunk_carry(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, chunk_a, chunk_b,
                            carry, BLOCK_ROWS, WINDOW)
    store_chunk(returns_ptr, rows, row_ok, s_out_row, chunk, s_out_time, seq_len, scan_a + scan_b * per_step(carry, VEC),
                BLOCK_ROWS, BLOCK_TIME, VEC, True)
    return chunk_a, chunk_b, carry


@triton.jit
def returns_kernel(
    rewards_ptr, next_values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, returns_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_chunks, num_row_tiles, segment_chunks,
    s_rewards_row, s_rewards_time, s_next_row, s_next_time, s_term_row, s_term_time,
    s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, s_out_row, s_out_time,
    gamma: tl.float64, lambda_: tl.float64,
    HAS_NEXT_VALUES: tl.constexpr, HAS_TRUNCATED: tl.constexpr, HAS_BOOTSTRAP: tl.constexpr,
    SPLIT: tl.constexpr, WALK: tl.constexpr, PREFETCH: tl.constexpr, BLOCK_ROWS: tl.constexpr,
    BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr, DTYPE: tl.constexpr, VEC: tl.constexpr,
):
    row_tile, order, first, my_chunks = claim_segment(counter_ptr, num_row_tiles, num_chunks, segment_chunks, SPLIT)
    end = first + my_chunks
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    discount = tl.cast(gamma, DTYPE)
    value_weight = tl.cast(gamma * (1.0 - lambda_), DTYPE)
    trace_decay = tl.cast(gamma * lambda_, DTYPE)
    # G[T] = bootstrap_values[:, T-1]; a walked segment other than the last in time starts from zero
    carry = tl.zeros([BLOCK_ROWS], DTYPE)
    if HAS_BOOTSTRAP:
        last = rows * s_boot_row + tl.cast(seq_len - 1, tl.int64) * s_boot_time
        carry = tl.load(bootstrap_ptr + last, mask=row_ok & (order == 0), other=0.0).to(DTYPE)
    walk_decay = tl.full([BLOCK_ROWS], 1, DTYPE)
    chunk, _, mask = chunk_window(first, num_chunks, seq_len, row_ok, BLOCK_TIME, True, VEC=VEC)
    inputs, terminated, truncated, next_value, bootstrap = returns_chunk_inputs(
        rewards_ptr, next_values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr,
        s_rewards_row, s_rewards_time, s_next_row, s_next_time, s_term_row, s_term_time,
        s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, rows, row_ok, chunk, seq_len,
        HAS_NEXT_VALUES, HAS_TRUNCATED, HAS_BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC)
    for i in range(my_chunks):
        if PREFETCH:
            next_chunk, _, next_mask = chunk_window(first + i + 1, num_chunks, seq_len, row_ok, BLOCK_TIME, True, end, VEC)
            next_inputs = returns_chunk_inputs(
                rewards_ptr, next_values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr,
                s_rewards_row, s_rewards_time, s_next_row, s_next_time, s_term_row, s_term_time,
                s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, rows, row_ok, next_chunk, seq_len,
                HAS_NEXT_VALUES, HAS_TRUNCATED, HAS_BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC)
        chunk_a, chunk_b, carry = returns_chunk(
            inputs, terminated, truncated, next_value, bootstrap, mask, carry, discount, value_weight, trace_decay,
            returns_ptr, status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, rows, row_ok,
            s_out_row, s_out_time, chunk, seq_len, HAS_NEXT_VALUES, HAS_TRUNCATED, HAS_BOOTSTRAP,
            SPLIT and not WALK, BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC)
        carry = chunk_a + chunk_b * carry
        walk_decay *= chunk_b
        if PREFETCH:
            inputs, terminated, truncated, next_value, bootstrap = next_inputs
            chunk, mask = next_chunk, next_mask
    if WALK:
        # redo the segment's first chunks with the true carry until their carry out is the one the walk used
        carry, walked_carry, position, pending = walk_lookback(
            status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, segment_chunks, first, carry,
            walk_decay, BLOCK_ROWS, WINDOW)
        while pending:
            chunk, _, mask = chunk_window(position, num_chunks, seq_len, row_ok, BLOCK_TIME, True, VEC=VEC)
            inputs, terminated, truncated, next_value, bootstrap = returns_chunk_inputs(
                rewards_ptr, next_values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr,
                s_rewards_row, s_rewards_time, s_next_row, s_next_time, s_term_row, s_term_time,
                s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, rows, row_ok, chunk, seq_len,
                HAS_NEXT_VALUES, HAS_TRUNCATED, HAS_BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC)
            chunk_a, chunk_b, carry = returns_chunk(
                inputs, terminated, truncated, next_value, bootstrap, mask, carry, discount, value_weight,
                trace_decay, returns_ptr, status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, rows,
                row_ok, s_out_row, s_out_time, chunk, seq_len, HAS_NEXT_VALUES, HAS_TRUNCATED, HAS_BOOTSTRAP,
                False, BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC)
            carry, walked_carry, position, pending = redo_advance(chunk_a, chunk_b, carry, walked_carry, position, end)
