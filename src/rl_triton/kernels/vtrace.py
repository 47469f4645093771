"""V-trace: prologue (clipped ratios, TD errors, decays) and epilogue (targets, advantages)."""

import triton
import triton.language as tl

from rl_triton.kernels.gae import gae_chunk_inputs
from rl_triton.kernels.scan import (
    chunk_carry,
    chunk_window,
    claim_segment,
    last_step,
    load_chunk,
    per_step,
    redo_advance,
    scan_chunk_with_previous,
    store_chunk,
    tile_rows,
    walk_lookback,
)


@triton.jit
def vtrace_chunk_inputs(
    log_target_ptr, log_behavior_ptr, values_ptr, rewards_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr,
    last_value, s_target_row, s_target_time, s_behavior_row, s_behavior_time, s_values_row, s_values_time,
    s_rewards_row, s_rewards_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time, s_boot_row, s_boot_time,
    rows, row_ok, chunk, steps, seq_len, HAS_TRUNCATED: tl.constexpr, BOOTSTRAP: tl.constexpr, DTYPE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr,
):
    """The loads of one chunk: log-probabilities, then GAE's (rewards, values, flags, next state's value)."""
    log_target = load_chunk(log_target_ptr, rows, row_ok, s_target_row, chunk, s_target_time, seq_len, 0.0, DTYPE,
                            BLOCK_ROWS, BLOCK_TIME, VEC, True)
    log_behavior = load_chunk(log_behavior_ptr, rows, row_ok, s_behavior_row, chunk, s_behavior_time, seq_len, 0.0, DTYPE,
                              BLOCK_ROWS, BLOCK_TIME, VEC, True)
    reward, value, terminated, truncated, value_next = gae_chunk_inputs(
        rewards_ptr, values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, last_value,
        s_rewards_row, s_rewards_time, s_values_row, s_values_time, s_term_row, s_term_time,
        s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, rows, row_ok, chunk, steps, seq_len,
        HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC)
    return log_target, log_behavior, reward, value, terminated, truncated, value_next


@triton.jit
def vtrace_chunk(
    log_target, log_behavior, reward, value, terminated, truncated, value_next, mask, carry, discount, rho_clip,
    c_clip, targets_ptr, advantages_ptr, status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, rows,
    row_ok, s_out_row, s_out_time, chunk, seq_len, LOOKBACK: tl.constexpr, BLOCK_ROWS: tl.constexpr,
    BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr, VEC: tl.constexpr,
):
    """Targets and advantages of one chunk from its inputs and the carry into it (LOOKBACK: the carry
    comes from the look-back instead). Returns the chunk's map (a, b): carry out = a + b * carry in,
    and the carry in."""
    ratio = tl.exp(log_target - log_behavior)
    rho = tl.minimum(ratio, rho_clip, propagate_nan=tl.PropagateNan.ALL)
    trace = tl.minimum(ratio, c_clip, propagate_nan=tl.PropagateNan.ALL)
    not_done = 1.0 - tl.maximum(terminated, truncated)
    delta = rho * (reward + discount * value_next * (1.0 - terminated) - value)
    decay = discount * trace * not_done
    scan_a, scan_b, next_a, next_b = scan_chunk_with_previous(tl.where(mask, delta, 0.0), tl.where(mask, decay, 1.0),
                                                              True, VEC)
    chunk_a, chunk_b = last_step(scan_a, BLOCK_TIME, True, VEC), last_step(scan_b, BLOCK_TIME, True, VEC)
    if LOOKBACK:
        carry = chunk_carry(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, chunk_a, chunk_b,
                            carry, BLOCK_ROWS, WINDOW)
    correction = scan_a + scan_b * per_step(carry, VEC)
    correction_next = next_a + next_b * per_step(carry, VEC)
    # vs[t+1] - v_next[t] = correction[t+1] wherever vs[t+1] is used (not done), and the
    # last column uses bootstrap values for both, so A[t] = delta[t] + rho*gamma*(1-done)*correction[t+1]
    advantage = delta + rho * discount * not_done * correction_next
    store_chunk(targets_ptr, rows, row_ok, s_out_row, chunk, s_out_time, seq_len, correction + value,
                BLOCK_ROWS, BLOCK_TIME, VEC, True)
    store_chunk(advantages_ptr, rows, row_ok, s_out_row, chunk, s_out_time, seq_len, advantage,
                BLOCK_ROWS, BLOCK_TIME, VEC, True)
    return chunk_a, chunk_b, carry


