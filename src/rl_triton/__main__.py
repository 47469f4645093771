"""``python -m rl_triton``: the demonstration; ``python -m rl_triton bench``: the benchmark."""

from __future__ import annotations

import argparse
import sys

from rl_triton._bench import bench_description, build_parser, run_bench
from rl_triton._demo import run_demo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rl_triton",
        description="Without a command: call every estimator on a realistic rollout on the best device present, "
        "time each call and check it against the float64 reference.",
    )
    commands = parser.add_subparsers(dest="command")
    demo_help = "the demonstration (the default)"
    bench_help = "speed against the memory roofline and the usual baselines"
    demo = commands.add_parser("demo", help=demo_help, description=parser.description)
    bench = build_parser(commands.add_parser("bench", help=bench_help, description=bench_description()))
    arguments, unknown = parser.parse_known_args(argv)
    if unknown:
        # named by the command they were given to, with its usage
        (bench if arguments.command == "bench" else demo if arguments.command else parser).error(
            f"unrecognized arguments: {' '.join(unknown)}")
    if arguments.command == "bench":
        return run_bench(arguments)
    return run_demo()


if __name__ == "__main__":
    sys.exit(main())
