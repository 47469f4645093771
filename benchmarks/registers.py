"""Registers of the walking kernels on an H200, from ptxas, without a GPU.

    PYTHONPATH=src python benchmarks/registers.py [--layouts float32,time-major,bf16] [--json]
    PYTHONPATH=src python benchmarks/registers.py --compile-all
    PYTHONPATH=src python benchmarks/registers.py --sass gae,vtrace --shapes 4096x4096,8x2097152 --layouts bf16
    PYTHONPATH=src python benchmarks/registers.py --sass gae --shapes 4096x4096 --layouts time-major --plans default,32x64x8xv1

Walked segments (``rl_triton/kernels/scan.py``) size their grid so that every program is resident at
once: the walk plans in ``rl_triton/_launch.py`` name the programs per multiprocessor, and those
programs must fit the multiprocessor's 65536 registers. A kernel change that adds registers can
break that without failing any other test: programs that do not fit start only when others end, so
their segments, and every segment after them, finish a whole walk later (GAE at 8x2^21 fell from
72% to 54% of the copy bandwidth on an H200 when its walk went from 56 to 71 registers;
benchmarks/NOTES.md, "Fifteenth round").

This script plans the calls the benchmark makes at 8x2^21 and 1x2^24 (float32 values and flags;
``--layouts`` adds bf16 values with uint8 flags, and float32 stored time-major at 8x2^21 and
64x2^18) as on an H200 (132 multiprocessors), records each launch instead of running it (shape-only
tensors on the ``meta`` device), compiles the kernels of walked segments for sm_90a with Triton's own
specialisation rules (an int of 1 is a constant; pointers, and ints divisible by 16, carry that
hint) under the plan's register cap and reads ptxas's register count and spilled bytes. Triton's interpreter must be off (``TRITON_INTERPRET``
unset): it compiles nothing.

``--compile-all`` compiles every distinct launch of many more calls for sm_90a instead (every
estimator in the three layouts at shapes that take each kind of plan, the autograd kernels, and the walks
of one long row without a look-behind, which default plans take) and
exits with an error if any fails: the interpreter runs kernels that Triton's compiler rejects. It
also disassembles each one (nvdisasm) and fails if a warp-collective instruction (``REDUX``,
``SHFL``, ``VOTE``, ``BAR``, ...) carries a guard predicate (``guarded_warp_collectives``).

``--sass`` counts the SASS instructions of each launch of the named calls (``walking_calls``' names) at
``--shapes``, by opcode: a kernel bound by the instructions it issues (bf16 GAE, benchmarks/NOTES.md,
"Twenty-fifth round") reads faster when a step takes fewer. ``--plans`` counts them under tile plans
written as ``benchmarks/tune.py`` takes them (``default``: the engine's own). For a program that walks
several chunks it also counts the instructions of its chunk loop, per step a thread holds and per byte
that step moves (the ``[rows, T]`` tensors' element sizes): bf16 stored ``[T, N]`` issues 4-7 a byte where
float32 issues 2.3-3.7 (benchmarks/NOTES.md, "Twenty-ninth round").
"""

from __future__ import annotations

import argparse
import bisect
import collections
import dataclasses
import itertools
import json
import math
import os
import re
import struct
import subprocess
import tempfile
from collections.abc import Callable
from unittest import mock

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from rl_triton import _launch

H200_MULTIPROCESSORS = 132
# the engine's figures, which its walk plans are capped with
REGISTERS_PER_MULTIPROCESSOR = _launch._REGISTERS_PER_MULTIPROCESSOR
REGISTER_ALLOCATION_UNIT = _launch._REGISTER_ALLOCATION_UNIT
SHAPES = ((8, 2**21), (1, 2**24))
# stored [T, N]: one row is batch-major; 64 rows walk tiles of 16 rows (4 warps), 8 rows tiles of 2 warps
TIME_MAJOR_SHAPES = ((8, 2**21), (64, 2**18))

_POINTER_TYPES = {
    torch.float32: "*fp32", torch.float64: "*fp64", torch.float16: "*fp16", torch.bfloat16: "*bf16",
    torch.int32: "*i32", torch.int64: "*i64", torch.uint8: "*u8", torch.bool: "*i1",
}


