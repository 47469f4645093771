"""compute_retrace: float64 oracle, hand-computed values, identities, episodes, layouts, dtypes, errors."""

import math

import pytest
import torch

import rl_triton
from conftest import (
    DTYPES,
    HALF_TOLERANCE,
    HAS_CUDA,
    SHAPES,
    TILE_CASES,
    TOLERANCE,
    Snapshot,
    assert_outputs_rel,
    assert_rel,
    broken,
    episode_slices,
    every_other_step,
    name_pattern,
    on_another_device,
    small_tiles,
    time_major_storage,
)
from rl_triton import _checks, _dispatch, _launch, reference
from rl_triton.ops.gae import compute_gae
from rl_triton.ops.retrace import compute_retrace

STEP_FIELDS = (
    "probs_target",
    "probs_behavior",
    "q_values",
    "next_q_values_all",
    "actions",
    "rewards",
    "terminateds",
    "truncateds",
)


def retrace_kwargs(ro, *, gamma=0.99, lambda_=0.9, c_bar=1.0, rho_bar=1.0):
    return {
        "action_probs_target": ro.probs_target,
        "action_probs_behavior": ro.probs_behavior,
        "q_values": ro.q_values,
        "next_q_values_all": ro.next_q_values_all,
        "actions": ro.actions,
        "rewards": ro.rewards,
        "terminateds": ro.terminateds,
        "truncateds": ro.truncateds,
        "gamma": gamma,
        "lambda_": lambda_,
        "c_bar": c_bar,
        "rho_bar": rho_bar,
    }


def oracle(ro, **kwargs):
    return reference.compute_retrace(**retrace_kwargs(ro.oracle_inputs(), **kwargs))


def shift_next(x):
    """y[:, t] = x[:, t+1], y[:, T-1] = 0."""
    out = torch.zeros_like(x)
    out[:, :-1] = x[:, 1:]
    return out


@pytest.mark.parametrize("dtype, rows, seq_len", SHAPES)
def test_matches_oracle(backend, dtype, rows, seq_len, make_rollout):
    ro = make_rollout(rows, seq_len, dtype=dtype)
    targets, advantages = compute_retrace(**retrace_kwargs(ro))
    assert targets.dtype == advantages.dtype == dtype
    assert_outputs_rel((targets, advantages), oracle(ro), TOLERANCE[dtype])


# 1: a single action; 4: a power of two; 18: Atari's action set, masked lanes in a block of 32;
# 33: one more than the 32-wide action block, so the actions take more than one pass
@pytest.mark.parametrize("num_actions", [1, 4, 18, 33])
@pytest.mark.parametrize("dtype", DTYPES)
def test_num_actions(backend, dtype, num_actions, make_rollout):
    ro = make_rollout(3, 65, dtype=dtype, num_actions=num_actions)
    assert_outputs_rel(compute_retrace(**retrace_kwargs(ro)), oracle(ro), TOLERANCE[dtype])


# rows of 65-128 steps with 17 or more actions: one step per thread in the fused kernel (_launch.retrace)
@pytest.mark.parametrize("rows, seq_len", [(5, 128), (2, 100)])
def test_one_chunk_rows_of_many_actions(backend, rows, seq_len, make_rollout):
    ro = make_rollout(rows, seq_len, dtype=torch.float32, num_actions=18)
    assert_outputs_rel(compute_retrace(**retrace_kwargs(ro)), oracle(ro), TOLERANCE[torch.float32])


@pytest.mark.parametrize(
    "gamma, lambda_, c_bar, rho_bar",
    [
        (0.0, 0.9, 1.0, 1.0),
        (1.0, 0.9, 1.0, 1.0),
        (0.99, 0.0, 1.0, 1.0),
        (0.99, 1.0, 1.0, 1.0),
        (0.99, 0.9, 2.0, 1.0),
        (0.99, 0.9, 0.5, 3.0),
        (0.99, 0.9, math.inf, math.inf),
        (0.99, 0.9, 0.0, 0.0),
    ],
)
def test_parameters(backend, gamma, lambda_, c_bar, rho_bar, make_rollout):
    ro = make_rollout(3, 65)
    params = {"gamma": gamma, "lambda_": lambda_, "c_bar": c_bar, "rho_bar": rho_bar}
    assert_outputs_rel(compute_retrace(**retrace_kwargs(ro, **params)), oracle(ro, **params), TOLERANCE[torch.float32])


