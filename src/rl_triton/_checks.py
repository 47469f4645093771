"""Input validation shared by every estimator: clear exceptions naming the argument."""

from __future__ import annotations

import math
import os

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
FLAG_DTYPES = (torch.bool, torch.uint8, torch.int8, *FLOAT_DTYPES)
INDEX_DTYPES = (torch.int32, torch.int64, torch.int16, torch.uint8)


class InputError(ValueError, AssertionError):
    """Bad argument value, shape, device or combination.

    Derives from ``AssertionError`` too, so code written against implementations that
    validated with ``assert`` keeps catching it.
    """


class InputTypeError(TypeError, AssertionError):
    """Argument of the wrong type or dtype (also an ``AssertionError``, see ``InputError``)."""


def correctness_checks_enabled() -> bool:
    """Data-dependent checks run when ``RL_TRITON_CORRECTNESS_WARNINGS=1``; they synchronise the device.

    Never while torch.compile traces: a host synchronisation has no place in a compiled graph.
    """
    if torch.compiler.is_compiling():
        return False
    return os.environ.get("RL_TRITON_CORRECTNESS_WARNINGS", "0") not in ("", "0")


def _dtype_names(dtypes: tuple[torch.dtype, ...]) -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in dtypes)


def tensor(name: str, value: object, dtypes: tuple[torch.dtype, ...]) -> torch.Tensor:
    """``value`` as a tensor of one of ``dtypes``, or InputTypeError."""
    if not isinstance(value, torch.Tensor):
        raise InputTypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in dtypes:
        raise InputTypeError(
            f"{name}: expected dtype in ({_dtype_names(dtypes)}), got {str(value.dtype).removeprefix('torch.')}"
        )
    return value


def same_shape(name: str, value: torch.Tensor, shape: torch.Size, reference_name: str) -> None:
    if value.shape != shape:
        raise InputError(
            f"{name}: expected shape {tuple(shape)} (the shape of {reference_name}), got {tuple(value.shape)}"
        )


def same_device(name: str, value: torch.Tensor, device: torch.device, reference_name: str) -> None:
    if value.device != device:
        raise InputError(f"{name}: expected device {device} (the device of {reference_name}), got {value.device}")


def matching(
    name: str,
    value: object,
    dtypes: tuple[torch.dtype, ...],
    like: torch.Tensor,
    like_name: str,
    shape: torch.Size | None = None,
) -> torch.Tensor:
    """A tensor of ``dtypes`` on ``like``'s device with ``shape`` (default: ``like.shape``)."""
    value = tensor(name, value, dtypes)
    same_shape(name, value, like.shape if shape is None else shape, like_name)
    same_device(name, value, like.device, like_name)
    return value


def scalar(name: str, value: object, low: float = 0.0, high: float = math.inf, include_inf: bool = False) -> float:
    """A real number in ``[low, high]`` as a Python float, or InputError/InputTypeError.

    While torch.compile traces, floats are symbolic graph inputs (so new values do not recompile)
    and pass unchecked.
    """
    if torch.compiler.is_compiling():
        return value  # type: ignore[return-value]
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise InputTypeError(f"{name}: expected a number, got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputTypeError(f"{name}: expected a float, got {type(value).__name__}")
    number = float(value)
    finite_ok = math.isfinite(number) or (include_inf and number == math.inf)
    if not finite_ok or not low <= number <= high:
        bound = "inf" if include_inf and high == math.inf else f"{high:g}"
        raise InputError(f"{name}: expected a value in [{low:g}, {bound}], got {value!r}")
    return number


def time_dim(value: object, ndim: int) -> int:
    """A valid ``time_dim`` for ``ndim``-dimensional inputs, made non-negative."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputTypeError(f"time_dim: expected an int, got {type(value).__name__}")
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


def check_flags_exclusive(terminateds: torch.Tensor, truncateds: torch.Tensor | None) -> None:
    if truncateds is None:
        return
    both = (terminateds != 0) & (truncateds != 0)
    if bool(both.any()):
        count = int(both.sum())
        raise InputError(
            f"terminateds and truncateds: a step cannot be both terminated and truncated; {count} step(s) are"
        )


def check_bootstrap_placement(
    bootstrap_values: torch.Tensor | None, truncateds: torch.Tensor | None, time_dim: int
) -> None:
    """bootstrap_values may be non-zero only at truncated steps and in the last column."""
    if bootstrap_values is None:
        return
    stray = bootstrap_values != 0
    if truncateds is not None:
        stray = stray & (truncateds == 0)
    stray = stray.narrow(time_dim, 0, bootstrap_values.shape[time_dim] - 1)
    if bool(stray.any()):
        count = int(stray.sum())
        raise InputError(
            f"bootstrap_values: expected zeros at non-truncated steps before the last column, found {count} "
            "non-zero value(s); they would be added to the next-state value there (see docs/conventions.md)"
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


def check_finite(name: str, value: torch.Tensor) -> None:
    bad = ~torch.isfinite(value)
    if bool(bad.any()):
        raise InputError(f"{name}: expected finite values, found {int(bad.sum())} NaN or infinite value(s)")
