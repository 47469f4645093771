"""Lambda-returns and discounted returns (one kernel: discounted returns are lambda = 1).

Eligibility traces are the episodic forward scan of ``kernels/prefix_sum.py`` with decay
gamma * lambda.
"""

import triton
import triton.language as tl

from rl_triton.kernels.scan import (
    carried,
    claim_segment,
    direct_scan,
    in_processing_order,
    in_processing_order_code,
    in_range,
    load_chunk,
    load_episode_flags,
    scan_chunk,
    scan_program,
    store_chunk,
    tile_rows,
)


@triton.jit
def returns_load(args, CONSTS: tl.constexpr, chunk, steps):
    """The loads of one chunk (``kernels/scan.py``: ``scan_program``); tensors a call does not pass are zeros."""
    HAS_NEXT_VALUES: tl.constexpr = CONSTS[0]
    HAS_TRUNCATED: tl.constexpr = CONSTS[1]
    HAS_BOOTSTRAP: tl.constexpr = CONSTS[2]
    DTYPE: tl.constexpr = CONSTS[3]
    BLOCK_ROWS: tl.constexpr = CONSTS[4]
    BLOCK_TIME: tl.constexpr = CONSTS[5]
    VEC: tl.constexpr = CONSTS[6]
    STRIDED: tl.constexpr = CONSTS[7]
    pointers, strides, _, rows, row_ok, seq_len = args
    WHOLE_TILES: tl.constexpr = CONSTS[8]
    if WHOLE_TILES:
        # no in-range masks (kernels/scan.py: tile_rows)
        row_ok = None
    rewards_ptr, next_values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, _ = pointers
    (s_rewards_row, s_rewards_time, s_next_row, s_next_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time,
     s_boot_row, s_boot_time, _, _) = strides
    rewards = load_chunk(rewards_ptr, rows, row_ok, s_rewards_row, chunk, s_rewards_time, seq_len, 0.0, DTYPE,
                         BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED=STRIDED)
    terminated, truncated = load_episode_flags(terminated_ptr, truncated_ptr, rows, row_ok, s_term_row, s_term_time,
                                               s_trunc_row, s_trunc_time, chunk, seq_len, HAS_TRUNCATED, DTYPE,
                                               BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED)
    next_value = tl.zeros_like(rewards)
    if HAS_NEXT_VALUES:
        next_value = load_chunk(next_values_ptr, rows, row_ok, s_next_row, chunk, s_next_time, seq_len, 0.0, DTYPE,
                                BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED=STRIDED)
    bootstrap = tl.zeros_like(rewards)
    if HAS_TRUNCATED and HAS_BOOTSTRAP:
        bootstrap = load_chunk(bootstrap_ptr, rows, row_ok, s_boot_row, chunk, s_boot_time, seq_len, 0.0, DTYPE,
                               BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED=STRIDED)
    return rewards, terminated, truncated, next_value, bootstrap


@triton.jit
def returns_scan(args, CONSTS: tl.constexpr, inputs, mask, carry):
    """Per-step terms and decays of one chunk, scanned: (A, B) with G = A + B * carry in."""
    HAS_NEXT_VALUES: tl.constexpr = CONSTS[0]
    HAS_TRUNCATED: tl.constexpr = CONSTS[1]
    HAS_BOOTSTRAP: tl.constexpr = CONSTS[2]
    VEC: tl.constexpr = CONSTS[6]
    BACKWARD_LANES: tl.constexpr = not in_processing_order(CONSTS[7])
    WHOLE_TILES: tl.constexpr = CONSTS[8]
    discount, value_weight, trace_decay = args[2]
    terms, terminated, truncated, next_value, bootstrap = inputs
    not_done = 1.0 - tl.maximum(terminated, truncated)
    if HAS_NEXT_VALUES:
        terms += value_weight * not_done * next_value
    if HAS_TRUNCATED and HAS_BOOTSTRAP:
        terms += discount * truncated * bootstrap
    return scan_chunk(in_range(mask, terms, 0.0, WHOLE_TILES), in_range(mask, trace_decay * not_done, 1.0, WHOLE_TILES),
                      BACKWARD_LANES, VEC, carry)


