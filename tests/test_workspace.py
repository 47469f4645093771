"""Look-back workspaces taken in turn: each split launch zeroes the one the launch before it used.

A stream keeps two workspaces (``_launch._StreamWorkspaces``); its split launches take them in turn, and
each launch zeroes the words the previous one left (``kernels/scan.py: clear_spent_workspace``), so no
call zeroes a workspace before its launch. A word left behind would mislead a later launch (a stale
status word reads as a published prefix, a stale ticket as a chunk past the row), so these tests read
the words themselves after calls of every split kernel, check results of calls that follow one another
with other shapes, the host's own zeroing where a launch was never issued, and streams and CUDA graphs.
"""

import importlib
import inspect
import threading

import pytest
import torch

from conftest import HAS_CUDA, TOLERANCE, Rollout, assert_outputs_rel
from rl_triton import _dispatch, _launch
from test_cuda import ESTIMATORS, oracle, run
from test_walk import estimator_calls
from test_walk import run as run_walk

needs_triton = pytest.mark.skipif(
    not HAS_CUDA and not _dispatch.interpreter_enabled(), reason="the Triton path (CUDA or TRITON_INTERPRET=1)"
)
DEVICE = "cuda" if HAS_CUDA else "cpu"


def current_workspaces(device: str) -> _launch._StreamWorkspaces:
    if device == "cuda":
        torch.cuda.synchronize()
        key = (torch.device("cuda", torch.cuda.current_device()), torch.cuda.current_stream().cuda_stream, 0)
    else:
        key = (torch.device("cpu"), 0, 0)
    return _launch._thread_workspaces()[key]


def assert_spent_workspace_zeroed(device: str) -> None:
    """The workspace that the last split launch did not take: zeroed by that launch, and so recorded."""
    workspaces = current_workspaces(device)
    other = workspaces.turn  # the next launch takes this one: the last launch took the other
    flags = workspaces.flags[other]
    assert flags is not None, "only one workspace was ever taken"
    nonzero = torch.nonzero(flags).flatten().tolist()
    assert not nonzero, f"words left behind at {nonzero[:8]}: {flags[nonzero[:8]].tolist()}"
    assert workspaces.dirty[other] == 0


SPLITS = {
    # tile overrides: one chunk per program, and walked segments of several chunks
    "chunks": {"block_rows": 2, "block_time": 16, "split": True, "walk_programs": 0},
    "walks": {"block_rows": 1, "block_time": 8, "split": True, "walk_programs": 2},
    # walks whose segments first scan the 4 steps before them, and count the finished ones after the ticket
    "walks-look-behind": {"block_rows": 1, "block_time": 8, "split": True, "walk_programs": 2, "look_behind": 4},
}


@needs_triton
@pytest.mark.parametrize(
    ("split", "name"),
    # Retrace's walks take no look-behind
    [(split, name) for split in SPLITS for name in estimator_calls(0.99, 0.95)
     if not (split == "walks-look-behind" and name.startswith("retrace"))],
)
def test_each_split_launch_zeroes_the_workspace_before_it(make_rollout, four_multiprocessors, name, split):
    # three calls of two shapes: the second and third each zero what the call before them left
    for rows, seq_len in ((3, 300), (2, 77), (3, 300)):
        out, expected = run_walk(name, make_rollout(rows, seq_len), tile=SPLITS[split])
        assert_outputs_rel(out, expected, TOLERANCE[torch.float32])
    assert_spent_workspace_zeroed(DEVICE)


@needs_triton
def test_walks_with_a_look_behind_count_their_finished_segments(make_rollout, four_multiprocessors):
    # 2 rows of 300 steps in 8-step chunks: 2 row tiles of 4 segments. The workspace words: one block counter per
    # row tile, 8 status words, the ticket, then each row tile's count of finished segments, to which a segment
    # that published something non-finite adds 65536 (kernels/scan.py: finish_walk_and_mend)
    ro = make_rollout(2, 300, term_rate=0.5)
    ro.rewards[1, 200] = float("nan")  # in row 1's second segment in processing order (backward)
    out, expected = run_walk("gae", ro, tile=SPLITS["walks-look-behind"])
    torch.testing.assert_close(out.double(), expected.double(), rtol=1e-4, atol=1e-4, equal_nan=True)
    workspaces = current_workspaces(DEVICE)
    flags = workspaces.flags[1 - workspaces.turn]  # the last launch's
    assert workspaces.dirty[1 - workspaces.turn] == 2 + 8 + 1 + 2
    row_0, row_1 = flags[2 + 8 + 1: 2 + 8 + 1 + 2].tolist()
    assert row_0 == 4
    # the NaN's segment, and any later one that looked back and took it in its prefix
    assert row_1 % 65536 == 4 and 1 <= row_1 // 65536 <= 3


