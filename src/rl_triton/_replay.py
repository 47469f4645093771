"""Repeated CUDA calls skip the Python work of a call by replaying what an identical call did.

An estimator's Python (argument checks, layout, tile plan, kernel lookup) costs several times
what its kernels cost to launch, and a training loop calls it with the same shapes, strides,
dtypes and scalars every time. Every decision that Python takes depends on those properties
only, so a call whose properties were seen before repeats the recorded allocations and
kernel launches with its own data pointers.

A call is recorded while a ``TorchDispatchMode`` watches every tensor operation it runs. It is
kept only if everything it did can be repeated exactly: allocations, zero fills, views, and
kernel launches whose tensor arguments start at one of the call's input tensors (each at its
own address) or inside one of its allocations. Anything else (a dtype conversion, a copy, a host read of data, a launch through
Triton's own path) leaves the call unrecorded, so it always takes the full path. Calls that
need gradients, run under ``torch.compile``, the correctness flag, a forced backend, a tile
override or Triton's interpreter or profiling hooks also take the full path.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from typing_extensions import Self

from rl_triton import _checks, _dispatch

# distinct call signatures kept per estimator; calls beyond them take the full path
MAX_SIGNATURES = 64
# recordings of one signature that may fail before its calls take the full path without recording
# (a call that passes one tensor as two arguments cannot be recorded; recording costs ~10x a call)
MAX_FAILED_RECORDINGS = 2
# CPU calls take the PyTorch reference, which is not replayable (tests with faked launches set this)
REPLAY_ON_CPU = False

_ALLOCATIONS = {
    torch.ops.aten.empty.memory_format,
    torch.ops.aten.empty_strided.default,
}
_ZERO_ALLOCATIONS = {torch.ops.aten.zeros.default}
_ZERO_FILLS = {torch.ops.aten.zero_.default, torch.ops.aten.fill_.Scalar}
_SCALARS = (float, int, bool, str)

_local = threading.local()

Function = TypeVar("Function", bound=Callable[..., Any])


_launch_module = None


def _kernels():
    """``rl_triton._launch``, imported on first use (it imports Triton) and kept."""
    global _launch_module
    if _launch_module is None:
        from rl_triton import _launch

        _launch_module = _launch
    return _launch_module


def active_recording() -> _Recording | None:
    """The recording of the call running on this thread, if one is being recorded."""
    return getattr(_local, "recording", None)


def _signature(args: tuple, kwargs: dict) -> tuple | None:
    """Everything a call's Python decides on, or None if a call like this is never replayed."""
    parts: list = []
    on_cuda = False
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            is_cuda = value.is_cuda  # (device.type costs five times as much)
            if value.requires_grad or not (is_cuda or REPLAY_ON_CPU):
                return None
            on_cuda = on_cuda or is_cuda
            # 16-byte alignment is what Triton specialises pointers on
            parts.append((value.shape, value.stride(), value.dtype, value.device, value.data_ptr() & 15))
        elif value is None or isinstance(value, torch.dtype):
            parts.append(value)
        elif value.__class__ in _SCALARS:
            # 1 and 1.0 and True hash alike: keep the type
            parts.append((value.__class__, value))
        else:
            return None
    if kwargs:
        parts.append(tuple(kwargs))
    if on_cuda:
        # kernels launch on the current device
        parts.append(torch.cuda.current_device())
    return tuple(parts)


def _full_path_only() -> bool:
    """Whether global state asks for the full path (checked on every call, in this order of cost)."""
    if _dispatch._forced_backend.get() is not None:
        return True
    if _checks.correctness_checks_enabled(False) or _dispatch.interpreter_enabled():
        return True
    return _kernels().full_launch_path_only()


@dataclasses.dataclass(frozen=True)
class _Source:
    """Where a pointer comes from: input ``index`` (flattened arguments) or allocation ``index``."""

    from_input: bool
    index: int
    byte_offset: int


@dataclasses.dataclass(frozen=True)
class _Launch:
    compiled: Any
    constexprs: tuple
    grid: tuple[int, ...]
    template: tuple  # the arguments, with None where `dynamic` puts a pointer
    dynamic: tuple[tuple[int, _Source], ...]


@dataclasses.dataclass(frozen=True)
class _Allocation:
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    zeroed: bool