@dataclasses.dataclass
class Launch:
    kernel: triton.runtime.JITFunction
    grid: tuple[int, ...]
    args: tuple
    meta: dict


@dataclasses.dataclass
class Residency:
    estimator: str
    shape: tuple[int, int]
    kernel: str
    registers: int
    warps: int
    programs: int
    programs_per_multiprocessor: int
    layout: str = "float32"
    # the plan's register cap (None: the compiler's choice) and the bytes per thread ptxas spilled under it
    # (None: not asked for, ``--registers-only``)
    register_cap: int | None = None
    spilled_bytes: int | None = 0

    @property
    def registers_needed(self) -> int:
        allocated = math.ceil(self.registers / REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
        return self.programs_per_multiprocessor * self.warps * 32 * allocated

    @property
    def fits(self) -> bool:
        return self.registers_needed <= REGISTERS_PER_MULTIPROCESSOR


def record_launches(call: Callable[[], None]) -> list[Launch]:
    """The kernel launches of ``call``, planned as on an H200 and not run."""
    launches: list[Launch] = []

    def record(kernel: triton.runtime.JITFunction, grid: tuple[int, ...], *args: object, **meta: object) -> None:
        # as the launcher does: tiles are grouped only where every [rows, time] tensor allows it
        launches.append(Launch(kernel, grid, args, _launch._grouped_meta(args, meta)))

    _launch._default_plan.cache_clear()
    try:
        with (mock.patch.object(_launch, "_launch", record),
              mock.patch.object(_launch, "_multiprocessors", lambda device: H200_MULTIPROCESSORS)):
            call()
    finally:
        _launch._default_plan.cache_clear()
    return launches


def compile_options(launch: Launch) -> tuple[dict, dict, dict, dict]:
    """(signature, constants, attributes, options) of a launch, by Triton's specialisation rules."""
    signature: dict[str, str] = {}
    constants: dict[str, object] = {}
    attributes: dict[tuple[int, ...], list] = {}
    params = launch.kernel.params
    for index, param in enumerate(params):
        name = param.name
        if param.is_constexpr:
            signature[name] = "constexpr"
            if name in launch.meta:
                constants[name] = launch.meta[name]
            elif param.has_default:
                # as a launch does: a constexpr not given takes its default
                constants[name] = param.default
            continue
        value = launch.args[index] if index < len(launch.args) else launch.meta[name]
        if value is None:
            signature[name] = "constexpr"
            constants[name] = None
        elif isinstance(value, torch.Tensor):
            signature[name] = _POINTER_TYPES[value.dtype]
            attributes[(index,)] = [["tt.divisibility", 16]]
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            # an argument the kernel does not specialise on is a plain integer whatever its value
            if value == 1 and not param.do_not_specialize:
                signature[name] = "constexpr"
                constants[name] = 1
                continue
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0 and not param.do_not_specialize:
                attributes[(index,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            # an annotated float takes its annotation's type (``gamma: tl.float64`` is "fp64"), others float32
            signature[name] = param.annotation_type or "fp32"
        else:
            raise TypeError(f"{launch.kernel.__name__}: argument {name} of type {type(value).__name__}")
    options = {key: launch.meta[key] for key in ("num_warps", "num_stages", "maxnreg") if key in launch.meta}
    return signature, constants, attributes, options


def _nvidia_tool(name: str) -> str:
    """Path of one of the CUDA tools that Triton's NVIDIA backend ships (ptxas, nvdisasm)."""
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def _sm90_kernel(launch: Launch) -> object:
    """The launch's kernel compiled by Triton for sm_90a, with the launch's options."""
    signature, constants, attributes, options = compile_options(launch)
    return triton.compile(ASTSource(launch.kernel, signature, constants, attributes),
                          target=GPUTarget("cuda", 90, 32), options=options)


def ptxas_registers(launch: Launch) -> tuple[int, int]:
    """(registers per thread, bytes spilled per thread: stores) that ptxas gives the launch's kernel
    for sm_90a (with the plan's register cap, if it has one)."""
    compiled = _sm90_kernel(launch)
    ptxas = _nvidia_tool("ptxas")
    with tempfile.TemporaryDirectory() as folder:
        ptx = os.path.join(folder, "kernel.ptx")
        with open(ptx, "w") as file:
            file.write(compiled.asm["ptx"])
        result = subprocess.run([ptxas, "--gpu-name", "sm_90a", "-v", ptx, "-o", os.path.join(folder, "kernel.cubin")],
                                capture_output=True, text=True, check=True)
    found = re.search(r"Used (\d+) registers", result.stderr)
    spilled = re.search(r"(\d+) bytes spill stores", result.stderr)
    if found is None or spilled is None:
        raise RuntimeError(f"no register count in ptxas's output: {result.stderr[-400:]}")
    return int(found.group(1)), int(spilled.group(1))


# EIATTR_REGCOUNT: a kernel's registers per thread, among the attributes of a cubin's ``.nv.info`` section
_REGISTER_COUNT_ATTRIBUTE = 0x2F


def _sections(cubin: bytes) -> dict[bytes, bytes]:
    """The sections of a cubin (an ELF64 file) by name."""
    (section_headers,) = struct.unpack_from("<Q", cubin, 0x28)
    header_size, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)
    # (name, type, flags, address, offset, size, link, info, alignment, entry size)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, section_headers + index * header_size)
               for index in range(count)]
    names = headers[names_index][4]
    sections = {}
    for header in headers:
        start = names + header[0]
        sections[cubin[start:cubin.index(b"\0", start)]] = cubin[header[4]:header[4] + header[5]]
    return sections


def cubin_registers(cubin: bytes) -> int:
    """Registers per thread of a cubin's one kernel, as ptxas recorded them in its ``.nv.info`` section
    (attributes of a format byte, a type byte and a value: format 4 a 16-bit length and that many bytes,
    formats 1-3 two bytes, none, one or a 16-bit value; a register count is a symbol index and a count, 32
    bits each)."""
    info, position, counts = _sections(cubin)[b".nv.info"], 0, []
    while position < len(info):
        form, attribute = info[position], info[position + 1]
        if form == 4:
            (size,) = struct.unpack_from("<H", info, position + 2)
            if attribute == _REGISTER_COUNT_ATTRIBUTE:
                counts.append(struct.unpack_from("<II", info, position + 4)[1])
            position += 4 + size
        elif form in (1, 2, 3):
            position += 4
        else:
            raise ValueError(f"unknown .nv.info attribute format {form} at byte {position}")
    if len(counts) != 1:
        raise ValueError(f"expected one register count in the cubin, found {counts}")
    return counts[0]


LAYOUTS = ("float32", "time-major", "bf16")
# shapes whose calls take every kind of plan: short rows in one chunk, time-major splits of one chunk per
# program (512x1024), batch-major splits and short walks, long walks, and more blocks of look-back
# counters than one window (4x2^22 for the autograd kernels)
COMPILE_SHAPES = ((3, 70), (512, 1024), (64, 16384), (8, 131072), (4, 2**22), (1, 2**24))
AUTOGRAD_SHAPES = ((64, 16384), (4, 2**22), (1, 2**24))
# walks whose segments do not first scan the steps before them (``tile_override(look_behind=0)``; default plans
# take the look-behind, ``_launch.TilePlan.look_behind``): float32, batch-major, one long row
NO_LOOK_BEHIND_SHAPES = ((1, 2**24),)


def _empty(*shape: int, dtype: torch.dtype = torch.float32, time_major: bool = False) -> torch.Tensor:
    """A shape-only tensor; ``time_major``: ``[rows, T, ...]`` viewed from ``[T, rows, ...]`` storage."""
    if time_major:
        return torch.empty((shape[1], shape[0], *shape[2:]), dtype=dtype, device="meta").transpose(0, 1)
    return torch.empty(shape, dtype=dtype, device="meta")


def walking_calls(num_rows: int, seq_len: int, layout: str = "float32") -> dict[str, Callable[[], None]]:
    """The benchmark's calls at one shape, through the launchers: float32 values and flags, the same
    stored time-major (``[T, N]``), or bf16 values with uint8 flags (``bf16-time-major``: stored ``[T, N]``)."""
    time_major = layout.endswith("time-major")
    values_dtype = torch.bfloat16 if layout.startswith("bf16") else torch.float32
    flags_dtype = torch.uint8 if layout.startswith("bf16") else torch.float32

    def x() -> torch.Tensor:
        return _empty(num_rows, seq_len, dtype=values_dtype, time_major=time_major)

    def flags() -> torch.Tensor:
        return _empty(num_rows, seq_len, dtype=flags_dtype, time_major=time_major)

    last = _empty(num_rows, dtype=values_dtype)

    def retrace(num_actions: int) -> Callable[[], None]:
        def per_action() -> torch.Tensor:
            return _empty(num_rows, seq_len, num_actions, dtype=values_dtype, time_major=time_major)

        actions = _empty(num_rows, seq_len, dtype=torch.int64, time_major=time_major)
        return lambda: _launch.retrace(x(), x(), per_action(), x(), x(), per_action(), actions, x(), flags(), flags(),
                                       0.99, 0.95, 1.0, 1.0)

    return {
        "gae": lambda: _launch.gae(x(), x(), x(), flags(), None, 0.99, 0.95, None, last),
        "gae+trunc": lambda: _launch.gae(x(), x(), x(), flags(), flags(), 0.99, 0.95, x(), None),
        "vtrace": lambda: _launch.vtrace(x(), x(), x(), x(), x(), x(), flags(), None, 0.99, 1.0, 1.0, None, last),
        "vtrace+trunc": lambda: _launch.vtrace(x(), x(), x(), x(), x(), x(), flags(), flags(), 0.99, 1.0, 1.0, x(),
                                               None),
        "retrace-a4": retrace(4),
        "retrace-a18": retrace(18),
        "lambda-returns": lambda: _launch.returns(x(), x(), x(), flags(), flags(), 0.99, 0.95, x()),
        "discounted-returns": lambda: _launch.returns(x(), x(), None, flags(), flags(), 0.99, 1.0, x()),
        "eligibility-traces": lambda: _launch.episodic_scan(x(), x(), flags(), None, 0.99 * 0.95, True),
        "prefix-sum": lambda: _launch.episodic_scan(x(), x(), flags(), None, 1.0, False),
    }


def walk_residency(shapes: tuple[tuple[int, int], ...] | None = None, layout: str = "float32",
                   spills: bool = True) -> list[Residency]:
    """Registers and resident programs of every walked-segment launch of the benchmark's calls (by
    default at ``SHAPES``, or ``TIME_MAJOR_SHAPES`` for the time-major layout). ``spills``: also the bytes
    ptxas spills, from a ptxas run of its own for each kernel; without, the registers are read from the
    compiled kernel (a check against ptxas on the first)."""
    if shapes is None:
        shapes = TIME_MAJOR_SHAPES if layout == "time-major" else SHAPES
    rows = []
    for shape in shapes:
        if layout == "time-major" and shape[0] == 1:
            continue  # one row stored [T, 1] is batch-major
        for estimator, call in walking_calls(*shape, layout).items():
            for launch in record_launches(call):
                if not launch.meta.get("WALK"):
                    continue
                programs = launch.grid[0]
                if spills:
                    registers, spilled = ptxas_registers(launch)
                else:
                    registers, spilled = cubin_registers(_sm90_kernel(launch).asm["cubin"]), None
                    if not rows and registers != (from_ptxas := ptxas_registers(launch)[0]):
                        raise RuntimeError(f"{launch.kernel.__name__}: the cubin's register count {registers} is "
                                           f"not ptxas's {from_ptxas}")
                rows.append(Residency(estimator, shape, launch.kernel.__name__, registers,
                                      launch.meta["num_warps"], programs,
                                      math.ceil(programs / H200_MULTIPROCESSORS), layout,
                                      launch.meta.get("maxnreg"), spilled))
    return rows


def autograd_calls(num_rows: int, seq_len: int) -> dict[str, Callable[[], None]]:
    """The launchers of the backward passes at one shape (float32, batch-major)."""
    def x(*shape: int) -> torch.Tensor:
        return _empty(*(shape or (num_rows, seq_len)))

    return {
        "linear-recurrence-backward": lambda: _launch.linear_recurrence(x(), x(), x(), x(num_rows), True),
        "linear-recurrence-forward": lambda: _launch.linear_recurrence(x(), x(), x(), x(num_rows), False),
        "gae-backward": lambda: _launch.gae_backward(x(), x(), None, x(num_rows), x(), x(), None, 0.99, 0.95,
                                                     torch.float32),
        "returns-backward": lambda: _launch.returns_backward(x(), x(), x(), x(), x(), x(), 0.99, 0.95,
                                                             torch.float32),
    }


def _without_look_behind(call: Callable[[], None]) -> Callable[[], None]:
    """``call`` with walked segments that take their carry from the look-back alone (``tile_override(look_behind=0)``)."""
    def run() -> None:
        with _launch.tile_override(look_behind=0):
            call()

    return run


def compile_every_launch() -> tuple[int, list[str]]:
    """Compile each distinct launch of the calls of ``COMPILE_SHAPES`` (three layouts), of
    ``AUTOGRAD_SHAPES`` and, without a look-behind, of ``NO_LOOK_BEHIND_SHAPES`` for sm_90a. Returns (launches compiled, one line per failure)."""
    calls = [(f"{layout} {rows}x{steps} {name}", call)
             for layout in LAYOUTS for rows, steps in COMPILE_SHAPES
             for name, call in walking_calls(rows, steps, layout).items()]
    calls += [(f"autograd {rows}x{steps} {name}", call)
              for rows, steps in AUTOGRAD_SHAPES for name, call in autograd_calls(rows, steps).items()]
    calls += [(f"no look-behind {rows}x{steps} {name}", _without_look_behind(call))
              for rows, steps in NO_LOOK_BEHIND_SHAPES for name, call in walking_calls(rows, steps).items()
              if not name.startswith("retrace")]
    seen: set[str] = set()
    failures: list[str] = []
    compiled_launches: list[tuple[str, Launch, bytes]] = []
    for label, call in calls:
        for launch in record_launches(call):
            signature, constants, attributes, options = compile_options(launch)
            key = repr((launch.kernel.__name__, sorted(signature.items()), sorted(map(repr, constants.items())),
                        sorted(attributes.items()), sorted(options.items())))
            if key in seen:
                continue
            seen.add(key)
            try:
                compiled = _sm90_kernel(launch)
            except Exception as error:  # noqa: BLE001 - every failure is reported, then the run fails
                failures.append(f"{label}: {launch.kernel.__name__}: {type(error).__name__}: {error}"[:600])
                continue
            compiled_launches.append((label, launch, compiled.asm["cubin"]))
    cubins = [cubin for _, _, cubin in compiled_launches]
    for (label, launch, _), guarded in zip(compiled_launches, guarded_warp_collectives(cubins), strict=True):
        if guarded:
            failures.append(f"{label}: {launch.kernel.__name__} {launch.meta}: warp-collective instructions under a "
                            f"guard predicate: {'; '.join(guarded[:4])}"[:600])
    return len(seen), failures


# SASS instructions that every thread of a warp (or of the block) must execute together
_WARP_COLLECTIVE = re.compile(r"/\*[0-9a-f]+\*/\s+@!?U?P(?!T\b)\w+\s+(REDUX|VOTEU?|SHFL|MATCH|WARPSYNC|BAR|LDSM|STSM)\b")


def guarded_warp_collectives(cubins: list[bytes]) -> list[list[str]]:
    """The warp-collective instructions of each cubin that carry a guard predicate, from nvdisasm.

    A tripwire: in a look-back variant whose time-major V-trace calls gave wrong results on an H200,
    ptxas had turned a warp reduction under a uniform condition into a ``REDUX`` guarded by a
    predicate set from the lane index (benchmarks/NOTES.md, "Twentieth round"). No launch of the
    current kernels holds a guarded warp-collective instruction at all, so a new one is reported
    for inspection (a guard that is uniform across the warp would be harmless).

    One nvdisasm process reads the code of every cubin as one raw instruction stream: it takes about
    0.5 s to start, as long as disassembling a whole cubin takes, so two hundred cubins one at a time
    cost minutes of a CPU. Raw instructions print as in a cubin's disassembly, without its labels.
    """
    codes = [_code(cubin) for cubin in cubins]
    starts = list(itertools.accumulate((len(code) for code in codes[:-1]), initial=0))
    found: list[list[str]] = [[] for _ in cubins]
    if not any(codes):
        return found
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "code.bin")
        with open(path, "wb") as file:
            file.write(b"".join(codes))
        sass = subprocess.run([_nvidia_tool("nvdisasm"), "--binary", "SM90a", "--no-dataflow", path],
                              capture_output=True, text=True, check=True).stdout
    for line in sass.splitlines():
        if (offset := _OFFSET.match(line)) and _WARP_COLLECTIVE.search(line):
            found[bisect.bisect_right(starts, int(offset.group(1), 16)) - 1].append(" ".join(line.split()))
    return found


