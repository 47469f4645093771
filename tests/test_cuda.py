"""On the GPU: the spec's large shapes, CUDA-graph capture and replay, run-to-run determinism.

The CPU suite runs the same kernels through Triton's interpreter, which executes programs one
after another: it cannot see races between concurrent programs (the time-split look-back),
compiled numerics or sizes beyond a few thousand elements. These tests can.
"""

import pytest
import torch

from conftest import (
    ACTION_FIELDS,
    ALL_FIELDS,
    FLAG_FIELDS,
    HALF_TOLERANCE,
    HAS_CUDA,
    STEP_FIELDS,
    TOLERANCE,
    Rollout,
    assert_rel,
    outputs,
    rel_err,
)
from rl_triton import _dispatch, _launch, _replay, reference
from rl_triton.ops.gae import compute_gae
from rl_triton.ops.prefix_sum import compute_episodic_prefix_sum
from rl_triton.ops.retrace import compute_retrace
from rl_triton.ops.returns import compute_discounted_returns, compute_eligibility_traces, compute_lambda_returns
from rl_triton.ops.vtrace import compute_vtrace

pytestmark = pytest.mark.skipif(
    not HAS_CUDA, reason="needs a CUDA GPU (on CPU the same kernels are tested through the Triton interpreter)"
)


def gae(lib, ro):
    return lib.compute_gae(
        ro.rewards, ro.values, ro.terminateds, ro.truncateds, 0.99, 0.95, bootstrap_values=ro.bootstrap_values
    )


def vtrace(lib, ro):
    return lib.compute_vtrace(
        ro.log_pi_target, ro.log_pi_behavior, ro.values, ro.rewards, ro.terminateds, ro.truncateds,
        0.99, 1.2, 1.0, bootstrap_values=ro.bootstrap_values,
    )  # fmt: skip


def retrace(lib, ro):
    return lib.compute_retrace(
        ro.probs_target, ro.probs_behavior, ro.q_values, ro.next_q_values_all, ro.actions, ro.rewards,
        ro.terminateds, ro.truncateds, 0.99, 0.9, 1.0, 1.5,
    )  # fmt: skip


def lambda_returns(lib, ro):
    return lib.compute_lambda_returns(
        ro.rewards, ro.next_values, ro.terminateds, ro.truncateds, 0.99, 0.95, ro.bootstrap_values
    )


def discounted_returns(lib, ro):
    return lib.compute_discounted_returns(ro.rewards, ro.terminateds, ro.truncateds, 0.99, ro.bootstrap_values)


def eligibility_traces(lib, ro):
    return lib.compute_eligibility_traces(ro.gradients, ro.dones, 0.99, 0.95, ro.seed_values)


def prefix_ends_at(lib, ro):
    return lib.compute_episodic_prefix_sum(ro.inputs, ro.dones, ro.seed_values, boundary="ends_at")


def prefix_starts_at(lib, ro):
    return lib.compute_episodic_prefix_sum(ro.inputs, ro.dones, ro.seed_values, boundary="starts_at")


class Public:
    """The public functions, as ``lib`` for the callers above (``reference`` is the other ``lib``)."""

    compute_gae = staticmethod(compute_gae)
    compute_vtrace = staticmethod(compute_vtrace)
    compute_retrace = staticmethod(compute_retrace)
    compute_lambda_returns = staticmethod(compute_lambda_returns)
    compute_discounted_returns = staticmethod(compute_discounted_returns)
    compute_eligibility_traces = staticmethod(compute_eligibility_traces)
    compute_episodic_prefix_sum = staticmethod(compute_episodic_prefix_sum)


ESTIMATORS = [
    pytest.param(gae, id="gae"),
    pytest.param(vtrace, id="vtrace"),
    pytest.param(retrace, id="retrace"),
    pytest.param(lambda_returns, id="lambda_returns"),
    pytest.param(discounted_returns, id="discounted_returns"),
    pytest.param(eligibility_traces, id="eligibility_traces"),
    pytest.param(prefix_ends_at, id="prefix_sum-ends_at"),
    pytest.param(prefix_starts_at, id="prefix_sum-starts_at"),
]
# (rows, T, split): many rows walked by one program per row tile, and few rows split in time
SMALL_AND_SPLIT = [
    pytest.param(64, 300, None, id="64x300"),
    pytest.param(2, 50_000, True, id="2x50000-split"),
]

