"""Kernel launches for replays with every argument but the call's pointers packed in advance.

A replay (``rl_triton._replay``) repeats a recorded launch whose arguments differ from call to call
only in the call's data pointers and look-back workspaces. Triton's C launch function takes every
argument of the kernel each time (50-70 for this library's kernels, compile-time ones included),
parses each from a Python object by a format string and looks up the CUDA context before it
launches. A packed launch holds the kernel's parameters as the bytes the kernel reads, built once
when the call is recorded; each launch copies them, writes the few values that change into their
slots and calls ``cuLaunchKernelEx`` as Triton's launcher does (one block of ``32 * num_warps``
threads per program, no cluster, no launch attributes, the kernel's shared memory, Triton's two
scratch pointers null).

The C module is built with the C compiler and Triton's own build function and cache, as Triton
builds its launchers, on a thread started with the first kernel compile of a process (a recording
waits for it, once per process; a cached build loads in milliseconds). Kernels whose signature it
does not cover, and processes where it cannot be built, launch through Triton's C function as
before. ``libcuda`` is opened when the first packed launch is made, so the module
builds and loads on machines without a GPU.

Packed launches are on by default. ``ENABLED = False`` makes replays recorded from then on call Triton's
launch function (``benchmarks/host_cost.py --triton-launcher`` times them so). On CPUs the tests hand a
stand-in libcuda the bytes and launch configuration Triton's launcher hands it, for every kernel
signature of the library (``tests/test_packed_launch.py``); on CUDA they check every estimator's replays.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import struct
import threading
from collections.abc import Sequence
from typing import Any

# the bytes of each parameter slot (the driver reads a parameter's own size from its slot's start)
_SLOT_BYTES = 8
# what the C module accepts: more parameters than any kernel of this library takes
MAX_PARAMETERS = 256

_INTEGER_TYPES = {"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64"}
# the bytes a launch writes of an argument that changes from call to call: pointers (unsigned) and 32-bit integers
_CHANGING_BYTES = {"i32": 4}

_SOURCE = r"""
#include "cuda.h"
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define MAX_PARAMETERS @MAX_PARAMETERS@

typedef CUresult (*launch_t)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*context_current_t)(CUcontext *);
typedef CUresult (*context_set_t)(CUcontext);
typedef CUresult (*device_get_t)(CUdevice *, int);
typedef CUresult (*primary_context_t)(CUcontext *, CUdevice);
typedef CUresult (*error_string_t)(CUresult, const char **);

static launch_t launch_kernel = NULL;
static context_current_t context_current = NULL;
static context_set_t context_set = NULL;
static device_get_t device_get = NULL;
static primary_context_t primary_context = NULL;
static error_string_t error_string = NULL;

/* libcuda's functions, looked up once (under the GIL) */
static int open_driver(void) {
  if (launch_kernel != NULL) return 1;
  void *handle = dlopen("libcuda.so.1", RTLD_LAZY);
  if (handle == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "rl_triton packed launch: cannot open libcuda.so.1");
    return 0;
  }
  context_current = (context_current_t)dlsym(handle, "cuCtxGetCurrent");
  context_set = (context_set_t)dlsym(handle, "cuCtxSetCurrent");
  device_get = (device_get_t)dlsym(handle, "cuDeviceGet");
  primary_context = (primary_context_t)dlsym(handle, "cuDevicePrimaryCtxRetain");
  error_string = (error_string_t)dlsym(handle, "cuGetErrorString");
  launch_t launch = (launch_t)dlsym(handle, "cuLaunchKernelEx");
  if (!context_current || !context_set || !device_get || !primary_context || !error_string || !launch) {
    PyErr_SetString(PyExc_RuntimeError, "rl_triton packed launch: libcuda.so.1 lacks a function it needs");
    return 0;
  }
  launch_kernel = launch;
  return 1;
}

static PyObject *cuda_error(CUresult status, const char *what) {
  const char *text = NULL;
  if (error_string == NULL || error_string(status, &text) != CUDA_SUCCESS || text == NULL) text = "unknown error";
  PyErr_Format(PyExc_RuntimeError, "rl_triton packed launch: %s failed: %s (CUDA error %d)", what, text, (int)status);
  return NULL;
}