@pytest.mark.parametrize("tile, rows, seq_len", TILE_CASES)
def test_tiles(tile, rows, seq_len, make_rollout):
    ro = make_rollout(rows, seq_len, num_actions=5)
    # c[t+1] and Q_ret[t+1] cross every chunk edge
    with _dispatch.use_backend("triton"), _launch.tile_override(**tile):
        out = compute_retrace(**retrace_kwargs(ro, c_bar=1.5, rho_bar=2.0))
    assert_outputs_rel(out, oracle(ro, c_bar=1.5, rho_bar=2.0), TOLERANCE[torch.float32])



# Chunk edges with several action layouts: 4 and 18 actions (one action group), 33 (a second group
# read without prefetch) and 18 in lane groups of 2 (16 passes) and of 8 (4 passes); the defaults are
# 8 lanes in one pass and 2 otherwise. Loop (with and without loading the next chunk ahead) and split
# programs; c[t+1] and Q(s_{t+1}, a_{t+1}) cross every chunk edge, in each of Retrace's kernels (the
# two-pass and fused ones take the ratio of the next chunk's first step from the inputs: that chunk's
# program may already have overwritten its place in the advantages).
ACTION_TILES = [
    pytest.param(4, None, id="a4"),
    pytest.param(18, None, id="a18"),
    pytest.param(33, None, id="a33"),
    pytest.param(18, 2, id="a18-lanes2"),
    pytest.param(18, 8, id="a18-lanes8"),
]
KERNELS = pytest.mark.parametrize("kernels", ["one-pass", "two-pass", "fused"])


def launch_retrace(ro, *, action_lanes=None, **params):
    """The Triton launcher called directly, for the action lanes that the public function keeps at their default."""
    kwargs = retrace_kwargs(ro, **params)
    targets = torch.empty_like(ro.rewards)
    advantages = torch.empty_like(ro.rewards)
    _launch.retrace(
        targets, advantages, *(kwargs[name] for name in list(kwargs)[:8]),
        kwargs["gamma"], kwargs["lambda_"], kwargs["c_bar"], kwargs["rho_bar"],
        action_lanes=action_lanes,
    )
    return targets, advantages


@KERNELS
@pytest.mark.parametrize("num_actions, action_lanes", ACTION_TILES)
@pytest.mark.parametrize(
    "split, prefetch", [(True, None), (False, True), (False, False)], ids=["split", "loop-prefetch", "loop"]
)
def test_tiles_and_action_groups(num_actions, action_lanes, split, prefetch, kernels, make_rollout):
    ro = make_rollout(3, 70, num_actions=num_actions)
    tiles = _launch.tile_override(block_rows=2, block_time=16, split=split, prefetch=prefetch,
                                  retrace_kernels=kernels)
    with _dispatch.use_backend("triton"), tiles:
        out = launch_retrace(ro, action_lanes=action_lanes, c_bar=1.5, rho_bar=2.0)
    assert_outputs_rel(out, oracle(ro, c_bar=1.5, rho_bar=2.0), TOLERANCE[torch.float32])


