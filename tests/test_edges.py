"""Inputs at the edges of what the estimators take, on every backend: float64 computations written as
bf16, views with PyTorch's lazy negation bit, time-major outputs with gradients, empty problems with
gradients, tensors without strides (sparse, mkldnn), and scalar arguments of every kind (NumPy numbers,
tensors, values out of range, also under torch.compile)."""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.autograd import forward_ad

import rl_triton
from conftest import DEVICE, assert_rounded_once, outputs, printed_by_fresh_process
from rl_triton import _checks, _dispatch, _replay, reference

ROWS, STEPS, ACTIONS = 3, 37, 4


def _inputs(seed: int, dtype: torch.dtype = torch.float32, shape: tuple[int, int] = (ROWS, STEPS)) -> dict:
    g = torch.Generator().manual_seed(seed)

    def randn(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=g, dtype=torch.float64).to(dtype).to(DEVICE)

    terminated = torch.rand(shape, generator=g) < 0.1
    truncated = (torch.rand(shape, generator=g) < 0.1) & ~terminated
    bootstrap = randn(*shape) * truncated.to(DEVICE)
    if shape[1]:
        bootstrap[:, -1] = randn(shape[0])
    return {
        "r": randn(*shape), "v": randn(*shape), "nv": randn(*shape), "q": randn(*shape),
        "lt": 0.3 * randn(*shape), "lb": 0.3 * randn(*shape), "boot": bootstrap,
        "last": randn(shape[0]), "seed": randn(shape[0]),
        "probs": torch.softmax(randn(*shape, ACTIONS), -1), "next_q": randn(*shape, ACTIONS),
        "behavior": (0.2 + 0.8 * torch.rand(shape, generator=g, dtype=torch.float64)).to(dtype).to(DEVICE),
        "actions": torch.randint(0, ACTIONS, shape, generator=g).to(DEVICE),
        "term": terminated.to(DEVICE), "trunc": truncated.to(DEVICE),
    }


# estimator -> (function, the names of its arguments in _inputs, keyword arguments)
CALLS = {
    "gae": (rl_triton.compute_gae, ("r", "v", "term", "trunc", 0.9, 0.8, "boot"), {}),
    "gae_last_value": (rl_triton.compute_gae, ("r", "v", "term", None, 0.9, 0.8, None, "last"), {}),
    "vtrace": (rl_triton.compute_vtrace, ("lt", "lb", "v", "r", "term", "trunc", 0.9, 1.2, 0.8, "boot"), {}),
    "retrace": (rl_triton.compute_retrace,
                ("probs", "behavior", "q", "next_q", "actions", "r", "term", "trunc", 0.9, 0.8), {}),
    "lambda_returns": (rl_triton.compute_lambda_returns, ("r", "nv", "term", "trunc", 0.9, 0.8, "boot"), {}),
    "discounted_returns": (rl_triton.compute_discounted_returns, ("r", "term", "trunc", 0.9, "boot"), {}),
    "eligibility_traces": (rl_triton.compute_eligibility_traces, ("r", "term", 0.9, 0.8, "seed"), {}),
    "prefix_sum": (rl_triton.compute_episodic_prefix_sum, ("r", "term", "seed"), {"boundary": "starts_at"}),
}
ESTIMATORS = list(CALLS)
# the inputs of each estimator that take gradients
DIFFERENTIABLE = {"r", "v", "nv", "q", "lt", "lb", "boot", "last", "seed", "probs", "next_q", "behavior"}


def _arguments(estimator: str, x: dict) -> list:
    """The estimator's positional arguments, taken from ``x``."""
    return [x[name] if isinstance(name, str) else name for name in CALLS[estimator][1]]


