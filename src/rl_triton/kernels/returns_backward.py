"""The backward pass of lambda-returns and discounted returns (lambda = 1, no next values).

With g = dL/dG and c = gamma * lambda, the adjoint y[t] = dL/dinputs[t] of the return
recurrence runs forward in time::

    y[t] = g[t] + c * (1 - done[t-1]) * y[t-1],    y[-1] = 0

and each input's gradient is a few flops on y at the same step::

    dL/drewards[t]          = y[t]
    dL/dnext_values[t]      = gamma * (1 - lambda) * (1 - done[t]) * y[t]
    dL/dbootstrap_values[t] = gamma * truncated[t] * y[t]
                              + (t = T-1) * c * (1 - done[T-1]) * y[T-1]     (G[T] = bootstrap_values[T-1])

The kernel scans u[t] = c * (1 - done[t]) * y[t] instead of y, so that every flag it reads belongs
to the step it scans (no shifted flag loads), and takes u[t-1] from ``scan_with_previous``:
y[t] = g[t] + u[t-1].
"""

import triton
import triton.language as tl

from rl_triton.kernels.gae_backward import adjoint_chunk_inputs
from rl_triton.kernels.scan import (
    chunk_carry,
    claim_work,
    last_column,
    scan_with_previous,
    store_tile,
    tile_rows,
)


@triton.jit(do_not_specialize=["spent_words"])
def returns_backward_kernel(
    grad_returns_ptr, terminated_ptr, truncated_ptr,
    grad_rewards_ptr, grad_next_values_ptr, grad_bootstrap_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_chunks, num_row_tiles,
    s_grad_row, s_grad_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time,
    s_grad_rewards_row, s_grad_rewards_time, s_grad_next_row, s_grad_next_time,
    s_grad_boot_row, s_grad_boot_time,
    gamma: tl.float64, lambda_: tl.float64, spent_ptr, spent_words,
    HAS_TRUNCATED: tl.constexpr, REWARDS_GRAD: tl.constexpr, NEXT_VALUES_GRAD: tl.constexpr,
    BOOTSTRAP_GRAD: tl.constexpr,
    SPLIT: tl.constexpr, PREFETCH: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr,
    WINDOW: tl.constexpr, DTYPE: tl.constexpr,
):
    row_tile, order, my_chunks = claim_work(counter_ptr, spent_ptr, spent_words, num_row_tiles, num_chunks, SPLIT)
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    discount = tl.cast(gamma, DTYPE)
    value_weight = tl.cast(gamma * (1.0 - lambda_), DTYPE)
    trace_decay = tl.cast(gamma * lambda_, DTYPE)
    # u[-1] = 0: nothing flows back from before the window
    carry = tl.zeros([BLOCK_ROWS], DTYPE)
    steps, mask, grad, terminated, truncated = adjoint_chunk_inputs(
        grad_returns_ptr, terminated_ptr, truncated_ptr, s_grad_row, s_grad_time, s_term_row, s_term_time,
        s_trunc_row, s_trunc_time, rows, row_ok, order, seq_len, HAS_TRUNCATED, BLOCK_TIME, DTYPE)
    for i in range(my_chunks):
        if PREFETCH:
            # issue the next chunk's loads before this chunk's scan: Triton does not pipeline them itself
            next_inputs = adjoint_chunk_inputs(
                grad_returns_ptr, terminated_ptr, truncated_ptr, s_grad_row, s_grad_time, s_term_row,
                s_term_time, s_trunc_row, s_trunc_time, rows, row_ok, order + i + 1, seq_len, HAS_TRUNCATED,
                BLOCK_TIME, DTYPE)
        not_done = 1.0 - tl.maximum(terminated, truncated)
        decay = trace_decay * not_done
        # the gradient weights, taken now so the flags need not outlive the scan
        next_value_weight = value_weight * not_done
        # interior steps: gamma * truncated; the last step also feeds the carry G[T]
        bootstrap_weight = discount * truncated + tl.where((steps == seq_len - 1)[None, :], decay, 0.0)
        # steps past the end of the sequence are identity steps (0, 1) of the recurrence
        scan_a, scan_b, previous_a, previous_b = scan_with_previous(
            tl.where(mask, decay * grad, 0.0), tl.where(mask, decay, 1.0)
        )
        chunk_a, chunk_b = last_column(scan_a, BLOCK_TIME), last_column(scan_b, BLOCK_TIME)
        if SPLIT:
            carry = chunk_carry(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks,
                                chunk_a, chunk_b, carry, BLOCK_ROWS, WINDOW)
        adjoint = grad + previous_a + previous_b * carry[:, None]  # y[t] = g[t] + u[t-1]
        if REWARDS_GRAD:
            store_tile(grad_rewards_ptr, rows, s_grad_rewards_row, steps, s_grad_rewards_time, adjoint, mask)
        if NEXT_VALUES_GRAD:
            store_tile(grad_next_values_ptr, rows, s_grad_next_row, steps, s_grad_next_time,
                       next_value_weight * adjoint, mask)
        if BOOTSTRAP_GRAD:
            store_tile(grad_bootstrap_ptr, rows, s_grad_boot_row, steps, s_grad_boot_time,
                       bootstrap_weight * adjoint, mask)
        carry = chunk_a + chunk_b * carry
        if PREFETCH:
            steps, mask, grad, terminated, truncated = next_inputs
