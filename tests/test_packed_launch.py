"""Packed launches (rl_triton._packed_launch): the parameter bytes, the C module's argument checks and,
on CUDA, replays that launch through it.

Triton's launcher reads every argument from Python at each launch; a packed launch keeps the kernel's
parameters as the bytes the kernel reads and writes only the call's pointers. The bytes are checked here
against the C types Triton's launcher gives each parameter (``triton/backends/nvidia/driver.py``).
"""

import ctypes
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import types

import pytest
import torch

from rl_triton import _packed_launch, _replay

HAS_CUDA = torch.cuda.is_available()

SLOT = 8


def slots(values: bytes) -> list[bytes]:
    return [values[i:i + SLOT] for i in range(0, len(values), SLOT)]


def test_each_parameter_is_packed_as_the_kernel_reads_it():
    signature = ["*fp32", "*u8", "i32", "i64", "i1", "fp32", "fp64", "fp16", "bf16", "u32", "constexpr", "i32"]
    args = [None, 0x7F00_1234_5670, -5, -(2**40), True, 0.1, 0.1, 1.5, 0.1, 2**32 - 1, 128, 0]
    values, table = _packed_launch.packed_parameters(signature, args, changing=[0, 11])
    packed = slots(values)
    # the constexpr has no slot; Triton's two scratch pointers (null) end the parameters
    assert len(packed) == len(signature) - 1 + 2
    pointer_in_a_call, pointer, i32, i64, flag, fp32, fp64, fp16, bf16, u32, i32_in_a_call, scratch, profile = packed
    assert pointer_in_a_call == bytes(SLOT) and i32_in_a_call == bytes(SLOT)  # written by each launch
    assert pointer == struct.pack("<Q", 0x7F00_1234_5670)
    assert struct.unpack("<i", i32[:4])[0] == -5
    assert struct.unpack("<q", i64)[0] == -(2**40)
    assert flag[0] == 1
    assert fp32[:4] == struct.pack("<f", 0.1)
    assert fp64 == struct.pack("<d", 0.1)
    assert fp16[:2] == struct.pack("<e", 1.5)
    # Triton's launcher passes a bf16 parameter as the top half of its float32, unrounded
    assert bf16[:2] == struct.pack("<H", struct.unpack("<I", struct.pack("<f", 0.1))[0] >> 16)
    assert struct.unpack("<I", u32[:4])[0] == 2**32 - 1
    assert scratch == profile == bytes(SLOT)
    # (slot, bytes) of each changing argument, in the order a launch passes them
    assert table == struct.pack("<HB", 0, 8) + struct.pack("<HB", 10, 4)


@pytest.mark.parametrize(
    "signature, args, changing",
    [
        pytest.param(["*fp32", "nvTmaDesc"], [None, object()], [0], id="tensor-descriptor"),
        pytest.param(["*fp32", "fp32"], [None, 0.5], [1], id="a-float-that-changes"),
        pytest.param(["*fp32", "i64"], [None, 2**40], [1], id="a-64-bit-integer-that-changes"),
        pytest.param(["*fp32", "constexpr"], [None, 4], [1], id="a-constexpr-that-changes"),
        pytest.param(["*fp32", "i32"], [None], [0], id="fewer-arguments-than-the-signature"),
        pytest.param(["*fp32", "i32"], [None, "4"], [0], id="a-string-for-an-integer"),
        pytest.param(["*fp32"] * 300, [None] * 300, [0], id="more-parameters-than-the-module-takes"),
    ],
)
def test_kernels_it_does_not_cover_keep_tritons_launch(signature, args, changing):
    assert _packed_launch.packed_parameters(signature, args, changing) is None


@pytest.fixture(scope="module")
def module():
    if shutil.which("gcc") is None and shutil.which("clang") is None:
        pytest.skip("building the packed-launch module needs a C compiler")
    built = _packed_launch.module()
    assert built is not None, "the packed-launch module did not build"
    return built