def _call(estimator: str, arguments: list, **keywords) -> tuple[torch.Tensor, ...]:
    function, _, fixed = CALLS[estimator]
    return outputs(function(*arguments, **fixed, **keywords))


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_float64_computations_written_as_bf16(backend, estimator):
    """float64 inputs with ``out_dtype=torch.bfloat16``: the float64 results rounded once. (Triton's
    interpreter converts float64 to bf16 as if it were an integer conversion; the kernels' stores pass
    through float32 there.)"""
    arguments = _arguments(estimator, _inputs(1, torch.float64))
    narrow = _call(estimator, arguments, out_dtype=torch.bfloat16)
    wide = _call(estimator, arguments)
    assert all(torch.isfinite(out).all() for out in narrow)
    assert_rounded_once(narrow, wide)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_views_with_the_negation_bit(backend, estimator):
    """A view whose values PyTorch negates lazily (``z.conj().imag``) gives the results of its values, for
    each floating argument in turn: the kernels read memory, where the view's values are stored negated."""
    x = _inputs(2)
    arguments = _arguments(estimator, x)
    with _dispatch.use_backend("reference"):
        expected = _call(estimator, arguments)
    tried = 0
    for index, value in enumerate(arguments):
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            continue
        changed = list(arguments)
        changed[index] = _negated_view(value)
        for got, want in zip(_call(estimator, changed), expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=f"argument {index}")
        tried += 1
    assert tried >= 2


def _negated_view(value: torch.Tensor) -> torch.Tensor:
    """``value``'s values as a view with the negation bit (differentiable with respect to ``value``)."""
    negated = torch.complex(torch.zeros_like(value), -value).conj().imag
    assert negated.is_neg()
    return negated


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_gradients_with_the_negation_bit(backend, estimator):
    """With gradients: a first input that is a view with the negation bit, and an incoming gradient that is
    one (the backward kernels read it from memory too), give the values and gradients of plain tensors."""
    arguments = _arguments(estimator, _inputs(11, torch.float64))
    index = next(i for i, value in enumerate(arguments) if isinstance(value, torch.Tensor) and value.is_floating_point())
    base = arguments[index].clone().requires_grad_(True)
    plain, changed = list(arguments), list(arguments)
    plain[index], changed[index] = base, _negated_view(base)
    expected = _call(estimator, plain)
    got = _call(estimator, changed)
    incoming = [torch.randn_like(out) for out in expected]
    (want,) = torch.autograd.grad(expected, base, incoming)
    (gradient,) = torch.autograd.grad(got, base, [_negated_view(value) for value in incoming])
    for out, reference_out in zip(got, expected, strict=True):
        torch.testing.assert_close(out, reference_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gradient, want, rtol=1e-12, atol=1e-12)


