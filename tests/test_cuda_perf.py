"""On the GPU: the speed targets, as ratios measured in one run (so clocks and noise cancel).

Bandwidth is bytes moved (inputs read once at the spec's API dtypes, float32 values and flags, as in
``python -m rl_triton bench``; outputs written once) over CUDA-graph device time, against the
benchmark's device-to-device copy measured here. Targets not reached yet are
expected failures with the last measured figure in the reason, so the suite records them without
hiding them; one that starts passing shows up as XPASS.
"""

import os
import re
import statistics
import time

import pytest
import torch

from conftest import HAS_CUDA, run_benchmark_script
from rl_triton import (
    compute_discounted_returns,
    compute_eligibility_traces,
    compute_episodic_prefix_sum,
    compute_gae,
    compute_lambda_returns,
    compute_retrace,
    compute_vtrace,
)
from rl_triton._bench import copy_ceiling_gbps, graph_calls, hold_stream

# Timings taken while other test processes share the GPU measure those processes' kernels too:
# this file runs alone, as its own pytest command (docs/testing.md).
SHARED_GPU = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1
pytestmark = [
    pytest.mark.skipif(not HAS_CUDA, reason="speed targets are measured on a CUDA GPU"),
    pytest.mark.skipif(SHARED_GPU, reason="speed targets are measured with the GPU to themselves: run "
                       "tests/test_cuda_perf.py as its own pytest command, without -n"),
]

# points of the copy ceiling allowed for run-to-run noise
NOISE_POINTS = 5.0


@pytest.fixture(scope="module")
def copy_ceiling() -> float:
    """Bytes per second (read + written) of the benchmark's 2 GiB device-to-device copy.

    Timed by events around direct calls, as ``python -m rl_triton bench`` does: a copy captured in a
    CUDA graph becomes a memcpy node that the copy engines run, at about 2.75 TB/s on an H200 against
    4.2 TB/s for the copy kernel, so a graph-timed ceiling would flatter every ratio by half.
    """
    return copy_ceiling_gbps(torch.device("cuda")) * 1e9


def device_seconds(calls: list) -> float:
    """Median device time of one call, from CUDA-graph replays of all ``calls`` (rotated inputs), as the
    benchmark times them (``_bench.graph_calls``, ``_bench.hold_stream``)."""
    calls = graph_calls(calls)
    for call in calls:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(stream)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        hold_stream()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / len(calls))
    return statistics.median(times)


def rollout(rows: int, seq_len: int, num_actions: int, seed: int) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = (rows, seq_len)
    term = torch.rand(shape, generator=gen, device="cuda") < 0.05
    trunc = (torch.rand(shape, generator=gen, device="cuda") < 0.05) & ~term
    boot = torch.where(trunc, torch.randn(shape, generator=gen, device="cuda"), 0.0)
    # flags in the spec's API dtype, float32, as the benchmark's and the targets' bytes count them
    term, trunc = term.float(), trunc.float()
    boot[:, -1] = torch.randn(rows, generator=gen, device="cuda")
    data = {
        "r": torch.randn(shape, generator=gen, device="cuda"),
        "v": torch.randn(shape, generator=gen, device="cuda"),
        "term": term, "trunc": trunc, "boot": boot,
        "last": torch.randn(rows, generator=gen, device="cuda"),
        "lt": 0.3 * torch.randn(shape, generator=gen, device="cuda"),
        "lb": 0.3 * torch.randn(shape, generator=gen, device="cuda"),
    }  # fmt: skip
    if num_actions:
        data["pt"] = torch.softmax(torch.randn(rows, seq_len, num_actions, generator=gen, device="cuda"), -1)
        data["nq"] = torch.randn(rows, seq_len, num_actions, generator=gen, device="cuda")
        data["act"] = torch.randint(0, num_actions, shape, generator=gen, device="cuda")
        data["pb"] = 0.1 + 0.9 * torch.rand(shape, generator=gen, device="cuda")
    return data


