"""A kernel's C launcher builds on a thread beside its compile (``rl_triton._launcher_builds``).

On CPU, Triton's compile hooks are called as Triton calls them, with a stand-in for the driver's
launcher class; on CUDA, a first call in a fresh process with an empty Triton cache builds each
launcher once, on a launcher thread, and its result equals the oracle.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch
import triton
import triton.language as tl
from triton import knobs
from triton.runtime.jit import JitFunctionInfo

from conftest import printed_by_fresh_process
from rl_triton import _launcher_builds


@triton.jit
def _scaled_kernel(source, target, count, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(target + offsets, tl.load(source + offsets, mask=offsets < count) * SCALE, mask=offsets < count)


SIGNATURE = {"source": "*fp32", "target": "*fp32", "count": "i32", "SCALE": "constexpr", "BLOCK": "constexpr"}
CONSTANTS = {(3,): 2, (4,): 128}


def hook_arguments(key: str = "k1", device: int = 0) -> dict:
    """What Triton passes to its compile hooks (``JITFunction._call_hook``)."""
    compile_info = {"key": key, "signature": SIGNATURE, "device": device, "constants": CONSTANTS}
    return {"key": key, "repr": "_scaled_kernel[...]", "fn": JitFunctionInfo(__name__, "_scaled_kernel", _scaled_kernel),
            "compile": compile_info, "is_manual_warmup": False, "already_compiled": False}


@pytest.fixture
def built(monkeypatch):
    """Launchers 'built' by a stand-in for the driver's launcher class: (source, metadata, thread)."""
    log: list[tuple[object, object, str]] = []

    class SlowLauncher:
        def __init__(self, source, metadata) -> None:
            time.sleep(0.05)  # a build that is still running when the compile ends
            log.append((source, metadata, threading.current_thread().name))

    monkeypatch.setattr(_launcher_builds, "launcher_class", lambda: SlowLauncher)
    return log


def test_the_launcher_builds_from_the_compile_signature_on_a_thread(built):
    arguments = hook_arguments()
    assert _launcher_builds._before_compile(**arguments) is None  # the compile goes ahead
    assert _launcher_builds._after_compile(**arguments) is None
    # the compile's end waited for the build
    [(source, metadata, thread)] = built
    assert thread.startswith("rl_triton-launcher")
    assert source.fn is _scaled_kernel and source.signature == SIGNATURE and source.constants == CONSTANTS
    assert metadata.tensordesc_meta is None and metadata.num_ctas == 1
    assert not _launcher_builds._builds


def test_builds_of_kernels_compiling_at_once_are_kept_apart(built):
    first, second = hook_arguments("k1"), hook_arguments("k2")
    _launcher_builds._before_compile(**first)
    _launcher_builds._before_compile(**second)
    assert len(_launcher_builds._builds) == 2
    _launcher_builds._after_compile(**second)
    _launcher_builds._after_compile(**first)
    assert len(built) == 2 and not _launcher_builds._builds


def test_a_failed_build_is_left_to_the_kernel_load(monkeypatch):
    def failing():
        raise RuntimeError("no C compiler")

    monkeypatch.setattr(_launcher_builds, "launcher_class", failing)
    arguments = hook_arguments()
    _launcher_builds._before_compile(**arguments)
    assert _launcher_builds._after_compile(**arguments) is None  # no error here


def test_hooks_are_held_only_inside_and_earlier_hooks_still_run(built, monkeypatch):
    calls = []

    def user_cache_hook(**kwargs):
        calls.append(("before", kwargs["key"]))

    def user_post_hook(**kwargs):
        calls.append(("after", kwargs["key"]))

    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", user_cache_hook)
    monkeypatch.setattr(knobs.runtime, "jit_post_compile_hook", user_post_hook)
    with _launcher_builds.building_launchers_aside():
        with _launcher_builds.building_launchers_aside():  # nested, or on another thread
            assert knobs.runtime.jit_cache_hook is _launcher_builds._before_compile
        assert knobs.runtime.jit_cache_hook is _launcher_builds._before_compile
        assert knobs.runtime.jit_post_compile_hook is _launcher_builds._after_compile
        arguments = hook_arguments("k3")
        knobs.runtime.jit_cache_hook(**arguments)
        knobs.runtime.jit_post_compile_hook(**arguments)
    assert knobs.runtime.jit_cache_hook is user_cache_hook
    assert knobs.runtime.jit_post_compile_hook is user_post_hook
    assert calls == [("before", "k3"), ("after", "k3")]
    assert len(built) == 1


def test_an_earlier_hook_that_skips_the_compile_is_obeyed(built, monkeypatch):
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", lambda **kwargs: True)
    with _launcher_builds.building_launchers_aside():
        assert knobs.runtime.jit_cache_hook(**hook_arguments()) is True
    assert not built and not _launcher_builds._builds


@pytest.mark.skipif(not torch.cuda.is_available(), reason="builds launchers for a GPU")
def test_a_first_call_builds_each_launcher_once_beside_its_compile(tmp_path):
    # a fresh process and an empty Triton cache: every C module is built (``_build`` runs the C compiler),
    # and each only once: the kernel's load finds its launcher in the cache
    code = f"""
import os, threading
os.environ["TRITON_CACHE_DIR"] = {str(tmp_path)!r}
import torch, triton.runtime.build as build
import rl_triton
from rl_triton import reference
builds = []
original = build._build
def counted(name, *args, **kwargs):
    builds.append((name, threading.current_thread().name))
    return original(name, *args, **kwargs)
build._build = counted
gen = torch.Generator().manual_seed(0)
rewards, values = torch.randn(2, 2, 3000, generator=gen).cuda()
terminateds = (torch.rand(2, 3000, generator=gen) < 0.05).cuda()
got = rl_triton.compute_gae(rewards, values, terminateds).cpu().double()
want = reference.compute_gae(rewards.cpu().double(), values.cpu().double(), terminateds.cpu())
print(float((got - want).norm() / want.norm()))
print(*(f"{{name}}@{{thread}}" for name, thread in builds))
"""
    error, *builds = printed_by_fresh_process(code)
    assert float(error) < 1e-5
    launchers = [build for build in builds if build.startswith("__triton_launcher@")]
    assert len(launchers) == 1 and launchers[0].startswith("__triton_launcher@rl_triton-launcher"), builds