def test_repeated_calls_tell_views_with_the_negation_bit_apart(monkeypatch):
    """A replay recorded for plain tensors is not repeated for a view with the negation bit (PyTorch's
    tensor guard tells them apart by their dispatch keys; the Python matcher by the bit)."""
    both = torch.complex(torch.randn(3, 5), torch.randn(3, 5))
    # the same memory, shape and strides; only the bit differs
    plain, negated = both.imag, both.conj().imag
    assert negated.is_neg() and negated.stride() == plain.stride()
    assert _replay._PropertyMatcher(plain).check(plain)
    assert not _replay._PropertyMatcher(plain).check(negated)
    guard = _replay._tensor_matcher([plain])
    assert guard.check(plain) and not guard.check(negated)
    # never recorded either: its launches take a copy, and failed recordings would count against plain tensors
    monkeypatch.setattr(_replay, "REPLAY_ON_CPU", True)
    assert _replay._signature((plain,), {}) is not None
    assert _replay._signature((negated,), {}) is None


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_time_major_outputs_are_time_first_with_gradients(backend, estimator):
    """With time first, outputs are time-first in memory (``[T, N]`` dense) with gradients as without,
    and time-last ones of a transposed input are dense too: the differentiable composition's results are
    moved into the kernels' layout."""
    x = _inputs(3, torch.float64)
    arguments = _arguments(estimator, x)
    time_major = [value.transpose(0, 1).contiguous() if isinstance(value, torch.Tensor) and value.dim() >= 2 else value
                  for value in arguments]
    for index, value in enumerate(time_major):
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() == 2:
            time_major[index] = value.requires_grad_(True)
    with torch.no_grad():
        plain = _call(estimator, time_major, time_dim=0)
    differentiable = _call(estimator, time_major, time_dim=0)
    for got, want in zip(differentiable, plain, strict=True):
        assert got.grad_fn is not None
        assert got.shape == (STEPS, ROWS) and got.is_contiguous(), got.stride()
        assert want.is_contiguous()
        torch.testing.assert_close(got.detach(), want, rtol=1e-12, atol=1e-12)
    # the same buffers viewed [N, T] (time last, stored time-first): dense [N, T] outputs either way
    viewed = [value.transpose(0, 1) if isinstance(value, torch.Tensor) and value.dim() >= 2 else value
              for value in time_major]
    for got in _call(estimator, viewed):
        assert got.shape == (ROWS, STEPS) and got.is_contiguous(), got.stride()


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("shape", [(ROWS, 0), (0, STEPS)], ids=["no-steps", "no-rows"])
def test_empty_problems_keep_the_graph(backend, estimator, shape):
    """No steps or no rows: empty outputs that belong to the graph, so that backward gives every input that
    requires gradients a zero gradient, as PyTorch's own operations do."""
    x = _inputs(4, torch.float64, shape=shape)
    arguments = _arguments(estimator, x)
    names = CALLS[estimator][1]
    leaves = []
    for index, name in enumerate(names):
        if name in DIFFERENTIABLE and name != "behavior":
            arguments[index] = arguments[index].clone().requires_grad_(True)
            leaves.append(arguments[index])
    results = _call(estimator, arguments)
    assert all(out.shape == shape and out.requires_grad for out in results)
    gradients = torch.autograd.grad(sum(out.sum() for out in results), leaves)
    for leaf, gradient in zip(leaves, gradients, strict=True):
        assert gradient.shape == leaf.shape and not gradient.any()


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("shape", [(ROWS, 0), (0, STEPS)], ids=["no-steps", "no-rows"])
def test_the_reference_twins_take_empty_problems(backend, estimator, shape):
    """``rl_triton.reference``'s loops give empty outputs of the inputs' shape and compute dtype where there are
    no steps or no rows, as the estimators do, and zero gradients (their recurrences then run as the
    differentiable op on either engine)."""
    function, names, fixed = CALLS[estimator]
    twin = getattr(reference, inspect.unwrap(function).__name__)
    arguments = _arguments(estimator, _inputs(4, torch.float64, shape=shape))
    results = outputs(twin(*arguments, **fixed))
    assert [(out.shape, out.dtype) for out in results] == [(shape, torch.float64)] * len(results)
    leaves = []
    for index, name in enumerate(names):
        if name in DIFFERENTIABLE and name != "behavior":
            arguments[index] = arguments[index].clone().requires_grad_(True)
            leaves.append(arguments[index])
    results = outputs(twin(*arguments, **fixed))
    # a twin's composition may leave an input out of an empty problem's graph (GAE's last value without steps)
    gradients = torch.autograd.grad(sum(out.sum() for out in results), leaves, materialize_grads=True)
    for leaf, gradient in zip(leaves, gradients, strict=True):
        assert gradient.shape == leaf.shape and not gradient.any()


@pytest.mark.parametrize("estimator", ["gae", "vtrace", "lambda_returns", "discounted_returns"])
def test_no_steps_with_bootstrap_values_and_the_data_checks(backend, estimator, monkeypatch):
    """The data checks take windows of no steps (the bootstrap check looks at all but the last column)."""
    monkeypatch.setattr(_checks, "_correctness_flag", lambda: True)
    arguments = _arguments(estimator, _inputs(5, shape=(ROWS, 0)))
    assert all(out.shape == (ROWS, 0) for out in _call(estimator, arguments))


@pytest.mark.parametrize("estimator, flag", [(estimator, flag) for estimator in ESTIMATORS
                                              for flag in ("term", "trunc") if flag in CALLS[estimator][1]])
def test_the_data_checks_name_floating_flags_other_than_zero_or_one(backend, estimator, flag, monkeypatch):
    """A per-step discount passed as a flag (rlax's discount_t) sets it at every step but the terminal
    ones; the data checks name it, with 0/1 floating flags and integer counts left alone."""
    name = _argument_names(estimator)[CALLS[estimator][1].index(flag)]
    monkeypatch.setattr(_checks, "_correctness_flag", lambda: True)
    x = _inputs(6)
    x[flag] = x[flag].float()
    _call(estimator, _arguments(estimator, x))  # floating flags of 0 and 1 pass
    counts = dict(x)
    counts[flag] = x[flag].to(torch.uint8) * 2  # integer flags: any non-zero count is set
    _call(estimator, _arguments(estimator, counts))
    for odd_value in (0.99, float("nan"), 2.0):
        discounts = dict(x)
        discounts[flag] = torch.where(x[flag] != 0, 0.0, odd_value)
        with pytest.raises(_checks.InputError, match=rf"^{name}: expected floating flags of 0 or 1, found "
                                                     rf"{int((x[flag] == 0).sum())} other value\(s\), such as "
                                                     rf"{odd_value:g}"):
            _call(estimator, _arguments(estimator, discounts))
        # unchecked, every non-zero value counts as set
        monkeypatch.setattr(_checks, "_correctness_flag", lambda: False)
        set_at_every_other_step = dict(x)
        set_at_every_other_step[flag] = (discounts[flag] != 0).float()
        for got, expected in zip(_call(estimator, _arguments(estimator, discounts)),
                                 _call(estimator, _arguments(estimator, set_at_every_other_step)), strict=True):
            torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
        monkeypatch.setattr(_checks, "_correctness_flag", lambda: True)


