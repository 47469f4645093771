"""Shared fixtures: device, backend parametrisation, seeded random rollouts, error norms.

Without CUDA the Triton kernels run on CPU tensors through Triton's interpreter, which must be
switched on before triton (and so rl_triton's kernel modules) is imported: hence the environment
variable is set here, before anything imports rl_triton.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import zlib

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

from rl_triton import _dispatch


def _patch_language_once_per_launch() -> None:
    """Make Triton 3.6's interpreter patch ``triton.language`` once per kernel launch.

    The interpreter swaps ``triton.language``'s builtins for host versions when a launch starts and
    puts them back when it ends. It runs the same swap again at every call of a ``@triton.jit``
    helper inside the kernel (``InterpretedFunction.__call__``), where it finds every builtin
    already swapped and changes nothing: a scan of the language modules each time, which took half
    the time of a walked-segment test (13.1 s with it, 6.3 s without). Here a helper's swap is skipped while a launch's swap
    of the same modules is in place; kernels run the same host code either way. Any other Triton
    keeps its own behaviour.
    """
    from triton.runtime import interpreter

    patch_lang = getattr(interpreter, "_patch_lang", None)
    scope_class = getattr(interpreter, "_LangPatchScope", None)
    if patch_lang is None or scope_class is None or not hasattr(scope_class, "restore"):
        return
    language_modules = (interpreter.tl, interpreter.tl.core)
    patched: set[int] = set()
    modules_by_function: dict[object, frozenset[int]] = {}

    def modules_seen_by(fn) -> frozenset[int]:
        modules = modules_by_function.get(fn)
        if modules is None:
            modules = frozenset(id(value) for value in fn.__globals__.values()
                                if any(value is module for module in language_modules))
            modules_by_function[fn] = modules
        return modules

    def patch_lang_once(fn):
        wanted = modules_seen_by(fn)
        if patched and wanted <= patched:
            return scope_class()
        scope = patch_lang(fn)
        patched.update(wanted)
        restore = scope.restore

        def restore_and_forget() -> None:
            restore()
            patched.clear()

        scope.restore = restore_and_forget
        return scope

    interpreter._patch_lang = patch_lang_once


if os.environ.get("TRITON_INTERPRET") == "1":
    _patch_language_once_per_launch()

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
BACKENDS = ("triton", "reference")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shard", default=None, metavar="K/N",
        help="run only the K-th (from 1) of N interleaved shares of the collected tests: every N-th test from the "
             "K-th, so that N runs (processes or machines) of the shares 1/N .. N/N run each test once")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = config.getoption("--shard")
    if shard is None:
        return
    match = re.fullmatch(r"(\d+)/(\d+)", shard)
    if match is None or not 1 <= int(match[1]) <= int(match[2]):
        raise pytest.UsageError(f"--shard takes K/N with 1 <= K <= N, not {shard!r}")
    index, count = int(match[1]) - 1, int(match[2])
    # interleaved rather than in blocks: the parametrised cases of one slow test spread over all shares
    kept, deselected = [], []
    for position, item in enumerate(items):
        (kept if position % count == index else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = kept


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """Workers of ``-n auto``: none with a GPU (the speed tests skip under workers, whose kernels
    would share the GPU), else pytest-xdist's count, one per CPU core."""
    return 0 if HAS_CUDA else None


# relative error allowed against the float64 oracle, by input dtype
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12}
# half-precision inputs: the estimators compute in float32 but store 8 (bf16) or 11 (fp16)
# significant bits, so about 2**-8 relative error per element; 1e-2 leaves room for the norm
HALF_TOLERANCE = 1e-2

