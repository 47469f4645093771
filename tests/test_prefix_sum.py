"""compute_episodic_prefix_sum: float64 oracle, hand-computed values, identities, episodes, layouts, errors."""

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

BOUNDARIES = ["ends_at", "starts_at"]
STEP_FIELDS = ("inputs", "dones")


def prefix_kwargs(ro, *, seed=True, boundary="ends_at"):
    return {
        "inputs": ro.inputs,
        "dones": ro.dones,
        "seed_values": ro.seed_values if seed else None,
        "boundary": boundary,
    }


def oracle(ro, **kwargs):
    return reference.compute_episodic_prefix_sum(**prefix_kwargs(ro.oracle_inputs(), **kwargs))


def shift_left(flags):
    """f[t] = flags[t+1], f[T-1] = 0."""
    out = torch.zeros_like(flags)
    out[:, :-1] = flags[:, 1:]
    return out


def shift_right(flags):
    """f[t] = flags[t-1], f[0] = 0."""
    out = torch.zeros_like(flags)
    out[:, 1:] = flags[:, :-1]
    return out


@pytest.mark.parametrize("dtype, rows, seq_len", SHAPES)
def test_matches_oracle(backend, dtype, rows, seq_len, make_rollout):
    ro = make_rollout(rows, seq_len, dtype=dtype)
    out = compute_episodic_prefix_sum(**prefix_kwargs(ro))
    assert out.dtype == dtype
    assert_rel(out, oracle(ro), TOLERANCE[dtype])