@dataclasses.dataclass(frozen=True)
class _ZeroFill:
    allocation: int


@dataclasses.dataclass(frozen=True)
class _ResultView:
    allocation: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int


_ALLOCATE, _ZERO, _LAUNCH = range(3)


class _Replay:
    """The recorded steps of one call signature, flattened for a fast loop."""

    def __init__(self, steps: list, result: list[_ResultView], is_tuple: bool,
                 allocations: list[torch.Tensor]) -> None:
        self.steps: list[tuple] = []
        for step in steps:
            if isinstance(step, _Allocation):
                self.steps.append((_ALLOCATE, step))
            elif isinstance(step, _ZeroFill):
                self.steps.append((_ZERO, step.allocation))
            else:
                self.steps.append((_LAUNCH, step.compiled, step.constexprs, step.grid, step.template,
                                   tuple((slot, s.from_input, s.index, s.byte_offset) for slot, s in step.dynamic)))
        # each result: an allocation as it is, or a view of it
        self.result = []
        for view in result:
            allocation = allocations[view.allocation]
            whole = (view.size == tuple(allocation.shape) and view.stride == allocation.stride()
                     and view.storage_offset == 0)
            self.result.append((view.allocation, None if whole else (view.size, view.stride, view.storage_offset)))
        self.is_tuple = is_tuple

    def __call__(self, flat_args: tuple) -> Any:
        run_compiled = _kernels().run_compiled
        allocations: list[torch.Tensor] = []
        for step in self.steps:
            kind = step[0]
            if kind == _LAUNCH:
                _, compiled, constexprs, grid, template, dynamic = step
                args = list(template)
                for slot, from_input, index, byte_offset in dynamic:
                    base = flat_args[index] if from_input else allocations[index]
                    args[slot] = base.data_ptr() + byte_offset
                run_compiled(compiled, constexprs, grid, args)
            elif kind == _ALLOCATE:
                spec = step[1]
                if spec.zeroed:
                    allocations.append(torch.zeros(spec.size, dtype=spec.dtype, device=spec.device))
                else:
                    allocations.append(torch.empty_strided(spec.size, spec.stride, dtype=spec.dtype, device=spec.device))
            else:
                allocations[step[1]].zero_()
        outputs = [allocations[index] if view is None else allocations[index].as_strided(*view)
                   for index, view in self.result]
        return tuple(outputs) if self.is_tuple else outputs[0]


