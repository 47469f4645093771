"""Replayed calls launch exactly what the full path would, with the new call's pointers.

On CPU the launches are faked: the fake records each launch's arguments (tensors as the full
path passes them, pointers as integers when replayed), so the mapping from a call's inputs and
fresh allocations to kernel arguments is checked without a GPU. On CUDA the same calls run for
real and are checked against the float64 oracle (tests/test_cuda.py, test_replayed_calls).
"""

from __future__ import annotations

import os
import threading

import pytest
import torch

import rl_triton
from conftest import benchmark_module, printed_by_fresh_process
from rl_triton import _launch, _library, _replay


class FakeCompiled:
    """Stands in for a compiled kernel: its launches are recorded, nothing runs."""

    def __init__(self, kernel: object) -> None:
        self.kernel = kernel


@pytest.fixture
def fake_launches(monkeypatch):
    """Calls on CPU tensors take the Triton path with recorded, fake launches; returns the log."""
    log: list[tuple[object, tuple, list]] = []

    def fake_launch(kernel, grid, *args, **meta):
        compiled = FakeCompiled(kernel)
        log.append((kernel, tuple(grid), list(args)))
        # issued, as _launch._launch reports it: the workspace words this launch zeroes count as zeroed
        cleared = getattr(_launch._pending, "cleared", None)
        _launch._pending.cleared = None
        _launch._issued(cleared)
        recording = _replay.active_recording()
        if recording is not None:
            recording.launch(compiled, tuple(meta.values()), grid, args, tuple(_launch._placeholders.values()))

    def fake_run(compiled, constexprs, grid, args):
        log.append((compiled.kernel, tuple(grid), list(args)))

    _replay.clear()
    # each test starts from fresh look-back workspaces (this thread's, kept across calls)
    monkeypatch.setattr(_launch._thread_state, "workspaces", {}, raising=False)
    monkeypatch.setattr(_replay, "REPLAY_ON_CPU", True)
    monkeypatch.setattr(_replay, "_full_path_only", lambda: False)
    monkeypatch.setattr(_library, "use_triton", lambda device: True)
    monkeypatch.setattr(_launch, "_launch", fake_launch)
    # float arguments as compiled kernels take them (the interpreter wraps them in tensors)
    monkeypatch.setattr(_launch, "interpreter_enabled", lambda: False)
    monkeypatch.setattr(_launch, "run_compiled", fake_run)
    yield log
    _replay.clear()


def gae_inputs(gen, shape, time_dim=-1):
    rewards = torch.randn(shape, generator=gen)
    values = torch.randn(shape, generator=gen)
    terminateds = torch.rand(shape, generator=gen) < 0.05
    return rewards, values, terminateds


CASES = {
    "gae": lambda g: (rl_triton.compute_gae, gae_inputs(g, (6, 40)), {"gamma": 0.97}),
    "gae time-major": lambda g: (rl_triton.compute_gae, gae_inputs(g, (40, 6)), {"time_dim": 0}),
    "gae batch dims": lambda g: (rl_triton.compute_gae, gae_inputs(g, (2, 3, 40)), {}),
    "gae split": lambda g: (rl_triton.compute_gae, gae_inputs(g, (1, 5000)), {}),
    "vtrace": lambda g: (
        rl_triton.compute_vtrace,
        (torch.randn(4, 33, generator=g), torch.randn(4, 33, generator=g), *gae_inputs(g, (4, 33))[:2],
         torch.rand(4, 33, generator=g) < 0.05),
        {"last_value": torch.randn(4, generator=g)},
    ),
    "retrace": lambda g: (
        rl_triton.compute_retrace,
        (torch.softmax(torch.randn(3, 20, 5, generator=g), -1), 0.1 + torch.rand(3, 20, generator=g),
         torch.randn(3, 20, generator=g), torch.randn(3, 20, 5, generator=g),
         torch.randint(0, 5, (3, 20), generator=g), *gae_inputs(g, (3, 20))[::2],
         torch.zeros(3, 20, dtype=torch.bool), 0.99, 0.9),
        {},
    ),
    "lambda returns": lambda g: (rl_triton.compute_lambda_returns, gae_inputs(g, (5, 17)), {"lambda_": 0.8}),
    "eligibility traces": lambda g: (rl_triton.compute_eligibility_traces, (*gae_inputs(g, (5, 17))[::2], 0.99, 0.9),
                                     {}),
    "discounted returns": lambda g: (rl_triton.compute_discounted_returns, gae_inputs(g, (5, 17))[::2], {}),
    "prefix sum": lambda g: (rl_triton.compute_episodic_prefix_sum, gae_inputs(g, (5, 17))[::2], {}),
}


