"""Input validation shared by every estimator: clear exceptions naming the argument.

Every check runs on every call, so each is written for the passing case first: a few attribute
reads and comparisons, with the message built only when the check fails.
"""

from __future__ import annotations

import inspect
import math
import numbers
import operator
import os
from collections.abc import Callable

import torch
import torch.autograd.forward_ad as _forward_ad


class DtypeSet(frozenset):
    """Accepted dtypes, in the order error messages list them (``ordered``).

    A frozenset because membership is tested on every call: one hash lookup instead of a scan.
    """

    __slots__ = ("ordered",)
    ordered: tuple[torch.dtype, ...]


def _dtype_set(*dtypes: torch.dtype) -> DtypeSet:
    accepted = DtypeSet(dtypes)
    accepted.ordered = dtypes
    return accepted


FLOAT_DTYPES = _dtype_set(torch.float16, torch.bfloat16, torch.float32, torch.float64)
FLAG_DTYPES = _dtype_set(torch.bool, torch.uint8, torch.int8, *FLOAT_DTYPES.ordered)
INDEX_DTYPES = _dtype_set(torch.int32, torch.int64, torch.int16, torch.uint8)

_INF = math.inf


class InputError(ValueError, AssertionError):
    """Bad argument value, shape, device or combination.

    Derives from ``AssertionError`` too, so code written against implementations that
    validated with ``assert`` keeps catching it.
    """


class InputTypeError(TypeError, AssertionError):
    """Argument of the wrong type or dtype (also an ``AssertionError``, see ``InputError``)."""


# values that set a flag, in any case, as Triton reads its own (``triton.knobs``): "false", "off" or "0" do not
_TRUE_VALUES = ("1", "true", "yes", "on", "y")


def environment_flag(*names: str) -> Callable[[], bool]:
    """A reader of the flags ``names`` (each set where its value, in lower case, is 1, true, yes, on or y):
    whether any is set. It sees later changes.

    ``os.environ.get`` costs about a microsecond per call (the key is encoded again each time),
    as much as a quarter of a whole estimator call; the dict behind ``os.environ`` answers in tens of
    nanoseconds. Falls back to ``os.environ.get`` if ``os.environ`` is not CPython's own mapping
    or has been replaced since.
    """
    environ = os.environ
    data = getattr(environ, "_data", None)
    encode_key = getattr(environ, "encodekey", None)
    decode_value = getattr(environ, "decodevalue", None)

    def means_set(value: str) -> bool:
        return value.lower() in _TRUE_VALUES

    def any_set_in_mapping() -> bool:
        return any(means_set(os.environ.get(name, "0")) for name in names)

    if not isinstance(data, dict) or encode_key is None or decode_value is None:
        return any_set_in_mapping
    keys = tuple(encode_key(name) for name in names)

    def is_set() -> bool:
        if os.environ is not environ:
            return any_set_in_mapping()
        for key in keys:
            raw = data.get(key)
            if raw is not None and means_set(decode_value(raw)):
                return True
        return False

    return is_set


_correctness_flag = environment_flag("RL_TRITON_CORRECTNESS_WARNINGS")


def correctness_checks_enabled(compiling: bool | None = None) -> bool:
    """Data-dependent checks run when ``RL_TRITON_CORRECTNESS_WARNINGS=1``; they synchronise the device.

    Never while torch.compile traces: a host synchronisation has no place in a compiled graph.
    ``compiling`` is ``torch.compiler.is_compiling()`` when the caller already knows it.
    """
    if torch.compiler.is_compiling() if compiling is None else compiling:
        return False
    return _correctness_flag()


def _dtype_names(dtypes: DtypeSet) -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in dtypes.ordered)


def tensor(name: str, value: object, dtypes: DtypeSet) -> torch.Tensor:
    """``value`` as a dense (strided) tensor of one of ``dtypes``, or InputTypeError."""
    if isinstance(value, torch.Tensor) and value.dtype in dtypes and value.layout is torch.strided:
        return value
    if not isinstance(value, torch.Tensor):
        raise InputTypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if value.layout is not torch.strided:
        # the kernels read memory through strides; sparse and mkldnn tensors have none
        raise InputTypeError(f"{name}: expected a dense tensor (layout torch.strided), got {value.layout}")
    raise InputTypeError(
        f"{name}: expected dtype in ({_dtype_names(dtypes)}), got {str(value.dtype).removeprefix('torch.')}"
    )


# the stack of active torch.func transforms (vmap, grad, jvp, ...): None when there is none
_transform_stack = torch._C._functorch.peek_interpreter_stack


