"""V-trace: prologue (clipped ratios, TD errors, decays) and epilogue (targets, advantages)."""

import triton
import triton.language as tl

from rl_triton.kernels.gae import gae_chunk_inputs
from rl_triton.kernels.scan import (
    carried,
    claim_segment,
    direct_scan,
    in_processing_order,
    in_processing_order_code,
    in_range,
    load_chunk,
    scan_chunk_with_previous,
    scan_program,
    store_chunk,
    tile_rows,
)


@triton.jit
def vtrace_chunk_inputs(
    log_target_ptr, log_behavior_ptr, values_ptr, rewards_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr,
    last_value, s_target_row, s_target_time, s_behavior_row, s_behavior_time, s_values_row, s_values_time,
    s_rewards_row, s_rewards_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time, s_boot_row, s_boot_time,
    rows, row_ok, chunk, steps, seq_len, HAS_TRUNCATED: tl.constexpr, BOOTSTRAP: tl.constexpr, DTYPE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr, SHIFT_IN_REGISTERS: tl.constexpr,
    STRIDED: tl.constexpr,
):
    """The loads of one chunk: log-probabilities, then GAE's (rewards, values, flags, next state's value)."""
    log_target = load_chunk(log_target_ptr, rows, row_ok, s_target_row, chunk, s_target_time, seq_len, 0.0, DTYPE,
                            BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED=STRIDED)
    log_behavior = load_chunk(log_behavior_ptr, rows, row_ok, s_behavior_row, chunk, s_behavior_time, seq_len, 0.0, DTYPE,
                              BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED=STRIDED)
    reward, value, terminated, truncated, value_next = gae_chunk_inputs(
        rewards_ptr, values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, last_value,
        s_rewards_row, s_rewards_time, s_values_row, s_values_time, s_term_row, s_term_time,
        s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, rows, row_ok, chunk, steps, seq_len,
        HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC, SHIFT_IN_REGISTERS, STRIDED)
    return log_target, log_behavior, reward, value, terminated, truncated, value_next


@triton.jit
def vtrace_load(args, CONSTS: tl.constexpr, chunk, steps):
    """``vtrace_chunk_inputs`` of one chunk (``kernels/scan.py``: ``scan_program``)."""
    HAS_TRUNCATED: tl.constexpr = CONSTS[0]
    BOOTSTRAP: tl.constexpr = CONSTS[1]
    DTYPE: tl.constexpr = CONSTS[2]
    BLOCK_ROWS: tl.constexpr = CONSTS[3]
    BLOCK_TIME: tl.constexpr = CONSTS[4]
    VEC: tl.constexpr = CONSTS[5]
    SHIFT_IN_REGISTERS: tl.constexpr = CONSTS[6]
    STRIDED: tl.constexpr = CONSTS[7]
    pointers, strides, last_value, _, rows, row_ok, seq_len = args
    WHOLE_TILES: tl.constexpr = CONSTS[8]
    if WHOLE_TILES:
        # no in-range masks (kernels/scan.py: tile_rows)
        row_ok = None
    log_target_ptr, log_behavior_ptr, values_ptr, rewards_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, _, _ = (
        pointers)
    (s_target_row, s_target_time, s_behavior_row, s_behavior_time, s_values_row, s_values_time, s_rewards_row,
     s_rewards_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, _, _) = strides
    return vtrace_chunk_inputs(
        log_target_ptr, log_behavior_ptr, values_ptr, rewards_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr,
        last_value, s_target_row, s_target_time, s_behavior_row, s_behavior_time, s_values_row, s_values_time,
        s_rewards_row, s_rewards_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time, s_boot_row, s_boot_time,
        rows, row_ok, chunk, steps, seq_len, HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC,
        SHIFT_IN_REGISTERS, STRIDED)


@triton.jit
def vtrace_scan(args, CONSTS: tl.constexpr, inputs, mask, carry):
    """Clipped ratios, TD errors and decays of one chunk, scanned: (A, B, A_next, B_next, delta, rho,
    not_done) with vs - V = A + B * carry in and its value one step later A_next + B_next * carry in."""
    VEC: tl.constexpr = CONSTS[5]
    BACKWARD_LANES: tl.constexpr = not in_processing_order(CONSTS[7])
    WHOLE_TILES: tl.constexpr = CONSTS[8]
    discount, rho_clip, c_clip = args[3]
    log_target, log_behavior, reward, value, terminated, truncated, value_next = inputs
    ratio = tl.exp(log_target - log_behavior)
    rho = tl.minimum(ratio, rho_clip, propagate_nan=tl.PropagateNan.ALL)
    trace = tl.minimum(ratio, c_clip, propagate_nan=tl.PropagateNan.ALL)
    # 1 - max(terminated, truncated) and 1 - terminated of 0/1 flags, as selects (as in gae_scan). Measured
    # on an H200, % of the copy ceiling, products -> selects with last_value as the load's other value
    # (benchmarks/results/h200-2026-12-02-run25-selects-ab.txt, two interleaved runs): 4096x4096 90.9 /
    # 91.4 -> 93.3 / 95.0, bf16 values with uint8 flags at 8x2^21 60.1 / 60.5 -> 62.9 / 63.5, stored
    # [T, N] 64.0 / 63.3 -> 72.4 / 72.5 (4096x4096), 74.4 / 73.6 -> 78.0 / 81.4 (16384x512), 59.2 / 58.8 ->
    # 64.3 / 64.6 (8x2^21); with truncations, and at the other shapes, within a run's spread.
    not_done = tl.where((terminated != 0) | (truncated != 0), 0.0, 1.0)
    delta = rho * (reward + discount * value_next * tl.where(terminated != 0, 0.0, 1.0) - value)
    decay = discount * trace * not_done
    scan_a, scan_b, next_a, next_b = scan_chunk_with_previous(in_range(mask, delta, 0.0, WHOLE_TILES),
                                                              in_range(mask, decay, 1.0, WHOLE_TILES),
                                                              BACKWARD_LANES, VEC, carry)
    return scan_a, scan_b, next_a, next_b, delta, rho, not_done