def fresh_call(case, seed):
    function, args, kwargs = CASES[case](torch.Generator().manual_seed(seed))
    return function, args, kwargs


@pytest.mark.parametrize("case", list(CASES))
def test_replay_launches_what_the_full_path_launches(fake_launches, case):
    function, args, kwargs = fresh_call(case, 0)
    function(*args, **kwargs)  # recorded
    assert len(function.replays) == 1, "the call was not recorded for replay"
    recorded = len(fake_launches)

    function, args, kwargs = fresh_call(case, 1)  # same properties, new tensors
    result = function(*args, **kwargs)
    replayed = fake_launches[recorded:]
    assert len(replayed) == recorded, "a replay launches as many kernels as the recorded call"

    # what the full path launches for these same inputs
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_replay, "_full_path_only", lambda: True)
        full_result = function(*args, **kwargs)
    full = fake_launches[2 * recorded:]

    results = result if isinstance(result, tuple) else (result,)
    full_results = full_result if isinstance(full_result, tuple) else (full_result,)
    assert [(r.shape, r.stride(), r.dtype) for r in results] == [(r.shape, r.stride(), r.dtype) for r in full_results]
    input_pointers = {a.data_ptr() for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)}
    full_output_pointers = {r.data_ptr(): i for i, r in enumerate(full_results)}
    for (kernel, grid, replay_args), (full_kernel, full_grid, full_args) in zip(replayed, full, strict=True):
        assert kernel is full_kernel and grid == full_grid
        assert len(replay_args) == len(full_args)
        for slot, (value, expected) in enumerate(zip(replay_args, full_args, strict=True)):
            if isinstance(expected, torch.Tensor) and expected.data_ptr() in full_output_pointers:
                # an output: the replay's own fresh allocation, at the same place within it
                index = full_output_pointers[expected.data_ptr()]
                assert value == results[index].data_ptr(), f"slot {slot}: output pointer"
            elif isinstance(expected, torch.Tensor) and any(expected is p for p in _launch._placeholders.values()):
                assert value == expected.data_ptr(), f"slot {slot}: placeholder"
            elif isinstance(expected, torch.Tensor) and expected.data_ptr() in input_pointers:
                assert value == expected.data_ptr(), f"slot {slot}: input pointer"
            elif isinstance(expected, torch.Tensor):  # a workspace: allocated afresh by both calls
                assert isinstance(value, int) and value not in input_pointers, f"slot {slot}: workspace"
            else:
                assert value == expected, f"slot {slot}: scalar argument"


def test_a_split_call_replays_with_the_calling_threads_workspaces(fake_launches):
    # each thread keeps its own look-back workspaces per stream: a replay takes the calling thread's.
    # Faked launches never report themselves issued, so earlier tests' workspaces still wait for the host
    # to zero them, which a recording cannot repeat: this thread starts from none
    _launch._thread_workspaces().clear()
    function, args, kwargs = fresh_call("gae split", 0)
    function(*args, **kwargs)
    function(*args, **kwargs)
    assert function.replays, "the call was not recorded for replay"

    def workspace_pointers(launched: list, workspaces) -> set:
        flags = [f for f in workspaces.flags if f is not None]
        return {value for value in launched if value.__class__ is int
                for f in flags if f.data_ptr() <= value < f.data_ptr() + 4 * f.numel()}

    key = (torch.device("cpu"), 0, 0)
    start = len(fake_launches)
    function(*args, **kwargs)  # a replay on this thread
    (_, _, replayed), = fake_launches[start:]
    assert workspace_pointers(replayed, _launch._thread_workspaces()[key])

    theirs = []

    def other_thread() -> None:
        start = len(fake_launches)
        function(*args, **kwargs)
        (_, _, launched), = fake_launches[start:]
        workspaces = _launch._thread_workspaces()[key]
        theirs.append((workspaces, workspace_pointers(launched, workspaces)))

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    (other_workspaces, other_pointers), = theirs
    assert other_workspaces is not _launch._thread_workspaces()[key]
    assert other_pointers, "the other thread's replay did not take its own workspaces"