typedef struct {
  PyObject_HEAD
  uint64_t function;
  int device;
  unsigned int grid_x;
  unsigned int block_x;
  unsigned int shared_bytes;
  int num_parameters;
  int num_changing;
  unsigned short changing_slot[MAX_PARAMETERS];
  unsigned char changing_bytes[MAX_PARAMETERS];
  uint64_t values[MAX_PARAMETERS];
} PackedLaunch;

static PyTypeObject PackedLaunchType = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "rl_triton_packed_launch.PackedLaunch",
  .tp_basicsize = sizeof(PackedLaunch),
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "A kernel launch with its parameters packed (made by pack()).",
};

/* pack(function, device, grid_x, block_x, shared_bytes, values: bytes, changing: bytes of (slot, bytes) pairs) */
static PyObject *pack(PyObject *self, PyObject *args) {
  unsigned long long function;
  int device;
  unsigned int grid_x, block_x, shared_bytes;
  const char *values, *changing;
  Py_ssize_t values_length, changing_length;
  if (!PyArg_ParseTuple(args, "KiIIIy#y#", &function, &device, &grid_x, &block_x, &shared_bytes, &values,
                        &values_length, &changing, &changing_length))
    return NULL;
  if (values_length % 8 != 0 || values_length / 8 > MAX_PARAMETERS || changing_length % 3 != 0 ||
      changing_length / 3 > values_length / 8) {
    PyErr_SetString(PyExc_ValueError, "rl_triton packed launch: malformed parameters");
    return NULL;
  }
  PackedLaunch *packed = PyObject_New(PackedLaunch, &PackedLaunchType);
  if (packed == NULL) return NULL;
  packed->function = function;
  packed->device = device;
  packed->grid_x = grid_x;
  packed->block_x = block_x;
  packed->shared_bytes = shared_bytes;
  packed->num_parameters = (int)(values_length / 8);
  packed->num_changing = (int)(changing_length / 3);
  memcpy(packed->values, values, (size_t)values_length);
  for (int i = 0; i < packed->num_changing; ++i) {
    unsigned int slot = (unsigned char)changing[3 * i] | ((unsigned int)(unsigned char)changing[3 * i + 1] << 8);
    unsigned char bytes = (unsigned char)changing[3 * i + 2];
    if ((int)slot >= packed->num_parameters || (bytes != 4 && bytes != 8)) {
      Py_DECREF(packed);
      PyErr_SetString(PyExc_ValueError, "rl_triton packed launch: malformed changing slot");
      return NULL;
    }
    packed->changing_slot[i] = (unsigned short)slot;
    packed->changing_bytes[i] = bytes;
  }
  return (PyObject *)packed;
}

