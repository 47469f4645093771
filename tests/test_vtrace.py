"""compute_vtrace: float64 oracle, hand-computed values, identities, episodes, layouts, dtypes, errors."""

import math

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
    assert_outputs_rel,
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
from rl_triton.ops.gae import compute_gae
from rl_triton.ops.returns import compute_lambda_returns
from rl_triton.ops.vtrace import compute_vtrace

STEP_FIELDS = (
    "log_pi_target",
    "log_pi_behavior",
    "values",
    "rewards",
    "terminateds",
    "truncateds",
    "bootstrap_values",
)


def vtrace_kwargs(ro, *, truncated=True, boot="bootstrap", gamma=0.99, rho_bar=1.0, c_bar=1.0):
    return {
        "log_pi_target": ro.log_pi_target,
        "log_pi_behavior": ro.log_pi_behavior,
        "values": ro.values,
        "rewards": ro.rewards,
        "terminateds": ro.terminateds,
        "truncateds": ro.truncateds if truncated else None,
        "gamma": gamma,
        "rho_bar": rho_bar,
        "c_bar": c_bar,
        "bootstrap_values": ro.bootstrap_values if boot == "bootstrap" else None,
        "last_value": ro.last_value if boot == "last_value" else None,
    }


def oracle(ro, **kwargs):
    return reference.compute_vtrace(**vtrace_kwargs(ro.oracle_inputs(), **kwargs))



@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("truncated", [False, True], ids=["notrunc", "trunc"])
def test_float32_last_value_over_half_values_keeps_its_precision(backend, dtype, truncated, make_rollout):
    # a float32 last_value with bf16 or float16 values is not rounded to the values' type (kernels/gae.py:
    # next_state_value, which V-trace shares); float16 holds 1000.3 as 1000.5, bf16 10.01 as 10.0
    ro = make_rollout(3, 65, dtype=dtype)
    ro.terminateds[:, -1] = 0
    ro.truncateds[:, -1] = 0
    ro.last_value = torch.tensor([10.01, -3.3337, 1000.3], device=ro.values.device)
    kwargs = vtrace_kwargs(ro, truncated=truncated, boot="last_value")
    assert_outputs_rel(compute_vtrace(**kwargs, out_dtype=torch.float32),
                       oracle(ro, truncated=truncated, boot="last_value"), TOLERANCE[torch.float32])

VARIANTS = [
    pytest.param({"truncated": True, "boot": "bootstrap"}, id="trunc-bootstrap"),
    pytest.param({"truncated": True, "boot": None}, id="trunc-nobootstrap"),
    pytest.param({"truncated": True, "boot": "last_value"}, id="trunc-lastvalue"),
    pytest.param({"truncated": False, "boot": "bootstrap"}, id="notrunc-bootstrap"),
    pytest.param({"truncated": False, "boot": None}, id="notrunc-nobootstrap"),
    pytest.param({"truncated": False, "boot": "last_value"}, id="notrunc-lastvalue"),
]


@pytest.mark.parametrize("dtype, rows, seq_len", SHAPES)
def test_matches_oracle(backend, dtype, rows, seq_len, make_rollout):
    ro = make_rollout(rows, seq_len, dtype=dtype)
    targets, advantages = compute_vtrace(**vtrace_kwargs(ro))
    assert targets.dtype == advantages.dtype == dtype
    assert_outputs_rel((targets, advantages), oracle(ro), TOLERANCE[dtype])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_argument_variants(backend, dtype, variant, make_rollout):
    ro = make_rollout(3, 65, dtype=dtype)
    assert_outputs_rel(compute_vtrace(**vtrace_kwargs(ro, **variant)), oracle(ro, **variant), TOLERANCE[dtype])


@pytest.mark.parametrize(
    "gamma, rho_bar, c_bar",
    [
        (0.0, 1.0, 1.0),
        (1.0, 1.0, 1.0),
        (0.99, 2.0, 1.0),
        (0.99, 1.0, 0.5),
        (0.99, 0.5, 2.0),
        (0.99, math.inf, math.inf),
        (0.99, 0.0, 0.0),
    ],
)
def test_gamma_and_clipping(backend, gamma, rho_bar, c_bar, make_rollout):
    ro = make_rollout(3, 65)
    params = {"gamma": gamma, "rho_bar": rho_bar, "c_bar": c_bar}
    assert_outputs_rel(compute_vtrace(**vtrace_kwargs(ro, **params)), oracle(ro, **params), TOLERANCE[torch.float32])


