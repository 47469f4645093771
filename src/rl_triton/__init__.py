"""rl-triton: exact, fast credit assignment for reinforcement learning.

GAE, V-trace, Retrace(lambda), lambda-returns, discounted returns, eligibility traces and
episodic prefix sums over ``[num_envs, seq_len]`` rollouts, as chunked associative scans in
Triton on CUDA and as plain PyTorch loops on CPU. Boundary conventions: docs/conventions.md.
"""

from rl_triton._checks import InputError, InputTypeError
from rl_triton.ops.gae import compute_gae
from rl_triton.ops.prefix_sum import compute_episodic_prefix_sum
from rl_triton.ops.retrace import compute_retrace
from rl_triton.ops.returns import compute_discounted_returns, compute_eligibility_traces, compute_lambda_returns
from rl_triton.ops.vtrace import compute_vtrace

__version__ = "0.1.0"

__all__ = [
    "InputError",
    "InputTypeError",
    "compute_discounted_returns",
    "compute_eligibility_traces",
    "compute_episodic_prefix_sum",
    "compute_gae",
    "compute_lambda_returns",
    "compute_retrace",
    "compute_vtrace",
]