# estimator: (call, input keys, outputs); keyword arguments go to the estimator (time_dim)
CALLS = {
    "gae": (lambda d, **kw: compute_gae(d["r"], d["v"], d["term"], last_value=d["last"], **kw), ("r", "v", "term", "last"), 1),
    "vtrace": (lambda d, **kw: compute_vtrace(d["lt"], d["lb"], d["v"], d["r"], d["term"], last_value=d["last"], **kw),
               ("lt", "lb", "v", "r", "term", "last"), 2),
    "lambda_returns": (lambda d, **kw: compute_lambda_returns(d["r"], d["v"], d["term"], d["trunc"],
                                                        bootstrap_values=d["boot"], **kw),
                       ("r", "v", "term", "trunc", "boot"), 1),
    "gae_truncated": (lambda d, **kw: compute_gae(d["r"], d["v"], d["term"], d["trunc"], bootstrap_values=d["boot"], **kw),
                      ("r", "v", "term", "trunc", "boot"), 1),
    "discounted_returns": (lambda d, **kw: compute_discounted_returns(d["r"], d["term"], **kw), ("r", "term"), 1),
    "eligibility_traces": (lambda d, **kw: compute_eligibility_traces(d["r"], d["term"], 0.99, 0.95, **kw), ("r", "term"), 1),
    "prefix_sum": (lambda d, **kw: compute_episodic_prefix_sum(d["r"], d["term"], **kw), ("r", "term"), 1),
    "retrace": (lambda d, **kw: compute_retrace(d["pt"], d["pb"], d["v"], d["nq"], d["act"], d["r"], d["term"],
                                          d["trunc"], 0.99, 0.95, **kw),
                ("pt", "pb", "v", "nq", "act", "r", "term", "trunc"), 2),
}  # fmt: skip


def stored_as(data: dict, layout: str) -> dict:
    """The rollout's ``[N, T]`` tensors stored ``[T, N]`` (``time-major``), or the same with bf16 values
    and uint8 flags (``bf16-time-major``; per-env values bf16 too)."""
    if layout == "batch-major":
        return data
    low = layout.startswith("bf16")
    stored = {}
    for key, value in data.items():
        if low:
            value = value.to(torch.uint8 if key in ("term", "trunc") else torch.bfloat16)
        stored[key] = value.t().contiguous() if value.dim() == 2 else value
    return stored


def percent_of_copy(name: str, rows: int, seq_len: int, num_actions: int, ceiling: float,
                    layout: str = "batch-major") -> float:
    """% of the copy bandwidth of one estimator's calls, bytes counted in the dtypes stored (outputs take
    the values' dtype)."""
    call, keys, num_outputs = CALLS[name]
    sets = [stored_as(rollout(rows, seq_len, num_actions, seed), layout) for seed in range(2)]
    data = sets[0]
    moved = sum(data[k].nbytes for k in keys) + num_outputs * rows * seq_len * data["r"].element_size()
    kwargs = {} if layout == "batch-major" else {"time_dim": 0}
    seconds = device_seconds([lambda d=d: call(d, **kwargs) for d in sets])
    return 100 * moved / seconds / ceiling


def unmet(measured: str, date: str = "2026-11-30", gpu: str = "an H200"):
    return pytest.mark.xfail(strict=False, reason=f"target not reached yet: {measured} on {gpu}, {date}")