@pytest.mark.parametrize("tile, rows, seq_len", TILE_CASES)
def test_tiles(tile, rows, seq_len, make_rollout):
    ro = make_rollout(rows, seq_len)
    # vs[t+1] crosses every chunk edge: the advantages read the next chunk's first target
    with _dispatch.use_backend("triton"), _launch.tile_override(**tile):
        out = compute_vtrace(**vtrace_kwargs(ro, rho_bar=1.5))
        out_last_value = compute_vtrace(**vtrace_kwargs(ro, boot="last_value"))
    assert_outputs_rel(out, oracle(ro, rho_bar=1.5), TOLERANCE[torch.float32])
    assert_outputs_rel(out_last_value, oracle(ro, boot="last_value"), TOLERANCE[torch.float32])


@pytest.mark.parametrize("tile", VARIANT_TILES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_argument_variants_across_chunks(tile, variant, make_rollout):
    ro = make_rollout(3, 200)
    with _dispatch.use_backend("triton"), _launch.tile_override(**tile):
        out = compute_vtrace(**vtrace_kwargs(ro, **variant))
    assert_outputs_rel(out, oracle(ro, **variant), TOLERANCE[torch.float32])


@pytest.mark.parametrize("tile", VARIANT_TILES)
def test_narrow_outputs_across_chunks(tile, make_rollout):
    """A bf16 ``out_dtype`` of float32 inputs: the float32 results rounded once (assert_rounded_once),
    across chunk edges and walked segments."""
    ro = make_rollout(3, 200)
    with _dispatch.use_backend("triton"), _launch.tile_override(**tile):
        narrow = compute_vtrace(**vtrace_kwargs(ro), out_dtype=torch.bfloat16)
        wide = compute_vtrace(**vtrace_kwargs(ro))
    assert_rounded_once(narrow, wide)
    assert_outputs_rel(wide, oracle(ro), TOLERANCE[torch.float32])


@pytest.mark.parametrize("truncated", [True, False], ids=["trunc", "notrunc"])
def test_last_value_is_bootstrap_last_column(backend, truncated, make_rollout):
    ro = make_rollout(3, 65)
    column = torch.zeros_like(ro.rewards)
    column[:, -1] = ro.last_value
    by_last_value = compute_vtrace(**vtrace_kwargs(ro, truncated=truncated, boot="last_value"))
    by_column = compute_vtrace(**{**vtrace_kwargs(ro, truncated=truncated, boot=None), "bootstrap_values": column})
    for a, b in zip(by_last_value, by_column, strict=True):
        if backend == "reference":
            # one code path, the same float operations
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        else:
            # two kernel specialisations: compiled, the compiler may fuse their multiplies and adds
            # differently (equal up to float32 rounding, not always bitwise), as in test_gae
            assert_rel(a, b, TOLERANCE[torch.float32])


def log(values):
    return [math.log(v) for v in values]


# hand-computed with gamma = 0.5
GOLDEN = [
    pytest.param(
        {
            "log_pi_target": log([0.5, 0.25, 0.5]),
            "log_pi_behavior": log([0.5, 0.5, 0.25]),
            "values": [2.0, 2.0, 4.0],
            "rewards": [1.0, 2.0, 1.0],
            "terminateds": [0, 0, 0],
            "last_value": 2.0,
            "rho_bar": 1.5,
            "c_bar": 1.0,
        },
        # ratio = [1, 0.5, 2]; rho = min(1.5, ratio) = [1, 0.5, 1.5]; c = min(1, ratio) = [1, 0.5, 1]
        # v_next = [2, 4, 2 = last_value]
        # delta = rho * (r + 0.5 v_next - v) = [1 * (1 + 1 - 2), 0.5 * (2 + 2 - 2), 1.5 * (1 + 1 - 4)] = [0, 1, -3]
        # D2 = -3; D1 = 1 + 0.5 * 0.5 * -3 = 0.25; D0 = 0 + 0.5 * 1 * 0.25 = 0.125
        # vs = D + v = [2.125, 2.25, 1]; vs_next = [2.25, 1, 2 = last_value]
        # A = rho * (r + 0.5 vs_next - v) = [1 + 1.125 - 2, 0.5 * (2 + 0.5 - 2), 1.5 * (1 + 1 - 4)]
        ([2.125, 2.25, 1.0], [0.125, 0.25, -3.0]),
        id="clipped-ratios",
    ),
    pytest.param(
        {
            "log_pi_target": [0.0, 0.0, 0.0, 0.0],
            "log_pi_behavior": [0.0, 0.0, 0.0, 0.0],
            "values": [2.0, 2.0, 2.0, 2.0],
            "rewards": [1.0, 1.0, 1.0, 1.0],
            "terminateds": [0, 1, 0, 0],
            "truncateds": [0, 0, 1, 0],
            "bootstrap_values": [0.0, 0.0, 6.0, 4.0],
        },
        # ratio 1; done = [0, 1, 1, 0]
        # v_next = [2, 2 (gated by terminated), 0 * 2 + 6, 0 + 4]
        # delta = [1 + 1 - 2, 1 - 2, 1 + 3 - 2, 1 + 2 - 2] = [0, -1, 2, 1]
        # D3 = 1; D2 = 2; D1 = -1; D0 = 0 + 0.5 * -1 = -0.5  ->  vs = [1.5, 1, 4, 3]
        # vs_next = [vs1, vs2, 0 * vs3 + 6, 0 + 4] = [1, 4, 6, 4]
        # A = r + 0.5 (1 - terminated) vs_next - v = [1 + 0.5 - 2, 1 - 2, 1 + 3 - 2, 1 + 2 - 2]
        ([1.5, 1.0, 4.0, 3.0], [-0.5, -1.0, 2.0, 1.0]),
        id="termination-truncation",
    ),
]


@pytest.mark.parametrize("inputs, expected", GOLDEN)
@pytest.mark.parametrize("dtype", DTYPES)
def test_golden(backend, device, dtype, inputs, expected):
    kwargs = {
        name: torch.tensor([value], dtype=dtype, device=device) if isinstance(value, list) else value
        for name, value in inputs.items()
    }
    if "last_value" in kwargs:
        kwargs["last_value"] = torch.tensor([kwargs["last_value"]], dtype=dtype, device=device)
    for compute in (compute_vtrace, reference.compute_vtrace):
        out = compute(**kwargs, gamma=0.5)
        for got, want in zip(out, expected, strict=True):
            torch.testing.assert_close(got.cpu().double(), torch.tensor([want], dtype=torch.float64), rtol=0, atol=1e-6)


def test_on_policy_is_lambda_one_return(backend, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64)
    ro.log_pi_target = ro.log_pi_behavior.clone()
    targets, advantages = compute_vtrace(**vtrace_kwargs(ro, gamma=0.95))

    gae = compute_gae(
        ro.rewards, ro.values, ro.terminateds, ro.truncateds, 0.95, 1.0, bootstrap_values=ro.bootstrap_values
    )
    assert_rel(targets, gae + ro.values, TOLERANCE[torch.float64])

    next_values = torch.zeros_like(ro.values)
    next_values[:, :-1] = ro.values[:, 1:]
    next_values = next_values * (1 - ro.truncateds)
    next_values[:, -1] = ro.bootstrap_values[:, -1]
    returns = compute_lambda_returns(
        ro.rewards, next_values, ro.terminateds, ro.truncateds, 0.95, 1.0, bootstrap_values=ro.bootstrap_values
    )
    assert_rel(targets, returns, TOLERANCE[torch.float64])

    # on-policy advantages are one-step TD errors against the V-trace targets
    next_targets = torch.zeros_like(targets)
    next_targets[:, :-1] = targets[:, 1:]
    next_targets = next_targets * (1 - ro.truncateds) + ro.bootstrap_values
    td = ro.rewards + 0.95 * (1 - ro.terminateds) * next_targets - ro.values
    assert_rel(advantages, td, TOLERANCE[torch.float64])


def test_advantages_from_targets(backend, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64)
    targets, advantages = compute_vtrace(**vtrace_kwargs(ro, gamma=0.9, rho_bar=1.3))
    rho = torch.exp(ro.log_pi_target - ro.log_pi_behavior).clamp(max=1.3)
    next_targets = torch.zeros_like(targets)
    next_targets[:, :-1] = targets[:, 1:]
    next_targets = next_targets * (1 - ro.truncateds) + ro.bootstrap_values
    expected = rho * (ro.rewards + 0.9 * (1 - ro.terminateds) * next_targets - ro.values)
    assert_rel(advantages, expected, TOLERANCE[torch.float64])


def test_episode_split(backend, make_rollout):
    ro = make_rollout(2, 100, dtype=torch.float64, term_rate=0.06, trunc_rate=0.04)
    ro.terminateds[0, 10:12] = 1
    ro.truncateds[0, 10:12] = 0
    ro.bootstrap_values[0, 10:12] = 0
    with small_tiles():
        whole = compute_vtrace(**vtrace_kwargs(ro, rho_bar=1.5))
    for row in range(2):
        slices = episode_slices(ro.terminateds[row] + ro.truncateds[row])
        assert len(slices) >= 4
        pieces = [
            compute_vtrace(
                **vtrace_kwargs(ro.map(lambda x, s=s, r=row: x[r : r + 1, s], fields=STEP_FIELDS), rho_bar=1.5)
            )
            for s in slices
        ]
        for index in range(2):
            joined = torch.cat([piece[index] for piece in pieces], dim=1)
            assert_rel(whole[index][row : row + 1], joined, TOLERANCE[torch.float64])


@pytest.mark.parametrize(
    "layout",
    [pytest.param(time_major_storage, id="time-major"), pytest.param(every_other_step, id="step-stride-2")],
)
def test_strided_inputs(backend, layout, make_rollout):
    ro = make_rollout(3, 40)
    expected = compute_vtrace(**vtrace_kwargs(ro))
    kwargs = vtrace_kwargs(ro.map(layout, fields=STEP_FIELDS))
    snapshot = Snapshot(kwargs)
    for got, want in zip(compute_vtrace(**kwargs), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    snapshot.assert_unchanged()


def test_expanded_inputs(backend, make_rollout):
    ro = make_rollout(3, 40)
    kwargs = {
        "log_pi_target": ro.log_pi_target,
        # one behaviour log-prob per step shared by all envs, one value per env
        "log_pi_behavior": ro.log_pi_behavior[:1].expand(3, 40),
        "values": ro.values[:, :1].expand(3, 40),
        "rewards": ro.rewards,
        "terminateds": ro.terminateds,
        "truncateds": ro.truncateds,
        "last_value": ro.last_value[:1].expand(3),
    }
    dense = {name: value.contiguous() for name, value in kwargs.items()}
    snapshot = Snapshot(kwargs)
    out = compute_vtrace(**kwargs)
    expected = reference.compute_vtrace(**{k: v.double() for k, v in dense.items()})
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])
    snapshot.assert_unchanged()


