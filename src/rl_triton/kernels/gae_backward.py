"""GAE's backward pass: the adjoint recurrence, a forward scan that writes every input gradient.

With g = dL/dA, GAE's adjoint y[t] = dL/ddelta[t] runs forward in time::

    y[t] = g[t] + gamma * lambda * (1 - done[t-1]) * y[t-1],    y[-1] = 0

and each input's gradient is a few flops on y at the same step::

    dL/drewards[t]          = y[t]
    dL/dvalues[t]           = -y[t] + gamma * (1 - terminated[t-1]) * (1 - truncated[t-1]) * y[t-1]
    dL/dbootstrap_values[t] = gamma * (1 - terminated[t]) * y[t]
    dL/dlast_value          = gamma * (1 - terminated[T-1]) * y[T-1]

The kernel scans w[t] = gamma * (1 - done[t]) * y[t] instead of y, so that every flag it reads
belongs to the step it scans (no shifted flag loads), and takes w[t-1] from ``scan_with_previous``:
y[t] = g[t] + lambda * w[t-1], and w[t-1] is the second term of dL/dvalues[t] (flags are 0/1,
so (1 - terminated) * (1 - truncated) = 1 - done).
"""

import triton
import triton.language as tl

from rl_triton.kernels.scan import (
    chunk_carry,
    chunk_steps,
    claim_work,
    last_column,
    load_flag,
    load_tile,
    scan_with_previous,
    store_tile,
    tile_rows,
)


@triton.jit
def adjoint_chunk_inputs(
    grad_ptr, terminated_ptr, truncated_ptr, s_grad_row, s_grad_time, s_term_row, s_term_time,
    s_trunc_row, s_trunc_time, rows, row_ok, chunk, seq_len,
    HAS_TRUNCATED: tl.constexpr, BLOCK_TIME: tl.constexpr, DTYPE: tl.constexpr,
):
    """The loads of one chunk of an adjoint (forward-in-time) scan: steps, mask, dL/doutput and flags.

    Chunks past the last one give an all-false mask, so prefetching "the chunk after the last"
    reads nothing.
    """
    steps = chunk_steps(chunk, BLOCK_TIME, False)
    mask = row_ok[:, None] & (steps < seq_len)[None, :]
    grad = load_tile(grad_ptr, rows, s_grad_row, steps, s_grad_time, mask, 0.0, DTYPE)
    terminated = load_flag(terminated_ptr, rows, s_term_row, steps, s_term_time, mask, DTYPE)
    truncated = tl.zeros_like(terminated)
    if HAS_TRUNCATED:
        truncated = load_flag(truncated_ptr, rows, s_trunc_row, steps, s_trunc_time, mask, DTYPE)
    return steps, mask, grad, terminated, truncated


@triton.jit(do_not_specialize=["spent_words"])
def gae_backward_kernel(
    grad_advantages_ptr, terminated_ptr, truncated_ptr,
    grad_rewards_ptr, grad_values_ptr, grad_bootstrap_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_chunks, num_row_tiles,
    s_grad_row, s_grad_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time,
    s_grad_rewards_row, s_grad_rewards_time, s_grad_values_row, s_grad_values_time,
    s_grad_boot_row, s_grad_boot_time,
    gamma: tl.float64, lambda_: tl.float64, spent_ptr, spent_words,
    HAS_TRUNCATED: tl.constexpr, BOOTSTRAP_GRAD: tl.constexpr,
    REWARDS_GRAD: tl.constexpr, VALUES_GRAD: tl.constexpr,
    SPLIT: tl.constexpr, PREFETCH: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr,
    WINDOW: tl.constexpr, DTYPE: tl.constexpr,
):
    """BOOTSTRAP_GRAD: 0 none, 1 ``last_value`` (one per row), 2 ``bootstrap_values`` (as in kernels/gae.py)."""
    row_tile, order, my_chunks = claim_work(counter_ptr, spent_ptr, spent_words, num_row_tiles, num_chunks, SPLIT)
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    discount = tl.cast(gamma, DTYPE)
    trace = tl.cast(lambda_, DTYPE)
    trace_decay = tl.cast(gamma * lambda_, DTYPE)
    # w[-1] = 0: nothing flows back from before the window
    carry = tl.zeros([BLOCK_ROWS], DTYPE)
    steps, mask, grad, terminated, truncated = adjoint_chunk_inputs(
        grad_advantages_ptr, terminated_ptr, truncated_ptr, s_grad_row, s_grad_time, s_term_row, s_term_time,
        s_trunc_row, s_trunc_time, rows, row_ok, order, seq_len, HAS_TRUNCATED, BLOCK_TIME, DTYPE)
    for i in range(my_chunks):
        if PREFETCH:
            # issue the next chunk's loads before this chunk's scan: Triton does not pipeline them itself
            next_inputs = adjoint_chunk_inputs(
                grad_advantages_ptr, terminated_ptr, truncated_ptr, s_grad_row, s_grad_time, s_term_row,
                s_term_time, s_trunc_row, s_trunc_time, rows, row_ok, order + i + 1, seq_len, HAS_TRUNCATED,
                BLOCK_TIME, DTYPE)
        not_done = 1.0 - tl.maximum(terminated, truncated)
        # the gradient weight of bootstrap values, taken now so the flags need not outlive the scan
        bootstrap_weight = discount * (1.0 - terminated)
        # steps past the end of the sequence are identity steps (0, 1) of the recurrence
        scan_a, scan_b, previous_a, previous_b = scan_with_previous(
            tl.where(mask, discount * not_done * grad, 0.0), tl.where(mask, trace_decay * not_done, 1.0)
        )
        chunk_a, chunk_b = last_column(scan_a, BLOCK_TIME), last_column(scan_b, BLOCK_TIME)
        if SPLIT:
            carry = chunk_carry(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks,
                                chunk_a, chunk_b, carry, BLOCK_ROWS, WINDOW)
        previous_weighted = previous_a + previous_b * carry[:, None]  # w[t-1]
        adjoint = grad + trace * previous_weighted  # y[t]
        if REWARDS_GRAD:
            store_tile(grad_rewards_ptr, rows, s_grad_rewards_row, steps, s_grad_rewards_time, adjoint, mask)
        if VALUES_GRAD:
            store_tile(grad_values_ptr, rows, s_grad_values_row, steps, s_grad_values_time,
                       previous_weighted - adjoint, mask)
        if BOOTSTRAP_GRAD == 2:
            store_tile(grad_bootstrap_ptr, rows, s_grad_boot_row, steps, s_grad_boot_time,
                       bootstrap_weight * adjoint, mask)
        if BOOTSTRAP_GRAD == 1:
            # last_value is one value per row: only the lane of step T-1 writes it
            is_last = mask & (steps == seq_len - 1)[None, :]
            store_tile(grad_bootstrap_ptr, rows, s_grad_boot_row, tl.zeros_like(steps), 0,
                       bootstrap_weight * adjoint, is_last)
        carry = chunk_a + chunk_b * carry
        if PREFETCH:
            steps, mask, grad, terminated, truncated = next_inputs
