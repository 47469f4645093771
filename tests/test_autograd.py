"""Gradients of every estimator w.r.t. its floating inputs, by float64 gradcheck on every backend.

The differentiable path composes each estimator from elementwise PyTorch and the linear
recurrence op, whose backward is the adjoint recurrence on the same engine; gradcheck compares
those analytic gradients with finite differences. Small tiles force several chunks and the
time-split look-back into both the forward and the adjoint scans.
"""

from __future__ import annotations

import pytest
import torch

import rl_triton
from conftest import DEVICE
from rl_triton import _launch

# small: gradcheck runs the estimator twice per input element (seconds each under the interpreter)
ROWS, STEPS, ACTIONS = 2, 7, 3


def _inputs(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)

    def leaf(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(DEVICE).requires_grad_(True)

    terminated = torch.rand(ROWS, STEPS, generator=g) < 0.15
    truncated = (torch.rand(ROWS, STEPS, generator=g) < 0.15) & ~terminated
    bootstrap = torch.randn(ROWS, STEPS, generator=g, dtype=torch.float64) * truncated
    bootstrap[:, -1] = torch.randn(ROWS, generator=g, dtype=torch.float64)
    behavior = 0.2 + 0.8 * torch.rand(ROWS, STEPS, generator=g, dtype=torch.float64)
    return {
        "r": leaf(ROWS, STEPS),
        "v": leaf(ROWS, STEPS),
        "q": leaf(ROWS, STEPS),
        "log_target": leaf(ROWS, STEPS),
        "log_behavior": leaf(ROWS, STEPS),
        "boot": bootstrap.to(DEVICE).requires_grad_(True),
        "last": leaf(ROWS),
        "seed": leaf(ROWS),
        "logits": leaf(ROWS, STEPS, ACTIONS),
        "next_q": leaf(ROWS, STEPS, ACTIONS),
        "behavior": behavior.to(DEVICE).requires_grad_(True),
        "actions": torch.randint(0, ACTIONS, (ROWS, STEPS), generator=g).to(DEVICE),
        "term": terminated.to(DEVICE),
        "trunc": truncated.to(DEVICE),
    }


def _cases(x: dict) -> dict:
    """estimator -> (function of the differentiable inputs, those inputs)."""
    term, trunc = x["term"], x["trunc"]
    return {
        "gae": (lambda r, v, b: rl_triton.compute_gae(r, v, term, trunc, 0.9, 0.8, b), ("r", "v", "boot")),
        "gae_last_value": (
            lambda r, v, lv: rl_triton.compute_gae(r, v, term, None, 0.9, 0.8, last_value=lv),
            ("r", "v", "last"),
        ),
        "vtrace": (
            lambda lt, lb, v, r, b: torch.cat(rl_triton.compute_vtrace(lt, lb, v, r, term, trunc, 0.9, 1.2, 0.8, b)),
            ("log_target", "log_behavior", "v", "r", "boot"),
        ),
        "retrace": (
            lambda logits, mu, q, nq, r: torch.cat(
                rl_triton.compute_retrace(
                    torch.softmax(logits, -1), mu, q, nq, x["actions"], r, term, trunc, 0.9, 0.8, 1.5, 1.2
                )
            ),
            ("logits", "behavior", "q", "next_q", "r"),
        ),
        "lambda_returns": (
            lambda r, nv, b: rl_triton.compute_lambda_returns(r, nv, term, trunc, 0.9, 0.8, b),
            ("r", "v", "boot"),
        ),
        "discounted_returns": (
            lambda r, b: rl_triton.compute_discounted_returns(r, term, trunc, 0.9, b),
            ("r", "boot"),
        ),
        "eligibility_traces": (lambda g, s: rl_triton.compute_eligibility_traces(g, term, 0.9, 0.8, s), ("r", "seed")),
        "prefix_sum_ends_at": (lambda i, s: rl_triton.compute_episodic_prefix_sum(i, term, s), ("r", "seed")),
        "prefix_sum_starts_at": (
            lambda i, s: rl_triton.compute_episodic_prefix_sum(i, term, s, "starts_at"),
            ("r", "seed"),
        ),
    }


ESTIMATORS = list(_cases(_inputs(0)))


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_gradcheck(backend, estimator: str) -> None:
    x = _inputs(ESTIMATORS.index(estimator))
    fn, names = _cases(x)[estimator]
    # chunks of 4 steps, split across programs: the forward and the adjoint scans both cross
    # chunk edges and take the look-back (the reference backend has no tiles)
    # the interpreter is slow: there gradcheck compares one random projection of the Jacobian
    fast = DEVICE == "cpu" and backend == "triton"
    with _launch.tile_override(block_rows=1, block_time=4, split=True):
        assert torch.autograd.gradcheck(fn, tuple(x[n] for n in names), eps=1e-6, atol=1e-7, rtol=1e-5,
                                        fast_mode=fast)


def test_gradients_flow_only_where_asked() -> None:
    """Detached inputs take the fused kernels; the result is the same and has no graph."""
    x = _inputs(7)
    with torch.no_grad():
        fused = rl_triton.compute_gae(x["r"], x["v"], x["term"], x["trunc"], 0.9, 0.8, x["boot"])
    differentiable = rl_triton.compute_gae(x["r"], x["v"], x["term"], x["trunc"], 0.9, 0.8, x["boot"])
    assert fused.grad_fn is None and differentiable.grad_fn is not None
    torch.testing.assert_close(differentiable.detach(), fused, rtol=1e-12, atol=1e-12)


def test_gae_gradient_by_hand() -> None:
    """One step, no boundary: A = r + gamma*last - v, so dA/dr = 1, dA/dv = -1, dA/dlast = gamma."""
    r = torch.tensor([[0.5]], dtype=torch.float64, device=DEVICE, requires_grad=True)
    v = torch.tensor([[0.25]], dtype=torch.float64, device=DEVICE, requires_grad=True)
    last = torch.tensor([2.0], dtype=torch.float64, device=DEVICE, requires_grad=True)
    advantage = rl_triton.compute_gae(r, v, torch.zeros_like(r), gamma=0.9, lambda_=0.5, last_value=last)
    advantage.sum().backward()
    assert advantage.item() == pytest.approx(0.5 + 0.9 * 2.0 - 0.25)
    assert (r.grad.item(), v.grad.item(), last.grad.item()) == pytest.approx((1.0, -1.0, 0.9))
