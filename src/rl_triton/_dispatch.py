"""Which implementation runs a call: the Triton kernels or the PyTorch reference."""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import sys
from collections.abc import Iterator

import torch

from rl_triton import _checks

_BACKENDS = ("triton", "reference")
_forced_backend: contextvars.ContextVar[str | None] = contextvars.ContextVar("rl_triton_backend", default=None)


# read as Triton reads it (``triton.knobs``: 1, true, yes, on or y, in any case), which decides whether the
# kernels are interpreted
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


def _kernels_interpreted() -> bool:
    """Whether the kernels run in Triton's interpreter: Triton decides it when their module is imported (on a
    first call), from TRITON_INTERPRET; true while they are not imported yet."""
    scan = sys.modules.get("rl_triton.kernels.scan")
    return scan is None or bool(scan._INTERPRETED)


_triton_installed: bool | None = None


def triton_installed() -> bool:
    """Whether Triton can be imported: the package asks for it on Linux only, and CPU tensors need none."""
    global _triton_installed
    if _triton_installed is None:
        try:
            _triton_installed = importlib.util.find_spec("triton") is not None
        except ValueError:  # imported, without a spec
            _triton_installed = sys.modules.get("triton") is not None
    return _triton_installed


def kernels_module():
    """``rl_triton._launch``, the kernels' launcher, which imports Triton; a clear error where Triton is missing."""
    try:
        from rl_triton import _launch
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != "triton":
            raise
        raise ImportError(
            "rl-triton runs CUDA tensors (and CPU tensors under TRITON_INTERPRET=1) through its Triton kernels, and "
            "Triton is not installed (on Linux: pip install triton). Without Triton, pass CPU tensors, or call inside "
            "rl_triton._dispatch.use_backend('reference') to run the plain PyTorch loops on these tensors"
        ) from error
    return _launch


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
    if triton_possible and device.type == "cpu" and not _kernels_interpreted():
        raise RuntimeError(
            "TRITON_INTERPRET=1 was set after rl_triton loaded its kernels for a GPU (on its first call): set it "
            "before the first call, or before importing rl_triton, to run the kernels on CPU tensors"
        )
    if device.type not in ("cuda", "cpu"):
        raise _checks.InputError(f"tensors on {device.type} are not supported: expected cuda or cpu")
    return triton_possible
