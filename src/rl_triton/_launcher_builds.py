"""A kernel's C launcher built beside its compile, on a thread of its own.

Triton builds each kernel signature's launcher (a small C module, compiled with the system's C
compiler) when the compiled kernel is first loaded, after the compile, one after the other. The
launcher's source depends only on the kernel's signature and constants, which Triton knows when the
compile starts: here Triton's own launcher class builds it from them on a thread while the kernel
compiles (both mostly in subprocesses and native code, which leave Python's lock), and the load after
the compile finds it in Triton's cache. Where anything differs (another Triton, an error), the load
builds the launcher as before.

``building_launchers_aside()`` holds Triton's compile hooks for the compiles inside it; any hooks set
before are called as well, and set back when the last such block ends.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

from triton import knobs
from triton.compiler import ASTSource

_lock = threading.Lock()
_holders = 0
_previous_hooks: tuple[Callable | None, Callable | None] = (None, None)
_builds: dict[object, concurrent.futures.Future] = {}

# what a compiled kernel's metadata gives the launcher class besides its source (nothing that changes the
# launcher's C code)
_METADATA = types.SimpleNamespace(
    num_ctas=1, tensordesc_meta=None, global_scratch_size=0, global_scratch_align=1, profile_scratch_size=0,
    profile_scratch_align=1, launch_cooperative_grid=False, launch_pdl=False)


def launcher_class() -> Callable[[Any, Any], object]:
    """The active driver's launcher class (a function, so that tests can stand in for it)."""
    from triton.runtime import driver

    return driver.active.launcher_cls


@functools.cache
def _threads() -> concurrent.futures.ThreadPoolExecutor:
    # apart from the compile threads: a compile waits for its launcher, which must not queue behind it
    return concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="rl_triton-launcher")


def _build(fn: Any, signature: dict, constants: dict) -> None:
    launcher_class()(ASTSource(fn, signature, constants), _METADATA)


def _before_compile(**kwargs: Any) -> bool | None:
    """Triton's ``jit_cache_hook``: start building the launcher of the kernel about to compile."""
    previous = _previous_hooks[0]
    verdict = previous(**kwargs) if previous is not None else None
    if verdict:
        return verdict  # the earlier hook skips this compile
    compile_info = kwargs["compile"]
    try:
        future = _threads().submit(_build, kwargs["fn"].jit_function, compile_info["signature"],
                                   compile_info["constants"])
    except Exception:  # noqa: BLE001 - the launcher then builds after the compile, as without this module
        return verdict
    with _lock:
        _builds[(compile_info["key"], compile_info["device"])] = future
    return verdict


def _after_compile(**kwargs: Any) -> bool | None:
    """Triton's ``jit_post_compile_hook``: wait for the launcher, so that loading the kernel finds it."""
    compile_info = kwargs["compile"]
    with _lock:
        future = _builds.pop((compile_info["key"], compile_info["device"]), None)
    if future is not None:
        # an error shows again, where it belongs, when the kernel's load builds the launcher itself
        with contextlib.suppress(Exception):
            future.result()
    previous = _previous_hooks[1]
    return previous(**kwargs) if previous is not None else None


@contextlib.contextmanager
def building_launchers_aside() -> Iterator[None]:
    """Compiles inside (on any thread) build their kernels' launchers at the same time."""
    global _holders, _previous_hooks
    with _lock:
        if _holders == 0:
            _previous_hooks = (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook)
            knobs.runtime.jit_cache_hook = _before_compile
            knobs.runtime.jit_post_compile_hook = _after_compile
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = _previous_hooks
                _previous_hooks = (None, None)