/* launch(packed, stream, *values): the packed parameters with ``values`` in the changing slots */
static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 2 || !Py_IS_TYPE(args[0], &PackedLaunchType)) {
    PyErr_SetString(PyExc_TypeError, "launch(packed, stream, *values) takes a PackedLaunch first");
    return NULL;
  }
  PackedLaunch *packed = (PackedLaunch *)args[0];
  if (nargs != 2 + packed->num_changing) {
    PyErr_Format(PyExc_TypeError, "this launch takes %d values after the stream, not %zd", packed->num_changing,
                 nargs - 2);
    return NULL;
  }
  uint64_t stream = PyLong_AsUnsignedLongLong(args[1]);
  if (stream == (uint64_t)-1 && PyErr_Occurred()) return NULL;
  uint64_t values[MAX_PARAMETERS];
  void *parameters[MAX_PARAMETERS];
  memcpy(values, packed->values, sizeof(uint64_t) * (size_t)packed->num_parameters);
  for (int i = 0; i < packed->num_changing; ++i) {
    PyObject *value = args[2 + i];
    unsigned short slot = packed->changing_slot[i];
    if (packed->changing_bytes[i] == 8) {
      uint64_t wide = PyLong_AsUnsignedLongLong(value);
      if (wide == (uint64_t)-1 && PyErr_Occurred()) return NULL;
      values[slot] = wide;
    } else {
      long long number = PyLong_AsLongLong(value);
      if (number == -1 && PyErr_Occurred()) return NULL;
      if (number < INT32_MIN || number > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "rl_triton packed launch: a 32-bit parameter is out of range");
        return NULL;
      }
      int32_t narrow = (int32_t)number;
      values[slot] = 0;
      memcpy(&values[slot], &narrow, sizeof(narrow));
    }
  }
  for (int i = 0; i < packed->num_parameters; ++i) parameters[i] = &values[i];
  if (packed->grid_x == 0) Py_RETURN_NONE;
  if (!open_driver()) return NULL;
  CUlaunchConfig config;
  memset(&config, 0, sizeof(config));
  config.gridDimX = packed->grid_x;
  config.gridDimY = 1;
  config.gridDimZ = 1;
  config.blockDimX = packed->block_x;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = packed->shared_bytes;
  config.hStream = (CUstream)stream;
  config.attrs = NULL;
  config.numAttrs = 0;
  CUresult status;
  const char *what = "cuLaunchKernelEx";
  Py_BEGIN_ALLOW_THREADS;
  CUcontext context = NULL;
  status = context_current(&context);
  if (status == CUDA_SUCCESS && context == NULL) {
    /* a thread that has not used CUDA yet: the recording device's primary context, as PyTorch uses */
    CUdevice device;
    what = "making the device's primary context current";
    status = device_get(&device, packed->device);
    if (status == CUDA_SUCCESS) status = primary_context(&context, device);
    if (status == CUDA_SUCCESS) status = context_set(context);
  }
  if (status == CUDA_SUCCESS) {
    what = "cuLaunchKernelEx";
    status = launch_kernel(&config, (CUfunction)packed->function, parameters, NULL);
  }
  Py_END_ALLOW_THREADS;
  if (status != CUDA_SUCCESS) return cuda_error(status, what);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
  {"pack", pack, METH_VARARGS, "pack(function, device, grid_x, block_x, shared_bytes, values, changing)"},
  {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "launch(packed, stream, *values)"},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {PyModuleDef_HEAD_INIT, "rl_triton_packed_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit_rl_triton_packed_launch(void) {
  if (PyType_Ready(&PackedLaunchType) < 0) return NULL;
  return PyModule_Create(&module_definition);
}
""".replace("@MAX_PARAMETERS@", str(MAX_PARAMETERS))


def _build() -> Any:
    from triton.backends import nvidia
    from triton.runtime.build import compile_module_from_src

    include = os.path.join(os.path.dirname(nvidia.__file__), "include")
    return compile_module_from_src(src=_SOURCE, name="rl_triton_packed_launch", include_dirs=[include])


_lock = threading.Lock()
_build_done: concurrent.futures.Future | None = None
# whether replays recorded from now on launch packed parameters (see above; benchmarks/host_cost.py --packed)
ENABLED = True


def _submitted_build() -> concurrent.futures.Future:
    """The C module's build (or load from Triton's cache), submitted to a thread of its own once per process."""
    global _build_done
    with _lock:
        if _build_done is None:
            _build_done = _threads().submit(_build)
        return _build_done


@functools.cache
def _threads() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rl_triton-packed-launch")


def start_build() -> None:
    """Start building the C module where packed launches are on (the first kernel compile of a process does)."""
    if ENABLED and _build_done is None:
        _submitted_build()


def module() -> Any | None:
    """The C module, waiting for its build if need be; None if it cannot be built."""
    try:
        return _submitted_build().result()
    except Exception:  # noqa: BLE001 - no C compiler or no Python headers: Triton's launch function instead
        return None


def parameter_bytes(kind: str, value: object) -> bytes | None:
    """A parameter of Triton type ``kind`` as the bytes of its slot, or None for a type not packed here."""
    if kind.startswith("*"):
        pointer = 0 if value is None else value
        return struct.pack("<Q", pointer) if pointer.__class__ is int and 0 <= pointer < 2**64 else None
    if kind in _INTEGER_TYPES:
        # a bool or int as Triton's launcher takes it: the driver reads the low bytes of its two's complement
        return struct.pack("<Q", int(value) & (2**64 - 1)) if isinstance(value, (bool, int)) else None
    if not isinstance(value, (bool, int, float)):
        return None
    if kind in ("fp32", "f32"):
        return struct.pack("<f", value) + bytes(4)
    if kind == "fp64":
        return struct.pack("<d", value)
    if kind == "fp16":
        return struct.pack("<e", value) + bytes(6)
    if kind == "bf16":
        # Triton's launcher keeps a bf16 parameter's top 16 bits of its float32 (it does not round)
        return struct.pack("<I", struct.unpack("<I", struct.pack("<f", value))[0] >> 16) + bytes(4)
    return None


def packed_parameters(signature: Sequence[str], args: Sequence[object],
                      changing: Sequence[int]) -> tuple[bytes, bytes] | None:
    """The parameter slots and table of changing slots that ``pack`` takes for a kernel of Triton
    ``signature`` (every argument's type, ``constexpr`` for those compiled in) launched with
    ``args`` (every argument, compile-time ones included), whose arguments at the positions
    ``changing`` (in this order) each launch passes; their values in ``args`` are ignored. None
    where the signature holds a type that is not packed here, or a changing argument that is not a
    pointer or a 32-bit integer."""
    if len(signature) != len(args):
        return None
    changing_positions = frozenset(changing)
    slots: list[bytes] = []
    slot_of: dict[int, tuple[int, int]] = {}
    for position, (kind, value) in enumerate(zip(signature, args, strict=True)):
        if kind == "constexpr":
            if position in changing_positions:
                return None
            continue
        if position in changing_positions:
            width = 8 if kind.startswith("*") else _CHANGING_BYTES.get(kind)
            if width is None:
                return None
            slot_of[position] = (len(slots), width)
            slots.append(bytes(_SLOT_BYTES))
            continue
        packed = parameter_bytes(kind, value)
        if packed is None:
            return None
        slots.append(packed)
    # Triton 3.6's kernels end with two scratch pointers (global and profile), null for kernels that need none
    slots += [bytes(_SLOT_BYTES), bytes(_SLOT_BYTES)]
    if len(slots) > MAX_PARAMETERS:
        return None
    table = b"".join(struct.pack("<HB", *slot_of[position]) for position in changing)
    return b"".join(slots), table


def packed_launch(compiled: Any, device: int, grid: tuple[int, ...], args: Sequence[object],
                  changing: Sequence[int]) -> tuple[Any, Any] | None:
    """``(launch, packed)``: ``launch(packed, stream, *values)`` launches ``compiled`` on ``grid`` with
    ``args`` (every argument, compile-time ones included), ``values`` in the places ``changing``. None
    where packed launches are off or not built yet, or where the kernel is not one they cover (Triton's
    scratch memory, clusters, cooperative or programmatic-dependent launches, tensor descriptors)."""
    if not ENABLED:
        return None
    built = module()
    if built is None:
        return None
    launcher = getattr(compiled, "run", None)
    # what Triton's launcher takes from the compiled kernel: (warps, CTAs per program, shared memory bytes)
    metadata = getattr(compiled, "packed_metadata", None)
    signature = getattr(getattr(compiled, "src", None), "signature", None)
    if (type(launcher).__name__ != "CudaLauncher" or not isinstance(metadata, tuple) or len(metadata) != 3
            or metadata[1] != 1 or not isinstance(signature, dict) or getattr(launcher, "launch_cooperative_grid", True)
            or getattr(launcher, "launch_pdl", True) or getattr(launcher, "global_scratch_size", 1) != 0
            or getattr(launcher, "profile_scratch_size", 1) != 0 or len(grid) != 1
            or any(not isinstance(kind, str) for kind in signature.values())):
        return None
    parameters = packed_parameters(list(signature.values()), args, changing)
    if parameters is None:
        return None
    values, table = parameters
    num_warps, _, shared_bytes = metadata
    packed = built.pack(compiled.function, device, grid[0], 32 * num_warps, shared_bytes, values, table)
    return built.launch, packed
