"""Retrace(lambda): prologue (expected next Q, traces c[t+1]) and epilogue (targets, advantages).

Three kernels; ``_launch._retrace_kernels`` picks how a call runs.

``retrace_scan_kernel`` with ``REDUCE`` (the fused kernel: batch-major rows of up to 1024 steps in one
chunk, and batch-major time splits of up to 4 actions) runs two passes chunk by chunk in one program: it reduces the
chunk's per-action tensors, stores E_pi[Q(s_{t+1}, .)] into the targets and pi(a_t | s_t) / mu(a_t | s_t)
into the advantages, waits at a barrier, then reads them back with the per-step inputs and scans on
the shared engine (``kernels/scan.py``), overwriting them with the results. The values travel through
the L2 cache; nothing beyond the outputs is allocated. A walked segment's redo recomputes them from
the inputs by the same code. Where its programs walk segments and the actions fit one group
(``AHEAD``), each next chunk's per-action tiles are loaded with its other inputs before the current
chunk is scanned, and reduced when their chunk's turn comes (``retrace_ahead_*``).

``retrace_actions_kernel`` (or ``retrace_flat_actions_kernel``) then ``retrace_scan_kernel`` without
``REDUCE`` do the same in two launches (other batch-major rows and time splits, walked time-major splits,
time-major rows not split): a streaming reduction with no scan, then the scan. The flat kernel reads dense
per-action tensors of 17-31 actions as one contiguous run of memory per block of steps and sums each step's
actions by a segmented scan; the tiled kernel reads ``[rows, time, passes, lanes]`` tiles (below).
The ratio of step t+1 is read at t from the advantages inside a chunk (still the first pass's
value: every program stores only the chunk it has loaded) and recomputed from the inputs at a
chunk's edge, so no program reads a value another has overwritten. A walked segment's redo would
re-read chunks that its own walk has overwritten: it recomputes their E and ratios from the inputs,
as the fused kernel does.

Outputs half as wide as the compute dtype (bf16/fp16 outputs of float32, float32 outputs of
float64; ``HALVES``) cannot hold E in one of them: E is stored as the high and the low half of its
bits, one half per output, and the ratios are gathered from the inputs in the scan instead. Every
value is then exactly the wide outputs' value, rounded once.

``retrace_kernel`` does it in one pass (time-major splits too short to walk, and outputs narrower than
half the compute dtype). Every input is read once. The per-action tensors are
read as ``[rows, time, passes, lanes]`` tiles: a warp reads ``ACTION_LANES`` neighbouring actions
of a few steps at once (a few cache lines per load) and each thread keeps ``ACTION_PASSES`` such
lane groups of its steps, so the sums over actions are mostly additions in registers (a warp spread over all actions of one step spends
more time shuffling than loading). pi(a_t | s_t) is picked from the same tile. The values of step
t+1 (trace c[t+1] and Q(s_{t+1}, a_{t+1})) are the previous elements in processing order, shifted
within the chunk by a scan and, at its edge, carried from the chunk processed before (one column
read when time is split across programs). A program that walks several chunks issues the loads of
the next chunk before it works on the current one.
"""

import triton
import triton.language as tl

from rl_triton.kernels.scan import (
    as_stored,
    chunk_carry,
    chunk_steps,
    claim_segment,
    claim_work,
    last_column,
    load_chunk,
    load_episode_flags,
    load_flag,
    load_tile,
    per_step,
    row_offsets,
    scan_chunk_with_previous,
    scan_program,
    scan_with_previous,
    step_mask,
    store_chunk,
    store_tile,
    tile_rows,
    whole_groups,
)


@triton.jit
def taken_action_prob(probs_ptr, s_probs_row, s_probs_time, s_probs_action, rows, steps, actions, mask, num_actions,
                      DTYPE: tl.constexpr):
    """pi(a_t | s_t) at the taken action, by a gather; NaN where the action index is out of range."""
    in_range = (actions >= 0) & (actions < num_actions)
    offsets = rows * s_probs_row + steps * s_probs_time + actions.to(tl.int64) * s_probs_action
    prob = tl.load(probs_ptr + offsets, mask=mask & in_range, other=0.0).to(DTYPE)
    return tl.where(in_range, prob, float("nan"))


