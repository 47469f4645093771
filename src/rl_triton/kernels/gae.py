"""GAE: prologue (TD errors and decays) and epilogue (advantages) around the backward scan."""

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
    per_step,
    scan_chunk,
    scan_program,
    shifted_chunk,
    store_chunk,
    tile_rows,
)

# how bootstrap values arrive: none, one per row (last_value), or a full [rows, T] tensor
BOOTSTRAP_NONE = 0
BOOTSTRAP_LAST = 1
BOOTSTRAP_FULL = 2


@triton.jit
def next_state_value(
    value, values_ptr, s_values_row, s_values_time, truncated, bootstrap_ptr, s_boot_row, s_boot_time, last_value,
    rows, row_ok, chunk, steps, seq_len, HAS_TRUNCATED: tl.constexpr, BOOTSTRAP: tl.constexpr, DTYPE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr, SHIFT_IN_REGISTERS: tl.constexpr,
    STRIDED: tl.constexpr,
):
    """v_next[t] = values[t+1] * (1 - truncated[t]) + bootstrap_values[t], values[T] := 0.

    ``value`` is the chunk's values[t]. With SHIFT_IN_REGISTERS, grouped tiles move all but one step
    of each group in registers (``shifted_chunk``) instead of loading the tile again one step later,
    which no vector load can do; walked segments load it shifted (see ``gae_kernel``).
    """
    # Without truncations, last_value is what the step past the row's end reads: the masked load's other
    # value, instead of a comparison and a select for every step of the tile (4 instructions a step). With
    # them it is added after the truncation factor, which does not apply to it. The load converts its other
    # value to the values' type, so half-precision values take it only from last values of their own type;
    # other last values (float32 with bf16 values, say) would be rounded, so they are added with the select.
    LAST_AS_OTHER: tl.constexpr = BOOTSTRAP == 1 and not HAS_TRUNCATED and (
        DTYPE == values_ptr.dtype.element_ty or bootstrap_ptr.dtype.element_ty == values_ptr.dtype.element_ty)
    if LAST_AS_OTHER:
        past_end = per_step(last_value, VEC)
    else:
        past_end = 0.0
    if SHIFT_IN_REGISTERS:
        value_next = shifted_chunk(value, values_ptr, rows, row_ok, s_values_row, chunk, s_values_time, seq_len,
                                   past_end, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC, True, SHIFT=1, STRIDED=STRIDED)
    else:
        value_next = load_chunk(values_ptr, rows, row_ok, s_values_row, chunk, s_values_time, seq_len, past_end,
                                DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC, True, SHIFT=1, STRIDED=STRIDED)
    if HAS_TRUNCATED:
        value_next = value_next * (1.0 - truncated)
    if BOOTSTRAP == 2:
        value_next += load_chunk(bootstrap_ptr, rows, row_ok, s_boot_row, chunk, s_boot_time, seq_len, 0.0, DTYPE,
                                 BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED=STRIDED)
    if BOOTSTRAP == 1 and not LAST_AS_OTHER:
        is_last = tl.expand_dims(steps == seq_len - 1, 0)
        value_next += tl.where(is_last, per_step(last_value, VEC), tl.zeros_like(value_next))
    return value_next


@triton.jit
def gae_chunk_inputs(
    rewards_ptr, values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, last_value,
    s_rewards_row, s_rewards_time, s_values_row, s_values_time, s_term_row, s_term_time,
    s_trunc_row, s_trunc_time, s_boot_row, s_boot_time,
    rows, row_ok, chunk, steps, seq_len, HAS_TRUNCATED: tl.constexpr, BOOTSTRAP: tl.constexpr, DTYPE: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr, SHIFT_IN_REGISTERS: tl.constexpr,
    STRIDED: tl.constexpr,
):
    """The loads of one chunk: rewards, values, flags and the next state's value."""
    reward = load_chunk(rewards_ptr, rows, row_ok, s_rewards_row, chunk, s_rewards_time, seq_len, 0.0, DTYPE,
                        BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED=STRIDED)
    value = load_chunk(values_ptr, rows, row_ok, s_values_row, chunk, s_values_time, seq_len, 0.0, DTYPE,
                       BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED=STRIDED)
    terminated, truncated = load_episode_flags(terminated_ptr, truncated_ptr, rows, row_ok, s_term_row, s_term_time,
                                               s_trunc_row, s_trunc_time, chunk, seq_len, HAS_TRUNCATED, DTYPE,
                                               BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED)
    value_next = next_state_value(
        value, values_ptr, s_values_row, s_values_time, truncated, bootstrap_ptr, s_boot_row, s_boot_time,
        last_value, rows, row_ok, chunk, steps, seq_len, HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC,
        SHIFT_IN_REGISTERS, STRIDED,
    )
    return reward, value, terminated, truncated, value_next


@triton.jit
def gae_load(args, CONSTS: tl.constexpr, chunk, steps):
    """``gae_chunk_inputs`` of one chunk (``kernels/scan.py``: ``scan_program``)."""
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
    rewards_ptr, values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, _ = pointers
    (s_rewards_row, s_rewards_time, s_values_row, s_values_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time,
     s_boot_row, s_boot_time, _, _) = strides
    return gae_chunk_inputs(
        rewards_ptr, values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, last_value,
        s_rewards_row, s_rewards_time, s_values_row, s_values_time, s_term_row, s_term_time,
        s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, rows, row_ok, chunk, steps, seq_len,
        HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC, SHIFT_IN_REGISTERS, STRIDED)


