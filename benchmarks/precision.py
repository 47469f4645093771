"""Accuracy of half-precision inputs: relative error of every estimator against float64.

    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/precision.py   # the Triton kernels, on CPU
    PYTHONPATH=src python benchmarks/precision.py                      # CUDA if present, else reference

For bf16 and float16 values (flags stay bool), at T = 128 and 4096, two errors per estimator:
against the float64 loop on the float32 data before rounding to half precision (what a user
loses by storing the rollout in half precision) and on the rounded data (what the computation
adds), each with half-precision outputs (the default) and with ``out_dtype=torch.float32``.
"""

from __future__ import annotations

import torch

import rl_triton
from rl_triton import reference

ROWS = 8
ACTIONS = 6


def rollout(seq_len: int, device: str) -> dict:
    g = torch.Generator().manual_seed(seq_len)
    shape = (ROWS, seq_len)
    terminated = torch.rand(shape, generator=g) < 0.05
    truncated = (torch.rand(shape, generator=g) < 0.05) & ~terminated
    bootstrap = torch.randn(shape, generator=g) * truncated
    bootstrap[:, -1] = torch.randn(ROWS, generator=g)
    data = {
        "rewards": torch.randn(shape, generator=g), "values": torch.randn(shape, generator=g),
        "log_pi_target": 0.3 * torch.randn(shape, generator=g), "log_pi_behavior": 0.3 * torch.randn(shape, generator=g),
        "bootstrap_values": bootstrap, "probs_target": torch.softmax(torch.randn(*shape, ACTIONS, generator=g), -1),
        "next_q": torch.randn(*shape, ACTIONS, generator=g), "probs_behavior": 0.2 + 0.8 * torch.rand(shape, generator=g),
        "actions": torch.randint(0, ACTIONS, shape, generator=g), "terminateds": terminated, "truncateds": truncated,
    }
    return {k: v.to(device) for k, v in data.items()}


def estimators(module, d: dict, **kw) -> dict:
    r, v, term, trunc, boot = d["rewards"], d["values"], d["terminateds"], d["truncateds"], d["bootstrap_values"]
    return {
        "gae": lambda: module.compute_gae(r, v, term, trunc, 0.99, 0.95, boot, **kw),
        "vtrace": lambda: module.compute_vtrace(d["log_pi_target"], d["log_pi_behavior"], v, r, term, trunc, 0.99,
                                                bootstrap_values=boot, **kw),
        "retrace": lambda: module.compute_retrace(d["probs_target"], d["probs_behavior"], v, d["next_q"], d["actions"],
                                                  r, term, trunc, 0.99, 0.95, **kw),
        "lambda_returns": lambda: module.compute_lambda_returns(r, v, term, trunc, 0.99, 0.95, boot, **kw),
        "discounted_returns": lambda: module.compute_discounted_returns(r, term, trunc, 0.99, boot, **kw),
        "eligibility_traces": lambda: module.compute_eligibility_traces(r, term, 0.99, 0.95, **kw),
        "episodic_prefix_sum": lambda: module.compute_episodic_prefix_sum(r, term, **kw),
    }


def cast(d: dict, dtype: torch.dtype) -> dict:
    return {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in d.items()}


def rel_err(out, ref) -> float:
    outs, refs = (out, ref) if isinstance(out, tuple) else ((out,), (ref,))
    return max(((o.double() - r).norm() / r.norm()).item() for o, r in zip(outs, refs))


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"device {device}, torch {torch.__version__}, {ROWS} rows, {ACTIONS} actions for Retrace\n")
    print("| estimator | inputs | T | vs float64 of the float32 data (half / float32 outputs) "
          "| vs float64 of the rounded data (half / float32 outputs) |")
    print("|---|---|---|---|---|")
    for name in estimators(rl_triton, rollout(2, device)):
        for dtype in (torch.bfloat16, torch.float16):
            for seq_len in (128, 4096):
                data = rollout(seq_len, device)
                exact = estimators(reference, cast(data, torch.float64))[name]()
                rounded = estimators(reference, cast(cast(data, dtype), torch.float64))[name]()
                low = cast(data, dtype)
                half_out = estimators(rl_triton, low)[name]()
                f32_out = estimators(rl_triton, low, out_dtype=torch.float32)[name]()
                print(f"| {name} | {str(dtype).removeprefix('torch.')} | {seq_len} "
                      f"| {rel_err(half_out, exact):.1e} / {rel_err(f32_out, exact):.1e} "
                      f"| {rel_err(half_out, rounded):.1e} / {rel_err(f32_out, rounded):.1e} |", flush=True)


if __name__ == "__main__":
    main()