def test_scalars_and_layouts_are_part_of_the_signature(fake_launches):
    function, args, _ = fresh_call("gae", 0)
    for gamma in (0.9, 0.9, 0.95, 1, 1.0):
        function(*args, gamma=gamma)
    # 0.9 twice is one signature; 1 and 1.0 are kept apart
    assert len(function.replays) == 4
    function(args[0].t().contiguous().t(), *args[1:])  # same shape, other strides
    assert len(function.replays) == 5


def test_calls_that_do_other_work_are_not_recorded(fake_launches, monkeypatch):
    original = _library.gae

    def gae_with_extra_op(*args, **kwargs):
        advantages = original(*args, **kwargs)
        return advantages.add_(0.0)  # work a replay would not repeat

    monkeypatch.setattr(_library, "gae", gae_with_extra_op)
    function, args, kwargs = fresh_call("gae", 0)
    function(*args, **kwargs)
    function(*args, **kwargs)
    assert len(function.replays) == 0


def test_gradients_and_compilation_take_the_full_path(fake_launches):
    function, (rewards, values, terminateds), _ = fresh_call("gae", 0)
    function(rewards.requires_grad_(), values, terminateds)
    assert len(function.replays) == 0


def test_unrecordable_calls_stop_being_recorded(fake_launches):
    # one tensor passed as two arguments: which argument a kernel pointer came from is ambiguous
    function, (rewards, _, terminateds), _ = fresh_call("gae", 0)
    for _ in range(5):
        function(rewards, rewards, terminateds)
    assert len(function.replays) == 0
    assert list(function.failed_recordings.values()) == [_replay.MAX_FAILED_RECORDINGS]


def test_out_dtype_and_keywords(fake_launches):
    function, args, _ = fresh_call("gae", 0)
    for _ in range(2):
        result = function(*args, out_dtype=torch.float64)
        assert result.dtype == torch.float64 and result.shape == args[0].shape
        function(args[0], args[1], terminateds=args[2])
    # the first call of each signature is recorded, the second replayed: two signatures
    assert len(function.replays) == 2


def test_keywords_are_matched_by_name(fake_launches):
    function, (rewards, values, terminateds), _ = fresh_call("gae", 0)
    function(rewards, values, terminateds, gamma=0.9, lambda_=0.8)  # recorded
    launches = len(fake_launches)
    # the same keywords in another order: the same call, replayed
    function(rewards, values, terminateds, lambda_=0.8, gamma=0.9)
    _, _, launched = fake_launches[launches]
    assert all(isinstance(value, int) for value in launched[:3]), "not replayed"
    assert len(function.replays) == 1
    # as many keywords, one of them another: never the recorded call (the full path launches with the tensors)
    last_value = torch.ones(rewards.shape[0])
    launches = len(fake_launches)
    function(rewards, values, terminateds, gamma=0.9, last_value=last_value)
    _, _, launched = fake_launches[launches]
    assert any(value is last_value for value in launched), "replayed as the recorded call"
    # fewer and more keywords than recorded: calls of their own
    function(rewards, values, terminateds, gamma=0.9)
    function(rewards, values, terminateds, gamma=0.9, lambda_=0.8, time_dim=-1)
    assert len(function.replays) == 4


def test_a_failing_call_leaves_no_recording_behind(fake_launches):
    function, args, _ = fresh_call("gae", 0)
    with pytest.raises(rl_triton.InputError):
        function(*args, gamma=1.5)
    assert _replay.active_recording() is None
    assert len(function.replays) == 0
    function(*args)
    assert len(function.replays) == 1