@triton.jit
def trace_of(taken, behavior, trace_scale, c_clip):
    """c = lambda * min(c_bar, pi / mu); NaN ratios stay NaN."""
    return trace_scale * tl.minimum(taken / behavior, c_clip, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def ratio_from_inputs(probs_target_ptr, probs_behavior_ptr, actions_ptr, s_pt_row, s_pt_time, s_pt_action,
                      s_pb_row, s_pb_time, s_act_row, s_act_time, rows, steps, mask, num_actions, other,
                      DTYPE: tl.constexpr):
    """pi(a_t | s_t) / mu(a_t | s_t) at ``rows`` x ``steps`` (broadcast together), read from the inputs
    (a gather of the taken action's probability); ``other`` where ``mask`` is off, NaN where the
    action index is out of range."""
    actions = tl.load(actions_ptr + rows * s_act_row + steps * s_act_time, mask=mask, other=0)
    behavior = tl.load(probs_behavior_ptr + rows * s_pb_row + steps * s_pb_time, mask=mask, other=1.0).to(DTYPE)
    taken = taken_action_prob(probs_target_ptr, s_pt_row, s_pt_time, s_pt_action, rows, steps, actions, mask,
                              num_actions, DTYPE)
    return tl.where(mask, taken / behavior, other)


@triton.jit
def action_group(first_action, ACTION_LANES: tl.constexpr, ACTION_PASSES: tl.constexpr):
    """[1, 1, passes, lanes] action indices of a group: pass p, lane l holds action first + p * lanes + l."""
    passes = tl.arange(0, ACTION_PASSES)[:, None]
    lanes = tl.arange(0, ACTION_LANES)[None, :]
    return (first_action + passes * ACTION_LANES + lanes)[None, None, :, :]


@triton.jit
def load_action_tiles(probs_ptr, s_pt_row, s_pt_time, s_pt_action, next_q_ptr, s_nq_row, s_nq_time, s_nq_action,
                      rows, steps, mask, first_action, num_actions,
                      ACTION_LANES: tl.constexpr, ACTION_PASSES: tl.constexpr):
    """pi(. | s_t) and Q(s_{t+1}, .) of one action group, as stored: [rows, time, passes, lanes] tiles.

    The lanes of a step are the fastest dimension (the warp reads ``ACTION_LANES`` neighbouring
    actions of a few steps at once) and the passes stay inside each thread, so the sums over
    actions are mostly additions in registers.
    """
    action = action_group(first_action, ACTION_LANES, ACTION_PASSES)
    tile_mask = mask[:, :, None, None] & (action < num_actions)
    action = action.to(tl.int64)
    base_pt = rows[:, None, None, None] * s_pt_row + steps[None, :, None, None] * s_pt_time
    base_nq = rows[:, None, None, None] * s_nq_row + steps[None, :, None, None] * s_nq_time
    probs = tl.load(probs_ptr + base_pt + action * s_pt_action, mask=tile_mask, other=0.0)
    next_q = tl.load(next_q_ptr + base_nq + action * s_nq_action, mask=tile_mask, other=0.0)
    return probs, next_q


@triton.jit
def reduce_action_tiles(probs, next_q, taken_lane, first_action,
                        ACTION_LANES: tl.constexpr, ACTION_PASSES: tl.constexpr, DTYPE: tl.constexpr):
    """(sum_a pi * Q_next, pi at ``taken_lane``) over one action group; 0 where the group lacks the action."""
    action = action_group(first_action, ACTION_LANES, ACTION_PASSES)
    probs = probs.to(DTYPE)
    weighted = tl.sum(tl.sum(probs * next_q.to(DTYPE), axis=3), axis=2)
    # exactly one lane holds the taken action: a sum of one value and zeros is that value
    picked = tl.sum(tl.sum(tl.where(action == taken_lane[:, :, None, None], probs, 0.0), axis=3), axis=2)
    return weighted, picked


@triton.jit
def chunk_window(position, num_chunks, seq_len, row_ok, BLOCK_TIME: tl.constexpr):
    """Time indices (descending) and in-range mask of the chunk at ``position`` in processing order.

    Positions past the last chunk give an all-false mask: prefetching "the chunk after the last" reads nothing.
    """
    steps = chunk_steps(num_chunks - 1 - position, BLOCK_TIME, True)
    return steps, row_ok[:, None] & ((steps >= 0) & (steps < seq_len))[None, :]


@triton.jit
def chunk_inputs(
    probs_target_ptr, probs_behavior_ptr, q_values_ptr, next_q_ptr, actions_ptr, rewards_ptr,
    terminated_ptr, truncated_ptr,
    s_pt_row, s_pt_time, s_pt_action, s_nq_row, s_nq_time, s_nq_action,
    s_pb_row, s_pb_time, s_q_row, s_q_time, s_act_row, s_act_time, s_rewards_row, s_rewards_time,
    s_term_row, s_term_time, s_trunc_row, s_trunc_time,
    rows, steps, mask, num_actions, ACTION_LANES: tl.constexpr, ACTION_PASSES: tl.constexpr, DTYPE: tl.constexpr,
):
    """Every load of one chunk (the per-action tiles of the first action group only)."""
    reward = load_tile(rewards_ptr, rows, s_rewards_row, steps, s_rewards_time, mask, 0.0, DTYPE)
    q_value = load_tile(q_values_ptr, rows, s_q_row, steps, s_q_time, mask, 0.0, DTYPE)
    terminated = load_flag(terminated_ptr, rows, s_term_row, steps, s_term_time, mask, DTYPE)
    truncated = load_flag(truncated_ptr, rows, s_trunc_row, steps, s_trunc_time, mask, DTYPE)
    behavior = load_tile(probs_behavior_ptr, rows, s_pb_row, steps, s_pb_time, mask, 1.0, DTYPE)
    actions = tl.load(actions_ptr + rows[:, None] * s_act_row + steps[None, :] * s_act_time, mask=mask, other=0)
    probs, next_q = load_action_tiles(
        probs_target_ptr, s_pt_row, s_pt_time, s_pt_action, next_q_ptr, s_nq_row, s_nq_time, s_nq_action,
        rows, steps, mask, 0, num_actions, ACTION_LANES, ACTION_PASSES,
    )
    return reward, q_value, terminated, truncated, behavior, actions, probs, next_q


@triton.jit
def keep_previous(x_first, y_first, previous_x_first, previous_y_first, known_first,
                  x_second, y_second, previous_x_second, previous_y_second, known_second):
    # a segment's value: its last element and the element before that, which `known` says lies in
    # the segment (or came from the chunk edge); a combined segment always holds both
    return (
        x_second,
        y_second,
        tl.where(known_second, previous_x_second, x_first),
        tl.where(known_second, previous_y_second, y_first),
        known_first | known_second | True,
    )


@triton.jit
def previous_in_order(x, y, x_before, y_before, BLOCK_TIME: tl.constexpr):
    """x and y one step earlier in processing order (one step later in time); ``*_before`` enter at the chunk edge.

    A scan of selects: exact, and a NaN or inf of one step reaches no other.
    """
    first = (tl.arange(0, BLOCK_TIME) == 0)[None, :]
    x_edge = tl.where(first, x_before[:, None], tl.zeros_like(x))
    y_edge = tl.where(first, y_before[:, None], tl.zeros_like(y))
    _, _, x_previous, y_previous, _ = tl.associative_scan(
        (x, y, x_edge, y_edge, tl.broadcast_to(first, x.shape)), 1, keep_previous
    )
    return x_previous, y_previous


@triton.jit(do_not_specialize=["spent_words"])
def retrace_kernel(
    probs_target_ptr, probs_behavior_ptr, q_values_ptr, next_q_ptr, actions_ptr, rewards_ptr,
    terminated_ptr, truncated_ptr, targets_ptr, advantages_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_actions, num_chunks, num_row_tiles,
    s_pt_row, s_pt_time, s_pt_action, s_nq_row, s_nq_time, s_nq_action,
    s_pb_row, s_pb_time, s_q_row, s_q_time, s_act_row, s_act_time, s_rewards_row, s_rewards_time,
    s_term_row, s_term_time, s_trunc_row, s_trunc_time, s_out_row, s_out_time,
    gamma: tl.float64, lambda_: tl.float64, c_bar: tl.float64, rho_bar: tl.float64, spent_ptr, spent_words,
    SPLIT: tl.constexpr, PREFETCH: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr,
    ACTION_LANES: tl.constexpr, ACTION_PASSES: tl.constexpr, MORE_ACTIONS: tl.constexpr, WINDOW: tl.constexpr,
    DTYPE: tl.constexpr,
):
    row_tile, order, my_chunks = claim_work(counter_ptr, spent_ptr, spent_words, num_row_tiles, num_chunks, SPLIT)
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    discount = tl.cast(gamma, DTYPE)
    trace_scale = tl.cast(lambda_, DTYPE)
    c_clip = tl.cast(c_bar, DTYPE)
    rho_clip = tl.cast(rho_bar, DTYPE)
    group_size: tl.constexpr = ACTION_LANES * ACTION_PASSES
    # D, c and Q(s, a) at the step after the chunk (beyond the rollout: D[T] = c[T] = 0, Q_ret[T] := 0)
    carry = tl.zeros([BLOCK_ROWS], DTYPE)
    trace_after = tl.zeros([BLOCK_ROWS], DTYPE)
    q_after = tl.zeros([BLOCK_ROWS], DTYPE)
    steps, mask = chunk_window(order, num_chunks, seq_len, row_ok, BLOCK_TIME)
    inputs = chunk_inputs(
        probs_target_ptr, probs_behavior_ptr, q_values_ptr, next_q_ptr, actions_ptr, rewards_ptr,
        terminated_ptr, truncated_ptr, s_pt_row, s_pt_time, s_pt_action, s_nq_row, s_nq_time, s_nq_action,
        s_pb_row, s_pb_time, s_q_row, s_q_time, s_act_row, s_act_time, s_rewards_row, s_rewards_time,
        s_term_row, s_term_time, s_trunc_row, s_trunc_time,
        rows, steps, mask, num_actions, ACTION_LANES, ACTION_PASSES, DTYPE,
    )
    for i in range(my_chunks):
        if PREFETCH:
            # Triton does not pipeline loads into registers: issue the next chunk's before this one's work
            next_steps, next_mask = chunk_window(order + i + 1, num_chunks, seq_len, row_ok, BLOCK_TIME)
            next_inputs = chunk_inputs(
                probs_target_ptr, probs_behavior_ptr, q_values_ptr, next_q_ptr, actions_ptr, rewards_ptr,
                terminated_ptr, truncated_ptr, s_pt_row, s_pt_time, s_pt_action, s_nq_row, s_nq_time, s_nq_action,
                s_pb_row, s_pb_time, s_q_row, s_q_time, s_act_row, s_act_time, s_rewards_row, s_rewards_time,
                s_term_row, s_term_time, s_trunc_row, s_trunc_time,
                rows, next_steps, next_mask, num_actions, ACTION_LANES, ACTION_PASSES, DTYPE,
            )
        elif i > 0:
            steps, mask = chunk_window(order + i, num_chunks, seq_len, row_ok, BLOCK_TIME)
            inputs = chunk_inputs(
                probs_target_ptr, probs_behavior_ptr, q_values_ptr, next_q_ptr, actions_ptr, rewards_ptr,
                terminated_ptr, truncated_ptr, s_pt_row, s_pt_time, s_pt_action, s_nq_row, s_nq_time, s_nq_action,
                s_pb_row, s_pb_time, s_q_row, s_q_time, s_act_row, s_act_time, s_rewards_row, s_rewards_time,
                s_term_row, s_term_time, s_trunc_row, s_trunc_time,
                rows, steps, mask, num_actions, ACTION_LANES, ACTION_PASSES, DTYPE,
            )
        reward, q_value, terminated, truncated, behavior, actions, probs, next_q = inputs
        if SPLIT:
            # this program has not seen the chunk after its own: read that chunk's first step
            after = tl.cast(num_chunks - order, tl.int64) * BLOCK_TIME
            after_ok = row_ok & (after < seq_len)
            q_after = tl.load(q_values_ptr + rows * s_q_row + after * s_q_time, mask=after_ok, other=0.0).to(DTYPE)
            ratio_after = ratio_from_inputs(probs_target_ptr, probs_behavior_ptr, actions_ptr, s_pt_row, s_pt_time,
                                            s_pt_action, s_pb_row, s_pb_time, s_act_row, s_act_time, rows, after,
                                            after_ok, num_actions, 0.0, DTYPE)
            # c[T] := 0 past the rollout: the ratio is 0 there
            trace_after = trace_scale * tl.minimum(ratio_after, c_clip, propagate_nan=tl.PropagateNan.ALL)

        in_range = (actions >= 0) & (actions < num_actions)
        # in-range indices fit in int32 (whatever their storage type); -1 matches no action
        taken_lane = tl.where(in_range, actions.to(tl.int32), -1)
        expected_next_q, taken = reduce_action_tiles(probs, next_q, taken_lane, 0, ACTION_LANES, ACTION_PASSES,
                                                     DTYPE)
        if MORE_ACTIONS:
            # more actions than one group holds: the rest are read here, without prefetch
            for first_action in range(group_size, num_actions, group_size):
                more_probs, more_next_q = load_action_tiles(
                    probs_target_ptr, s_pt_row, s_pt_time, s_pt_action, next_q_ptr, s_nq_row, s_nq_time, s_nq_action,
                    rows, steps, mask, first_action, num_actions, ACTION_LANES, ACTION_PASSES,
                )
                more_weighted, more_taken = reduce_action_tiles(more_probs, more_next_q, taken_lane, first_action,
                                                                ACTION_LANES, ACTION_PASSES, DTYPE)
                expected_next_q += more_weighted
                taken += more_taken
        taken = tl.where(in_range, taken, float("nan"))
        ratio = taken / behavior
        # c[t] := 0 beyond the rollout, so the decay of step T-1 reads c[T] = 0
        trace = tl.where(mask, trace_of(taken, behavior, trace_scale, c_clip), 0.0)
        trace_next, q_next = previous_in_order(trace, q_value, trace_after, q_after, BLOCK_TIME)

        not_done = 1.0 - tl.maximum(terminated, truncated)
        delta = reward + discount * expected_next_q * (1.0 - terminated) - q_value
        decay = discount * trace_next * not_done
        scan_a, scan_b, next_a, next_b = scan_with_previous(tl.where(mask, delta, 0.0),
                                                            tl.where(mask, decay, 1.0))
        if SPLIT:
            carry = chunk_carry(status_ptr, aggregate_ptr, prefix_ptr, row_tile, order, num_chunks,
                                last_column(scan_a, BLOCK_TIME), last_column(scan_b, BLOCK_TIME), carry,
                                BLOCK_ROWS, WINDOW)
        correction = scan_a + scan_b * carry[:, None]
        target_next = q_next + next_a + next_b * carry[:, None]  # Q_ret[t+1]; Q_ret[T] := 0
        rho = tl.minimum(ratio, rho_clip, propagate_nan=tl.PropagateNan.ALL)
        advantage = rho * (reward + discount * target_next * (1.0 - terminated) - q_value)
        store_tile(targets_ptr, rows, s_out_row, steps, s_out_time, correction + q_value, mask)
        store_tile(advantages_ptr, rows, s_out_row, steps, s_out_time, advantage, mask)
        carry = last_column(correction, BLOCK_TIME)
        trace_after = last_column(trace, BLOCK_TIME)
        q_after = last_column(q_value, BLOCK_TIME)
        if PREFETCH:
            inputs = next_inputs
            steps, mask = next_steps, next_mask


@triton.jit
def store_bit_halves(high_ptr, low_ptr, rows, row_stride, steps, time_stride, values, mask, DTYPE: tl.constexpr):
    """``values`` (float32 or float64) as the high and the low half of their bits, one half per output of
    half their width (bf16/fp16 or float32 outputs): exact where one such output could not hold them."""
    store_halves_at(high_ptr, low_ptr, rows[:, None] * row_stride + steps[None, :] * time_stride, values, mask, DTYPE)


@triton.jit
def store_halves_at(high_ptr, low_ptr, offsets, values, mask, DTYPE: tl.constexpr):
    """``store_bit_halves`` at element ``offsets`` of both outputs."""
    if DTYPE == tl.float64:
        bits = values.to(tl.int64, bitcast=True)
        high = (bits >> 32).to(tl.int32)
        low = bits.to(tl.int32)
        half_type: tl.constexpr = tl.int32
    else:
        bits = values.to(tl.int32, bitcast=True)
        high = (bits >> 16).to(tl.int16)
        low = bits.to(tl.int16)
        half_type: tl.constexpr = tl.int16
    tl.store(high_ptr.to(tl.pointer_type(half_type)) + offsets, high, mask=mask)
    tl.store(low_ptr.to(tl.pointer_type(half_type)) + offsets, low, mask=mask)


@triton.jit
def load_bit_halves(high_ptr, low_ptr, rows, row_ok, row_stride, chunk, time_stride, seq_len, DTYPE: tl.constexpr,
                    BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr):
    """A chunk of the values ``store_bit_halves`` stored (0 outside the rollout), in processing order."""
    if DTYPE == tl.float64:
        high = load_chunk(high_ptr.to(tl.pointer_type(tl.int32)), rows, row_ok, row_stride, chunk, time_stride,
                          seq_len, 0, tl.int64, BLOCK_ROWS, BLOCK_TIME, VEC, True)
        low = load_chunk(low_ptr.to(tl.pointer_type(tl.uint32)), rows, row_ok, row_stride, chunk, time_stride,
                         seq_len, 0, tl.int64, BLOCK_ROWS, BLOCK_TIME, VEC, True)
        return ((high << 32) | low).to(tl.float64, bitcast=True)
    else:
        high = load_chunk(high_ptr.to(tl.pointer_type(tl.int16)), rows, row_ok, row_stride, chunk, time_stride,
                          seq_len, 0, tl.int32, BLOCK_ROWS, BLOCK_TIME, VEC, True)
        low = load_chunk(low_ptr.to(tl.pointer_type(tl.uint16)), rows, row_ok, row_stride, chunk, time_stride,
                         seq_len, 0, tl.int32, BLOCK_ROWS, BLOCK_TIME, VEC, True)
        return ((high << 16) | low).to(tl.float32, bitcast=True)


@triton.jit
def chunk_ratio(probs_target_ptr, probs_behavior_ptr, actions_ptr, s_pt_row, s_pt_time, s_pt_action, s_pb_row,
                s_pb_time, s_act_row, s_act_time, rows, row_ok, chunk, seq_len, num_actions, other,
                DTYPE: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, VEC: tl.constexpr,
                SHIFT: tl.constexpr):
    """pi(a_t | s_t) / mu(a_t | s_t) of a chunk's steps shifted by SHIFT, from the inputs (a gather of the
    taken action's probability); ``other`` outside the rollout, NaN where the action is out of range."""
    chunk_time = chunk_steps(chunk, BLOCK_TIME, True, VEC) + SHIFT
    return ratio_from_inputs(probs_target_ptr, probs_behavior_ptr, actions_ptr, s_pt_row, s_pt_time, s_pt_action,
                             whole_groups(s_pb_row, VEC), s_pb_time, whole_groups(s_act_row, VEC), s_act_time,
                             per_step(rows, VEC),
                             tl.expand_dims(chunk_time, 0), step_mask(row_ok, chunk_time, seq_len, VEC), num_actions,
                             other, DTYPE)


@triton.jit
def store_action_values(
    probs_target_ptr, next_q_ptr, probs_behavior_ptr, actions_ptr, expected_ptr, ratio_ptr,
    s_pt_row, s_pt_time, s_pt_action, s_nq_row, s_nq_time, s_nq_action, s_pb_row, s_pb_time,
    s_act_row, s_act_time, s_out_row, s_out_time, rows, row_ok, steps, seq_len, num_actions,
    ACTION_LANES: tl.constexpr, ACTION_PASSES: tl.constexpr, MORE_ACTIONS: tl.constexpr, DTYPE: tl.constexpr,
    HALVES: tl.constexpr,
):
    """E_pi[Q(s_{t+1}, .)] = sum_a pi(a | s_t) Q(s_{t+1}, a) and pi(a_t | s_t) / mu(a_t | s_t) of a [rows, steps]
    tile (``steps`` 1-d), stored at ``expected_ptr`` and ``ratio_ptr`` (NaN ratio: action index out of range).

    HALVES (outputs of half the compute dtype's width): E alone, the high half of its bits at
    ``expected_ptr`` and the low half at ``ratio_ptr``; the scan takes the ratios from the inputs.
    """
    mask = row_ok[:, None] & ((steps >= 0) & (steps < seq_len))[None, :]
    if not HALVES:
        actions = tl.load(actions_ptr + rows[:, None] * s_act_row + steps[None, :] * s_act_time, mask=mask, other=0)
    else:
        actions = tl.full(mask.shape, -1, tl.int32)
    in_range, taken_lane = taken_lanes(actions, num_actions)
    expected_next_q = tl.zeros(mask.shape, DTYPE)
    taken = tl.zeros(mask.shape, DTYPE)
    group_size: tl.constexpr = ACTION_LANES * ACTION_PASSES
    num_groups = tl.cdiv(num_actions, group_size) if MORE_ACTIONS else 1
    for group in range(num_groups):
        probs, next_q = load_action_tiles(
            probs_target_ptr, s_pt_row, s_pt_time, s_pt_action, next_q_ptr, s_nq_row, s_nq_time, s_nq_action,
            rows, steps, mask, group * group_size, num_actions, ACTION_LANES, ACTION_PASSES,
        )
        weighted, picked = reduce_action_tiles(probs, next_q, taken_lane, group * group_size, ACTION_LANES,
                                               ACTION_PASSES, DTYPE)
        expected_next_q += weighted
        taken += picked
    if HALVES:
        behavior = taken  # a placeholder: with HALVES only E is stored
    else:
        behavior = load_tile(probs_behavior_ptr, rows, s_pb_row, steps, s_pb_time, mask, 1.0, DTYPE)
    store_expected_and_ratio(expected_ptr, ratio_ptr, rows, s_out_row, steps, s_out_time, mask, expected_next_q, taken,
                             in_range, behavior, DTYPE, HALVES)


@triton.jit
def taken_lanes(actions, num_actions):
    """(whether each action index is in range, the lane that holds it: -1 matches no action)."""
    in_range = (actions >= 0) & (actions < num_actions)
    # in-range indices fit in int32 (whatever their storage type)
    return in_range, tl.where(in_range, actions.to(tl.int32), -1)


@triton.jit
def store_expected_and_ratio(expected_ptr, ratio_ptr, rows, s_out_row, steps, s_out_time, mask, expected_next_q, taken,
                             in_range, behavior, DTYPE: tl.constexpr, HALVES: tl.constexpr):
    """E and pi(a_t | s_t) / mu(a_t | s_t) (NaN: action index out of range) of a [rows, steps] tile into the
    outputs; HALVES: E alone, the high half of its bits at ``expected_ptr`` and the low half at ``ratio_ptr``."""
    if HALVES:
        store_bit_halves(expected_ptr, ratio_ptr, rows, s_out_row, steps, s_out_time, expected_next_q, mask, DTYPE)
    else:
        ratio = tl.where(in_range, taken, float("nan")) / behavior
        store_tile(expected_ptr, rows, s_out_row, steps, s_out_time, expected_next_q, mask)
        store_tile(ratio_ptr, rows, s_out_row, steps, s_out_time, ratio, mask)


@triton.jit
def retrace_actions_kernel(
    probs_target_ptr, next_q_ptr, probs_behavior_ptr, actions_ptr, expected_ptr, ratio_ptr,
    num_rows, seq_len, num_actions, num_time_tiles,
    s_pt_row, s_pt_time, s_pt_action, s_nq_row, s_nq_time, s_nq_action, s_pb_row, s_pb_time,
    s_act_row, s_act_time, s_out_row, s_out_time,
    BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, ACTION_LANES: tl.constexpr, ACTION_PASSES: tl.constexpr,
    MORE_ACTIONS: tl.constexpr, DTYPE: tl.constexpr, HALVES: tl.constexpr,
):
    """First pass: ``store_action_values`` of one [rows, steps] tile."""
    tile = tl.program_id(0)
    rows, row_ok = tile_rows(tile // num_time_tiles, num_rows, BLOCK_ROWS)
    steps = tl.cast(tile % num_time_tiles, tl.int64) * BLOCK_TIME + tl.arange(0, BLOCK_TIME)
    store_action_values(
        probs_target_ptr, next_q_ptr, probs_behavior_ptr, actions_ptr, expected_ptr, ratio_ptr,
        s_pt_row, s_pt_time, s_pt_action, s_nq_row, s_nq_time, s_nq_action, s_pb_row, s_pb_time,
        s_act_row, s_act_time, s_out_row, s_out_time, rows, row_ok, steps, seq_len, num_actions,
        ACTION_LANES, ACTION_PASSES, MORE_ACTIONS, DTYPE, HALVES,
    )


@triton.jit
def segment_sum(value_a, starts_a, value_b, starts_b):
    # sums within segments: a value that starts a segment drops everything before it
    return tl.where(starts_b, value_b, value_a + value_b), starts_a | starts_b


@triton.jit
def retrace_flat_actions_kernel(
    probs_target_ptr, next_q_ptr, probs_behavior_ptr, actions_ptr, expected_ptr, ratio_ptr,
    num_steps, seq_len, s_pb_row, s_pb_time, s_act_row, s_act_time,
    NUM_ACTIONS: tl.constexpr, BLOCK_STEPS: tl.constexpr, STEP_LANES: tl.constexpr, BLOCK_VALUES: tl.constexpr,
    ROW_MAJOR: tl.constexpr, DTYPE: tl.constexpr, HALVES: tl.constexpr,
):
    """First pass over dense ``[rows, time, actions]`` tensors, of one block of ``BLOCK_STEPS`` steps.

    The per-action values of a block of steps are one contiguous run of memory, read as such: 16-byte
    vectors in every lane, whatever the number of actions (a ``[steps, actions]`` tile of 18 actions
    leaves 14 of 32 lanes idle and cannot prove 16-byte alignment). E = sum_a pi * Q_next is a segmented
    sum over that run, one segment per step, and is stored by the lane that holds the step's last
    action. The ratio pi(a_t | s_t) / mu(a_t | s_t) is taken per step, by a gather from the same run.
    The outputs are dense ``[rows, time]``; the behaviour probabilities and actions have any strides
    (``ROW_MAJOR``: a row stride of ``seq_len`` time strides, where a step's offset needs no division).
    ``HALVES``: E alone, as ``store_bit_halves`` stores it (the scan takes the ratios from the inputs).
    """
    first_step = tl.program_id(0).to(tl.int64) * BLOCK_STEPS
    lanes = tl.arange(0, BLOCK_VALUES)
    flat = first_step * NUM_ACTIONS + lanes
    mask = (lanes < BLOCK_STEPS * NUM_ACTIONS) & (flat < num_steps * NUM_ACTIONS)
    probs = tl.load(probs_target_ptr + flat, mask=mask, other=0.0).to(DTYPE)
    next_q = tl.load(next_q_ptr + flat, mask=mask, other=0.0).to(DTYPE)
    action = lanes % NUM_ACTIONS
    expected_next_q, _ = tl.associative_scan((probs * next_q, action == 0), 0, segment_sum)
    last_actions = mask & (action == NUM_ACTIONS - 1)
    if HALVES:
        store_halves_at(expected_ptr, ratio_ptr, first_step + lanes // NUM_ACTIONS, expected_next_q, last_actions,
                        DTYPE)
        return
    tl.store(expected_ptr + first_step + lanes // NUM_ACTIONS, as_stored(expected_next_q, expected_ptr),
             mask=last_actions)
    step_lanes = tl.arange(0, STEP_LANES)
    steps = first_step + step_lanes
    step_ok = (step_lanes < BLOCK_STEPS) & (steps < num_steps)
    if ROW_MAJOR:
        action_offsets = steps * s_act_time
        behavior_offsets = steps * s_pb_time
    else:
        rows = steps // seq_len
        times = steps - rows * seq_len
        action_offsets = rows * s_act_row + times * s_act_time
        behavior_offsets = rows * s_pb_row + times * s_pb_time
    actions = tl.load(actions_ptr + action_offsets, mask=step_ok, other=0)
    in_range, taken_lane = taken_lanes(actions, NUM_ACTIONS)
    taken = tl.load(probs_target_ptr + steps * NUM_ACTIONS + taken_lane, mask=step_ok & in_range, other=0.0)
    behavior = tl.load(probs_behavior_ptr + behavior_offsets, mask=step_ok, other=1.0)
    ratio = tl.where(in_range, taken.to(DTYPE), float("nan")) / behavior.to(DTYPE)
    tl.store(ratio_ptr + steps, as_stored(ratio, ratio_ptr), mask=step_ok)


@triton.jit
def load_stored_values(args, CONSTS: tl.constexpr, chunk, steps):
    """E, the ratio and the ratio of step t+1 of one chunk, in the scan's layout, from what the first pass
    (or this program, a barrier before) stored into the outputs (HALVES: E from its two halves, both
    ratios gathered from the inputs)."""
    DTYPE: tl.constexpr = CONSTS[0]
    BLOCK_ROWS: tl.constexpr = CONSTS[1]
    BLOCK_TIME: tl.constexpr = CONSTS[2]
    VEC: tl.constexpr = CONSTS[3]
    HALVES: tl.constexpr = CONSTS[4]
    pointers, strides, num_actions, _, rows, row_ok, seq_len = args
    _, _, _, _, expected_ptr, ratio_ptr, probs_target_ptr, probs_behavior_ptr, actions_ptr, _ = pointers
    (_, _, _, _, _, _, _, _, s_out_row, s_out_time, s_pt_row, s_pt_time, s_pt_action, s_pb_row, s_pb_time,
     s_act_row, s_act_time, _, _, _) = strides
    if HALVES:
        expected_next_q = load_bit_halves(expected_ptr, ratio_ptr, rows, row_ok, s_out_row, chunk, s_out_time, seq_len,
                                          DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC)
        # the ratios of steps t and t+1 from the inputs (0 past the rollout: c[T] := 0)
        ratio = chunk_ratio(probs_target_ptr, probs_behavior_ptr, actions_ptr, s_pt_row, s_pt_time, s_pt_action,
                            s_pb_row, s_pb_time, s_act_row, s_act_time, rows, row_ok, chunk, seq_len, num_actions,
                            1.0, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC, 0)
        ratio_next = chunk_ratio(probs_target_ptr, probs_behavior_ptr, actions_ptr, s_pt_row, s_pt_time, s_pt_action,
                                 s_pb_row, s_pb_time, s_act_row, s_act_time, rows, row_ok, chunk, seq_len,
                                 num_actions, 0.0, DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC, 1)
    else:
        expected_next_q = load_chunk(expected_ptr, rows, row_ok, s_out_row, chunk, s_out_time, seq_len, 0.0, DTYPE,
                                     BLOCK_ROWS, BLOCK_TIME, VEC, True)
        ratio = load_chunk(ratio_ptr, rows, row_ok, s_out_row, chunk, s_out_time, seq_len, 1.0, DTYPE,
                           BLOCK_ROWS, BLOCK_TIME, VEC, True)
        # the ratio of step t+1: inside the chunk from the first pass (not yet overwritten: this program
        # stores the chunk only after loading it); the first step of the next chunk, which another
        # program may already have overwritten, from the inputs; 0 past the rollout (c[T] := 0)
        next_steps = steps + 1
        at_edge = tl.expand_dims(next_steps % BLOCK_TIME == 0, 0)
        inside = step_mask(row_ok, next_steps, seq_len, VEC) & (at_edge == 0)
        ratio_next = tl.load(ratio_ptr + row_offsets(rows, s_out_row, VEC) + tl.expand_dims(next_steps, 0) * s_out_time,
                             mask=inside, other=0.0).to(DTYPE)
        edge = (tl.cast(chunk, tl.int64) + 1) * BLOCK_TIME
        edge_ratio = ratio_from_inputs(probs_target_ptr, probs_behavior_ptr, actions_ptr, s_pt_row, s_pt_time,
                                       s_pt_action, s_pb_row, s_pb_time, s_act_row, s_act_time, rows, edge,
                                       row_ok & (edge < seq_len), num_actions, 0.0, DTYPE)
        ratio_next = tl.where(at_edge, per_step(edge_ratio, VEC), ratio_next)
    return expected_next_q, ratio, ratio_next


@triton.jit
def retrace_scan_load(args, CONSTS: tl.constexpr, chunk, steps):
    """The loads of one chunk of the second pass (``kernels/scan.py``: ``scan_program``): the per-step
    inputs (``per_step_inputs``), then E, the ratio and the ratio of step t+1 (``load_stored_values``)."""
    reward, q_value, q_next, terminated, truncated = per_step_inputs(args, CONSTS, chunk)
    expected_next_q, ratio, ratio_next = load_stored_values(args, CONSTS, chunk, steps)
    return reward, q_value, q_next, terminated, truncated, expected_next_q, ratio, ratio_next


@triton.jit
def per_step_inputs(args, CONSTS: tl.constexpr, chunk):
    """Reward, Q(s_t, a_t), Q(s_{t+1}, a_{t+1}) and the episode flags of one chunk, in the scan's layout."""
    DTYPE: tl.constexpr = CONSTS[0]
    BLOCK_ROWS: tl.constexpr = CONSTS[1]
    BLOCK_TIME: tl.constexpr = CONSTS[2]
    VEC: tl.constexpr = CONSTS[3]
    pointers, strides, _, _, rows, row_ok, seq_len = args
    q_values_ptr, rewards_ptr, terminated_ptr, truncated_ptr, _, _, _, _, _, _ = pointers
    (s_q_row, s_q_time, s_rewards_row, s_rewards_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time,
     _, _, _, _, _, _, _, _, _, _, _, _) = strides
    reward = load_chunk(rewards_ptr, rows, row_ok, s_rewards_row, chunk, s_rewards_time, seq_len, 0.0, DTYPE,
                        BLOCK_ROWS, BLOCK_TIME, VEC, True)
    q_value = load_chunk(q_values_ptr, rows, row_ok, s_q_row, chunk, s_q_time, seq_len, 0.0, DTYPE,
                         BLOCK_ROWS, BLOCK_TIME, VEC, True)
    # Q(s_T, a_T) := 0 past the rollout (Q_ret[T] := 0)
    q_next = load_chunk(q_values_ptr, rows, row_ok, s_q_row, chunk, s_q_time, seq_len, 0.0, DTYPE,
                        BLOCK_ROWS, BLOCK_TIME, VEC, True, SHIFT=1)
    terminated, truncated = load_episode_flags(terminated_ptr, truncated_ptr, rows, row_ok, s_term_row, s_term_time,
                                               s_trunc_row, s_trunc_time, chunk, seq_len, True, DTYPE,
                                               BLOCK_ROWS, BLOCK_TIME, VEC, True)
    return reward, q_value, q_next, terminated, truncated


@triton.jit
def retrace_scan_chunk(args, CONSTS: tl.constexpr, inputs, mask, carry):
    """TD errors and decays of one chunk, scanned: (A, B, A_next, B_next) with D = A + B * carry in and
    D one step later A_next + B_next * carry in."""
    VEC: tl.constexpr = CONSTS[3]
    discount, trace_scale, c_clip, _ = args[3]
    reward, q_value, _, terminated, truncated, expected_next_q, _, ratio_next = inputs
    delta = reward + discount * expected_next_q * (1.0 - terminated) - q_value
    not_done = 1.0 - tl.maximum(terminated, truncated)
    decay = discount * trace_scale * tl.minimum(ratio_next, c_clip, propagate_nan=tl.PropagateNan.ALL) * not_done
    return scan_chunk_with_previous(tl.where(mask, delta, 0.0), tl.where(mask, decay, 1.0), True, VEC, carry)


@triton.jit
def retrace_scan_store(args, CONSTS: tl.constexpr, inputs, scanned, carry, chunk):
    """Targets and advantages of one chunk, from the carry into it, over the first pass's values."""
    BLOCK_ROWS: tl.constexpr = CONSTS[1]
    BLOCK_TIME: tl.constexpr = CONSTS[2]
    VEC: tl.constexpr = CONSTS[3]
    pointers, strides, _, scalars, rows, row_ok, seq_len = args
    discount, _, _, rho_clip = scalars
    reward, q_value, q_next, terminated, _, _, ratio, _ = inputs
    scan_a, scan_b, next_a, next_b = scanned
    # Retrace builds maps (its kernel takes no DIRECT): the carry is never None here
    correction = scan_a + scan_b * per_step(carry, VEC)
    target_next = q_next + next_a + next_b * per_step(carry, VEC)  # Q_ret[t+1]; Q_ret[T] := 0
    rho = tl.minimum(ratio, rho_clip, propagate_nan=tl.PropagateNan.ALL)
    advantage = rho * (reward + discount * target_next * (1.0 - terminated) - q_value)
    store_chunk(pointers[4], rows, row_ok, strides[8], chunk, strides[9], seq_len, correction + q_value,
                BLOCK_ROWS, BLOCK_TIME, VEC, True)
    store_chunk(pointers[5], rows, row_ok, strides[8], chunk, strides[9], seq_len, advantage,
                BLOCK_ROWS, BLOCK_TIME, VEC, True)


@triton.jit
def retrace_fused_load(args, CONSTS: tl.constexpr, chunk, steps):
    """One chunk of the fused kernel: its E and ratios computed and stored into the outputs (in
    sub-tiles of SUB_STEPS steps), a barrier, then ``retrace_scan_load``'s loads of them and the
    per-step inputs. A redo of the chunk recomputes the same values by the same code."""
    DTYPE: tl.constexpr = CONSTS[0]
    BLOCK_TIME: tl.constexpr = CONSTS[2]
    HALVES: tl.constexpr = CONSTS[4]
    ACTION_LANES: tl.constexpr = CONSTS[5]
    ACTION_PASSES: tl.constexpr = CONSTS[6]
    MORE_ACTIONS: tl.constexpr = CONSTS[7]
    SUB_STEPS: tl.constexpr = CONSTS[8]
    pointers, strides, num_actions, _, rows, row_ok, seq_len = args
    (_, _, _, _, _, _, _, _, s_out_row, s_out_time, s_pt_row, s_pt_time, s_pt_action, s_pb_row, s_pb_time, s_act_row,
     s_act_time, s_nq_row, s_nq_time, s_nq_action) = strides
    first_step = tl.cast(chunk, tl.int64) * BLOCK_TIME
    for sub in range(BLOCK_TIME // SUB_STEPS):
        store_action_values(
            pointers[6], pointers[9], pointers[7], pointers[8], pointers[4], pointers[5],
            s_pt_row, s_pt_time, s_pt_action, s_nq_row, s_nq_time, s_nq_action, s_pb_row, s_pb_time,
            s_act_row, s_act_time, s_out_row, s_out_time, rows, row_ok,
            first_step + sub * SUB_STEPS + tl.arange(0, SUB_STEPS), seq_len, num_actions,
            ACTION_LANES, ACTION_PASSES, MORE_ACTIONS, DTYPE, HALVES,
        )
    # the values were stored by other threads of this program
    tl.debug_barrier()
    return retrace_scan_load(args, CONSTS, chunk, steps)


@triton.jit
def retrace_ahead_load(args, CONSTS: tl.constexpr, chunk, steps):
    """One chunk of the fused kernel where it walks segments: every load of the chunk, the per-action tiles
    of its one action group included, issued before the program scans the chunk before it (``scan_program``
    loads ahead); ``retrace_ahead_scan`` reduces them."""
    DTYPE: tl.constexpr = CONSTS[0]
    BLOCK_TIME: tl.constexpr = CONSTS[2]
    ACTION_LANES: tl.constexpr = CONSTS[5]
    ACTION_PASSES: tl.constexpr = CONSTS[6]
    pointers, strides, num_actions, _, rows, row_ok, seq_len = args
    (_, _, _, _, _, _, _, _, _, _, s_pt_row, s_pt_time, s_pt_action, s_pb_row, s_pb_time, s_act_row, s_act_time,
     s_nq_row, s_nq_time, s_nq_action) = strides
    reward, q_value, q_next, terminated, truncated = per_step_inputs(args, CONSTS, chunk)
    # the chunk loaded ahead past a segment's end is chunk -1 (``chunk_window``): nothing of it is read
    time = tl.cast(chunk, tl.int64) * BLOCK_TIME + tl.arange(0, BLOCK_TIME)
    mask = row_ok[:, None] & ((time >= 0) & (time < seq_len))[None, :]
    actions = tl.load(pointers[8] + rows[:, None] * s_act_row + time[None, :] * s_act_time, mask=mask, other=0)
    behavior = load_tile(pointers[7], rows, s_pb_row, time, s_pb_time, mask, 1.0, DTYPE)
    probs, next_q = load_action_tiles(pointers[6], s_pt_row, s_pt_time, s_pt_action, pointers[9], s_nq_row,
                                      s_nq_time, s_nq_action, rows, time, mask, 0, num_actions, ACTION_LANES,
                                      ACTION_PASSES)
    return reward, q_value, q_next, terminated, truncated, actions, behavior, probs, next_q, chunk, steps


@triton.jit
def retrace_ahead_scan(args, CONSTS: tl.constexpr, inputs, mask, carry):
    """The chunk's E and ratios from its loaded per-action tiles, stored into the outputs; a barrier; then
    ``retrace_scan_chunk`` over them, read back in the scan's layout. Returns its maps and the ratios."""
    DTYPE: tl.constexpr = CONSTS[0]
    BLOCK_TIME: tl.constexpr = CONSTS[2]
    HALVES: tl.constexpr = CONSTS[4]
    ACTION_LANES: tl.constexpr = CONSTS[5]
    ACTION_PASSES: tl.constexpr = CONSTS[6]
    pointers, strides, num_actions, _, rows, row_ok, seq_len = args
    reward, q_value, q_next, terminated, truncated, actions, behavior, probs, next_q, chunk, steps = inputs
    time = tl.cast(chunk, tl.int64) * BLOCK_TIME + tl.arange(0, BLOCK_TIME)
    tile_mask = row_ok[:, None] & ((time >= 0) & (time < seq_len))[None, :]
    in_range, taken_lane = taken_lanes(actions, num_actions)
    expected_next_q, taken = reduce_action_tiles(probs, next_q, taken_lane, 0, ACTION_LANES, ACTION_PASSES, DTYPE)
    store_expected_and_ratio(pointers[4], pointers[5], rows, strides[8], time, strides[9], tile_mask, expected_next_q,
                             taken, in_range, behavior, DTYPE, HALVES)
    # the values were stored by other threads of this program
    tl.debug_barrier()
    expected_next_q, ratio, ratio_next = load_stored_values(args, CONSTS, chunk, steps)
    scan_a, scan_b, next_a, next_b = retrace_scan_chunk(
        args, CONSTS, (reward, q_value, q_next, terminated, truncated, expected_next_q, ratio, ratio_next), mask,
        carry)
    return scan_a, scan_b, next_a, next_b, ratio


@triton.jit
def retrace_ahead_store(args, CONSTS: tl.constexpr, inputs, scanned, carry, chunk):
    """``retrace_scan_store`` of a chunk that ``retrace_ahead_scan`` scanned (the ratios come with its maps)."""
    reward, q_value, q_next, terminated, truncated = inputs[0], inputs[1], inputs[2], inputs[3], inputs[4]
    ratio = scanned[4]
    retrace_scan_store(args, CONSTS, (reward, q_value, q_next, terminated, truncated, ratio, ratio, ratio),
                       (scanned[0], scanned[1], scanned[2], scanned[3]), carry, chunk)


@triton.jit(do_not_specialize=["spent_words"])
def retrace_scan_kernel(
    q_values_ptr, rewards_ptr, terminated_ptr, truncated_ptr, targets_ptr, advantages_ptr,
    probs_target_ptr, probs_behavior_ptr, actions_ptr, next_q_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_actions, num_chunks, num_row_tiles, segment_chunks,
    s_q_row, s_q_time, s_rewards_row, s_rewards_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time,
    s_out_row, s_out_time, s_pt_row, s_pt_time, s_pt_action, s_pb_row, s_pb_time, s_act_row, s_act_time,
    s_nq_row, s_nq_time, s_nq_action,
    gamma: tl.float64, lambda_: tl.float64, c_bar: tl.float64, rho_bar: tl.float64, spent_ptr, spent_words,
    REDUCE: tl.constexpr, SPLIT: tl.constexpr, WALK: tl.constexpr, PREFETCH: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, WINDOW: tl.constexpr, DTYPE: tl.constexpr,
    VEC: tl.constexpr, ACTION_LANES: tl.constexpr, ACTION_PASSES: tl.constexpr, MORE_ACTIONS: tl.constexpr,
    SUB_STEPS: tl.constexpr, HALVES: tl.constexpr, AHEAD: tl.constexpr,
):
    """Targets into ``targets_ptr`` and advantages into ``advantages_ptr``, from E and the ratios
    stored there.

    REDUCE (both passes in one program per chunk): each chunk's E and ratios are first computed
    from the per-action inputs (``retrace_fused_load``; AHEAD, only with REDUCE, for walks of one
    action group: ``retrace_ahead_load`` and ``retrace_ahead_scan``), through the outputs and the L2 cache.
    Otherwise ``retrace_actions_kernel`` stored them before this launch. Walked segments (WALK) may be
    redone: the redo recomputes a chunk's E and ratios from the inputs (``retrace_fused_load``; AHEAD:
    ``retrace_ahead_load``), in sub-tiles of SUB_STEPS steps. A scan of two passes that does not walk reads
    no per-action argument after the actions (next-Q and its strides, ACTION_*, SUB_STEPS).
    """
    # even segments: measured on an H200 with 4 actions, % of the copy bandwidth at 8x2^21 / 1x2^24, two
    # interleaved runs (benchmarks/results/h200-2026-11-30-run15-even-segments.txt): 73.4-73.6 / 73.6-74.2
    # -> 77.3-78.1 / 74.7-75.6. The other kernels keep segments of segment_chunks: even ones read GAE
    # 72 -> 54% and V-trace 85 -> 69% at 8x2^21 in the same runs.
    row_tile, order, first, my_chunks = claim_segment(counter_ptr, spent_ptr, spent_words, num_row_tiles, num_chunks,
                                                      segment_chunks, SPLIT, EVEN=WALK)
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    arg_inputs = (
        (q_values_ptr, rewards_ptr, terminated_ptr, truncated_ptr, targets_ptr, advantages_ptr, probs_target_ptr,
         probs_behavior_ptr, actions_ptr, next_q_ptr),
        (s_q_row, s_q_time, s_rewards_row, s_rewards_time, s_term_row, s_term_time, s_trunc_row, s_trunc_time,
         s_out_row, s_out_time, s_pt_row, s_pt_time, s_pt_action, s_pb_row, s_pb_time, s_act_row, s_act_time,
         s_nq_row, s_nq_time, s_nq_action),
        num_actions,
        (tl.cast(gamma, DTYPE), tl.cast(lambda_, DTYPE), tl.cast(c_bar, DTYPE), tl.cast(rho_bar, DTYPE)),
        seq_len,
    )
    args = arg_inputs[:-1] + (rows, row_ok, seq_len)
    # the chunk functions, by the kernel's form; a walked segment's redo re-reads chunks this program has
    # already overwritten, so it recomputes their E and ratios from the inputs in every form
    load_fn: tl.constexpr = retrace_ahead_load if AHEAD else (retrace_fused_load if REDUCE else retrace_scan_load)
    redo_load_fn: tl.constexpr = retrace_ahead_load if AHEAD else retrace_fused_load
    scan_fn: tl.constexpr = retrace_ahead_scan if AHEAD else retrace_scan_chunk
    store_fn: tl.constexpr = retrace_ahead_store if AHEAD else retrace_scan_store
    scan_program(load_fn, redo_load_fn, scan_fn, store_fn, args,
                 (DTYPE, BLOCK_ROWS, BLOCK_TIME, VEC, HALVES, ACTION_LANES, ACTION_PASSES, MORE_ACTIONS, SUB_STEPS),
                 tl.zeros([BLOCK_ROWS], DTYPE), row_tile, order, first, my_chunks, num_chunks, segment_chunks,
                 seq_len, row_ok, status_ptr, aggregate_ptr, prefix_ptr, SPLIT, WALK, PREFETCH, True, BLOCK_ROWS,
                 BLOCK_TIME, WINDOW, VEC, arg_inputs=arg_inputs, num_rows=num_rows)