@KERNELS
@pytest.mark.parametrize("split", [True, False], ids=["split", "loop"])
@pytest.mark.parametrize("bad_step", [31, 32], ids=["chunk-end", "chunk-start"])
def test_out_of_range_action_at_chunk_edge(split, bad_step, kernels, make_rollout):
    # step 32 opens a chunk of 16 steps: its trace c[32] is the edge value of the chunk before it in time
    ro = make_rollout(2, 60, num_actions=18)
    ro.terminateds[1] = 0
    ro.truncateds[1] = 0
    ro.actions[1, bad_step] = 18
    tiles = _launch.tile_override(block_rows=1, block_time=16, split=split, retrace_kernels=kernels)
    with _dispatch.use_backend("triton"), tiles:
        targets, advantages = compute_retrace(**retrace_kwargs(ro))
    expected_targets, expected_advantages = oracle(ro)
    assert targets[1, :bad_step].isnan().all() and torch.isfinite(targets[1, bad_step:]).all()
    assert advantages[1, bad_step].isnan() and torch.isfinite(advantages[1, bad_step + 1 :]).all()
    torch.testing.assert_close(targets.double(), expected_targets, rtol=1e-5, atol=1e-5, equal_nan=True)
    torch.testing.assert_close(advantages.double(), expected_advantages, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.fixture
def launched(monkeypatch) -> list[str]:
    """Names of the kernels that calls launch, in order (the launches still run)."""
    names: list[str] = []
    launch = _launch._launch

    def logged(kernel, *args, **meta):
        names.append(kernel.__name__)
        return launch(kernel, *args, **meta)

    monkeypatch.setattr(_launch, "_launch", logged)
    return names


# The first of two passes reads dense per-action tensors in flat blocks of whole steps (17-31 actions by
# default): E is a segmented sum over each block, stored by the lane of a step's last action. Blocks of
# 512-8192 values (3 actions: 168-2728 steps per block, 100 actions: 40) and the tiled pass give the
# oracle's values, with the behaviour probabilities and actions read through strides (row after row, whose
# offsets need no division, or time-major actions) and an out-of-range action giving NaN.
FIRST_PASS_CASES = [
    *((actions, steps, flat, torch.float32, layout) for actions, steps, flat, layout in [
        (3, 350, 512, "rows"), (3, 350, 8192, "time-major"), (5, 300, 1024, "time-major"), (18, 200, None, "rows"),
        (18, 200, None, "time-major"), (18, 200, 0, "rows"), (18, 200, 2048, "rows"), (20, 150, None, "time-major"),
        (33, 90, 512, "rows"), (100, 30, None, "time-major"), (100, 30, 4096, "rows")]),
    (5, 300, 512, torch.float64, "rows"), (18, 200, None, torch.float64, "time-major"),
    (18, 200, 0, torch.float64, "rows"),
]


@pytest.mark.parametrize("num_actions, seq_len, flat_values, dtype, layout", FIRST_PASS_CASES)
def test_first_pass_in_flat_blocks(num_actions, seq_len, flat_values, dtype, layout, make_rollout, launched):
    ro = make_rollout(3, seq_len, num_actions=num_actions, dtype=dtype)
    bad_step = seq_len * 2 // 3
    ro.actions[1, bad_step] = num_actions
    ro.terminateds[1, bad_step:] = 0
    ro.truncateds[1, bad_step:] = 0
    ro.probs_behavior = every_other_step(ro.probs_behavior)
    ro.actions = every_other_step(ro.actions) if layout == "rows" else time_major_storage(ro.actions)
    tiles = _launch.tile_override(retrace_kernels="two-pass", retrace_flat_values=flat_values)
    with _dispatch.use_backend("triton"), tiles:
        targets, advantages = compute_retrace(**retrace_kwargs(ro))
    flat = flat_values != 0 and (flat_values is not None or _launch._flat_first_pass(num_actions))
    assert launched[0] == ("retrace_flat_actions_kernel" if flat else "retrace_actions_kernel")
    expected_targets, expected_advantages = oracle(ro)
    assert targets[1, : bad_step + 1].isnan().any() and advantages[1, bad_step].isnan()
    assert torch.isfinite(targets[[0, 2]]).all() and torch.isfinite(advantages[1, bad_step + 1 :]).all()
    tolerance = TOLERANCE[dtype]
    torch.testing.assert_close(targets.double(), expected_targets, rtol=tolerance, atol=tolerance, equal_nan=True)
    torch.testing.assert_close(advantages.double(), expected_advantages, rtol=tolerance, atol=tolerance,
                               equal_nan=True)


@pytest.mark.parametrize("layout", [time_major_storage, lambda x: x[:, :, :-1]], ids=["time-major", "action-slice"])
def test_first_pass_of_strided_action_tensors_takes_tiles(layout, make_rollout, launched):
    ro = make_rollout(3, 100, num_actions=19)
    ro.probs_target = layout(ro.probs_target)
    ro.next_q_values_all = layout(ro.next_q_values_all)
    ro.num_actions = ro.probs_target.shape[2]
    ro.actions = ro.actions % ro.num_actions
    with _dispatch.use_backend("triton"), _launch.tile_override(retrace_kernels="two-pass"):
        out = compute_retrace(**retrace_kwargs(ro))
    assert launched[0] == "retrace_actions_kernel"
    assert_outputs_rel(out, oracle(ro), TOLERANCE[torch.float32])


# Outputs half as wide as the compute dtype (bf16/fp16 outputs of float32 compute, float32 outputs of
# float64) hold E between the reduction and the scan as the two halves of its bits, and the ratios are
# gathered from the inputs: the results are the wide outputs' values, rounded once (to nearest; Triton's
# interpreter rounds float32 to bf16 toward zero, one bf16 step at most). The one-pass kernel keeps
# no values between passes (test_half_precision).
@pytest.mark.parametrize("kernels", ["two-pass", "fused"])
@pytest.mark.parametrize(
    "input_dtype, out_dtype",
    [(torch.float32, torch.bfloat16), (torch.float16, torch.float16), (torch.float64, torch.float32)],
    ids=["f32-bf16", "f16-f16", "f64-f32"],
)
@pytest.mark.parametrize("split", [True, False], ids=["split", "loop"])
def test_narrow_outputs_round_the_wide_results_once(kernels, input_dtype, out_dtype, split, make_rollout):
    ro = make_rollout(3, 70, num_actions=18, dtype=input_dtype)
    ro.actions[2, 40] = 18  # out of range: NaN targets up to step 40 of row 2 (or its episode start)
    wide = torch.float64 if input_dtype == torch.float64 else torch.float32
    tiles = _launch.tile_override(block_rows=2, block_time=16, split=split, retrace_kernels=kernels)
    with _dispatch.use_backend("triton"), tiles:
        narrow = compute_retrace(**retrace_kwargs(ro), out_dtype=out_dtype)
        full = compute_retrace(**retrace_kwargs(ro), out_dtype=wide)
    assert narrow[1][2, 40].isnan() and torch.isfinite(narrow[1][:2]).all()
    rounding = 2.0**-7 if out_dtype == torch.bfloat16 and not HAS_CUDA else 0.0
    for got, want, expected in zip(narrow, full, oracle(ro), strict=True):
        assert got.dtype == out_dtype
        torch.testing.assert_close(got, want.to(out_dtype), rtol=rounding, atol=0, equal_nan=True)
        torch.testing.assert_close(want.double(), expected, rtol=1e-5, atol=1e-5, equal_nan=True)

GOLDEN = [
    pytest.param(
        {
            "action_probs_target": [[0.5, 0.5], [0.75, 0.25], [1.0, 0.0]],
            "next_q_values_all": [[2.0, 4.0], [4.0, 0.0], [2.0, 8.0]],
            "actions": [0, 1, 0],
            "action_probs_behavior": [1.0, 0.5, 0.5],
            "q_values": [1.0, 2.0, 3.0],
            "rewards": [1.0, 0.0, 1.0],
            "terminateds": [0, 0, 0],
            "truncateds": [0, 0, 0],
            "lambda_": 1.0,
            "c_bar": 1.0,
            "rho_bar": 1.5,
        },
        # E = sum_a pi * next_q = [1 + 2, 3 + 0, 2 + 0] = [3, 3, 2]
        # pi_a = [0.5, 0.25, 1]; ratio = pi_a / mu = [0.5, 0.5, 2]; c = [0.5, 0.5, 1]; rho = [0.5, 0.5, 1.5]
        # delta = r + 0.5 E - q = [1 + 1.5 - 1, 0 + 1.5 - 2, 1 + 1 - 3] = [1.5, -0.5, -1]
        # D2 = -1; D1 = -0.5 + 0.5 * c2 * D2 = -1; D0 = 1.5 + 0.5 * c1 * D1 = 1.25  ->  Q_ret = q + D = [2.25, 1, 2]
        # A = rho * (r + 0.5 Q_ret[t+1] - q), Q_ret[3] := 0:
        #   [0.5 * (1 + 0.5 - 1), 0.5 * (0 + 1 - 2), 1.5 * (1 + 0 - 3)] = [0.25, -0.5, -3]
        ([2.25, 1.0, 2.0], [0.25, -0.5, -3.0]),
        id="two-actions",
    ),
    pytest.param(
        {
            "action_probs_target": [[1.0], [1.0], [1.0], [1.0]],
            "next_q_values_all": [[4.0], [4.0], [4.0], [4.0]],
            "actions": [0, 0, 0, 0],
            "action_probs_behavior": [0.5, 0.5, 0.5, 0.5],
            "q_values": [2.0, 2.0, 2.0, 2.0],
            "rewards": [1.0, 1.0, 1.0, 1.0],
            "terminateds": [0, 1, 0, 0],
            "truncateds": [0, 0, 1, 0],
            "lambda_": 0.5,
            "c_bar": 1.0,
            "rho_bar": 1.0,
        },
        # ratio = 2; c = 0.5 * min(1, 2) = 0.5; rho = 1; done = [0, 1, 1, 0]
        # delta = r + 0.5 * 4 * (1 - terminated) - 2 = [1, -1, 1, 1]
        # decay[t] = 0.5 * c[t+1] * (1 - done[t]) = [0.25, 0, 0, 0 (c[4] := 0)]
        # D = [1 + 0.25 * -1, -1, 1, 1] = [0.75, -1, 1, 1]  ->  Q_ret = [2.75, 1, 3, 3]
        # A = r + 0.5 Q_ret[t+1] (1 - terminated) - q = [1 + 0.5 - 2, 1 - 2, 1 + 1.5 - 2, 1 + 0 - 2]
        # (at the truncated step t=2 the next target Q_ret[3] is used: the spec's behaviour)
        ([2.75, 1.0, 3.0, 3.0], [-0.5, -1.0, 0.5, -1.0]),
        id="termination-truncation",
    ),
]


@pytest.mark.parametrize("inputs, expected", GOLDEN)
@pytest.mark.parametrize("dtype", DTYPES)
def test_golden(backend, device, dtype, inputs, expected):
    kwargs = {
        name: torch.tensor([value], dtype=torch.int64 if name == "actions" else dtype, device=device)
        if isinstance(value, list)
        else value
        for name, value in inputs.items()
    }
    for compute in (compute_retrace, reference.compute_retrace):
        out = compute(**kwargs, gamma=0.5)
        for got, want in zip(out, expected, strict=True):
            torch.testing.assert_close(got.cpu().double(), torch.tensor([want], dtype=torch.float64), rtol=0, atol=1e-6)


def test_lambda_zero_is_expected_sarsa_target(backend, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64, num_actions=6)
    targets, advantages = compute_retrace(**retrace_kwargs(ro, gamma=0.9, lambda_=0.0, rho_bar=1.2))
    expected_next_q = (ro.probs_target * ro.next_q_values_all).sum(-1)
    assert_rel(targets, ro.rewards + 0.9 * (1 - ro.terminateds) * expected_next_q, TOLERANCE[torch.float64])
    pi_a = ro.probs_target.gather(-1, ro.actions.unsqueeze(-1)).squeeze(-1)
    rho = (pi_a / ro.probs_behavior).clamp(max=1.2)
    expected = rho * (ro.rewards + 0.9 * (1 - ro.terminateds) * shift_next(targets) - ro.q_values)
    assert_rel(advantages, expected, TOLERANCE[torch.float64])


@pytest.mark.parametrize("lambda_", [0.5, 1.0])
def test_on_policy_single_action_is_gae(backend, lambda_, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64, num_actions=1)
    ro.probs_behavior = torch.ones_like(ro.probs_behavior)
    # Q(s_{t+1}) of the only action: the next step's q, the true next value at truncations and the end
    next_q = shift_next(ro.q_values) * (1 - ro.truncateds) + ro.bootstrap_values
    ro.next_q_values_all = next_q.unsqueeze(-1)
    targets, _ = compute_retrace(**retrace_kwargs(ro, gamma=0.95, lambda_=lambda_))
    gae = compute_gae(
        ro.rewards, ro.q_values, ro.terminateds, ro.truncateds, 0.95, lambda_, bootstrap_values=ro.bootstrap_values
    )
    assert_rel(targets, gae + ro.q_values, TOLERANCE[torch.float64])


def test_episode_split(backend, make_rollout):
    # truncations are left out: at a truncated step the advantage reads the next episode's target
    ro = make_rollout(2, 100, dtype=torch.float64, term_rate=0.08, trunc_rate=0.0)
    ro.terminateds[0, 10:12] = 1
    with small_tiles():
        whole = compute_retrace(**retrace_kwargs(ro, c_bar=1.5, rho_bar=2.0))
    for row in range(2):
        slices = episode_slices(ro.terminateds[row])
        assert len(slices) >= 4
        pieces = [
            compute_retrace(
                **retrace_kwargs(
                    ro.map(lambda x, s=s, r=row: x[r : r + 1, s], fields=STEP_FIELDS), c_bar=1.5, rho_bar=2.0
                )
            )
            for s in slices
        ]
        for index in range(2):
            joined = torch.cat([piece[index] for piece in pieces], dim=1)
            assert_rel(whole[index][row : row + 1], joined, TOLERANCE[torch.float64])


def action_major_storage(x):
    """[N, T, A] values stored with the action dimension outermost (action stride N * T)."""
    return x.permute(2, 0, 1).contiguous().permute(1, 2, 0) if x.dim() == 3 else x


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param(time_major_storage, id="time-major"),
        pytest.param(every_other_step, id="step-stride-2"),
        pytest.param(action_major_storage, id="action-major"),
    ],
)
def test_strided_inputs(backend, layout, make_rollout):
    ro = make_rollout(3, 40, num_actions=5)
    expected = compute_retrace(**retrace_kwargs(ro))
    kwargs = retrace_kwargs(ro.map(layout, fields=STEP_FIELDS))
    snapshot = Snapshot(kwargs)
    for got, want in zip(compute_retrace(**kwargs), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    snapshot.assert_unchanged()


def test_expanded_inputs(backend, make_rollout):
    ro = make_rollout(3, 40, num_actions=5)
    kwargs = retrace_kwargs(ro)
    # one target distribution per env for all steps, one next-Q table for all envs
    kwargs["action_probs_target"] = ro.probs_target[:, :1].expand(3, 40, 5)
    kwargs["next_q_values_all"] = ro.next_q_values_all[:1].expand(3, 40, 5)
    kwargs["action_probs_behavior"] = ro.probs_behavior[:, :1].expand(3, 40)
    dense = {name: value.contiguous() if isinstance(value, torch.Tensor) else value for name, value in kwargs.items()}
    snapshot = Snapshot(kwargs)
    out = compute_retrace(**kwargs)
    expected = reference.compute_retrace(
        **{k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in dense.items()}
    )
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])
    snapshot.assert_unchanged()