@pytest.mark.parametrize("torch_guards", [True, False], ids=["torch-guards", "python-matcher"])
def test_matchers_accept_only_the_recorded_properties(monkeypatch, torch_guards):
    monkeypatch.setattr(_replay, "USE_TORCH_GUARDS", torch_guards)
    gen = torch.Generator().manual_seed(0)
    recorded = [torch.randn(4, 8, generator=gen), torch.rand(4, 8, generator=gen) < 0.5]
    matcher = _replay._tensor_matcher(recorded)
    assert (type(matcher).__name__ == "TensorGuards") == (torch_guards and _replay._TensorGuards is not None)
    floats, flags = torch.randn(4, 8, generator=gen), torch.zeros(4, 8, dtype=torch.bool)
    assert matcher.check(floats, flags)
    assert matcher.check(torch.randn(5, 8, generator=gen)[1:], flags), "an offset view has the same strides"
    others = {
        "shape": torch.randn(4, 9, generator=gen),
        "strides": torch.randn(8, 4, generator=gen).t(),
        "dtype": torch.randn(4, 8, generator=gen, dtype=torch.float64),
        "gradient": torch.randn(4, 8, generator=gen, requires_grad=True),
        "device": torch.randn(4, 8, device="meta"),
        "sliced": torch.randn(4, 16, generator=gen)[:, ::2],
    }
    for what, other in others.items():
        assert not matcher.check(other, flags), what
    assert not matcher.check(floats, flags.to(torch.uint8)), "flag dtype"


def test_replays_with_the_python_matcher(fake_launches, monkeypatch):
    monkeypatch.setattr(_replay, "USE_TORCH_GUARDS", False)
    function, args, kwargs = fresh_call("gae", 0)
    function(*args, **kwargs)
    function, args, kwargs = fresh_call("gae", 1)
    recorded = len(fake_launches)
    function(*args, **kwargs)
    assert len(fake_launches) == 2 * recorded, "the second call was not replayed"
    (replay,) = [replay for replays in function.candidates.values() for replay in replays]
    assert isinstance(replay.matcher, _replay._PropertyMatcher)


def test_a_differently_aligned_input_is_not_replayed(fake_launches):
    function, (rewards, values, terminateds), _ = fresh_call("gae", 0)
    function(rewards, values, terminateds)
    # same shape and strides, 4 bytes past a 16-byte boundary: Triton compiles another kernel
    shifted = torch.empty(rewards.numel() + 1)[1:].view_as(rewards).copy_(rewards)
    assert shifted.stride() == rewards.stride() and shifted.data_ptr() % 16 == 4
    calls = len(fake_launches)
    function(shifted, values, terminateds)
    assert len(function.replays) == 2, "the shifted call was replayed as the aligned one"
    _, _, args = fake_launches[calls]
    assert args[0] is shifted, "the shifted call took the full path"


def test_outputs_shaped_like_an_input_are_allocated_like_it(fake_launches):
    function, args, kwargs = fresh_call("gae", 0)
    function(*args, **kwargs)
    (replay,) = [replay for replays in function.candidates.values() for replay in replays]
    assert "_empty_like(t0)" in replay.source
    # [N, T] views of [T, N] buffers: the output is not laid out like the inputs
    transposed = [arg.t().contiguous().t() for arg in args]
    full = function(*transposed)
    replayed = function(*transposed)
    assert len(function.replays) == 2
    assert replayed.stride() == full.stride() != transposed[0].stride()


@pytest.mark.parametrize("case", ["gae time-major", "gae batch dims"])
def test_outputs_that_view_a_whole_allocation_are_allocated_as_they_are_returned(fake_launches, case):
    # the kernels write [N, T] tiles; the output is their transpose or has batch dims: the replay
    # allocates it in that geometry instead of allocating the tiles' and taking a view
    function, args, kwargs = fresh_call(case, 0)
    full = function(*args, **kwargs)
    (replay,) = [replay for replays in function.candidates.values() for replay in replays]
    assert "_empty_like(t0)" in replay.source and "as_strided" not in replay.source
    replayed = function(*fresh_call(case, 1)[1], **kwargs)
    assert (replayed.shape, replayed.stride()) == (full.shape, full.stride())


