"""Forward and backward times of the differentiable GAE and lambda-returns, and their gradients' error.

    PYTHONPATH=src python benchmarks/autograd_timing.py [--out autograd.json] [--reps 50]
    PYTHONPATH=src python benchmarks/autograd_timing.py --smoke      # CPU (or any device), tiny shapes

For GAE with truncations and bootstrap values, GAE with ``last_value`` and lambda-returns with
truncations and bootstrap values, at 4096 x 1024 and 8 x 2**20 (float32), it times:

- ``fwd fused``: the call on inputs that do not require gradients (the fused kernel alone),
- ``fwd diff``: the call on inputs that require gradients (it records the autograd graph),
- ``bwd``: ``torch.autograd.grad`` of the output with a fixed random grad_output, after a forward,
- ``comp bwd``: the same backward through the reference composition (elementwise PyTorch around
  the generic differentiable recurrence), the path the estimators took before the fused backward,

and checks the fused gradients once against float64 gradients of the reference composition.

Two clocks, medians over ``--reps`` repetitions after warm-up, each with L2 flushed first:
``device`` puts a GPU sleep ahead of the timed region so that the host has queued all of it
before the GPU starts (kernel time only), ``call`` records the events around the bare call (host
Python and launch latency included, what an eager training step sees). On CPU both are wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

import rl_triton
from rl_triton import reference

GAMMA, LAMBDA = 0.99, 0.95
GPU_SHAPES = [(4096, 1024), (8, 2**20)]
SMOKE_SHAPES = [(3, 50), (2, 300)]
# relative (max-norm) error of float32 gradients against float64 ones that counts as correct
GRADIENT_TOLERANCE = 1e-5
# about 2 ms of GPU sleep at H200 clocks: longer than the host needs to queue one timed call
SLEEP_CYCLES = 4_000_000
L2_FLUSH_BYTES = 256 * 2**20


@dataclass
class Case:
    """One estimator call: ``call(library, *differentiable)`` with ``library`` rl_triton or its reference."""

    name: str
    call: Callable[..., torch.Tensor]
    differentiable: dict[str, torch.Tensor]


@dataclass
class Row:
    case: str
    shape: tuple[int, int]
    device_ms: dict[str, float] = field(default_factory=dict)
    call_ms: dict[str, float] = field(default_factory=dict)
    gradient_error: dict[str, float] = field(default_factory=dict)

    def ratios(self, clock: dict[str, float]) -> tuple[float, float]:
        return clock["bwd"] / clock["fwd_fused"], clock["bwd"] / clock["fwd_diff"]


def rollout(num_rows: int, seq_len: int, device: torch.device, seed: int) -> dict[str, torch.Tensor]:
    """A float32 rollout: ~5% terminated and ~5% truncated steps (never both), legal bootstrap values."""
    generator = torch.Generator(device=device).manual_seed(seed)
    shape = (num_rows, seq_len)

    def normal(*size: int) -> torch.Tensor:
        return torch.randn(size, generator=generator, device=device)

    draw = torch.rand(shape, generator=generator, device=device)
    terminateds, truncateds = draw < 0.05, (draw >= 0.05) & (draw < 0.10)
    bootstrap_values = torch.where(truncateds, normal(*shape), 0.0)
    bootstrap_values[:, -1] = normal(num_rows)
    return {
        "rewards": normal(*shape),
        "values": normal(*shape),
        # V(s_{t+1}), zero at truncated steps (their continuation value is the bootstrap value)
        "next_values": torch.where(truncateds, 0.0, normal(*shape)),
        "terminateds": terminateds,
        "truncateds": truncateds,
        "bootstrap_values": bootstrap_values,
        "last_value": bootstrap_values[:, -1].clone(),
        "grad_output": normal(*shape),
    }


def cases(data: dict[str, torch.Tensor]) -> list[Case]:
    term, trunc = data["terminateds"], data["truncateds"]

    def pick(*names: str) -> dict[str, torch.Tensor]:
        return {name: data[name] for name in names}

    return [
        Case(
            "gae truncateds+bootstrap",
            lambda lib, r, v, b: lib.compute_gae(r, v, term, trunc, GAMMA, LAMBDA, b),
            pick("rewards", "values", "bootstrap_values"),
        ),
        Case(
            "gae last_value",
            lambda lib, r, v, lv: lib.compute_gae(r, v, term, None, GAMMA, LAMBDA, last_value=lv),
            pick("rewards", "values", "last_value"),
        ),
        Case(
            "lambda-returns truncateds+bootstrap",
            lambda lib, r, nv, b: lib.compute_lambda_returns(r, nv, term, trunc, GAMMA, LAMBDA, b),
            pick("rewards", "next_values", "bootstrap_values"),
        ),
    ]


class Clock:
    """Median times of a region on ``device``: kernel-only and host-inclusive (see the module doc)."""

    def __init__(self, device: torch.device, reps: int, warmup: int) -> None:
        self.device, self.reps, self.warmup = device, reps, warmup
        self.on_gpu = device.type == "cuda"
        self.flush_buffer = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=device) if self.on_gpu else None

    def measure(self, timed: Callable[[], object], setup: Callable[[], None] = lambda: None) -> tuple[float, float]:
        """(device ms, call ms) of ``timed()``, each run after ``setup()`` (untimed)."""
        for _ in range(self.warmup):
            setup()
            timed()
        if not self.on_gpu:
            samples = []
            for _ in range(self.reps):
                setup()
                began = time.perf_counter()
                timed()
                samples.append((time.perf_counter() - began) * 1e3)
            median = statistics.median(samples)
            return median, median
        return self._events(timed, setup, sleep=True), self._events(timed, setup, sleep=False)

    def _events(self, timed: Callable[[], object], setup: Callable[[], None], sleep: bool) -> float:
        samples = []
        for _ in range(self.reps):
            setup()
            self.flush_buffer.zero_()
            if sleep:
                torch.cuda._sleep(SLEEP_CYCLES)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            timed()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        return statistics.median(samples)


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    scale = expected.abs().max().item()
    return (got.double() - expected).abs().max().item() / max(scale, 1e-30)


def measure_case(case: Case, data: dict[str, torch.Tensor], clock: Clock, composition: bool) -> Row:
    names = list(case.differentiable)
    detached = [case.differentiable[name] for name in names]
    leaves = [t.clone().requires_grad_(True) for t in detached]
    grad_output = data["grad_output"]
    row = Row(case.name, tuple(grad_output.shape))

    def record(key: str, times: tuple[float, float]) -> None:
        row.device_ms[key], row.call_ms[key] = times

    with torch.no_grad():
        record("fwd_fused", clock.measure(lambda: case.call(rl_triton, *detached)))
    record("fwd_diff", clock.measure(lambda: case.call(rl_triton, *leaves)))

    # the backward alone: a fresh forward before each repetition, then only the grad call is timed
    graph: dict[str, torch.Tensor] = {}

    def forward() -> None:
        graph["out"] = case.call(rl_triton, *leaves)

    record("bwd", clock.measure(lambda: torch.autograd.grad(graph["out"], leaves, grad_output), forward))

    if composition:
        # the generic path: reference composition whose recurrence is the differentiable Triton scan
        def composition_forward() -> None:
            graph["out"] = case.call(reference, *leaves)

        record("comp_fwd", clock.measure(composition_forward))
        record("comp_bwd", clock.measure(lambda: torch.autograd.grad(graph["out"], leaves, grad_output),
                                         composition_forward))

    # gradients, once, against float64 gradients of the reference composition
    fused_grads = torch.autograd.grad(case.call(rl_triton, *leaves), leaves, grad_output)
    leaves64 = [t.double().requires_grad_(True) for t in detached]
    expected = torch.autograd.grad(case.call(reference, *leaves64), leaves64, grad_output.double())
    for name, got, want in zip(names, fused_grads, expected, strict=True):
        row.gradient_error[name] = relative_error(got, want)
    return row


def print_table(rows: list[Row], clock_name: str, composition: bool) -> None:
    columns = ["fwd fused", "fwd diff", "bwd", "bwd/fused", "bwd/diff"]
    if composition:
        columns += ["comp bwd", "comp/bwd"]
    print(f"\n{clock_name} time, ms (median)")
    print(f"{'case':38} {'shape':>12} " + " ".join(f"{c:>10}" for c in columns))
    for row in rows:
        clock = row.call_ms if clock_name == "call" else row.device_ms
        to_fused, to_diff = row.ratios(clock)
        cells = [clock["fwd_fused"], clock["fwd_diff"], clock["bwd"]]
        text = [f"{v:10.4f}" for v in cells] + [f"{to_fused:9.2f}x", f"{to_diff:9.2f}x"]
        if composition:
            text += [f"{clock['comp_bwd']:10.4f}", f"{clock['comp_bwd'] / clock['bwd']:9.2f}x"]
        shape = f"{row.shape[0]}x{row.shape[1]}"
        print(f"{row.case:38} {shape:>12} " + " ".join(text))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, few repetitions (runs on CPU)")
    parser.add_argument("--out", help="write the results as JSON to this file")
    parser.add_argument("--reps", type=int, help="timed repetitions per measurement (default 50; smoke 3)")
    parser.add_argument("--no-composition", action="store_true", help="skip timing the reference composition")
    args = parser.parse_args(argv)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    smoke = args.smoke or device.type != "cuda"
    if smoke and not args.smoke:
        print("no CUDA device: running the smoke test (--smoke)")
    shapes = SMOKE_SHAPES if smoke else GPU_SHAPES
    reps = args.reps or (3 if smoke else 50)
    clock = Clock(device, reps=reps, warmup=1 if smoke else 3)
    composition = not args.no_composition

    import triton  # after rl_triton, which decides whether Triton's interpreter is on

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {gpu}, torch {torch.__version__}, triton {triton.__version__}, "
          f"gamma {GAMMA}, lambda {LAMBDA}, {reps} reps", flush=True)
    began = time.perf_counter()
    rows = []
    for index, (num_rows, seq_len) in enumerate(shapes):
        data = rollout(num_rows, seq_len, device, seed=index)
        for case in cases(data):
            rows.append(measure_case(case, data, clock, composition))
            print(f"  {case.name} {num_rows}x{seq_len}: {time.perf_counter() - began:.1f} s", flush=True)

    for clock_name in ("device", "call") if clock.on_gpu else ("wall",):
        print_table(rows, clock_name, composition)
    worst = max(max(row.gradient_error.values()) for row in rows)
    print(f"\nworst relative gradient error against float64: {worst:.2e} (tolerance {GRADIENT_TOLERANCE:g})")
    backward_ratio = max(max(row.ratios(row.device_ms)) for row in rows)
    print(f"largest {'device' if clock.on_gpu else 'wall'}-time ratio backward/forward: {backward_ratio:.2f}x; "
          f"total {time.perf_counter() - began:.1f} s")

    if args.out:
        report = {
            "device": gpu,
            "torch": torch.__version__,
            "triton": triton.__version__,
            "gamma": GAMMA,
            "lambda": LAMBDA,
            "reps": reps,
            "rows": [
                {**asdict(row), "bwd_over_fwd_fused": row.ratios(row.device_ms)[0],
                 "bwd_over_fwd_diff": row.ratios(row.device_ms)[1]}
                for row in rows
            ],
        }
        with open(args.out, "w") as handle:
            json.dump(report, handle, indent=2)
        print(f"wrote {args.out}")
    return 0 if worst <= GRADIENT_TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
