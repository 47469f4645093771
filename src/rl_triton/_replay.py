"""Repeated CUDA calls skip the Python work of a call by replaying what an identical call did.

An estimator's Python (argument checks, layout, tile plan, kernel lookup) costs several times
what its kernels cost to launch, and a training loop calls it with the same shapes, strides,
dtypes and scalars every time. Every decision that Python takes depends on those properties
only, so a call whose properties were seen before repeats the recorded allocations and
kernel launches with its own data pointers.

A call is recorded while a ``TorchDispatchMode`` watches every tensor operation it runs. It is
kept only if everything it did can be repeated exactly: allocations, zero fills, views, and
kernel launches whose tensor arguments start at one of the call's input tensors (each at its
own address), inside one of its allocations, or are the library's placeholders or the stream's
look-back workspaces. Anything else (a dtype conversion, a copy, a host read of data, a launch
through Triton's own path) leaves the call unrecorded, so it always takes the full path. Calls that need gradients, run under ``torch.compile``, the correctness
flag, a forced backend, a tile override or Triton's interpreter or profiling hooks also take
the full path.

A replayed call costs finding its recording plus repeating it, and both are kept to a few
Python operations: each recording is one generated function (``_replay_function``) that checks
whether a call repeats it (its non-tensor arguments, its tensors' properties by one C++ check,
``_tensor_matcher``, their pointers' 16-byte alignment) and if so calls Triton's C launch
function with every argument written out (or, where ``rl_triton._packed_launch`` is on, launches
parameters packed when the call was recorded, passing only the call's pointers). A call tries the
recordings of calls that had as many positional arguments; each checks the call's keywords by name.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch.autograd import forward_ad as _forward_ad
from torch.utils._python_dispatch import TorchDispatchMode
from typing_extensions import Self

from rl_triton import _checks, _dispatch, _packed_launch

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
        _launch_module = _dispatch.kernels_module()
    return _launch_module


class _WithoutTriton:
    """Where Triton is not installed only the reference loops run, and no call has kernels to repeat."""

    @staticmethod
    def full_launch_path_only() -> bool:
        return True


def _launcher_or_stand_in():
    """``rl_triton._launch`` where Triton is installed (imported and kept), else ``_WithoutTriton``."""
    return _kernels() if _dispatch.triton_installed() else _WithoutTriton


def active_recording() -> _Recording | None:
    """The recording of the call running on this thread, if one is being recorded."""
    return getattr(_local, "recording", None)


def _signature(args: tuple, kwargs: dict) -> tuple | None:
    """Everything a call's Python decides on, or None if a call like this is never replayed."""
    parts: list = []
    on_cuda: torch.Tensor | None = None  # the first CUDA tensor
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            is_cuda = value.is_cuda  # (device.type costs five times as much)
            # a view with the negation bit is copied before its launch: never repeatable, so never recorded (its
            # failed recordings would count against plain tensors of the same signature)
            if value.requires_grad or not (is_cuda or REPLAY_ON_CPU) or value.is_neg():
                return None
            if is_cuda and on_cuda is None:
                on_cuda = value
            # 16-byte alignment is what Triton specialises pointers on
            parts.append((value.shape, value.stride(), value.dtype, value.device, value.data_ptr() & 15))
        elif value is None or isinstance(value, torch.dtype):
            parts.append(value)
        elif value.__class__ in _SCALARS:
            parts.append((value.__class__, value))
        else:
            return None
    if kwargs:
        parts.append(tuple(kwargs))
    if on_cuda is not None:
        # kernels launch on the current device and stream (whose look-back workspaces a recording may use);
        # a call whose tensors sit on another GPU launches on theirs, under a device guard that replays lack
        device = torch.cuda.current_device()
        if on_cuda.get_device() != device:
            return None
        parts += (device, torch._C._cuda_getCurrentRawStream(device))
    return tuple(parts)


