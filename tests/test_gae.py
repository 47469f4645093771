"""compute_gae: float64 oracle, hand-computed values, identities, episodes, layouts, dtypes, errors."""

import pytest
import torch

import rl_triton
from conftest import (
    DTYPES,
    HALF_TOLERANCE,
    LARGEST_SHAPE,
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
    rel_err,
    small_tiles,
    time_major_storage,
)
from rl_triton import _checks, _dispatch, _launch, reference
from rl_triton.ops.gae import compute_gae
from rl_triton.ops.returns import compute_discounted_returns, compute_lambda_returns


def gae_kwargs(ro, *, truncated=True, boot="bootstrap", gamma=0.99, lambda_=0.95):
    return {
        "rewards": ro.rewards,
        "values": ro.values,
        "terminateds": ro.terminateds,
        "truncateds": ro.truncateds if truncated else None,
        "gamma": gamma,
        "lambda_": lambda_,
        "bootstrap_values": ro.bootstrap_values if boot == "bootstrap" else None,
        "last_value": ro.last_value if boot == "last_value" else None,
    }


def oracle(ro, **kwargs):
    return reference.compute_gae(**gae_kwargs(ro.oracle_inputs(), **kwargs))


STEP_FIELDS_GAE = ("rewards", "values", "terminateds", "truncateds", "bootstrap_values")


def next_state_values(ro, truncated=True):
    """v_next[t] = values[t+1] * (1 - truncated[t]) + bootstrap_values[t], values[T] := 0."""
    shifted = torch.zeros_like(ro.values)
    shifted[..., :-1] = ro.values[..., 1:]
    if truncated:
        shifted = shifted * (1 - ro.truncateds.to(ro.values.dtype))
    return shifted + ro.bootstrap_values


VARIANTS = [
    pytest.param({"truncated": True, "boot": "bootstrap"}, id="trunc-bootstrap"),
    pytest.param({"truncated": True, "boot": None}, id="trunc-nobootstrap"),
    pytest.param({"truncated": False, "boot": "bootstrap"}, id="notrunc-bootstrap"),
    pytest.param({"truncated": False, "boot": None}, id="notrunc-nobootstrap"),
    pytest.param({"truncated": False, "boot": "last_value"}, id="notrunc-lastvalue"),
]


@pytest.mark.parametrize("dtype, rows, seq_len", SHAPES)
def test_matches_oracle(backend, dtype, rows, seq_len, make_rollout):
    ro = make_rollout(rows, seq_len, dtype=dtype)
    out = compute_gae(**gae_kwargs(ro))
    assert out.dtype == dtype
    assert_rel(out, oracle(ro), TOLERANCE[dtype])


def test_largest_shape(backend, make_rollout):
    ro = make_rollout(*LARGEST_SHAPE)
    assert_rel(compute_gae(**gae_kwargs(ro)), oracle(ro), TOLERANCE[torch.float32])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_argument_variants(backend, dtype, variant, make_rollout):
    ro = make_rollout(3, 65, dtype=dtype)
    assert_rel(compute_gae(**gae_kwargs(ro, **variant)), oracle(ro, **variant), TOLERANCE[dtype])


@pytest.mark.parametrize(
    "gamma, lambda_",
    [(0.0, 0.95), (1.0, 0.95), (0.99, 0.0), (0.99, 1.0), (1.0, 1.0), (0.0, 0.0), (0.5, 0.25)],
)
def test_gamma_lambda_edges(backend, gamma, lambda_, make_rollout):
    ro = make_rollout(3, 65)
    out = compute_gae(**gae_kwargs(ro, gamma=gamma, lambda_=lambda_))
    assert_rel(out, oracle(ro, gamma=gamma, lambda_=lambda_), TOLERANCE[torch.float32])


@pytest.mark.parametrize("tile, rows, seq_len", TILE_CASES)
@pytest.mark.parametrize("variant", [VARIANTS[0], VARIANTS[4]])
def test_tiles(tile, rows, seq_len, variant, make_rollout):
    ro = make_rollout(rows, seq_len)
    with _dispatch.use_backend("triton"), _launch.tile_override(**tile):
        out = compute_gae(**gae_kwargs(ro, **variant))
    assert_rel(out, oracle(ro, **variant), TOLERANCE[torch.float32])