@pytest.mark.parametrize("size, stride, dense", [
    ((4, 5), (5, 1), True), ((4, 5), (1, 4), True), ((2, 3, 4), (12, 1, 3), True), ((3, 1, 2), (2, 7, 1), True),
    ((4, 5), (6, 1), False), ((4, 5), (1, 1), False), ((4, 5), (10, 2), False), ((4, 5), (0, 1), False),
])
def test_dense_geometries(size, stride, dense):
    assert _replay._dense(size, stride) is dense


class TaggedTensor(torch.Tensor):
    """A tensor subclass, as some libraries hand out: its calls are never replayed."""


def test_tensor_subclasses_take_the_full_path(fake_launches):
    function, args, _ = fresh_call("gae", 0)
    tagged = [arg.as_subclass(TaggedTensor) for arg in args]
    for call in range(5):
        launches = len(fake_launches)
        function(*tagged)
        _, _, launched = fake_launches[launches]
        assert any(value is tagged[0] for value in launched), f"call {call} was replayed"
    # recorded twice (the second time in case the first recording's matcher was the odd one out)
    assert list(function.failed_recordings.values()) == [_replay.MAX_FAILED_RECORDINGS]


def test_calls_in_inference_mode_are_recorded_for_themselves(fake_launches):
    # PyTorch's tensor guard tells inference tensors apart (other dispatch keys): such calls get a
    # recording of their own, and calls outside inference mode keep theirs
    function, args, _ = fresh_call("gae", 0)
    function(*args)
    with torch.inference_mode():
        inference_args = [arg.clone() for arg in args]
        for _ in range(3):
            function(*inference_args)
    replayed = len(fake_launches)
    with torch.inference_mode():
        function(*inference_args)
    function(*args)
    assert all(isinstance(value, int) for value in fake_launches[replayed][2][:3]), "not replayed"
    assert all(isinstance(value, int) for value in fake_launches[replayed + 1][2][:3]), "not replayed"
    assert len([replay for replays in function.candidates.values() for replay in replays]) == 2


def test_recording_does_not_import_dynamo():
    """PyTorch keeps Dynamo out of a dispatch mode by wrapping it, and that wrapper imports
    ``torch._dynamo`` (1-3 s) on its first run; the recording opts out, so a process's first call
    does not pay for it. A fresh process: this one has imported Dynamo long ago."""
    code = (
        "import sys, torch\n"
        "from rl_triton import _replay\n"
        "before = 'torch._dynamo' in sys.modules\n"
        "recording = _replay._Recording(())\n"
        "with recording:\n"
        "    torch.empty(3, 4).t()\n"
        "print(before, 'torch._dynamo' in sys.modules, len(recording.steps), recording.replayable)\n"
    )
    # the mode saw the allocation (a view is no step) and imported nothing
    assert printed_by_fresh_process(code) == ["False", "False", "1", "True"]


def test_environment_flags_are_read_on_every_call(monkeypatch):
    """A reader of several flags answers whether any is set (as Triton reads its own: 1, true, yes, on or y,
    in any case; "", "0", "false" and "off" are not), and sees changes after it was made, including a replaced
    ``os.environ``."""
    from rl_triton import _checks

    monkeypatch.delenv("RL_TRITON_TEST_FLAG_A", raising=False)
    monkeypatch.delenv("RL_TRITON_TEST_FLAG_B", raising=False)
    either = _checks.environment_flag("RL_TRITON_TEST_FLAG_A", "RL_TRITON_TEST_FLAG_B")
    assert not either()
    monkeypatch.setenv("RL_TRITON_TEST_FLAG_B", "0")
    monkeypatch.setenv("RL_TRITON_TEST_FLAG_A", "")
    assert not either()
    monkeypatch.setenv("RL_TRITON_TEST_FLAG_B", "1")
    assert either()
    monkeypatch.delenv("RL_TRITON_TEST_FLAG_B")
    monkeypatch.setenv("RL_TRITON_TEST_FLAG_A", "yes")
    assert either()
    for value in ("false", "off", "FALSE", "no"):
        monkeypatch.setenv("RL_TRITON_TEST_FLAG_A", value)
        assert not either()
    monkeypatch.setenv("RL_TRITON_TEST_FLAG_A", "True")
    assert either()
    monkeypatch.setattr(os, "environ", {"RL_TRITON_TEST_FLAG_B": "1"})
    assert either()
    monkeypatch.setattr(os, "environ", {"RL_TRITON_TEST_FLAG_A": "0"})
    assert not either()


