"""The one scan engine: first-order linear recurrences over [rows, time] tiles.

Every estimator is ``x[t] = a[t] + b[t] * x[t+1]`` (backward) or ``x[t] = a[t] + b[t] * x[t-1]``
(forward). A program owns ``BLOCK_ROWS`` rows and walks time in chunks of ``BLOCK_TIME`` steps
(from the end for backward recurrences), scanning each chunk in registers and carrying ``x``
across chunk edges. Tiles are laid out in processing order (time-reversed for backward
recurrences), so one forward scan and one composition rule serve both directions.

Batch-major tiles are grouped (VEC > 1): ``[rows, groups, VEC]``, groups in processing order, each
VEC contiguous steps in memory order that one thread holds (16 bytes, loaded as one vector). A
chunk is scanned in two levels (``scan_chunk``): each thread's group in registers, by pairs split
and joined in place, in either direction; then the groups' maps across threads. With one step per
thread position (VEC = 1) Triton's scan runs a warp scan for every step a thread holds: on an
H200, walked GAE rows (8x2^21) read 58% of the copy bandwidth that way, 69% grouped with the same
plan and 74% with the plan that the grouped kernel's fewer registers allow. Time-major tiles, whose
rows are contiguous, are grouped too where the launcher asks (STRIDED_GROUPS): each step of a group
is loaded across the tile's rows (``strided_offsets``), and the groups are scanned the same way.

When rows are too few to fill the GPU, time is split too: each program takes one chunk
(claimed in order from an atomic ticket counter, so every chunk it waits on belongs to a
program that has already started), publishes the chunk's aggregate map ``x_in -> x_out``,
looks back over its predecessors' aggregates and inclusive prefixes (a window at a time) for
its carry, publishes its own inclusive prefix and finishes. One pass over the data. A chunk in which
an episode ends has a map that ignores its carry, so it publishes its prefix at once and the look-back
of the chunks after it stops there, once every chunk before them has published (``chunk_carry``).

Kernels that can walk (GAE, V-trace, returns, episodic scans, Retrace's scan) split long rows into
segments of several chunks instead, about one per resident program: a program walks its segment from a zero
carry, publishes the segment's map, looks back once, then redoes the segment's first chunks with
the true carry until the carry out of a redone chunk equals the one its walk used (after an
episode end, or once the decay has rounded the difference away), so every output is what a walk
from the true carry would give. The redo is one chunk on typical data and the whole segment when
nothing resets and the decay stays near one. With a look-behind (LOOK_BEHIND > 0, which default plans take
but Retrace's), a segment first scans the steps just before it; where they end an episode in every row,
their carry out is its true carry, so it walks from it, publishes at once and neither waits nor redoes, and
the last segment of its row tile to finish carries any NaN or inf on past it (``finish_walk_and_mend``).

A program that walks whole rows knows the carry into each chunk before it scans it, so grouped tiles
may scan directly (``recur_in_thread``: each group recurs from its carry, one multiply-add a step)
instead of building every step's map; the plans take that where it was measured faster.

Where a call's rows fill whole row tiles and its steps whole chunks, a kernel told WHOLE_TILES reads,
scans and writes its tiles without in-range masks (``tile_rows``); the plans take that where it was
measured faster.

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
# an aggregate with a map that ignores the carry (b == 0 in every row), its value also stored as a prefix
_CONSTANT_READY = tl.constexpr(3)
# added to a status word: the published map or prefix holds a NaN or inf
_NONFINITE = tl.constexpr(4)
# added to a block's counter per chunk that published something non-finite (the low part counts chunks)
_NONFINITE_COUNT = tl.constexpr(65536)
# words each program zeroes per store when it clears the workspace of the launch before (``clear_spent_workspace``)
_CLEAR_LANES = tl.constexpr(256)
# whether these kernels run in Triton's interpreter (decided, as Triton decides it, when the module is imported)
_INTERPRETED = tl.constexpr(bool(triton.knobs.runtime.interpret))


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
def chunk_steps(chunk, BLOCK_TIME: tl.constexpr, BACKWARD: tl.constexpr, VEC: tl.constexpr = 1,
                IN_ORDER: tl.constexpr = False):
    """int64 time indices of a chunk in processing order: descending for backward recurrences.

    Backward recurrences are scanned forward over time-reversed tiles: Triton's reverse scan across
    threads is markedly slower on GPUs than a forward scan over the same data. With VEC > 1 the
    indices are [groups, VEC]: groups in processing order, each of VEC contiguous steps in memory
    order (a thread's vector), scanned inside the thread in either direction; IN_ORDER: each group's
    steps in processing order too (strided tiles of a direct backward scan: ``strided_offsets``).
    """
    if VEC == 1:
        lanes = tl.arange(0, BLOCK_TIME)
        if BACKWARD:
            lanes = BLOCK_TIME - 1 - lanes
        return tl.cast(chunk, tl.int64) * BLOCK_TIME + lanes
    else:
        groups = tl.arange(0, BLOCK_TIME // VEC)[:, None]
        lanes = tl.arange(0, VEC)[None, :]
        if BACKWARD:
            groups = BLOCK_TIME // VEC - 1 - groups
            if IN_ORDER:
                lanes = VEC - 1 - lanes
        return tl.cast(chunk, tl.int64) * BLOCK_TIME + groups * VEC + lanes


@triton.jit
def per_step(row_values, VEC: tl.constexpr):
    """A per-row vector shaped to broadcast over a chunk tile ([rows, time] or [rows, groups, VEC])."""
    if VEC == 1:
        return row_values[:, None]
    else:
        return row_values[:, None, None]


@triton.jit
def whole_groups(count, VEC: tl.constexpr):
    """``count`` (a row stride or the row length), said to be a multiple of VEC for grouped tiles.

    Triton learns an integer's divisibility only from its value (a multiple of 16 or not), so with
    rows of, say, 1000 steps it can prove neither a group's address aligned nor its mask the same for
    all its steps, and loads every step alone (on an H200, eligibility traces at 4096x1000 read 11%
    of the copy bandwidth). The launcher groups tiles only where the rows are a whole number of groups
    long and apart (``_launch._grouped_meta``), so clearing the low bits leaves ``count`` unchanged and
    tells Triton so.
    """
    if VEC > 1:
        tl.static_assert(VEC <= 16, "groups of at most 16 steps")
        LOG2_VEC: tl.constexpr = 1 if VEC == 2 else (2 if VEC == 4 else (3 if VEC == 8 else 4))
        return (count >> LOG2_VEC) << LOG2_VEC
    else:
        return count


@triton.jit
def row_offsets(rows, row_stride, VEC: tl.constexpr):
    """Offsets of ``rows`` shaped to broadcast over a chunk tile (``per_step``)."""
    return per_step(rows * whole_groups(row_stride, VEC), VEC)


@triton.jit
def step_mask(row_ok, steps, seq_len, VEC: tl.constexpr):
    """In-range mask of a chunk tile: rows in range and steps in [0, seq_len); steps alone for whole
    tiles (``row_ok`` None: ``tile_rows``), whose steps need it only where shifted past a chunk's edge."""
    in_time = (steps >= 0) & (steps < whole_groups(seq_len, VEC))
    if row_ok is None:
        return tl.expand_dims(in_time, 0)
    else:
        return per_step(row_ok, VEC) & tl.expand_dims(in_time, 0)


@triton.jit
def in_range(mask, values, identity, WHOLE_TILES: tl.constexpr):
    """``values`` at a chunk's steps in range (``mask``) and ``identity`` elsewhere; WHOLE_TILES are in
    range everywhere (``tile_rows``)."""
    if WHOLE_TILES:
        return values
    else:
        return tl.where(mask, values, identity)


@triton.jit
def chunk_window(position, num_chunks, seq_len, row_ok, BLOCK_TIME: tl.constexpr, BACKWARD: tl.constexpr,
                 end=None, VEC: tl.constexpr = 1, IN_ORDER: tl.constexpr = False):
    """Chunk index, time indices (processing order) and in-range mask of the chunk at ``position``.

    Positions past the last chunk, or at or past ``end`` (the end of a program's segment), give an
    all-false mask, so the prefetch of "the chunk after the last one" reads nothing. Whole tiles
    (``row_ok`` None), whose loads take no mask, read the segment's last chunk again instead.
    """
    if end is not None:
        if row_ok is None:
            position = tl.minimum(position, end - 1)
        else:
            position = tl.where(position < end, position, num_chunks)
    if BACKWARD:
        chunk = num_chunks - 1 - position
    else:
        chunk = position
    steps = chunk_steps(chunk, BLOCK_TIME, BACKWARD, VEC, IN_ORDER)
    if IN_ORDER:
        # the same mask from steps in memory order, which Triton proves the same across a group (rows
        # of whole groups: a group is in range or not), not step by step
        return chunk, steps, step_mask(row_ok, chunk_steps(chunk, BLOCK_TIME, BACKWARD, VEC), seq_len, VEC)
    return chunk, steps, step_mask(row_ok, steps, seq_len, VEC)


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
def scan_group(a, b, BACKWARD: tl.constexpr, VEC: tl.constexpr):
    """In-thread scan of each group of a [rows, groups, VEC] tile (steps in memory order).

    Returns the maps of every step's x and of the x processed just before it, from the carry into
    the group (inclusive a, b; exclusive a, b), and each group's whole map as [rows, groups] (a, b).
    Steps are paired by ``tl.split`` (which renames registers: Triton's reverse scan would reverse
    the lanes of every register, and a scan over the whole tile would cross threads), pairs are
    scanned recursively, then each pair's steps are filled in.
    """
    first_a, second_a = tl.split(tl.reshape(a, [a.shape[0], a.shape[1], VEC // 2, 2]))
    first_b, second_b = tl.split(tl.reshape(b, [b.shape[0], b.shape[1], VEC // 2, 2]))
    if BACKWARD:
        # the later step of a pair is processed first
        early_a, early_b, late_a, late_b = second_a, second_b, first_a, first_b
    else:
        early_a, early_b, late_a, late_b = first_a, first_b, second_a, second_b
    # the pair's map: the early step, then the late one
    pair_a = late_a + late_b * early_a
    pair_b = early_b * late_b
    if VEC == 2:
        total_a = tl.reshape(pair_a, [a.shape[0], a.shape[1]])
        total_b = tl.reshape(pair_b, [b.shape[0], b.shape[1]])
        into_a = tl.zeros_like(pair_a)
        into_b = tl.full(pair_b.shape, 1, pair_b.dtype)
    else:
        _, _, into_a, into_b, total_a, total_b = scan_group(pair_a, pair_b, BACKWARD, VEC // 2)
    # x of the early step from the carry into its pair, then x of the late step from that
    early_inc_a = early_a + early_b * into_a
    early_inc_b = early_b * into_b
    late_inc_a = late_a + late_b * early_inc_a
    late_inc_b = late_b * early_inc_b
    if BACKWARD:
        inc_a = tl.reshape(tl.join(late_inc_a, early_inc_a), a.shape)
        inc_b = tl.reshape(tl.join(late_inc_b, early_inc_b), b.shape)
        exc_a = tl.reshape(tl.join(early_inc_a, into_a), a.shape)
        exc_b = tl.reshape(tl.join(early_inc_b, into_b), b.shape)
    else:
        inc_a = tl.reshape(tl.join(early_inc_a, late_inc_a), a.shape)
        inc_b = tl.reshape(tl.join(early_inc_b, late_inc_b), b.shape)
        exc_a = tl.reshape(tl.join(into_a, early_inc_a), a.shape)
        exc_b = tl.reshape(tl.join(into_b, early_inc_b), b.shape)
    return inc_a, inc_b, exc_a, exc_b, total_a, total_b


@triton.jit
def group_carries(total_a, total_b):
    """Maps (PA, PB) of the carry into each group, from the groups' maps ([rows, groups], in
    processing order): carry into group g = PA[g] + PB[g] * (carry into the chunk), as [rows, groups, 1]."""
    _, _, into_a, into_b = scan_with_previous(total_a, total_b)
    return into_a[:, :, None], into_b[:, :, None]


@triton.jit
def scan_chunk(a, b, BACKWARD: tl.constexpr, VEC: tl.constexpr, carry=None):
    """``scan`` of a chunk tile. Grouped tiles (VEC > 1) scan each thread's group in registers, then
    the groups' maps across threads: one cross-thread scan over BLOCK_TIME / VEC groups instead of
    one over every step.

    Given the ``carry`` into the chunk (a direct scan: ``scan_program``'s DIRECT), returns x itself
    instead of its map, and the carry out of the chunk ([rows]), by ``recur_in_thread``."""
    if carry is not None:
        x, _, carry_out = recur_in_thread(a, b, carry, BACKWARD, VEC)
        return x, carry_out
    elif VEC == 1:
        return scan(a, b)
    else:
        a, b, _, _, total_a, total_b = scan_group(a, b, BACKWARD, VEC)
        into_a, into_b = group_carries(total_a, total_b)
        return a + b * into_a, b * into_b


@triton.jit
def scan_chunk_with_previous(a, b, BACKWARD: tl.constexpr, VEC: tl.constexpr, carry=None):
    """``scan_with_previous`` of a chunk tile (grouped tiles and a direct scan as in ``scan_chunk``:
    (x, carry out, x one step earlier in processing order, 0))."""
    if carry is not None:
        x, group_carry, carry_out = recur_in_thread(a, b, carry, BACKWARD, VEC)
        return x, carry_out, previous_in_thread(x, group_carry, BACKWARD, VEC), tl.zeros_like(x)
    elif VEC == 1:
        return scan_with_previous(a, b)
    else:
        a, b, pa, pb, total_a, total_b = scan_group(a, b, BACKWARD, VEC)
        into_a, into_b = group_carries(total_a, total_b)
        return a + b * into_a, b * into_b, pa + pb * into_a, pb * into_b


@triton.jit
def recur_in_thread(a, b, carry, BACKWARD: tl.constexpr, VEC: tl.constexpr):
    """x = a + b * (x one step earlier in processing order) over a grouped chunk tile ([rows, groups,
    VEC], groups in processing order), from the carry into the chunk. Returns x, the carry into each
    group ([rows, groups, 1]) and the carry out of the chunk ([rows]).

    Each thread scans its group into one map (two operations a step), the groups' maps are scanned
    across threads (``group_carries``) and applied to the carry, then each group recurs from its own
    carry in registers: the carry enters its first step processed and Triton's scan along the thread's
    own registers is a chain of combines whose products ``b`` are never read, so the compiler drops
    them and a step costs one multiply-add. A tile of one group a row needs no scan of its group. The
    carry out of a tile of several groups comes from the chunk's map, which does not wait for the carry,
    so that the next chunk waits for one multiply-add, not for the last group's x to cross the tile's
    warps. ``scan_chunk`` builds every step's map instead (in-thread pairs, then the groups' maps applied
    to each step) and the carry is applied to those after: about three times the operations a step.
    """
    if BACKWARD:
        # groups hold their steps in memory order; renamed into processing order and back (Triton's
        # reverse scan exchanges registers across lanes even when the axis lies in one thread)
        x, group_carry, carry_out = recur_in_thread(flip_group(a, VEC), flip_group(b, VEC), carry, False, VEC)
        return flip_group(x, VEC), group_carry, carry_out
    else:
        group_carry = per_step(carry, VEC)
        if a.shape[1] > 1:
            # each group's map: the last step of an inclusive scan along the group (tl.reduce may
            # combine out of order, and these maps do not commute)
            inclusive_a, inclusive_b = tl.associative_scan((a, b), 2, combine)
            chunk_a, chunk_b, into_a, into_b = scan_with_previous(last_lane(inclusive_a, VEC),
                                                                  last_lane(inclusive_b, VEC))
            group_carry = into_a[:, :, None] + into_b[:, :, None] * group_carry
            carry_out = last_column(chunk_a, a.shape[1]) + last_column(chunk_b, a.shape[1]) * carry
        first = tl.arange(0, VEC)[None, None, :] == 0
        x, _ = tl.associative_scan((tl.where(first, a + b * group_carry, a), b), 2, combine)
        if a.shape[1] == 1:
            carry_out = tl.reshape(last_lane(x, VEC), carry.shape)
        return x, group_carry, carry_out


@triton.jit
def last_lane(x, N: tl.constexpr):
    """The last step of each group of a [rows, groups, N] tile, as [rows, groups], by ``tl.split``."""
    _, odd = tl.split(tl.reshape(x, [x.shape[0], x.shape[1], N // 2, 2]))
    if N > 2:
        return last_lane(odd, N // 2)
    else:
        return tl.reshape(odd, [x.shape[0], x.shape[1]])


@triton.jit
def flip_group(x, N: tl.constexpr):
    """Each group of a [rows, groups, N] tile in reverse order, by ``tl.split`` and ``tl.join`` (renamed
    registers): the reversed odd steps interleaved with the reversed even ones."""
    even, odd = tl.split(tl.reshape(x, [x.shape[0], x.shape[1], N // 2, 2]))
    if N > 2:
        even = flip_group(even, N // 2)
        odd = flip_group(odd, N // 2)
    return tl.reshape(tl.join(odd, even), [x.shape[0], x.shape[1], N])


@triton.jit
def previous_in_thread(x, group_carry, BACKWARD: tl.constexpr, VEC: tl.constexpr):
    """x one step earlier in processing order, each group's carry at its first step (``shift_group``)."""
    if BACKWARD:
        return shift_group(x, group_carry, 1, VEC)
    else:
        return shift_group(x, group_carry, -1, VEC)


@triton.jit
def carried(scan_a, scan_b, carry, VEC: tl.constexpr):
    """x of a chunk from its scan and the carry into it; a direct scan's (carry None) is x already."""
    if carry is None:
        return scan_a
    else:
        return scan_a + scan_b * per_step(carry, VEC)


@triton.jit
def last_step(x, BLOCK_TIME: tl.constexpr, BACKWARD: tl.constexpr, VEC: tl.constexpr):
    """Per row, the element of a chunk tile processed last (``last_column`` of grouped tiles too)."""
    if VEC == 1:
        return last_column(x, BLOCK_TIME)
    else:
        groups = tl.arange(0, BLOCK_TIME // VEC)[None, :, None]
        lanes = tl.arange(0, VEC)[None, None, :]
        last = (groups == BLOCK_TIME // VEC - 1) & (lanes == (0 if BACKWARD else VEC - 1))
        return tl.sum(tl.sum(tl.where(last, x, tl.zeros_like(x)), axis=2), axis=1)


@triton.jit
def last_column(x, BLOCK_TIME: tl.constexpr):
    """x[:, BLOCK_TIME - 1] of a [rows, time] tile, the last step in processing order."""
    lanes = tl.arange(0, BLOCK_TIME)
    return tl.sum(tl.where(lanes[None, :] == BLOCK_TIME - 1, x, tl.zeros_like(x)), axis=1)


@triton.jit
def clear_spent_workspace(spent_ptr, spent_words):
    """Zero the first ``spent_words`` flags at ``spent_ptr``, spread over the programs of a split launch.

    A stream keeps two look-back workspaces and its split launches take them in turn
    (``_launch._lookback_workspace``): each launch clears the one the launch before it used, which no
    program reads any more (that launch has ended), so the next launch finds it zeroed. The count is
    a launch argument, so no program waits for it. It is the size of the launch before, so it changes
    from call to call (0 at a stream's first): every kernel that takes it says
    ``do_not_specialize=["spent_words"]``, or Triton would compile it again whenever the count turns
    divisible by 16 or not.
    """
    lanes = tl.arange(0, _CLEAR_LANES)
    for first in range(tl.program_id(0) * _CLEAR_LANES, spent_words, tl.num_programs(0) * _CLEAR_LANES):
        tl.store(spent_ptr + first + lanes, tl.zeros_like(lanes), mask=first + lanes < spent_words)


@triton.jit
def claim_work(counter_ptr, spent_ptr, spent_words, num_row_tiles, num_chunks, SPLIT: tl.constexpr):
    """(row tile, position in processing order of the first chunk, number of chunks) of this program.
    A split's programs also zero the workspace words the launch before left (``clear_spent_workspace``)."""
    if SPLIT:
        ticket = tl.atomic_add(counter_ptr, 1)
        row_tile, order = ticket % num_row_tiles, ticket // num_row_tiles
        clear_spent_workspace(spent_ptr, spent_words)
        return row_tile, order, 1
    else:
        return tl.program_id(0), 0, num_chunks


@triton.jit
def claim_segment(counter_ptr, spent_ptr, spent_words, num_row_tiles, num_chunks, segment_chunks,
                  SPLIT: tl.constexpr, EVEN: tl.constexpr = False):
    """(row tile, segment's order, position of its first chunk, its number of chunks) of this program.

    A split cuts each row tile's chunks (in processing order) into segments of ``segment_chunks``
    (the last one shorter); EVEN cuts them into as many segments of at most that many chunks, whose
    lengths differ by one at most. Programs claim segments in order from the ticket counter, and zero
    the workspace words the launch before left (``clear_spent_workspace``). Without a split a program
    owns a whole row tile: one segment of every chunk.
    """
    if SPLIT:
        ticket = tl.atomic_add(counter_ptr, 1)
        order = ticket // num_row_tiles
        if EVEN:
            # the first (num_chunks mod num_segments) segments hold one chunk more than the others
            num_segments = (num_chunks + segment_chunks - 1) // segment_chunks
            shorter = num_chunks // num_segments
            longer_ones = num_chunks - shorter * num_segments
            first = order * shorter + tl.minimum(order, longer_ones)
            row_tile = ticket % num_row_tiles
            count = shorter + (order < longer_ones).to(tl.int32)
        else:
            first = order * segment_chunks
            row_tile = ticket % num_row_tiles
            count = tl.minimum(segment_chunks, num_chunks - first)
        clear_spent_workspace(spent_ptr, spent_words)
        return row_tile, order, first, count
    else:
        return tl.program_id(0), 0, 0, num_chunks


@triton.jit
def scan_chunk_and_store(scan_fn, store_fn, args, CONSTS: tl.constexpr, inputs, mask, chunk, carry,
                         status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks,
                         LOOKBACK: tl.constexpr, BACKWARD: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                         BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr, VEC: tl.constexpr,
                         DIRECT: tl.constexpr = False):
    """One chunk of a kernel: its scan, the carry into it (LOOKBACK: by look-back), its outputs.

    Returns the chunk's map (a, b), carry out = a + b * carry in, and the carry in; a DIRECT scan
    (x from the carry, then the carry out: ``scan_chunk``) stores with no carry (``carried``) and returns
    (carry out, 0, carry in).
    """
    if DIRECT:
        scanned = scan_fn(args, CONSTS, inputs, mask, carry)
        store_fn(args, CONSTS, inputs, scanned, None, chunk)
        return scanned[1], tl.zeros_like(carry), carry
    scanned = scan_fn(args, CONSTS, inputs, mask, None)
    chunk_a = last_step(scanned[0], BLOCK_TIME, BACKWARD, VEC)
    chunk_b = last_step(scanned[1], BLOCK_TIME, BACKWARD, VEC)
    if LOOKBACK:
        carry = chunk_carry(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, chunk_a, chunk_b,
                            carry, BLOCK_ROWS, WINDOW)
    store_fn(args, CONSTS, inputs, scanned, carry, chunk)
    return chunk_a, chunk_b, carry


@triton.jit
def look_behind(load_fn, scan_fn, args, BEHIND_CONSTS: tl.constexpr, carry, first, num_chunks, seq_len, row_ok,
                BACKWARD: tl.constexpr, BLOCK_TIME: tl.constexpr, LOOK_BEHIND: tl.constexpr, VEC: tl.constexpr,
                IN_ORDER: tl.constexpr):
    """The carry into the walked segment that starts at position ``first`` (> 0), where its look-behind gives it.

    The last LOOK_BEHIND steps before the segment (in processing order) are loaded and scanned from a zero
    carry as one chunk of LOOK_BEHIND steps (``BEHIND_CONSTS``: the kernel's ``CONSTS`` with that chunk
    length, which divides BLOCK_TIME). Where their map is constant (an episode end in every row of the tile)
    and finite, its value is the carry into the segment, provided nothing before is non-finite: that is
    checked once every segment of the row tile has finished (``finish_walk_and_mend``). Returns (carry, ok):
    ``carry`` unchanged where not ok.
    """
    if BACKWARD:
        time_chunk = num_chunks - 1 - first
        behind = (time_chunk + 1) * (BLOCK_TIME // LOOK_BEHIND)
    else:
        behind = first * (BLOCK_TIME // LOOK_BEHIND) - 1
    steps = chunk_steps(behind, LOOK_BEHIND, BACKWARD, VEC, IN_ORDER)
    if IN_ORDER:
        mask = step_mask(row_ok, chunk_steps(behind, LOOK_BEHIND, BACKWARD, VEC), seq_len, VEC)
    else:
        mask = step_mask(row_ok, steps, seq_len, VEC)
    inputs = load_fn(args, BEHIND_CONSTS, behind, steps)
    scanned = scan_fn(args, BEHIND_CONSTS, inputs, mask, None)
    behind_a = last_step(scanned[0], LOOK_BEHIND, BACKWARD, VEC)
    behind_b = last_step(scanned[1], LOOK_BEHIND, BACKWARD, VEC)
    open_rows = behind_b != 0
    if row_ok is not None:
        # rows past the last, whose decays are the identity's, have no carry to take
        open_rows = open_rows & row_ok
    ok = (tl.max(open_rows.to(tl.int32), axis=0) == 0) & ~_any_nonfinite(behind_a)
    return tl.where(ok, behind_a, carry), ok


@triton.jit
def scan_program(load_fn, redo_load_fn, scan_fn, store_fn, args, CONSTS: tl.constexpr, carry, row_tile, order, first,
                 my_chunks,
                 num_chunks, segment_chunks, seq_len, row_ok, status_ptr, aggregate_ptr, prefix_ptr,
                 SPLIT: tl.constexpr, WALK: tl.constexpr, PREFETCH: tl.constexpr, BACKWARD: tl.constexpr,
                 BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr, VEC: tl.constexpr,
                 DIRECT: tl.constexpr = False, IN_ORDER: tl.constexpr = False, arg_inputs=None, num_rows=None,
                 BEHIND_CONSTS: tl.constexpr = None, LOOK_BEHIND: tl.constexpr = 0):
    """Every chunk of a program (claimed by ``claim_segment``), from ``carry`` into its first chunk.

    A kernel gives three functions of its ``args`` tuple and ``CONSTS`` (a tuple of compile-time
    values): ``load_fn(args, CONSTS, chunk, steps)`` reads a chunk's inputs (a tuple);
    ``scan_fn(args, CONSTS, inputs, mask, carry)`` scans them into a tuple that starts with the chunk's
    maps (A, B), x = A + B * (carry into the chunk), or, given the carry (not None), with x and the
    carry out of the chunk; ``store_fn(args, CONSTS, inputs, scanned, carry, chunk)`` writes the chunk's
    outputs from its true carry, or from x where the carry is None (``carried``). DIRECT programs (of
    grouped tiles, VEC > 1, that walk whole rows from their boundary carry) give ``scan_fn`` the carry,
    so that no step's map is built (``recur_in_thread``); IN_ORDER: their groups hold steps in processing
    order (``chunk_steps``). Programs of several chunks (PREFETCH)
    load each next chunk before scanning the current one; other programs hold one chunk (a split's, or
    a row of one chunk). A walked segment (WALK) is walked from a zero carry, then looked back over
    and its first chunks redone (``finish_walked_segment``), whose inputs ``redo_load_fn`` reads (the same
    arguments as ``load_fn``; a kernel whose outputs overwrite intermediate inputs recomputes them). A
    kernel that also gives ``arg_inputs`` (its ``args`` but ``rows, row_ok``: pointers, strides, scalars,
    ``seq_len``) and ``num_rows`` has that look-back and redo compiled as a function of its own
    (``finish_walked_segment_apart``). With LOOK_BEHIND > 0 (and ``BEHIND_CONSTS``: ``CONSTS`` with
    BLOCK_TIME = LOOK_BEHIND), a walked segment first scans the last LOOK_BEHIND steps before it
    (``look_behind``); where they end an episode in every row, it walks from their carry, publishes a
    constant map and neither waits nor redoes (``finish_walk_and_mend``).
    """
    end = first + my_chunks
    # whether the carry into a walked segment came from its look-behind (then it neither waits nor redoes)
    behind_ok = first < 0
    if WALK and arg_inputs is None and LOOK_BEHIND > 0:  # noqa: SIM102 - compile-time, then run-time
        if first > 0:
            carry, behind_ok = look_behind(load_fn, scan_fn, args, BEHIND_CONSTS, carry, first, num_chunks, seq_len,
                                           row_ok, BACKWARD, BLOCK_TIME, LOOK_BEHIND, VEC, IN_ORDER)
    chunk, steps, mask = chunk_window(first, num_chunks, seq_len, row_ok, BLOCK_TIME, BACKWARD, VEC=VEC,
                                      IN_ORDER=IN_ORDER)
    inputs = load_fn(args, CONSTS, chunk, steps)
    if PREFETCH:
        walk_decay = tl.full(carry.shape, 1, carry.dtype)
        for i in range(my_chunks):
            # Triton does not pipeline loads into registers: issue the next chunk's before this one's work
            next_chunk, next_steps, next_mask = chunk_window(first + i + 1, num_chunks, seq_len, row_ok, BLOCK_TIME,
                                                             BACKWARD, end, VEC, IN_ORDER)
            next_inputs = load_fn(args, CONSTS, next_chunk, next_steps)
            chunk_a, chunk_b, carry = scan_chunk_and_store(
                scan_fn, store_fn, args, CONSTS, inputs, mask, chunk, carry, status_ptr, aggregate_ptr, prefix_ptr,
                row_tile, order, num_chunks, False, BACKWARD, BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC, DIRECT)
            if DIRECT:
                carry = chunk_a
            else:
                carry = chunk_a + chunk_b * carry
                walk_decay *= chunk_b
            inputs = next_inputs
            chunk, steps, mask = next_chunk, next_steps, next_mask
    else:
        scan_chunk_and_store(scan_fn, store_fn, args, CONSTS, inputs, mask, chunk, carry, status_ptr, aggregate_ptr,
                             prefix_ptr, row_tile, order, num_chunks, SPLIT, BACKWARD, BLOCK_ROWS, BLOCK_TIME, WINDOW,
                             VEC, DIRECT and not SPLIT)
    if WALK:
        tl.static_assert(not DIRECT, "a walked segment needs its chunks' maps")
        if arg_inputs is None and LOOK_BEHIND > 0:
            finish_walk_and_mend(redo_load_fn, scan_fn, store_fn, args, CONSTS, carry, walk_decay, behind_ok, row_tile,
                                 order, first, end, num_chunks, segment_chunks, seq_len, row_ok, status_ptr,
                                 aggregate_ptr, prefix_ptr, BACKWARD, BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC)
        elif arg_inputs is None:
            finish_walked_segment(redo_load_fn, scan_fn, store_fn, args, CONSTS, carry, walk_decay, row_tile, order,
                                  first, end, num_chunks, segment_chunks, seq_len, row_ok, status_ptr, aggregate_ptr,
                                  prefix_ptr, BACKWARD, BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC)
        else:
            # the walk's map x -> carry + walk_decay * x goes to the segment's aggregate slot (chunk_carry's
            # layout), where the function, which takes scalars only, reads it back
            num_segments = (num_chunks + segment_chunks - 1) // segment_chunks
            slot = row_tile * num_segments + order
            lanes = tl.arange(0, BLOCK_ROWS)
            tl.store(aggregate_ptr + (2 * slot) * BLOCK_ROWS + lanes, carry)
            tl.store(aggregate_ptr + (2 * slot + 1) * BLOCK_ROWS + lanes, walk_decay)
            tl.debug_barrier()
            rows_masked: tl.constexpr = row_ok is not None
            finish_walked_segment_apart(redo_load_fn, scan_fn, store_fn, arg_inputs, CONSTS, num_rows, row_tile, order,
                                        first, end, num_chunks, segment_chunks, seq_len, status_ptr, aggregate_ptr,
                                        prefix_ptr, rows_masked, BACKWARD, BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC)


@triton.jit
def publish_constant(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, segment_chunks, carry_out,
                     BLOCK_ROWS: tl.constexpr, WINDOW: tl.constexpr):
    """A walked segment whose carry in came from its look-behind publishes its carry out as a constant map,
    as ``chunk_carry`` publishes a constant chunk, and neither waits nor looks back."""
    lanes = tl.arange(0, BLOCK_ROWS)
    num_segments = (num_chunks + segment_chunks - 1) // segment_chunks
    slot = row_tile * num_segments + order
    num_blocks = (num_segments + WINDOW - 1) // WINDOW
    block_counters = status_ptr - 1 - row_tile * num_blocks
    nonfinite = _any_nonfinite(carry_out)
    tl.store(aggregate_ptr + (2 * slot) * BLOCK_ROWS + lanes, carry_out)
    tl.store(aggregate_ptr + (2 * slot + 1) * BLOCK_ROWS + lanes, tl.zeros_like(carry_out))
    tl.store(prefix_ptr + slot * BLOCK_ROWS + lanes, carry_out)
    tl.debug_barrier()
    published = tl.where(nonfinite, _AGGREGATE_READY | _NONFINITE, _CONSTANT_READY)
    tl.atomic_xchg(status_ptr + slot, published, sem="release")
    tl.atomic_add(block_counters - order // WINDOW, 1 + tl.where(nonfinite, _NONFINITE_COUNT, 0), sem="release")


@triton.jit
def first_nonfinite_segment(status_ptr, row_tile, num_segments, WINDOW: tl.constexpr):
    """The first segment of ``row_tile`` that published something non-finite (``num_segments`` if none)."""
    window = tl.arange(0, WINDOW)
    found = num_segments
    base = num_segments * 0
    while (base < num_segments) & (found == num_segments):
        position = base + window
        valid = position < num_segments
        status = tl.atomic_add(status_ptr + row_tile * num_segments + position, 0, mask=valid, sem="acquire")
        hit = valid & (status >= _NONFINITE)
        found = tl.minimum(found, tl.min(tl.where(hit, position, num_segments), axis=0))
        base += WINDOW
    return found


@triton.jit
def finish_walk_and_mend(redo_load_fn, scan_fn, store_fn, args, CONSTS: tl.constexpr, walk_carry, walk_decay, behind_ok,
                         row_tile, order, first, end, num_chunks, segment_chunks, seq_len, row_ok, status_ptr,
                         aggregate_ptr, prefix_ptr, BACKWARD: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                         BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr, VEC: tl.constexpr):
    """The end of a walked segment with a look-behind (``look_behind``). One that took its carry from its look-behind publishes its
    carry out as a constant map and is done; any other looks back and redoes its head (``walk_lookback``). The
    last segment of the row tile to finish then mends what a non-finite value reaches: from the first segment
    that published one, every later step of the row tile is redone from that segment's prefix (a look-behind
    trusts that nothing before its chunk is non-finite; a plain loop carries a NaN across episode ends)."""
    num_segments = (num_chunks + segment_chunks - 1) // segment_chunks
    if behind_ok:
        publish_constant(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, segment_chunks,
                         walk_carry, BLOCK_ROWS, WINDOW)
        carry, walked_carry, position, pending = walk_carry, walk_carry, first, first < 0
        nonfinite = _any_nonfinite(walk_carry)
    else:
        carry, walked_carry, position, pending = walk_lookback(
            status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, segment_chunks, first, walk_carry,
            walk_decay, BLOCK_ROWS, WINDOW)
        # whether what it published (its walk's map, then its prefix) may hold a NaN or inf
        nonfinite = (_any_nonfinite(walk_carry) | _any_nonfinite(walk_decay) | _any_nonfinite(carry)
                     | _any_nonfinite(walk_carry + walk_decay * carry))
    phase = 0
    while phase < 2:
        # phase 0: the segment's own redo; phase 1: the row tile's mending, if this program does it
        carry, walked_carry, position, pending = redo_chunks(
            redo_load_fn, scan_fn, store_fn, args, CONSTS, carry, walked_carry, position, pending, end, row_tile,
            order, num_chunks, seq_len, row_ok, status_ptr, aggregate_ptr, prefix_ptr, BACKWARD, BLOCK_ROWS,
            BLOCK_TIME, WINDOW, VEC)
        if phase == 0:
            # every thread's stores before the count (released by one thread; chunk_carry does the same)
            tl.debug_barrier()
            # the row tile's count of finished segments (and, in units of _NONFINITE_COUNT, of those that
            # published something non-finite), after the status words and the ticket (a walk's grid is one
            # program per status word)
            nonfinite_count = tl.where(nonfinite, _NONFINITE_COUNT, 0)
            done = tl.atomic_add(status_ptr + tl.num_programs(0) + 1 + row_tile, 1 + nonfinite_count, sem="acq_rel")
            if (done % _NONFINITE_COUNT == num_segments - 1) & (done + nonfinite_count >= _NONFINITE_COUNT):
                # the last to finish, and something non-finite was published: find the first such segment
                tl.debug_barrier()
                bad = first_nonfinite_segment(status_ptr, row_tile, num_segments, WINDOW)
                if bad < num_segments - 1:
                    lanes = tl.arange(0, BLOCK_ROWS)
                    carry = tl.load(prefix_ptr + (row_tile * num_segments + bad) * BLOCK_ROWS + lanes, volatile=True)
                    # rows whose carry is finite agree with what their walks used; the others drive the redo
                    walked_carry = tl.where(carry - carry == 0, carry, tl.zeros_like(carry))
                    position = (bad + 1) * segment_chunks
                    end = num_chunks
                    pending = carries_differ(carry, walked_carry)
        phase += 1


@triton.jit
def redo_chunks(redo_load_fn, scan_fn, store_fn, args, CONSTS: tl.constexpr, carry, walked_carry, position, pending,
                end, row_tile, order, num_chunks, seq_len, row_ok, status_ptr, aggregate_ptr, prefix_ptr,
                BACKWARD: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr,
                VEC: tl.constexpr):
    """The redo of a walked segment's chunks from ``position`` (if ``pending``) with the true carry, each while
    its carry in differs from the one the walk used (``redo_advance``). Returns (carry, walked carry, position,
    pending: false)."""
    while pending:
        chunk, steps, mask = chunk_window(position, num_chunks, seq_len, row_ok, BLOCK_TIME, BACKWARD, VEC=VEC)
        inputs = redo_load_fn(args, CONSTS, chunk, steps)
        chunk_a, chunk_b, carry = scan_chunk_and_store(
            scan_fn, store_fn, args, CONSTS, inputs, mask, chunk, carry, status_ptr, aggregate_ptr, prefix_ptr,
            row_tile, order, num_chunks, False, BACKWARD, BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC)
        carry, walked_carry, position, pending = redo_advance(chunk_a, chunk_b, carry, walked_carry, position, end)
    return carry, walked_carry, position, pending


@triton.jit
def finish_walked_segment(redo_load_fn, scan_fn, store_fn, args, CONSTS: tl.constexpr, walk_carry, walk_decay,
                          row_tile, order, first, end, num_chunks, segment_chunks, seq_len, row_ok, status_ptr,
                          aggregate_ptr, prefix_ptr, BACKWARD: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                          BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr, VEC: tl.constexpr):
    """The end of a walked segment (``scan_program``), walked from a zero carry to ``walk_carry`` (its
    chunks' decays multiplying to ``walk_decay``): its look-back, then the redo of its first chunks with the
    true carry until their carry out is the one the walk used."""
    carry, walked_carry, position, pending = walk_lookback(
        status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, segment_chunks, first, walk_carry,
        walk_decay, BLOCK_ROWS, WINDOW)
    redo_chunks(redo_load_fn, scan_fn, store_fn, args, CONSTS, carry, walked_carry, position, pending, end, row_tile,
                order, num_chunks, seq_len, row_ok, status_ptr, aggregate_ptr, prefix_ptr, BACKWARD, BLOCK_ROWS,
                BLOCK_TIME, WINDOW, VEC)


@triton.jit(noinline=True)
def finish_walked_segment_apart(redo_load_fn: tl.constexpr, scan_fn: tl.constexpr, store_fn: tl.constexpr,
                                arg_inputs, CONSTS: tl.constexpr, num_rows, row_tile, order, first, end, num_chunks,
                                segment_chunks, seq_len, status_ptr, aggregate_ptr, prefix_ptr,
                                ROWS_MASKED: tl.constexpr, BACKWARD: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                                BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr, VEC: tl.constexpr):
    """``finish_walked_segment`` in a function called, not inlined, so that Triton compiles it as a unit
    of its own.

    Triton's coalescing pass takes time in proportion to a function's memory operations times the square
    of its size, and the redo repeats a kernel's loads, scan and stores. For sm_90a on a 2-core CPU,
    Retrace's walk with 4 actions at 8x2^21 compiled in 2.10-2.64 s this way against 2.57-2.97 s inlined
    (four processes each); on H200 hosts its first call took 1.91-3.25 s in six processes against
    3.33-4.24 s in four (benchmarks/NOTES.md, "Thirty-seventh round"). The other kernels' walks (GAE,
    V-trace, returns, episodic scans) stay inlined: their episodic scans read 4-7% slower in a function. A called function takes scalars only, so the walk
    leaves its map in the segment's aggregate slot, and this reads it back and builds the kernel's
    ``args`` again: ``arg_inputs`` with ``rows, row_ok`` before ``seq_len``. (Built in place: a tuple that
    a Triton function returns turns its compile-time entries, such as strides of 1 and absent pointers,
    into tensors.)
    """
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    args = arg_inputs[:-1] + (rows, row_ok, arg_inputs[-1])
    if not ROWS_MASKED:
        # whole tiles: no in-range masks (tile_rows)
        row_ok = None
    num_segments = (num_chunks + segment_chunks - 1) // segment_chunks
    slot = row_tile * num_segments + order
    lanes = tl.arange(0, BLOCK_ROWS)
    walk_carry = tl.load(aggregate_ptr + (2 * slot) * BLOCK_ROWS + lanes, volatile=True)
    walk_decay = tl.load(aggregate_ptr + (2 * slot + 1) * BLOCK_ROWS + lanes, volatile=True)
    finish_walked_segment(redo_load_fn, scan_fn, store_fn, args, CONSTS, walk_carry, walk_decay, row_tile, order,
                          first, end, num_chunks, segment_chunks, seq_len, row_ok, status_ptr, aggregate_ptr,
                          prefix_ptr, BACKWARD, BLOCK_ROWS, BLOCK_TIME, WINDOW, VEC)


@triton.jit
def walk_lookback(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks, segment_chunks, first,
                  walk_carry, walk_decay, BLOCK_ROWS: tl.constexpr, WINDOW: tl.constexpr):
    """The look-back over segments after a walk, and the start of the redo of the segment's head.

    Segment ``order`` > 0 was walked from a zero carry: ``walk_carry + walk_decay * x`` maps the
    true carry ``x`` into it to the carry out of it. Segment 0 was walked from the row's boundary
    carry, so its ``walk_carry`` is already its inclusive prefix and its true carry counts as zero
    (nothing to redo). Returns (true carry into the segment, the carry its walk used, the position
    of its first chunk, whether that chunk needs a redo): the state ``redo_advance`` moves on.
    """
    num_segments = (num_chunks + segment_chunks - 1) // segment_chunks
    no_carry = tl.zeros_like(walk_carry)
    decay = tl.where(order > 0, walk_decay, no_carry)
    carry = chunk_carry(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_segments, walk_carry, decay,
                        no_carry, BLOCK_ROWS, WINDOW)
    return carry, no_carry, first, carries_differ(carry, no_carry)


@triton.jit
def redo_advance(chunk_a, chunk_b, carry, walked_carry, position, end):
    """After redoing the chunk at ``position`` (map a + b * x): the true carry out, the one the walk
    had, the next position and whether it needs a redo too (the carries differ, inside the segment)."""
    carry = chunk_a + chunk_b * carry
    walked_carry = chunk_a + chunk_b * walked_carry
    position += 1
    return carry, walked_carry, position, (position < end) & carries_differ(carry, walked_carry)


@triton.jit
def carries_differ(carry, walked_carry):
    """Whether any row's carry differs from the one its walk used (then later outputs need a redo)."""
    return tl.max((carry != walked_carry).to(tl.int32), axis=0) > 0


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

    A chunk whose map is constant (``aggregate_b`` zero in every row: an episode ends in it, or the
    decay underflowed) and finite publishes ``aggregate_a`` as its inclusive prefix at once, since
    the carry into it cannot change its carry out. Such a chunk ends the look-back of the chunks
    after it, but only once every chunk before them has published (a NaN or inf before a constant
    chunk still reaches past it, as in a plain loop). Whether they have is read from one counter per
    block of WINDOW chunks (``status_ptr - 1 - (row_tile * blocks + block)``), which every chunk
    bumps after publishing: one poll covers WINDOW blocks and the chunk's own, however far back in
    them the last chunk to publish is.
    """
    lanes = tl.arange(0, BLOCK_ROWS)
    slot = row_tile * num_chunks + order
    num_blocks = (num_chunks + WINDOW - 1) // WINDOW
    block_counters = status_ptr - 1 - row_tile * num_blocks
    # a constant chunk with nothing non-finite before it keeps the prefix it published first
    prefix_published = order < 0
    if order == 0:
        carry = boundary
    else:
        nonfinite = _any_nonfinite(aggregate_a) | _any_nonfinite(aggregate_b)
        constant = (tl.max((aggregate_b != 0).to(tl.int32), axis=0) == 0) & ~nonfinite
        tl.store(aggregate_ptr + (2 * slot) * BLOCK_ROWS + lanes, aggregate_a)
        tl.store(aggregate_ptr + (2 * slot + 1) * BLOCK_ROWS + lanes, aggregate_b)
        if constant:
            tl.store(prefix_ptr + slot * BLOCK_ROWS + lanes, aggregate_a)
        tl.debug_barrier()
        published = tl.where(constant, _CONSTANT_READY, _AGGREGATE_READY) | tl.where(nonfinite, _NONFINITE, 0)
        tl.atomic_xchg(status_ptr + slot, published, sem="release")
        tl.atomic_add(block_counters - order // WINDOW, 1 + tl.where(nonfinite, _NONFINITE_COUNT, 0), sem="release")

        # wait until every chunk before this one has published: the counters of the blocks before its
        # own, then the status words of its own block
        window = tl.arange(0, WINDOW)
        my_block = order // WINDOW
        own = my_block * WINDOW + window  # [WINDOW], ascending
        own_valid = own < order
        complete_blocks = order * 0
        nonfinite_before = order * 0
        waiting = order > 0
        while waiting:
            block = complete_blocks + window
            block_valid = block < my_block
            count = tl.atomic_add(block_counters - block, 0, mask=block_valid, sem="acquire")
            full = block_valid & ((count % _NONFINITE_COUNT) == WINDOW)
            # the first block not yet complete; past this poll's blocks if all of them are
            polled_end = tl.minimum(complete_blocks + WINDOW, my_block)
            first_partial = tl.min(tl.where(block_valid & ~full, block, polled_end), axis=0)
            counted = block_valid & (block < first_partial)
            nonfinite_before += tl.sum(tl.where(counted, count // _NONFINITE_COUNT, 0), axis=0)
            complete_blocks = first_partial
            status = tl.atomic_add(status_ptr + row_tile * num_chunks + own, 0, mask=own_valid, sem="acquire")
            status = tl.where(own_valid, status, _PREFIX_READY)
            own_ready = tl.min(status % _NONFINITE, axis=0) >= _AGGREGATE_READY
            waiting = (complete_blocks < my_block) | ~own_ready
            if not waiting:
                nonfinite_before += tl.sum(tl.where(own_valid & (status >= _NONFINITE), 1, 0), axis=0)
        # with nothing non-finite before it, a constant chunk's prefix is exact too; otherwise only the
        # prefixes of chunks that looked back are
        constants_anchor = nonfinite_before == 0

        # map from the carry into the window just looked at to the carry into this chunk
        done_a = tl.zeros_like(aggregate_a)
        done_b = tl.full(aggregate_b.shape, 1, aggregate_b.dtype)
        carry = boundary
        upper = order
        while upper > 0:
            position = upper - WINDOW + window  # [WINDOW], ascending
            valid = position >= 0
            status = tl.atomic_add(status_ptr + row_tile * num_chunks + position, 0, mask=valid, sem="acquire")
            kind = tl.where(valid, status % _NONFINITE, 0)
            is_anchor = (kind == _PREFIX_READY) | (constants_anchor & (kind == _CONSTANT_READY))
            nearest_prefix = tl.max(tl.where(is_anchor, position, -1), axis=0)
            between = valid & (position > nearest_prefix)
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

        prefix_published = constant & constants_anchor
    if not prefix_published:
        prefix_value = aggregate_a + aggregate_b * carry
        tl.store(prefix_ptr + slot * BLOCK_ROWS + lanes, prefix_value)
        tl.debug_barrier()
        nonfinite_prefix = _any_nonfinite(prefix_value)
        tl.atomic_xchg(status_ptr + slot, _PREFIX_READY | tl.where(nonfinite_prefix, _NONFINITE, 0), sem="release")
        if order == 0:
            tl.atomic_add(block_counters, 1 + tl.where(nonfinite_prefix, _NONFINITE_COUNT, 0), sem="release")
    return carry


@triton.jit
def _any_nonfinite(x):
    """Whether any lane of ``x`` is NaN or infinite (x - x is 0 exactly for every finite x)."""
    return tl.max(((x - x) != 0).to(tl.int32), axis=0) > 0


@triton.jit
def tile_rows(row_tile, num_rows, BLOCK_ROWS: tl.constexpr):
    """int64 row indices of a row tile and their in-range mask.

    A kernel told WHOLE_TILES (rows a whole number of row tiles and each row a whole number of chunks:
    ``_launch._meta``) gives its loads and stores the mask None instead: its tiles are then read, scanned and written
    without in-range masks (``step_mask``, ``strided_mask``, ``in_range``), which cost a bf16 step
    read in place ``[T, N]`` several instructions: the loads' predicates, the zeroing of their masked-off
    values and the selects that make steps past the end identity steps. Each kernel's load and store
    functions set their own ``row_ok`` to None: the tuple of arguments a kernel hands them cannot hold
    None (Triton 3.6's code generator fails on it).
    """
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
def as_stored(values, ptr):
    """``values`` converted to the element type of ``ptr``, for a store.

    Triton 3.6's interpreter converts float64 to bfloat16 as if it were an integer conversion (bf16
    outputs of float64 computations came out 0 and NaN), so there the conversion passes through float32;
    compiled kernels convert directly.
    """
    if _INTERPRETED and values.dtype.is_fp64() and ptr.dtype.element_ty.is_bf16():
        values = values.to(tl.float32)
    return values.to(ptr.dtype.element_ty)


@triton.jit
def store_tile(ptr, rows, row_stride, steps, time_stride, values, mask):
    tl.store(ptr + rows[:, None] * row_stride + steps[None, :] * time_stride, as_stored(values, ptr), mask=mask)


@triton.jit
def chunk_groups(chunk, BLOCK_TIME: tl.constexpr, BACKWARD: tl.constexpr, VEC: tl.constexpr):
    """int64 first step (in memory order) of each group of a chunk, as [groups]: groups in processing order."""
    groups = tl.arange(0, BLOCK_TIME // VEC)
    if BACKWARD:
        groups = BLOCK_TIME // VEC - 1 - groups
    return tl.cast(chunk, tl.int64) * BLOCK_TIME + groups * VEC


@triton.constexpr_function
def direct_scan(direct, vec, split, walk):
    """Whether a kernel asked for DIRECT scans them: grouped tiles (VEC > 1) walked over whole rows (not
    split in time, nor walked in segments, whose look-back needs each chunk's map; ``scan_program``)."""
    return bool(direct) and vec > 1 and not split and not walk


@triton.constexpr_function
def in_processing_order(strided):
    """Whether a strided tile code (``strided_offsets``' ROWS_PER_THREAD, a kernel's STRIDED) holds each
    group's steps in the processing order of a backward scan: a negative code."""
    return strided is not False and strided is not True and strided < 0


@triton.constexpr_function
def in_processing_order_code(strided, in_order):
    """The strided tile code of ``strided`` (False, True or rows per thread) with groups in processing
    order where ``in_order`` (negated; True is one row per thread)."""
    if not in_order or strided is False:
        return strided
    return -int(strided)


@triton.jit
def strided_offsets(rows, row_stride, group_starts, time_stride, SHIFT: tl.constexpr, VEC: tl.constexpr,
                    ROWS_PER_THREAD: tl.constexpr = 1):
    """Offsets of the steps of a strided tile, [rows, groups, VEC]: step ``group_starts[g] + SHIFT + k``
    at lane k.

    Time-major rows have no contiguous steps to load as a vector. Told that no offsets are
    contiguous, Triton lays the tile out with one element per thread position, neighbouring rows on
    neighbouring lanes (so each step of a group is one coalesced load across the tile's rows) and the
    VEC steps of a group in one thread (the shape's last dimension, which no lane or warp covers); a
    group is then scanned in registers as a batch-major one is. Told the truth (rows contiguous),
    Triton puts 4 rows in each thread and spreads the steps over lanes.

    ROWS_PER_THREAD negated (-1, -2, -4: ``in_processing_order``) holds each group's steps in the processing
    order of a backward scan (descending), so that a direct scan recurs through them in register order.

    ROWS_PER_THREAD = 2 (row pairs) or 4 tells Triton that each run of that many neighbouring rows is
    contiguous and starts at a multiple of its length, so a thread holds those rows and loads a step of
    all of them as one vector (pairs: 8 bytes of float32, 4 of bf16; four rows: 8 bytes of bf16). That
    holds only where the rows are one element apart and the time stride is a multiple of
    ROWS_PER_THREAD, which the launcher checks (``_launch._grouped_meta``) before it asks for them.
    ``True`` is one row per thread.
    """
    lanes = tl.arange(0, VEC)
    if in_processing_order(ROWS_PER_THREAD):
        lanes = VEC - 1 - lanes
    lanes += SHIFT
    starts = rows[:, None] * row_stride + group_starts[None, :] * time_stride
    offsets = starts[:, :, None] + (lanes.to(tl.int64) * time_stride)[None, None, :]
    if ROWS_PER_THREAD == 2 or ROWS_PER_THREAD == -2:
        offsets = tl.multiple_of(tl.max_contiguous(offsets, [2, 1, 1]), [2, 1, 1])
    elif ROWS_PER_THREAD == 4 or ROWS_PER_THREAD == -4:
        offsets = tl.multiple_of(tl.max_contiguous(offsets, [4, 1, 1]), [4, 1, 1])
    else:
        offsets = tl.max_contiguous(offsets, [1, 1, 1])
    return offsets, group_starts[:, None] + lanes[None, :]


@triton.jit
def strided_mask(row_ok, group_starts, steps, seq_len, SHIFT: tl.constexpr):
    """In-range mask of a strided tile: by group (a row length of whole groups: every step of a group
    is in range, or none is; the chunk before the first, which a backward walk's last load ahead
    names, lies at negative steps), or by step where SHIFT moves steps across group edges. Whole tiles
    (``row_ok`` None) load unshifted steps without one (``load_chunk``)."""
    if row_ok is None:
        return ((steps >= 0) & (steps < seq_len))[None, :, :]
    elif SHIFT == 0:
        in_time = (group_starts >= 0) & (group_starts < seq_len)
        return (row_ok[:, None] & in_time[None, :])[:, :, None]
    else:
        return row_ok[:, None, None] & ((steps >= 0) & (steps < seq_len))[None, :, :]


@triton.jit
def load_chunk(ptr, rows, row_ok, row_stride, chunk, time_stride, seq_len, other, DTYPE: tl.constexpr,
               BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr, BACKWARD: tl.constexpr,
               SHIFT: tl.constexpr = 0, FLAG: tl.constexpr = False, STRIDED: tl.constexpr = False):
    """A chunk tile in processing order (``chunk_steps``' shape), of time steps shifted by SHIFT.

    Steps outside [0, seq_len) read ``other``. FLAG tiles (bool, integer or float storage) become
    0/1: any non-zero value is set. Grouped tiles (VEC > 1) hold contiguous steps per thread, so
    their loads are vectorised in either scan direction; their ``row_stride`` must be a multiple of
    VEC, as must the row length (``whole_groups``). STRIDED grouped tiles read each step of a group
    across the tile's rows instead (``strided_offsets``: for any strides; the row length still a
    multiple of VEC).
    """
    if STRIDED:
        groups = chunk_groups(chunk, BLOCK_TIME, BACKWARD, VEC)
        offsets, steps = strided_offsets(rows, row_stride, groups, time_stride, SHIFT, VEC, STRIDED)
        if row_ok is None and SHIFT == 0:
            values = tl.load(ptr + offsets)
        else:
            values = tl.load(ptr + offsets, mask=strided_mask(row_ok, groups, steps, seq_len, SHIFT), other=other)
    else:
        steps = chunk_steps(chunk, BLOCK_TIME, BACKWARD, VEC) + SHIFT
        offsets = row_offsets(rows, row_stride, VEC) + tl.expand_dims(steps, 0) * time_stride
        if row_ok is None and SHIFT == 0:
            values = tl.load(ptr + offsets)
        else:
            values = tl.load(ptr + offsets, mask=step_mask(row_ok, steps, seq_len, VEC), other=other)
    if FLAG:
        return (values != 0).to(DTYPE)
    return values.to(DTYPE)


@triton.jit
def shift_group(x, edge, SHIFT: tl.constexpr, N: tl.constexpr):
    """Each group of a [rows, groups, N] tile moved one step along memory order, by ``tl.split`` and
    ``tl.join`` (renamed registers): [x1, ..., x(N-1), edge] for SHIFT = 1, [edge, x0, ..., x(N-2)]
    for SHIFT = -1, with ``edge`` [rows, groups, 1] the step just past the group on that side."""
    even, odd = tl.split(tl.reshape(x, [x.shape[0], x.shape[1], N // 2, 2]))
    if SHIFT > 0:
        # new even positions: the odd steps; new odd positions: the even steps moved by one
        if N == 2:
            moved = edge
        else:
            moved = shift_group(even, edge, SHIFT, N // 2)
        pairs = tl.join(odd, moved)
    else:
        if N == 2:
            moved = edge
        else:
            moved = shift_group(odd, edge, SHIFT, N // 2)
        pairs = tl.join(moved, even)
    return tl.reshape(pairs, [x.shape[0], x.shape[1], N])


@triton.jit
def shifted_chunk(x, ptr, rows, row_ok, row_stride, chunk, time_stride, seq_len, other, DTYPE: tl.constexpr,
                  BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr, BACKWARD: tl.constexpr,
                  SHIFT: tl.constexpr, FLAG: tl.constexpr = False, STRIDED: tl.constexpr = False):
    """``load_chunk(..., SHIFT=SHIFT)`` given ``x``, the same chunk unshifted: grouped tiles take all
    but one step of each group from ``x`` and load only the step just past the group (one scalar per
    thread and group instead of VEC, whose shifted addresses could not be loaded as one vector)."""
    if VEC == 1:
        return load_chunk(ptr, rows, row_ok, row_stride, chunk, time_stride, seq_len, other, DTYPE,
                          BLOCK_ROWS, BLOCK_TIME, VEC, BACKWARD, SHIFT=SHIFT, FLAG=FLAG)
    else:
        edge_offset: tl.constexpr = VEC if SHIFT > 0 else -1
        if STRIDED:
            groups = chunk_groups(chunk, BLOCK_TIME, BACKWARD, VEC)
            offsets, steps = strided_offsets(rows, row_stride, groups, time_stride, edge_offset, 1, STRIDED)
            edge = tl.load(ptr + offsets, mask=strided_mask(row_ok, groups, steps, seq_len, edge_offset), other=other)
        else:
            groups = tl.arange(0, BLOCK_TIME // VEC)[:, None]
            if BACKWARD:
                groups = BLOCK_TIME // VEC - 1 - groups
            edge_steps = tl.cast(chunk, tl.int64) * BLOCK_TIME + groups * VEC + edge_offset
            mask = step_mask(row_ok, edge_steps, seq_len, VEC)
            edge = tl.load(ptr + row_offsets(rows, row_stride, VEC) + tl.expand_dims(edge_steps, 0) * time_stride,
                           mask=mask, other=other)
        if FLAG:
            edge = (edge != 0).to(DTYPE)
        else:
            edge = edge.to(DTYPE)
        if in_processing_order(STRIDED):
            # descending steps: the step after in memory sits one lane before
            return shift_group(x, edge, -SHIFT, VEC)
        return shift_group(x, edge, SHIFT, VEC)


@triton.jit
def load_episode_flags(terminated_ptr, truncated_ptr, rows, row_ok, s_term_row, s_term_time, s_trunc_row,
                       s_trunc_time, chunk, seq_len, HAS_TRUNCATED: tl.constexpr, DTYPE: tl.constexpr,
                       BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr,
                       BACKWARD: tl.constexpr, STRIDED: tl.constexpr = False):
    """(terminated, truncated) tiles of a chunk as 0/1; truncated is zeros when a call passes none."""
    terminated = load_chunk(terminated_ptr, rows, row_ok, s_term_row, chunk, s_term_time, seq_len, 0, DTYPE,
                            BLOCK_ROWS, BLOCK_TIME, VEC, BACKWARD, FLAG=True, STRIDED=STRIDED)
    truncated = tl.zeros_like(terminated)
    if HAS_TRUNCATED:
        truncated = load_chunk(truncated_ptr, rows, row_ok, s_trunc_row, chunk, s_trunc_time, seq_len, 0, DTYPE,
                               BLOCK_ROWS, BLOCK_TIME, VEC, BACKWARD, FLAG=True, STRIDED=STRIDED)
    return terminated, truncated


@triton.jit
def store_chunk(ptr, rows, row_ok, row_stride, chunk, time_stride, seq_len, values,
                BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr, BACKWARD: tl.constexpr,
                STRIDED: tl.constexpr = False):
    """Store a chunk tile given in processing order (the inverse of load_chunk)."""
    if STRIDED:
        groups = chunk_groups(chunk, BLOCK_TIME, BACKWARD, VEC)
        offsets, steps = strided_offsets(rows, row_stride, groups, time_stride, 0, VEC, STRIDED)
    else:
        steps = chunk_steps(chunk, BLOCK_TIME, BACKWARD, VEC)
        offsets = row_offsets(rows, row_stride, VEC) + tl.expand_dims(steps, 0) * time_stride
    if row_ok is None:
        tl.store(ptr + offsets, as_stored(values, ptr))
    elif STRIDED:
        tl.store(ptr + offsets, as_stored(values, ptr), mask=strided_mask(row_ok, groups, steps, seq_len, 0))
    else:
        tl.store(ptr + offsets, as_stored(values, ptr), mask=step_mask(row_ok, steps, seq_len, VEC))