# per-step floating fields of a rollout (float64 copies of these feed the oracle)
STEP_FIELDS = (
    "rewards",
    "values",
    "next_values",
    "bootstrap_values",
    "log_pi_target",
    "log_pi_behavior",
    "probs_behavior",
    "q_values",
    "gradients",
    "inputs",
)
FLAG_FIELDS = ("terminateds", "truncateds", "dones")
ACTION_FIELDS = ("probs_target", "next_q_values_all")
ROW_FIELDS = ("last_value", "seed_values")
# every field of a rollout
ALL_FIELDS = (*STEP_FIELDS, *FLAG_FIELDS, *ACTION_FIELDS, *ROW_FIELDS, "actions")

DTYPES = [pytest.param(torch.float32, id="f32"), pytest.param(torch.float64, id="f64")]

# (dtype, rows, T): single- and two-step rows, a prime, both sides of the power of two 64, a long
# row, and one step past the longest row the default plans take as one chunk (4097 steps: split
# in time into chunks of 2048 or 4096 steps, with a look-back); 33 rows is one past a power-of-two
# row tile. float32 runs every shape, float64 a spread of them (under the interpreter each shape
# costs seconds).
_F32_SHAPES = [(rows, seq_len) for seq_len in (1, 2, 7, 63, 65) for rows in (1, 3, 33)] + [(1, 1000), (3, 1000),
                                                                                           (1, 4097)]
_F64_SHAPES = [(1, 1), (3, 2), (33, 7), (1, 63), (3, 65), (1, 1000)]
SHAPES = [
    pytest.param(dtype, rows, seq_len, id=f"{name}-{rows}x{seq_len}")
    for dtype, name, shapes in ((torch.float32, "f32", _F32_SHAPES), (torch.float64, "f64", _F64_SHAPES))
    for rows, seq_len in shapes
]
# the largest shape costs seconds under the interpreter: it runs once per scan direction, in
# test_gae (backward) and test_prefix_sum (forward), float32 only
LARGEST_SHAPE = (33, 1000)

