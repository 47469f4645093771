"""The first of Retrace's two passes alone on a CUDA GPU: flat blocks against ``[steps, actions]`` tiles.

    PYTHONPATH=src python benchmarks/retrace_first_pass.py [--shapes 8x2097152x18,4096x4096x18] [--rounds 7]

For each ``rows x steps x actions`` shape, every variant (the tiled kernel; flat blocks of 512 values in
one warp, 1024 in two warps and 1024 in one warp) is checked against float64 sums, captured in a CUDA
graph, then timed in interleaved rounds (5 replays each, median) so that the host's and the GPU's drift
falls on every variant alike. Prints the median and range over rounds of the share of the copy ceiling,
counting the pass's own bytes per step: both per-action tensors, the behaviour probability, the int64
action and the two outputs.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import triton
from tune import captured_graph, copy_ceiling, replay_ms

from rl_triton import _launch

# (label, values per block: 0 for the tiles, values per warp)
VARIANTS = (("tiles", 0, 512), ("flat512w1", 512, 512), ("flat1024w2", 1024, 512), ("flat1024w1", 1024, 1024))


def first_pass(inputs: tuple, flat_values: int, warp_values: int, lanes: int, passes: int):
    probs, next_q, actions, behavior, expected, ratios = inputs

    def call() -> None:
        _launch._RETRACE_FLAT_WARP_VALUES = warp_values
        with _launch.tile_override(retrace_flat_values=flat_values):
            _launch._retrace_actions(expected, ratios, probs, behavior, next_q, actions, torch.float32, lanes, passes,
                                     False)

    return call


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="8x2097152x18,4096x4096x18,64x16384x18,8x131072x18,8x2097152x5,"
                                            "8x2097152x12,8x2097152x4")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    ceiling = copy_ceiling()
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} "
          f"copy ceiling {ceiling / 1e9:.0f} GB/s")
    generator = torch.Generator(device="cuda").manual_seed(0)
    for shape in args.shapes.split(","):
        rows, steps, actions = (int(v) for v in shape.split("x"))
        # input sets that together exceed the 60 MB L2 cache several times over
        sets = []
        for _ in range(max(1, min(3, (512 << 20) // (rows * steps * actions * 8)))):
            probs = torch.softmax(torch.randn(rows, steps, actions, device="cuda", generator=generator), -1)
            next_q = torch.randn(rows, steps, actions, device="cuda", generator=generator)
            taken = torch.randint(0, actions, (rows, steps), device="cuda", generator=generator)
            behavior = 0.1 + torch.rand(rows, steps, device="cuda", generator=generator)
            sets.append((probs, next_q, taken, behavior, torch.empty(rows, steps, device="cuda"),
                         torch.empty(rows, steps, device="cuda")))
        moved = rows * steps * (2 * actions * 4 + 4 + 8 + 2 * 4)
        lanes = min(triton.next_power_of_2(actions), _launch._RETRACE_ACTIONS_LANES)
        passes = min(triton.next_power_of_2(triton.cdiv(actions, lanes)), max(1, 32 // lanes))
        probs, next_q, taken, behavior, expected, ratios = sets[0]
        want_expected = (probs.double() * next_q.double()).sum(-1)
        want_ratios = probs.double().gather(-1, taken.unsqueeze(-1)).squeeze(-1) / behavior.double()
        graphs = {}
        for label, flat_values, warp_values in VARIANTS:
            calls = [first_pass(inputs, flat_values, warp_values, lanes, passes) for inputs in sets]
            calls[0]()
            for got, want in ((expected, want_expected), (ratios, want_ratios)):
                error = ((got.double() - want).abs().max() / want.abs().max()).item()
                if not error < 1e-5:
                    raise SystemExit(f"{shape} {label}: relative error {error:.1e} against float64")
            graphs[label] = (captured_graph(calls), len(calls))
        shares: dict[str, list[float]] = {label: [] for label in graphs}
        for _ in range(args.rounds):
            for label, (graph, count) in graphs.items():
                shares[label].append(100 * moved / (replay_ms(graph, 5, warmup=0) / count * 1e-3) / ceiling)
        print(f"{shape}: " + "  ".join(f"{label} {statistics.median(v):5.1f} ({min(v):5.1f}-{max(v):5.1f})"
                                       for label, v in shares.items()), flush=True)
        del graphs, sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