BANDWIDTH_CASES = [
    pytest.param("vtrace", 16384, 512, 0, 90, id="vtrace-16384x512"),
    pytest.param("gae", 16384, 512, 0, 90, id="gae-16384x512"),
    pytest.param("lambda_returns", 16384, 512, 0, 90, id="lambda_returns-16384x512"),
    pytest.param("discounted_returns", 16384, 512, 0, 90, id="discounted-16384x512"),
    pytest.param("prefix_sum", 16384, 512, 0, 90, id="prefix_sum-16384x512"),
    pytest.param("eligibility_traces", 16384, 512, 0, 90, id="eligibility-16384x512"),
    pytest.param("gae", 4096, 4096, 0, 90, id="gae-4096x4096"),
    pytest.param("vtrace", 4096, 4096, 0, 90, id="vtrace-4096x4096"),
    pytest.param("prefix_sum", 4096, 4096, 0, 90, id="prefix_sum-4096x4096"),
    pytest.param("eligibility_traces", 4096, 4096, 0, 90, id="eligibility-4096x4096"),
    # few long rows (walked segments). GAE (86.4% at 8x2^21, 88.2% at 1x2^24) and V-trace at 1x2^24 (87.3%) read
    # under the target in benchmarks/tune.py on an H200, 2026-12-05, but within the noise margin: unmarked, so that
    # a loss below the margin fails. Discounted returns without truncations (this call) read at the margin's edge
    # (here 84.9-85.0% on H100s, 2026-12-06): marked, as the episodic scans beside them
    pytest.param("gae", 8, 1 << 21, 0, 90, id="gae-8x2097152"),
    pytest.param("gae", 1, 1 << 24, 0, 90, id="gae-1x16777216"),
    pytest.param("vtrace", 8, 1 << 21, 0, 90, id="vtrace-8x2097152"),
    pytest.param("vtrace", 1, 1 << 24, 0, 90, id="vtrace-1x16777216"),
    pytest.param("lambda_returns", 8, 1 << 21, 0, 90, id="lambda_returns-8x2097152"),
    pytest.param("lambda_returns", 1, 1 << 24, 0, 90, id="lambda_returns-1x16777216"),
    pytest.param("discounted_returns", 8, 1 << 21, 0, 90, id="discounted-8x2097152",
                 marks=unmet("85.4% in benchmarks/tune.py (85.5% on 2026-12-05)", "2026-12-06")),
    pytest.param("discounted_returns", 1, 1 << 24, 0, 90, id="discounted-1x16777216",
                 marks=unmet("85.3% in benchmarks/tune.py (85.5% on 2026-12-05)", "2026-12-06")),
    pytest.param("eligibility_traces", 8, 1 << 21, 0, 90, id="eligibility-8x2097152",
                 marks=unmet("84.9% in the benchmark (81.3% with 2048-step walks)", "2026-12-05")),
    pytest.param("eligibility_traces", 1, 1 << 24, 0, 90, id="eligibility-1x16777216",
                 marks=unmet("84.9% in the benchmark (81.6% with 2048-step walks)", "2026-12-05")),
    pytest.param("prefix_sum", 8, 1 << 21, 0, 90, id="prefix_sum-8x2097152",
                 marks=unmet("84.6% in the benchmark (81.4% with 2048-step walks)", "2026-12-05")),
    pytest.param("prefix_sum", 1, 1 << 24, 0, 90, id="prefix_sum-1x16777216",
                 marks=unmet("85.4% in the benchmark (81.1% with 2048-step walks)", "2026-12-05")),
    pytest.param("retrace", 16384, 512, 4, 75, id="retrace4-16384x512"),
    pytest.param("retrace", 4096, 1024, 18, 75, id="retrace18-4096x1024"),
    pytest.param("retrace", 8, 1 << 21, 4, 75, id="retrace4-8x2097152"),
    pytest.param("retrace", 8, 1 << 21, 18, 75, id="retrace18-8x2097152"),
    # Retrace at the other shapes of the benchmark that move at least 64 MB
    pytest.param("retrace", 512, 1024, 18, 75, id="retrace18-512x1024",
                 marks=unmet("69.1% in this test, 74.2% in the benchmark of the same machine", "2026-12-06")),
    pytest.param("retrace", 64, 16384, 4, 75, id="retrace4-64x16384",
                 marks=unmet("60.7% in the benchmark", "2026-12-06")),
    pytest.param("retrace", 8, 131072, 4, 75, id="retrace4-8x131072",
                 marks=unmet("57.5% in the benchmark", "2026-12-06")),
    pytest.param("retrace", 64, 16384, 18, 75, id="retrace18-64x16384",
                 marks=unmet("67.6% in the benchmark", "2026-12-06")),
    pytest.param("retrace", 8, 131072, 18, 75, id="retrace18-8x131072",
                 marks=unmet("67.2% in the benchmark", "2026-12-06")),
]


