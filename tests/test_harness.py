"""The test harness's own helpers (tests/conftest.py) that other tests' verdicts rest on."""

from __future__ import annotations

import contextlib

import pytest
import torch

from conftest import ALL_FIELDS, CACHED_GPU_BYTES_KEPT, Rollout, release_cached_gpu_memory
from rl_triton import reference


@pytest.mark.parametrize("max_elements, sizes", [(8 * 50, [8, 8, 8, 8, 5]), (10, [1] * 37), (37 * 50, [37])])
def test_row_blocks_partition_the_rows_in_order(gen, max_elements, sizes):
    ro = Rollout(gen, (37,), 50, device="cpu")
    blocks = ro.row_blocks(max_elements)
    assert [block.batch for block in blocks] == [(size,) for size in sizes]
    for name in ALL_FIELDS:
        joined = torch.cat([getattr(block, name) for block in blocks])
        assert torch.equal(joined, getattr(ro, name)), name


def test_reference_on_row_blocks_equals_the_whole_call(gen):
    # rows are independent: V-trace and Retrace (two outputs each, Retrace's per-action fields) on blocks of 8
    # rows and a ragged last one give the whole call's outputs bit for bit
    ro = Rollout(gen, (37,), 50, device="cpu").as_float64()
    calls = [
        lambda r: reference.compute_vtrace(r.log_pi_target, r.log_pi_behavior, r.values, r.rewards, r.terminateds,
                                           r.truncateds, 0.99, 1.2, 1.0, bootstrap_values=r.bootstrap_values),
        lambda r: reference.compute_retrace(r.probs_target, r.probs_behavior, r.q_values, r.next_q_values_all,
                                            r.actions, r.rewards, r.terminateds, r.truncateds, 0.99, 0.9, 1.0, 1.5),
        lambda r: (reference.compute_eligibility_traces(r.gradients, r.dones, 0.99, 0.95, r.seed_values),),
    ]
    for call in calls:
        whole = call(ro)
        blocks = [call(block) for block in ro.row_blocks(8 * 50)]
        for want, parts in zip(whole, zip(*blocks, strict=True), strict=True):
            assert torch.equal(torch.cat(parts), want)


@pytest.mark.parametrize("reserved, emptied", [((0, CACHED_GPU_BYTES_KEPT + 1), True),
                                               ((CACHED_GPU_BYTES_KEPT, 1 << 20), False)])
def test_cached_memory_release_reads_every_gpu_past_a_replaced_cuda_device(monkeypatch, reserved, emptied):
    # the autouse fixture runs after each test, before that test's own monkeypatch is undone; a test that replaces
    # torch.cuda.device by a function (tests/test_edges.py) made torch.cuda.memory_reserved() raise TypeError there.
    # Two GPUs and an initialised CUDA are simulated: reserved bytes per GPU, and whether the cache is emptied
    @contextlib.contextmanager
    def device(index):
        yield

    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(reserved))
    monkeypatch.setattr(torch._C, "_cuda_memoryStats",
                        lambda index: {"reserved_bytes": {"all": {"current": reserved[index]}}}, raising=False)
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    with pytest.raises(TypeError):
        torch.cuda.memory_reserved()  # the current GPU by default: the lookup that failed
    release_cached_gpu_memory()
    assert calls == (["empty_cache"] if emptied else [])