@triton.jit
def vtrace_store(args, CONSTS: tl.constexpr, inputs, scanned, carry, chunk):
    """Targets and advantages of one chunk, from the carry into it."""
    BLOCK_ROWS: tl.constexpr = CONSTS[3]
    BLOCK_TIME: tl.constexpr = CONSTS[4]
    VEC: tl.constexpr = CONSTS[5]
    STRIDED: tl.constexpr = CONSTS[7]
    pointers, strides, _, scalars, rows, row_ok, seq_len = args
    WHOLE_TILES: tl.constexpr = CONSTS[8]
    if WHOLE_TILES:
        # no in-range masks (kernels/scan.py: tile_rows)
        row_ok = None
    scan_a, scan_b, next_a, next_b, delta, rho, not_done = scanned
    correction = carried(scan_a, scan_b, carry, VEC)
    correction_next = carried(next_a, next_b, carry, VEC)
    # vs[t+1] - v_next[t] = correction[t+1] wherever vs[t+1] is used (not done), and the
    # last column uses bootstrap values for both, so A[t] = delta[t] + rho*gamma*(1-done)*correction[t+1]
    advantage = delta + rho * scalars[0] * not_done * correction_next
    store_chunk(pointers[7], rows, row_ok, strides[14], chunk, strides[15], seq_len, correction + inputs[3],
                BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED)
    store_chunk(pointers[8], rows, row_ok, strides[14], chunk, strides[15], seq_len, advantage,
                BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED)


@triton.jit(do_not_specialize=["spent_words"])
def vtrace_kernel(
    log_target_ptr, log_behavior_ptr, values_ptr, rewards_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr,
    targets_ptr, advantages_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_chunks, num_row_tiles, segment_chunks,
    s_target_row, s_target_time, s_behavior_row, s_behavior_time, s_values_row, s_values_time,
    s_rewards_row, s_rewards_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time,
    s_boot_row, s_boot_time, s_out_row, s_out_time,
    gamma: tl.float64, rho_bar: tl.float64, c_bar: tl.float64, spent_ptr, spent_words,
    HAS_TRUNCATED: tl.constexpr, BOOTSTRAP: tl.constexpr, SPLIT: tl.constexpr, WALK: tl.constexpr,
    PREFETCH: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr,
    DTYPE: tl.constexpr, VEC: tl.constexpr, STRIDED_GROUPS: tl.constexpr = False, DIRECT: tl.constexpr = False,
    WHOLE_TILES: tl.constexpr = False, LOOK_BEHIND: tl.constexpr = 0,
):
    row_tile, order, first, my_chunks = claim_segment(counter_ptr, spent_ptr, spent_words, num_row_tiles, num_chunks,
                                                      segment_chunks, SPLIT)
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    last_value = tl.zeros([BLOCK_ROWS], DTYPE)
    if BOOTSTRAP == 1:
        last_value = tl.load(bootstrap_ptr + rows * s_boot_row, mask=row_ok, other=0.0).to(DTYPE)
    args = (
        (log_target_ptr, log_behavior_ptr, values_ptr, rewards_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr,
         targets_ptr, advantages_ptr),
        (s_target_row, s_target_time, s_behavior_row, s_behavior_time, s_values_row, s_values_time, s_rewards_row,
         s_rewards_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, s_out_row,
         s_out_time),
        last_value, (tl.cast(gamma, DTYPE), tl.cast(rho_bar, DTYPE), tl.cast(c_bar, DTYPE)), rows, row_ok, seq_len,
    )
    if WHOLE_TILES:
        # every tile in range: no in-range masks (kernels/scan.py: tile_rows)
        row_ok = None
    # values[t+1] moved in registers except in walked segments, as in gae_kernel
    shift_in_registers: tl.constexpr = not WALK
    # DIRECT: the chunks of a whole-row walk recur from their carry (scan_program), strided groups in
    # processing order
    direct: tl.constexpr = direct_scan(DIRECT, VEC, SPLIT, WALK)
    strided: tl.constexpr = in_processing_order_code(STRIDED_GROUPS, direct)
    scan_program(vtrace_load, vtrace_load, vtrace_scan, vtrace_store, args,
                 (HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC, shift_in_registers, strided,
                  WHOLE_TILES),
                 tl.zeros([BLOCK_ROWS], DTYPE), row_tile, order, first, my_chunks, num_chunks, segment_chunks,
                 seq_len, row_ok, status_ptr, aggregate_ptr, prefix_ptr, SPLIT, WALK,
                 PREFETCH, True, BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC, direct, in_processing_order(strided),
                 BEHIND_CONSTS=(HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, LOOK_BEHIND, VEC,
                                shift_in_registers, strided, WHOLE_TILES), LOOK_BEHIND=LOOK_BEHIND)