@triton.jit
def gae_scan(args, CONSTS: tl.constexpr, inputs, mask, carry):
    """TD errors and decays of one chunk, scanned: (A, B) with advantage = A + B * carry in."""
    VEC: tl.constexpr = CONSTS[5]
    BACKWARD_LANES: tl.constexpr = not in_processing_order(CONSTS[7])
    WHOLE_TILES: tl.constexpr = CONSTS[8]
    discount, trace_decay = args[3]
    HAS_TRUNCATED: tl.constexpr = CONSTS[0]
    reward, value, terminated, truncated, value_next = inputs
    if HAS_TRUNCATED:
        delta = reward + discount * (1.0 - terminated) * value_next - value
        decay = trace_decay * (1.0 - tl.maximum(terminated, truncated))
    else:
        # discount * (1 - terminated) and trace_decay * (1 - terminated) of 0/1 flags as selects on the
        # flag (the same values: the constants are finite), one instruction each instead of two or three.
        # Measured on an H200, % of the copy ceiling, products -> selects with last_value as the load's
        # other value (benchmarks/results/h200-2026-12-02-run25-selects-ab.txt, two interleaved runs):
        # 4096x4096 92.7 / 92.1 -> 95.1 / 96.2, 8x2^21 78.8 / 78.5 -> 81.4 / 82.5, bf16 values with uint8
        # flags 72.4 / 71.7 -> 78.5 / 78.3 and 45.0 / 44.6 -> 48.2 / 47.7, stored [T, N] 57.9 / 57.8 ->
        # 69.1 / 70.5 and 67.0 / 70.2 -> 78.2 / 78.6 (16384x512). With truncations the selects read
        # 4-5 points lower in two cells (bf16 at 8x2^21, [T, N] at 16384x512), so those keep the products.
        delta = reward + tl.where(terminated != 0, 0.0, discount) * value_next - value
        decay = tl.where(terminated != 0, 0.0, trace_decay)
    # steps past the end of the sequence are identity steps (0, 1) of the recurrence
    return scan_chunk(in_range(mask, delta, 0.0, WHOLE_TILES), in_range(mask, decay, 1.0, WHOLE_TILES), BACKWARD_LANES,
                      VEC, carry)


@triton.jit
def gae_store(args, CONSTS: tl.constexpr, inputs, scanned, carry, chunk):
    """The advantages of one chunk, from the carry into it."""
    BLOCK_ROWS: tl.constexpr = CONSTS[3]
    BLOCK_TIME: tl.constexpr = CONSTS[4]
    VEC: tl.constexpr = CONSTS[5]
    STRIDED: tl.constexpr = CONSTS[7]
    pointers, strides, _, _, rows, row_ok, seq_len = args
    WHOLE_TILES: tl.constexpr = CONSTS[8]
    if WHOLE_TILES:
        # no in-range masks (kernels/scan.py: tile_rows)
        row_ok = None
    scan_a, scan_b = scanned
    store_chunk(pointers[5], rows, row_ok, strides[10], chunk, strides[11], seq_len,
                carried(scan_a, scan_b, carry, VEC), BLOCK_ROWS, BLOCK_TIME, VEC, True, STRIDED)


@triton.jit(do_not_specialize=["spent_words"])
def gae_kernel(
    rewards_ptr, values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, advantages_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_chunks, num_row_tiles, segment_chunks,
    s_rewards_row, s_rewards_time, s_values_row, s_values_time, s_term_row, s_term_time,
    s_trunc_row, s_trunc_time, s_boot_row, s_boot_time, s_out_row, s_out_time,
    gamma: tl.float64, lambda_: tl.float64, spent_ptr, spent_words,
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
        (rewards_ptr, values_ptr, terminated_ptr, truncated_ptr, bootstrap_ptr, advantages_ptr),
        (s_rewards_row, s_rewards_time, s_values_row, s_values_time, s_term_row, s_term_time, s_trunc_row,
         s_trunc_time, s_boot_row, s_boot_time, s_out_row, s_out_time),
        last_value, (tl.cast(gamma, DTYPE), tl.cast(gamma * lambda_, DTYPE)), rows, row_ok, seq_len,
    )
    if WHOLE_TILES:
        # every tile in range: no in-range masks (kernels/scan.py: tile_rows)
        row_ok = None
    # values[t+1] moved in registers, except in walked segments. Measured on an H200, % of the copy
    # ceiling, loaded shifted -> moved (-run13-shift-ab.txt, two runs each): GAE 4096x4096 85.9 / 85.2 ->
    # 89.5 / 92.6, with truncations 85.1 / 85.7 -> 94.7 / 97.6, bf16 values with uint8 flags 16384x512
    # 56.3 / 57.2 -> 62.7 / 63.1; V-trace walks at 8x2^21 84.7 / 85.0 -> 79.2 / 77.6.
    shift_in_registers: tl.constexpr = not WALK
    # DIRECT: the chunks of a whole-row walk recur from their carry (scan_program), strided groups in
    # processing order
    direct: tl.constexpr = direct_scan(DIRECT, VEC, SPLIT, WALK)
    strided: tl.constexpr = in_processing_order_code(STRIDED_GROUPS, direct)
    scan_program(gae_load, gae_load, gae_scan, gae_store, args,
                 (HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC, shift_in_registers, strided,
                  WHOLE_TILES),
                 tl.zeros([BLOCK_ROWS], DTYPE), row_tile, order, first, my_chunks, num_chunks, segment_chunks,
                 seq_len, row_ok, status_ptr, aggregate_ptr, prefix_ptr, SPLIT, WALK,
                 PREFETCH, True, BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC, direct, in_processing_order(strided),
                 BEHIND_CONSTS=(HAS_TRUNCATED, BOOTSTRAP, DTYPE, BLOCK_ROWS, LOOK_BEHIND, VEC,
                                shift_in_registers, strided, WHOLE_TILES), LOOK_BEHIND=LOOK_BEHIND)