@pytest.mark.parametrize("gamma", [np.float32(0.9), np.float64(0.9), torch.tensor(0.9), 0.9, 1], ids=str)
def test_scalar_arguments_of_every_kind(gamma):
    x = _inputs(6)
    expected = rl_triton.compute_gae(x["r"], x["v"], x["term"], gamma=float(gamma))
    torch.testing.assert_close(rl_triton.compute_gae(x["r"], x["v"], x["term"], gamma=gamma), expected)
    time_major = rl_triton.compute_gae(x["r"].t(), x["v"].t(), x["term"].t(), gamma=gamma, time_dim=np.int64(0))
    torch.testing.assert_close(time_major.t(), expected)


@pytest.mark.parametrize("gamma, error, message", [
    (torch.tensor(0.9, requires_grad=True), _checks.InputError, "gradients with respect to gamma"),
    (np.float32(1.5), _checks.InputError, r"gamma: expected a value in \[0, 1\], got 1.5"),
    (float("nan"), _checks.InputError, "gamma"),
    (float("inf"), _checks.InputError, "gamma"),
    (np.bool_(True), _checks.InputTypeError, "gamma"),
    ("0.9", _checks.InputTypeError, "gamma"),
], ids=["requires-grad", "numpy-out-of-range", "nan", "inf", "numpy-bool", "string"])
def test_scalar_arguments_rejected(gamma, error, message):
    x = _inputs(7)
    with pytest.raises(error, match=message):
        rl_triton.compute_gae(x["r"], x["v"], x["term"], gamma=gamma)


def test_a_gamma_tensor_on_the_meta_device_is_named():
    x = _inputs(7)
    with pytest.raises(_checks.InputTypeError, match="gamma: expected a number, got a tensor on the meta device"):
        rl_triton.compute_gae(x["r"], x["v"], x["term"], gamma=torch.tensor(0.9, device="meta"))


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")
@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("layout", ["sparse_coo", "sparse_csr", "mkldnn"])
def test_tensors_without_strides_are_named(backend, estimator, layout):
    """Sparse and mkldnn tensors (no strides for the kernels to read, no ops for the reference loops) are
    rejected by name on every backend, in whichever argument, per-row tensors included."""
    x = _inputs(11)
    arguments = _arguments(estimator, x)
    tried = 0
    for position, name in enumerate(CALLS[estimator][1]):
        if not isinstance(name, str):
            continue
        value = x[name]
        if layout == "sparse_coo":
            converted = value.to_sparse()
        elif layout == "sparse_csr" and value.dim() == 2:
            converted = value.to_sparse_csr()
        elif layout == "mkldnn" and value.dtype is torch.float32:
            converted = value.cpu().to_mkldnn()  # CPU only: its layout is named before its device
        else:
            continue
        changed = list(arguments)
        changed[position] = converted
        with pytest.raises(_checks.InputTypeError, match=f"{_argument_names(estimator)[position]}: expected a dense"):
            _call(estimator, changed)
        tried += 1
    assert tried >= (1 if layout == "mkldnn" else 2)


def _argument_names(estimator: str) -> list[str]:
    """The names of the estimator's positional parameters, in order."""
    function = inspect.unwrap(CALLS[estimator][0])
    return list(inspect.signature(function).parameters)


def test_a_gamma_tensor_that_requires_gradients_passes_without_grad_mode():
    x = _inputs(8)
    gamma = torch.tensor(0.9, requires_grad=True)
    with torch.no_grad():
        got = rl_triton.compute_gae(x["r"], x["v"], x["term"], gamma=gamma)
    torch.testing.assert_close(got, rl_triton.compute_gae(x["r"], x["v"], x["term"], gamma=0.9))