@pytest.mark.parametrize("name, rows, seq_len, num_actions, target", BANDWIDTH_CASES)
def test_share_of_copy_bandwidth(copy_ceiling, name, rows, seq_len, num_actions, target):
    measured = percent_of_copy(name, rows, seq_len, num_actions, copy_ceiling)
    assert measured >= target - NOISE_POINTS, f"{name} {rows}x{seq_len}: {measured:.1f}% of copy, target {target}%"


def host_ratio(call, yardstick, rounds: int = 9, repeats: int = 300) -> float:
    """Median over rounds of ``call``'s host time per call (back to back, no synchronisation) over
    ``yardstick``'s in the same round: the host's speed drifts between rounds, not within one."""
    for _ in range(20):
        call()
        yardstick()
    ratios = []
    for _ in range(rounds):
        per_call = []
        for fn in (call, yardstick):
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(repeats):
                fn()
            per_call.append(time.perf_counter() - start)
            torch.cuda.synchronize()
        ratios.append(per_call[0] / per_call[1])
    return statistics.median(ratios)


@pytest.mark.xfail(strict=False, reason="borderline: with packed launches 1.37-1.45x one PyTorch op (repeated calls) in benchmarks/host_cost.py on H100 hosts, 2026-12-05, yet over 1.6x in this test in a run where host_cost.py read 1.45x; 1.5-1.7x on an H200 host before them, 2026-12-01")
def test_ppo_sized_call_host_cost():
    data = rollout(4096, 128, 0, 0)
    ratio = host_ratio(lambda: CALLS["gae"][0](data), lambda: torch.add(data["r"], data["v"]))
    assert ratio <= 1.6, f"GAE {ratio:.2f}x the host time of one torch.add"


@pytest.mark.xfail(strict=False, reason="borderline on an H200, 2026-11-30: 1.3-1.9x torch.add across runs")
def test_ppo_sized_call_device_time():
    sets = [rollout(4096, 128, 0, seed) for seed in range(4)]
    elementwise = device_seconds([lambda d=d: torch.add(d["r"], d["v"]) for d in sets])
    gae = device_seconds([lambda d=d: CALLS["gae"][0](d) for d in sets])
    assert gae <= 1.5 * elementwise, f"GAE {gae * 1e6:.1f} us vs torch.add {elementwise * 1e6:.1f} us"


# Issue 4's target: time-major [T, N] float32, and bf16 values with uint8 flags stored [T, N], read within
# 10% of the bandwidth of batch-major float32 calls of the same estimator at large shapes
LAYOUT_NAMES = ("gae", "gae_truncated", "vtrace", "lambda_returns", "discounted_returns", "eligibility_traces",
                "prefix_sum")