class _PropertyMatcher:
    """Whether tensors have the recorded tensors' shapes, strides, dtypes, devices, negation bits and no
    gradient."""

    def __init__(self, *tensors: torch.Tensor) -> None:
        self.properties = [self._properties(tensor) for tensor in tensors]

    @staticmethod
    def _properties(tensor: torch.Tensor) -> tuple:
        return (tensor.shape, tensor.stride(), tensor.dtype, tensor.device, tensor.requires_grad, tensor.is_neg(),
                type(tensor))

    def check(self, *tensors: torch.Tensor) -> bool:
        return [self._properties(tensor) for tensor in tensors] == self.properties


def _tensor_matcher(tensors: list[torch.Tensor]) -> Any:
    """A matcher of ``tensors``' properties: PyTorch's C++ tensor guard where it exists.

    ``torch._C._dynamo.guards.TensorGuards`` checks dtype, device, sizes, strides, gradient and
    dispatch keys (so subclasses and inference tensors do not match) in about 0.2 us per tensor,
    against 1 us for reading them in Python. It must be given exactly as many tensors as it was
    built from, and only tensors (it crashes the process on anything else): the replay functions
    check both first. A PyTorch without it, or whose guard does not accept its own tensors, gets
    the same check in Python.
    """
    if _TensorGuards is None or not USE_TORCH_GUARDS:
        return _PropertyMatcher(*tensors)
    try:
        guards = _TensorGuards(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None)
        accepted = guards.check(*tensors)
    except Exception:  # noqa: BLE001 - any failure of a private API means: check in Python
        accepted = False
    return guards if accepted else _PropertyMatcher(*tensors)


try:
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # pragma: no cover - every PyTorch this library supports has it
    _TensorGuards = None
# tests switch this off to check the Python matcher
USE_TORCH_GUARDS = True


_transform_stack = _checks._transform_stack
# the correctness flag and the interpreter, read in one call (host time per call is the point of replays)
_full_path_flags = _checks.environment_flag("RL_TRITON_CORRECTNESS_WARNINGS", "TRITON_INTERPRET")


def _full_path_only() -> bool:
    """Whether global state asks for the full path (checked on every call, so the flags are read
    directly): a forced backend, the correctness flag, the interpreter, a forward-mode AD level or
    torch.func transform, Triton's launch path."""
    return (_dispatch._forced_backend.get() is not None or _full_path_flags()
            # a forward-mode AD level or a torch.func transform (``_checks.untransformed``)
            or _forward_ad._current_level >= 0 or _transform_stack() is not None
            or (_launch_module or _launcher_or_stand_in()).full_launch_path_only())


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
    # (the slots of the six workspace arguments, (the workspaces' key (device, stream, 0), the recording
    # thread's, that thread's id), their geometry): the look-back arguments and the clear's, taken at every
    # call from the calling thread's workspaces of that stream (``_launch._lookback_workspace``)
    workspace: tuple | None = None


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


def _dense_twin(allocation: _Allocation, tensors: list[torch.Tensor]) -> int | None:
    """The first of the call's tensors that ``torch.empty_like`` turns into this allocation.

    A replayed call's tensors have the recorded sizes, strides, dtypes and devices, so the
    answer holds for every call that replays: empty_like keeps the strides of a dense tensor.
    """
    for index, tensor in enumerate(tensors):
        if (tuple(tensor.shape) == allocation.size and tensor.stride() == allocation.stride
                and tensor.dtype == allocation.dtype and tensor.device == allocation.device
                and tensor.layout == torch.strided
                and torch.empty_like(tensor, device="meta").stride() == allocation.stride):
            return index
    return None