@pytest.mark.parametrize("tile", VARIANT_TILES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_argument_variants_across_chunks(tile, variant, make_rollout):
    """Every variant (with and without truncations, bootstrap values or last_value) across chunk
    edges, time segments and walks."""
    ro = make_rollout(3, 200)
    with _dispatch.use_backend("triton"), _launch.tile_override(**tile):
        out = compute_gae(**gae_kwargs(ro, **variant))
    assert_rel(out, oracle(ro, **variant), TOLERANCE[torch.float32])


@pytest.mark.parametrize("tile", VARIANT_TILES)
def test_narrow_outputs_across_chunks(tile, make_rollout):
    """A bf16 ``out_dtype`` of float32 inputs: the float32 results rounded once (assert_rounded_once),
    across chunk edges and walked segments."""
    ro = make_rollout(3, 200)
    with _dispatch.use_backend("triton"), _launch.tile_override(**tile):
        narrow = compute_gae(**gae_kwargs(ro), out_dtype=torch.bfloat16)
        wide = compute_gae(**gae_kwargs(ro))
    assert_rounded_once(narrow, wide)
    assert_rel(wide, oracle(ro), TOLERANCE[torch.float32])


@pytest.mark.parametrize("rows, seq_len", [(3, 65), (2, 1), (33, 7)])
def test_last_value_is_bootstrap_last_column(backend, rows, seq_len, make_rollout):
    ro = make_rollout(rows, seq_len)
    column = torch.zeros_like(ro.rewards)
    column[:, -1] = ro.last_value
    by_last_value = compute_gae(ro.rewards, ro.values, ro.terminateds, last_value=ro.last_value)
    by_column = compute_gae(ro.rewards, ro.values, ro.terminateds, bootstrap_values=column)
    # two kernel specialisations: compiled, their tiles may be laid out differently, which changes
    # the order in which the scan combines steps (equal up to float32 rounding, not always bitwise)
    assert_rel(by_last_value, by_column, TOLERANCE[torch.float32])


# hand-computed, gamma = lambda = 0.5 (gamma * lambda = 0.25); every number is exact in binary
GOLDEN = [
    pytest.param(
        {
            "rewards": [1.0, 0.0, 2.0, 1.0],
            "values": [1.0, 2.0, 0.0, 4.0],
            "terminateds": [0, 1, 0, 0],
            "last_value": 2.0,
        },
        # v_next = [2, (gated), 4, 2 = last_value]
        # delta  = [1 + 1 - 1, 0 - 2, 2 + 2 - 0, 1 + 1 - 4] = [1, -2, 4, -2]
        # A3 = -2; A2 = 4 + 0.25 * -2 = 3.5; A1 = -2 (terminated); A0 = 1 + 0.25 * -2 = 0.5
        [0.5, -2.0, 3.5, -2.0],
        id="termination-last_value",
    ),
    pytest.param(
        {
            "rewards": [1.0, 1.0, 1.0, 1.0, 1.0],
            "values": [2.0, 4.0, 2.0, 4.0, 2.0],
            "terminateds": [0, 0, 0, 0, 0],
            "truncateds": [0, 0, 1, 0, 0],
            "bootstrap_values": [0.0, 0.0, 8.0, 0.0, 4.0],
        },
        # v_next = [4, 2, 0 * 4 + 8, 2, 0 + 4] = [4, 2, 8, 2, 4]
        # delta  = [1 + 2 - 2, 1 + 1 - 4, 1 + 4 - 2, 1 + 1 - 4, 1 + 2 - 2] = [1, -2, 3, -2, 1]
        # A4 = 1; A3 = -2 + 0.25 = -1.75; A2 = 3 (truncated: no carry); A1 = -2 + 0.75 = -1.25;
        # A0 = 1 + 0.25 * -1.25 = 0.6875
        [0.6875, -1.25, 3.0, -1.75, 1.0],
        id="truncation-bootstrap",
    ),
]


@pytest.mark.parametrize("inputs, expected", GOLDEN)
@pytest.mark.parametrize("dtype", DTYPES)
def test_golden(backend, device, dtype, inputs, expected):
    kwargs = {
        name: torch.tensor(value, dtype=dtype, device=device).reshape(1, -1) if isinstance(value, list) else value
        for name, value in inputs.items()
    }
    if "last_value" in kwargs:
        kwargs["last_value"] = torch.tensor([kwargs["last_value"]], dtype=dtype, device=device)
    expected = torch.tensor([expected], dtype=torch.float64)
    out = compute_gae(**kwargs, gamma=0.5, lambda_=0.5)
    torch.testing.assert_close(out.cpu().double(), expected, rtol=0, atol=1e-6)
    ref = reference.compute_gae(**kwargs, gamma=0.5, lambda_=0.5)
    torch.testing.assert_close(ref.cpu().double(), expected, rtol=0, atol=1e-6)


def test_lambda_zero_is_one_step_td(backend, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64)
    out = compute_gae(**gae_kwargs(ro, gamma=0.9, lambda_=0.0))
    not_terminated = 1 - ro.terminateds
    td = ro.rewards + 0.9 * not_terminated * next_state_values(ro) - ro.values
    assert_rel(out, td, TOLERANCE[torch.float64])


@pytest.mark.parametrize("truncated", [True, False], ids=["trunc", "notrunc"])
def test_lambda_one_plus_values_is_discounted_return(backend, truncated, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64)
    if not truncated:
        # without truncation flags, only the last bootstrap column is legal
        ro.bootstrap_values = torch.zeros_like(ro.bootstrap_values)
        ro.bootstrap_values[:, -1] = ro.last_value
    truncateds = ro.truncateds if truncated else None
    advantages = compute_gae(**gae_kwargs(ro, truncated=truncated, gamma=0.97, lambda_=1.0))
    returns = compute_discounted_returns(
        ro.rewards, ro.terminateds, truncateds, gamma=0.97, bootstrap_values=ro.bootstrap_values
    )
    assert_rel(advantages + ro.values, returns, TOLERANCE[torch.float64])


def gae_plus_values_and_lambda_returns(ro, lambda_, bootstrap):
    """GAE + V and the lambda-returns of the same rollout with matching bootstraps: truncations with
    bootstrap values, or no truncations with GAE's last_value as the returns' last column."""
    truncated = bootstrap == "truncations"
    # lambda-returns take V(s_{t+1}) (their entries at truncated steps are not used) and V(s_T) in
    # the last column
    next_values = torch.zeros_like(ro.values)
    next_values[:, :-1] = ro.values[:, 1:]
    if truncated:
        bootstrap_values = ro.bootstrap_values
        advantages = compute_gae(**gae_kwargs(ro, gamma=0.95, lambda_=lambda_))
    else:
        bootstrap_values = torch.zeros_like(ro.values)
        bootstrap_values[:, -1] = ro.last_value
        advantages = compute_gae(**gae_kwargs(ro, truncated=False, boot="last_value", gamma=0.95, lambda_=lambda_))
    next_values[:, -1] = bootstrap_values[:, -1]
    returns = compute_lambda_returns(
        ro.rewards, next_values, ro.terminateds, ro.truncateds if truncated else None, 0.95, lambda_,
        bootstrap_values=bootstrap_values,
    )
    return advantages + ro.values, returns


@pytest.mark.parametrize("bootstrap", ["truncations", "last_value"])
@pytest.mark.parametrize("lambda_", [0.0, 0.6, 1.0])
def test_plus_values_is_lambda_return(backend, lambda_, bootstrap, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64)
    gae_plus_values, returns = gae_plus_values_and_lambda_returns(ro, lambda_, bootstrap)
    assert_rel(gae_plus_values, returns, TOLERANCE[torch.float64])


@pytest.mark.parametrize("bootstrap", ["truncations", "last_value"])
def test_plus_values_is_lambda_return_across_chunks(bootstrap, make_rollout):
    # lambda = 0 and 1 on the default plan above; across chunks the general case
    ro = make_rollout(3, 200, dtype=torch.float64)
    with _dispatch.use_backend("triton"), small_tiles():
        gae_plus_values, returns = gae_plus_values_and_lambda_returns(ro, 0.6, bootstrap)
    assert_rel(gae_plus_values, returns, TOLERANCE[torch.float64])


def test_episode_split(backend, make_rollout):
    ro = make_rollout(2, 100, dtype=torch.float64, term_rate=0.06, trunc_rate=0.04)
    # a one-step episode, and episodes ending by both flags
    ro.terminateds[0, 10:12] = 1
    ro.truncateds[0, 10:12] = 0
    ro.bootstrap_values[0, 10:12] = 0
    ro.truncateds[1, 30] = 1
    ro.terminateds[1, 30] = 0
    ro.bootstrap_values[1, 30] = 1.5
    with small_tiles():
        whole = compute_gae(**gae_kwargs(ro))
    for row in range(2):
        slices = episode_slices(ro.terminateds[row] + ro.truncateds[row])
        assert len(slices) >= 4
        pieces = [
            compute_gae(**gae_kwargs(ro.map(lambda x, s=s, r=row: x[r : r + 1, s], fields=STEP_FIELDS_GAE)))
            for s in slices
        ]
        assert_rel(whole[row : row + 1], torch.cat(pieces, dim=1), TOLERANCE[torch.float64])


@pytest.mark.parametrize(
    "layout",
    [pytest.param(time_major_storage, id="time-major"), pytest.param(every_other_step, id="step-stride-2")],
)
def test_strided_inputs(backend, layout, make_rollout):
    ro = make_rollout(3, 40)
    expected = compute_gae(**gae_kwargs(ro))
    kwargs = gae_kwargs(ro.map(layout, fields=STEP_FIELDS_GAE))
    snapshot = Snapshot(kwargs)
    torch.testing.assert_close(compute_gae(**kwargs), expected, rtol=1e-6, atol=1e-6)
    snapshot.assert_unchanged()


def test_expanded_inputs(backend, make_rollout):
    ro = make_rollout(3, 40)
    # stride 0 along time (one value per env), along rows (one rewards row for all envs)
    # and for the per-env last_value
    kwargs = {
        "rewards": ro.rewards[:1].expand(3, 40),
        "values": ro.values[:, :1].expand(3, 40),
        "terminateds": ro.terminateds,
        "last_value": ro.last_value[:1].expand(3),
    }
    dense = {name: value.contiguous() for name, value in kwargs.items()}
    snapshot = Snapshot(kwargs)
    out = compute_gae(**kwargs)
    torch.testing.assert_close(out, compute_gae(**dense), rtol=1e-6, atol=1e-6)
    assert_rel(out, reference.compute_gae(**{k: v.double() for k, v in dense.items()}), TOLERANCE[torch.float32])
    snapshot.assert_unchanged()


def test_inputs_unchanged(backend, make_rollout):
    for variant in VARIANTS:
        kwargs = gae_kwargs(make_rollout(3, 40), **variant.values[0])
        snapshot = Snapshot(kwargs)
        compute_gae(**kwargs)
        snapshot.assert_unchanged()


def test_time_dim_zero(backend, make_rollout):
    ro = make_rollout(5, 33)
    expected = compute_gae(**gae_kwargs(ro))
    time_major = ro.map(lambda x: x.t().contiguous(), fields=STEP_FIELDS_GAE)
    out = compute_gae(**gae_kwargs(time_major), time_dim=0)
    assert out.shape == (33, 5)
    torch.testing.assert_close(out, expected.t(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("time_dim", [-1, 2, 1], ids=["B1xB2xT", "B1xB2xT-dim2", "B1xTxB2"])
def test_batch_dims(backend, time_dim, make_rollout):
    ro = make_rollout((2, 3), 17)
    expected = oracle(ro).reshape(2, 3, 17)
    if time_dim == 1:
        moved = ro.map(lambda x: x.movedim(-1, 1), fields=STEP_FIELDS_GAE)
        out = compute_gae(**gae_kwargs(moved), time_dim=1)
        assert out.shape == (2, 17, 3)
        out = out.movedim(1, -1)
    else:
        out = compute_gae(**gae_kwargs(ro), time_dim=time_dim)
    assert out.shape == (2, 3, 17)
    assert_rel(out, expected, TOLERANCE[torch.float32])


def test_batch_dims_last_value(backend, make_rollout):
    ro = make_rollout((2, 3), 17)
    out = compute_gae(**gae_kwargs(ro, truncated=False, boot="last_value"))
    assert_rel(out, oracle(ro, truncated=False, boot="last_value").reshape(2, 3, 17), TOLERANCE[torch.float32])
    # one value per row, but flattened: the batch shape is (2, 3)
    flat = dict(gae_kwargs(ro, truncated=False, boot="last_value"), last_value=ro.last_value.reshape(6))
    with pytest.raises(_checks.InputError, match=r"last_value: expected shape \(2, 3\) \(the batch shape of rewards"):
        compute_gae(**flat)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_half_precision(backend, dtype, make_rollout):
    ro = make_rollout(3, 65, dtype=dtype)
    out = compute_gae(**gae_kwargs(ro))
    assert out.dtype == dtype
    assert_rel(out, oracle(ro), HALF_TOLERANCE)
    # computed in float32: with a float32 output the only error left is float32 rounding
    out32 = compute_gae(**gae_kwargs(ro), out_dtype=torch.float32)
    assert out32.dtype == torch.float32
    assert_rel(out32, oracle(ro), TOLERANCE[torch.float32])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("last_dtype", [torch.float32, torch.float64], ids=["last-f32", "last-f64"])
def test_wider_last_value_over_half_values_keeps_its_precision(backend, dtype, last_dtype, make_rollout):
    # a float32 or float64 last_value with bf16 or float16 values is not rounded to the values' type
    # (kernels/gae.py: next_state_value); float16 holds 1000.3 as 1000.5, bf16 10.01 as 10.0
    ro = make_rollout(3, 65, dtype=dtype)
    ro.terminateds[:, -1] = 0
    ro.last_value = torch.tensor([10.01, -3.3337, 1000.3], dtype=last_dtype, device=ro.values.device)
    out = compute_gae(**gae_kwargs(ro, truncated=False, boot="last_value"), out_dtype=torch.float32)
    assert_rel(out, oracle(ro, truncated=False, boot="last_value"), TOLERANCE[torch.float32])
    # the same numbers as bootstrap values of that type, with truncations
    ro.bootstrap_values = torch.zeros(ro.values.shape, dtype=last_dtype, device=ro.values.device)
    ro.bootstrap_values[:, -1] = ro.last_value
    out = compute_gae(**gae_kwargs(ro), out_dtype=torch.float32)
    assert_rel(out, oracle(ro), TOLERANCE[torch.float32])


def test_half_tolerance_catches_one_wrong_element(make_rollout):
    """A bf16 output of 80x96 steps is within HALF_TOLERANCE of the oracle as a whole even with one
    element off by 1 or one row's last value left out; assert_rel also bounds every element."""
    ro = make_rollout(80, 96, dtype=torch.bfloat16)
    ro.terminateds[7, -1] = 0
    ro.last_value[7] = 0.6
    kwargs = gae_kwargs(ro, truncated=False, boot="last_value")

    def float64_oracle(arguments):
        return reference.compute_gae(**{k: v.double() if isinstance(v, torch.Tensor) else v
                                        for k, v in arguments.items()})

    expected = float64_oracle(kwargs)
    exact = expected.to(torch.bfloat16)
    assert_rel(exact, expected, HALF_TOLERANCE)
    one_off = exact.clone()
    one_off[41, 50] += 1.0
    no_last_value = dict(kwargs, last_value=ro.last_value.clone())
    no_last_value["last_value"][7] = 0.0
    dropped = float64_oracle(no_last_value).to(torch.bfloat16)
    for wrong in (one_off, dropped):
        # the norm alone would pass it
        assert rel_err(wrong, expected) <= HALF_TOLERANCE
        with pytest.raises(AssertionError, match="element"):
            assert_rel(wrong, expected, HALF_TOLERANCE)


@pytest.mark.parametrize("flag_dtype", [torch.bool, torch.uint8, torch.float64], ids=["bool", "uint8", "f64"])
def test_flag_dtypes(backend, flag_dtype, make_rollout):
    ro = make_rollout(3, 65)
    expected = compute_gae(**gae_kwargs(ro))
    flags = ro.map(lambda x: x.to(flag_dtype), fields=("terminateds", "truncateds"))
    # flags of another width may change the tile plan (vector loads) and so the scan's order of
    # combining steps: equal up to float32 rounding, not always bitwise
    assert_rel(compute_gae(**gae_kwargs(flags)), expected, TOLERANCE[torch.float32])


def test_nonbinary_float_flags_count_as_set(backend, make_rollout):
    ro = make_rollout(3, 65)
    expected = compute_gae(**gae_kwargs(ro))
    scaled = ro.map(lambda x: x * 2.5, fields=("terminateds", "truncateds"))
    torch.testing.assert_close(compute_gae(**gae_kwargs(scaled)), expected, rtol=0, atol=0)


@pytest.mark.parametrize("out_dtype", [torch.float64, torch.bfloat16], ids=["f64", "bf16"])
def test_out_dtype(backend, out_dtype, make_rollout):
    ro = make_rollout(3, 65)
    out = compute_gae(**gae_kwargs(ro), out_dtype=out_dtype)
    assert out.dtype == out_dtype
    assert_rel(out, oracle(ro), TOLERANCE[torch.float32] if out_dtype == torch.float64 else HALF_TOLERANCE)


def test_public_name():
    assert rl_triton.compute_gae is compute_gae


def test_empty(backend, device):
    empty = torch.zeros(3, 0, device=device)
    assert compute_gae(empty, empty, empty).shape == (3, 0)
    no_rows = torch.zeros(0, 5, device=device)
    assert compute_gae(no_rows, no_rows, no_rows).shape == (0, 5)


ERROR_CASES = [
    pytest.param(lambda k: broken(k, values=k["values"][:, :-1]), _checks.InputError, ("values",), id="values-shape"),
    pytest.param(
        lambda k: broken(k, terminateds=k["terminateds"][:1]), _checks.InputError, ("terminateds",), id="term-shape"
    ),
    pytest.param(
        lambda k: broken(k, truncateds=k["truncateds"].t()), _checks.InputError, ("truncateds",), id="trunc-shape"
    ),
    pytest.param(
        lambda k: broken(k, bootstrap_values=k["bootstrap_values"][:, None]),
        _checks.InputError,
        ("bootstrap_values",),
        id="bootstrap-shape",
    ),
    pytest.param(
        lambda k: broken(k, truncateds=None, bootstrap_values=None, last_value=k["rewards"][:, 0].repeat(2)),
        _checks.InputError,
        ("last_value",),
        id="last_value-shape",
    ),
    pytest.param(
        lambda k: broken(k, rewards=k["rewards"].to(torch.int64)),
        _checks.InputTypeError,
        ("rewards",),
        id="int-rewards",
    ),
    pytest.param(
        lambda k: broken(k, values=k["values"].to(torch.int32)), _checks.InputTypeError, ("values",), id="int-values"
    ),
    pytest.param(
        lambda k: broken(k, rewards=k["rewards"].tolist()), _checks.InputTypeError, ("rewards",), id="list-rewards"
    ),
    pytest.param(lambda k: broken(k, values=1.0), _checks.InputTypeError, ("values",), id="float-values"),
    pytest.param(lambda k: broken(k, gamma=1.5), _checks.InputError, ("gamma",), id="gamma-above-1"),
    pytest.param(lambda k: broken(k, gamma=-0.1), _checks.InputError, ("gamma",), id="gamma-negative"),
    pytest.param(lambda k: broken(k, gamma=float("nan")), _checks.InputError, ("gamma",), id="gamma-nan"),
    pytest.param(lambda k: broken(k, lambda_=1.01), _checks.InputError, ("lambda_",), id="lambda-above-1"),
    pytest.param(lambda k: broken(k, lambda_=-1.0), _checks.InputError, ("lambda_",), id="lambda-negative"),
    pytest.param(
        lambda k: broken(k, truncateds=None, last_value=k["rewards"][:, 0]),
        _checks.InputError,
        ("last_value", "bootstrap_values"),
        id="last_value-and-bootstrap",
    ),
    pytest.param(
        lambda k: broken(k, bootstrap_values=None, last_value=k["rewards"][:, 0]),
        _checks.InputError,
        ("last_value", "truncateds"),
        id="last_value-and-truncateds",
    ),
    pytest.param(lambda k: broken(k, time_dim=2), _checks.InputError, ("time_dim",), id="time_dim-range"),
    pytest.param(lambda k: broken(k, out_dtype=torch.int32), _checks.InputTypeError, ("out_dtype",), id="out_dtype"),
]


@pytest.mark.parametrize("mutate, error, names", ERROR_CASES)
def test_errors(mutate, error, names, make_rollout):
    kwargs = mutate(gae_kwargs(make_rollout(3, 8)))
    with pytest.raises(error, match=name_pattern(*names)):
        compute_gae(**kwargs)
    with pytest.raises(AssertionError):
        compute_gae(**kwargs)


@pytest.mark.parametrize("name", ["values", "terminateds", "truncateds", "bootstrap_values"])
def test_device_mismatch(name, make_rollout):
    kwargs = gae_kwargs(make_rollout(3, 8))
    kwargs[name] = on_another_device(kwargs[name])
    with pytest.raises(_checks.InputError, match=name_pattern(name, "device")):
        compute_gae(**kwargs)


def test_correctness_checks(monkeypatch, make_rollout):
    ro = make_rollout(3, 20)
    monkeypatch.setenv("RL_TRITON_CORRECTNESS_WARNINGS", "1")
    assert torch.isfinite(compute_gae(**gae_kwargs(ro))).all()

    both = gae_kwargs(ro)
    both["terminateds"] = ro.terminateds.clone()
    both["truncateds"] = ro.truncateds.clone()
    both["terminateds"][1, 5] = 1
    both["truncateds"][1, 5] = 1
    with pytest.raises(_checks.InputError, match=name_pattern("terminated", "truncated")):
        assert torch.isfinite(compute_gae(**both)).all()

    stray = gae_kwargs(ro)
    stray["truncateds"] = ro.truncateds.clone()
    stray["truncateds"][2, 7] = 0
    stray["terminateds"] = ro.terminateds.clone()
    stray["terminateds"][2, 7] = 0
    stray["bootstrap_values"] = ro.bootstrap_values.clone()
    stray["bootstrap_values"][2, 7] = 0.5
    with pytest.raises(_checks.InputError, match=name_pattern("bootstrap_values")):
        compute_gae(**stray)

    # without truncation flags every interior bootstrap value is stray
    no_flags = gae_kwargs(ro, truncated=False)
    no_flags["bootstrap_values"] = torch.zeros_like(ro.bootstrap_values)
    no_flags["bootstrap_values"][0, 3] = 1.0
    with pytest.raises(_checks.InputError, match=name_pattern("bootstrap_values", "added")):
        compute_gae(**no_flags)

    monkeypatch.setenv("RL_TRITON_CORRECTNESS_WARNINGS", "0")
    # unchecked, a stray bootstrap value is added to v_next as documented
    dense = {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in no_flags.items()}
    assert_rel(compute_gae(**no_flags), reference.compute_gae(**dense), TOLERANCE[torch.float32])
    assert torch.isfinite(compute_gae(**both)).all()