WINDOW = 4096


def run(estimator, ro):
    return outputs(estimator(Public, ro))


# the most elements (rows x steps) the oracle computes at once: its float64 copies and temporaries grow with them,
# its time loop's launches with the number of blocks
ORACLE_BLOCK_ELEMENTS = 1 << 24


def oracle(estimator, ro):
    """The float64 reference's outputs, computed on blocks of rows (rows are independent) and joined."""
    blocks = [outputs(estimator(reference, block.as_float64())) for block in ro.row_blocks(ORACLE_BLOCK_ELEMENTS)]
    return blocks[0] if len(blocks) == 1 else tuple(torch.cat(parts) for parts in zip(*blocks, strict=True))


def window(ro, steps):
    """The rollout restricted to ``steps``; a window starting mid-row gets no seed."""
    piece = ro.map(lambda x: x[:, steps], fields=(*STEP_FIELDS, *FLAG_FIELDS, *ACTION_FIELDS, "actions"))
    if steps.start:
        piece.seed_values = torch.zeros_like(ro.seed_values)
    piece.last_value = piece.bootstrap_values[:, -1].clone()
    piece.seq_len = steps.stop - steps.start
    return piece


def end_episode(ro, step):
    """Terminate the episode at ``step`` (and nothing else there)."""
    for name in ("terminateds", "dones"):
        getattr(ro, name)[:, step] = 1
    ro.truncateds[:, step] = 0
    ro.bootstrap_values[:, step] = 0


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_one_long_row(gen, estimator):
    # N=1, T=2**22: every program of the time split waits on look-back over thousands of chunks
    seq_len = 2**22
    ro = Rollout(gen, (1,), seq_len, device="cuda")
    # episodes end right before the last window and at the end of the first window, so both
    # windows are independent of the rest of the row in either direction
    for step in (WINDOW - 1, seq_len - WINDOW - 1, seq_len - WINDOW):
        end_episode(ro, step)
    ro.bootstrap_values[:, -1] = ro.last_value

    out32 = run(estimator, ro)
    out64 = run(estimator, ro.as_float64())
    for got, exact in zip(out32, out64, strict=True):
        assert got.dtype == torch.float32 and exact.dtype == torch.float64
        assert_rel(got, exact, TOLERANCE[torch.float32])

    for steps in (slice(0, WINDOW), slice(seq_len - WINDOW, seq_len)):
        expected = oracle(estimator, window(ro, steps))
        for got, exact, want in zip(out32, out64, expected, strict=True):
            assert_rel(got[:, steps], want, TOLERANCE[torch.float32])
            assert_rel(exact[:, steps], want, TOLERANCE[torch.float64])


# the field a NaN goes in, and whether the recurrence runs backward in time (a NaN reaches the steps before it)
NAN_FIELDS = {gae: ("rewards", True), vtrace: ("rewards", True), lambda_returns: ("rewards", True),
              discounted_returns: ("rewards", True), eligibility_traces: ("gradients", False),
              prefix_ends_at: ("inputs", False), prefix_starts_at: ("inputs", False)}


@pytest.mark.parametrize("with_nan", [False, True], ids=["finite", "nan"])
@pytest.mark.parametrize("estimator", [param for param in ESTIMATORS if param.values[0] is not retrace])
def test_one_long_row_with_a_look_behind(gen, estimator, with_nan):
    # N=1, T=2**22 walked in segments that first scan the 256 steps before them (as default plans do): with
    # episodes ending at 10% of the steps nearly every segment takes its carry from them and publishes at once,
    # so float64 walks without a look-behind, which look back, are the reference; a NaN reaches every later
    # step in processing order in both, carried past the segments that took their carry from their own steps
    # by the last segment to finish
    seq_len = 2**22
    ro = Rollout(gen, (1,), seq_len, device="cuda")
    field, backward = NAN_FIELDS[estimator]
    nan_step = 3 * 2**20 + 5
    if with_nan:
        getattr(ro, field)[0, nan_step] = float("nan")
    with _launch.tile_override(look_behind=256):
        got = run(estimator, ro)
    with _launch.tile_override(look_behind=0):
        exact = run(estimator, ro.as_float64())
    for out, want in zip(got, exact, strict=True):
        reached = want[0, : nan_step + 1] if backward else want[0, nan_step:]
        assert reached.isnan().all() if with_nan else torch.isfinite(want).all()
        assert torch.equal(out.isnan(), want.isnan())
        finite = ~want.isnan()
        assert_rel(out[finite], want[finite], TOLERANCE[torch.float32])