def test_ranges_are_checked_while_compiling():
    """A number out of range raises while torch.compile traces: without fullgraph as in eager calls, with it
    as torch.compile's error, caused by the InputError; valid values compile and match eager."""
    torch._dynamo.reset()
    x = _inputs(9)

    def advantages(gamma, lambda_):
        return rl_triton.compute_gae(x["r"], x["v"], x["term"], gamma=gamma, lambda_=lambda_)

    whole = torch.compile(advantages, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(whole(0.9, 0.8), advantages(0.9, 0.8))
    for gamma, lambda_ in ((1.5, 0.8), (0.9, -0.1), (float("nan"), 0.8)):
        # torch.compile's own error type, caused by the InputError
        with pytest.raises(Exception) as raised:
            whole(gamma, lambda_)
        assert "expected a value in [0, 1]" in _error_chain(raised.value)
    with pytest.raises(_checks.InputError, match="lambda_: expected a value in"):
        torch.compile(advantages, backend="aot_eager")(0.9, 2.0)
    # a tensor's value is unknown while tracing: named
    torch._dynamo.reset()
    with pytest.raises(Exception) as raised:
        torch.compile(advantages, backend="aot_eager", fullgraph=True)(torch.tensor(0.9), 0.8)
    assert "gamma: expected a number while torch.compile traces" in _error_chain(raised.value)
    # a NumPy number is traced as an array: named too
    torch._dynamo.reset()
    with pytest.raises(Exception) as raised:
        torch.compile(advantages, backend="aot_eager", fullgraph=True)(np.float64(0.9), 0.8)
    assert "gamma: expected a float, got ndarray" in _error_chain(raised.value)


def _error_chain(error: BaseException | None) -> str:
    """The messages of an error and of the errors that caused it."""
    messages = []
    while error is not None:
        messages.append(str(error))
        error = error.__cause__ or error.__context__
    return "\n".join(messages)


def test_the_reference_prefix_sum_names_a_bad_boundary():
    x = _inputs(10)
    with pytest.raises(_checks.InputError, match="boundary"):
        reference.compute_episodic_prefix_sum(x["r"], x["term"], None, "ends")


def test_the_interpreter_switched_on_after_the_kernels_load_is_named():
    """Triton decides whether kernels run in its interpreter when their module loads (a process's first
    call): TRITON_INTERPRET set later is named, instead of Triton's error about missing GPU drivers."""
    code = """
import os
os.environ.pop("TRITON_INTERPRET", None)
import torch, rl_triton
rewards = torch.randn(2, 5)
rl_triton.compute_gae(rewards, rewards, torch.zeros(2, 5))
os.environ["TRITON_INTERPRET"] = "1"
try:
    rl_triton.compute_gae(rewards, rewards, torch.zeros(2, 5))
except RuntimeError as error:
    print("raised:", error)
"""
    printed = " ".join(printed_by_fresh_process(code))
    assert printed.startswith("raised: TRITON_INTERPRET=1 was set after rl_triton loaded its kernels"), printed


@pytest.mark.parametrize("value, interpreted", [("false", False), ("off", False), ("0", False), ("TRUE", True),
                                                 ("on", True)])
def test_the_interpreter_flag_is_read_as_triton_reads_it(value, interpreted):
    """TRITON_INTERPRET is set or not for the library where it is for Triton, which decides whether the
    kernels are interpreted: "false" runs CPU calls on the reference, not on kernels compiled for a GPU (and the
    demonstration names the path it runs)."""
    code = f"""
import os
os.environ["TRITON_INTERPRET"] = "{value}"
import torch, rl_triton
from rl_triton import _dispatch
rewards = torch.randn(2, 5)
expected = rl_triton.reference.compute_gae(rewards, rewards, torch.zeros(2, 5))
torch.testing.assert_close(rl_triton.compute_gae(rewards, rewards, torch.zeros(2, 5)), expected)
from rl_triton.kernels import scan
from rl_triton._demo import execution_path
print(_dispatch.interpreter_enabled(), bool(scan._INTERPRETED), execution_path(torch.device("cpu")))
"""
    path = "triton-interpreter" if interpreted else "reference"
    assert printed_by_fresh_process(code) == [str(interpreted), str(interpreted), path]


class _OnSecondGpu(torch.Tensor):
    """A CPU tensor that reports the device index of ``cuda:1``."""

    def get_device(self) -> int:
        return 1


@pytest.mark.parametrize("current", [0, 1])
def test_launches_switch_to_their_tensors_gpu(monkeypatch, current):
    # Triton launches on the current CUDA device; each launcher first makes its tensors' GPU current
    # (tests/test_cuda.py runs it on two GPUs where there are two)
    from rl_triton import _launch

    events = []

    @contextlib.contextmanager
    def device(index):
        events.append(("enter", index))
        yield
        events.append(("exit", index))

    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: current, raising=False)
    launcher = _launch._on_the_tensors_device(lambda *args, **options: events.append(("launch", len(args), options)))
    tensor = torch.zeros(2).as_subclass(_OnSecondGpu)
    launcher(None, tensor, 0.5, action_lanes=2)
    launched = ("launch", 3, {"action_lanes": 2})
    assert events == ([launched] if current == 1 else [("enter", 1), launched, ("exit", 1)])
    for name in ("gae", "vtrace", "retrace", "returns", "episodic_scan", "linear_recurrence", "gae_backward",
                 "returns_backward"):
        assert getattr(_launch, name).__wrapped__.__name__ == name


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_dual_tensors_are_named(backend, estimator):
    """Forward-mode AD: the kernels and the reference loops read plain values, so a dual tensor's tangent
    would be lost without a word; each floating tensor argument is named instead, on every backend. Under a
    dual level, plain tensors give the results they give outside one."""
    x = _inputs(12)
    arguments = _arguments(estimator, x)
    names = _argument_names(estimator)
    want = _call(estimator, arguments)
    tried = 0
    with forward_ad.dual_level():
        for position, name in enumerate(CALLS[estimator][1]):
            if name not in DIFFERENTIABLE:
                continue
            changed = list(arguments)
            changed[position] = forward_ad.make_dual(x[name], torch.ones_like(x[name]))
            with pytest.raises(_checks.InputTypeError, match=f"{names[position]}: forward-mode AD is not supported"):
                _call(estimator, changed)
            tried += 1
        for got, expected in zip(_call(estimator, arguments), want, strict=True):
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert tried >= 2


