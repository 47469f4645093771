"""``python -m rl_triton bench``: every estimator against the memory roofline, beside the usual baselines.

The kernels are memory-bound, so each call is scored by the fewest bytes it must move (each input
read once, each output written once, at the dtypes of the call) divided by its device time, as a
share of a large device-to-device copy measured in the same run. Small calls are bound by launch
cost instead, so three times are reported for each call:

- full call: CUDA events around one Python call, synchronised (what one isolated call costs);
- pipelined: many calls back to back without synchronising, divided by their count (host-bound
  when the device work is small);
- device: replay of a CUDA graph holding the calls (the kernels alone, no Python).

Every timed configuration is first checked against a float64 oracle on fresh random inputs.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import gc
import json
import math
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from rl_triton._demo import (
    ESTIMATORS,
    FLOAT32_TOLERANCE,
    Estimator,
    Inputs,
    best_device,
    describe_device,
    execution_path,
    format_table,
    library_version,
    outputs_of,
    package_version,
    relative_error,
    to_float64,
)

FULL_SHAPES = (
    (4096, 128),
    (512, 1024),
    (16384, 512),
    (4096, 4096),
    (64, 16384),
    (8, 131072),
    (8, 2**21),
    (1, 2**24),
)
QUICK_SHAPES = ((4096, 128), (16384, 512), (64, 16384), (1, 2**24))
CPU_SHAPES = ((64, 128), (8, 1024))
CPU_QUICK_SHAPES = ((64, 128),)
INTERPRETER_SHAPES = ((16, 64), (2, 512))
INTERPRETER_QUICK_SHAPES = ((16, 64),)

# rows up to this length are checked whole against the float64 loop reference; longer rows (the
# loop would take minutes) against a float64 run of the same public function, plus the loop
# reference on slices of ORACLE_SLICE_LEN steps whose boundary carries are known exactly
FULL_ORACLE_MAX_SEQ_LEN = 131072
ORACLE_SLICE_LEN = 32768
# the loop reference launches a few kernels per step; with few rows the CPU runs it faster
CPU_ORACLE_MAX_ROWS = 64

# the Python-loop baseline launches ~6 kernels per step: only worth timing on short rows
CLEANRL_MAX_SEQ_LEN = 1024
# its graphs hold ~6 kernels per step and call: two calls each
CLEANRL_GRAPH_CALLS = 2
# input sets rotated between calls so that the L2 cache does not serve the inputs of the next call
MIN_INPUT_SETS = 3
MAX_INPUT_SETS = 32
DEFAULT_L2_BYTES = 60 * 2**20
COPY_CEILING_BYTES = 2**31
# a CUDA graph timed for device time holds at least this many calls (its input sets in turn, repeated), so that
# the graph's own start on the device weighs little in a call's time
MIN_GRAPH_CALLS = 30
# GPU cycles of spin (torch.cuda._sleep) queued before a timed region's start event: about 50 us at an H200's
# clocks, longer than the host takes to queue a graph replay or a copy, so the events time the GPU's work and
# not the host's queueing (with the stream idle, the start event fires at once and the GPU then waits)
HOLD_CYCLES = 100_000
FLAG_DTYPES = {"float32": torch.float32, "bool": torch.bool, "uint8": torch.uint8}


@dataclasses.dataclass
class Row:
    """One (estimator, implementation, shape) measurement, as written to results.csv / results.json."""

    estimator: str
    implementation: str
    num_envs: int
    seq_len: int
    num_actions: int | None
    rel_error: float
    oracle: str
    passed: bool
    full_call_us: float = math.nan
    pipelined_us: float = math.nan
    device_us: float = math.nan
    min_bytes: int = 0
    device_gbps: float = math.nan
    pct_copy_ceiling: float = math.nan
    pct_copy_ceiling_pipelined: float = math.nan
    input_sets: int = 0
    note: str = ""

    @property
    def shape(self) -> str:
        shape = f"{self.num_envs}x{self.seq_len}"
        return f"{shape}x{self.num_actions}" if self.num_actions else shape


@dataclasses.dataclass(frozen=True)
class Implementation:
    """A way to compute one estimator's outputs from its inputs: rl_triton or a baseline."""

    name: str
    call: Callable[[Inputs], Any]
    # a CUDA graph of a Python-loop baseline holds thousands of nodes per call: capture fewer calls
    max_graph_calls: int = MAX_INPUT_SETS


# ----- baselines a user would otherwise write -----