@pytest.mark.parametrize("rows, seq_len", [(64, 16384), (128, 8192)])
def test_retrace_fused_splits_of_short_rows(gen, monkeypatch, rows, seq_len):
    # rows split in time, too short for segments of eight 512-step chunks: 4 actions take the fused
    # kernel, one 512-step chunk per program that looks back for its carry
    ro = Rollout(gen, (rows,), seq_len, device="cuda", num_actions=4)
    launched = []
    launch = _launch._launch

    def record(kernel, grid, *args, **meta):
        launched.append((kernel.fn.__name__, meta))
        return launch(kernel, grid, *args, **meta)

    monkeypatch.setattr(_launch, "_launch", record)
    got = run(retrace, ro)
    monkeypatch.setattr(_launch, "_launch", launch)
    [(name, meta)] = launched
    plan = (meta["SPLIT"], meta["WALK"], meta["REDUCE"], meta["BLOCK_TIME"])
    # about 4 programs per multiprocessor would make segments of fewer than 8 chunks of 512 steps (on an
    # H200's 132 multiprocessors, both shapes)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    segments = max(1, 4 * sms // rows)
    if rows < 2 * sms and -(-seq_len // 512 // segments) < 8:
        assert name == "retrace_scan_kernel" and plan == (True, False, True, 512)
    for out, want in zip(got, oracle(retrace, ro), strict=True):
        assert_rel(out, want, TOLERANCE[torch.float32])


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_many_short_rows(gen, estimator, dtype):
    ro = Rollout(gen, (4096,), 128, dtype=dtype, device="cuda", num_actions=18)
    for got, want in zip(run(estimator, ro), oracle(estimator, ro), strict=True):
        assert_rel(got, want, TOLERANCE[dtype])


def gae_last_value(lib, ro):
    return lib.compute_gae(ro.rewards, ro.values, ro.terminateds, gamma=0.99, lambda_=0.95, last_value=ro.last_value)


@pytest.mark.parametrize("estimator", [*ESTIMATORS, pytest.param(gae_last_value, id="gae-last_value")])
@pytest.mark.parametrize("seq_len", [512, 1000, 1025, 3000, 4097])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_default_plans(gen, estimator, seq_len, dtype):
    # enough rows not to split time beyond one chunk, at lengths around every default plan's edge:
    # one chunk per row (GAE up to 4096 steps, V-trace up to 1024, the others up to 512; float32 and
    # bf16 vectors) and chunks walked with prefetch beyond
    rows = 2 * torch.cuda.get_device_properties(0).multi_processor_count + 3
    ro = Rollout(gen, (rows,), seq_len, dtype=dtype, flag_dtype=torch.uint8, device="cuda")
    exact = ro.as_float64()
    tolerance = TOLERANCE[torch.float32] if dtype == torch.float32 else HALF_TOLERANCE
    for got, want in zip(run(estimator, ro), oracle(estimator, exact), strict=True):
        assert got.dtype == dtype
        assert_rel(got, want, tolerance)


def assert_time_major_matches(gen, estimator, rows: int, seq_len: int, low: bool = False) -> None:
    """The estimator's outputs on ``[N, T]`` views of ``[T, N]`` buffers of ``rows`` rows against the oracle, in
    float32 or (``low``) bf16 values with uint8 flags; outputs keep the values' dtype."""
    dtype, flag_dtype = (torch.bfloat16, torch.uint8) if low else (torch.float32, torch.float32)
    ro = Rollout(gen, (rows,), seq_len, dtype=dtype, flag_dtype=flag_dtype, device="cuda")
    time_major = ro.map(lambda x: x.t().contiguous().t())
    assert _launch._is_time_major(time_major.rewards)
    for got, want in zip(run(estimator, time_major), oracle(estimator, ro), strict=True):
        assert got.dtype == dtype
        assert_rel(got, want, HALF_TOLERANCE if low else TOLERANCE[torch.float32])


@pytest.mark.parametrize("estimator", [*ESTIMATORS, pytest.param(gae_last_value, id="gae-last_value")])
@pytest.mark.parametrize("rows", [2050, 8200, 16390])
def test_time_major_default_plans(gen, estimator, rows):
    # rows of 300 steps (no whole number of 8-step groups), read step by step, in each default tile of
    # such rows, each over several chunks and a ragged last one: 16 x 128 with 4 warps (V-trace 16 x
    # 64) at 2050 rows; 32 x 64 with 8 warps from 4096 rows (the strided plans' tile); from 16384 the
    # tiles of many rows (32 x 32 with 4 warps, V-trace 32 x 64 with 8); Retrace's scan 16 x 64, 32 x 32
    # and 32 x 16. Rows of whole groups: test_time_major_strided_default_plans
    assert_time_major_matches(gen, estimator, rows, 300)


STRIDED_ESTIMATORS = [param for param in ESTIMATORS if param.id != "retrace"]


@pytest.mark.parametrize("estimator", [*STRIDED_ESTIMATORS, pytest.param(gae_last_value, id="gae-last_value")])
@pytest.mark.parametrize("rows", [2048, 3072, 4096, 4112, 6144, 8192, 16384, 32768])
@pytest.mark.parametrize("low", [False, True], ids=["f32", "bf16-u8"])
def test_time_major_strided_default_plans(gen, estimator, rows, low):
    # rows of whole groups of 8 steps in every kind of default strided tile, over two chunks and more,
    # direct scans where the plans take them (4096-16384 rows):
    # 16-row tiles at 2048 rows, and at 3072-6144 but for 2-byte steps (bf16 values, uint8 flags), whose
    # tiles hold 32 rows in pairs there (32 x 256 x 16 up to 4224 rows, else 32 x 128 x 8; 32 x 128 x 8 for GAE
    # with truncations, lambda-returns and V-trace), and float32 lambda-returns at 2048-4095 rows in one program
    # of 32 rows in pairs per multiprocessor (32 x 128 x 8; GAE and V-trace: test_time_major_one_wave_tiles),
    # 4112 rows with a partial last tile; from
    # 16384 rows 2-byte steps in row pairs of 32 x 64 x 4 but GAE with truncations and lambda-returns in
    # four rows per thread (64 x 64 x 4, at 32768 rows 64 x 32 x 2), float32 ones in 32-row tiles,
    # V-trace's in row pairs of 64 x 32 x 4
    assert_time_major_matches(gen, estimator, rows, 264, low)


@pytest.mark.parametrize("estimator", [*STRIDED_ESTIMATORS, pytest.param(gae_last_value, id="gae-last_value")])
@pytest.mark.parametrize("rows", [2176, 3072, 4112])
def test_time_major_one_wave_tiles(gen, estimator, rows):
    # float32 steps stored [T, N] of rows long enough for one program of 32 rows per multiprocessor: GAE
    # 32 x 256 x 16 from 2113 rows, with truncations 32 x 128 x 8 in pairs from 3072 rows, V-trace 32 x 128 x 8
    # in pairs at 2113-2815 rows and 32 x 64 x 8 from 4096 on GPUs of at most 30 GB/s of memory bandwidth per
    # multiprocessor (tests/test_plans.py), over several chunks and a ragged last one; 4112 rows end in a partial tile
    assert_time_major_matches(gen, estimator, rows, 2056)


@pytest.mark.parametrize("rows, dram_gbps_per_multiprocessor", [(3072, None), (4088, None), (4096, 25.0), (4096, 37.0)])
def test_time_major_vtrace_pairs_of_long_rows(gen, monkeypatch, rows, dram_gbps_per_multiprocessor):
    # float32 V-trace stored [T, N] of 3072-4095 rows of at least 16384 steps: 32 x 128 x 8 in pairs, and of
    # 4096 rows on GPUs of more than 30 GB/s of memory bandwidth per multiprocessor (tests/test_plans.py; both
    # 4096-row plans run on any GPU: plans are made uncached under the given bandwidth), over many chunks and a
    # ragged last one
    if dram_gbps_per_multiprocessor is not None:
        monkeypatch.setattr(_launch, "_default_plan", _launch._default_plan.__wrapped__)
        monkeypatch.setattr(_launch, "_dram_gbps_per_multiprocessor", lambda device: dram_gbps_per_multiprocessor)
    assert_time_major_matches(gen, vtrace, rows, 16392)


@pytest.mark.parametrize("estimator", [*STRIDED_ESTIMATORS, pytest.param(gae_last_value, id="gae-last_value")])
@pytest.mark.parametrize("rows, seq_len", [(3072, 512), (4096, 512), (6144, 512), (3088, 264), (3090, 520),
                                           (5000, 264)])
def test_time_major_bf16_direct_row_pairs(gen, estimator, rows, seq_len):
    # bf16 values with uint8 flags stored [T, N] of 3072-8191 rows, in 32-row tiles of row pairs (256 or 128
    # steps) that recur directly: read, scanned and written without in-range masks where the rows and steps
    # fill whole tiles (512 steps of 3072, 4096 and 6144 rows), with them where they do not (3088 rows: pairs
    # and a partial last tile; 3090 and 5000 rows, no multiple of 16: one row per thread in the same tiles)
    assert_time_major_matches(gen, estimator, rows, seq_len, low=True)


@pytest.mark.parametrize("estimator", [pytest.param(vtrace, id="vtrace"), pytest.param(lambda_returns, id="lambda_returns")])
@pytest.mark.parametrize("rows, seq_len", [(4096, 512), (6144, 512), (6152, 520), (10240, 512), (12352, 520),
                                           (16384, 512), (16384, 264), (32768, 128)])
@pytest.mark.parametrize("dram_gbps_per_multiprocessor", [25.0, 37.0], ids=["slow-memory", "fast-memory"])
def test_time_major_bf16_tiles_by_memory(gen, monkeypatch, estimator, rows, seq_len, dram_gbps_per_multiprocessor):
    # bf16 V-trace and lambda-returns stored [T, N] in the plans of GPUs of at most and of more than 30 GB/s of
    # memory bandwidth per multiprocessor, on any GPU (plans made uncached; tests/test_plans.py): 32 x 128 x 8
    # pairs at 4096 rows (V-trace on slow memory: with maps), 32 x 64 x 4 pairs at 6144, direct and whole, 6152 rows
    # of 520 steps masked; 64 x 64 x 4 of four rows per thread, direct and whole, from 10240 rows on slow memory
    # (lambda-returns below 32768) and from 16384 on fast memory; 12352 rows of 520 steps and 16384 of 264 in the
    # plans of before
    monkeypatch.setattr(_launch, "_default_plan", _launch._default_plan.__wrapped__)
    monkeypatch.setattr(_launch, "_dram_gbps_per_multiprocessor", lambda device: dram_gbps_per_multiprocessor)
    assert_time_major_matches(gen, estimator, rows, seq_len, low=True)


@pytest.mark.parametrize("estimator", [pytest.param(gae, id="gae"), pytest.param(gae_last_value, id="gae-last_value")])
@pytest.mark.parametrize("rows, seq_len", [(8480, 512), (10240, 520), (13312, 512), (16320, 256)])
def test_time_major_bf16_gae_tiles_on_slow_memory(gen, monkeypatch, estimator, rows, seq_len):
    # bf16 GAE stored [T, N] in the plans of GPUs of at most 30 GB/s of memory bandwidth per multiprocessor, on any
    # GPU (plans made uncached; tests/test_plans.py): 32 x 64 x 4 pairs from 8480 rows, direct and whole (10240 rows
    # of 520 steps masked); with truncations 64 x 64 x 4 of four rows per thread from 13312 rows
    monkeypatch.setattr(_launch, "_default_plan", _launch._default_plan.__wrapped__)
    monkeypatch.setattr(_launch, "_dram_gbps_per_multiprocessor", lambda device: 25.0)
    assert_time_major_matches(gen, estimator, rows, seq_len, low=True)


@pytest.mark.parametrize("estimator", STRIDED_ESTIMATORS)
def test_time_major_walks_of_strided_groups(gen, estimator):
    # 64 rows of 2^18 steps stored [T, N]: walked segments of 32-row tiles (eligibility traces and
    # prefix sums in row pairs), against the float64 path and the oracle on a window at each end
    seq_len = 1 << 18
    ro = Rollout(gen, (64,), seq_len, device="cuda")
    for step in (WINDOW - 1, seq_len - WINDOW - 1, seq_len - WINDOW):
        end_episode(ro, step)
    ro.bootstrap_values[:, -1] = ro.last_value
    time_major = ro.map(lambda x: x.t().contiguous().t())
    out32 = run(estimator, time_major)
    out64 = run(estimator, ro.as_float64())
    for got, exact in zip(out32, out64, strict=True):
        assert_rel(got, exact, TOLERANCE[torch.float32])
    for steps in (slice(0, WINDOW), slice(seq_len - WINDOW, seq_len)):
        for got, want in zip(out32, oracle(estimator, window(ro, steps)), strict=True):
            assert_rel(got[:, steps], want, TOLERANCE[torch.float32])


@pytest.mark.parametrize("done_rate", [0.05, 0.3])
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_time_split_calls_repeated(gen, estimator, done_rate):
    # a race between the programs of a call split in time (the look-back) shows as an occasional
    # wrong call, not as a wrong plan: many fresh calls, each split into chunks that look back.
    # Time-major V-trace and Retrace split these rows by default (64 and 16 rows x 32 steps); the
    # others through the override (6 chunks of 16 steps, one per program). A look-back variant that
    # gave wrong time-major V-trace results in most calls here passed the other tests most of the time.
    # With 30% of steps terminated and 30% truncated, most chunks of 32 steps end an episode in every
    # row (maps that ignore the carry, published at once): that variant failed every such call.
    for _ in range(12):
        ro = Rollout(gen, (256,), 96, device="cuda", term_rate=done_rate, trunc_rate=done_rate)
        want = oracle(estimator, ro)
        time_major = ro.map(lambda x: x.t().contiguous().t())
        for inputs, split in ((time_major, None), (ro, True), (time_major, True)):
            with _launch.tile_override(block_time=16 if split else None, split=split,
                                       walk_programs=0 if split else None):
                got = run(estimator, inputs)
            for value, expected in zip(got, want, strict=True):
                assert_rel(value, expected, TOLERANCE[torch.float32])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("rows, seq_len", [(64, 300), (2, 50_000)], ids=["64x300", "2x50000"])
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_tensors_on_a_gpu_that_is_not_the_current_one(gen, estimator, rows, seq_len):
    # Triton launches on the current device; PyTorch ops follow their tensors. Calls on cuda:1 while
    # cuda:0 is current (a process that never called torch.cuda.set_device) run on cuda:1, leave cuda:0
    # current, and repeat (the first call compiles, later ones could be replayed) with the same results.
    ro = Rollout(gen, (rows,), seq_len, device="cuda:1")
    on_cpu = ro.map(lambda x: x.cpu(), fields=ALL_FIELDS)
    want = oracle(estimator, on_cpu)
    with torch.cuda.device(0):
        for _ in range(3):
            got = run(estimator, ro)
            assert torch.cuda.current_device() == 0
            for value, expected in zip(got, want, strict=True):
                assert value.device == torch.device("cuda:1")
                assert_rel(value.cpu(), expected, TOLERANCE[torch.float32])
    with torch.cuda.device(1):
        for _ in range(3):
            for value, expected in zip(run(estimator, ro), want, strict=True):
                assert_rel(value.cpu(), expected, TOLERANCE[torch.float32])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_gradients_on_a_gpu_that_is_not_the_current_one(gen):
    ro = Rollout(gen, (4,), 3000, device="cuda:1")
    wide = ro.as_float64()
    with torch.cuda.device(0):
        rewards = ro.rewards.clone().requires_grad_()
        advantages = compute_gae(rewards, ro.values, ro.terminateds, ro.truncateds, 0.99, 0.95,
                                 bootstrap_values=ro.bootstrap_values)
        (grad,) = torch.autograd.grad(advantages, rewards, ro.gradients)
        rewards64 = wide.rewards.cpu().requires_grad_()
        want = reference.compute_gae(rewards64, wide.values.cpu(), ro.terminateds.cpu(), ro.truncateds.cpu(),
                                     0.99, 0.95, bootstrap_values=wide.bootstrap_values.cpu())
        (grad_want,) = torch.autograd.grad(want, rewards64, wide.gradients.cpu())
        assert torch.cuda.current_device() == 0
    assert_rel(advantages.detach().cpu(), want.detach(), TOLERANCE[torch.float32])
    assert_rel(grad.cpu(), grad_want, TOLERANCE[torch.float32], "dL/drewards")


def capture(call):
    """(graph, outputs) of ``call`` captured in a CUDA graph, after a warm-up call on a side stream."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = call()
    return graph, outputs


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("rows, seq_len, split", SMALL_AND_SPLIT)
def test_cuda_graph_replay(gen, estimator, rows, seq_len, split):
    ro = Rollout(gen, (rows,), seq_len, device="cuda")
    with _launch.tile_override(split=split):
        eager = run(estimator, ro)
        graph, captured = capture(lambda: run(estimator, ro))
    for out in captured:
        out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(captured, eager, strict=True):
        assert torch.equal(got, want), f"replay differs from eager: relative error {rel_err(got, want):.3e}"

    # new inputs copied into the captured buffers give the new results
    fresh = Rollout(gen, (rows,), seq_len, device="cuda")
    for name, value in vars(ro).items():
        if isinstance(value, torch.Tensor):
            value.copy_(getattr(fresh, name))
    graph.replay()
    torch.cuda.synchronize()
    with _launch.tile_override(split=split):
        expected = run(estimator, fresh)
    for got, want in zip(captured, expected, strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize(
    "rows, seq_len, split",
    [pytest.param(4096, 128, None, id="4096x128"), pytest.param(1, 2**20, True, id="1x2^20-split")],
)
def test_deterministic(gen, estimator, rows, seq_len, split):
    ro = Rollout(gen, (rows,), seq_len, device="cuda")
    with _launch.tile_override(split=split):
        first = run(estimator, ro)
        for _ in range(3):
            for got, want in zip(run(estimator, ro), first, strict=True):
                assert torch.equal(got, want), f"run-to-run difference: relative error {rel_err(got, want):.3e}"


def test_cuda_tensors_default_to_triton():
    # the reference path on CUDA would be a Python loop of T small launches: never the default
    assert _dispatch.use_triton(torch.device("cuda"))


def test_direct_launch_matches_triton_launch_path(gen, monkeypatch):
    ro = Rollout(gen, (64,), 300)
    direct_first = outputs(gae(Public, ro))  # fills the compiled-kernel cache
    direct_cached = outputs(gae(Public, ro))  # launches through the cache
    monkeypatch.setattr(_launch._direct_launch, "enabled", False)
    through_triton = outputs(gae(Public, ro))
    for first, cached, reference_launch in zip(direct_first, direct_cached, through_triton):
        assert torch.equal(first, reference_launch) and torch.equal(cached, reference_launch)


def test_direct_launch_falls_back_when_the_launcher_rejects_its_arguments(gen, monkeypatch):
    class RejectingLaunch:
        """A compiled kernel whose launcher takes other arguments (another Triton version)."""

        function = packed_metadata = None

        def run(self, *args):
            raise TypeError("launcher signature differs")

    ro = Rollout(gen, (64,), 300)
    gae(Public, ro)
    _replay.clear()  # so that the next call launches through _launch, not a recorded replay
    monkeypatch.setattr(_launch, "_compiled", {key: (RejectingLaunch(), entry[1])
                                               for key, entry in _launch._compiled.items()})
    monkeypatch.setattr(_launch._direct_launch, "enabled", True)
    out = outputs(gae(Public, ro))
    assert not _launch._direct_launch.enabled
    for got, want in zip(out, oracle(gae, ro)):
        assert_rel(got, want, TOLERANCE[torch.float32])


def test_first_call_compiles_both_retrace_passes_at_once(gen, monkeypatch):
    # a first call of Retrace in two passes holds its launches back while both kernels compile, each on
    # a thread, then launches them in their order
    ro = Rollout(gen, (8,), 3000, num_actions=18)
    monkeypatch.setattr(_launch, "_compiled", {})
    compiled_on_threads = []
    compile_for_launch = _launch._compile_for_launch

    def recorded(device, kernel, grid, args, meta):
        compiled_on_threads.append(kernel.__name__)
        compile_for_launch(device, kernel, grid, args, meta)

    monkeypatch.setattr(_launch, "_compile_for_launch", recorded)
    with _launch.tile_override(retrace_kernels="two-pass"):
        first = outputs(retrace(Public, ro))
        assert sorted(compiled_on_threads) == ["retrace_flat_actions_kernel", "retrace_scan_kernel"]
        again = outputs(retrace(Public, ro))  # both kernels now launch from the compiled-kernel cache
    assert len(compiled_on_threads) == 2
    for got, repeated, want in zip(first, again, oracle(retrace, ro), strict=True):
        assert_rel(got, want, TOLERANCE[torch.float32])
        assert torch.equal(got, repeated)