def test_dual_tensors_are_named_after_calls_that_could_be_repeated():
    # on CUDA the first calls are recorded, and a replay matches tensors by properties a tangent does not change
    x = _inputs(14)
    arguments = _arguments("gae", x)
    for _ in range(3):
        _call("gae", arguments)
    with forward_ad.dual_level():
        arguments[0] = forward_ad.make_dual(x["r"], torch.ones_like(x["r"]))
        with pytest.raises(_checks.InputTypeError, match="rewards: forward-mode AD is not supported"):
            _call("gae", arguments)


@pytest.mark.parametrize("transform", ["vmap", "grad", "jvp"])
@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_torch_func_transforms_are_named(backend, estimator, transform):
    """torch.func's wrapped tensors have no storage for the kernels or the loops to read: the argument is
    named. Calls on plain tensors inside a transform are not affected."""
    x = _inputs(13)
    arguments = _arguments(estimator, x)
    first = CALLS[estimator][1][0]
    name = _argument_names(estimator)[0]

    def call(value: torch.Tensor) -> torch.Tensor:
        return _call(estimator, [value, *arguments[1:]])[0]

    with pytest.raises(_checks.InputTypeError, match=f"{name}: torch.func transforms"):
        if transform == "vmap":
            torch.func.vmap(call)(torch.stack([x[first], x[first]]))
        elif transform == "grad":
            torch.func.grad(lambda value: call(value).sum())(x[first])
        else:
            torch.func.jvp(call, (x[first],), (torch.ones_like(x[first]),))
    plain = call(x[first])
    scaled = torch.func.vmap(lambda scale: call(x[first]) * scale)(torch.ones(2, dtype=plain.dtype, device=DEVICE))
    torch.testing.assert_close(scaled, torch.stack([plain, plain]), rtol=0, atol=0)
    if transform != "vmap":
        # grad and jvp wrap every tensor made inside them, so a call on plain tensors cannot run there either;
        # it is named, and leaves nothing behind that later calls would take
        scale = torch.ones((), dtype=plain.dtype, device=DEVICE)
        with pytest.raises(_checks.InputTypeError, match="calls inside torch.func.grad or jvp"):
            if transform == "grad":
                torch.func.grad(lambda s: (s * call(x[first])).sum())(scale)
            else:
                torch.func.jvp(lambda s: s * call(x[first]), (scale,), (scale,))
        torch.testing.assert_close(call(x[first]), plain, rtol=0, atol=0)


