"""Retrace(lambda): prologue (expected next Q, traces c[t+1]) and epilogue (targets, advantages)."""

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
def taken_action_prob(probs_ptr, s_probs_row, s_probs_time, s_probs_action, rows, steps, actions, mask, num_actions,
                      DTYPE: tl.constexpr):
    """pi(a_t | s_t) at the taken action; NaN where the action index is out of range."""
    in_range = (actions >= 0) & (actions < num_actions)
    offsets = rows[:, None] * s_probs_row + steps[None, :] * s_probs_time + actions.to(tl.int64) * s_probs_action
    prob = tl.load(probs_ptr + offsets, mask=mask & in_range, other=0.0).to(DTYPE)
    return tl.where(in_range, prob, float("nan"))


@triton.jit
def retrace_kernel(
    probs_target_ptr, probs_behavior_ptr, q_values_ptr, next_q_ptr, actions_ptr, rewards_ptr,
    terminated_ptr, truncated_ptr, targets_ptr, advantages_ptr,
    status_ptr, aggregate_ptr, prefix_ptr, counter_ptr,
    num_rows, seq_len, num_actions, num_chunks, num_row_tiles,
    s_pt_row, s_pt_time, s_pt_action, s_nq_row, s_nq_time, s_nq_action,
    s_pb_row, s_pb_time, s_q_row, s_q_time, s_act_row, s_act_time, s_rewards_row, s_rewards_time,
    s_term_row, s_term_time, s_trunc_row, s_trunc_time, s_out_row, s_out_time,
    gamma: tl.float64, lambda_: tl.float64, c_bar: tl.float64, rho_bar: tl.float64,
    SPLIT: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_TIME: tl.constexpr, BLOCK_ACTIONS: tl.constexpr,
    WINDOW: tl.constexpr, DTYPE: tl.constexpr,
):
    row_tile, order, my_chunks = claim_work(counter_ptr, num_row_tiles, num_chunks, SPLIT)
    rows, row_ok = tile_rows(row_tile, num_rows, BLOCK_ROWS)
    action_lanes = tl.arange(0, BLOCK_ACTIONS)
    discount = tl.cast(gamma, DTYPE)
    trace_scale = tl.cast(lambda_, DTYPE)
    c_clip = tl.cast(c_bar, DTYPE)
    rho_clip = tl.cast(rho_bar, DTYPE)
    carry = tl.zeros([BLOCK_ROWS], DTYPE)
    for i in range(my_chunks):
        steps = chunk_steps(num_chunks - 1 - order - i, BLOCK_TIME, True)
        mask = row_ok[:, None] & (steps < seq_len)[None, :]
        next_ok = row_ok[:, None] & (steps + 1 < seq_len)[None, :]
        reward = load_tile(rewards_ptr, rows, s_rewards_row, steps, s_rewards_time, mask, 0.0, DTYPE)
        q_value = load_tile(q_values_ptr, rows, s_q_row, steps, s_q_time, mask, 0.0, DTYPE)
        q_next = load_tile(q_values_ptr, rows, s_q_row, steps + 1, s_q_time, next_ok, 0.0, DTYPE)
        terminated = load_flag(terminated_ptr, rows, s_term_row, steps, s_term_time, mask, DTYPE)
        truncated = load_flag(truncated_ptr, rows, s_trunc_row, steps, s_trunc_time, mask, DTYPE)

        # E_pi[Q(s_{t+1}, .)] over action blocks
        expected_next_q = tl.zeros([BLOCK_ROWS, BLOCK_TIME], DTYPE)
        base_pt = rows[:, None, None] * s_pt_row + steps[None, :, None] * s_pt_time
        base_nq = rows[:, None, None] * s_nq_row + steps[None, :, None] * s_nq_time
        for first_action in range(0, num_actions, BLOCK_ACTIONS):
            action = (first_action + action_lanes).to(tl.int64)[None, None, :]
            action_mask = mask[:, :, None] & (action < num_actions)
            probs = tl.load(probs_target_ptr + base_pt + action * s_pt_action, mask=action_mask, other=0.0)
            next_q = tl.load(next_q_ptr + base_nq + action * s_nq_action, mask=action_mask, other=0.0)
            expected_next_q += tl.sum(probs.to(DTYPE) * next_q.to(DTYPE), axis=2)

        actions = tl.load(actions_ptr + rows[:, None] * s_act_row + steps[None, :] * s_act_time, mask=mask, other=0)
        taken = taken_action_prob(probs_target_ptr, s_pt_row, s_pt_time, s_pt_action, rows, steps, actions, mask,
                                  num_actions, DTYPE)
        behavior = load_tile(probs_behavior_ptr, rows, s_pb_row, steps, s_pb_time, mask, 1.0, DTYPE)
        ratio = taken / behavior

        # the decay at t uses the trace of step t+1 (c[T] := 0)
        actions_next = tl.load(actions_ptr + rows[:, None] * s_act_row + (steps + 1)[None, :] * s_act_time,
                               mask=next_ok, other=0)
        taken_next = taken_action_prob(probs_target_ptr, s_pt_row, s_pt_time, s_pt_action, rows, steps + 1,
                                       actions_next, next_ok, num_actions, DTYPE)
        behavior_next = load_tile(probs_behavior_ptr, rows, s_pb_row, steps + 1, s_pb_time, next_ok, 1.0, DTYPE)
        trace_next = trace_scale * tl.minimum(taken_next / behavior_next, c_clip, propagate_nan=tl.PropagateNan.ALL)
        trace_next = tl.where(next_ok, trace_next, 0.0)

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