@needs_triton
def test_backward_launches_take_their_turn(make_rollout):
    ro = make_rollout(3, 150)
    rewards = ro.rewards.clone().requires_grad_(True)
    values = ro.values.clone().requires_grad_(True)
    from rl_triton import compute_gae

    with _launch.tile_override(block_rows=2, block_time=16, split=True, walk_programs=0):
        advantages = compute_gae(rewards, values, ro.terminateds, ro.truncateds, 0.99, 0.95, ro.bootstrap_values)
        advantages.sum().backward()
    assert_spent_workspace_zeroed(DEVICE)
    assert rewards.grad is not None and torch.isfinite(rewards.grad).all()


def test_the_host_zeroes_a_workspace_whose_launch_was_never_issued():
    workspaces = _launch._StreamWorkspaces(torch.device("cpu"))
    first, _, spent, spent_words, other = workspaces.take(10, 4, torch.float32)
    assert spent_words == 0 and first.numel() == 10 and not first.any()
    first.fill_(7)  # the launch that takes it leaves these words
    workspaces.cleared(other, spent_words)
    second, _, spent, spent_words, other = workspaces.take(12, 4, torch.float32)
    assert spent is first and spent_words == 10 and second is not first and not second.any()
    # this launch, which was to zero the first workspace, is never issued: no `cleared`
    second.fill_(5)  # (as if it had run, the next take must not trust the second workspace either)
    third, _, spent, spent_words, other = workspaces.take(10, 4, torch.float32)
    assert third is first and not third.any(), "the host did not zero what no launch zeroed"
    assert spent is second and spent_words == 12
    workspaces.cleared(other, spent_words)
    assert workspaces.dirty == [10, 0]
    # a workspace too small for a launch is replaced by a zeroed one at least twice as large
    fourth, *_ = workspaces.take(30, 4, torch.float32)
    assert fourth is not second and fourth.numel() == 30 and not fourth.any()


@needs_triton
def test_threads_keep_workspaces_of_their_own(make_rollout):
    # threads share a stream: were another thread's launch issued between this thread's taking a workspace
    # and its launch, it would run before the launch that was to zero the words it finds
    ro = make_rollout(3, 300)
    out, expected = run_walk("gae", ro, tile=SPLITS["chunks"])
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])
    mine = current_workspaces(DEVICE)
    before = (mine.turn, list(mine.dirty))
    theirs = []

    def other_thread() -> None:
        for _ in range(2):
            got, want = run_walk("gae", ro, tile=SPLITS["chunks"])
            assert_outputs_rel(got, want, TOLERANCE[torch.float32])
        theirs.append(current_workspaces(DEVICE))
        assert_spent_workspace_zeroed(DEVICE)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(theirs) == 1 and theirs[0] is not mine, "the other thread's calls failed or took these workspaces"
    assert (mine.turn, mine.dirty) == before
    out, expected = run_walk("gae", ro, tile=SPLITS["chunks"])
    assert_outputs_rel(out, expected, TOLERANCE[torch.float32])
    assert_spent_workspace_zeroed(DEVICE)


def split_kernels() -> list:
    """Every kernel that takes a launch's count of words to zero."""
    kernels = []
    for module in ("gae", "gae_backward", "prefix_sum", "recurrence", "retrace", "returns", "returns_backward", "vtrace"):
        namespace = importlib.import_module(f"rl_triton.kernels.{module}")
        kernels += [value for name, value in vars(namespace).items()
                    if name.endswith("_kernel") and "spent_words" in getattr(value, "arg_names", ())
                    and value.fn.__module__ == namespace.__name__]
    return kernels


def specialises_on(kernel, name: str) -> bool:
    """Whether Triton specialises ``kernel`` on argument ``name`` (compiled: its parameter; interpreted:
    the decorator's arguments)."""
    params = getattr(kernel, "params", None)
    if params is not None:
        return not next(param for param in params if param.name == name).do_not_specialize
    return name not in (kernel.kwargs.get("do_not_specialize") or ())


def test_split_kernels_do_not_specialise_on_the_count_they_zero():
    """The count is the size of the launch before on the stream, 0 at its first: a kernel specialised on
    it compiles again whenever it turns divisible by 16 or not (on an H200, a second call of a split
    shape took 1.4-3.4 s when the kernels still did)."""
    kernels = split_kernels()
    assert len(kernels) == 9, [kernel.fn.__name__ for kernel in kernels]
    for kernel in kernels:
        assert not specialises_on(kernel, "spent_words"), kernel.fn.__name__