def test_largest_shape(backend, make_rollout):
    ro = make_rollout(*LARGEST_SHAPE)
    assert_rel(compute_episodic_prefix_sum(**prefix_kwargs(ro)), oracle(ro), TOLERANCE[torch.float32])


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("seed", [True, False], ids=["seed", "noseed"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_argument_variants(backend, dtype, seed, boundary, make_rollout):
    ro = make_rollout(3, 65, dtype=dtype, term_rate=0.1, trunc_rate=0.1)
    # a flag on the first step: starts_at drops the seed there, ends_at keeps it
    ro.dones[0, 0] = 1
    params = {"seed": seed, "boundary": boundary}
    assert_rel(compute_episodic_prefix_sum(**prefix_kwargs(ro, **params)), oracle(ro, **params), TOLERANCE[dtype])


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("tile, rows, seq_len", TILE_CASES)
def test_tiles(tile, rows, seq_len, boundary, make_rollout):
    ro = make_rollout(rows, seq_len)
    with _dispatch.use_backend("triton"), _launch.tile_override(**tile):
        out = compute_episodic_prefix_sum(**prefix_kwargs(ro, boundary=boundary))
    assert_rel(out, oracle(ro, boundary=boundary), TOLERANCE[torch.float32])


@pytest.mark.parametrize("tile", VARIANT_TILES)
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_without_seed_across_chunks(tile, boundary, make_rollout):
    ro = make_rollout(3, 200)
    ro.dones[0, 0] = 1
    with _dispatch.use_backend("triton"), _launch.tile_override(**tile):
        out = compute_episodic_prefix_sum(**prefix_kwargs(ro, seed=False, boundary=boundary))
    assert_rel(out, oracle(ro, seed=False, boundary=boundary), TOLERANCE[torch.float32])


GOLDEN = [
    # x = [1, 2, 3, 4, 5], flags at t=1 and t=4, seed 10
    # ends_at:   C = [1 + 10, 2 + 11, 3 (reset after t=1), 3 + 4, 7 + 5]
    # starts_at: C = [1 + 10, 2 (reset at t=1), 2 + 3, 5 + 4, 5 (reset at t=4)]
    pytest.param([1.0, 2.0, 3.0, 4.0, 5.0], [0, 1, 0, 0, 1], 10.0, "ends_at", [11.0, 13.0, 3.0, 7.0, 12.0], id="ends"),
    pytest.param(
        [1.0, 2.0, 3.0, 4.0, 5.0], [0, 1, 0, 0, 1], 10.0, "starts_at", [11.0, 2.0, 5.0, 9.0, 5.0], id="starts"
    ),
    # a flag on the first step: ends_at continues the seed, starts_at drops it
    pytest.param([1.0, 1.0, 1.0], [1, 0, 0], 5.0, "ends_at", [6.0, 1.0, 2.0], id="ends-first-flag"),
    pytest.param([1.0, 1.0, 1.0], [1, 0, 0], 5.0, "starts_at", [1.0, 2.0, 3.0], id="starts-first-flag"),
    # no seed: a reset-aware step counter
    pytest.param([1.0, 1.0, 1.0, 1.0], [0, 0, 1, 0], None, "ends_at", [1.0, 2.0, 3.0, 1.0], id="counter"),
]


@pytest.mark.parametrize("inputs, dones, seed, boundary, expected", GOLDEN)
@pytest.mark.parametrize("dtype", DTYPES)
def test_golden(backend, device, dtype, inputs, dones, seed, boundary, expected):
    inputs = torch.tensor([inputs], dtype=dtype, device=device)
    dones = torch.tensor([dones], dtype=torch.bool, device=device)
    seed = None if seed is None else torch.tensor([seed], dtype=dtype, device=device)
    expected = torch.tensor([expected], dtype=torch.float64)
    for compute in (compute_episodic_prefix_sum, reference.compute_episodic_prefix_sum):
        out = compute(inputs, dones, seed, boundary=boundary)
        torch.testing.assert_close(out.cpu().double(), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_no_flags_is_cumsum(backend, boundary, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64, term_rate=0.0, trunc_rate=0.0)
    out = compute_episodic_prefix_sum(**prefix_kwargs(ro, boundary=boundary))
    assert_rel(out, ro.inputs.cumsum(-1) + ro.seed_values[:, None], TOLERANCE[torch.float64])


def test_all_flags(backend, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64)
    ro.dones = torch.ones_like(ro.dones)
    # every step starts a segment: the inputs themselves
    starts = compute_episodic_prefix_sum(**prefix_kwargs(ro, boundary="starts_at"))
    torch.testing.assert_close(starts, ro.inputs, rtol=0, atol=0)
    # every step ends a segment: the inputs, the first one plus the seed
    ends = compute_episodic_prefix_sum(**prefix_kwargs(ro, boundary="ends_at"))
    expected = ro.inputs.clone()
    expected[:, 0] += ro.seed_values
    torch.testing.assert_close(ends, expected, rtol=0, atol=0)


def test_starts_at_is_ends_at_with_flags_shifted_left(backend, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64, term_rate=0.1, trunc_rate=0.1)
    ro.dones[1, 0] = 1
    starts = compute_episodic_prefix_sum(ro.inputs, ro.dones, ro.seed_values, boundary="starts_at")
    # a segment starting at t is one ending at t-1; a start at t=0 instead discards the seed
    seed = ro.seed_values * (1 - ro.dones[:, 0])
    ends = compute_episodic_prefix_sum(ro.inputs, shift_left(ro.dones), seed, boundary="ends_at")
    assert_rel(starts, ends, TOLERANCE[torch.float64])


def test_ends_at_is_starts_at_with_flags_shifted_right(backend, make_rollout):
    ro = make_rollout(3, 65, dtype=torch.float64, term_rate=0.1, trunc_rate=0.1)
    ends = compute_episodic_prefix_sum(ro.inputs, ro.dones, ro.seed_values, boundary="ends_at")
    starts = compute_episodic_prefix_sum(ro.inputs, shift_right(ro.dones), ro.seed_values, boundary="starts_at")
    assert_rel(ends, starts, TOLERANCE[torch.float64])


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_episode_split(backend, boundary, make_rollout):
    ro = make_rollout(2, 100, dtype=torch.float64, term_rate=0.06, trunc_rate=0.04)
    ro.dones[0, 10:12] = 1
    with small_tiles():
        whole = compute_episodic_prefix_sum(**prefix_kwargs(ro, boundary=boundary))
    for row in range(2):
        slices = episode_slices(ro.dones[row], boundary=boundary)
        assert len(slices) >= 4
        pieces = []
        for index, s in enumerate(slices):
            # only the first segment continues the seed (unless starts_at flags t=0 too)
            seed = ro.seed_values[row : row + 1] if index == 0 else None
            inputs, dones = ro.inputs[row : row + 1, s], ro.dones[row : row + 1, s]
            pieces.append(compute_episodic_prefix_sum(inputs, dones, seed, boundary=boundary))
        assert_rel(whole[row : row + 1], torch.cat(pieces, dim=1), TOLERANCE[torch.float64])


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize(
    "layout",
    [pytest.param(time_major_storage, id="time-major"), pytest.param(every_other_step, id="step-stride-2")],
)
def test_strided_inputs(backend, layout, boundary, make_rollout):
    ro = make_rollout(3, 40)
    expected = compute_episodic_prefix_sum(**prefix_kwargs(ro, boundary=boundary))
    kwargs = prefix_kwargs(ro.map(layout, fields=STEP_FIELDS), boundary=boundary)
    snapshot = Snapshot(kwargs)
    torch.testing.assert_close(compute_episodic_prefix_sum(**kwargs), expected, rtol=1e-6, atol=1e-6)
    snapshot.assert_unchanged()


def test_expanded_inputs(backend, make_rollout):
    ro = make_rollout(3, 40)
    # a step counter: ones with stride 0 everywhere, one seed for every env
    kwargs = {
        "inputs": torch.ones((), device=ro.inputs.device).expand(3, 40),
        "dones": ro.dones,
        "seed_values": ro.seed_values[:1].expand(3),
    }
    snapshot = Snapshot(kwargs)
    out = compute_episodic_prefix_sum(**kwargs)
    dense = {name: value.contiguous().double() for name, value in kwargs.items()}
    assert_rel(out, reference.compute_episodic_prefix_sum(**dense), TOLERANCE[torch.float32])
    snapshot.assert_unchanged()


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_inputs_unchanged(backend, boundary, make_rollout):
    kwargs = prefix_kwargs(make_rollout(3, 40), boundary=boundary)
    snapshot = Snapshot(kwargs)
    compute_episodic_prefix_sum(**kwargs)
    snapshot.assert_unchanged()


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_time_dim_zero(backend, boundary, make_rollout):
    ro = make_rollout(5, 33)
    expected = compute_episodic_prefix_sum(**prefix_kwargs(ro, boundary=boundary))
    time_major = ro.map(lambda x: x.t().contiguous(), fields=STEP_FIELDS)
    out = compute_episodic_prefix_sum(**prefix_kwargs(time_major, boundary=boundary), time_dim=0)
    assert out.shape == (33, 5)
    torch.testing.assert_close(out, expected.t(), rtol=1e-6, atol=1e-6)


def test_batch_dims(backend, make_rollout):
    ro = make_rollout((2, 3), 17)
    out = compute_episodic_prefix_sum(**prefix_kwargs(ro))
    assert out.shape == (2, 3, 17)
    assert_rel(out, oracle(ro).reshape(2, 3, 17), TOLERANCE[torch.float32])


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_interior_time_dim(backend, boundary, make_rollout):
    ro = make_rollout((2, 3), 17)
    # [B1, T, B2] inputs with time_dim=1, seed_values [B1, B2]
    moved = ro.map(lambda x: x.movedim(2, 1), fields=STEP_FIELDS)
    out = compute_episodic_prefix_sum(**prefix_kwargs(moved, boundary=boundary), time_dim=1)
    assert out.shape == (2, 17, 3)
    assert_rel(out.movedim(1, 2), oracle(ro, boundary=boundary).reshape(2, 3, 17), TOLERANCE[torch.float32])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_half_precision(backend, dtype, make_rollout):
    ro = make_rollout(3, 65, dtype=dtype)
    out = compute_episodic_prefix_sum(**prefix_kwargs(ro))
    assert out.dtype == dtype
    assert_rel(out, oracle(ro), HALF_TOLERANCE)
    out32 = compute_episodic_prefix_sum(**prefix_kwargs(ro), out_dtype=torch.float32)
    assert out32.dtype == torch.float32
    assert_rel(out32, oracle(ro), TOLERANCE[torch.float32])


@pytest.mark.parametrize("flag_dtype", [torch.bool, torch.uint8, torch.int8], ids=["bool", "uint8", "int8"])
def test_flag_dtypes(backend, flag_dtype, make_rollout):
    ro = make_rollout(3, 65)
    expected = compute_episodic_prefix_sum(**prefix_kwargs(ro))
    flags = ro.map(lambda x: x.to(flag_dtype), fields=("dones",))
    torch.testing.assert_close(compute_episodic_prefix_sum(**prefix_kwargs(flags)), expected, rtol=0, atol=0)


def test_out_dtype(backend, make_rollout):
    ro = make_rollout(3, 65)
    out = compute_episodic_prefix_sum(**prefix_kwargs(ro), out_dtype=torch.float64)
    assert out.dtype == torch.float64
    assert_rel(out, oracle(ro), TOLERANCE[torch.float32])


def test_public_name():
    assert rl_triton.compute_episodic_prefix_sum is compute_episodic_prefix_sum


def test_empty(backend, device):
    empty = torch.zeros(2, 0, device=device)
    assert compute_episodic_prefix_sum(empty, empty).shape == (2, 0)
    assert compute_episodic_prefix_sum(empty, empty, torch.ones(2, device=device)).shape == (2, 0)


ERROR_CASES = [
    pytest.param(lambda k: broken(k, boundary="end"), _checks.InputError, ("boundary",), id="boundary-unknown"),
    pytest.param(lambda k: broken(k, boundary="ENDS_AT"), _checks.InputError, ("boundary",), id="boundary-case"),
    pytest.param(
        lambda k: broken(k, boundary=None),
        (_checks.InputError, _checks.InputTypeError),
        ("boundary",),
        id="boundary-none",
    ),
    pytest.param(lambda k: broken(k, dones=k["dones"][:, :-1]), _checks.InputError, ("dones",), id="dones-shape"),
    pytest.param(
        lambda k: broken(k, seed_values=k["seed_values"][:2]), _checks.InputError, ("seed_values",), id="seed-shape"
    ),
    pytest.param(
        lambda k: broken(k, inputs=k["inputs"].to(torch.int64)), _checks.InputTypeError, ("inputs",), id="int-inputs"
    ),
    pytest.param(
        lambda k: broken(k, seed_values=k["seed_values"].tolist()),
        _checks.InputTypeError,
        ("seed_values",),
        id="list-seed",
    ),
    pytest.param(lambda k: broken(k, dones=k["dones"].tolist()), _checks.InputTypeError, ("dones",), id="list-dones"),
    pytest.param(lambda k: broken(k, time_dim=2), _checks.InputError, ("time_dim",), id="time_dim-range"),
]


@pytest.mark.parametrize("mutate, error, names", ERROR_CASES)
def test_errors(mutate, error, names, make_rollout):
    kwargs = mutate(prefix_kwargs(make_rollout(3, 8)))
    with pytest.raises(error, match=name_pattern(*names)):
        compute_episodic_prefix_sum(**kwargs)
    with pytest.raises(AssertionError):
        compute_episodic_prefix_sum(**kwargs)


@pytest.mark.parametrize("name", ["dones", "seed_values"])
def test_device_mismatch(name, make_rollout):
    kwargs = prefix_kwargs(make_rollout(3, 8))
    kwargs[name] = on_another_device(kwargs[name])
    with pytest.raises(_checks.InputError, match=name_pattern(name, "device")):
        compute_episodic_prefix_sum(**kwargs)