@pytest.mark.parametrize("time_major", [False, True], ids=["batch-major", "time-major"])
def test_per_action_tensors_with_their_action_dimension_elsewhere_are_named(time_major):
    # the action dimension comes last, after rewards' own dimensions in their order, also with time_dim=0
    x = _inputs(15)
    arguments = _arguments("retrace", x)
    keywords = {}
    if time_major:
        arguments = [value.transpose(0, 1) if isinstance(value, torch.Tensor) else value for value in arguments]
        arguments[0] = x["probs"]  # [rows, T, A]: rows first, where time-major rewards have time first
        keywords["time_dim"] = 0
    else:
        arguments[0] = x["probs"].permute(2, 0, 1)
    wanted = re.escape(f"expected shape {(*arguments[5].shape, 'num_actions')}")
    with pytest.raises(_checks.InputError, match=f"action_probs_target: {wanted}.*plus a last action dimension"):
        _call("retrace", arguments, **keywords)


_WITHOUT_TRITON = """
import sys
sys.modules["triton"] = None  # as where Triton is not installed (the package asks for it on Linux only)
import torch
import rl_triton
from rl_triton import reference

g = torch.Generator().manual_seed(0)
r, v, lt, lb = (torch.randn(3, 9, generator=g, dtype=torch.float64) for _ in range(4))
term = torch.rand(3, 9, generator=g) < 0.2
trunc = (torch.rand(3, 9, generator=g) < 0.2) & ~term
probs, next_q = torch.softmax(torch.randn(3, 9, 4, generator=g, dtype=torch.float64), -1), torch.randn(3, 9, 4, generator=g)
actions = torch.randint(0, 4, (3, 9), generator=g)
behavior = 0.2 + 0.8 * torch.rand(3, 9, generator=g, dtype=torch.float64)
cases = [
    ("compute_gae", (r, v, term, trunc, 0.9, 0.8, v)),
    ("compute_vtrace", (lt, lb, v, r, term, trunc, 0.9, 1.0, 1.0, v)),
    ("compute_retrace", (probs, behavior, v, next_q.double(), actions, r, term, trunc, 0.9)),
    ("compute_lambda_returns", (r, v, term, trunc, 0.9, 0.8, v)),
    ("compute_discounted_returns", (r, term, trunc, 0.9, v)),
    ("compute_eligibility_traces", (r, term, 0.9, 0.8)),
    ("compute_episodic_prefix_sum", (r, term)),
]
for name, args in cases:
    got = getattr(rl_triton, name)(*args)
    want = getattr(reference, name)(*args)
    for out, expected in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
x = lt.clone().requires_grad_(True)
rl_triton.compute_vtrace(x, lb, v, r, term, trunc, 0.9, bootstrap_values=v)[1].sum().backward()
assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
print("triton" in sys.modules and sys.modules["triton"] is None, "rl_triton._launch" in sys.modules)
"""


def test_cpu_calls_need_no_triton() -> None:
    """Without Triton (as on macOS or Windows, where the package does not ask for it), CPU calls run the
    reference loops, gradients included; with TRITON_INTERPRET=1 a call says that it needs Triton."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    result = subprocess.run([sys.executable, "-c", _WITHOUT_TRITON], capture_output=True, text=True, check=False,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["True", "False"]

    call_interpreted = ('import sys; sys.modules["triton"] = None\nimport torch, rl_triton\n'
                        "rl_triton.compute_discounted_returns(torch.ones(2, 3), torch.zeros(2, 3))")
    interpreted = subprocess.run(
        [sys.executable, "-c", call_interpreted],
        capture_output=True, text=True, check=False, env={**env, "TRITON_INTERPRET": "1"}, timeout=300)
    assert interpreted.returncode != 0
    assert "ImportError: rl-triton runs CUDA tensors" in interpreted.stderr
    assert "Triton is not installed" in interpreted.stderr
