"""The one scan engine: first-order linear recurrences over [rows, time] tiles.

Every estimator is ``x[t] = a[t] + b[t] * x[t+1]`` (backward) or ``x[t] = a[t] + b[t] * x[t-1]``
(forward). A program owns ``BLOCK_ROWS`` rows and walks time in chunks of ``BLOCK_TIME`` steps
(from the end for backward recurrences), scanning each chunk in registers and carrying ``x``
across chunk edges. Tiles are laid out in processing order (time-reversed for backward
recurrences), so one forward scan and one composition rule serve both directions.

When rows are too few to fill the GPU, time is split too: each program takes one chunk
(claimed in order from an atomic ticket counter, so every chunk it waits on belongs to a
program that has already started), publishes the chunk's aggregate map ``x_in -> x_out``,
looks back over its predecessors' aggregates and inclusive prefixes (a window at a time) for
its carry, publishes its own inclusive prefix and finishes. One pass over the data.

A program that walks several chunks (``PREFETCH``) issues the loads of chunk ``i + 1`` before it
scans chunk ``i``: Triton does not pipeline loads that feed registers, and without this every
program waits for its loads, then computes, in lock step with all others (measured on an H200:
GAE at 4096x4096 went from 42% to 68% of the copy bandwidth).
"""

import triton
import triton.language as tl

# status of a published chunk in the look-back workspace
_AGGREGATE_READY = tl.constexpr(1)
_PREFIX_READY = tl.constexpr(2)


@triton.jit
def combine(a_first, b_first, a_second, b_second):
    # composes two affine steps x -> a + b*x, applying `first` (earlier in processing order) then `second`
    return a_second + b_second * a_first, b_first * b_second


@triton.jit
def combine_with_previous(a_first, b_first, pa_first, pb_first, a_second, b_second, pa_second, pb_second):
    # carries two maps per segment: the whole segment, and the segment without its last step; the
    # second one evaluated at the carry gives x one step earlier in processing order beside x.
    return (
        a_second + b_second * a_first,
        b_first * b_second,
        pa_second + pb_second * a_first,
        b_first * pb_second,
    )


@triton.jit
def chunk_steps(chunk, BLOCK_TIME: tl.constexpr, BACKWARD: tl.constexpr):
    """int64 time indices of a chunk in processing order: descending for backward recurrences.

    Backward recurrences are scanned forward over time-reversed tiles: Triton's reverse scan is
    markedly slower on GPUs than a forward scan over the same data.
    """
    lanes = tl.arange(0, BLOCK_TIME)
    if BACKWARD:
        lanes = BLOCK_TIME - 1 - lanes
    return tl.cast(chunk, tl.int64) * BLOCK_TIME + lanes


@triton.jit
def chunk_window(position, num_chunks, seq_len, row_ok, BLOCK_TIME: tl.constexpr, BACKWARD: tl.constexpr):
    """Time indices and in-range mask of the chunk at ``position`` in processing order.

    Positions past the last chunk give an all-false mask, so the prefetch of "the chunk after the
    last one" reads nothing.
    """
    if BACKWARD:
        chunk = num_chunks - 1 - position
    else:
        chunk = position
    steps = chunk_steps(chunk, BLOCK_TIME, BACKWARD)
    mask = row_ok[:, None] & ((steps >= 0) & (steps < seq_len))[None, :]
    return steps, mask


@triton.jit
def scan(a, b):
    """Inclusive scan along processing order: x[j] = A[j] + B[j] * (carry into the chunk)."""
    return tl.associative_scan((a, b), 1, combine)


@triton.jit
def scan_with_previous(a, b):
    """As scan, plus (PA, PB) with x[j-1] = PA[j] + PB[j] * (carry into the chunk)."""
    pa = tl.zeros_like(a)
    pb = tl.full(b.shape, 1, b.dtype)
    return tl.associative_scan((a, b, pa, pb), 1, combine_with_previous)


@triton.jit
def last_column(x, BLOCK_TIME: tl.constexpr):
    """x[:, BLOCK_TIME - 1] of a [rows, time] tile, the last step in processing order."""
    lanes = tl.arange(0, BLOCK_TIME)
    return tl.sum(tl.where(lanes[None, :] == BLOCK_TIME - 1, x, tl.zeros_like(x)), axis=1)


@triton.jit
def claim_work(counter_ptr, num_row_tiles, num_chunks, SPLIT: tl.constexpr):
    """(row tile, position in processing order of the first chunk, number of chunks) of this program."""
    if SPLIT:
        ticket = tl.atomic_add(counter_ptr, 1)
        return ticket % num_row_tiles, ticket // num_row_tiles, 1
    else:
        return tl.program_id(0), 0, num_chunks