def untransformed(function: Callable, args: tuple, kwargs: dict) -> None:
    """InputTypeError where a tensor argument of ``function`` carries a forward-mode tangent or is wrapped by a
    torch.func transform. The kernels and the reference loops read plain values: a dual tensor's tangent would
    be dropped without a word, and a wrapped tensor fails deep inside. Called while a forward-mode AD level or a
    transform is active; such calls take the full path (``rl_triton._replay``)."""
    names = [*list(inspect.signature(function).parameters)[: len(args)], *kwargs]
    for name, value in zip(names, (*args, *kwargs.values())):
        if not isinstance(value, torch.Tensor):
            continue
        if torch._C._functorch.is_functorch_wrapped_tensor(value):
            raise InputTypeError(f"{name}: torch.func transforms (vmap, grad, jvp, ...) are not supported; pass batches "
                                 "as leading dims ([*batch, T]) and differentiate with torch.autograd")
        if _forward_ad._current_level >= 0 and _forward_ad.unpack_dual(value).tangent is not None:
            raise InputTypeError(f"{name}: forward-mode AD is not supported (the tangent of a dual tensor would be "
                                 "lost); differentiate in reverse mode (torch.autograd.grad or .backward())")
    # under torch.func.grad or jvp (at any depth) even a new tensor is wrapped: the call's outputs and
    # workspaces would be, and a wrapped workspace kept for later calls would break them too
    if _transform_stack() is not None and torch._C._functorch.is_functorch_wrapped_tensor(torch.empty(0)):
        raise InputTypeError("calls inside torch.func.grad or jvp are not supported, even on plain tensors (the "
                             "tensors they make would be wrapped); call the estimator outside the transform")


def without_negative_views(values: tuple) -> tuple:
    """``values`` with each tensor that carries PyTorch's lazy negation bit (a view such as ``x.conj().imag``
    of a complex ``x``) resolved, by a copy: the kernels read memory, where such a view's values are
    stored negated. Called where the kernels are launched (eagerly, as an op's implementation, in backward)."""
    for value in values:
        if isinstance(value, torch.Tensor) and value.is_neg():
            return tuple(item.resolve_neg() if isinstance(item, torch.Tensor) else item for item in values)
    return values


def same_shape(name: str, value: torch.Tensor, shape: torch.Size, reference_name: str, *, per_row: bool = False) -> None:
    if value.shape != shape:
        if per_row:
            what = f"the batch shape of {reference_name}, without its time dimension"
        else:
            what = f"the shape of {reference_name}"
        raise InputError(f"{name}: expected shape {tuple(shape)} ({what}), got {tuple(value.shape)}")


def same_device(name: str, value: torch.Tensor, device: torch.device, reference_name: str) -> None:
    if value.device != device:
        raise InputError(f"{name}: expected device {device} (the device of {reference_name}), got {value.device}")


def matching(
    name: str,
    value: object,
    dtypes: DtypeSet,
    shape: torch.Size,
    device: torch.device,
    reference_name: str,
    *,
    per_row: bool = False,
) -> torch.Tensor:
    """A dense tensor of ``dtypes`` of ``shape`` on ``device`` (those of the argument ``reference_name``;
    ``per_row``: ``shape`` is its batch shape, one value per row).

    Failures are reported in the order type, layout, dtype, shape, device.
    """
    if (
        isinstance(value, torch.Tensor)
        and value.dtype in dtypes
        and value.shape == shape
        and value.device == device
        and value.layout is torch.strided
    ):
        return value
    value = tensor(name, value, dtypes)
    same_shape(name, value, shape, reference_name, per_row=per_row)
    same_device(name, value, device, reference_name)
    return value


def optional_matching(
    name: str,
    value: object,
    dtypes: DtypeSet,
    shape: torch.Size,
    device: torch.device,
    reference_name: str,
) -> torch.Tensor | None:
    """None, or ``matching(...)``."""
    return None if value is None else matching(name, value, dtypes, shape, device, reference_name)


def scalar(
    name: str,
    value: object,
    low: float = 0.0,
    high: float = math.inf,
    include_inf: bool = False,
    compiling: bool | None = None,
) -> float:
    """A real number in ``[low, high]`` as a Python float, or InputError/InputTypeError.

    Eagerly: Python and NumPy numbers, and tensors of one element that do not require gradients (read
    as numbers: no gradient reaches them). While torch.compile traces, a Python number is a constant of
    the graph (floats passed to custom ops are specialised) and is checked the same way; a tensor's
    value is unknown there, so it is rejected.
    ``compiling`` is ``torch.compiler.is_compiling()`` when the caller already knows it.
    """
    # the common case, a finite float in range (NaN fails the comparisons and takes the long way)
    if type(value) is float and low <= value <= high and value != _INF:
        return value
    if compiling is None:
        compiling = torch.compiler.is_compiling()
    if isinstance(value, torch.Tensor):
        if compiling:
            raise InputTypeError(f"{name}: expected a number while torch.compile traces, got a tensor")
        if value.numel() != 1:
            raise InputTypeError(f"{name}: expected a number, got a tensor of shape {tuple(value.shape)}")
        if value.is_meta:
            raise InputTypeError(f"{name}: expected a number, got a tensor on the meta device, which holds no value")
        if value.requires_grad and torch.is_grad_enabled():
            raise InputError(f"{name}: gradients with respect to {name} are not computed; pass a number or a "
                             "tensor that does not require gradients")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputTypeError(f"{name}: expected a float, got {type(value).__name__}")
    number = float(value)
    # NaN fails the comparisons, and -inf the first (low is finite)
    if not (low <= number <= high and (include_inf or number != _INF)):
        bound = "inf" if include_inf and high == math.inf else f"{high:g}"
        # (Dynamo cannot format a symbolic number; without fullgraph, the call then runs eagerly and says it)
        got = "" if compiling else f", got {number!r}"
        raise InputError(f"{name}: expected a value in [{low:g}, {bound}]{got}")
    return number