@triton.jit
def returns_store(args, CONSTS: tl.constexpr, inputs, scanned, carry, chunk):
    """The returns of one chunk, from the carry into it."""
    BLOCK_ROWS: tl.constexpr = CONSTS[4]
    BLOCK_TIME: tl.constexpr = CONSTS[5]
    VEC: tl.constexpr = CONSTS[6]
    STRIDED: tl.constexpr = CONSTS[7]
    pointers, strides, _, rows, row_ok, seq_len = args
    WHOLE_TILES: tl.constexpr = CONSTS[8]
    if WHOLE_TILES:
        # no in-range masks (kernels/scan.py: tile_rows)
        row_ok = None
    scan_a, scan_b = scanned
    store_chunk(pointers[5], rows, row_ok, strides[10], chunk, strides[11], seq_len,
                carried(scan_a, scan_b, carry, VEC), BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED)


@triton.jit(do_not_specialize=["spent_words"])
def returns_kernel(
    rewards_ptr, next_values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, returns_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_chunks, num_row_tiles, segment_chunks,
    s_rewards_row, s_rewards_time, s_next_row, s_next_time, s_term_row, s_term_time,
    s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, s_out_row, s_out_time,
    gamma: tl.float64, lambda_: tl.float64, spent_ptr, spent_words,
    HAS_NEXT_VALUES: tl.constexpr, HAS_TRUNCATED: tl.constexpr, HAS_BOOTSTRAP: tl.constexpr,
    SPLIT: tl.constexpr, WALK: tl.constexpr, PREFETCH: tl.constexpr, BLOCK_ROWS: tl.constexpr,
    BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr, DTYPE: tl.constexpr, VEC: tl.constexpr,
    STRIDED_GROUPS: tl.constexpr = False, DIRECT: tl.constexpr = False,
    WHOLE_TILES: tl.constexpr = False, LOOK_BEHIND: tl.constexpr = 0,
):
    row_tile, order, first, my_chunks = claim_segment(counter_ptr, spent_ptr, spent_words, num_row_tiles, num_chunks,
                                                      segment_chunks, SPLIT)
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    # G[T] = bootstrap_values[:, T-1]; a walked segment other than the last in time starts from zero
    carry = tl.zeros([BLOCK_ROWS], DTYPE)
    if HAS_BOOTSTRAP:
        last = rows * s_boot_row + tl.cast(seq_len - 1, tl.int64) * s_boot_time
        carry = tl.load(bootstrap_ptr + last, mask=row_ok & (order == 0), other=0.0).to(DTYPE)
    args = (
        (rewards_ptr, next_values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, returns_ptr),
        (s_rewards_row, s_rewards_time, s_next_row, s_next_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time,
         s_boot_row, s_boot_time, s_out_row, s_out_time),
        (tl.cast(gamma, DTYPE), tl.cast(gamma * (1.0 - lambda_), DTYPE), tl.cast(gamma * lambda_, DTYPE)),
        rows, row_ok, seq_len,
    )
    if WHOLE_TILES:
        # every tile in range: no in-range masks (kernels/scan.py: tile_rows)
        row_ok = None
    # DIRECT: the chunks of a whole-row walk recur from their carry (scan_program), strided groups in
    # processing order
    direct: tl.constexpr = direct_scan(DIRECT, VEC, SPLIT, WALK)
    strided: tl.constexpr = in_processing_order_code(STRIDED_GROUPS, direct)
    scan_program(returns_load, returns_load, returns_scan, returns_store, args,
                 (HAS_NEXT_VALUES, HAS_TRUNCATED, HAS_BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC, strided,
                  WHOLE_TILES),
                 carry, row_tile, order, first, my_chunks, num_chunks, segment_chunks, seq_len,
                 row_ok, status_ptr, aggregate_ptr, prefix_ptr, SPLIT, WALK, PREFETCH, True,
                 BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC, direct, in_processing_order(strided),
                 BEHIND_CONSTS=(HAS_NEXT_VALUES, HAS_TRUNCATED, HAS_BOOTSTRAP, DTYPE, BLOCK_ROWS, LOOK_BEHIND, VEC,
                                strided, WHOLE_TILES), LOOK_BEHIND=LOOK_BEHIND)