# tile overrides that reach the chunked and time-split paths at small sizes: (tile kwargs, rows, T)
TILE_CASES = [
    # 13 chunks of 16 (the last one 8 steps), two row tiles (the second half empty), split in time
    pytest.param({"block_rows": 2, "block_time": 16, "split": True}, 3, 200, id="r2t16-split-3x200"),
    # the same walked chunk by chunk by one program per row tile
    pytest.param({"block_rows": 2, "block_time": 16, "split": False}, 3, 200, id="r2t16-loop-3x200"),
    # exactly one chunk, and one step into a second chunk
    pytest.param({"block_rows": 1, "block_time": 16, "split": True}, 1, 16, id="r1t16-split-1x16"),
    pytest.param({"block_rows": 4, "block_time": 16, "split": True}, 5, 17, id="r4t16-split-5x17"),
    # fewer steps than one chunk while splitting is forced
    pytest.param({"block_rows": 2, "block_time": 16, "split": True}, 2, 1, id="r2t16-split-2x1"),
    # grouped tiles: groups of 2-8 contiguous steps per thread, scanned in registers, in either direction
    pytest.param({"block_rows": 2, "block_time": 16, "split": False, "vec": 4}, 3, 200, id="r2t16v4-loop-3x200"),
    # (the launcher groups only rows of whole groups, so a ragged last chunk is a whole group: 104 steps)
    pytest.param({"block_rows": 1, "block_time": 32, "split": True, "vec": 8}, 2, 104, id="r1t32v8-split-2x104"),
    pytest.param({"block_rows": 4, "block_time": 8, "split": False, "vec": 2}, 5, 22, id="r4t8v2-loop-5x22"),
    # look-back windows of 4 and 2 chunks
    pytest.param({"block_rows": 2, "block_time": 16, "split": True, "window": 4}, 3, 200, id="r2t16w4-split-3x200"),
    pytest.param({"block_rows": 1, "block_time": 16, "split": True, "window": 2}, 1, 200, id="r1t16w2-split-1x200"),
    # walked segments (GAE, V-trace, returns, episodic scans; others split one chunk per program):
    # 2 row tiles of 2 segments (7 and 6 chunks); 8 segments of 4 chunks per row looked back over
    # in windows of 2 (tests/test_walk.py walks every such kernel further)
    pytest.param({"block_rows": 2, "block_time": 16, "split": True, "walk_programs": 1}, 3, 200, id="r2t16m1-walk-3x200"),
    pytest.param({"block_rows": 1, "block_time": 8, "split": True, "walk_programs": 2, "window": 2}, 2, 250,
                 id="r1t8m2w2-walk-2x250"),
]
# the tiles on which every argument variant of an estimator runs (tests/test_*.py:
# test_argument_variants_across_chunks): 13 chunks of 16 steps split in time, and the same walked
# in 2 segments per row tile
VARIANT_TILES = [
    pytest.param({"block_rows": 2, "block_time": 16, "split": True}, id="r2t16-split"),
    pytest.param({"block_rows": 2, "block_time": 16, "split": True, "walk_programs": 1}, id="r2t16m1-walk"),
]
if HAS_CUDA:
    # look-backs past one window, which only concurrent programs reach (the interpreter runs
    # programs one after another, so every predecessor is already done): 33 chunks, window 32;
    # 257 chunks, windows of 2 and 4
    TILE_CASES += [
        pytest.param({"block_rows": 1, "block_time": 16, "split": True, "window": 32}, 1, 513, id="r1t16-split-1x513"),
        pytest.param({"block_rows": 1, "block_time": 16, "split": True, "window": 2}, 2, 4100, id="r1t16w2-split-2x4100"),
        pytest.param({"block_rows": 2, "block_time": 16, "split": True, "window": 4}, 3, 4100, id="r2t16w4-split-3x4100"),
        # walked segments looked back over while their predecessors still walk: 66 segments per row
        # on 132 multiprocessors, windows of 4
        pytest.param({"block_rows": 1, "block_time": 16, "split": True, "walk_programs": 1, "window": 4}, 2, 4100,
                     id="r1t16m1w4-walk-2x4100"),
    ]


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / max(||ref||, tiny), in float64."""
    out = out.detach().to(torch.float64)
    ref = ref.detach().to(torch.float64)
    tiny = torch.finfo(torch.float64).tiny
    return float(torch.linalg.vector_norm(out - ref) / max(float(torch.linalg.vector_norm(ref)), tiny))


def assert_rel(out: torch.Tensor, ref: torch.Tensor, tol: float, what: str = "output") -> None:
    """out is finite, has ref's shape and is within relative error tol of ref: as a whole (the norm
    of the error against the norm of ref) and at every element (``|out - ref| <= tol * (|ref| +
    max |ref|)``, so that one wrong element of a large output cannot hide in the norm)."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert torch.isfinite(out).all(), f"{what}: non-finite values for finite inputs"
    err = rel_err(out, ref)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e}"
    if ref.numel() == 0:
        return
    out, ref = out.detach().to(torch.float64), ref.detach().to(torch.float64)
    magnitude = ref.abs()
    excess = (out - ref).abs() - tol * (magnitude + magnitude.max())
    worst = int(excess.argmax())
    assert float(excess.flatten()[worst]) <= 0, (
        f"{what}: element {tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), ref.shape))} is "
        f"{float(out.flatten()[worst]):.6g} against {float(ref.flatten()[worst]):.6g} (tolerance {tol:.1e} of its "
        f"magnitude plus the largest, {float(magnitude.max()):.3g})"
    )


def on_another_device(x: torch.Tensor) -> torch.Tensor:
    """``x`` moved to a device other than its own: the CPU for a CUDA tensor, else the meta device
    (no data; enough for the device checks, which come before any read)."""
    return x.to("meta") if x.device.type == "cpu" else x.cpu()


