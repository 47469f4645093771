"""A plain first-order linear recurrence over given coefficients: the differentiable path's scan.

x[t] = a[t] + b[t] * x[t+1] (backward, x[T] = carry) or x[t] = a[t] + b[t] * x[t-1] (forward,
x[-1] = carry). Autograd composes the estimators from elementwise PyTorch and this kernel, and
runs it in the opposite direction for the adjoint.
"""

import triton
import triton.language as tl

from rl_triton.kernels.scan import (
    chunk_carry,
    chunk_window,
    claim_work,
    last_step,
    load_chunk,
    per_step,
    scan_chunk,
    store_chunk,
    tile_rows,
)


@triton.jit(do_not_specialize=["spent_words"])
def linear_recurrence_kernel(
    a_ptr, b_ptr, carry_ptr, out_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_chunks, num_row_tiles,
    s_a_row, s_a_time, s_b_row, s_b_time, s_carry_row, s_out_row, s_out_time, spent_ptr, spent_words,
    HAS_CARRY: tl.constexpr, BACKWARD: tl.constexpr, SPLIT: tl.constexpr, PREFETCH: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr, DTYPE: tl.constexpr,
    VEC: tl.constexpr,
):
    row_tile, order, my_chunks = claim_work(counter_ptr, spent_ptr, spent_words, num_row_tiles, num_chunks, SPLIT)
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    carry = tl.zeros([BLOCK_ROWS], DTYPE)
    if HAS_CARRY:
        carry = tl.load(carry_ptr + rows * s_carry_row, mask=row_ok, other=0.0).to(DTYPE)
    chunk, _, _ = chunk_window(order, num_chunks, seq_len, row_ok, BLOCK_TIME, BACKWARD)
    a = load_chunk(a_ptr, rows, row_ok, s_a_row, chunk, s_a_time, seq_len, 0.0, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC,
                   BACKWARD)
    b = load_chunk(b_ptr, rows, row_ok, s_b_row, chunk, s_b_time, seq_len, 1.0, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC,
                   BACKWARD)
    for i in range(my_chunks):
        if PREFETCH:
            next_chunk, _, _ = chunk_window(order + i + 1, num_chunks, seq_len, row_ok, BLOCK_TIME, BACKWARD)
            next_a = load_chunk(a_ptr, rows, row_ok, s_a_row, next_chunk, s_a_time, seq_len, 0.0, DTYPE, BLOCK_ROWS,
                                BLOCK_TIME, VEC, BACKWARD)
            next_b = load_chunk(b_ptr, rows, row_ok, s_b_row, next_chunk, s_b_time, seq_len, 1.0, DTYPE, BLOCK_ROWS,
                                BLOCK_TIME, VEC, BACKWARD)
        scan_a, scan_b = scan_chunk(a, b, BACKWARD, VEC)
        if SPLIT:
            carry = chunk_carry(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks,
                                last_step(scan_a, BLOCK_TIME, BACKWARD, VEC), last_step(scan_b, BLOCK_TIME, BACKWARD, VEC), carry,
                                BLOCK_ROWS, WINDOW)
        x = scan_a + scan_b * per_step(carry, VEC)
        store_chunk(out_ptr, rows, row_ok, s_out_row, chunk, s_out_time, seq_len, x, BLOCK_ROWS, BLOCK_TIME, VEC,
                    BACKWARD)
        carry = last_step(x, BLOCK_TIME, BACKWARD, VEC)
        if PREFETCH:
            a, b, chunk = next_a, next_b, next_chunk