def test_the_module_checks_its_arguments(module):
    values, table = _packed_launch.packed_parameters(["*fp32", "i32", "i32"], [None, None, 7], changing=[0, 1])
    packed = module.pack(0, 0, 0, 128, 0, values, table)
    with pytest.raises(TypeError, match="takes 2 values after the stream, not 1"):
        module.launch(packed, 0, 1)
    with pytest.raises(TypeError, match="PackedLaunch first"):
        module.launch(object(), 0, 1, 2)
    with pytest.raises(OverflowError, match="32-bit parameter"):
        module.launch(packed, 0, 1, 2**31)
    with pytest.raises(OverflowError):
        module.launch(packed, 0, -1, 2)  # a pointer is unsigned
    with pytest.raises(ValueError, match="malformed"):
        module.pack(0, 0, 1, 128, 0, values[:-1], table)
    with pytest.raises(ValueError, match="malformed parameters"):  # more changing slots than parameters
        module.pack(0, 0, 1, 128, 0, values, table * 3)
    with pytest.raises(ValueError, match="malformed changing slot"):
        module.pack(0, 0, 1, 128, 0, values, struct.pack("<HB", 40, 8))
    # a launch of no programs launches nothing (as Triton's launcher), on any machine
    assert module.launch(packed, 0, 1, 2) is None


# A stand-in for libcuda.so.1 that records each launch's configuration and parameter bytes instead of running it
_FAKE_LIBCUDA = r"""
#include "cuda.h"
#include <stdint.h>
#include <string.h>

#define MAX_PARAMETERS 512
static int parameter_sizes[MAX_PARAMETERS];
static int parameter_count = 0;
static unsigned char recorded[MAX_PARAMETERS * 8];
static unsigned int recorded_config[8];
static unsigned long long recorded_function_and_stream[2];
static int launches = 0;
static int has_context = 1;
static int retained_device = -1;
static int fake_context;

void fake_expect(int count, const int *sizes) {
  parameter_count = count;
  for (int i = 0; i < count; ++i) parameter_sizes[i] = sizes[i];
}
void fake_set_context(int present) { has_context = present; retained_device = -1; }
int fake_retained_device(void) { return retained_device; }
int fake_launches(void) { return launches; }
void fake_last_launch(unsigned int *config, unsigned long long *function_and_stream, unsigned char *parameters) {
  memcpy(config, recorded_config, sizeof(recorded_config));
  memcpy(function_and_stream, recorded_function_and_stream, sizeof(recorded_function_and_stream));
  memcpy(parameters, recorded, (size_t)parameter_count * 8);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra) {
  unsigned int fields[8] = {config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                            config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->numAttrs};
  memcpy(recorded_config, fields, sizeof(fields));
  recorded_function_and_stream[0] = (unsigned long long)(uintptr_t)f;
  recorded_function_and_stream[1] = (unsigned long long)(uintptr_t)config->hStream;
  memset(recorded, 0, sizeof(recorded));
  for (int i = 0; i < parameter_count; ++i) memcpy(recorded + 8 * i, kernelParams[i], (size_t)parameter_sizes[i]);
  ++launches;
  return extra == NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx) {
  *pctx = has_context ? (CUcontext)&fake_context : NULL;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) { has_context = ctx != NULL; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) { *device = ordinal; return CUDA_SUCCESS; }
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice device) {
  retained_device = device;
  *pctx = (CUcontext)&fake_context;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorString(CUresult error, const char **text) { *text = "fake error"; return CUDA_SUCCESS; }
CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr pointer) {
  *(CUdeviceptr *)data = pointer;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute, int value) {
  return CUDA_SUCCESS;
}
"""

# bytes the kernel reads of each parameter type (the C types of Triton's launcher)
_PARAMETER_BYTES = {"i1": 1, "i8": 1, "u1": 1, "u8": 1, "i16": 2, "u16": 2, "fp16": 2, "bf16": 2, "i32": 4, "u32": 4,
                    "fp32": 4, "f32": 4, "i64": 8, "u64": 8, "fp64": 8}


def _library_calls() -> list:
    """The library's launches, planned as on an H200 and not run (benchmarks/registers.py): every estimator's
    walked splits and single tiles in three layouts, and the backward kernels."""
    import registers

    calls = [call for layout in ("float32", "time-major", "bf16-time-major") for rows, steps in ((8, 2**21), (4096, 128))
             for call in registers.walking_calls(rows, steps, layout).values()]
    calls += list(registers.autograd_calls(4096, 128).values())
    return [launch for call in calls for launch in registers.record_launches(call)]


class CudaLauncher:
    """What ``packed_launch`` reads of Triton's launcher object (its class name and launch options)."""

    launch_cooperative_grid = False
    launch_pdl = False
    global_scratch_size = 0
    profile_scratch_size = 0