def test_inputs_unchanged(backend, make_rollout):
    kwargs = retrace_kwargs(make_rollout(3, 40))
    snapshot = Snapshot(kwargs)
    compute_retrace(**kwargs)
    snapshot.assert_unchanged()


def test_time_dim_zero(backend, make_rollout):
    ro = make_rollout(5, 33)
    expected = compute_retrace(**retrace_kwargs(ro))
    # [T, N] per step and [T, N, A] per action
    time_major = ro.map(lambda x: x.transpose(0, 1).contiguous(), fields=STEP_FIELDS)
    out = compute_retrace(**retrace_kwargs(time_major), time_dim=0)
    for got, want in zip(out, expected, strict=True):
        assert got.shape == (33, 5)
        torch.testing.assert_close(got, want.t(), rtol=1e-6, atol=1e-6)


def test_batch_dims(backend, make_rollout):
    ro = make_rollout((2, 3), 17)
    targets, advantages = compute_retrace(**retrace_kwargs(ro))
    assert targets.shape == advantages.shape == (2, 3, 17)
    expected = tuple(x.reshape(2, 3, 17) for x in oracle(ro))
    assert_outputs_rel((targets, advantages), expected, TOLERANCE[torch.float32])


def test_interior_time_dim(backend, make_rollout):
    ro = make_rollout((2, 3), 17)
    # [B1, T, B2] per step and [B1, T, B2, A] per action with time_dim=1
    moved = ro.map(lambda x: x.movedim(2, 1), fields=STEP_FIELDS)
    out = compute_retrace(**retrace_kwargs(moved), time_dim=1)
    assert all(x.shape == (2, 17, 3) for x in out)
    expected = tuple(x.reshape(2, 3, 17) for x in oracle(ro))
    assert_outputs_rel(tuple(x.movedim(1, 2) for x in out), expected, TOLERANCE[torch.float32])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_half_precision(backend, dtype, make_rollout):
    ro = make_rollout(3, 65, dtype=dtype)
    out = compute_retrace(**retrace_kwargs(ro))
    assert all(x.dtype == dtype for x in out)
    assert_outputs_rel(out, oracle(ro), HALF_TOLERANCE)
    out32 = compute_retrace(**retrace_kwargs(ro), out_dtype=torch.float32)
    assert_outputs_rel(out32, oracle(ro), TOLERANCE[torch.float32])


