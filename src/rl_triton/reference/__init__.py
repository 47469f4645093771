"""Plain PyTorch reference implementations: the CPU path and the test oracle.

Each function takes the positional parameters of its ``rl_triton.ops`` counterpart (no
``time_dim`` or ``out_dtype``), takes ``[num_envs, seq_len]`` tensors (``[num_envs, seq_len,
num_actions]`` for Retrace's per-action inputs) and computes in float64 when any value input
is float64 (flags do not count), float32 otherwise. Time is a Python loop; rows are vectorised.
"""

from rl_triton.reference.gae import compute_gae
from rl_triton.reference.prefix_sum import compute_episodic_prefix_sum
from rl_triton.reference.retrace import compute_retrace
from rl_triton.reference.returns import (
    compute_discounted_returns,
    compute_eligibility_traces,
    compute_lambda_returns,
)
from rl_triton.reference.vtrace import compute_vtrace

__all__ = [
    "compute_discounted_returns",
    "compute_eligibility_traces",
    "compute_episodic_prefix_sum",
    "compute_gae",
    "compute_lambda_returns",
    "compute_retrace",
    "compute_vtrace",
]
