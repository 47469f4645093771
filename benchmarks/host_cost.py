"""Host (Python) cost per call of every public estimator, against one PyTorch elementwise op.

On CPU (the default) the Triton path is forced and the kernel launchers are replaced by no-ops,
so the numbers are the wrapper's own Python: validation, layout, output allocation, dispatch.
With ``--device cuda`` nothing is stubbed and the numbers include Triton's launch path; the GPU
is synchronised only around each timed batch, so for small problems they are host-bound.
The cases take turns in rounds; ``/ add`` is the median over rounds of a case's time per call over
one ``torch.add``'s in the same round (on CPU the add of 1-element tensors), with its quartiles.
On CUDA, ``GPU`` is a call's own GPU time (calls queued behind a spin kernel, timed back to back); a
case whose GPU time is 0.8x its time per call or more is marked ``GPU-paced``: the host waited for the
GPU, so its figure is not host cost (on a fast host, Retrace at 4096x128 with 6 actions is; 64x128 reads its host cost).

    python benchmarks/host_cost.py                      # CPU, launchers stubbed
    python benchmarks/host_cost.py --device cuda        # real launches, repeated calls replayed
    python benchmarks/host_cost.py --device cuda --no-replay   # real launches, every call in full
    python benchmarks/host_cost.py --save before.json   # keep the numbers ...
    python benchmarks/host_cost.py --compare before.json  # ... and print them next to new ones
    python benchmarks/host_cost.py --device cuda --parts  # where a repeated call's time goes
    python benchmarks/host_cost.py --device cuda --triton-launcher  # replays call Triton's launch function

``--parts`` adds, for each case that repeats a recorded call, that call's generated replay function
timed alone (no decorator), with its kernel launches stubbed, with its output allocations stubbed (it
gets the tensors one earlier replay allocated), with both, and its tensor matcher alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import torch

if importlib.util.find_spec("rl_triton") is None:
    # a checkout measures its own sources, installed or not
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import rl_triton
from rl_triton import _dispatch, _launch, _library, _packed_launch, _replay

_LAUNCHERS = ("gae", "vtrace", "retrace", "returns", "episodic_scan")
# every case's ratio is to one of these, timed in the same round: on CPU the first is arithmetic,
# not host cost
YARDSTICK = {"cuda": "torch.add (same tensors)", "cpu": "torch.add (1-element tensors)"}


def _stub_triton_path() -> None:
    """Force the Triton path on CPU tensors and make every launch a no-op."""

    def always_triton(device: torch.device) -> bool:
        return True

    # the dispatch decision may be imported by name into other modules: patch every binding
    for module in (_dispatch, _library):
        if hasattr(module, "use_triton"):
            module.use_triton = always_triton
    for name in _LAUNCHERS:
        setattr(_launch, name, lambda *args, **kwargs: None)


def _cases(device: str, num_envs: int, seq_len: int, num_actions: int,
           gamma: float = 0.99) -> dict[str, Callable[[], object]]:
    """The timed calls, by name (``gamma``: the estimators' discount; calls of another gamma are recorded
    as replays of their own)."""
    generator = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(device)

    rewards, values, log_mu, log_pi = (randn(num_envs, seq_len) for _ in range(4))
    terminateds = (torch.rand(num_envs, seq_len, generator=generator) < 0.01).to(device)
    truncateds = torch.zeros(num_envs, seq_len, dtype=torch.bool, device=device)
    bootstrap_values = torch.zeros(num_envs, seq_len, device=device)
    last_value = randn(num_envs)
    probs = torch.softmax(randn(num_envs, seq_len, num_actions), -1)
    next_q = randn(num_envs, seq_len, num_actions)
    actions = torch.randint(0, num_actions, (num_envs, seq_len), generator=generator).to(device)
    behaviour = probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    q_values = randn(num_envs, seq_len)
    rewards_time_major, values_time_major = randn(seq_len, num_envs), randn(seq_len, num_envs)
    terminateds_time_major = terminateds.t().contiguous()
    tiny_a, tiny_b = randn(1), randn(1)
    return {
        # on CPU the first yardstick is dominated by the arithmetic itself; the second is host cost only
        "torch.add (same tensors)": lambda: torch.add(rewards, values),
        "torch.add (1-element tensors)": lambda: torch.add(tiny_a, tiny_b),
        "compute_gae": lambda: rl_triton.compute_gae(
            rewards, values, terminateds, gamma=gamma, lambda_=0.95, last_value=last_value
        ),
        "compute_gae (truncateds, bootstrap)": lambda: rl_triton.compute_gae(
            rewards, values, terminateds, truncateds, gamma, 0.95, bootstrap_values
        ),
        "compute_gae (time_dim=0)": lambda: rl_triton.compute_gae(
            rewards_time_major, values_time_major, terminateds_time_major, time_dim=0
        ),
        "compute_vtrace": lambda: rl_triton.compute_vtrace(
            log_pi, log_mu, values, rewards, terminateds, gamma=gamma, last_value=last_value
        ),
        "compute_retrace": lambda: rl_triton.compute_retrace(
            probs, behaviour, q_values, next_q, actions, rewards, terminateds, truncateds, gamma
        ),
        "compute_lambda_returns": lambda: rl_triton.compute_lambda_returns(
            rewards, values, terminateds, gamma=gamma, lambda_=0.95
        ),
        "compute_discounted_returns": lambda: rl_triton.compute_discounted_returns(rewards, terminateds, gamma=gamma),
        "compute_eligibility_traces": lambda: rl_triton.compute_eligibility_traces(
            rewards, terminateds, gamma, 0.95
        ),
        "compute_episodic_prefix_sum": lambda: rl_triton.compute_episodic_prefix_sum(rewards, terminateds),
    }


def _without(replay: Callable, names: dict) -> Callable:
    """``replay`` with some of its global names bound to other objects."""
    return types.FunctionType(replay.__code__, {**replay.__globals__, **names})


def _nothing(*args: object, **kwargs: object) -> None:
    return None


def _recording_allocators(replay: Callable) -> tuple[dict[str, Callable], list]:
    """Allocators for ``replay`` that keep what they allocate (in the list returned with them)."""
    made: list = []

    def recording(allocate: Callable) -> Callable:
        def allocate_and_keep(*args: object, **kwargs: object) -> object:
            made.append(allocate(*args, **kwargs))
            return made[-1]

        return allocate_and_keep

    names = [name for name in replay.allocators if name in replay.__globals__]
    return {name: recording(replay.__globals__[name]) for name in names}, made


def _reused_allocators(names: dict, made: list) -> dict[str, Callable]:
    """Allocators that hand out ``made`` again, in turn, instead of allocating."""
    reused = itertools.cycle(made)

    def allocate(*args: object, **kwargs: object) -> object:
        return next(reused)

    return dict.fromkeys(names, allocate)


def _replay_parts(cases: dict[str, Callable[[], object]]) -> dict[str, Callable[[], object]]:
    """For each case that repeats a recorded call (CUDA): its replay function alone, without its launches,
    without its allocations, without either, and its tensor matcher alone (``--parts``)."""
    for case in cases.values():
        case()
        case()
    # which replay each case runs, with which arguments: every candidate list watched for one call
    watched, called = [], {}
    # each replayable estimator keeps (its replays, its candidate lists, its failed recordings) there
    for candidates in _replay._all_replays[1::3]:
        for replays in candidates.values():
            for index, replay in enumerate(replays):
                def watch(args: tuple, kwargs: dict, replay: Callable = replay) -> object:
                    result = replay(args, kwargs)
                    if result is not None:
                        called[replay] = (args, kwargs)
                    return result

                watched.append((replays, index, replay))
                replays[index] = watch
    found = {}
    try:
        for name, case in cases.items():
            called.clear()
            case()
            if len(called) == 1:
                found[name] = next(iter(called.items()))
    finally:
        for replays, index, replay in watched:
            replays[index] = replay

    parts: dict[str, Callable[[], object]] = {}
    for name, (replay, (args, kwargs)) in found.items():
        # the allocations of one replay, handed out again in the order the replay makes them
        recorders, made = _recording_allocators(replay)
        _without(replay, recorders)(args, kwargs)
        allocations = _reused_allocators(recorders, made)
        launches = dict.fromkeys(replay.launchers, _nothing)
        tensors = [value for value in (*args, *kwargs.values()) if isinstance(value, torch.Tensor)]
        for label, replay_part in (("replay alone", replay), ("replay, no launches", _without(replay, launches)),
                                   ("replay, no allocations", _without(replay, allocations)),
                                   ("replay, neither", _without(replay, {**launches, **allocations}))):
            parts[f"{name}: {label}"] = lambda part=replay_part, args=args, kwargs=kwargs: part(args, kwargs)
        parts[f"{name}: tensor matcher"] = lambda check=replay.matcher.check, tensors=tensors: check(*tensors)
    return parts


def _us_per_call_interleaved(
    cases: dict[str, Callable[[], object]], calls: int, repeats: int, cuda: bool, clock: Callable[[], float]
) -> dict[str, list[float]]:
    """Per case, the mean time per call of each of ``repeats`` timed batches.

    The cases take turns: every round times one batch of each, in order. The host's speed drifts
    by up to 1.5x over a minute on a shared machine, so cases timed one after another compare
    different moments; in rounds, each case's batches spread over the whole run, and a case's
    batch and the yardstick's of the same round are seconds apart.
    """
    for fn in cases.values():
        for _ in range(max(calls // 10, 10)):
            fn()
    per_call: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            if cuda:
                torch.cuda.synchronize()
            start = clock()
            for _ in range(calls):
                fn()
            if cuda:
                torch.cuda.synchronize()
            per_call[name].append((clock() - start) / calls * 1e6)
    return per_call


# GPU cycles a microsecond of host time is given when the stream is held (over 2 GHz, so the hold outlasts the queueing)
_HOLD_CYCLES_PER_US = 4000
# a case whose GPU time per call is at least this share of its wall time per call is paced by the GPU
_GPU_PACED = 0.8


def _device_us_per_call(fn: Callable[[], object], calls: int, wall_us: float) -> float:
    """GPU time per call of ``fn`` (CUDA): ``calls`` calls queued behind a spin kernel long enough for the host to
    queue them all, timed by events around them, so the GPU runs them back to back and never waits for the host."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    torch.cuda._sleep(int(_HOLD_CYCLES_PER_US * wall_us * calls) + 100_000)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--num-actions", type=int, default=6)
    parser.add_argument("--calls", type=int, default=200, help="calls per timed batch")
    parser.add_argument("--repeats", type=int, default=25, help="timed batches; the median is reported")
    parser.add_argument(
        "--clock",
        choices=("thread", "wall"),
        help="thread: CPU time of this thread (default on CPU: steady while other processes load the machine); "
        "wall: elapsed time (default on CUDA, where the host may also wait for the GPU)",
    )
    parser.add_argument("--no-replay", action="store_true",
                        help="every call takes the full path (CUDA calls are otherwise replayed: rl_triton._replay)")
    parser.add_argument("--triton-launcher", action="store_true",
                        help="replays call Triton's C launch function instead of launching packed parameters "
                        "(rl_triton._packed_launch)")
    parser.add_argument("--parts", action="store_true",
                        help="also time each repeated call's replay without its launches and/or allocations (CUDA)")
    parser.add_argument("--save", help="write the results to this JSON file")
    parser.add_argument("--compare", help="JSON file of earlier results to print alongside")
    args = parser.parse_args()

    cuda = args.device == "cuda"
    if args.no_replay:
        _replay.MAX_SIGNATURES = 0
    if args.triton_launcher:
        _packed_launch.ENABLED = False
    if not cuda:
        _stub_triton_path()
        # keep the yardstick's arithmetic on one core so it does not disturb the next case
        torch.set_num_threads(1)
    baseline = {}
    if args.compare:
        with open(args.compare) as f:
            baseline = json.load(f)

    clock_name = args.clock or ("wall" if cuda else "thread")
    clock = time.perf_counter if clock_name == "wall" else time.thread_time
    results = {}
    cases = _cases(args.device, args.num_envs, args.seq_len, args.num_actions)
    if args.parts:
        if not cuda or args.no_replay:
            parser.error("--parts times replays: it needs --device cuda, without --no-replay")
        cases.update(_replay_parts(cases))
    header = f"{'call':40s} {'median':>8s} {'min':>8s} {'/ add':>8s} {'quartiles':>9s}"
    if cuda:
        header += f" {'GPU':>6s}"
    if baseline:
        header += f" | {'before median':>13s} {'min':>8s} {'ratio(min)':>10s}"
    stubbed = "launchers stubbed" if not cuda else "real launches" + (", no replays" if args.no_replay else "") + (
        ", Triton's launch function" if args.triton_launcher else "")
    print(f"{args.device}, {args.num_envs}x{args.seq_len}, {stubbed}, torch {torch.__version__}; µs per call ({clock_name} clock)")
    print(header)
    timings = _us_per_call_interleaved(cases, args.calls, args.repeats, cuda, clock)
    yardstick = timings[YARDSTICK[args.device]]
    for name, per_call in timings.items():
        median, minimum = results[name] = statistics.median(per_call), min(per_call)
        # the ratio of each round's batch to the yardstick's batch of the same round
        ratios = sorted(batch / add for batch, add in zip(per_call, yardstick, strict=True))
        low, high = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
        line = f"{name:40s} {median:8.1f} {minimum:8.1f} {statistics.median(ratios):7.2f}x {low:5.2f}-{high:4.2f}"
        if cuda:
            # where the GPU's own time is most of a call's, the host waits for it: the time is not host cost
            gpu = _device_us_per_call(cases[name], min(args.calls, 50), median)
            line += f" {gpu:6.1f}" + (" GPU-paced" if gpu >= _GPU_PACED * median else "")
        if name in baseline:
            before_median, before_min = baseline[name]
            line += f" | {before_median:13.1f} {before_min:8.1f} {before_min / minimum:9.2f}x"
        print(line, flush=True)
    if args.save:
        with open(args.save, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