LAYOUT_SHAPES = ((16384, 512), (4096, 4096), (4096, 16384))
# cells below the target: (name, layout, rows, T) -> the figures measured (benchmarks/tune.py, % of the copy
# ceiling) and their date, and the GPU where not an H200
LAYOUT_UNMET: dict[tuple[str, str, int, int], tuple[str, ...]] = {
    # bf16 values with uint8 flags stored [T, N] on an H200, batch-major float32 in the same run, two passes' mean
    # (benchmarks/results/h200-2026-12-06-run64-layout-ratios.txt, --sets 2); float32 [T, N] cells all pass there.
    # Discounted returns at 4096x16384 read 77.8% against 88.1% and GAE 85.9% against 94.6%: within the noise
    # margin, so unmarked
    **{(name, "bf16-time-major", rows, seq_len): (f"{low}% against {high}% batch-major float32", "2026-12-06")
       for name, rows, seq_len, low, high in (
           ("gae", 16384, 512, 78.8, 96.8), ("gae", 4096, 4096, 80.2, 98.2),
           ("gae_truncated", 16384, 512, 71.0, 98.8), ("gae_truncated", 4096, 4096, 65.9, 99.3),
           ("gae_truncated", 4096, 16384, 69.5, 95.3),
           ("vtrace", 16384, 512, 67.4, 98.7), ("vtrace", 4096, 4096, 63.9, 96.5), ("vtrace", 4096, 16384, 67.2, 95.5),
           ("lambda_returns", 16384, 512, 75.5, 99.2), ("lambda_returns", 4096, 4096, 75.8, 96.5),
           ("lambda_returns", 4096, 16384, 79.7, 95.3),
           ("discounted_returns", 16384, 512, 70.3, 93.5), ("discounted_returns", 4096, 4096, 71.1, 90.2),
           ("eligibility_traces", 16384, 512, 69.7, 93.7), ("eligibility_traces", 4096, 4096, 67.8, 96.2),
           ("eligibility_traces", 4096, 16384, 75.0, 89.3),
           ("prefix_sum", 16384, 512, 70.0, 93.8), ("prefix_sum", 4096, 4096, 67.7, 96.2),
           ("prefix_sum", 4096, 16384, 75.1, 89.2))},
}
LAYOUT_CASES = [
    pytest.param(name, rows, seq_len, layout, id=f"{layout}-{name}-{rows}x{seq_len}",
                 marks=[unmet(*LAYOUT_UNMET[name, layout, rows, seq_len])] if (name, layout, rows, seq_len) in LAYOUT_UNMET
                 else [])
    for layout in ("time-major", "bf16-time-major") for rows, seq_len in LAYOUT_SHAPES for name in LAYOUT_NAMES
]


@pytest.mark.parametrize("name, rows, seq_len, layout", LAYOUT_CASES)
def test_layouts_read_as_fast_as_batch_major_float32(copy_ceiling, name, rows, seq_len, layout):
    batch_major = percent_of_copy(name, rows, seq_len, 0, copy_ceiling)
    other = percent_of_copy(name, rows, seq_len, 0, copy_ceiling, layout)
    assert other >= 0.9 * batch_major - NOISE_POINTS, (
        f"{name} {rows}x{seq_len} {layout}: {other:.1f}% of copy, batch-major float32 {batch_major:.1f}%")


# Issue 3's first-call target: an estimator's first call (the compiles of its kernels) takes at most 3 s at any
# T; FIRST_CALL_MARGIN for the host's speed, which varies between processes (benchmarks/NOTES.md, "Thirty-seventh
# round": Retrace's compile with 4 actions took 1.91-3.25 s in six fresh processes)
FIRST_CALL_SECONDS = 3.0
FIRST_CALL_MARGIN = 1.1
FIRST_CALL_CASES = [
    pytest.param("gae", id="gae"),
    pytest.param("vtrace", id="vtrace",
                 marks=unmet("3.33 and 3.48 s in two fresh processes on a host that compiled GAE in 2.37 s (1.0-1.9 s "
                             "on earlier hosts)", "2026-12-05")),
    pytest.param("retrace", id="retrace-18-actions"),
    pytest.param("retrace4", id="retrace-4-actions",
                 marks=unmet("1.9-3.3 s in six fresh processes, two over 3 s", "2026-12-04")),
]


@pytest.mark.parametrize("name", FIRST_CALL_CASES)
def test_first_call_compiles_within_target(name):
    """``benchmarks/first_call.py`` at 8x2^21 (the walks: each estimator's largest kernels) in a fresh process
    with an empty Triton cache, after a trivial kernel's first launch has taken Triton's one-time work."""
    result = run_benchmark_script("first_call.py", name, "8", str(2**21), "--after-warm-up", timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    found = re.search(r" first\s+([0-9.]+) s", result.stdout)
    assert found is not None, result.stdout
    first = float(found.group(1))
    assert first <= FIRST_CALL_SECONDS * FIRST_CALL_MARGIN, result.stdout