def outputs(result: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Every estimator's result as a tuple of tensors."""
    return result if isinstance(result, tuple) else (result,)


def assert_rounded_once(narrow, wide, dtype: torch.dtype = torch.bfloat16) -> None:
    """Each output of ``narrow`` (a call with ``out_dtype=dtype``) is ``dtype`` and equals the same output of
    ``wide`` (the call in the compute dtype) rounded once, within one step of ``dtype``: Triton's
    interpreter rounds float32 to bf16 toward zero, and a 2-byte output may change the plan's vectors
    and with them float32 rounding."""
    for got, want in zip(outputs(narrow), outputs(wide), strict=True):
        assert got.dtype == dtype
        torch.testing.assert_close(got, want.to(dtype), rtol=2.0**-7, atol=0)


def assert_outputs_rel(result, expected, tol: float) -> None:
    for index, (out, ref) in enumerate(zip(outputs(result), outputs(expected), strict=True)):
        assert_rel(out, ref, tol, what=f"output {index}")


def name_pattern(*names: str) -> str:
    """A regex matching a message that names every one of ``names`` as a whole word."""
    return "(?s)" + "".join(rf"(?=.*\b{re.escape(name)}\b)" for name in names)


def broken(kwargs: dict, **changes) -> dict:
    """``kwargs`` with some arguments replaced."""
    return {**kwargs, **changes}


def time_major_storage(x: torch.Tensor) -> torch.Tensor:
    """The same [N, T(, A)] values, stored time-major (row stride 1, time stride N)."""
    return x.transpose(0, 1).contiguous().transpose(0, 1)


def every_other_step(x: torch.Tensor) -> torch.Tensor:
    """The same [N, T(, A)] values as a view with time stride 2; the skipped steps hold poison.

    Poison is NaN for floating tensors, a set flag for flags and an out-of-range action index
    for actions, so a kernel that reads a skipped step produces a wrong or NaN result.
    """
    shape = list(x.shape)
    shape[1] *= 2
    big = torch.full(shape, _poison(x.dtype), dtype=x.dtype, device=x.device)
    big[:, ::2] = x
    return big[:, ::2]


def _poison(dtype: torch.dtype) -> float | int:
    """NaN for floating tensors, an out-of-range action index for actions, a set flag for flags."""
    if dtype.is_floating_point:
        return float("nan")
    if dtype in (torch.int32, torch.int64):
        return -7
    return 1


def padded_rows(x: torch.Tensor) -> torch.Tensor:
    """The same [N, T(, A)] values as a view whose rows lie one step further apart than T, with
    poison (as in ``every_other_step``) in the step between them."""
    shape = list(x.shape)
    shape[1] += 1
    big = torch.full(shape, _poison(x.dtype), dtype=x.dtype, device=x.device)
    big[:, : x.shape[1]] = x
    return big[:, : x.shape[1]]


def unaligned_storage(x: torch.Tensor) -> torch.Tensor:
    """The same values, contiguous, stored one element past a 16-byte boundary."""
    flat = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
    view = flat[1:].view(x.shape)
    view.copy_(x)
    return view


def episode_slices(flags: torch.Tensor, boundary: str = "ends_at") -> list[slice]:
    """The episodes of one row of flags as slices: each ends at a flagged step ("ends_at")
    or starts at one ("starts_at")."""
    flagged = [int(t) for t in torch.nonzero(flags != 0).flatten()]
    seq_len = flags.shape[-1]
    if boundary == "ends_at":
        ends = [t + 1 for t in flagged if t + 1 < seq_len] + [seq_len]
        starts = [0, *ends[:-1]]
    else:
        starts = [0, *[t for t in flagged if t > 0]]
        ends = [*starts[1:], seq_len]
    return [slice(start, end) for start, end in zip(starts, ends, strict=True)]


class Snapshot:
    """Clones of every tensor argument, to check after a call that none was modified."""

    def __init__(self, kwargs: dict) -> None:
        self.kwargs = kwargs
        self.clones = {k: v.clone() for k, v in kwargs.items() if isinstance(v, torch.Tensor)}

    def assert_unchanged(self) -> None:
        for name, clone in self.clones.items():
            assert torch.equal(self.kwargs[name], clone) or (
                clone.dtype.is_floating_point
                and torch.allclose(self.kwargs[name], clone, rtol=0, atol=0, equal_nan=True)
            ), f"{name} was modified by the call"


class Rollout:
    """Random inputs for every estimator, shape ``[*batch, T]`` (``[*batch, T, A]`` per action).

    Rewards, values and the like are standard normal. About 5% of steps are terminated and
    about 5% truncated, never both at one step. bootstrap_values is non-zero exactly at
    truncated steps and in the last column (its legal placement); last_value is that column.
    Retrace gets a normalised positive target distribution over ``num_actions`` actions,
    in-range actions and the positive behaviour probability of the taken action.
    """

    def __init__(
        self,
        gen: torch.Generator,
        batch: tuple[int, ...],
        seq_len: int,
        *,
        dtype: torch.dtype = torch.float32,
        flag_dtype: torch.dtype | None = None,
        num_actions: int = 4,
        device: str = DEVICE,
        term_rate: float = 0.05,
        trunc_rate: float = 0.05,
    ) -> None:
        shape = (*batch, seq_len)
        self.batch = batch
        self.seq_len = seq_len
        self.num_actions = num_actions

        def normal(*size: int) -> torch.Tensor:
            return torch.randn(size, generator=gen, dtype=torch.float64)

        draw = torch.rand(shape, generator=gen, dtype=torch.float64)
        terminated = draw < term_rate
        truncated = (draw >= term_rate) & (draw < term_rate + trunc_rate)
        bootstrap = normal(*shape) * truncated
        bootstrap[..., -1] = normal(*batch)

        target_logits = normal(*shape, num_actions)
        behavior_logits = normal(*shape, num_actions)
        actions = torch.randint(0, num_actions, shape, generator=gen)
        probs_target = torch.softmax(target_logits, dim=-1)
        probs_behavior = torch.softmax(behavior_logits, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        log_pi_behavior = -torch.rand(shape, generator=gen, dtype=torch.float64) * 3.0
        # ratios exp(target - behavior) spread around 1, so clipping at rho_bar/c_bar matters
        log_pi_target = log_pi_behavior + 0.5 * normal(*shape)

        fields = {
            "rewards": normal(*shape),
            "values": normal(*shape),
            "next_values": normal(*shape),
            "bootstrap_values": bootstrap,
            "log_pi_target": log_pi_target,
            "log_pi_behavior": log_pi_behavior,
            "probs_behavior": probs_behavior,
            "q_values": normal(*shape),
            "gradients": normal(*shape),
            "inputs": normal(*shape),
            "probs_target": probs_target,
            "next_q_values_all": normal(*shape, num_actions),
            "last_value": bootstrap[..., -1].clone(),
            "seed_values": normal(*batch),
        }
        for name, value in fields.items():
            setattr(self, name, value.to(dtype=dtype, device=device))
        flag_dtype = dtype if flag_dtype is None else flag_dtype
        self.terminateds = terminated.to(dtype=flag_dtype, device=device)
        self.truncateds = truncated.to(dtype=flag_dtype, device=device)
        self.dones = (terminated | truncated).to(dtype=flag_dtype, device=device)
        self.actions = actions.to(device)

    def as_float64(self) -> Rollout:
        """A copy with every floating field in float64 (flags and actions unchanged): the oracle's inputs."""
        copy = object.__new__(Rollout)
        copy.__dict__.update(self.__dict__)
        for name in (*STEP_FIELDS, *ACTION_FIELDS, *ROW_FIELDS):
            setattr(copy, name, getattr(self, name).to(torch.float64))
        return copy

    def row_blocks(self, max_elements: int) -> list[Rollout]:
        """Copies of consecutive rows of a ``[rows, T]`` rollout, each of at most ``max_elements`` steps (at least
        one row), in order; a rollout of several batch dims comes back whole."""
        num_rows = self.batch[0]
        block_rows = max(1, max_elements // self.seq_len)
        if len(self.batch) != 1 or num_rows <= block_rows:
            return [self]
        blocks = []
        for start in range(0, num_rows, block_rows):
            block = self.map(lambda x, start=start: x[start:start + block_rows], fields=ALL_FIELDS)
            block.batch = (block.rewards.shape[0],)
            blocks.append(block)
        return blocks

    def rows(self) -> Rollout:
        """A copy with the batch dims merged into one row dim ([rows, T]), as the oracle wants."""
        copy = object.__new__(Rollout)
        copy.__dict__.update(self.__dict__)
        num_rows = 1
        for size in self.batch:
            num_rows *= size
        for name in (*STEP_FIELDS, *FLAG_FIELDS, "actions"):
            setattr(copy, name, getattr(self, name).reshape(num_rows, self.seq_len))
        for name in ACTION_FIELDS:
            setattr(copy, name, getattr(self, name).reshape(num_rows, self.seq_len, self.num_actions))
        for name in ROW_FIELDS:
            setattr(copy, name, getattr(self, name).reshape(num_rows))
        copy.batch = (num_rows,)
        return copy

    def oracle_inputs(self) -> Rollout:
        return self.rows().as_float64()

    def map(self, fn, fields=(*STEP_FIELDS, *FLAG_FIELDS, "actions")) -> Rollout:
        """A copy with ``fn`` applied to the named fields."""
        copy = object.__new__(Rollout)
        copy.__dict__.update(self.__dict__)
        for name in fields:
            setattr(copy, name, fn(getattr(self, name)))
        return copy


@pytest.fixture
def device() -> str:
    return DEVICE


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest):
    """Run the test body with the implementation forced to ``triton`` or ``reference``."""
    name = request.param
    if name == "triton" and not HAS_CUDA and not _dispatch.interpreter_enabled():
        pytest.skip("Triton on CPU needs TRITON_INTERPRET=1 set before the test session starts")
    with _dispatch.use_backend(name):
        yield name


def plans_for_multiprocessors(monkeypatch: pytest.MonkeyPatch, count: int):
    """Plans made as for a GPU of ``count`` multiprocessors on every device, for the body of a fixture that
    yields from this."""
    from rl_triton import _launch

    # plans are cached per shape: none planned for another count may serve these tests, nor theirs others
    _launch._default_plan.cache_clear()
    monkeypatch.setattr(_launch, "_multiprocessors", lambda device: count)
    yield
    _launch._default_plan.cache_clear()


def plan_for_gpu(monkeypatch: pytest.MonkeyPatch, dram_gbps_per_multiprocessor: float = 25.0,
                 multiprocessors: int = 132) -> None:
    """Plans made from here on are made afresh for a GPU of that many multiprocessors (132: an H100 or an H200)
    and that peak memory bandwidth per multiprocessor (GB/s; an H100: 25.4, an H200: 36.5). The caller empties
    the plan cache after (``fresh_plans`` in tests/test_plans.py, ``four_multiprocessors``)."""
    from rl_triton import _launch

    _launch._default_plan.cache_clear()
    monkeypatch.setattr(_launch, "_multiprocessors", lambda device: multiprocessors)
    monkeypatch.setattr(_launch, "_dram_gbps_per_multiprocessor", lambda device: dram_gbps_per_multiprocessor)


@pytest.fixture
def four_multiprocessors(monkeypatch: pytest.MonkeyPatch):
    """Plans made as for a GPU of 4 multiprocessors on every device (walked segments at small sizes)."""
    yield from plans_for_multiprocessors(monkeypatch, 4)


@pytest.fixture
def gen(request: pytest.FixtureRequest) -> torch.Generator:
    """A CPU generator seeded from the test id: fresh data per test, reproducible per test."""
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def make_rollout(gen: torch.Generator):
    """Factory: ``make_rollout(batch, seq_len, dtype=..., flag_dtype=..., num_actions=...)`` -> Rollout."""

    def make(batch: int | tuple[int, ...], seq_len: int, **kwargs) -> Rollout:
        batch = (batch,) if isinstance(batch, int) else tuple(batch)
        return Rollout(gen, batch, seq_len, **kwargs)

    return make


# reserved GPU memory a test may leave cached for its worker's next tests
CACHED_GPU_BYTES_KEPT = 2 << 30


def release_cached_gpu_memory() -> None:
    """Where more than ``CACHED_GPU_BYTES_KEPT`` stays reserved in PyTorch's caching allocator on any GPU, give the
    cached blocks back (``torch.cuda.empty_cache`` frees those of every GPU)."""
    if not torch.cuda.is_initialized():
        return
    # GPUs by index: without one, memory_reserved looks up torch.cuda.device, which a test may have replaced
    # (tests/test_edges.py), and the fixture below runs before that test's monkeypatch is undone
    if any(torch.cuda.memory_reserved(index) > CACHED_GPU_BYTES_KEPT for index in range(torch.cuda.device_count())):
        torch.cuda.empty_cache()


@pytest.fixture(autouse=True)
def _release_cached_gpu_memory():
    """After each test, release_cached_gpu_memory: pytest-xdist's workers share one GPU, and a worker that keeps a
    large case's blocks cached runs the others out of memory."""
    yield
    release_cached_gpu_memory()


@pytest.fixture(autouse=True)
def _no_correctness_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Data-dependent checks are off unless a test switches them on."""
    monkeypatch.delenv("RL_TRITON_CORRECTNESS_WARNINGS", raising=False)


def small_tiles(split: bool | None = True):
    """Tiles of 2 rows x 16 steps: chunk edges and time segments every few steps (Triton backend)."""
    from rl_triton import _launch

    return _launch.tile_override(block_rows=2, block_time=16, split=split)


def benchmark_module(script: str):
    """``benchmarks/<script>`` imported as a module of its own (``registers.py``, ``host_cost.py``)."""
    import importlib.util

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / script
    spec = importlib.util.spec_from_file_location(f"{path.stem}_under_test", path)
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up while it runs
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_benchmark_script(script: str, *args: str, timeout: int) -> subprocess.CompletedProcess:
    """``benchmarks/<script>`` (``registers.py``, ``compile_time.py``, ``first_call.py``) with ``args`` in a process of its own,
    with Triton's compiler: under ``TRITON_INTERPRET`` Triton compiles nothing. Skips the test where this
    Triton has no ptxas."""
    root = pathlib.Path(__file__).resolve().parents[1]
    return _run_with_compiler([str(root / "benchmarks" / script), *args], timeout)


def run_with_benchmark_modules(code: str, timeout: int) -> subprocess.CompletedProcess:
    """Python ``code`` in a process of its own that imports ``benchmarks/``' modules (``registers``), with
    Triton's compiler, as ``run_benchmark_script``."""
    return _run_with_compiler(["-c", code], timeout)


def _run_with_compiler(argv: list[str], timeout: int) -> subprocess.CompletedProcess:
    import triton

    ptxas = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not ptxas.exists():
        pytest.skip(f"this Triton has no ptxas at {ptxas}")
    root = pathlib.Path(__file__).resolve().parents[1]
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root / "src"), str(root / "benchmarks"),
                                                      env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, *argv], check=False, capture_output=True, text=True, env=env,
                          timeout=timeout)


def printed_by_fresh_process(code: str) -> list[str]:
    """The words ``code`` prints in a new Python process that imports what this one does (this
    process's ``sys.path``): for what a process does only once, such as its first imports."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.split()
