"""GAE: prologue (TD errors and decays) and epilogue (advantages) around the backward scan."""

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

# how bootstrap values arrive: none, one per row (last_value), or a full [rows, T] tensor
BOOTSTRAP_NONE = 0
BOOTSTRAP_LAST = 1
BOOTSTRAP_FULL = 2


@triton.jit
def next_state_value(
    values_ptr, s_values_row, s_values_time, truncated, bootstrap_ptr, s_boot_row, s_boot_time, last_value,
    rows, row_ok, chunk, steps, seq_len, HAS_TRUNCATED: tl.constexpr, BOOTSTRAP: tl.constexpr, DTYPE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr,
):
    """v_next[t] = values[t+1] * (1 - truncated[t]) + bootstrap_values[t], values[T] := 0."""
    value_next = load_chunk(values_ptr, rows, row_ok, s_values_row, chunk, s_values_time, seq_len, 0.0, DTYPE,
                            BLOCK_ROWS, BLOCK_TIME, VEC, True, SHIFT=1)
    if HAS_TRUNCATED:
        value_next = value_next * (1.0 - truncated)
    if BOOTSTRAP == 2:
        value_next += load_chunk(bootstrap_ptr, rows, row_ok, s_boot_row, chunk, s_boot_time, seq_len, 0.0, DTYPE,
                                 BLOCK_ROWS, BLOCK_TIME, VEC, True)
    if BOOTSTRAP == 1:
        is_last = tl.expand_dims(steps == seq_len - 1, 0)
        value_next += tl.where(is_last, per_step(last_value, VEC), tl.zeros_like(value_next))
    return value_next


@triton.jit
def gae_chunk_inputs(
    rewards_ptr, values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, last_value,
    s_rewards_row, s_rewards_time, s_values_row, s_values_time, s_term_row, s_term_time,
    s_trunc_row, s_trunc_time, s_boot_row, s_boot_time,
    rows, row_ok, chunk, steps, seq_len, HAS_TRUNCATED: tl.constexpr, BOOTSTRAP: tl.constexpr, DTYPE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr,
):
    """The loads of one chunk: rewards, values, flags and the next state's value."""
    reward = load_chunk(rewards_ptr, rows, row_ok, s_rewards_row, chunk, s_rewards_time, seq_len, 0.0, DTYPE,
                        BLOCK_ROWS, BLOCK_TIME, VEC, True)
    value = load_chunk(values_ptr, rows, row_ok, s_values_row, chunk, s_values_time, seq_len, 0.0, DTYPE,
                       BLOCK_ROWS, BLOCK_TIME, VEC, True)
    terminated, truncated = load_episode_flags(terminated_ptr, truncated_ptr, rows, row_ok, s_term_row, s_term_time,
                                               s_trunc_row, s_trunc_time, chunk, seq_len, HAS_TRUNCATED, DTYPE,
                                               BLOCK_ROWS, BLOCK_TIME, VEC, True)
    value_next = next_state_value(
        values_ptr, s_values_row, s_values_time, truncated, bootstrap_ptr, s_boot_row, s_boot_time,
        last_value, rows, row_ok, chunk, steps, seq_len, HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC,
    )
    return reward, value, terminated, truncated, value_next


@triton.jit
def gae_chunk(
    reward, value, terminated, truncated, value_next, mask, carry, discount, trace_decay, advantages_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, rows, row_ok, s_out_row, s_out_time,
    chunk, seq_len, LOOKBACK: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr,
    WINDOW: tl.constexpr, VEC: tl.constexpr,
):
    """Advantages of one chunk from its inputs and the carry into it (LOOKBACK: the carry comes from
    the look-back instead). Returns the chunk's map (a, b): carry out = a + b * carry in, and the carry in."""
    delta = reward + discount * (1.0 - terminated) * value_next - value
    decay = trace_decay * (1.0 - tl.maximum(terminated, truncated))
    # steps past the end of the sequence are identity steps (0, 1) of the recurrence
    scan_a, scan_b = scan_chunk(tl.where(mask, delta, 0.0), tl.where(mask, decay, 1.0), True, VEC)
    chunk_a, chunk_b = last_step(scan_a, BLOCK_TIME, True, VEC), last_step(scan_b, BLOCK_TIME, True, VEC)
    if LOOKBACK:
        carry = chunk_carry(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, chunk_a, chunk_b,
                            carry, BLOCK_ROWS, WINDOW)
    store_chunk(advantages_ptr, rows, row_ok, s_out_row, chunk, s_out_time, seq_len, scan_a + scan_b * per_step(carry, VEC),
                BLOCK_ROWS, BLOCK_TIME, VEC, True)
    return chunk_a, chunk_b, carry


