"""Tile-plan sweep on a CUDA GPU: correctness against float64, then CUDA-graph device time.

    PYTHONPATH=src python benchmarks/tune.py [--estimators gae,vtrace] [--quick]

Prints one row per (estimator, shape, plan): relative error, device time, GB/s, % of copy.
Plans: ``--plans default,1x512x2,1x4096x8xs,v1`` (see plan_override). ``--memory-gbps-per-multiprocessor 25``
plans as on a GPU of that peak memory bandwidth per multiprocessor (an H100's; an H200 has 36.5), so one GPU can
time the default plans another would take.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import triton

import rl_triton
from rl_triton import _launch
from rl_triton._bench import graph_calls, hold_stream

SHAPES = [(4096, 128), (512, 1024), (16384, 512), (4096, 4096), (64, 16384), (8, 131072), (8, 2**21), (1, 2**24)]


# actions of the Retrace calls (the other calls take none)
NUM_ACTIONS = {"retrace": 18, "retrace4": 4, "retrace_time_major": 18, "retrace4_time_major": 4, "retrace_bf16_u8": 18,
               "retrace4_bf16_u8": 4}


def copy_ceiling() -> float:
    src = torch.empty(2**29 // 4 * 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    return 2 * src.numel() * 4 / (ms * 1e-3)


def rollout(num_rows: int, seq_len: int, num_actions: int, seed: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (num_rows, seq_len)

    def randn(*s):
        return torch.randn(*s, generator=g, device="cuda")

    term = torch.rand(shape, generator=g, device="cuda") < 0.05
    trunc = (torch.rand(shape, generator=g, device="cuda") < 0.05) & ~term
    boot = torch.where(trunc, randn(*shape), 0.0)
    boot[:, -1] = randn(num_rows)
    probs = torch.softmax(randn(num_rows, seq_len, num_actions), -1) if num_actions else None
    return {
        "r": randn(*shape), "v": randn(*shape), "term": term.float(), "trunc": trunc.float(), "boot": boot,
        "last": randn(num_rows), "lt": 0.3 * randn(*shape), "lb": 0.3 * randn(*shape),
        "pt": probs, "nq": randn(num_rows, seq_len, num_actions) if num_actions else None,
        "act": torch.randint(0, max(num_actions, 1), shape, generator=g, device="cuda"),
        "pb": 0.1 + 0.9 * torch.rand(shape, generator=g, device="cuda"),
        "o": torch.empty(shape, device="cuda"),
    }


def layout_variants(d: dict) -> dict:
    """Time-major float32 copies and bf16 values with uint8 flags (batch-major and time-major), for the
    layout/dtype rows."""
    tm = {k: d[k].t().contiguous() for k in ("r", "v", "term", "trunc", "boot", "lt", "lb", "pb", "act")}
    low = {k: d[k].to(torch.bfloat16) for k in ("r", "v", "lt", "lb", "last", "pb", "boot")}
    low["term"] = d["term"].to(torch.uint8)
    low["trunc"] = d["trunc"].to(torch.uint8)
    low["act"] = d["act"]
    if d["pt"] is not None:
        tm.update({k: d[k].transpose(0, 1).contiguous() for k in ("pt", "nq")})
        low.update({k: d[k].to(torch.bfloat16) for k in ("pt", "nq")})
    # bf16 values with uint8 flags stored [T, N]
    tm_low = {k: low[k].t().contiguous() for k in ("r", "v", "term", "trunc", "boot", "lt", "lb")}
    return {"tm": tm, "low": low, "tm_low": tm_low}


def calls(d: dict) -> dict:
    return {
        "add": (lambda: torch.add(d["r"], d["v"], out=d["o"] if d["r"].dtype == d["o"].dtype else None),
                ["r", "v"], 1),
        "gae": (lambda: rl_triton.compute_gae(d["r"], d["v"], d["term"], last_value=d["last"]),
                ["r", "v", "term", "last"], 1),
        "gae_time_major": (lambda: rl_triton.compute_gae(d["tm"]["r"], d["tm"]["v"], d["tm"]["term"],
                                                         last_value=d["last"], time_dim=0),
                           ["r", "v", "term", "last"], 1),
        "gae_bf16_u8": (lambda: rl_triton.compute_gae(d["low"]["r"], d["low"]["v"], d["low"]["term"],
                                                      last_value=d["low"]["last"]),
                        ["r", "v", "term", "last"], 0.5),
        "vtrace_time_major": (lambda: rl_triton.compute_vtrace(d["tm"]["lt"], d["tm"]["lb"], d["tm"]["v"],
                                                               d["tm"]["r"], d["tm"]["term"], last_value=d["last"],
                                                               time_dim=0),
                              ["lt", "lb", "v", "r", "term", "last"], 2),
        "vtrace_bf16_u8": (lambda: rl_triton.compute_vtrace(d["low"]["lt"], d["low"]["lb"], d["low"]["v"],
                                                            d["low"]["r"], d["low"]["term"],
                                                            last_value=d["low"]["last"]),
                           ["lt", "lb", "v", "r", "term", "last"], 1),
        "gae_time_major_bf16_u8": (lambda: rl_triton.compute_gae(d["tm_low"]["r"], d["tm_low"]["v"], d["tm_low"]["term"],
                                                                 last_value=d["low"]["last"], time_dim=0),
                                   ["r", "v", "term", "last"], 0.5),
        "vtrace_time_major_bf16_u8": (lambda: rl_triton.compute_vtrace(
            d["tm_low"]["lt"], d["tm_low"]["lb"], d["tm_low"]["v"], d["tm_low"]["r"], d["tm_low"]["term"],
            last_value=d["low"]["last"], time_dim=0), ["lt", "lb", "v", "r", "term", "last"], 1),
        "eligibility_time_major_bf16_u8": (lambda: rl_triton.compute_eligibility_traces(
            d["tm_low"]["r"], d["tm_low"]["term"], 0.99, 0.95, time_dim=0), ["r", "term"], 0.5),
        "gae_trunc_time_major_bf16_u8": (lambda: rl_triton.compute_gae(
            d["tm_low"]["r"], d["tm_low"]["v"], d["tm_low"]["term"], d["tm_low"]["trunc"],
            bootstrap_values=d["tm_low"]["boot"], time_dim=0), ["r", "v", "term", "trunc", "boot"], 0.5),
        "lambda_returns_time_major_bf16_u8": (lambda: rl_triton.compute_lambda_returns(
            d["tm_low"]["r"], d["tm_low"]["v"], d["tm_low"]["term"], d["tm_low"]["trunc"],
            bootstrap_values=d["tm_low"]["boot"], time_dim=0), ["r", "v", "term", "trunc", "boot"], 0.5),
        "discounted_time_major_bf16_u8": (lambda: rl_triton.compute_discounted_returns(
            d["tm_low"]["r"], d["tm_low"]["term"], time_dim=0), ["r", "term"], 0.5),
        "prefix_sum_time_major_bf16_u8": (lambda: rl_triton.compute_episodic_prefix_sum(
            d["tm_low"]["r"], d["tm_low"]["term"], time_dim=0), ["r", "term"], 0.5),
        "eligibility_bf16_u8": (lambda: rl_triton.compute_eligibility_traces(d["low"]["r"], d["low"]["term"], 0.99, 0.95),
                                ["r", "term"], 0.5),
        "prefix_sum_bf16_u8": (lambda: rl_triton.compute_episodic_prefix_sum(d["low"]["r"], d["low"]["term"]),
                               ["r", "term"], 0.5),
        "gae_trunc_bf16_u8": (lambda: rl_triton.compute_gae(d["low"]["r"], d["low"]["v"], d["low"]["term"],
                                                            d["low"]["trunc"], bootstrap_values=d["low"]["boot"]),
                              ["r", "v", "term", "trunc", "boot"], 0.5),
        "vtrace_trunc_bf16_u8": (lambda: rl_triton.compute_vtrace(
            d["low"]["lt"], d["low"]["lb"], d["low"]["v"], d["low"]["r"], d["low"]["term"], d["low"]["trunc"],
            bootstrap_values=d["low"]["boot"]), ["lt", "lb", "v", "r", "term", "trunc", "boot"], 1),
        "gae_trunc": (lambda: rl_triton.compute_gae(d["r"], d["v"], d["term"], d["trunc"], bootstrap_values=d["boot"]),
                      ["r", "v", "term", "trunc", "boot"], 1),
        "vtrace": (lambda: rl_triton.compute_vtrace(d["lt"], d["lb"], d["v"], d["r"], d["term"], last_value=d["last"]),
                   ["lt", "lb", "v", "r", "term", "last"], 2),
        "retrace": (lambda: rl_triton.compute_retrace(d["pt"], d["pb"], d["v"], d["nq"], d["act"], d["r"], d["term"],
                                                      d["trunc"], 0.99, 0.95),
                    ["pt", "pb", "v", "nq", "act", "r", "term", "trunc"], 2),
        "retrace4": (lambda: rl_triton.compute_retrace(d["pt"], d["pb"], d["v"], d["nq"], d["act"], d["r"], d["term"],
                                                       d["trunc"], 0.99, 0.95),
                     ["pt", "pb", "v", "nq", "act", "r", "term", "trunc"], 2),
        "retrace_time_major": (lambda: rl_triton.compute_retrace(
            d["tm"]["pt"], d["tm"]["pb"], d["tm"]["v"], d["tm"]["nq"], d["tm"]["act"], d["tm"]["r"], d["tm"]["term"],
            d["tm"]["trunc"], 0.99, 0.95, time_dim=0), ["pt", "pb", "v", "nq", "act", "r", "term", "trunc"], 2),
        "retrace4_time_major": (lambda: rl_triton.compute_retrace(
            d["tm"]["pt"], d["tm"]["pb"], d["tm"]["v"], d["tm"]["nq"], d["tm"]["act"], d["tm"]["r"], d["tm"]["term"],
            d["tm"]["trunc"], 0.99, 0.95, time_dim=0), ["pt", "pb", "v", "nq", "act", "r", "term", "trunc"], 2),
        "retrace_bf16_u8": (lambda: rl_triton.compute_retrace(
            d["low"]["pt"], d["low"]["pb"], d["low"]["v"], d["low"]["nq"], d["low"]["act"], d["low"]["r"], d["low"]["term"],
            d["low"]["trunc"], 0.99, 0.95), ["pt", "pb", "v", "nq", "act", "r", "term", "trunc"], 1),
        "retrace4_bf16_u8": (lambda: rl_triton.compute_retrace(
            d["low"]["pt"], d["low"]["pb"], d["low"]["v"], d["low"]["nq"], d["low"]["act"], d["low"]["r"], d["low"]["term"],
            d["low"]["trunc"], 0.99, 0.95), ["pt", "pb", "v", "nq", "act", "r", "term", "trunc"], 1),
        "lambda_returns": (lambda: rl_triton.compute_lambda_returns(d["r"], d["v"], d["term"], d["trunc"],
                                                                    bootstrap_values=d["boot"]),
                           ["r", "v", "term", "trunc", "boot"], 1),
        "discounted": (lambda: rl_triton.compute_discounted_returns(d["r"], d["term"]), ["r", "term"], 1),
        "discounted_trunc": (lambda: rl_triton.compute_discounted_returns(d["r"], d["term"], d["trunc"],
                                                                          bootstrap_values=d["boot"]),
                             ["r", "term", "trunc", "boot"], 1),
        "vtrace_trunc": (lambda: rl_triton.compute_vtrace(d["lt"], d["lb"], d["v"], d["r"], d["term"], d["trunc"],
                                                          bootstrap_values=d["boot"]),
                         ["lt", "lb", "v", "r", "term", "trunc", "boot"], 2),
        "eligibility": (lambda: rl_triton.compute_eligibility_traces(d["r"], d["term"], 0.99, 0.95),
                        ["r", "term"], 1),
        "prefix_sum": (lambda: rl_triton.compute_episodic_prefix_sum(d["r"], d["term"]), ["r", "term"], 1),
        "gae_trunc_time_major": (lambda: rl_triton.compute_gae(d["tm"]["r"], d["tm"]["v"], d["tm"]["term"], d["tm"]["trunc"],
                                                               bootstrap_values=d["tm"]["boot"], time_dim=0),
                                 ["r", "v", "term", "trunc", "boot"], 1),
        "lambda_returns_time_major": (lambda: rl_triton.compute_lambda_returns(
            d["tm"]["r"], d["tm"]["v"], d["tm"]["term"], d["tm"]["trunc"], bootstrap_values=d["tm"]["boot"], time_dim=0),
                                      ["r", "v", "term", "trunc", "boot"], 1),
        "discounted_time_major": (lambda: rl_triton.compute_discounted_returns(d["tm"]["r"], d["tm"]["term"],
                                                                               time_dim=0), ["r", "term"], 1),
        "eligibility_time_major": (lambda: rl_triton.compute_eligibility_traces(d["tm"]["r"], d["tm"]["term"], 0.99,
                                                                                0.95, time_dim=0), ["r", "term"], 1),
        "prefix_sum_time_major": (lambda: rl_triton.compute_episodic_prefix_sum(d["tm"]["r"], d["tm"]["term"],
                                                                                time_dim=0), ["r", "term"], 1),
    }


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def rel_err(out, ref) -> float:
    return max(((o.double() - r).norm() / r.norm().clamp_min(1e-300)).item() for o, r in zip(as_tuple(out), ref))


def captured_graph(calls: list) -> torch.cuda.CUDAGraph:
    """One CUDA graph of ``calls``, each run twice before (once outside the capture's stream)."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for call in calls:
            call()
        with torch.cuda.graph(graph, stream=stream):
            for call in calls:
                call()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    return graph


def replay_ms(graph: torch.cuda.CUDAGraph, replays: int, warmup: int = 10, warmup_seconds: float = 0.2) -> float:
    """Median time of one replay of ``graph`` over ``replays`` replays (CUDA events), after at least
    ``warmup`` untimed ones and ``warmup_seconds`` of them. Without them the first plan timed at a shape
    read up to 7 points of the copy ceiling below the same launch timed next (H200); with 10 replays
    still up to 7 (Retrace with 18 actions at 512x1024, whose first plan compiled for 0.6 s before
    its timing: 62.3% against 67.8-69.9% for the same kernel timed later,
    benchmarks/results/h200-2026-12-03-run33-retrace18-ab.txt)."""
    began = time.perf_counter()
    done = 0
    while done < warmup or time.perf_counter() - began < warmup_seconds:
        graph.replay()
        done += 1
        if done % 8 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        hold_stream()
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def graph_time_ms(fn, sets: list) -> float:
    """Median device time of one call, from CUDA-graph replays of calls over rotating input sets (as
    ``python -m rl_triton bench`` times them: ``_bench.graph_calls``)."""
    calls = graph_calls(sets)
    return replay_ms(captured_graph(calls), 15) / len(calls)


def plan_override(plan: str) -> dict:
    """``BRxBTxWARPS[xSTAGES]`` then flags: ``s``/``n`` force split on/off, ``wN`` look-back window,
    ``vN`` steps per vector load (1 turns vector loads off), ``rN`` at most N registers per
    thread (``r0``: no cap), ``p0``/``p1`` Retrace's programs that walk several chunks do not / do load
    the next one ahead (the other kernels always do), ``o1``/``o2``/``of`` Retrace in one pass / two passes / the fused kernel, ``mN`` a split walks segments with about N programs per multiprocessor (``m0``: one
    chunk per program), ``fN`` the first of Retrace's two passes reads flat blocks of N values (``f0``:
    ``[steps, actions]`` tiles), ``gN`` strided time-major tiles of N neighbouring rows per thread (1, 2: row pairs, or 4; ``q1``/``q0``
    are ``g2``/``g1``), ``d1``/``d0`` grouped programs that walk whole rows recur from each chunk's carry / build
    every step's map (``TilePlan.direct``), ``u1``/``u0`` tiles leave out / keep in-range masks where the rows and
    steps fill whole tiles (``TilePlan.whole_tiles``), ``bN`` walked segments scan the N steps before them first
    (``b0``: they do not; ``TilePlan.look_behind``)."""
    kw: dict = {}
    numbers = ["block_rows", "block_time", "num_warps", "num_stages"]
    for token in plan.split("x"):
        if token.isdigit():
            kw[numbers.pop(0)] = int(token)
        elif token in ("s", "n"):
            kw["split"] = token == "s"
        elif token.startswith("w"):
            kw["window"] = int(token[1:])
        elif token.startswith("v"):
            kw["vec"] = int(token[1:])
        elif token.startswith("r"):
            kw["max_registers"] = int(token[1:])
        elif token in ("p0", "p1"):
            kw["prefetch"] = token == "p1"
        elif token in ("o1", "o2", "of"):
            kw["retrace_kernels"] = {"o1": "one-pass", "o2": "two-pass", "of": "fused"}[token]
        elif token.startswith("m"):
            kw["walk_programs"] = int(token[1:])
        elif token.startswith("f"):
            kw["retrace_flat_values"] = int(token[1:])
        elif token in ("d0", "d1"):
            kw["direct"] = token == "d1"
        elif token in ("u0", "u1"):
            kw["whole_tiles"] = token == "u1"
        elif token in ("q0", "q1"):
            kw["rows_per_thread"] = 2 if token == "q1" else 1
        elif token.startswith("g"):
            kw["rows_per_thread"] = int(token[1:])
        elif token.startswith("b"):
            kw["look_behind"] = int(token[1:])
    return kw


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--estimators", default="gae")
    parser.add_argument("--shapes", default="all")
    parser.add_argument("--plans", default="default")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--sets", type=int, default=0,
                        help="input sets rotated through one CUDA graph (0: up to 4 within 256 MB of inputs); "
                             "with one set, a replay's device time includes the graph's launch and the L2 cache "
                             "may still hold what the previous replay read")
    parser.add_argument("--memory-gbps-per-multiprocessor", type=float, default=None,
                        help="plan as on a GPU of this peak memory bandwidth per multiprocessor (GB/s; an H100: 25, "
                             "an H200: 36.5), whose plans may differ; default: this GPU's")
    args = parser.parse_args()
    memory = args.memory_gbps_per_multiprocessor
    if memory is not None:
        _launch._dram_gbps_per_multiprocessor = lambda device: memory
        _launch._default_plan.cache_clear()
    memory = _launch._dram_gbps_per_multiprocessor(torch.device("cuda", torch.cuda.current_device()))
    ceiling = copy_ceiling()
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}, plans for "
          f"{memory:.1f} GB/s of memory bandwidth per multiprocessor")
    print(f"copy ceiling {ceiling / 1e9:.0f} GB/s")
    plans = [None] + [p for p in args.plans.split(",") if p != "default"]
    shapes = SHAPES if args.shapes == "all" else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    rows = []
    for name in args.estimators.split(","):
        for num_rows, seq_len in shapes:
            num_actions = NUM_ACTIONS.get(name, 0)
            elements = num_rows * seq_len
            if num_actions and elements * num_actions > 2**29:
                continue
            n_sets = args.sets or max(1, min(4, (256 << 20) // (elements * 4 * 6)))
            data = [rollout(num_rows, seq_len, num_actions, seed) for seed in range(n_sets)]
            if name.endswith(("time_major", "bf16_u8")):
                for d in data:
                    d.update(layout_variants(d))
            fn, keys, n_out = calls(data[0])[name]
            source = data[0].get("low", data[0]) if name.endswith("bf16_u8") else data[0]
            bytes_moved = sum(source[k].numel() * source[k].element_size() for k in keys) + n_out * elements * 4
            double = {k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
                      for k, v in data[0].items() if not isinstance(v, dict)}
            if name.endswith(("time_major", "bf16_u8")):
                double.update(layout_variants(double))
                for variant in ("low", "tm_low"):
                    double[variant] = {k: (x.double() if x.is_floating_point() else x)
                                       for k, x in double[variant].items()}
            ref = tuple(o.double() for o in as_tuple(calls(double)[name][0]()))
            for plan in plans:
                kw = {} if plan is None else plan_override(plan)
                label = "default" if plan is None else plan
                try:
                    with _launch.tile_override(**kw):
                        t0 = time.perf_counter()
                        out = fn()
                        torch.cuda.synchronize()
                        first = time.perf_counter() - t0
                        err = rel_err(out, ref)
                        ms = graph_time_ms(None, [calls(d)[name][0] for d in data]) if err < (2e-2 if name.endswith("bf16_u8") else 1e-4) else float("nan")
                except Exception as exc:  # noqa: BLE001 - report and continue the sweep
                    print(f"{name:15s} {num_rows}x{seq_len} {label}: FAILED {type(exc).__name__}: {exc}"[:400])
                    continue
                gbs = bytes_moved / (ms * 1e-3) / 1e9
                row = {"estimator": name, "rows": num_rows, "T": seq_len, "plan": label, "err": err,
                       "first_s": first, "ms": ms, "gbs": gbs, "pct": 100 * gbs * 1e9 / ceiling}
                rows.append(row)
                print(f"{name:15s} {num_rows:>6}x{seq_len:<9} {label:12s} err {err:.1e} first {first:6.2f}s "
                      f"{ms * 1e3:9.1f} us {gbs:7.0f} GB/s {row['pct']:5.1f}%", flush=True)
    with open(os.path.join(args.out, "tune.json"), "w") as f:
        json.dump({"ceiling": ceiling, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
