"""Which implementation runs a call: the Triton kernels or the PyTorch reference."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

from rl_triton import _checks

_BACKENDS = ("triton", "reference")
_forced_backend: contextvars.ContextVar[str | None] = contextvars.ContextVar("rl_triton_backend", default=None)


_interpreter_flag = _checks.environment_flag("TRITON_INTERPRET")


def interpreter_enabled() -> bool:
    """``TRITON_INTERPRET=1``: Triton kernels run on CPU tensors through Triton's interpreter."""
    return _interpreter_flag()


@contextlib.contextmanager
def use_backend(backend: str) -> Iterator[None]:
    """Run calls inside the block on ``backend`` ("triton" or "reference") instead of the default.

    The default is Triton for CUDA tensors and for CPU tensors under ``TRITON_INTERPRET=1``,
    the reference otherwise. Forcing "triton" on CPU tensors needs the interpreter.
    """
    if backend not in _BACKENDS:
        raise _checks.InputError(f"backend: expected one of {_BACKENDS}, got {backend!r}")
    token = _forced_backend.set(backend)
    try:
        yield
    finally:
        _forced_backend.reset(token)


def use_triton(device: torch.device) -> bool:
    forced = _forced_backend.get()
    # the common case, decided without reading the environment
    if forced is None and device.type == "cuda":
        return True
    triton_possible = device.type == "cuda" or (device.type == "cpu" and interpreter_enabled())
    if forced == "reference":
        return False
    if forced == "triton" and not triton_possible:
        raise _checks.InputError(
            f"backend 'triton' needs CUDA tensors, or CPU tensors with TRITON_INTERPRET=1; got device {device}"
        )
    if device.type not in ("cuda", "cpu"):
        raise _checks.InputError(f"tensors on {device.type} are not supported: expected cuda or cpu")
    return triton_possible
