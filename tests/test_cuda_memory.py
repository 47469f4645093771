"""On the GPU: a call allocates its outputs and nothing else of size (no input copies).

Peak memory during a call, above what was allocated before it, must be the outputs plus the
time split's look-back workspace (one int32 and three floats per chunk, or walked segment, and
row; bounded here by the count of chunks), which the
caching allocator rounds to 512-byte blocks. Inputs are read in place: time-major buffers,
transposed and sliced views and bf16/uint8 inputs add nothing.
"""

import pytest
import torch

from conftest import HAS_CUDA, Rollout
from rl_triton import _launch
from test_cuda import ESTIMATORS, Public

pytestmark = pytest.mark.skipif(not HAS_CUDA, reason="peak memory is a property of CUDA allocations")

# a few allocator blocks for the 0-element placeholders and the launcher's scalars
SLACK_BYTES = 4096


def extra_peak_bytes(call) -> tuple[int, int]:
    """(peak bytes allocated during ``call`` beyond what was live before it, bytes of its outputs)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = call()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    results = result if isinstance(result, tuple) else (result,)
    output_bytes = sum(out.untyped_storage().nbytes() for out in results)
    return peak - before, output_bytes


def workspace_bytes(rows: int, seq_len: int, heavy: bool = True, time_major: bool = False) -> int:
    plan = _launch.plan_tiles(rows, seq_len, time_major, torch.device("cuda"), heavy=heavy)
    if not plan.split:
        return 0
    slots = plan.num_row_tiles * plan.num_chunks
    return 4 * (slots + 1) + 4 * 3 * slots * plan.block_rows


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("rows, seq_len", [(512, 1024), (8, 1 << 18)], ids=["512x1024", "8x262144-split"])
def test_peak_memory_is_outputs(gen, estimator, rows, seq_len):
    ro = Rollout(gen, (rows,), seq_len)
    estimator(Public, ro)  # compile outside the measurement
    extra, output_bytes = extra_peak_bytes(lambda: estimator(Public, ro))
    allowed = output_bytes + workspace_bytes(rows, seq_len, heavy=True) + SLACK_BYTES
    assert extra <= allowed, f"peak {extra} B above inputs; outputs {output_bytes} B, allowed {allowed} B"


def test_time_major_and_views_are_read_in_place(gen):
    from rl_triton import compute_gae, compute_vtrace

    rows, seq_len = 1024, 512
    ro = Rollout(gen, (rows,), seq_len)
    # [T, N] buffers as a rollout loop fills them, and a sliced view of a wider buffer
    rewards_tn, values_tn = ro.rewards.t().contiguous(), ro.values.t().contiguous()
    terminated_tn = ro.terminateds.t().contiguous().to(torch.uint8)
    wide = torch.randn(rows, 2 * seq_len, device="cuda")
    compute_gae(rewards_tn, values_tn, terminated_tn, time_dim=0)
    extra, output_bytes = extra_peak_bytes(lambda: compute_gae(rewards_tn, values_tn, terminated_tn, time_dim=0))
    # the look-back workspace (if the plan splits time) is the one temporary
    assert extra <= output_bytes + workspace_bytes(rows, seq_len, heavy=False, time_major=True) + SLACK_BYTES
    sliced = wide[:, ::2]
    compute_gae(sliced, ro.values, ro.terminateds)
    extra, output_bytes = extra_peak_bytes(lambda: compute_gae(sliced, ro.values, ro.terminateds))
    assert extra <= output_bytes + SLACK_BYTES
    low = {name: getattr(ro, name).to(torch.bfloat16) for name in ("log_pi_target", "log_pi_behavior", "values", "rewards")}
    flags = ro.terminateds.to(torch.bool)
    compute_vtrace(low["log_pi_target"], low["log_pi_behavior"], low["values"], low["rewards"], flags)
    extra, output_bytes = extra_peak_bytes(
        lambda: compute_vtrace(low["log_pi_target"], low["log_pi_behavior"], low["values"], low["rewards"], flags)
    )
    assert extra <= output_bytes + SLACK_BYTES


@pytest.mark.parametrize("rows, seq_len", [(512, 1024), (8, 1 << 18)], ids=["512x1024", "8x262144-split"])
def test_narrow_retrace_outputs_hold_its_intermediate_values(gen, rows, seq_len):
    from rl_triton import compute_retrace

    # bf16 outputs of float32 compute: E waits in the two outputs as halves of its bits, no buffer
    ro = Rollout(gen, (rows,), seq_len, num_actions=4, dtype=torch.bfloat16, flag_dtype=torch.uint8)

    def call():
        return compute_retrace(ro.probs_target, ro.probs_behavior, ro.q_values, ro.next_q_values_all, ro.actions,
                               ro.rewards, ro.terminateds, ro.truncateds, 0.99)

    call()
    extra, output_bytes = extra_peak_bytes(call)
    assert extra <= output_bytes + workspace_bytes(rows, seq_len, heavy=True) + SLACK_BYTES
