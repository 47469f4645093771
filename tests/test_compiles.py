"""Every kernel launch compiles for an H200 (sm_90a), though CI runs the kernels in Triton's interpreter.

The interpreter runs code that Triton's compiler rejects: a change to the look-back that passed the
interpreter's tests of the walks, the engine and GAE stopped Triton's pass pipeline with an internal
assertion in 146 of these launches (benchmarks/NOTES.md, "Seventeenth round").
``benchmarks/registers.py --compile-all`` records the launches of every estimator in three layouts at shapes that take each kind of plan, and of the autograd kernels, without a GPU, and
compiles each distinct one with Triton's own compiler and ptxas. It runs in a process of its own:
under ``TRITON_INTERPRET`` Triton compiles nothing. It also fails on a warp-collective instruction
under a guard predicate in any launch's SASS: a look-back variant whose compiled time-major V-trace
gave wrong results on an H200 (and right ones in the interpreter) had a warp reduction that ptxas
guarded with a predicate set from the lane index (benchmarks/NOTES.md, "Twentieth round").
"""

import json
import os
import struct

import pytest

from conftest import benchmark_module, run_benchmark_script, run_with_benchmark_modules


def test_every_launch_compiles_for_sm90():
    result = run_benchmark_script("registers.py", "--compile-all", timeout=1200)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    compiled = int(result.stdout.strip().splitlines()[-1].split()[0])
    # every estimator, layout and kind of plan: far more than the walking kernels alone (60)
    assert compiled >= 150, result.stdout[-500:]


def test_time_major_strided_groups_scan_in_registers():
    """Time-major tiles read in strided groups keep each group's steps in one thread: their SASS holds
    a few shared-memory loads a chunk (the groups' maps across warps), not one set per step. Triton
    chooses that layout from a hint (``kernels/scan.py: strided_offsets``); read step by step, time-major
    GAE at 4096x4096 held 130 shared-memory loads (benchmarks/NOTES.md, "Twenty-sixth round")."""
    estimators = "gae,gae+trunc,vtrace,lambda-returns,discounted-returns,eligibility-traces,prefix-sum"
    result = run_benchmark_script("registers.py", "--sass", estimators, "--shapes", "2048x4096,4096x4096,16384x512", "--layouts", "time-major",
                                  "--json", timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(rows) == 21
    for row in rows:
        assert row["strided_groups"], row
        # 8 a launch for most, 20 for V-trace's 64-row tiles in pairs at 16384x512 (4 warps of 32 row pairs
        # x 1 group each: the groups' maps cross every warp)
        assert row["opcodes"].get("LDS", 0) <= 24, (row["estimator"], row["shape"], row["opcodes"])


def test_compile_time_script_times_every_stage():
    """``benchmarks/compile_time.py`` (where a first call's compile time goes) prints, for each launch of a
    call, the seconds of Triton's front end and of each of its stages, which add up to less than the total."""
    result = run_benchmark_script("compile_time.py", "eligibility-traces", "64x16384", timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("eligibility-traces")]
    assert [row[1] for row in rows] == ["episodic_scan_kernel"], result.stdout
    front_end, *stages, total = (float(value) for value in rows[0][2:])
    assert len(stages) == 5, rows
    # every stage runs (ptx and cubin in hundredths of a second or more on any machine)
    assert front_end > 0 and all(seconds > 0 for seconds in stages), rows
    assert front_end + sum(stages) <= total + 0.02, rows


# sm_90a instructions as nvdisasm -hex prints them (two 64-bit words each), from a compiled kernel; bits
# 12-15 of the first word name the guard predicate (7: PT, none)
NOP = (0x0000000000007918, 0x000FC00000000000)
SHFL_BFLY = (0x0E001F00292A7F89, 0x000EA400000E0000)  # SHFL.BFLY PT, R42, R41, 0x10, 0x1f


def instruction(words: tuple[int, int], guard: int = 7) -> bytes:
    low, high = words
    return struct.pack("<QQ", low & ~0xF000 | guard << 12, high)


def elf_with_sections(sections: dict[bytes, bytes]) -> bytes:
    """An ELF64 file holding ``sections`` (by name), as a cubin holds a kernel's code and attributes."""
    names = b"\0.shstrtab\0" + b"".join(name + b"\0" for name in sections)
    body = names + b"".join(sections.values())
    section_headers = 64 + len(body)
    headers = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
               struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, 64, len(names), 0, 0, 1, 0)]
    name, offset = len(b"\0.shstrtab\0"), 64 + len(names)
    for section_name, content in sections.items():
        headers.append(struct.pack("<IIQQQQIIQQ", name, 1, 6, 0, offset, len(content), 0, 0, 128, 0))
        name += len(section_name) + 1
        offset += len(content)
    header = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01", 2, 190, 1, 0, 0, section_headers, 0, 64, 0, 0,
                         64, len(headers), 1)
    return header + body + b"".join(headers)