@triton.jit
def chunk_carry(
    status_ptr,
    aggregate_ptr,
    prefix_ptr,
    row_tile,
    order,
    num_chunks,
    aggregate_a,
    aggregate_b,
    boundary,
    BLOCK_ROWS: tl.constexpr,
    WINDOW: tl.constexpr,
):
    """Carry into chunk ``order`` (in processing order) of ``row_tile``, by decoupled look-back.

    ``aggregate_a + aggregate_b * x`` maps the carry into this chunk to the carry out of it;
    ``boundary`` is the carry into chunk 0. Publishes the aggregate, then the inclusive prefix.
    """
    lanes = tl.arange(0, BLOCK_ROWS)
    slot = row_tile * num_chunks + order
    if order == 0:
        carry = boundary
    else:
        tl.store(aggregate_ptr + (2 * slot) * BLOCK_ROWS + lanes, aggregate_a)
        tl.store(aggregate_ptr + (2 * slot + 1) * BLOCK_ROWS + lanes, aggregate_b)
        tl.debug_barrier()
        tl.atomic_xchg(status_ptr + slot, _AGGREGATE_READY, sem="release")

        # map from the carry into the window just looked at to the carry into this chunk
        done_a = tl.zeros_like(aggregate_a)
        done_b = tl.full(aggregate_b.shape, 1, aggregate_b.dtype)
        carry = boundary
        window = tl.arange(0, WINDOW)
        upper = order
        while upper > 0:
            position = upper - WINDOW + window  # [WINDOW], ascending
            valid = position >= 0
            status = tl.atomic_add(status_ptr + row_tile * num_chunks + position, 0, mask=valid, sem="acquire")
            status = tl.where(valid, status, 0)
            nearest_prefix = tl.max(tl.where(status == _PREFIX_READY, position, -1), axis=0)
            between = valid & (position > nearest_prefix)
            ready = tl.min(tl.where(between, status, _PREFIX_READY), axis=0) >= _AGGREGATE_READY
            # position 0 only ever publishes a prefix, so an empty window edge means "wait"
            ready = ready & ((nearest_prefix >= 0) | (upper > WINDOW))
            if ready:
                pair = (row_tile * num_chunks + position)[:, None] * 2
                pair_mask = between[:, None] & (lanes[None, :] < BLOCK_ROWS)
                step_a = tl.load(aggregate_ptr + pair * BLOCK_ROWS + lanes[None, :], mask=pair_mask, other=0.0,
                                 volatile=True)
                step_b = tl.load(aggregate_ptr + (pair + 1) * BLOCK_ROWS + lanes[None, :], mask=pair_mask,
                                 other=1.0, volatile=True)
                window_a, window_b = tl.associative_scan((step_a, step_b), 0, combine)
                last = (window == WINDOW - 1)[:, None]
                window_a = tl.sum(tl.where(last, window_a, tl.zeros_like(window_a)), axis=0)
                window_b = tl.sum(tl.where(last, window_b, tl.zeros_like(window_b)), axis=0)
                done_a, done_b = window_a * done_b + done_a, window_b * done_b
                if nearest_prefix >= 0:
                    prefix_slot = row_tile * num_chunks + nearest_prefix
                    prefix = tl.load(prefix_ptr + prefix_slot * BLOCK_ROWS + lanes, volatile=True)
                    carry = done_a + done_b * prefix
                    upper = 0
                else:
                    upper = upper - WINDOW

    tl.store(prefix_ptr + slot * BLOCK_ROWS + lanes, aggregate_a + aggregate_b * carry)
    tl.debug_barrier()
    tl.atomic_xchg(status_ptr + slot, _PREFIX_READY, sem="release")
    return carry


@triton.jit
def tile_rows(row_tile, num_rows, BLOCK_ROWS: tl.constexpr):
    """int64 row indices of a row tile and their in-range mask."""
    rows = row_tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    return rows.to(tl.int64), rows < num_rows


@triton.jit
def load_tile(ptr, rows, row_stride, steps, time_stride, mask, other, DTYPE: tl.constexpr):
    """A [rows, time] tile of any strided layout, converted to the compute dtype."""
    values = tl.load(ptr + rows[:, None] * row_stride + steps[None, :] * time_stride, mask=mask, other=other)
    return values.to(DTYPE)


@triton.jit
def load_flag(ptr, rows, row_stride, steps, time_stride, mask, DTYPE: tl.constexpr):
    """A flag tile (bool, integer or float storage; any non-zero value is set) as 0/1 in DTYPE."""
    values = tl.load(ptr + rows[:, None] * row_stride + steps[None, :] * time_stride, mask=mask, other=0)
    return (values != 0).to(DTYPE)


@triton.jit
def store_tile(ptr, rows, row_stride, steps, time_stride, values, mask):
    tl.store(ptr + rows[:, None] * row_stride + steps[None, :] * time_stride,
             values.to(ptr.dtype.element_ty), mask=mask)