@pytest.mark.parametrize("state", ["correctness flag", "interpreter", "forced backend", "tile override", "none"])
def test_global_state_that_asks_for_the_full_path(monkeypatch, state):
    """Calls are not replayed while a flag, a forced backend or a tile override is in effect."""
    from rl_triton import _dispatch

    monkeypatch.delenv("RL_TRITON_CORRECTNESS_WARNINGS", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(_launch, "_profiling_hooks", lambda: False)
    monkeypatch.setattr(_launch._direct_launch, "enabled", True)
    if state == "correctness flag":
        monkeypatch.setenv("RL_TRITON_CORRECTNESS_WARNINGS", "1")
    elif state == "interpreter":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    if state == "forced backend":
        with _dispatch.use_backend("reference"):
            assert _replay._full_path_only()
    elif state == "tile override":
        with _launch.tile_override(block_rows=2):
            assert _replay._full_path_only()
    else:
        assert _replay._full_path_only() == (state != "none")


def test_host_cost_parts_stub_what_they_say(fake_launches):
    """``benchmarks/host_cost.py --parts``: each case's replay alone launches and allocates as a call does; its
    parts without launches launch nothing, those without allocations hand out one earlier replay's outputs."""
    host_cost = benchmark_module("host_cost.py")
    gen = torch.Generator().manual_seed(0)
    cases = {}
    for name in ("gae", "vtrace"):
        function, args, kwargs = CASES[name](gen)
        cases[name] = lambda function=function, args=args, kwargs=kwargs: function(*args, **kwargs)
    parts = host_cost._replay_parts(cases)
    assert sorted(parts) == sorted(f"{name}: {part}" for name in cases for part in (
        "replay alone", "replay, no launches", "replay, no allocations", "replay, neither", "tensor matcher"))
    for name in cases:
        launched = []
        for part in ("replay alone", "replay, no launches", "replay, no allocations", "replay, neither"):
            before = len(fake_launches)
            first, second = parts[f"{name}: {part}"](), parts[f"{name}: {part}"]()
            launched.append(len(fake_launches) - before)
            first = first if isinstance(first, tuple) else (first,)
            second = second if isinstance(second, tuple) else (second,)
            reused = all(a is b for a, b in zip(first, second, strict=True))
            assert reused == part.endswith(("no allocations", "neither")), (name, part)
        assert launched == [2, 0, 2, 0], (name, launched)
        assert parts[f"{name}: tensor matcher"]() is True


def test_host_cost_cases_take_their_gamma():
    """``benchmarks/packed_launch_ab.py`` records each packed setting's calls under a gamma of its own, through
    ``host_cost.py``'s cases: every case it times computes with the gamma it is given."""
    host_cost = benchmark_module("host_cost.py")
    packed_launch_ab = benchmark_module("packed_launch_ab.py")
    first, again, other = (host_cost._cases("cpu", 3, 16, 4, gamma) for gamma in (0.99, 0.99, 0.5))
    for name in packed_launch_ab._CASES:
        results = [call() for call in (first[name], again[name], other[name])]
        results = [result if isinstance(result, tuple) else (result,) for result in results]
        assert all(torch.equal(a, b) for a, b in zip(results[0], results[1], strict=True)), name
        assert not all(torch.equal(a, b) for a, b in zip(results[0], results[2], strict=True)), name