@triton.jit
def gae_kernel(
    rewards_ptr, values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, advantages_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_chunks, num_row_tiles, segment_chunks,
    s_rewards_row, s_rewards_time, s_values_row, s_values_time, s_term_row, s_term_time,
    s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, s_out_row, s_out_time,
    gamma: tl.float64, lambda_: tl.float64,
    HAS_TRUNCATED: tl.constexpr, BOOTSTRAP: tl.constexpr, SPLIT: tl.constexpr, WALK: tl.constexpr,
    PREFETCH: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr,
    DTYPE: tl.constexpr, VEC: tl.constexpr,
):
    row_tile, order, first, my_chunks = claim_segment(counter_ptr, num_row_tiles, num_chunks, segment_chunks, SPLIT)
    end = first + my_chunks
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    discount = tl.cast(gamma, DTYPE)
    trace_decay = tl.cast(gamma * lambda_, DTYPE)
    last_value = tl.zeros([BLOCK_ROWS], DTYPE)
    if BOOTSTRAP == 1:
        last_value = tl.load(bootstrap_ptr + rows * s_boot_row, mask=row_ok, other=0.0).to(DTYPE)
    carry = tl.zeros([BLOCK_ROWS], DTYPE)
    walk_decay = tl.full([BLOCK_ROWS], 1, DTYPE)
    chunk, steps, mask = chunk_window(first, num_chunks, seq_len, row_ok, BLOCK_TIME, True, VEC=VEC)
    reward, value, terminated, truncated, value_next = gae_chunk_inputs(
        rewards_ptr, values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, last_value,
        s_rewards_row, s_rewards_time, s_values_row, s_values_time, s_term_row, s_term_time,
        s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, rows, row_ok, chunk, steps, seq_len,
        HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC)
    for i in range(my_chunks):
        if PREFETCH:
            next_chunk, next_steps, next_mask = chunk_window(first + i + 1, num_chunks, seq_len, row_ok, BLOCK_TIME,
                                                             True, end, VEC)
            next_inputs = gae_chunk_inputs(
                rewards_ptr, values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, last_value,
                s_rewards_row, s_rewards_time, s_values_row, s_values_time, s_term_row, s_term_time,
                s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, rows, row_ok, next_chunk, next_steps, seq_len,
                HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC)
        chunk_a, chunk_b, carry = gae_chunk(
            reward, value, terminated, truncated, value_next, mask, carry, discount, trace_decay, advantages_ptr,
            status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, rows, row_ok, s_out_row, s_out_time,
            chunk, seq_len, SPLIT and not WALK, BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC)
        carry = chunk_a + chunk_b * carry
        walk_decay *= chunk_b
        if PREFETCH:
            reward, value, terminated, truncated, value_next = next_inputs
            chunk, steps, mask = next_chunk, next_steps, next_mask
    if WALK:
        # redo the segment's first chunks with the true carry until their carry out is the one the walk used
        carry, walked_carry, position, pending = walk_lookback(
            status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, segment_chunks, first, carry,
            walk_decay, BLOCK_ROWS, WINDOW)
        while pending:
            chunk, steps, mask = chunk_window(position, num_chunks, seq_len, row_ok, BLOCK_TIME, True, VEC=VEC)
            reward, value, terminated, truncated, value_next = gae_chunk_inputs(
                rewards_ptr, values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, last_value,
                s_rewards_row, s_rewards_time, s_values_row, s_values_time, s_term_row, s_term_time,
                s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, rows, row_ok, chunk, steps, seq_len,
                HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC)
            chunk_a, chunk_b, carry = gae_chunk(
                reward, value, terminated, truncated, value_next, mask, carry, discount, trace_decay, advantages_ptr,
                status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, rows, row_ok, s_out_row,
                s_out_time, chunk, seq_len, False, BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC)
            carry, walked_carry, position, pending = redo_advance(chunk_a, chunk_b, carry, walked_carry, position, end)