def cleanrl_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminateds: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
    lambda_: float,
    **_: Any,
) -> torch.Tensor:
    """The per-step Python loop of CleanRL's PPO, in this library's conventions (terminated at t, V(s_T))."""
    not_done = 1.0 - (terminateds != 0).to(rewards.dtype)
    advantages = torch.empty_like(rewards)
    running = torch.zeros_like(last_value)
    next_value = last_value
    for step in reversed(range(rewards.shape[-1])):
        delta = rewards[:, step] + gamma * next_value * not_done[:, step] - values[:, step]
        running = delta + gamma * lambda_ * not_done[:, step] * running
        advantages[:, step] = running
        next_value = values[:, step]
    return advantages


def doubling_scan_backward(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x[t] = a[t] + b[t] * x[t+1] with x[T] = 0 along the last dim, and the products b[t] * ... * b[T-1].

    Hillis-Steele doubling: after the step with shift s, element t holds the composition of steps
    t .. t+2s-1, so log2(T) vectorised steps finish the scan. Plain products are kept (a log-space
    formulation underflows to wrong results once the products of gamma*lambda get tiny).
    """
    seq_len = a.shape[-1]
    shift = 1
    while shift < seq_len:
        a = torch.cat((a[..., :-shift] + b[..., :-shift] * a[..., shift:], a[..., -shift:]), dim=-1)
        b = torch.cat((b[..., :-shift] * b[..., shift:], b[..., -shift:]), dim=-1)
        shift *= 2
    return a, b


def doubling_scan_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    terminateds: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
    lambda_: float,
) -> torch.Tensor:
    not_done = 1.0 - (terminateds != 0).to(rewards.dtype)
    next_values = torch.cat((values[:, 1:], last_value[:, None]), dim=1)
    deltas = rewards + gamma * not_done * next_values - values
    advantages, _ = doubling_scan_backward(deltas, gamma * lambda_ * not_done)
    return advantages


def doubling_scan_discounted_returns(
    rewards: torch.Tensor,
    terminateds: torch.Tensor,
    truncateds: torch.Tensor,
    gamma: float,
    bootstrap_values: torch.Tensor,
) -> torch.Tensor:
    truncated = (truncateds != 0).to(rewards.dtype)
    not_done = (terminateds == 0).to(rewards.dtype) * (1.0 - truncated)
    inputs = rewards + gamma * truncated * bootstrap_values
    returns, decay_to_end = doubling_scan_backward(inputs, gamma * not_done)
    # the window-end carry G[T] = bootstrap_values[:, -1], decayed to each step
    return returns + decay_to_end * bootstrap_values[:, -1:]


def _keyword_call(function: Callable[..., Any], names: Sequence[str]) -> Callable[[Inputs], Any]:
    return lambda inputs: function(**{name: inputs[name] for name in names})


def baseline_implementations(device: torch.device) -> dict[str, list[tuple[Implementation, Callable[[int], bool]]]]:
    """Baselines per estimator name, each with a predicate on seq_len saying where it is timed."""
    if device.type == "cuda":
        _raise_recompile_limit()
        compile_label = "torch.compile"
        gae_scan = torch.compile(doubling_scan_gae, dynamic=False)
        returns_scan = torch.compile(doubling_scan_discounted_returns, dynamic=False)
    else:
        # compiling for the CPU takes longer than the tiny CPU run itself
        compile_label = "eager"
        gae_scan, returns_scan = doubling_scan_gae, doubling_scan_discounted_returns
    gae_names = ("rewards", "values", "terminateds", "last_value", "gamma", "lambda_")
    returns_names = ("rewards", "terminateds", "truncateds", "gamma", "bootstrap_values")
    return {
        "gae": [
            (
                Implementation("cleanrl-loop", lambda inputs: cleanrl_gae(**inputs),
                               max_graph_calls=CLEANRL_GRAPH_CALLS),
                lambda seq_len: seq_len <= CLEANRL_MAX_SEQ_LEN,
            ),
            (
                Implementation(f"doubling-scan ({compile_label})", _keyword_call(gae_scan, gae_names)),
                lambda seq_len: True,
            ),
        ],
        "discounted-returns": [
            (
                Implementation(f"doubling-scan ({compile_label})", _keyword_call(returns_scan, returns_names)),
                lambda seq_len: True,
            ),
        ],
    }


def _raise_recompile_limit() -> None:
    """One compiled graph per benchmark shape: more than dynamo's default of 8 recompilations."""
    import torch._dynamo.config as dynamo_config

    for option in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo_config, option):
            setattr(dynamo_config, option, max(getattr(dynamo_config, option), 64))
            return


# ----- timing -----