class _FakeCompiled:
    """What ``packed_launch`` reads of a compiled kernel."""

    def __init__(self, function: int, signature: dict, packed_metadata: tuple) -> None:
        self.function = function
        self.src = types.SimpleNamespace(signature=signature)
        self.packed_metadata = packed_metadata
        self.run = CudaLauncher()


def test_only_kernels_launched_as_packed_launches_launch_them_are_packed(module, monkeypatch):
    monkeypatch.setattr(_packed_launch, "ENABLED", True)
    signature = {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    args, changing = [None, 7, 128], [0]
    assert _packed_launch.packed_launch(_FakeCompiled(5, signature, (4, 1, 0)), 0, (3,), args, changing) is not None
    monkeypatch.setattr(_packed_launch, "ENABLED", False)
    assert _packed_launch.packed_launch(_FakeCompiled(5, signature, (4, 1, 0)), 0, (3,), args, changing) is None
    monkeypatch.setattr(_packed_launch, "ENABLED", True)
    # clusters, and launches with scratch memory or launch attributes, keep Triton's launcher
    assert _packed_launch.packed_launch(_FakeCompiled(5, signature, (4, 2, 0)), 0, (3,), args, changing) is None
    for option, value in (("launch_pdl", True), ("launch_cooperative_grid", True), ("global_scratch_size", 64),
                          ("profile_scratch_size", 64)):
        compiled = _FakeCompiled(5, signature, (4, 1, 0))
        setattr(compiled.run, option, value)
        assert _packed_launch.packed_launch(compiled, 0, (3,), args, changing) is None, option
    compiled = _FakeCompiled(5, signature, (4, 1, 0))
    compiled.run = object()  # another backend's launcher
    assert _packed_launch.packed_launch(compiled, 0, (3,), args, changing) is None
    assert _packed_launch.packed_launch(_FakeCompiled(5, signature, (4, 1, 0)), 0, (3, 2), args, changing) is None


def _driver_saw(fake: ctypes.CDLL, count: int) -> tuple:
    """The fake libcuda's last launch: its configuration, function and stream, and ``count`` parameter slots."""
    config, function_and_stream = (ctypes.c_uint * 8)(), (ctypes.c_ulonglong * 2)()
    parameters = (ctypes.c_ubyte * (8 * count))()
    fake.fake_last_launch(config, function_and_stream, parameters)
    return list(config), list(function_and_stream), bytes(parameters).hex()


def compare_with_tritons_launcher(fake_directory: str) -> dict:
    """For each distinct signature of the library's launches: the parameter bytes and launch configuration
    that Triton's launcher and a packed launch hand ``cuLaunchKernelEx`` (the fake libcuda in
    ``fake_directory``), the call's pointers and workspace count passed at launch as replays pass them."""
    import registers
    from triton.backends.nvidia import driver as nvidia
    from triton.runtime.build import compile_module_from_src

    fake = ctypes.CDLL(os.path.join(fake_directory, "libcuda.so.1"))
    packing = _packed_launch.module()
    _packed_launch.ENABLED = True
    seen, compared, mismatches = set(), 0, []
    for number, launch in enumerate(_library_calls()):
        signature, constants, _, options = registers.compile_options(launch)
        key = (launch.kernel.__name__, tuple(signature.items()))
        if key in seen:
            continue
        seen.add(key)
        names = list(signature)
        given = {**dict(zip(names, launch.args)), **launch.meta}
        # pointers of distinct values, odd enough that a misplaced byte shows
        args = [0x7F00_0000_0000 + 0x1_0000 * index + 0x10 if isinstance(given.get(name), torch.Tensor)
                else constants.get(name, given.get(name)) for index, name in enumerate(names)]
        changing = [index for index, name in enumerate(names)
                    if isinstance(given.get(name), torch.Tensor) or (name == "spent_words" and signature[name] == "i32")]
        kinds = [kind for kind in signature.values() if kind != "constexpr"]
        sizes = [8 if kind.startswith("*") else _PARAMETER_BYTES[kind] for kind in kinds] + [8, 8]
        fake.fake_expect(len(sizes), (ctypes.c_int * len(sizes))(*sizes))
        launcher = compile_module_from_src(
            src=nvidia.make_launcher({}, dict(enumerate(signature.values())), None), name="__triton_launcher",
            library_dirs=nvidia.library_dirs(), include_dirs=nvidia.include_dirs, libraries=nvidia.libraries)
        grid, warps, shared, function, stream = launch.grid[0], options.get("num_warps", 4), 1024 + number, 0xF00 + number, 0x5000 + number
        launcher.launch(grid, 1, 1, stream, function, False, False, None, None, (warps, 1, shared), None, None, None,
                        *args)
        seen_by_driver = [_driver_saw(fake, len(sizes))]
        # as a replay makes it: from the compiled kernel, the arguments that change left out
        compiled = _FakeCompiled(function, signature, (warps, 1, shared))
        template = [None if index in changing else arg for index, arg in enumerate(args)]
        launch_packed, packed = _packed_launch.packed_launch(compiled, 0, (grid,), template, changing)
        launch_packed(packed, stream, *(args[index] for index in changing))
        seen_by_driver.append(_driver_saw(fake, len(sizes)))
        compared += 1
        if seen_by_driver[0] != seen_by_driver[1] or seen_by_driver[0][0][:4] != [grid, 1, 1, 32 * warps]:
            mismatches.append(f"{launch.kernel.__name__} {signature}: {seen_by_driver}")
    # a thread with no current context: the packed device's primary context is made current first
    fake.fake_set_context(0)
    fake.fake_expect(3, (ctypes.c_int * 3)(8, 8, 8))
    values, table = _packed_launch.packed_parameters(["*fp32"], [None], [0])
    packing.launch(packing.pack(0xF00, 3, 1, 128, 0, values, table), 0, 0x7F00_0000_0010)
    return {"compared": compared, "mismatches": mismatches, "retained_device": fake.fake_retained_device(),
            "launches": fake.fake_launches()}


@pytest.mark.skipif(shutil.which("gcc") is None, reason="the fake libcuda and the launchers are built with gcc")
def test_packed_launches_pass_what_tritons_launcher_passes(tmp_path):
    """Differential check against Triton's own launcher for every distinct signature of the library's kernels,
    through a fake libcuda that records what each launch hands the driver (no GPU needed)."""
    from triton.backends import nvidia

    include = pathlib.Path(nvidia.__file__).parent / "include"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", f"-I{include}", "-x", "c", "-",
                    "-o", str(tmp_path / "libcuda.so.1")], input=_FAKE_LIBCUDA, text=True, check=True)
    root = pathlib.Path(__file__).resolve().parents[1]
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env.update(LD_LIBRARY_PATH=str(tmp_path), TRITON_LIBCUDA_PATH=str(tmp_path),
               TRITON_CACHE_DIR=str(tmp_path / "triton-cache"),
               PYTHONPATH=os.pathsep.join([str(root / "src"), str(root / "benchmarks"), str(root / "tests")]))
    result = subprocess.run([sys.executable, __file__, str(tmp_path)], capture_output=True, text=True, env=env,
                            timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["mismatches"] == []
    # every kernel of the library, several signatures each (pointers of each dtype, with and without truncations)
    assert report["compared"] >= 20, report
    assert report["launches"] == 2 * report["compared"] + 1
    assert report["retained_device"] == 3


@pytest.mark.skipif(not HAS_CUDA, reason="replays are recorded for CUDA calls only")
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "triton-launcher"])
@pytest.mark.parametrize("seq_len", [300, 50_000], ids=["one-chunk", "time-split"])
def test_replays_launch_packed_parameters(gen, module, monkeypatch, packed, seq_len):
    """Every estimator's replays launch packed parameters (or Triton's launcher when switched off) and give
    the float64 loops' results with each call's fresh inputs."""
    from conftest import TOLERANCE, Rollout, assert_rel
    from test_cuda import ESTIMATORS, oracle, run
    from test_cuda_replay import PUBLIC_FUNCTIONS

    monkeypatch.setattr(_packed_launch, "ENABLED", packed)
    try:
        for param in ESTIMATORS:
            (estimator,) = param.values
            _replay.clear()
            for call in range(3):  # compiled, recorded, replayed
                ro = Rollout(gen, (4,), seq_len, device="cuda")
                for got, want in zip(run(estimator, ro), oracle(estimator, ro), strict=True):
                    assert_rel(got, want, TOLERANCE[torch.float32], what=f"{param.id} call {call}")
            (replay,) = [replay for function in PUBLIC_FUNCTIONS for replay in function.replays.values()]
            launches = [replay.__globals__[name] for name in replay.launchers]
            assert launches and all((launch is module.launch) == packed for launch in launches), replay.source
    finally:
        _replay.clear()


if __name__ == "__main__":
    print(json.dumps(compare_with_tritons_launcher(sys.argv[1])))
