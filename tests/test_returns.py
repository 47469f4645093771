"""compute_lambda_returns, compute_discounted_returns, compute_eligibility_traces.

Float64 oracle, hand-computed values, identities, episodes, layouts, dtypes, errors.
"""

import pytest
import torch

import rl_triton
from conftest import (
    DTYPES,
    HALF_TOLERANCE,
    SHAPES,
    TILE_CASES,
    TOLERANCE,
    VARIANT_TILES,
    Snapshot,
    assert_rel,
    assert_rounded_once,
    broken,
    episode_slices,
    every_other_step,
    name_pattern,
    on_another_device,
    small_tiles,
    time_major_storage,
)
from rl_triton import _checks, _dispatch, _launch, reference
from rl_triton.ops.prefix_sum import compute_episodic_prefix_sum
from rl_triton.ops.returns import compute_discounted_returns, compute_eligibility_traces, compute_lambda_returns


def lambda_kwargs(ro, *, truncated=True, boot=True, gamma=0.99, lambda_=0.95):
    return {
        "rewards": ro.rewards,
        "next_values": ro.next_values,
        "terminateds": ro.terminateds,
        "truncateds": ro.truncateds if truncated else None,
        "gamma": gamma,
        "lambda_": lambda_,
        "bootstrap_values": ro.bootstrap_values if boot else None,
    }


def discounted_kwargs(ro, *, truncated=True, boot=True, gamma=0.99):
    return {
        "rewards": ro.rewards,
        "terminateds": ro.terminateds,
        "truncateds": ro.truncateds if truncated else None,
        "gamma": gamma,
        "bootstrap_values": ro.bootstrap_values if boot else None,
    }


def traces_kwargs(ro, *, seed=True, gamma=0.99, lambda_=0.95):
    return {
        "gradients": ro.gradients,
        "dones": ro.dones,
        "gamma": gamma,
        "lambda_": lambda_,
        "seed_values": ro.seed_values if seed else None,
    }


# (public function, kwargs builder, oracle, per-step fields the builder reads, default variant)
ESTIMATORS = {
    "lambda": (
        compute_lambda_returns,
        lambda_kwargs,
        reference.compute_lambda_returns,
        ("rewards", "next_values", "terminateds", "truncateds", "bootstrap_values"),
    ),
    "discounted": (
        compute_discounted_returns,
        discounted_kwargs,
        reference.compute_discounted_returns,
        ("rewards", "terminateds", "truncateds", "bootstrap_values"),
    ),
    "traces": (
        compute_eligibility_traces,
        traces_kwargs,
        reference.compute_eligibility_traces,
        ("gradients", "dones"),
    ),
}
ESTIMATOR_NAMES = list(ESTIMATORS)


def call(name, ro, **kwargs):
    compute, build, _, _ = ESTIMATORS[name]
    return compute(**build(ro, **kwargs))


def oracle(name, ro, **kwargs):
    _, build, compute, _ = ESTIMATORS[name]
    return compute(**build(ro.oracle_inputs(), **kwargs))


def step_fields(name):
    return ESTIMATORS[name][3]


VARIANTS = [
    pytest.param("lambda", {"truncated": True, "boot": True}, id="lambda-trunc-bootstrap"),
    pytest.param("lambda", {"truncated": True, "boot": False}, id="lambda-trunc-nobootstrap"),
    pytest.param("lambda", {"truncated": False, "boot": True}, id="lambda-notrunc-bootstrap"),
    pytest.param("lambda", {"truncated": False, "boot": False}, id="lambda-notrunc-nobootstrap"),
    pytest.param("discounted", {"truncated": True, "boot": True}, id="discounted-trunc-bootstrap"),
    pytest.param("discounted", {"truncated": True, "boot": False}, id="discounted-trunc-nobootstrap"),
    pytest.param("discounted", {"truncated": False, "boot": True}, id="discounted-notrunc-bootstrap"),
    pytest.param("discounted", {"truncated": False, "boot": False}, id="discounted-notrunc-nobootstrap"),
    pytest.param("traces", {"seed": True}, id="traces-seed"),
    pytest.param("traces", {"seed": False}, id="traces-noseed"),
]


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
@pytest.mark.parametrize("dtype, rows, seq_len", SHAPES)
def test_matches_oracle(backend, name, dtype, rows, seq_len, make_rollout):
    ro = make_rollout(rows, seq_len, dtype=dtype)
    out = call(name, ro)
    assert out.dtype == dtype
    assert_rel(out, oracle(name, ro), TOLERANCE[dtype])


