"""On the GPU: repeated calls (replayed, rl_triton._replay) give the oracle's results.

The first call of a signature compiles, the second is recorded, later ones replay the recorded
allocations and launches with their own inputs. Each call here gets fresh inputs of the same
shapes, so a replay that used a stale pointer or a stale plan would give wrong numbers.
"""

import pytest
import torch

from conftest import HAS_CUDA, TOLERANCE, Rollout, assert_rel, outputs, printed_by_fresh_process
from rl_triton import _replay
from test_cuda import ESTIMATORS, Public, capture, oracle, run

pytestmark = pytest.mark.skipif(not HAS_CUDA, reason="replays are recorded for CUDA calls only")

PUBLIC_FUNCTIONS = [getattr(Public, name) for name in dir(Public) if name.startswith("compute_")]


def replay_count() -> int:
    return sum(len(function.replays) for function in PUBLIC_FUNCTIONS)


@pytest.fixture(autouse=True)
def fresh_replays():
    _replay.clear()
    yield
    _replay.clear()


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize(
    "batch, seq_len, dtype",
    [
        pytest.param((64,), 300, torch.float32, id="64x300"),
        pytest.param((2,), 50_000, torch.float32, id="2x50000-split"),
        pytest.param((15,), 700, torch.float64, id="15x700-f64"),
    ],
)
def test_replayed_calls_match_the_oracle(gen, estimator, batch, seq_len, dtype):
    for call in range(4):
        ro = Rollout(gen, batch, seq_len, dtype=dtype, device="cuda")
        for got, want in zip(run(estimator, ro), oracle(estimator, ro), strict=True):
            assert_rel(got, want, TOLERANCE[dtype], what=f"call {call}")
    assert replay_count() == 1, "the repeated call was not replayed"


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_replayed_time_major_calls(gen, estimator):
    for _ in range(3):
        ro = Rollout(gen, (256,), 96, device="cuda")
        time_major = ro.map(lambda x: x.t().contiguous().t())  # [N, T] views of [T, N] buffers
        for got, want in zip(run(estimator, time_major), oracle(estimator, ro), strict=True):
            assert_rel(got, want, TOLERANCE[torch.float32])
    assert replay_count() == 1


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_replayed_call_in_a_cuda_graph(gen, estimator):
    ro = Rollout(gen, (64,), 300, device="cuda")
    run(estimator, ro)
    run(estimator, ro)  # recorded
    graph, captured = capture(lambda: run(estimator, ro))  # replayed, then replayed while capturing
    assert replay_count() == 1
    fresh = Rollout(gen, (64,), 300, device="cuda")
    for name, value in vars(ro).items():
        if isinstance(value, torch.Tensor):
            value.copy_(getattr(fresh, name))
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(captured, oracle(estimator, fresh), strict=True):
        assert_rel(got, want, TOLERANCE[torch.float32])


def test_gamma_is_part_of_the_signature(gen):
    ro = Rollout(gen, (64,), 300, device="cuda")
    results = {}
    for gamma in (0.9, 0.5, 0.9, 0.5):
        got = outputs(Public.compute_discounted_returns(ro.rewards, ro.terminateds, gamma=gamma))[0]
        want = outputs(Public.compute_discounted_returns(ro.rewards.cpu().double(), ro.terminateds.cpu(),
                                                         gamma=gamma))[0]
        assert_rel(got.cpu(), want, TOLERANCE[torch.float32])
        results.setdefault(gamma, got)
    assert not torch.equal(results[0.9], results[0.5])


def test_first_calls_do_not_import_dynamo():
    """A process's first calls (compiled, then recorded, then replayed) leave ``torch._dynamo``
    unimported: importing it costs 1-3 s. A fresh process, as this one has imported it long ago."""
    code = (
        "import sys, torch, rl_triton\n"
        "rewards, values = torch.randn(2, 4, 300, device='cuda'), torch.randn(2, 4, 300, device='cuda')\n"
        "terminateds = torch.rand(2, 4, 300, device='cuda') < 0.05\n"
        "for _ in range(3):\n"
        "    advantages = rl_triton.compute_gae(rewards, values, terminateds, gamma=0.99, lambda_=0.95)\n"
        "torch.cuda.synchronize()\n"
        "print(len(rl_triton.compute_gae.replays), 'torch._dynamo' in sys.modules)\n"
    )
    # the second call was recorded (one replay kept) and Dynamo was never imported
    assert printed_by_fresh_process(code) == ["1", "False"]