def elf_with_code(*sections: bytes) -> bytes:
    """An ELF64 file holding ``sections`` as ``.text.*`` sections, as a cubin holds a kernel's code."""
    return elf_with_sections({b".text.kernel%d" % index: code for index, code in enumerate(sections)})


def test_register_counts_are_read_from_a_cubins_attributes():
    """``registers.py --registers-only`` reads a kernel's registers from its cubin's ``.nv.info``
    attributes (the count, 0x2f, among others of every format) instead of running ptxas again."""
    registers = benchmark_module("registers.py")

    def attribute(form: int, kind: int, value: bytes = b"") -> bytes:
        if form == 4:
            return bytes((form, kind)) + struct.pack("<H", len(value)) + value
        return bytes((form, kind)) + value

    frame = attribute(4, 0x11, struct.pack("<II", 10, 16))
    count = attribute(4, 0x2F, struct.pack("<II", 10, 161))
    others = attribute(3, 0x1B, b"\xa8\x00") + attribute(2, 0x50, b"\x07\x00") + attribute(1, 0x0A, b"\x00\x00")
    code = {b".text.kernel": instruction(NOP)}
    assert registers.cubin_registers(elf_with_sections({**code, b".nv.info": frame + count + others})) == 161
    assert registers.cubin_registers(elf_with_sections({b".nv.info": others + count, **code})) == 161
    with pytest.raises(ValueError, match="one register count"):
        registers.cubin_registers(elf_with_sections({**code, b".nv.info": frame + others}))


def test_guarded_warp_collectives_names_the_cubins_that_hold_them():
    """One nvdisasm process reads every cubin's code; each guarded warp-collective instruction is reported
    for the cubin (of several sections or one) that holds it, and an unguarded one for none."""
    # its disassembly helpers run nvdisasm only, no compiler
    registers = benchmark_module("registers.py")
    if not os.path.exists(registers._nvidia_tool("nvdisasm")):
        pytest.skip("this Triton has no nvdisasm")
    nop, shuffle, guarded = instruction(NOP), instruction(SHFL_BFLY), instruction(SHFL_BFLY, guard=0)
    plain = elf_with_code(nop + shuffle + nop)
    two_sections = elf_with_code(nop + guarded, nop * 3)
    last = elf_with_code(guarded + shuffle + instruction(SHFL_BFLY, guard=2))
    found = registers.guarded_warp_collectives([plain, two_sections, plain, last])
    assert [len(lines) for lines in found] == [0, 1, 0, 2]
    assert "@P0 SHFL.BFLY" in found[1][0]
    assert "@P0 SHFL.BFLY" in found[3][0] and "@P2 SHFL.BFLY" in found[3][1]
    assert registers.guarded_warp_collectives([plain]) == [[]]
    assert registers.guarded_warp_collectives([]) == []


WALKED_FUNCTIONS = """
import os, sys, tempfile
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
import registers
cases = ((8, 2**21, "retrace-a4"), (1, 2**24, "retrace-a18"), (8, 2**21, "gae"), (4096, 4096, "retrace-a4"))
for rows, steps, name in cases:
    for launch in registers.record_launches(registers.walking_calls(rows, steps)[name]):
        ptx = registers._sm90_kernel(launch).asm["ptx"]
        # a function's name on its declaration and on its definition
        functions = {line.split("(")[0] for line in ptx.splitlines() if line.startswith(".func ")}
        calls = ptx.count("call.uni ")
        finish = sum("finish_walked_segment" in line for line in functions)
        print(name, rows, steps, launch.kernel.__name__, len(functions), finish, calls)
"""


def test_retrace_walks_end_in_a_function_of_their_own():
    """The look-back and head redo of Retrace's walked segments compile as a function of their own, called
    once (``kernels/scan.py: finish_walked_segment_apart``): Triton's coalescing pass takes time in
    proportion to a function's memory operations times the square of its size, and the redo repeats the
    kernel's loads. The other walks (GAE here) keep them inlined, and Retrace's programs that do not walk
    call no function."""
    result = run_with_benchmark_modules(WALKED_FUNCTIONS, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.split() for line in result.stdout.splitlines()]
    kernels = [(row[0], row[3]) for row in rows]
    assert ("retrace-a4", "retrace_scan_kernel") in kernels and ("gae", "gae_kernel") in kernels, rows
    for row in rows:
        walked = row[3] == "retrace_scan_kernel" and int(row[2]) > 4096
        # (functions, of them the segment's end, calls)
        assert tuple(int(value) for value in row[4:]) == ((1, 1, 1) if walked else (0, 0, 0)), rows