def _dense(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Whether a (size, stride) view puts every element at a distinct address of a gapless block
    that starts at its first element (some order of its dimensions is row-major)."""
    expected = 1
    for step, length in sorted((step, length) for length, step in zip(size, stride, strict=True) if length != 1):
        if step != expected:
            return False
        expected *= length
    return True


def _reallocated_as_views(steps: list, result: list[_ResultView]) -> dict[int, _Allocation]:
    """Allocations to make directly in the geometry of the one output that views them.

    An output qualifies if it is the only output of its allocation, starts where it starts, and
    both are dense (``_dense``) with as many elements: the same bytes at the same addresses.
    """
    views_of: dict[int, list[_ResultView]] = {}
    for view in result:
        views_of.setdefault(view.allocation, []).append(view)
    allocation_steps = [step for step in steps if isinstance(step, _Allocation)]
    reshaped = {}
    for index, views in views_of.items():
        step, view = allocation_steps[index], views[0]
        if len(views) != 1 or step.zeroed:  # zeros() allocates row-major
            continue
        if (view.storage_offset == 0 and math.prod(view.size) == math.prod(step.size)
                and _dense(view.size, view.stride) and _dense(step.size, step.stride)):
            reshaped[index] = dataclasses.replace(step, size=view.size, stride=view.stride)
    return reshaped


# the allocators a replay calls, by the names its generated code gives them
_ALLOCATORS = {"_empty_strided": torch.empty_strided, "_empty_like": torch.empty_like, "_zeros": torch.zeros}


def _triton_launch_line(step: _Launch, changing: dict[int, str], bind: Callable[[object], str],
                        launchers: list[str]) -> str:
    """The line of a generated replay that launches ``step`` through Triton's C launch function, every argument
    written out (``changing``: the expressions of the arguments that change from call to call, by slot)."""
    args = [changing[slot] if slot in changing else bind(value) for slot, value in enumerate(step.template)]
    direct = _kernels().direct_launch(step.compiled, step.grid)
    if direct is None:
        launch = bind(_kernels().replay_launcher(step.compiled, step.constexprs, step.grid))
        launchers.append(launch)
        return f"{launch}(stream, [{', '.join(args)}])"
    c_launch, grid, fixed = direct
    head = [bind(c_launch), *map(bind, grid), "stream", *map(bind, fixed)]
    launchers.append(head[0])
    return f"{head[0]}({', '.join([*head[1:], *args, *map(bind, step.constexprs)])})"


def _replay_function(steps: list, result: list[_ResultView], is_tuple: bool, allocations: list[torch.Tensor],
                     flat_args: tuple, keywords: tuple[str, ...], device: int | None,
                     stream: int | None = None) -> Callable:
    """The recorded call as one Python function ``replay(args, kwargs)`` of a new call's positional
    and keyword arguments, for calls with as many positional arguments as the recorded one
    (``flat_args``: its positional arguments, then the values of its ``keywords``). It returns
    the call's result if the call repeats the recorded one, and None if it does not. A call whose
    launch takes a stream's look-back workspaces (``stream``) repeats only on that stream, outside graph
    capture.

    Keyword arguments are taken by name, in any order: on a 2-core CPU (launches faked) a V-trace or GAE
    call with keywords took 0.5-0.9 us less than when each call built a flat tuple of its arguments
    and a key of its keyword names to find its replays.

    A call repeats the recorded one if its non-tensor arguments are equal (and of the same type),
    its tensors have the recorded properties (``_tensor_matcher``) and their pointers' 16-byte
    alignment, and the current device is the recorded one. The function is generated, with every
    recorded value bound to a name: a loop over recorded steps that builds each launch's
    arguments costs more than the launch itself; here the checks are written out, and so are the
    arguments in each call to Triton's C launch function (or, for packed launches, only the
    arguments that change from call to call).
    """
    names: dict[str, object] = {"_Tensor": torch.Tensor, **_ALLOCATORS}

    def bind(value: object) -> str:
        if value is None or value.__class__ in (int, bool):
            return repr(value)
        name = f"_v{len(names)}"
        names[name] = value
        return name

    tensor_positions = [position for position, value in enumerate(flat_args) if isinstance(value, torch.Tensor)]
    tensors = [flat_args[position] for position in tensor_positions]
    tensor_index = {position: index for index, position in enumerate(tensor_positions)}
    variables = [f"t{tensor_index[position]}" if position in tensor_index else f"s{position}"
                 for position in range(len(flat_args))]
    positional = len(flat_args) - len(keywords)
    lines = ["def replay(args, kwargs):"]
    if positional:
        lines.append(f"    {', '.join(variables[:positional])}, = args")
    if keywords:
        lines += [f"    if len(kwargs) != {len(keywords)}: return None", "    try:"]
        lines += [f"        {variable} = kwargs[{name!r}]" for variable, name in zip(variables[positional:], keywords,
                                                                                      strict=True)]
        lines += ["    except KeyError:", "        return None"]
    else:
        lines.append("    if kwargs: return None")
    # only tensors may reach the matcher (PyTorch's crashes on anything else): exactly torch.Tensor
    if tensors:
        lines.append(f"    if {' or '.join(f'{t}.__class__ is not _Tensor' for t in variables if t[0] == 't')}: "
                     "return None")
    for position, value in enumerate(flat_args):
        if position in tensor_index:
            continue
        if value is None or isinstance(value, torch.dtype):
            lines.append(f"    if s{position} is not {bind(value)}: return None")
        else:  # 1, 1.0 and True are equal: compare the type too
            lines.append(f"    if s{position}.__class__ is not {bind(value.__class__)} or s{position} != "
                         f"{bind(value)}: return None")
    count = len(tensors)
    matcher = _tensor_matcher(tensors)
    if count:
        lines.append(f"    if not {bind(matcher.check)}({', '.join(f't{i}' for i in range(count))}): return None")
    alignments = tuple(tensor.data_ptr() & 15 for tensor in tensors)
    pointers = [f"p{index}" for index in range(count)]
    lines += [f"    p{index} = t{index}.data_ptr()" for index in range(count)]
    if count and not any(alignments):
        lines.append(f"    if ({' | '.join(pointers)}) & 15: return None")
    elif count:
        lines.append(f"    if ({', '.join(f'{p} & 15' for p in pointers)},) != {alignments!r}: return None")
    if device is None:
        lines.append("    stream = 0")
    else:
        names["_current_device"] = torch._C._cuda_getDevice
        names["_current_stream"] = torch._C._cuda_getCurrentRawStream
        # kernels launch on the current device
        lines.append(f"    if _current_device() != {device}: return None")
        lines.append(f"    stream = _current_stream({device})")
        if stream is not None:
            names["_capturing"] = torch._C._cuda_isCurrentStreamCapturing
            lines.append(f"    if stream != {stream} or _capturing(): return None")
    # an output that is a whole allocation seen through other strides (a transpose, batch dims) is
    # allocated with the output's own strides: the kernels see the same addresses, and the replay
    # skips an ``as_strided`` and may use ``empty_like``
    reshaped = _reallocated_as_views(steps, result)
    allocation = 0
    launchers = []
    for step in steps:
        if isinstance(step, _Allocation):
            step = reshaped.get(allocation, step)
            if step.zeroed:
                lines.append(f"    a{allocation} = _zeros({bind(step.size)}, dtype={bind(step.dtype)}, "
                             f"device={bind(step.device)})")
            elif (like := _dense_twin(step, tensors)) is not None:
                # empty_like takes a third less host time than empty_strided
                lines.append(f"    a{allocation} = _empty_like(t{like})")
            else:
                lines.append(f"    a{allocation} = _empty_strided({bind(step.size)}, {bind(step.stride)}, "
                             f"dtype={bind(step.dtype)}, device={bind(step.device)})")
            lines.append(f"    q{allocation} = a{allocation}.data_ptr()")
            allocation += 1
        elif isinstance(step, _ZeroFill):
            lines.append(f"    a{step.allocation}.zero_()")
        else:
            # each argument that changes from call to call (a pointer into the call's tensors, a look-back
            # workspace's) as the expression that computes it, by its slot
            changing: dict[int, str] = {}
            for slot, source in step.dynamic:
                base = f"p{tensor_index[source.index]}" if source.from_input else f"q{source.index}"
                changing[slot] = f"{base} + {source.byte_offset}" if source.byte_offset else base
            if step.workspace is not None:
                # the calling thread's workspaces of the recording's stream: the recording thread's at hand
                slots, (key, workspaces, thread), geometry = step.workspace
                names["_thread"] = threading.get_ident
                names["_stream_workspaces"] = _kernels()._stream_workspaces
                lines.append(f"    ws = {bind(workspaces)} if _thread() == {thread} else _stream_workspaces({bind(key)})")
                lines.append(f"    w = {bind(geometry.pointers)}(ws)")
                changing.update((slot, f"w[{index}]") for index, slot in enumerate(slots))
            changing_slots = sorted(changing)
            packed = None if device is None else _packed_launch.packed_launch(
                step.compiled, device, step.grid, (*step.template, *step.constexprs), changing_slots)
            if packed is not None:
                launch_packed, parameters = packed
                launchers.append(bind(launch_packed))
                lines.append(f"    {launchers[-1]}({bind(parameters)}, stream, "
                             f"{', '.join(changing[slot] for slot in changing_slots)})")
            else:
                lines.append("    " + _triton_launch_line(step, changing, bind, launchers))
            if step.workspace is not None:
                lines.append("    ws.cleared(w[6], w[5])")
    outputs = []
    for view in result:
        whole = allocations[view.allocation]
        if view.allocation in reshaped or (view.size == tuple(whole.shape) and view.stride == whole.stride()
                                           and view.storage_offset == 0):
            outputs.append(f"a{view.allocation}")
        else:
            outputs.append(f"a{view.allocation}.as_strided({bind(view.size)}, {bind(view.stride)}, "
                           f"{view.storage_offset})")
    lines.append(f"    return ({', '.join(outputs)},)" if is_tuple else f"    return {outputs[0]}")
    source = "\n".join(lines)
    exec(compile(source, "<rl_triton replay>", "exec"), names)  # noqa: S102 - source built above
    function = names["replay"]
    function.source = source  # type: ignore[attr-defined]
    function.matcher = matcher  # type: ignore[attr-defined]
    # the global names of its launch functions and allocators (benchmarks/host_cost.py --parts times it without them)
    function.launchers = tuple(launchers)  # type: ignore[attr-defined]
    function.allocators = tuple(_ALLOCATORS)  # type: ignore[attr-defined]
    return function


class _Recording(TorchDispatchMode):
    """Watches one call; ``finish`` turns what it saw into a replay, or None."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Unless a mode opts out, PyTorch wraps its ``__torch_dispatch__`` to keep Dynamo out of it, and
        # the wrapper imports ``torch._dynamo`` (1-3 s) when it first runs: in a process's first call.
        # A recording never runs under torch.compile (those calls take the full path).
        return False

    def __init__(self, flat_args: tuple, keywords: tuple[str, ...] = ()) -> None:
        super().__init__()
        # the call's positional arguments, then the values of its keyword arguments ``keywords``
        self.flat_args = flat_args
        self.keywords = keywords
        self.steps: list = []
        self.allocations: list[torch.Tensor] = []
        self.replayable = True
        # whether an identical call may be replayable later (this one only compiled a kernel)
        self.worth_retrying = False
        # the look-back workspaces of the stream that the next split launch takes (with its arguments), and
        # the stream: replays run on that stream only, never under graph capture, and take them afresh
        self.workspace: tuple | None = None
        self.stream: int | None = None

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

    def use_workspace(self, key: tuple, workspaces: Any, geometry: Any, arguments: tuple) -> None:
        """The next launch takes ``arguments`` from this thread's look-back ``workspaces`` of ``key`` (device,
        stream, capture 0); each thread keeps its own (``_launch._stream_workspaces``)."""
        if self.stream is not None and self.stream != key[1]:
            self.abandon()
        self.stream = key[1]
        self.workspace = ((key, workspaces, threading.get_ident()), geometry, arguments)

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

    @staticmethod
    def _workspace_slots(args: tuple, arguments: tuple) -> tuple[int, ...] | None:
        """Where a launch takes the workspace ``arguments`` (``_launch._lookback_workspace``): the four
        look-back ones side by side, the clear's two (a tensor, its count) after them, side by side."""
        first = next((slot for slot, value in enumerate(args) if value is arguments[0]), None)
        if first is None or any(args[first + i] is not value for i, value in enumerate(arguments[:4])):
            return None
        spent = next((slot for slot in range(first + 4, len(args) - 1) if args[slot] is arguments[4]), None)
        if spent is None or args[spent + 1].__class__ is not int or args[spent + 1] != arguments[5]:
            return None
        return (first, first + 1, first + 2, first + 3, spent, spent + 1)

    def launch(self, compiled: Any, constexprs: tuple, grid: tuple[int, ...], args: tuple, constants: tuple) -> None:
        """A kernel launch of this call (``constants``: tensors passed as they are, never data)."""
        if not self.replayable:
            return
        template = list(args)
        dynamic = []
        workspace = None
        if self.workspace is not None:
            taken_from, geometry, arguments = self.workspace
            self.workspace = None
            slots = self._workspace_slots(args, arguments)
            if slots is None:
                self.replayable = False
                return
            workspace = (slots, taken_from, geometry)
            for slot in slots:
                template[slot] = None
        for slot, value in enumerate(args):
            if workspace is not None and slot in workspace[0]:
                continue
            if not isinstance(value, torch.Tensor):
                continue
            if any(value is constant for constant in constants):
                template[slot] = value.data_ptr()  # the same tensor for every call: its pointer
                continue
            source = self._source(value)
            if source is None:
                self.replayable = False
                return
            template[slot] = None
            dynamic.append((slot, source))
        self.steps.append(_Launch(compiled, constexprs, tuple(grid), tuple(template), tuple(dynamic), workspace))

    def finish(self, result: Any) -> Callable | None:
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

    def _without_unused_allocations(self, views: list[_ResultView], is_tuple: bool) -> Callable:
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
        device = torch.cuda.current_device() if any(
            isinstance(value, torch.Tensor) and value.is_cuda for value in self.flat_args) else None
        return _replay_function(steps, views, is_tuple, [self.allocations[index] for index in kept],
                                self.flat_args, self.keywords, device, self.stream)

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
    replays: dict[tuple, Callable] = {}  # by signature
    # by number of positional arguments: the replays a call may repeat, each a function of the call's
    # positional and keyword arguments that returns the call's result or None
    candidates: dict[int, list[Callable]] = {}
    failed_recordings: dict[tuple, int] = {}
    _all_replays.extend((replays, candidates, failed_recordings))

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return function(*args, **kwargs)
        if _full_path_only():
            # (inline: in code that torch.compile runs eagerly after a graph break, Dynamo would try to trace
            # a function called here, and warn that it cannot trace torch.func's C functions)
            if _forward_ad._current_level >= 0 or _transform_stack() is not None:
                _checks.untransformed(function, args, kwargs)
            return function(*args, **kwargs)
        for replay in candidates.get(len(args), ()):
            result = replay(args, kwargs)
            if result is not None:
                return result
        signature = _signature(args, kwargs)
        if signature is None:
            return function(*args, **kwargs)
        failed = failed_recordings.get(signature, 0)
        if signature in replays and failed < MAX_FAILED_RECORDINGS:
            # recorded, yet not repeated: the recording's matcher rejects what the signature
            # accepts (a tensor subclass, inference tensors); a few recordings, then the full path
            failed = failed_recordings[signature] = failed + 1
        if len(replays) >= MAX_SIGNATURES or active_recording() is not None or failed >= MAX_FAILED_RECORDINGS:
            return function(*args, **kwargs)
        with _Recording((*args, *kwargs.values()), tuple(kwargs)) as recording:
            result = function(*args, **kwargs)
        replay = recording.finish(result)
        if replay is not None:
            replays[signature] = replay
            candidates.setdefault(len(args), []).append(replay)
        elif not recording.worth_retrying and len(failed_recordings) < 16 * MAX_SIGNATURES:
            failed_recordings[signature] = failed_recordings.get(signature, 0) + 1
        return result

    call.replays = replays  # type: ignore[attr-defined]
    call.candidates = candidates  # type: ignore[attr-defined]
    call.failed_recordings = failed_recordings  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]