def time_dim(value: object, ndim: int) -> int:
    """A valid ``time_dim`` for ``ndim``-dimensional inputs, made non-negative."""
    # bool is a subclass of int but not a valid dimension; NumPy integers are Integral, not int
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise InputTypeError(f"time_dim: expected an int, got {type(value).__name__}")
        value = operator.index(value)
    if not -ndim <= value < ndim:
        raise InputError(f"time_dim: expected a value in [{-ndim}, {ndim - 1}] for {ndim}-d inputs, got {value}")
    return value % ndim


def out_dtype(value: object, default: torch.dtype) -> torch.dtype:
    if value is None:
        return default
    if not isinstance(value, torch.dtype) or value not in FLOAT_DTYPES:
        raise InputTypeError(f"out_dtype: expected one of ({_dtype_names(FLOAT_DTYPES)}), got {value!r}")
    return value


def exclusive(name_a: str, a: object, name_b: str, b: object, hint: str) -> None:
    if a is not None and b is not None:
        raise InputError(f"pass either {name_a} or {name_b}, not both: {hint}")


# Data-dependent checks: one implementation, used identically by every estimator.


def check_flags_zero_or_one(name: str, flags: torch.Tensor | None) -> None:
    """Floating flags hold 0 or 1. Any non-zero value counts as set, so a per-step discount passed as a flag
    (rlax's ``discount_t = gamma * (1 - terminated)``) would flag every step but the terminal ones, without
    a word; bool and integer flags are left as they are (a non-zero count is a plain "set")."""
    if flags is None or not flags.is_floating_point():
        return
    other = (flags != 0) & (flags != 1)
    if bool(other.any()):
        count, example = int(other.sum()), float(flags[other][0])
        raise InputError(
            f"{name}: expected floating flags of 0 or 1, found {count} other value(s), such as {example:g}; any "
            "non-zero value counts as set, so a per-step discount passed as a flag sets it at every step but the "
            "terminal ones (for rlax's discount_t pass discount_t == 0; see docs/conventions.md)"
        )


def check_flags(terminateds: torch.Tensor, truncateds: torch.Tensor | None) -> None:
    """Floating flags hold 0 or 1, and no step is both terminated and truncated."""
    check_flags_zero_or_one("terminateds", terminateds)
    check_flags_zero_or_one("truncateds", truncateds)
    if truncateds is None:
        return
    both = (terminateds != 0) & (truncateds != 0)
    if bool(both.any()):
        count = int(both.sum())
        raise InputError(
            f"terminateds and truncateds: a step cannot be both terminated and truncated; {count} step(s) are"
        )


def check_bootstrap_placement(
    bootstrap_values: torch.Tensor | None, truncateds: torch.Tensor | None, time_dim: int, *, added: bool
) -> None:
    """bootstrap_values may be non-zero only at truncated steps and in the last column.

    ``added``: whether a stray value enters the recurrence (GAE and V-trace add it to the next
    state's value) or is ignored (the returns take a bootstrap value only at truncated steps and
    in the last column); either way it is almost certainly a mistake in the caller's buffer.
    """
    if bootstrap_values is None:
        return
    stray = bootstrap_values != 0
    if truncateds is not None:
        stray = stray & (truncateds == 0)
    stray = stray.narrow(time_dim, 0, max(bootstrap_values.shape[time_dim] - 1, 0))
    if bool(stray.any()):
        count = int(stray.sum())
        effect = "added to the next-state value there" if added else "ignored there"
        raise InputError(
            f"bootstrap_values: expected zeros at non-truncated steps before the last column, found {count} "
            f"non-zero value(s); they would be {effect} (see docs/conventions.md)"
        )


def check_action_indices(actions: torch.Tensor, num_actions: int) -> None:
    bad = (actions < 0) | (actions >= num_actions)
    if bool(bad.any()):
        low, high = int(actions.min()), int(actions.max())
        raise InputError(f"actions: expected indices in [0, {num_actions - 1}], got values in [{low}, {high}]")


def check_positive(name: str, value: torch.Tensor) -> None:
    bad = ~(value > 0)
    if bool(bad.any()):
        raise InputError(f"{name}: expected probabilities > 0, found {int(bad.sum())} value(s) <= 0 or NaN")


def check_log_probabilities(name: str, value: torch.Tensor, *, zero_allowed: bool) -> None:
    """NaN and +inf are never log-probabilities; -inf (probability 0) is one only where ``zero_allowed``."""
    bad = torch.isnan(value) | (value == math.inf)
    if not zero_allowed:
        bad |= value == -math.inf
    if bool(bad.any()):
        allowed = "finite or -inf (probability 0)" if zero_allowed else "finite"
        raise InputError(
            f"{name}: expected log-probabilities, {allowed}; found {int(bad.sum())} NaN or infinite value(s)"
        )