_OFFSET = re.compile(r"^\s+/\*([0-9a-f]+)\*/")


def _code(cubin: bytes) -> bytes:
    """The instructions of a cubin (an ELF64 file): its ``.text.*`` sections, in order."""
    return b"".join(code for name, code in _sections(cubin).items() if name.startswith(b".text."))


def _disassemble(cubin: bytes) -> str:
    """The SASS of a cubin, from nvdisasm (its instructions; dataflow annotations left out)."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "kernel.cubin")
        with open(path, "wb") as file:
            file.write(cubin)
        return subprocess.run([_nvidia_tool("nvdisasm"), "--print-code", "--no-dataflow", path], capture_output=True,
                              text=True, check=True).stdout


_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_BRANCH = re.compile(r"\bBRA\s+`?\(?(\.L_x_\d+)")


def launch_sass(launch: Launch) -> str:
    """The SASS of the launch's kernel compiled for sm_90a."""
    return _disassemble(_sm90_kernel(launch).asm["cubin"])


def sass_opcodes(sass: str) -> collections.Counter:
    """How many SASS instructions of each opcode (without modifiers) a kernel's SASS holds."""
    return collections.Counter(found.group(1) for line in sass.splitlines() if (found := _INSTRUCTION.match(line)))


def chunk_loop_instructions(sass: str) -> int:
    """SASS instructions of a kernel's longest loop (label to backward branch), which for a program that
    walks several chunks is its chunk loop: one chunk's work per thread; 0 for a kernel without loops (a
    chunk per program; the closing one-instruction loop after the exit does not count)."""
    lines = sass.splitlines()
    labels: dict[str, int] = {}
    longest = 0
    for index, line in enumerate(lines):
        if found := _LABEL.match(line.strip()):
            labels[found.group(1)] = index
        if (branch := _BRANCH.search(line)) and branch.group(1) in labels:
            body = lines[labels[branch.group(1)]:index + 1]
            longest = max(longest, sum(1 for body_line in body if _INSTRUCTION.match(body_line)))
    return longest if longest > 1 else 0