class _Recording(TorchDispatchMode):
    """Watches one call; ``finish`` turns what it saw into a replay, or None."""

    def __init__(self, flat_args: tuple) -> None:
        super().__init__()
        self.flat_args = flat_args
        self.steps: list = []
        self.allocations: list[torch.Tensor] = []
        self.replayable = True
        # whether an identical call may be replayable later (this one only compiled a kernel)
        self.worth_retrying = False

    def abandon(self, worth_retrying: bool = False) -> None:
        """Stop recording; ``worth_retrying``: the call did nothing unrepeatable (a first launch compiles)."""
        self.replayable = False
        self.worth_retrying = self.worth_retrying or worth_retrying

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if not self.replayable:
            return result
        if func in _ALLOCATIONS or func in _ZERO_ALLOCATIONS:
            self.allocations.append(result)
            self.steps.append(_Allocation(tuple(result.shape), result.stride(), result.dtype, result.device,
                                          func in _ZERO_ALLOCATIONS))
        elif func in _ZERO_FILLS:
            self._zero_fill(args)
        elif not func.is_view:
            self.replayable = False
        return result

    def _zero_fill(self, args: tuple) -> None:
        # only a whole allocation of this call filled with zeros can be repeated
        target = args[0]
        value = args[1] if len(args) > 1 else 0
        for index, allocation in enumerate(self.allocations):
            if target is allocation and value == 0:
                self.steps.append(_ZeroFill(index))
                return
        self.replayable = False

    def _source(self, tensor: torch.Tensor) -> _Source | None:
        """The unique input or allocation whose memory ``tensor`` starts in."""
        pointer = tensor.data_ptr()
        matches = [
            _Source(True, index, 0) for index, value in enumerate(self.flat_args)
            if isinstance(value, torch.Tensor) and value.data_ptr() == pointer
        ]
        for index, allocation in enumerate(self.allocations):
            start = allocation.data_ptr()
            if start <= pointer < start + max(1, allocation.untyped_storage().nbytes()):
                matches.append(_Source(False, index, pointer - start))
        return matches[0] if len(matches) == 1 else None

    def launch(self, compiled: Any, constexprs: tuple, grid: tuple[int, ...], args: tuple, constants: tuple) -> None:
        """A kernel launch of this call (``constants``: tensors passed as they are, never data)."""
        if not self.replayable:
            return
        template = list(args)
        dynamic = []
        for slot, value in enumerate(args):
            if not isinstance(value, torch.Tensor) or any(value is constant for constant in constants):
                continue
            source = self._source(value)
            if source is None:
                self.replayable = False
                return
            template[slot] = None
            dynamic.append((slot, source))
        self.steps.append(_Launch(compiled, constexprs, tuple(grid), tuple(template), tuple(dynamic)))

    def finish(self, result: Any) -> _Replay | None:
        if not self.replayable:
            return None
        is_tuple = isinstance(result, tuple)
        if is_tuple and type(result) is not tuple:
            return None
        views = []
        for tensor in result if is_tuple else (result,):
            if not isinstance(tensor, torch.Tensor):
                return None
            owners = [i for i, a in enumerate(self.allocations)
                      if a.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()]
            if len(owners) != 1:
                return None
            views.append(_ResultView(owners[0], tuple(tensor.shape), tensor.stride(), tensor.storage_offset()))
        return self._without_unused_allocations(views, is_tuple)

    def _without_unused_allocations(self, views: list[_ResultView], is_tuple: bool) -> _Replay:
        # allocations nothing reads back (a placeholder made during the call) are not repeated
        used = {view.allocation for view in views}
        for step in self.steps:
            if isinstance(step, _ZeroFill):
                used.add(step.allocation)
            elif isinstance(step, _Launch):
                used.update(source.index for _, source in step.dynamic if not source.from_input)
        kept = sorted(used)
        renumber = {old: new for new, old in enumerate(kept)}

        def moved(source: _Source) -> _Source:
            return source if source.from_input else dataclasses.replace(source, index=renumber[source.index])

        steps, allocation = [], 0
        for step in self.steps:
            if isinstance(step, _Allocation):
                if allocation in used:
                    steps.append(step)
                allocation += 1
            elif isinstance(step, _ZeroFill):
                steps.append(_ZeroFill(renumber[step.allocation]))
            else:
                steps.append(dataclasses.replace(step, dynamic=tuple((slot, moved(source))
                                                                     for slot, source in step.dynamic)))
        views = [dataclasses.replace(view, allocation=renumber[view.allocation]) for view in views]
        return _Replay(steps, views, is_tuple, [self.allocations[index] for index in kept])

    def __enter__(self) -> Self:
        _local.recording = self
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        _local.recording = None
        super().__exit__(*exc)


_all_replays: list[dict] = []


def clear() -> None:
    """Forget every recorded call (the next call of each signature is recorded again)."""
    for replays in _all_replays:
        replays.clear()


def replayable(function: Function) -> Function:
    """Decorate a public estimator: CUDA calls repeat the recorded work of an identical earlier call."""
    replays: dict[tuple, _Replay] = {}
    failed_recordings: dict[tuple, int] = {}
    _all_replays.extend((replays, failed_recordings))

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling() or _full_path_only():
            return function(*args, **kwargs)
        signature = _signature(args, kwargs)
        if signature is None:
            return function(*args, **kwargs)
        flat_args = (*args, *kwargs.values())
        replay = replays.get(signature)
        if replay is not None:
            return replay(flat_args)
        if (len(replays) >= MAX_SIGNATURES or active_recording() is not None
                or failed_recordings.get(signature, 0) >= MAX_FAILED_RECORDINGS):
            return function(*args, **kwargs)
        with _Recording(flat_args) as recording:
            result = function(*args, **kwargs)
        replay = recording.finish(result)
        if replay is not None:
            replays[signature] = replay
        elif not recording.worth_retrying and len(failed_recordings) < 16 * MAX_SIGNATURES:
            failed_recordings[signature] = failed_recordings.get(signature, 0) + 1
        return result

    call.replays = replays  # type: ignore[attr-defined]
    call.failed_recordings = failed_recordings  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]