class Timer:
    """Full-call, pipelined and device (CUDA graph) times of a call rotated over input sets."""

    def __init__(self, device: torch.device, quick: bool) -> None:
        self.device = device
        self.on_gpu = device.type == "cuda"
        self.full_call_samples = 10 if quick or not self.on_gpu else 20
        self.budget_seconds = 0.05 if quick else 0.1

    def synchronize(self) -> None:
        if self.on_gpu:
            torch.cuda.synchronize(self.device)

    def full_call(self, call: Callable[[Inputs], Any], input_sets: Sequence[Inputs]) -> float:
        samples = []
        for index in range(self.full_call_samples if self.on_gpu else 3):
            inputs = input_sets[index % len(input_sets)]
            if self.on_gpu:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                call(inputs)
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / 1e3)
            else:
                began = time.perf_counter()
                call(inputs)
                samples.append(time.perf_counter() - began)
        return statistics.median(samples)

    def pipelined(self, call: Callable[[Inputs], Any], input_sets: Sequence[Inputs], estimate: float) -> float:
        calls = int(min(400, max(10, self.budget_seconds / max(estimate, 1e-7))))
        if not self.on_gpu:
            calls = min(calls, 5)
        samples = []
        for _ in range(3 if self.on_gpu else 1):
            self.synchronize()
            began = time.perf_counter()
            for index in range(calls):
                call(input_sets[index % len(input_sets)])
            self.synchronize()
            samples.append((time.perf_counter() - began) / calls)
        return statistics.median(samples)

    def graph_replay(self, implementation: Implementation, input_sets: Sequence[Inputs], estimate: float) -> float:
        """Kernel time per call from replaying one CUDA graph of calls on the input sets in turn
        (``graph_calls``), the stream held while the host queues each replay (``hold_stream``)."""
        if not self.on_gpu:
            return math.nan
        call = implementation.call
        # warm-up on a side stream, as graph capture requires, so lazy initialisation is not captured
        side_stream = torch.cuda.Stream(self.device)
        side_stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side_stream):
            output_bytes = max(
                sum(output.numel() * output.element_size() for output in outputs_of(call(inputs)))
                for inputs in input_sets[: implementation.max_graph_calls]
            )
        torch.cuda.current_stream(self.device).wait_stream(side_stream)
        # each captured call keeps its own outputs (a reused buffer could stay in the L2 cache between calls)
        graph_sets = graph_calls(input_sets, implementation.max_graph_calls, output_bytes,
                                 torch.cuda.mem_get_info(self.device)[0] // 2)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            kept_outputs = [call(inputs) for inputs in graph_sets]
        graph.replay()
        self.synchronize()
        replays = int(min(50, max(5, self.budget_seconds / max(estimate * len(graph_sets), 1e-7))))
        samples = []
        for _ in range(replays):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            hold_stream()
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / len(graph_sets))
        del kept_outputs, graph
        return statistics.median(samples)