def bytes_per_step(launch: Launch) -> int | None:
    """Bytes that each step of a row moves through the launch's ``[rows, T]`` tensors (inputs and outputs);
    None where the launch also reads per-action ``[rows, T, actions]`` tensors (Retrace)."""
    tensors = [arg for arg in launch.args if isinstance(arg, torch.Tensor)]
    if any(tensor.dim() > 2 for tensor in tensors):
        return None
    return sum(tensor.element_size() for tensor in tensors if tensor.dim() == 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON list of the rows (with --sass too), for the tests")
    parser.add_argument("--layouts", default="float32",
                        help=f"comma-separated subset of {','.join(LAYOUTS)} (default float32, as the tests check); "
                             "--sass also takes bf16-time-major (bf16 values with uint8 flags stored [T, N])")
    parser.add_argument("--registers-only", action="store_true",
                        help="read the walks' registers from their compiled kernels, without spilled bytes (no second "
                             "ptxas run per kernel)")
    parser.add_argument("--compile-all", action="store_true",
                        help="compile every distinct launch of many calls for sm_90a; fail if any does not compile")
    parser.add_argument("--sass", default="",
                        help=f"count the SASS instructions of these calls ({','.join(walking_calls(1, 1))}) instead")
    parser.add_argument("--shapes", default="4096x4096,8x2097152", help="RxT,... for --sass")
    parser.add_argument("--plans", default="default",
                        help="tile plans for --sass, as benchmarks/tune.py takes them (default: the engine's)")
    args = parser.parse_args()
    if args.sass:
        from tune import plan_override

        rows = []
        for layout, shape, plan in itertools.product(args.layouts.split(","), args.shapes.split(","),
                                                     args.plans.split(",")):
            num_rows, seq_len = (int(v) for v in shape.split("x"))
            calls = walking_calls(num_rows, seq_len, layout)
            override = {} if plan == "default" else plan_override(plan)
            for name in args.sass.split(","):
                with _launch.tile_override(**override):
                    launches = record_launches(calls[name])
                for launch in launches:
                    sass = launch_sass(launch)
                    opcodes = sass_opcodes(sass)
                    loop = chunk_loop_instructions(sass)
                    step_bytes = bytes_per_step(launch)
                    meta = launch.meta
                    # kernels of [rows, time] tiles (not Retrace's first pass over [steps, actions] tiles)
                    row_tiles = "BLOCK_ROWS" in meta and "BLOCK_TIME" in meta
                    steps_per_thread = (meta["BLOCK_ROWS"] * meta["BLOCK_TIME"] / (meta["num_warps"] * 32)
                                        if row_tiles else 0)
                    per_step = loop / steps_per_thread if loop and row_tiles else None
                    rows.append({"layout": layout, "estimator": name, "shape": shape, "plan": plan,
                                 "kernel": launch.kernel.__name__, "strided_groups": bool(meta.get("STRIDED_GROUPS")),
                                 "opcodes": dict(opcodes), "chunk_loop": loop, "chunk_loop_per_step": per_step,
                                 "bytes_per_step": step_bytes})
                    if not args.json:
                        common = ", ".join(f"{op} {count}" for op, count in opcodes.most_common(8))
                        tile = f"{meta['BLOCK_ROWS']}x{meta['BLOCK_TIME']}x{meta['num_warps']}" if row_tiles else "-"
                        per_byte = f", {per_step / step_bytes:.2f} a byte" if per_step and step_bytes else ""
                        loop_text = (f"; chunk loop {loop} for {steps_per_thread:g} steps a thread, {per_step:.1f} a step"
                                     f"{per_byte}" if per_step else "")
                        print(f"{layout:10s} {name:20s} {shape:>11s} {plan:>12s} {launch.kernel.__name__:24s} {tile:>11s} "
                              f"{sum(opcodes.values()):5d} instructions ({common}){loop_text}")
        if args.json:
            print(json.dumps(rows))
        return
    if args.compile_all:
        compiled, failures = compile_every_launch()
        for failure in failures:
            print(failure)
        print(f"{compiled} distinct launches compiled for sm_90a, {len(failures)} failed")
        raise SystemExit(1 if failures else 0)
    layouts = args.layouts.split(",")
    if unknown := set(layouts) - set(LAYOUTS):
        parser.error(f"unknown layouts {sorted(unknown)}; expected {', '.join(LAYOUTS)}")
    rows = [row for layout in layouts for row in walk_residency(layout=layout, spills=not args.registers_only)]
    if args.json:
        print(json.dumps([{**dataclasses.asdict(row), "registers_needed": row.registers_needed, "fits": row.fits}
                          for row in rows]))
        return
    print(f"walked segments on an H200 ({H200_MULTIPROCESSORS} multiprocessors), ptxas for sm_90a, "
          f"triton {triton.__version__}")
    print(f"{'layout':10s} {'estimator':20s} {'shape':>11s} {'kernel':24s} {'cap':>4s} {'registers':>9s} "
          f"{'spilled':>7s} {'warps':>5s} {'programs':>8s} {'per SM':>6s} {'registers per SM':>16s}  fits")
    for row in rows:
        shape = f"{row.shape[0]}x{row.shape[1]}"
        cap = "-" if row.register_cap is None else str(row.register_cap)
        print(f"{row.layout:10s} {row.estimator:20s} {shape:>11s} {row.kernel:24s} {cap:>4s} {row.registers:9d} "
              f"{'-' if row.spilled_bytes is None else row.spilled_bytes:>7} {row.warps:5d} {row.programs:8d} {row.programs_per_multiprocessor:6d} "
              f"{row.registers_needed:16d}  {'yes' if row.fits else 'NO'}")


if __name__ == "__main__":
    main()