def test_inputs_unchanged(backend, make_rollout):
    for variant in VARIANTS:
        kwargs = vtrace_kwargs(make_rollout(3, 40), **variant.values[0])
        snapshot = Snapshot(kwargs)
        compute_vtrace(**kwargs)
        snapshot.assert_unchanged()


def test_time_dim_zero(backend, make_rollout):
    ro = make_rollout(5, 33)
    expected = compute_vtrace(**vtrace_kwargs(ro))
    time_major = ro.map(lambda x: x.t().contiguous(), fields=STEP_FIELDS)
    out = compute_vtrace(**vtrace_kwargs(time_major), time_dim=0)
    for got, want in zip(out, expected, strict=True):
        assert got.shape == (33, 5)
        torch.testing.assert_close(got, want.t(), rtol=1e-6, atol=1e-6)


def test_batch_dims(backend, make_rollout):
    ro = make_rollout((2, 3), 17)
    targets, advantages = compute_vtrace(**vtrace_kwargs(ro, boot="last_value"))
    assert targets.shape == advantages.shape == (2, 3, 17)
    expected = [x.reshape(2, 3, 17) for x in oracle(ro, boot="last_value")]
    assert_outputs_rel((targets, advantages), tuple(expected), TOLERANCE[torch.float32])


def test_interior_time_dim(backend, make_rollout):
    ro = make_rollout((2, 3), 17)
    # [B1, T, B2] inputs with time_dim=1, last_value [B1, B2]
    moved = ro.map(lambda x: x.movedim(2, 1), fields=STEP_FIELDS)
    out = compute_vtrace(**vtrace_kwargs(moved, boot="last_value"), time_dim=1)
    assert all(x.shape == (2, 17, 3) for x in out)
    expected = tuple(x.reshape(2, 3, 17) for x in oracle(ro, boot="last_value"))
    assert_outputs_rel(tuple(x.movedim(1, 2) for x in out), expected, TOLERANCE[torch.float32])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_half_precision(backend, dtype, make_rollout):
    ro = make_rollout(3, 65, dtype=dtype)
    out = compute_vtrace(**vtrace_kwargs(ro))
    assert all(x.dtype == dtype for x in out)
    assert_outputs_rel(out, oracle(ro), HALF_TOLERANCE)
    out32 = compute_vtrace(**vtrace_kwargs(ro), out_dtype=torch.float32)
    assert all(x.dtype == torch.float32 for x in out32)
    assert_outputs_rel(out32, oracle(ro), TOLERANCE[torch.float32])