def graph_calls(input_sets: Sequence[Inputs], max_calls: int = MAX_INPUT_SETS, output_bytes: int = 0,
                room: int | None = None) -> list[Inputs]:
    """The input sets of the calls a device-time graph holds: every set in turn, repeated up to
    ``MIN_GRAPH_CALLS`` calls, or the first ``max_calls`` sets where that is fewer (graphs of Python-loop
    baselines). Each set comes back after all the others, so the L2 cache serves no call's inputs.
    Repeats stop where the calls' outputs (``output_bytes`` each) would outgrow ``room`` bytes (None: no
    limit), so that a GPU with less memory still times one call per set."""
    sets = min(len(input_sets), max_calls)
    count = max(sets, min(MIN_GRAPH_CALLS, max_calls))
    if room is not None and output_bytes > 0:
        count = max(sets, min(count, room // output_bytes))
    return [input_sets[index % len(input_sets)] for index in range(count)]


def hold_stream() -> None:
    """Keep the current CUDA stream busy while the host queues what is timed next (``HOLD_CYCLES``)."""
    torch.cuda._sleep(HOLD_CYCLES)


def copy_ceiling_gbps(device: torch.device) -> float:
    """Bandwidth of a large device-to-device copy, counting bytes read plus bytes written."""
    source = torch.empty(COPY_CEILING_BYTES // 4, dtype=torch.float32, device=device).uniform_()
    target = torch.empty_like(source)
    for _ in range(3):
        target.copy_(source)
    samples = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        hold_stream()
        start.record()
        target.copy_(source)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    return 2 * COPY_CEILING_BYTES / statistics.median(samples) / 1e9


# ----- correctness -----


def minimal_bytes(inputs: Inputs, result: Any) -> int:
    """Each input tensor read once plus each output written once, at the dtypes of the call."""
    read = sum(value.numel() * value.element_size() for value in inputs.values() if isinstance(value, torch.Tensor))
    written = sum(output.numel() * output.element_size() for output in outputs_of(result))
    return read + written


def time_slice(inputs: Inputs, start: int, stop: int, keep_seed: bool) -> Inputs:
    """The inputs of steps [start, stop): per-step tensors sliced; per-env seeds dropped unless kept."""
    seq_len = next(value.shape[1] for value in inputs.values() if isinstance(value, torch.Tensor) and value.dim() >= 2)
    sliced: Inputs = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[1] == seq_len:
            value = value[:, start:stop]
        elif key == "seed_values" and not keep_seed:
            value = None
        sliced[key] = value
    return sliced


def slice_outputs(result: Any, start: int, stop: int) -> tuple[torch.Tensor, ...]:
    return tuple(output[:, start:stop] for output in outputs_of(result))


def oracle_slices(estimator: Estimator, seq_len: int) -> list[tuple[int, int, int, bool]]:
    """(start, stop, boundary column, keep_seed) of the slices whose outputs the loop reference gives exactly.

    A backward scan's outputs on [start, T) depend only on inputs there, and a terminated step cuts
    every carry, so a slice ending at a forced termination is exact too; mirrored for forward scans
    (a slice starting right after a forced ``done``). The middle slice straddles T/2, a segment edge
    for every power-of-two split of the time axis, so carries between segments are exercised.
    """
    length = min(ORACLE_SLICE_LEN, seq_len // 4)
    if estimator.direction == "backward":
        cut = seq_len // 2 + length // 2 + 17
        return [(seq_len - length, seq_len, -1, True), (cut + 1 - length, cut + 1, cut, True)]
    start = seq_len // 2 - length // 2 - 17
    return [(0, length, -1, True), (start, start + length, start - 1, False)]


def force_boundary(estimator: Estimator, inputs: Inputs, column: int) -> None:
    """Make ``column`` an episode end in every row, so no carry crosses it (see ``oracle_slices``)."""
    if estimator.direction == "forward":
        inputs["dones"][:, column] = 1
        return
    inputs["terminateds"][:, column] = 1
    for name in ("truncateds", "bootstrap_values"):
        if inputs.get(name) is not None:
            inputs[name][:, column] = 0


def oracle_device(inputs: Inputs, num_envs: int) -> torch.device:
    any_tensor = next(value for value in inputs.values() if isinstance(value, torch.Tensor))
    return torch.device("cpu") if num_envs <= CPU_ORACLE_MAX_ROWS else any_tensor.device


@dataclasses.dataclass
class Oracle:
    """The float64 answer for input set 0, and how it was obtained."""

    expected: Any
    description: str
    # long rows only: (start, stop, float64 reference outputs) of exact slices
    slices: list[tuple[int, int, tuple[torch.Tensor, ...]]]


def build_oracle(estimator: Estimator, inputs: Inputs, num_envs: int, seq_len: int) -> Oracle:
    if seq_len <= FULL_ORACLE_MAX_SEQ_LEN:
        expected = estimator.reference(**to_float64(inputs, oracle_device(inputs, num_envs)))
        return Oracle(expected, "reference f64", [])
    slices = []
    for start, stop, _, keep_seed in oracle_slices(estimator, seq_len):
        sliced = to_float64(time_slice(inputs, start, stop, keep_seed), torch.device("cpu"))
        slices.append((start, stop, outputs_of(estimator.reference(**sliced))))
    expected = estimator.public(**to_float64(inputs))
    oracle = Oracle(expected, "public f64 + reference f64 slices", slices)
    # the float64 run of the public function is itself held to the reference on the slices
    if check_against(oracle, expected) > 1e-9:
        oracle.description += " (public f64 disagrees with the reference slices)"
    return oracle


def check_against(oracle: Oracle, result: Any) -> float:
    error = relative_error(result, oracle.expected)
    for start, stop, expected in oracle.slices:
        error = max(error, relative_error(slice_outputs(result, start, stop), expected))
    return error


# ----- the run -----


def input_set_count(bytes_per_call: int, l2_bytes: int, on_gpu: bool) -> int:
    if not on_gpu:
        return 2
    return int(min(MAX_INPUT_SETS, max(MIN_INPUT_SETS, math.ceil(4 * l2_bytes / max(bytes_per_call, 1)))))


class Progress:
    """tqdm when installed, plain lines otherwise."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        try:
            from tqdm import tqdm

            self.bar: Any = tqdm(total=total, unit="config", dynamic_ncols=True)
        except ImportError:
            self.bar = None

    def start(self, label: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(label)
        else:
            print(f"[{self.done + 1}/{self.total}] {label}", flush=True)

    def advance(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextlib.contextmanager
def released_memory(device: torch.device) -> Iterator[None]:
    """Return the cached blocks of one configuration before the next one allocates its own."""
    try:
        yield
    finally:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def fill_speed(
    row: Row, timer: Timer, implementation: Implementation, input_sets: Sequence[Inputs], ceiling: float
) -> None:
    # the first full-call samples also compile (Triton, torch.compile); time only after one warm-up call
    implementation.call(input_sets[0])
    timer.synchronize()
    full_call = timer.full_call(implementation.call, input_sets)
    row.full_call_us = full_call * 1e6
    row.pipelined_us = timer.pipelined(implementation.call, input_sets, full_call) * 1e6
    try:
        row.device_us = timer.graph_replay(implementation, input_sets, full_call) * 1e6
    except Exception as error:  # noqa: BLE001 - a capture failure is a finding to report, not a crash
        row.note = _join(row.note, f"graph capture failed: {type(error).__name__}: {error}"[:160])
        timer.synchronize()
    if math.isfinite(row.device_us) and row.device_us > 0:
        row.device_gbps = row.min_bytes / (row.device_us * 1e-6) / 1e9
    if ceiling > 0:
        row.pct_copy_ceiling = 100.0 * row.device_gbps / ceiling
        row.pct_copy_ceiling_pipelined = 100.0 * row.min_bytes / (row.pipelined_us * 1e-6) / 1e9 / ceiling


def _join(note: str, addition: str) -> str:
    return f"{note}; {addition}" if note else addition


def benchmark_estimator(
    estimator: Estimator,
    shape: tuple[int, int],
    device: torch.device,
    timer: Timer,
    baselines: Sequence[tuple[Implementation, Callable[[int], bool]]],
    l2_bytes: int,
    ceiling: float,
    flag_dtype: torch.dtype,
    seed: int,
) -> list[Row]:
    num_envs, seq_len = shape
    generator = torch.Generator(device=device).manual_seed(seed)
    first_set = estimator.make_inputs(num_envs, seq_len, device, generator, flag_dtype)
    per_action = first_set.get("action_probs_target")
    num_actions = per_action.shape[-1] if isinstance(per_action, torch.Tensor) else None
    long_rows = seq_len > FULL_ORACLE_MAX_SEQ_LEN
    if long_rows:
        for _, _, column, _ in oracle_slices(estimator, seq_len):
            if column >= 0:
                force_boundary(estimator, first_set, column)

    rl_triton_call = Implementation("rl_triton", lambda inputs: estimator.public(**inputs))
    implementations = [rl_triton_call] + [impl for impl, applies in baselines if applies(seq_len)]
    rows: list[Row] = []
    try:
        oracle = build_oracle(estimator, first_set, num_envs, seq_len)
    except Exception as error:  # noqa: BLE001 - reported in the table; the other configurations still run
        note = f"oracle failed: {type(error).__name__}: {error}"[:200]
        return [Row(estimator.name, "rl_triton", num_envs, seq_len, num_actions, math.inf, "-", False, note=note)]

    result = estimator.public(**first_set)
    bytes_per_call = minimal_bytes(first_set, result)
    del result
    set_count = input_set_count(bytes_per_call, l2_bytes, device.type == "cuda")
    input_sets = [first_set] + [
        estimator.make_inputs(num_envs, seq_len, device, generator, flag_dtype) for _ in range(set_count - 1)
    ]
    for implementation in implementations:
        row = Row(
            estimator.name, implementation.name, num_envs, seq_len, num_actions, math.inf, oracle.description, False
        )
        row.min_bytes, row.input_sets = bytes_per_call, set_count
        rows.append(row)
        try:
            row.rel_error = check_against(oracle, implementation.call(first_set))
            row.passed = row.rel_error <= FLOAT32_TOLERANCE
            if not row.passed:
                row.note = "result disagrees with the float64 oracle: not timed"
                continue
            fill_speed(row, timer, implementation, input_sets, ceiling)
        except Exception as error:  # noqa: BLE001 - reported in the table; the other configurations still run
            row.passed = False
            row.note = _join(row.note, f"{type(error).__name__}: {error}"[:200])
            timer.synchronize()
    return rows


# the yardstick's two forms: ``torch.add(a, b, out=c)`` writes a buffer it is given; ``torch.add(a, b)`` allocates its
# output, as every estimator does, so its host time is the like-for-like measure of an estimator call's
YARDSTICK_OUT = "pytorch"
YARDSTICK_NEW_OUTPUT = "pytorch (new output)"


def benchmark_elementwise_yardstick(
    shape: tuple[int, int], device: torch.device, timer: Timer, l2_bytes: int, ceiling: float,
    new_output: bool = False,
) -> Row:
    """``torch.add(a, b, out=c)`` over the same rows x steps: what one PyTorch op costs at this size;
    ``new_output``: ``torch.add(a, b)``, which allocates its output."""
    num_envs, seq_len = shape
    bytes_per_call = 3 * num_envs * seq_len * 4
    set_count = input_set_count(bytes_per_call, l2_bytes, device.type == "cuda")
    names = ("a", "b") if new_output else ("a", "b", "out")
    input_sets = [{name: torch.rand(num_envs, seq_len, device=device) for name in names} for _ in range(set_count)]
    implementation_name = YARDSTICK_NEW_OUTPUT if new_output else YARDSTICK_OUT
    row = Row("torch.add", implementation_name, num_envs, seq_len, None, 0.0, "exact", True)
    row.min_bytes, row.input_sets = bytes_per_call, set_count
    if new_output:
        def call(inputs: Inputs) -> torch.Tensor:
            return torch.add(inputs["a"], inputs["b"])
    else:
        def call(inputs: Inputs) -> torch.Tensor:
            return torch.add(inputs["a"], inputs["b"], out=inputs["out"])
    implementation = Implementation(implementation_name, call)
    fill_speed(row, timer, implementation, input_sets, ceiling)
    return row


def driver_version() -> str:
    try:
        completed = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
        return completed.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def l2_cache_bytes(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or DEFAULT_L2_BYTES


def _number(value: float, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if math.isfinite(value) else "-"


def results_table(rows: Sequence[Row]) -> str:
    header = (
        "estimator",
        "impl",
        "shape",
        "rel.err",
        "call us",
        "pipelined us",
        "device us",
        "MB",
        "GB/s",
        "% copy",
        "note",
    )
    lines = [
        (
            row.estimator,
            row.implementation,
            row.shape,
            f"{row.rel_error:.1e}" if math.isfinite(row.rel_error) else "FAIL",
            _number(row.full_call_us),
            _number(row.pipelined_us),
            _number(row.device_us),
            _number(row.min_bytes / 1e6),
            _number(row.device_gbps, 0),
            _number(row.pct_copy_ceiling),
            row.note if row.passed or row.note else "FAIL",
        )
        for row in rows
    ]
    return format_table(header, lines, right_aligned_from=3)


def write_results(out_dir: Path, meta: dict[str, Any], rows: Sequence[Row]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    records = [dataclasses.asdict(row) | {"shape": row.shape} for row in rows]
    json_path = out_dir / "results.json"
    # json has no NaN/inf: unmeasured values become null
    clean = [{key: _json_value(value) for key, value in record.items()} for record in records]
    json_path.write_text(json.dumps({"meta": meta, "results": clean}, indent=2) + "\n")

    csv_path = out_dir / "results.csv"
    context = {key: meta[key] for key in ("date", "device", "torch", "triton", "copy_ceiling_gbps")}
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*context, *records[0]] if records else list(context))
        writer.writeheader()
        for record in records:
            writer.writerow(context | record)
    written = [csv_path, json_path]
    plot_path = plot_roofline(out_dir / "roofline.png", meta, rows)
    if plot_path is not None:
        written.append(plot_path)
    return written


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def plot_roofline(path: Path, meta: dict[str, Any], rows: Sequence[Row]) -> Path | None:
    """Bars of % of the copy ceiling per estimator and shape; the torch.add yardstick as a marker."""
    measured = [row for row in rows if math.isfinite(row.pct_copy_ceiling)]
    if not measured:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    shapes = list(dict.fromkeys(f"{row.num_envs}x{row.seq_len}" for row in measured))
    estimators = list(dict.fromkeys(row.estimator for row in measured if row.implementation == "rl_triton"))
    if not estimators:
        return None
    width = 0.8 / len(estimators)
    figure, axes = plt.subplots(figsize=(max(10, 1.6 * len(shapes)), 5.5))
    colors = plt.get_cmap("tab10")
    for index, estimator in enumerate(estimators):
        values = {
            f"{row.num_envs}x{row.seq_len}": row.pct_copy_ceiling
            for row in measured
            if row.estimator == estimator and row.implementation == "rl_triton"
        }
        positions = [shape_index - 0.4 + (index + 0.5) * width for shape_index in range(len(shapes))]
        axes.bar(
            positions,
            [values.get(shape, 0.0) for shape in shapes],
            width=width,
            label=estimator,
            color=colors(index % 10),
        )
    yardstick = {
        f"{row.num_envs}x{row.seq_len}": row.pct_copy_ceiling
        for row in measured if row.estimator == "torch.add" and row.implementation == YARDSTICK_OUT
    }
    if yardstick:
        axes.scatter(
            [shapes.index(shape) for shape in yardstick],
            list(yardstick.values()),
            marker="_",
            s=900,
            color="black",
            label="torch.add (yardstick)",
            zorder=3,
        )
    axes.axhline(100, color="grey", linewidth=0.8, linestyle="--")
    axes.set_xticks(range(len(shapes)), shapes)
    axes.set_xlabel("rows x steps")
    axes.set_ylabel("% of device-to-device copy bandwidth (device time)")
    axes.set_title(
        f"rl-triton on {meta['device']}: minimal bytes / CUDA-graph time, "
        f"copy ceiling {meta['copy_ceiling_gbps']:.0f} GB/s"
    )
    axes.legend(fontsize="small", ncol=2, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'4096x128,1x2**24' as [(4096, 128), (1, 16777216)]; each size a positive integer or power."""
    shapes = []
    for item in text.split(","):
        rows, separator, steps = item.strip().lower().partition("x")
        try:
            if not separator:
                raise ValueError
            shape = (_power(rows.strip()), _power(steps.strip()))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"invalid shape {item.strip()!r}: expected rows x steps, each a positive integer or power up to "
                "2**62, e.g. 4096x128 or 1x2**24") from None
        if min(shape) < 1:
            raise argparse.ArgumentTypeError(f"invalid shape {item.strip()!r}: rows and steps must be at least 1")
        shapes.append(shape)
    return shapes


# a size beyond this is no tensor's (torch sizes are int64); checked before any power is computed
_MAX_SIZE = 2**62


def _power(text: str) -> int:
    """'4096' or '2**21': decimal digits, or decimal digits to a power of decimal digits, at most 2**62;
    ValueError otherwise."""
    base, separator, exponent = text.partition("**")
    if not separator and base.startswith("-") and base[1:].isdecimal():
        # a negative size: named as such by the caller
        return int(base)
    if not base.isdecimal() or (separator and not exponent.isdecimal()):
        raise ValueError(text)
    size, power = int(base), int(exponent) if separator else 1
    # size**power <= 2**62 without computing a huge power first
    if size > 1 and power * math.log2(size) > math.log2(_MAX_SIZE):
        raise ValueError(text)
    size **= power
    if size > _MAX_SIZE:
        raise ValueError(text)
    return size


def _output_folder(text: str) -> Path:
    if not text:
        raise argparse.ArgumentTypeError("expected a folder, got an empty string")
    return Path(text)


def _seed(text: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    # what torch.Generator.manual_seed takes
    if not 0 <= seed < 2**64:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**64), got {text!r}")
    return seed


def bench_description() -> str:
    """The first sentence of this module's docstring, without its markup."""
    return __doc__.split("\n")[0].replace("``", "")


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m rl_triton bench", description=bench_description())
    parser.add_argument("--quick", action="store_true", help="a subset of the shapes (and fewer samples)")
    parser.add_argument("--out", type=_output_folder, default=Path("bench-results"),
                        help="output folder (default: %(default)s)")
    parser.add_argument("--shapes", type=parse_shapes, help="comma-separated rows x steps, e.g. 4096x128,1x2**24")
    parser.add_argument("--estimators", help=f"comma-separated subset of: {', '.join(ESTIMATORS)}")
    parser.add_argument("--flag-dtype", choices=tuple(FLAG_DTYPES), default="float32", help="dtype of flag inputs")
    parser.add_argument("--no-baselines", action="store_true", help="skip the CleanRL loop, doubling scans, torch.add")
    parser.add_argument("--seed", type=_seed, default=0,
                        help="seed of the random inputs; a row's inputs follow from it and the row's place among the "
                             "selected shapes and estimators (default: %(default)s)")
    return parser


RESULT_FILES = ("results.json", "results.csv", "roofline.png")


def _unwritable_output(out_dir: Path) -> str | None:
    """Why the results cannot be written into the folder ``out_dir`` (a file probed, then removed), or None."""
    for name in RESULT_FILES:
        if (out_dir / name).is_dir():
            return f"{out_dir / name} is a folder"
    try:
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".write-probe-"):
            pass
    except OSError as error:
        return f"cannot write there ({error.strerror or error})"
    return None


def _failed_row(estimator: str, implementation: str, shape: tuple[int, int], error: Exception) -> Row:
    """A configuration that raised before it could be checked (its inputs could not be made, say)."""
    note = f"{type(error).__name__}: {error}".splitlines()[0][:200]
    return Row(estimator, implementation, shape[0], shape[1], None, math.inf, "-", False, note=note)


def run_bench(arguments: argparse.Namespace) -> int:
    device = best_device()
    on_gpu = device.type == "cuda"
    if arguments.shapes:
        shapes = arguments.shapes
    elif on_gpu:
        shapes = QUICK_SHAPES if arguments.quick else FULL_SHAPES
    elif execution_path(device) == "triton-interpreter":
        # the interpreter takes seconds a call at the CPU's shapes
        shapes = INTERPRETER_QUICK_SHAPES if arguments.quick else INTERPRETER_SHAPES
    else:
        shapes = CPU_QUICK_SHAPES if arguments.quick else CPU_SHAPES
    if arguments.estimators is None:
        names = list(ESTIMATORS)
    else:
        names = [name.strip() for name in arguments.estimators.split(",")]
    unknown = [name for name in names if name not in ESTIMATORS]
    if unknown:
        print(f"unknown estimator(s) {unknown}; choose from {list(ESTIMATORS)}", file=sys.stderr)
        return 2
    try:
        # before the run, so that its results have somewhere to go
        arguments.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        print(f"--out {arguments.out}: cannot make that folder ({error.strerror or error})", file=sys.stderr)
        return 2
    unwritable = _unwritable_output(arguments.out)
    if unwritable:
        print(f"--out {arguments.out}: {unwritable}", file=sys.stderr)
        return 2

    print(f"rl-triton {library_version()} benchmark on {describe_device(device)} (path: {execution_path(device)})")
    ceiling = copy_ceiling_gbps(device) if on_gpu else 0.0
    l2_bytes = l2_cache_bytes(device)
    if on_gpu:
        print(f"device-to-device copy ceiling: {ceiling:.0f} GB/s (read + write); L2 {l2_bytes / 2**20:.0f} MiB")
    else:
        print("No GPU: a tiny run of the CPU path. Roofline figures (GB/s, % of copy ceiling) need a CUDA GPU.")

    timer = Timer(device, arguments.quick)
    flag_dtype = FLAG_DTYPES[arguments.flag_dtype]
    baselines = {} if arguments.no_baselines else baseline_implementations(device)
    with_yardstick = not arguments.no_baselines
    progress = Progress(len(shapes) * (len(names) + with_yardstick))
    rows: list[Row] = []
    for shape_index, shape in enumerate(shapes):
        for name_index, name in enumerate(names):
            progress.start(f"{name} {shape[0]}x{shape[1]}")
            try:
                with released_memory(device):
                    rows += benchmark_estimator(
                        ESTIMATORS[name],
                        shape,
                        device,
                        timer,
                        baselines.get(name, ()),
                        l2_bytes,
                        ceiling,
                        flag_dtype,
                        seed=(arguments.seed + 1000 * shape_index + name_index) % 2**64,
                    )
            except Exception as error:  # noqa: BLE001 - inputs that cannot be made (memory): reported, the rest run
                rows.append(_failed_row(name, "rl_triton", shape, error))
            progress.advance()
        if with_yardstick:
            progress.start(f"torch.add {shape[0]}x{shape[1]}")
            for new_output in (False, True):
                try:
                    with released_memory(device):
                        rows.append(benchmark_elementwise_yardstick(shape, device, timer, l2_bytes, ceiling,
                                                                    new_output))
                except Exception as error:  # noqa: BLE001 - as above
                    rows.append(_failed_row("torch.add", YARDSTICK_NEW_OUTPUT if new_output else YARDSTICK_OUT,
                                            shape, error))
            progress.advance()
    progress.close()

    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": describe_device(device),
        "driver": driver_version() if on_gpu else "n/a",
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "rl_triton": library_version(),
        "path": execution_path(device),
        # none without a GPU: nothing is scored against it
        "copy_ceiling_gbps": round(ceiling, 1) if on_gpu else None,
        "l2_cache_bytes": l2_bytes,
        "flag_dtype": arguments.flag_dtype,
        "quick": arguments.quick,
        "seed": arguments.seed,
        "timing": {
            "full_call_us": ("CUDA events around one synchronised Python call, median" if on_gpu
                             else "wall clock around one Python call, median"),
            "pipelined_us": "wall time of back-to-back calls without synchronising, divided by their count",
            "device_us": f"CUDA graph replay of at least {MIN_GRAPH_CALLS} calls (the Python-loop baseline: "
                         f"{CLEANRL_GRAPH_CALLS}) on the input sets in turn, the stream held while the host queues "
                         "it; per call, median",
            "min_bytes": "each input tensor read once + each output written once",
        },
    }
    print()
    print(results_table(rows))
    if on_gpu:
        print(
            "\ncall: one synchronised Python call (CUDA events); pipelined: back-to-back calls / count; "
            "device: CUDA-graph replay per call;\nMB: minimal bytes (inputs read once + outputs written once); "
            "GB/s and % copy from device time."
        )
    else:
        print("\ncall: one Python call (wall clock); pipelined: back-to-back calls / count; rel.err vs float64.")
    for path in write_results(arguments.out, meta, rows):
        print(f"wrote {path}")
    failed = [row for row in rows if not row.passed]
    if failed:
        print(f"{len(failed)} configuration(s) failed their correctness check or raised; see the note column.")
        return 1
    return 0