@pytest.mark.parametrize(
    "flag_dtype, action_dtype",
    [(torch.bool, torch.int32), (torch.uint8, torch.int16), (torch.float32, torch.uint8)],
    ids=["bool-int32", "uint8-int16", "f32-uint8"],
)
def test_flag_and_action_dtypes(backend, flag_dtype, action_dtype, make_rollout):
    ro = make_rollout(3, 65)
    expected = compute_retrace(**retrace_kwargs(ro))
    converted = ro.map(lambda x: x.to(flag_dtype), fields=("terminateds", "truncateds"))
    converted.actions = ro.actions.to(action_dtype)
    for got, want in zip(compute_retrace(**retrace_kwargs(converted)), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_out_dtype(backend, make_rollout):
    ro = make_rollout(3, 65)
    out = compute_retrace(**retrace_kwargs(ro), out_dtype=torch.float64)
    assert all(x.dtype == torch.float64 for x in out)
    assert_outputs_rel(out, oracle(ro), TOLERANCE[torch.float32])


@pytest.mark.parametrize("bad_action", ["num_actions", -1], ids=["too-large", "negative"])
@pytest.mark.parametrize("tiles", [False, True], ids=["default-tiles", "small-tiles"])
def test_out_of_range_action_gives_nan(backend, bad_action, tiles, make_rollout):
    ro = make_rollout(3, 40, num_actions=4)
    # row 1 has no episode ends, so the NaN of step 25 reaches every earlier target of the row
    ro.terminateds[1] = 0
    ro.truncateds[1] = 0
    ro.actions[1, 25] = 4 if bad_action == "num_actions" else -1
    if tiles:
        with small_tiles():
            targets, advantages = compute_retrace(**retrace_kwargs(ro))
    else:
        targets, advantages = compute_retrace(**retrace_kwargs(ro))
    expected_targets, expected_advantages = oracle(ro)
    # Q_ret[t] for t < 25 reads c[25] = NaN; A[25] has rho = NaN; A[t < 24] reads Q_ret[t+1] = NaN
    assert targets[1, :25].isnan().all() and torch.isfinite(targets[1, 25:]).all()
    assert advantages[1, 25].isnan() and advantages[1, :24].isnan().all()
    assert torch.isfinite(advantages[1, 26:]).all() and torch.isfinite(advantages[1, 24])
    assert torch.isfinite(targets[[0, 2]]).all() and torch.isfinite(advantages[[0, 2]]).all()
    torch.testing.assert_close(targets.double(), expected_targets, rtol=1e-5, atol=1e-5, equal_nan=True)
    torch.testing.assert_close(advantages.double(), expected_advantages, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_public_name():
    assert rl_triton.compute_retrace is compute_retrace


def test_empty(backend, device):
    empty = torch.zeros(2, 0, device=device)
    per_action = torch.zeros(2, 0, 3, device=device)
    actions = torch.zeros(2, 0, dtype=torch.int64, device=device)
    out = compute_retrace(per_action, empty, empty, per_action, actions, empty, empty, empty, 0.9)
    assert all(x.shape == (2, 0) for x in out)


ERROR_CASES = [
    pytest.param(
        lambda k: broken(k, action_probs_target=k["action_probs_target"][..., 0]),
        _checks.InputError,
        ("action_probs_target",),
        id="probs-target-2d",
    ),
    pytest.param(
        lambda k: broken(k, action_probs_target=k["action_probs_target"][:, :-1]),
        _checks.InputError,
        ("action_probs_target",),
        id="probs-target-steps",
    ),
    pytest.param(
        lambda k: broken(k, action_probs_target=k["action_probs_target"][..., :0]),
        _checks.InputError,
        ("action_probs_target",),
        id="no-actions",
    ),
    pytest.param(
        lambda k: broken(k, next_q_values_all=k["next_q_values_all"][..., :-1]),
        _checks.InputError,
        ("next_q_values_all",),
        id="next-q-actions",
    ),
    pytest.param(
        lambda k: broken(k, action_probs_behavior=k["action_probs_behavior"][:, :, None]),
        _checks.InputError,
        ("action_probs_behavior",),
        id="probs-behavior-shape",
    ),
    pytest.param(
        lambda k: broken(k, q_values=k["q_values"][:1]), _checks.InputError, ("q_values",), id="q-values-shape"
    ),
    pytest.param(
        lambda k: broken(k, actions=k["actions"][:, 1:]), _checks.InputError, ("actions",), id="actions-shape"
    ),
    pytest.param(
        lambda k: broken(k, actions=k["actions"].float()), _checks.InputTypeError, ("actions",), id="float-actions"
    ),
    pytest.param(
        lambda k: broken(k, truncateds=k["truncateds"][:, :3]), _checks.InputError, ("truncateds",), id="trunc-shape"
    ),
    pytest.param(
        lambda k: broken(k, q_values=k["q_values"].to(torch.int64)), _checks.InputTypeError, ("q_values",), id="int-q"
    ),
    pytest.param(
        lambda k: broken(k, next_q_values_all=k["next_q_values_all"].tolist()),
        _checks.InputTypeError,
        ("next_q_values_all",),
        id="list-next-q",
    ),
    pytest.param(lambda k: broken(k, gamma=1.0001), _checks.InputError, ("gamma",), id="gamma-above-1"),
    pytest.param(lambda k: broken(k, gamma=-1.0), _checks.InputError, ("gamma",), id="gamma-negative"),
    pytest.param(lambda k: broken(k, lambda_=2.0), _checks.InputError, ("lambda_",), id="lambda-above-1"),
    pytest.param(lambda k: broken(k, c_bar=-0.5), _checks.InputError, ("c_bar",), id="c_bar-negative"),
    pytest.param(lambda k: broken(k, rho_bar=float("nan")), _checks.InputError, ("rho_bar",), id="rho_bar-nan"),
    pytest.param(lambda k: broken(k, time_dim=1.0), _checks.InputTypeError, ("time_dim",), id="time_dim-float"),
]


@pytest.mark.parametrize("mutate, error, names", ERROR_CASES)
def test_errors(mutate, error, names, make_rollout):
    kwargs = mutate(retrace_kwargs(make_rollout(3, 8)))
    with pytest.raises(error, match=name_pattern(*names)):
        compute_retrace(**kwargs)
    with pytest.raises(AssertionError):
        compute_retrace(**kwargs)


@pytest.mark.parametrize(
    "name", ["action_probs_target", "action_probs_behavior", "q_values", "next_q_values_all", "actions", "truncateds"]
)
def test_device_mismatch(name, make_rollout):
    kwargs = retrace_kwargs(make_rollout(3, 8))
    kwargs[name] = on_another_device(kwargs[name])
    with pytest.raises(_checks.InputError, match=name_pattern(name, "device")):
        compute_retrace(**kwargs)


def test_correctness_checks(monkeypatch, make_rollout):
    ro = make_rollout(3, 20)
    monkeypatch.setenv("RL_TRITON_CORRECTNESS_WARNINGS", "1")
    assert all(torch.isfinite(x).all() for x in compute_retrace(**retrace_kwargs(ro)))

    both = retrace_kwargs(ro)
    both["terminateds"] = ro.terminateds.clone()
    both["truncateds"] = ro.truncateds.clone()
    both["terminateds"][2, 19] = 1
    both["truncateds"][2, 19] = 1
    with pytest.raises(_checks.InputError, match=name_pattern("terminated", "truncated")):
        compute_retrace(**both)

    for bad_action in (4, -1):
        bad = retrace_kwargs(ro)
        bad["actions"] = ro.actions.clone()
        bad["actions"][0, 3] = bad_action
        with pytest.raises(_checks.InputError, match=name_pattern("actions")):
            compute_retrace(**bad)

    for bad_probability in (0.0, -0.25):
        bad = retrace_kwargs(ro)
        bad["action_probs_behavior"] = ro.probs_behavior.clone()
        bad["action_probs_behavior"][1, 1] = bad_probability
        with pytest.raises(_checks.InputError, match=name_pattern("action_probs_behavior")):
            compute_retrace(**bad)