@pytest.mark.parametrize("flag_dtype", [torch.bool, torch.uint8], ids=["bool", "uint8"])
def test_flag_dtypes(backend, flag_dtype, make_rollout):
    ro = make_rollout(3, 65)
    expected = compute_vtrace(**vtrace_kwargs(ro))
    flags = ro.map(lambda x: x.to(flag_dtype), fields=("terminateds", "truncateds"))
    for got, want in zip(compute_vtrace(**vtrace_kwargs(flags)), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_out_dtype(backend, make_rollout):
    ro = make_rollout(3, 65)
    out = compute_vtrace(**vtrace_kwargs(ro), out_dtype=torch.float64)
    assert all(x.dtype == torch.float64 for x in out)
    assert_outputs_rel(out, oracle(ro), TOLERANCE[torch.float32])


def test_public_name():
    assert rl_triton.compute_vtrace is compute_vtrace


def test_empty(backend, device):
    empty = torch.zeros(2, 0, device=device)
    targets, advantages = compute_vtrace(empty, empty, empty, empty, empty)
    assert targets.shape == advantages.shape == (2, 0)


ERROR_CASES = [
    pytest.param(
        lambda k: broken(k, log_pi_target=k["log_pi_target"][:, 1:]), _checks.InputError, ("log_pi_target",), id="lpt"
    ),
    pytest.param(
        lambda k: broken(k, log_pi_behavior=k["log_pi_behavior"][:2]),
        _checks.InputError,
        ("log_pi_behavior",),
        id="lpb",
    ),
    pytest.param(
        lambda k: broken(k, values=k["values"][..., None]), _checks.InputError, ("values",), id="values-shape"
    ),
    pytest.param(
        lambda k: broken(k, terminateds=k["terminateds"][:, :-1]), _checks.InputError, ("terminateds",), id="term-shape"
    ),
    pytest.param(
        lambda k: broken(k, bootstrap_values=k["bootstrap_values"][:, :1]),
        _checks.InputError,
        ("bootstrap_values",),
        id="bootstrap-shape",
    ),
    pytest.param(
        lambda k: broken(k, bootstrap_values=None, last_value=k["rewards"]),
        _checks.InputError,
        ("last_value",),
        id="last_value-shape",
    ),
    pytest.param(
        lambda k: broken(k, log_pi_target=k["log_pi_target"].to(torch.int32)),
        _checks.InputTypeError,
        ("log_pi_target",),
        id="int-log-probs",
    ),
    pytest.param(
        lambda k: broken(k, rewards=k["rewards"].numpy(force=True)), _checks.InputTypeError, ("rewards",), id="numpy"
    ),
    pytest.param(lambda k: broken(k, gamma=1.5), _checks.InputError, ("gamma",), id="gamma-above-1"),
    pytest.param(lambda k: broken(k, gamma=-0.5), _checks.InputError, ("gamma",), id="gamma-negative"),
    pytest.param(lambda k: broken(k, rho_bar=-1.0), _checks.InputError, ("rho_bar",), id="rho_bar-negative"),
    pytest.param(lambda k: broken(k, c_bar=float("nan")), _checks.InputError, ("c_bar",), id="c_bar-nan"),
    pytest.param(lambda k: broken(k, gamma="0.9"), _checks.InputTypeError, ("gamma",), id="gamma-string"),
    pytest.param(
        lambda k: broken(k, last_value=k["rewards"][:, 0]),
        _checks.InputError,
        ("last_value", "bootstrap_values"),
        id="last_value-and-bootstrap",
    ),
    pytest.param(lambda k: broken(k, time_dim=-3), _checks.InputError, ("time_dim",), id="time_dim-range"),
    pytest.param(lambda k: broken(k, out_dtype="float32"), _checks.InputTypeError, ("out_dtype",), id="out_dtype"),
]


@pytest.mark.parametrize("mutate, error, names", ERROR_CASES)
def test_errors(mutate, error, names, make_rollout):
    kwargs = mutate(vtrace_kwargs(make_rollout(3, 8)))
    with pytest.raises(error, match=name_pattern(*names)):
        compute_vtrace(**kwargs)
    with pytest.raises(AssertionError):
        compute_vtrace(**kwargs)


@pytest.mark.parametrize("name", ["log_pi_target", "log_pi_behavior", "values", "truncateds", "bootstrap_values"])
def test_device_mismatch(name, make_rollout):
    kwargs = vtrace_kwargs(make_rollout(3, 8))
    kwargs[name] = on_another_device(kwargs[name])
    with pytest.raises(_checks.InputError, match=name_pattern(name, "device")):
        compute_vtrace(**kwargs)


def test_correctness_checks(monkeypatch, make_rollout):
    ro = make_rollout(3, 20)
    monkeypatch.setenv("RL_TRITON_CORRECTNESS_WARNINGS", "1")
    assert all(torch.isfinite(x).all() for x in compute_vtrace(**vtrace_kwargs(ro)))

    both = vtrace_kwargs(ro)
    both["terminateds"] = ro.terminateds.clone()
    both["truncateds"] = ro.truncateds.clone()
    both["terminateds"][0, 0] = 1
    both["truncateds"][0, 0] = 1
    with pytest.raises(_checks.InputError, match=name_pattern("terminated", "truncated")):
        compute_vtrace(**both)

    stray = vtrace_kwargs(ro)
    stray["truncateds"] = ro.truncateds.clone()
    stray["terminateds"] = ro.terminateds.clone()
    stray["bootstrap_values"] = ro.bootstrap_values.clone()
    stray["truncateds"][1, 4] = 0
    stray["terminateds"][1, 4] = 0
    stray["bootstrap_values"][1, 4] = -2.0
    with pytest.raises(_checks.InputError, match=name_pattern("bootstrap_values", "added")):
        compute_vtrace(**stray)

    # log pi(a) = -inf: the target policy never takes the action, so rho = c = 0 there
    impossible = vtrace_kwargs(ro)
    impossible["log_pi_target"] = ro.log_pi_target.clone()
    impossible["log_pi_target"][0, 3] = -math.inf
    impossible["log_pi_target"][2, 19] = -math.inf
    dense = {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in impossible.items()}
    expected = reference.compute_vtrace(**dense)
    assert all(torch.isfinite(x).all() for x in expected)
    assert float(expected[1][0, 3]) == 0.0  # rho = 0: no advantage at a step the target never takes
    assert_outputs_rel(compute_vtrace(**impossible), expected, TOLERANCE[torch.float32])
    for name, value in (("log_pi_target", math.nan), ("log_pi_target", math.inf), ("log_pi_behavior", -math.inf),
                        ("log_pi_behavior", math.nan)):
        bad = vtrace_kwargs(ro)
        bad[name] = getattr(ro, name).clone()
        bad[name][1, 2] = value
        with pytest.raises(_checks.InputError, match=name_pattern(name, "log-probabilities")):
            compute_vtrace(**bad)

    monkeypatch.delenv("RL_TRITON_CORRECTNESS_WARNINGS")
    assert_outputs_rel(
        compute_vtrace(**stray),
        reference.compute_vtrace(**{k: v.double() if isinstance(v, torch.Tensor) else v for k, v in stray.items()}),
        TOLERANCE[torch.float32],
    )