@triton.jit
def vtrace_kernel(
    log_target_ptr, log_behavior_ptr, values_ptr, rewards_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr,
    targets_ptr, advantages_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_chunks, num_row_tiles, segment_chunks,
    s_target_row, s_target_time, s_behavior_row, s_behavior_time, s_values_row, s_values_time,
    s_rewards_row, s_rewards_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time,
    s_boot_row, s_boot_time, s_out_row, s_out_time,
    gamma: tl.float64, rho_bar: tl.float64, c_bar: tl.float64,
    HAS_TRUNCATED: tl.constexpr, BOOTSTRAP: tl.constexpr, SPLIT: tl.constexpr, WALK: tl.constexpr,
    PREFETCH: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr,
    DTYPE: tl.constexpr, VEC: tl.constexpr,
):
    row_tile, order, first, my_chunks = claim_segment(counter_ptr, num_row_tiles, num_chunks, segment_chunks, SPLIT)
    end = first + my_chunks
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    discount = tl.cast(gamma, DTYPE)
    rho_clip = tl.cast(rho_bar, DTYPE)
    c_clip = tl.cast(c_bar, DTYPE)
    last_value = tl.zeros([BLOCK_ROWS], DTYPE)
    if BOOTSTRAP == 1:
        last_value = tl.load(bootstrap_ptr + rows * s_boot_row, mask=row_ok, other=0.0).to(DTYPE)
    carry = tl.zeros([BLOCK_ROWS], DTYPE)
    walk_decay = tl.full([BLOCK_ROWS], 1, DTYPE)
    chunk, steps, mask = chunk_window(first, num_chunks, seq_len, row_ok, BLOCK_TIME, True, VEC=VEC)
    log_target, log_behavior, reward, value, terminated, truncated, value_next = vtrace_chunk_inputs(
        log_target_ptr, log_behavior_ptr, values_ptr, rewards_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr,
        last_value, s_target_row, s_target_time, s_behavior_row, s_behavior_time, s_values_row, s_values_time,
        s_rewards_row, s_rewards_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time, s_boot_row, s_boot_time,
        rows, row_ok, chunk, steps, seq_len, HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC)
    for i in range(my_chunks):
        if PREFETCH:
            next_chunk, next_steps, next_mask = chunk_window(first + i + 1, num_chunks, seq_len, row_ok, BLOCK_TIME,
                                                             True, end, VEC)
            next_inputs = vtrace_chunk_inputs(
                log_target_ptr, log_behavior_ptr, values_ptr, rewards_ptr, terminated_ptr, truncated_ptr,
                bootstrap_ptr, last_value, s_target_row, s_target_time, s_behavior_row, s_behavior_time,
                s_values_row, s_values_time, s_rewards_row, s_rewards_time, s_term_row, s_term_time,
                s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, rows, row_ok, next_chunk, next_steps, seq_len,
                HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC)
        chunk_a, chunk_b, carry = vtrace_chunk(
            log_target, log_behavior, reward, value, terminated, truncated, value_next, mask, carry, discount,
            rho_clip, c_clip, targets_ptr, advantages_ptr, status_ptr, aggregate_ptr, prefix_ptr, row_tile, order,
            num_chunks, rows, row_ok, s_out_row, s_out_time, chunk, seq_len, SPLIT and not WALK, BLOCK_ROWS,
            BLOCK_TIME, WINDOW, VEC)
        carry = chunk_a + chunk_b * carry
        walk_decay *= chunk_b
        if PREFETCH:
            log_target, log_behavior, reward, value, terminated, truncated, value_next = next_inputs
            chunk, steps, mask = next_chunk, next_steps, next_mask
    if WALK:
        # redo the segment's first chunks with the true carry until their carry out is the one the walk used
        carry, walked_carry, position, pending = walk_lookback(
            status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, segment_chunks, first, carry,
            walk_decay, BLOCK_ROWS, WINDOW)
        while pending:
            chunk, steps, mask = chunk_window(position, num_chunks, seq_len, row_ok, BLOCK_TIME, True, VEC=VEC)
            log_target, log_behavior, reward, value, terminated, truncated, value_next = vtrace_chunk_inputs(
                log_target_ptr, log_behavior_ptr, values_ptr, rewards_ptr, terminated_ptr, truncated_ptr,
                bootstrap_ptr, last_value, s_target_row, s_target_time, s_behavior_row, s_behavior_time,
                s_values_row, s_values_time, s_rewards_row, s_rewards_time, s_term_row, s_term_time,
                s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, rows, row_ok, chunk, steps, seq_len,
                HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC)
            chunk_a, chunk_b, carry = vtrace_chunk(
                log_target, log_behavior, reward, value, terminated, truncated, value_next, mask, carry, discount,
                rho_clip, c_clip, targets_ptr, advantages_ptr, status_ptr, aggregate_ptr, prefix_ptr, row_tile,
                order, num_chunks, rows, row_ok, s_out_row, s_out_time, chunk, seq_len, False, BLOCK_ROWS,
                BLOCK_TIME, WINDOW, VEC)
            carry, walked_carry, position, pending = redo_advance(chunk_a, chunk_b, carry, walked_carry, position, end)