def test_split_kernels_take_the_clear_after_their_other_runtime_arguments():
    """Where a kernel takes the clear's two arguments sets where ptxas finds every argument after them; taken
    after the look-back ones, they changed the compiled code of unsplit launches (time-major discounted
    returns at 4096x4096 on an H200: 85-87% -> 72-73% of the copy bandwidth), so they come last."""
    for kernel in split_kernels():
        parameters = inspect.signature(kernel.fn).parameters.values()
        runtime = [p.name for p in parameters if "constexpr" not in str(p.annotation)]
        assert runtime[-2:] == ["spent_ptr", "spent_words"], (kernel.fn.__name__, runtime)
        assert runtime[runtime.index("status_ptr"):][:4] == ["status_ptr", "aggregate_ptr", "prefix_ptr",
                                                              "counter_ptr"], kernel.fn.__name__


@pytest.mark.skipif(not HAS_CUDA, reason="streams and CUDA graphs")
class TestOnCuda:
    def test_streams_keep_their_own_workspaces(self, gen):
        estimator = ESTIMATORS[0].values[0]
        ro = Rollout(gen, (2,), 50_000, device="cuda")
        want = oracle(estimator, ro)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with _launch.tile_override(split=True):
            on_default = [run(estimator, ro) for _ in range(3)]
            with torch.cuda.stream(side):
                on_side = [run(estimator, ro) for _ in range(3)]
        torch.cuda.current_stream().wait_stream(side)
        default_stream = torch.cuda.current_stream().cuda_stream
        keys = {key[1] for key in _launch._thread_workspaces() if key[0].type == "cuda" and key[2] == 0}
        assert {default_stream, side.cuda_stream} <= keys
        for got in (*on_default, *on_side):
            assert_outputs_rel(got, want, TOLERANCE[torch.float32])
        assert_spent_workspace_zeroed("cuda")

    @pytest.mark.parametrize("estimator", ESTIMATORS)
    def test_graphs_of_several_split_calls(self, gen, estimator):
        # one capture's calls take the capture's workspaces in turn (grown by the longer row within the
        # capture); a second capture on the same stream takes others; both graphs replay in turn with eager
        # split calls between them, and every result stays the oracle's
        rollouts = [Rollout(gen, (rows,), seq_len, device="cuda") for rows, seq_len in ((2, 20_000), (1, 90_000))]

        def calls():
            with _launch.tile_override(split=True):
                return [run(estimator, ro) for ro in (*rollouts, rollouts[0])]

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            calls()
        torch.cuda.current_stream().wait_stream(stream)
        graphs, captured = [], []
        for _ in range(2):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                captured.append(calls())
            graphs.append(graph)
        wants = [oracle(estimator, ro) for ro in (*rollouts, rollouts[0])]
        for _ in range(3):
            for graph, results in zip(graphs, captured, strict=True):
                for result in results:
                    for out in result:
                        out.fill_(float("nan"))
                graph.replay()
                eager = calls()
                torch.cuda.synchronize()
                for got, again, want in zip(results, eager, wants, strict=True):
                    assert_outputs_rel(got, want, TOLERANCE[torch.float32])
                    assert_outputs_rel(again, want, TOLERANCE[torch.float32])
        assert_spent_workspace_zeroed("cuda")

    def test_a_split_shape_compiles_once(self, gen):
        # the first call zeroes nothing, the next ones the words of the call before: 73 words (8 row tiles of
        # 8 chunks, one block counter each, the ticket), not a multiple of 16
        from rl_triton import compute_gae
        from rl_triton.kernels.gae import gae_kernel

        def compiled() -> int:
            return sum(len(cache[0]) for cache in gae_kernel.device_caches.values())

        ro = Rollout(gen, (8,), 4096, device="cuda")
        want = None
        with _launch.tile_override(block_rows=1, block_time=512, split=True, walk_programs=0):
            for call in range(4):
                got = compute_gae(ro.rewards, ro.values, ro.terminateds, ro.truncateds, 0.99, 0.95,
                                  ro.bootstrap_values)
                if call == 0:
                    torch.cuda.synchronize()
                    workspaces = current_workspaces("cuda")
                    assert workspaces.dirty[1 - workspaces.turn] == 73
                    count, want = compiled(), got
                else:
                    assert compiled() == count, f"call {call + 1} compiled another kernel"
                    assert torch.equal(got, want)

    def test_repeated_split_calls_allocate_only_their_outputs(self, gen):
        estimator = ESTIMATORS[1].values[0]
        ro = Rollout(gen, (8,), 1 << 18, device="cuda")
        run(estimator, ro)  # compiles and takes one workspace
        run(estimator, ro)  # takes the other
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        result = run(estimator, ro)
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - before
        output_bytes = sum(out.untyped_storage().nbytes() for out in result)
        assert extra <= output_bytes + 1024, f"peak {extra} B above inputs, outputs {output_bytes} B"
