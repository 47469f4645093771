"""torch.compile(fullgraph=True) traces the estimators and matches eager."""

from __future__ import annotations

import torch

import rl_triton
from conftest import DEVICE


def _ppo_loss(logp, logp_old, rewards, values, terminated, last_value, gamma):
    advantages = rl_triton.compute_gae(rewards, values, terminated, gamma=gamma, lambda_=0.95, last_value=last_value)
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    ratio = torch.exp(logp - logp_old)
    return -torch.min(ratio * advantages, torch.clamp(ratio, 0.8, 1.2) * advantages).mean()


def test_ppo_loss_compiles_fullgraph_and_matches_eager() -> None:
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    shape = (8, 32)
    rewards, values, logp_old = (torch.randn(shape, generator=g).to(DEVICE) for _ in range(3))
    terminated = (torch.rand(shape, generator=g) < 0.05).to(DEVICE)
    last_value = torch.randn(shape[0], generator=g).to(DEVICE)
    logp = torch.randn(shape, generator=g).to(DEVICE).requires_grad_(True)
    compiled = torch.compile(_ppo_loss, fullgraph=True)
    for gamma in (0.99, 0.9):
        eager = _ppo_loss(logp, logp_old, rewards, values, terminated, last_value, gamma)
        traced = compiled(logp, logp_old, rewards, values, terminated, last_value, gamma)
        torch.testing.assert_close(traced, eager, rtol=1e-5, atol=1e-6)
        (grad_eager,) = torch.autograd.grad(eager, logp)
        (grad_traced,) = torch.autograd.grad(traced, logp)
        torch.testing.assert_close(grad_traced, grad_eager, rtol=1e-5, atol=1e-7)


def test_every_estimator_compiles_fullgraph() -> None:
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(1)
    n, t, a = 4, 24, 5

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(DEVICE)

    r, v, q, lt, lb = (randn(n, t) for _ in range(5))
    term = (torch.rand(n, t, generator=g) < 0.1).to(DEVICE)
    trunc = (torch.rand(n, t, generator=g) < 0.1).to(DEVICE) & ~term
    probs, next_q = torch.softmax(randn(n, t, a), -1), randn(n, t, a)
    actions = torch.randint(0, a, (n, t), generator=g).to(DEVICE)
    behavior = (0.2 + 0.8 * torch.rand(n, t, generator=g)).to(DEVICE)

    def everything(r, v, q, lt, lb):
        return (
            rl_triton.compute_gae(r, v, term, trunc, 0.99, 0.95),
            *rl_triton.compute_vtrace(lt, lb, v, r, term, trunc),
            *rl_triton.compute_retrace(probs, behavior, q, next_q, actions, r, term, trunc, 0.99),
            rl_triton.compute_lambda_returns(r, v, term, trunc),
            rl_triton.compute_discounted_returns(r, term, trunc),
            rl_triton.compute_eligibility_traces(r, term, 0.99, 0.9),
            rl_triton.compute_episodic_prefix_sum(r, term, boundary="starts_at"),
            rl_triton.compute_gae(r.t(), v.t(), term.t(), time_dim=0),
        )

    eager = everything(r, v, q, lt, lb)
    traced = torch.compile(everything, fullgraph=True)(r, v, q, lt, lb)
    for out_traced, out_eager in zip(traced, eager):
        torch.testing.assert_close(out_traced, out_eager, rtol=1e-5, atol=1e-6)