@pytest.mark.parametrize("name, variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_argument_variants(backend, dtype, name, variant, make_rollout):
    ro = make_rollout(3, 65, dtype=dtype)
    assert_rel(call(name, ro, **variant), oracle(name, ro, **variant), TOLERANCE[dtype])


@pytest.mark.parametrize(
    "name, params",
    [
        pytest.param("lambda", {"gamma": 0.0, "lambda_": 0.95}, id="lambda-gamma0"),
        pytest.param("lambda", {"gamma": 1.0, "lambda_": 0.95}, id="lambda-gamma1"),
        pytest.param("lambda", {"gamma": 0.99, "lambda_": 0.0}, id="lambda-lambda0"),
        pytest.param("lambda", {"gamma": 0.99, "lambda_": 1.0}, id="lambda-lambda1"),
        pytest.param("lambda", {"gamma": 1.0, "lambda_": 1.0}, id="lambda-gamma1-lambda1"),
        pytest.param("discounted", {"gamma": 0.0}, id="discounted-gamma0"),
        pytest.param("discounted", {"gamma": 1.0}, id="discounted-gamma1"),
        pytest.param("traces", {"gamma": 0.0, "lambda_": 0.95}, id="traces-gamma0"),
        pytest.param("traces", {"gamma": 1.0, "lambda_": 1.0}, id="traces-gamma1-lambda1"),
        pytest.param("traces", {"gamma": 0.99, "lambda_": 0.0}, id="traces-lambda0"),
    ],
)
def test_gamma_lambda_edges(backend, name, params, make_rollout):
    ro = make_rollout(3, 65)
    assert_rel(call(name, ro, **params), oracle(name, ro, **params), TOLERANCE[torch.float32])


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
@pytest.mark.parametrize("tile, rows, seq_len", TILE_CASES)
def test_tiles(name, tile, rows, seq_len, make_rollout):
    ro = make_rollout(rows, seq_len)
    with _dispatch.use_backend("triton"), _launch.tile_override(**tile):
        out = call(name, ro)
    assert_rel(out, oracle(name, ro), TOLERANCE[torch.float32])


@pytest.mark.parametrize("tile", VARIANT_TILES)
@pytest.mark.parametrize("name, variant", VARIANTS)
def test_argument_variants_across_chunks(tile, name, variant, make_rollout):
    ro = make_rollout(3, 200)
    with _dispatch.use_backend("triton"), _launch.tile_override(**tile):
        out = call(name, ro, **variant)
    assert_rel(out, oracle(name, ro, **variant), TOLERANCE[torch.float32])


@pytest.mark.parametrize("tile", VARIANT_TILES)
@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
def test_narrow_outputs_across_chunks(tile, name, make_rollout):
    """A bf16 ``out_dtype`` of float32 inputs: the float32 results rounded once (assert_rounded_once),
    across chunk edges and walked segments."""
    ro = make_rollout(3, 200)
    with _dispatch.use_backend("triton"), _launch.tile_override(**tile):
        compute, build, _, _ = ESTIMATORS[name]
        narrow = compute(**build(ro), out_dtype=torch.bfloat16)
        wide = compute(**build(ro))
    assert_rounded_once(narrow, wide)
    assert_rel(wide, oracle(name, ro), TOLERANCE[torch.float32])


# hand-computed with gamma = 0.5, lambda = 0.5 on one five-step row:
# terminated at t=1, truncated at t=2 (true next value 4), window ends mid-episode (V(s_T) = 8)
REWARDS = [1.0, 2.0, 1.0, 0.0, 1.0]
TERMINATEDS = [0, 1, 0, 0, 0]
TRUNCATEDS = [0, 0, 1, 0, 0]
BOOTSTRAP = [0.0, 0.0, 4.0, 0.0, 8.0]
NEXT_VALUES = [2.0, 4.0, 0.0, 2.0, 4.0]


def golden_row(values, dtype, device):
    return torch.tensor([values], dtype=dtype, device=device)


@pytest.mark.parametrize("dtype", DTYPES)
def test_golden_lambda_returns(backend, device, dtype):
    # G5 = bootstrap[-1] = 8
    # G4 = 1 + 0.5 * (0.5 * 4 + 0.5 * 8) = 4
    # G3 = 0 + 0.5 * (0.5 * 2 + 0.5 * 4) = 1.5
    # G2 = 1 + 0.5 * 4 (truncated: no trace, bootstrap) = 3
    # G1 = 2 (terminated)
    # G0 = 1 + 0.5 * (0.5 * 2 + 0.5 * 2) = 2
    expected = torch.tensor([[2.0, 2.0, 3.0, 1.5, 4.0]], dtype=torch.float64)
    args = [golden_row(x, dtype, device) for x in (REWARDS, NEXT_VALUES, TERMINATEDS, TRUNCATEDS)]
    bootstrap = golden_row(BOOTSTRAP, dtype, device)
    for compute in (compute_lambda_returns, reference.compute_lambda_returns):
        out = compute(*args, gamma=0.5, lambda_=0.5, bootstrap_values=bootstrap)
        torch.testing.assert_close(out.cpu().double(), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_golden_discounted_returns(backend, device, dtype):
    # G5 = 8; G4 = 1 + 0.5 * 8 = 5; G3 = 0 + 0.5 * 5 = 2.5; G2 = 1 + 0.5 * 4 = 3 (truncated);
    # G1 = 2 (terminated); G0 = 1 + 0.5 * 2 = 2
    expected = torch.tensor([[2.0, 2.0, 3.0, 2.5, 5.0]], dtype=torch.float64)
    args = [golden_row(x, dtype, device) for x in (REWARDS, TERMINATEDS, TRUNCATEDS)]
    bootstrap = golden_row(BOOTSTRAP, dtype, device)
    for compute in (compute_discounted_returns, reference.compute_discounted_returns):
        out = compute(*args, gamma=0.5, bootstrap_values=bootstrap)
        torch.testing.assert_close(out.cpu().double(), expected, rtol=0, atol=1e-6)
    # no bootstrap, no truncation flags: G = [1 + 0.5 * 2, 2, 1 + 0.5 * 0.5, 0 + 0.5 * 1, 1]
    for compute in (compute_discounted_returns, reference.compute_discounted_returns):
        out = compute(args[0], args[1], gamma=0.5)
        torch.testing.assert_close(
            out.cpu().double(), torch.tensor([[2.0, 2.0, 1.25, 0.5, 1.0]], dtype=torch.float64), rtol=0, atol=1e-6
        )


@pytest.mark.parametrize("dtype", DTYPES)
def test_golden_eligibility_traces(backend, device, dtype):
    # gamma * lambda = 0.25, done at t=1 and at the last step, seed 4:
    # z0 = 1 + 0.25 * 4 = 2; z1 = 2 + 0.25 * 2 = 2.5; z2 = 4 (done[1]: fresh trace);
    # z3 = 8 + 0.25 * 4 = 9; z4 = 1 + 0.25 * 9 = 3.25 (done at the last step changes nothing)
    expected = torch.tensor([[2.0, 2.5, 4.0, 9.0, 3.25]], dtype=torch.float64)
    gradients = golden_row([1.0, 2.0, 4.0, 8.0, 1.0], dtype, device)
    dones = golden_row([0, 1, 0, 0, 1], dtype, device)
    seed = torch.tensor([4.0], dtype=dtype, device=device)
    for compute in (compute_eligibility_traces, reference.compute_eligibility_traces):
        out = compute(gradients, dones, 0.5, 0.5, seed_values=seed)
        torch.testing.assert_close(out.cpu().double(), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["lambda", "discounted"])
@pytest.mark.parametrize("stray", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_interior_bootstrap_values_unused_without_truncateds(backend, name, stray, make_rollout):
    """With truncateds=None only the last bootstrap column is read: a non-finite value elsewhere changes nothing."""
    ro = make_rollout(3, 65, dtype=torch.float64)
    clean = ro.bootstrap_values.clone()
    clean[:, :-1] = 0
    expected = call(name, ro.map(lambda _: clean, fields=("bootstrap_values",)), truncated=False)
    stray_values = clean.clone()
    stray_values[:, [0, 7, 63]] = stray
    got = call(name, ro.map(lambda _: stray_values, fields=("bootstrap_values",)), truncated=False)
    assert torch.isfinite(expected).all()
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_lambda_zero_is_one_step_td(backend, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64)
    out = call("lambda", ro, gamma=0.9, lambda_=0.0)
    not_done = 1 - ro.terminateds - ro.truncateds
    td = ro.rewards + 0.9 * not_done * ro.next_values + 0.9 * ro.truncateds * ro.bootstrap_values
    assert_rel(out, td, TOLERANCE[torch.float64])


@pytest.mark.parametrize("truncated", [True, False], ids=["trunc", "notrunc"])
def test_lambda_one_is_discounted_return(backend, truncated, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64)
    lambda_returns = call("lambda", ro, truncated=truncated, gamma=0.97, lambda_=1.0)
    discounted = call("discounted", ro, truncated=truncated, gamma=0.97)
    assert_rel(lambda_returns, discounted, TOLERANCE[torch.float64])


def test_discounted_gamma_one_is_reverse_cumsum(backend, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64, term_rate=0.0, trunc_rate=0.0)
    out = call("discounted", ro, gamma=1.0)
    expected = ro.rewards.flip(-1).cumsum(-1).flip(-1) + ro.last_value[:, None]
    assert_rel(out, expected, TOLERANCE[torch.float64])


def test_traces_without_decay_or_dones_is_cumsum(backend, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64, term_rate=0.0, trunc_rate=0.0)
    out = call("traces", ro, gamma=1.0, lambda_=1.0)
    assert_rel(out, ro.gradients.cumsum(-1) + ro.seed_values[:, None], TOLERANCE[torch.float64])


def test_traces_without_decay_are_episodic_prefix_sums(backend, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64)
    out = call("traces", ro, gamma=1.0, lambda_=1.0)
    sums = compute_episodic_prefix_sum(ro.gradients, ro.dones, ro.seed_values, boundary="ends_at")
    assert_rel(out, sums, TOLERANCE[torch.float64])


@pytest.mark.parametrize("name", ["lambda", "discounted"])
def test_episode_split_backward(backend, name, make_rollout):
    ro = make_rollout(2, 100, dtype=torch.float64, term_rate=0.06, trunc_rate=0.04)
    ro.terminateds[0, 10:12] = 1
    ro.truncateds[0, 10:12] = 0
    ro.bootstrap_values[0, 10:12] = 0
    with small_tiles():
        whole = call(name, ro)
    for row in range(2):
        slices = episode_slices(ro.dones[row])
        assert len(slices) >= 4
        pieces = [call(name, ro.map(lambda x, s=s, r=row: x[r : r + 1, s], fields=step_fields(name))) for s in slices]
        assert_rel(whole[row : row + 1], torch.cat(pieces, dim=1), TOLERANCE[torch.float64])


def test_episode_split_traces(backend, make_rollout):
    ro = make_rollout(2, 100, dtype=torch.float64, term_rate=0.06, trunc_rate=0.04)
    ro.dones[0, 10:12] = 1
    with small_tiles():
        whole = call("traces", ro, gamma=0.9, lambda_=0.9)
    for row in range(2):
        slices = episode_slices(ro.dones[row])
        assert len(slices) >= 4
        pieces = []
        for index, s in enumerate(slices):
            # only the first episode continues the seed trace
            seed = ro.seed_values[row : row + 1] if index == 0 else None
            pieces.append(
                compute_eligibility_traces(ro.gradients[row : row + 1, s], ro.dones[row : row + 1, s], 0.9, 0.9, seed)
            )
        assert_rel(whole[row : row + 1], torch.cat(pieces, dim=1), TOLERANCE[torch.float64])


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
@pytest.mark.parametrize(
    "layout",
    [pytest.param(time_major_storage, id="time-major"), pytest.param(every_other_step, id="step-stride-2")],
)
def test_strided_inputs(backend, name, layout, make_rollout):
    ro = make_rollout(3, 40)
    expected = call(name, ro)
    kwargs = ESTIMATORS[name][1](ro.map(layout, fields=step_fields(name)))
    snapshot = Snapshot(kwargs)
    # another layout may take another tile plan (time-major tiles, grouped batch-major ones) and so
    # another order of combining steps: equal up to float32 rounding, not always bitwise
    assert_rel(ESTIMATORS[name][0](**kwargs), expected, TOLERANCE[torch.float32])
    snapshot.assert_unchanged()


def test_expanded_inputs(backend, make_rollout):
    ro = make_rollout(3, 40)
    expanded = {
        # one rewards row for all envs, one value per env for all steps
        "lambda": lambda_kwargs(ro, truncated=False, boot=False)
        | {"rewards": ro.rewards[:1].expand(3, 40), "next_values": ro.next_values[:, :1].expand(3, 40)},
        "discounted": discounted_kwargs(ro) | {"rewards": ro.rewards[:, :1].expand(3, 40)},
        # one seed for every env
        "traces": traces_kwargs(ro) | {"seed_values": ro.seed_values[:1].expand(3)},
    }
    for name, kwargs in expanded.items():
        compute, _, reference_compute, _ = ESTIMATORS[name]
        snapshot = Snapshot(kwargs)
        out = compute(**kwargs)
        dense = {k: v.contiguous().double() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        assert_rel(out, reference_compute(**dense), TOLERANCE[torch.float32])
        snapshot.assert_unchanged()


@pytest.mark.parametrize("name, variant", VARIANTS)
def test_inputs_unchanged(backend, name, variant, make_rollout):
    kwargs = ESTIMATORS[name][1](make_rollout(3, 40), **variant)
    snapshot = Snapshot(kwargs)
    ESTIMATORS[name][0](**kwargs)
    snapshot.assert_unchanged()


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
def test_time_dim_zero(backend, name, make_rollout):
    ro = make_rollout(5, 33)
    expected = call(name, ro)
    time_major = ro.map(lambda x: x.t().contiguous(), fields=step_fields(name))
    out = ESTIMATORS[name][0](**ESTIMATORS[name][1](time_major), time_dim=0)
    assert out.shape == (33, 5)
    torch.testing.assert_close(out, expected.t(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
def test_batch_dims(backend, name, make_rollout):
    ro = make_rollout((2, 3), 17)
    out = call(name, ro)
    assert out.shape == (2, 3, 17)
    assert_rel(out, oracle(name, ro).reshape(2, 3, 17), TOLERANCE[torch.float32])


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
def test_interior_time_dim(backend, name, make_rollout):
    ro = make_rollout((2, 3), 17)
    # [B1, T, B2] inputs with time_dim=1, seed_values [B1, B2]
    moved = ro.map(lambda x: x.movedim(2, 1), fields=step_fields(name))
    out = ESTIMATORS[name][0](**ESTIMATORS[name][1](moved), time_dim=1)
    assert out.shape == (2, 17, 3)
    assert_rel(out.movedim(1, 2), oracle(name, ro).reshape(2, 3, 17), TOLERANCE[torch.float32])


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_half_precision(backend, name, dtype, make_rollout):
    ro = make_rollout(3, 65, dtype=dtype)
    out = call(name, ro)
    assert out.dtype == dtype
    assert_rel(out, oracle(name, ro), HALF_TOLERANCE)
    compute, build, _, _ = ESTIMATORS[name]
    out32 = compute(**build(ro), out_dtype=torch.float32)
    assert out32.dtype == torch.float32
    assert_rel(out32, oracle(name, ro), TOLERANCE[torch.float32])


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
@pytest.mark.parametrize("flag_dtype", [torch.bool, torch.uint8], ids=["bool", "uint8"])
def test_flag_dtypes(backend, name, flag_dtype, make_rollout):
    ro = make_rollout(3, 65)
    expected = call(name, ro)
    flags = ro.map(lambda x: x.to(flag_dtype), fields=("terminateds", "truncateds", "dones"))
    # compiled kernels may lay out tiles of narrower flags differently, which changes the order in
    # which the scan combines steps: equal up to float32 rounding, not always bitwise
    assert_rel(call(name, flags), expected, TOLERANCE[torch.float32])


@pytest.mark.parametrize("name", ESTIMATOR_NAMES)
def test_out_dtype(backend, name, make_rollout):
    ro = make_rollout(3, 65)
    compute, build, _, _ = ESTIMATORS[name]
    out = compute(**build(ro), out_dtype=torch.float64)
    assert out.dtype == torch.float64
    assert_rel(out, oracle(name, ro), TOLERANCE[torch.float32])


def test_public_names():
    assert rl_triton.compute_lambda_returns is compute_lambda_returns
    assert rl_triton.compute_discounted_returns is compute_discounted_returns
    assert rl_triton.compute_eligibility_traces is compute_eligibility_traces


def test_empty(backend, device):
    empty = torch.zeros(4, 0, device=device)
    assert compute_lambda_returns(empty, empty, empty).shape == (4, 0)
    assert compute_discounted_returns(empty, empty).shape == (4, 0)
    assert compute_eligibility_traces(empty, empty, 0.9, 0.9, torch.zeros(4, device=device)).shape == (4, 0)


ERROR_CASES = [
    pytest.param(
        "lambda",
        lambda k: broken(k, next_values=k["next_values"][:, :-1]),
        _checks.InputError,
        ("next_values",),
        id="lambda-next_values-shape",
    ),
    pytest.param(
        "lambda",
        lambda k: broken(k, terminateds=k["terminateds"][None]),
        _checks.InputError,
        ("terminateds",),
        id="lambda-terminateds-shape",
    ),
    pytest.param(
        "lambda",
        lambda k: broken(k, bootstrap_values=k["bootstrap_values"][:, -1]),
        _checks.InputError,
        ("bootstrap_values",),
        id="lambda-bootstrap-shape",
    ),
    pytest.param(
        "lambda",
        lambda k: broken(k, next_values=k["next_values"].long()),
        _checks.InputTypeError,
        ("next_values",),
        id="lambda-int-next_values",
    ),
    pytest.param(
        "lambda", lambda k: broken(k, rewards=3.0), _checks.InputTypeError, ("rewards",), id="lambda-float-rewards"
    ),
    pytest.param("lambda", lambda k: broken(k, gamma=2.0), _checks.InputError, ("gamma",), id="lambda-gamma-above-1"),
    pytest.param(
        "lambda", lambda k: broken(k, lambda_=-0.1), _checks.InputError, ("lambda_",), id="lambda-lambda-negative"
    ),
    pytest.param(
        "lambda", lambda k: broken(k, time_dim=5), _checks.InputError, ("time_dim",), id="lambda-time_dim-range"
    ),
    pytest.param(
        "discounted",
        lambda k: broken(k, truncateds=k["truncateds"][:, 1:]),
        _checks.InputError,
        ("truncateds",),
        id="discounted-truncateds-shape",
    ),
    pytest.param(
        "discounted",
        lambda k: broken(k, rewards=k["rewards"].to(torch.int32)),
        _checks.InputTypeError,
        ("rewards",),
        id="discounted-int-rewards",
    ),
    pytest.param(
        "discounted",
        lambda k: broken(k, bootstrap_values=k["bootstrap_values"].tolist()),
        _checks.InputTypeError,
        ("bootstrap_values",),
        id="discounted-list-bootstrap",
    ),
    pytest.param(
        "discounted", lambda k: broken(k, gamma=1.5), _checks.InputError, ("gamma",), id="discounted-gamma-above-1"
    ),
    pytest.param(
        "discounted", lambda k: broken(k, gamma=-0.01), _checks.InputError, ("gamma",), id="discounted-gamma-negative"
    ),
    pytest.param(
        "discounted",
        lambda k: broken(k, out_dtype=torch.int64),
        _checks.InputTypeError,
        ("out_dtype",),
        id="discounted-out_dtype",
    ),
    pytest.param(
        "traces", lambda k: broken(k, dones=k["dones"][:, :5]), _checks.InputError, ("dones",), id="traces-dones-shape"
    ),
    pytest.param(
        "traces",
        lambda k: broken(k, seed_values=k["seed_values"][:, None]),
        _checks.InputError,
        ("seed_values",),
        id="traces-seed-shape",
    ),
    pytest.param(
        "traces",
        lambda k: broken(k, seed_values=k["seed_values"].long()),
        _checks.InputTypeError,
        ("seed_values",),
        id="traces-int-seed",
    ),
    pytest.param(
        "traces",
        lambda k: broken(k, gradients=k["gradients"].to(torch.int16)),
        _checks.InputTypeError,
        ("gradients",),
        id="traces-int-gradients",
    ),
    pytest.param(
        "traces",
        lambda k: broken(k, gradients=None),
        _checks.InputTypeError,
        ("gradients",),
        id="traces-none-gradients",
    ),
    pytest.param("traces", lambda k: broken(k, gamma=1.1), _checks.InputError, ("gamma",), id="traces-gamma-above-1"),
    pytest.param(
        "traces", lambda k: broken(k, lambda_=float("inf")), _checks.InputError, ("lambda_",), id="traces-lambda-inf"
    ),
]


@pytest.mark.parametrize("name, mutate, error, names", ERROR_CASES)
def test_errors(name, mutate, error, names, make_rollout):
    compute, build, _, _ = ESTIMATORS[name]
    kwargs = mutate(build(make_rollout(3, 8)))
    with pytest.raises(error, match=name_pattern(*names)):
        compute(**kwargs)
    with pytest.raises(AssertionError):
        compute(**kwargs)


@pytest.mark.parametrize(
    "name, argument",
    [
        ("lambda", "next_values"),
        ("lambda", "bootstrap_values"),
        ("discounted", "terminateds"),
        ("discounted", "truncateds"),
        ("traces", "dones"),
        ("traces", "seed_values"),
    ],
)
def test_device_mismatch(name, argument, make_rollout):
    compute, build, _, _ = ESTIMATORS[name]
    kwargs = build(make_rollout(3, 8))
    kwargs[argument] = on_another_device(kwargs[argument])
    with pytest.raises(_checks.InputError, match=name_pattern(argument, "device")):
        compute(**kwargs)


@pytest.mark.parametrize("name", ["lambda", "discounted"])
def test_correctness_checks(monkeypatch, name, make_rollout):
    compute, build, reference_compute, _ = ESTIMATORS[name]
    ro = make_rollout(3, 20)
    monkeypatch.setenv("RL_TRITON_CORRECTNESS_WARNINGS", "1")
    assert torch.isfinite(compute(**build(ro))).all()

    both = build(ro)
    both["terminateds"] = ro.terminateds.clone()
    both["truncateds"] = ro.truncateds.clone()
    both["terminateds"][1, 10] = 1
    both["truncateds"][1, 10] = 1
    with pytest.raises(_checks.InputError, match=name_pattern("terminated", "truncated")):
        compute(**both)

    # without truncation flags, an interior bootstrap value is stray
    stray = build(ro, truncated=False)
    stray["bootstrap_values"] = torch.zeros_like(ro.bootstrap_values)
    stray["bootstrap_values"][0, 6] = 3.0
    with pytest.raises(_checks.InputError, match=name_pattern("bootstrap_values", "ignored")):
        compute(**stray)

    monkeypatch.delenv("RL_TRITON_CORRECTNESS_WARNINGS")
    # unchecked, it is ignored: without a truncation flag it never enters the recurrence
    dense = {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in stray.items()}
    assert_rel(compute(**stray), reference_compute(**dense), TOLERANCE[torch.float32])
