"""The reference path's time loops step float32 and float64 CPU tensors through numpy views: the same
arithmetic as the loop stepped in PyTorch, so the same results bit for bit, and the PyTorch loop elsewhere."""

from __future__ import annotations

import warnings

import pytest
import torch

import rl_triton
from conftest import DTYPES
from rl_triton.reference import _loop


def _torch_steps(a: torch.Tensor, b: torch.Tensor, carry: torch.Tensor, backward: bool) -> torch.Tensor:
    out = torch.empty_like(a)
    x = carry
    for t in range(a.shape[-1] - 1, -1, -1) if backward else range(a.shape[-1]):
        x = a[:, t] + b[:, t] * x
        out[:, t] = x
    return out


def _operands(gen: torch.Generator, rows: int, steps: int, dtype: torch.dtype, layout: str):
    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype)

    if layout == "transposed":  # [T, rows] storage seen as [rows, T]
        a, b = draw(steps, rows).t(), draw(steps, rows).t().sigmoid()
    elif layout == "sliced":  # every other step of longer rows
        a, b = draw(rows, 2 * steps)[:, ::2], draw(rows, 2 * steps)[:, 1::2].sigmoid()
    else:
        a, b = draw(rows, steps), draw(rows, steps).sigmoid()
    return a, b, draw(rows)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("rows, steps", [(1, 1), (3, 7), (33, 65), (2, 0), (0, 3)])
@pytest.mark.parametrize("backward", [True, False], ids=["backward", "forward"])
def test_numpy_steps_equal_torch_steps_bit_for_bit(gen, dtype, layout, rows, steps, backward):
    a, b, carry = _operands(gen, rows, steps, dtype, layout)
    assert _loop._numpy_steps_possible(a, b, carry)
    loop = _loop.backward_loop if backward else _loop.forward_loop
    out = loop(a, b, carry)
    expected = _torch_steps(a, b, carry, backward)
    assert out.dtype == dtype and out.shape == expected.shape
    assert torch.equal(out, expected)
    # a 0-d carry broadcasts over the rows, as in PyTorch
    scalar = torch.tensor(0.5, dtype=dtype)
    assert torch.equal(loop(a, b, scalar), _torch_steps(a, b, scalar, backward))


def test_numpy_steps_of_tensors_that_require_grad(gen):
    a, b, carry = _operands(gen, 4, 9, torch.float64, "contiguous")
    a.requires_grad_(True)
    with torch.no_grad():
        assert torch.equal(_loop.backward_loop(a, b, carry), _torch_steps(a.detach(), b, carry, True))


def test_numpy_steps_pass_nan_and_inf_without_warnings(gen):
    """NaN and inf pass through the numpy steps as through PyTorch's, and numpy warns of nothing (its
    floating-point warnings would tell a user of the reference path of overflows PyTorch keeps silent)."""
    a, b, carry = _operands(gen, 3, 9, torch.float32, "contiguous")
    inf = float("inf")
    # 0 * inf in a product, inf - inf in a sum (both NaN), a NaN input and an infinite carry
    a[0, 4], b[0, 3] = inf, 0.0
    a[1, 5], a[1, 4] = inf, -inf
    a[2, 2], carry[2] = float("nan"), -inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _loop.backward_loop(a, b, carry)
    assert out.isnan().any() and out.isinf().any()
    torch.testing.assert_close(out, _torch_steps(a, b, carry, True), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("case", ["wider carry", "bfloat16", "meta"])
def test_other_operands_step_in_torch(gen, case):
    a, b, carry = _operands(gen, 3, 5, torch.float32, "contiguous")
    if case == "wider carry":  # PyTorch promotes x to float64 and keeps it there: numpy steps would not
        carry = carry.double()
    elif case == "bfloat16":
        a, b, carry = a.bfloat16(), b.bfloat16(), carry.bfloat16()
    else:
        a, b, carry = a.to("meta"), b.to("meta"), carry.to("meta")
    assert not _loop._numpy_steps_possible(a, b, carry)
    out = _loop.backward_loop(a, b, carry)
    if case != "meta":
        assert torch.equal(out, _torch_steps(a, b, carry, True))


def test_public_estimators_agree_with_torch_steps(make_rollout, monkeypatch):
    """The reference path of every estimator gives the same bits either way (float32, several episodes)."""
    rollout = make_rollout(3, 200, dtype=torch.float32, device="cpu")
    calls = {
        "gae": lambda: rl_triton.reference.compute_gae(
            rollout.rewards, rollout.values, rollout.terminateds, rollout.truncateds, 0.99, 0.95,
            rollout.bootstrap_values),
        "vtrace": lambda: rl_triton.reference.compute_vtrace(
            rollout.log_pi_target, rollout.log_pi_behavior, rollout.values, rollout.rewards, rollout.terminateds,
            rollout.truncateds, 0.99, 1.0, 1.0, rollout.bootstrap_values),
        "retrace": lambda: rl_triton.reference.compute_retrace(
            rollout.probs_target, rollout.probs_behavior, rollout.q_values, rollout.next_q_values_all,
            rollout.actions, rollout.rewards, rollout.terminateds, rollout.truncateds, 0.99, 0.9),
        "lambda-returns": lambda: rl_triton.reference.compute_lambda_returns(
            rollout.rewards, rollout.next_values, rollout.terminateds, rollout.truncateds, 0.99, 0.95,
            rollout.bootstrap_values),
        "eligibility-traces": lambda: rl_triton.reference.compute_eligibility_traces(
            rollout.gradients, rollout.dones, 0.99, 0.95, rollout.seed_values),
        "prefix-sum": lambda: rl_triton.reference.compute_episodic_prefix_sum(
            rollout.inputs, rollout.dones, rollout.seed_values),
    }
    with_numpy = {name: call() for name, call in calls.items()}
    monkeypatch.setattr(_loop, "_numpy_steps_possible", lambda *tensors: False)
    for name, call in calls.items():
        expected = call()
        got = with_numpy[name]
        for out, ref in zip(got if isinstance(got, tuple) else (got,),
                            expected if isinstance(expected, tuple) else (expected,), strict=True):
            assert torch.equal(out, ref), name
