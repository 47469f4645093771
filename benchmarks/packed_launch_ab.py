"""Host cost of repeated calls whose replays launch packed parameters against Triton's C launch function.

    PYTHONPATH=src python benchmarks/packed_launch_ab.py [--num-envs 4096] [--seq-len 128]

In one process, every case is recorded twice with different gammas (a recording belongs to one call
signature): once with packed launches off (``rl_triton._packed_launch.ENABLED``), once on. Each
packed replay is first checked against the full path (the same call under ``use_backend("triton")``,
which is never replayed), bit for bit. The cases then take turns in rounds with one allocating
``torch.add`` of the same tensors (``benchmarks/host_cost.py``'s rounds); ``/ add`` is the median over
rounds of a case's time per call over the add's in the same round. Needs a GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

if importlib.util.find_spec("rl_triton") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import host_cost

import rl_triton
from rl_triton import _packed_launch, _replay
from rl_triton._dispatch import use_backend


def _calls(num_envs: int, seq_len: int, num_actions: int, gamma: float) -> dict[str, Callable[[], object]]:
    generator = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).cuda()

    rewards, values, log_mu, log_pi, q_values = (randn(num_envs, seq_len) for _ in range(5))
    terminateds = (torch.rand(num_envs, seq_len, generator=generator) < 0.01).cuda()
    truncateds = torch.zeros(num_envs, seq_len, dtype=torch.bool, device="cuda")
    last_value = randn(num_envs)
    probs = torch.softmax(randn(num_envs, seq_len, num_actions), -1)
    next_q = randn(num_envs, seq_len, num_actions)
    actions = torch.randint(0, num_actions, (num_envs, seq_len), generator=generator).cuda()
    behaviour = probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    return {
        "torch.add": lambda: torch.add(rewards, values),
        "gae": lambda: rl_triton.compute_gae(rewards, values, terminateds, gamma=gamma, lambda_=0.95,
                                             last_value=last_value),
        "vtrace": lambda: rl_triton.compute_vtrace(log_pi, log_mu, values, rewards, terminateds, gamma=gamma,
                                                   last_value=last_value),
        "retrace": lambda: rl_triton.compute_retrace(probs, behaviour, q_values, next_q, actions, rewards,
                                                     terminateds, truncateds, gamma),
        "lambda-returns": lambda: rl_triton.compute_lambda_returns(rewards, values, terminateds, gamma=gamma,
                                                                   lambda_=0.95),
        "eligibility-traces": lambda: rl_triton.compute_eligibility_traces(rewards, terminateds, gamma, 0.95),
    }


def _as_tuple(result: object) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--num-actions", type=int, default=6)
    parser.add_argument("--calls", type=int, default=300, help="calls per timed batch")
    parser.add_argument("--repeats", type=int, default=31, help="rounds; the median is reported")
    args = parser.parse_args()
    if _packed_launch.module() is None:
        sys.exit("the packed-launch module could not be built")
    shape = (args.num_envs, args.seq_len, args.num_actions)
    cases: dict[str, Callable[[], object]] = {}
    for packed, gamma in ((False, 0.99), (True, 0.98)):
        _packed_launch.ENABLED = packed
        calls = _calls(*shape, gamma)
        cases.setdefault("torch.add", calls.pop("torch.add"))
        for name, call in calls.items():
            for _ in range(3):  # compiled, recorded, replayed
                call()
            cases[f"{name} ({'packed' if packed else 'Triton launcher'})"] = call
            if packed:
                with use_backend("triton"):
                    expected = _as_tuple(call())
                same = all(torch.equal(got, want) for got, want in zip(_as_tuple(call()), expected, strict=True))
                print(f"{name}: packed replay equals the full path bit for bit: {same}")
    replays = [replay for table in _replay._all_replays[0::3] for replay in table.values()]
    packed_launches = sum(replay.__globals__[name] is _packed_launch.module().launch
                          for replay in replays for name in replay.launchers)
    print(f"{len(replays)} replays recorded, {packed_launches} packed launches among their launches")
    timings = host_cost._us_per_call_interleaved(cases, args.calls, args.repeats, True, time.perf_counter)
    yardstick = timings["torch.add"]
    print(f"{args.num_envs}x{args.seq_len}, torch {torch.__version__}; µs per call (wall clock), "
          f"{args.repeats} rounds of {args.calls} calls")
    print(f"{'call':34s} {'median':>8s} {'/ add':>7s}")
    for name, per_call in timings.items():
        ratio = statistics.median(batch / add for batch, add in zip(per_call, yardstick, strict=True))
        print(f"{name:34s} {statistics.median(per_call):8.2f} {ratio:6.2f}x")


if __name__ == "__main__":
    main()
