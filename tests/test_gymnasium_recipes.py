"""docs/conventions.md's worked examples with Gymnasium vector environments, run as written.

Each example fills ``terminateds``, ``truncateds`` and ``bootstrap_values`` from a vector environment that
resets its sub-environments itself (next-step and same-step autoreset) and calls ``compute_gae``. Here every
sub-environment is wrapped to record its real transitions (observation, reward, true next observation, flags),
which the vector environment's resets never pass through, and the page's advantages are checked against GAE
computed per episode from those records in float64. CartPole's episodes are cut at 13 steps, so truncations and
terminations both occur, and steps that terminate at the limit, which Gymnasium flags truncated too. The same
buffers then go to lambda-returns and V-trace, as the page says they can. Both backends run the page's ``compute_gae`` (the Triton kernels under the interpreter on a
CPU).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import rl_triton

gym = pytest.importorskip("gymnasium")
registration = pytest.importorskip("gymnasium.envs.registration")

GAMMA, LAMBDA = 0.99, 0.95  # as the page's examples
EPISODE_STEPS = 13


def _page_block(heading: str) -> str:
    """The first Python block after ``heading`` in docs/conventions.md."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "conventions.md").read_text()
    section = page[page.index(heading):]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


class _Recorder(gym.Wrapper):
    """Records each real step of one sub-environment: (obs, reward, next obs, terminated, truncated)."""

    def __init__(self, env, records: list):
        super().__init__(env)
        self.transitions: list = []
        self._obs = None
        records.append(self.transitions)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._obs = obs
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.transitions.append((self._obs, float(reward), obs, bool(terminated), bool(truncated)))
        self._obs = obs
        return obs, reward, terminated, truncated, info


def _episode_gae(transitions: list, value_net) -> torch.Tensor:
    """GAE over one sub-environment's real transitions, in float64: an episode's end cuts the recursion, a
    terminated step has no next value, every other step (truncated, or last in the window) takes V of its true
    next observation."""
    obs = torch.as_tensor(np.stack([t[0] for t in transitions]), dtype=torch.float32)
    next_obs = torch.as_tensor(np.stack([t[2] for t in transitions]), dtype=torch.float32)
    with torch.no_grad():
        values = value_net(obs).squeeze(-1).double()
        next_values = value_net(next_obs).squeeze(-1).double()
    advantages = torch.zeros(len(transitions), dtype=torch.float64)
    carry = 0.0
    for t in reversed(range(len(transitions))):
        _, reward, _, terminated, truncated = transitions[t]
        delta = reward + GAMMA * (0.0 if terminated else next_values[t].item()) - values[t].item()
        carry = delta + GAMMA * LAMBDA * (0.0 if terminated or truncated else carry)
        advantages[t] = carry
    return advantages


@pytest.mark.parametrize("heading, filler_steps", [
    ("### Next-step autoreset", True),
    ("### Same-step autoreset", False),
])
def test_the_pages_gymnasium_rollouts_give_per_episode_gae(backend, monkeypatch, heading, filler_steps):
    records: list = []
    make = registration.make

    def make_recorded(*args, **kwargs):
        return _Recorder(make(*args, **{**kwargs, "max_episode_steps": EPISODE_STEPS}), records)

    # make_vec builds its sub-environments through registration.make; the same-step example calls gym.make
    monkeypatch.setattr(registration, "make", make_recorded)
    monkeypatch.setattr(gym, "make", make_recorded)
    # the calls check their inputs: no step flagged both terminated and truncated, no stray bootstrap value
    monkeypatch.setenv("RL_TRITON_CORRECTNESS_WARNINGS", "1")
    torch.manual_seed(0)
    value_net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    actions = torch.Generator().manual_seed(1)
    namespace = {"value_net": value_net,
                 "policy": lambda obs: torch.randint(0, 2, (obs.shape[0],), generator=actions)}
    exec(compile(_page_block(heading), "docs/conventions.md", "exec"), namespace)  # noqa: S102 - the page's own example

    advantages, truncateds, terminateds = namespace["advantages"], namespace["truncateds"], namespace["terminateds"]
    num_steps, num_envs = advantages.shape
    assert (num_steps, num_envs) == (128, 8) and len(records) == num_envs
    # the rollout holds what the test is for: truncations, terminations, and steps that terminate at the time
    # limit, which Gymnasium flags truncated too
    assert truncateds.sum() >= 8 and terminateds.sum() >= 8
    assert any(t[3] and t[4] for transitions in records for t in transitions)
    valid = namespace["valid"] if filler_steps else torch.ones_like(truncateds)
    if filler_steps:
        # one filler step after each episode end but the window's last
        ended = truncateds | terminateds
        assert valid.logical_not().sum() == ended[:-1].sum()
    for env, transitions in enumerate(records):
        assert len(transitions) == valid[:, env].sum()
        expected = _episode_gae(transitions, value_net)
        got = advantages[:, env][valid[:, env]].double()
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)

    # the page's "same buffers for the other estimators": lambda-returns from next_values as it builds them equal
    # GAE + V, and V-trace on-policy with unclipped ratios gives vs - V = GAE with lambda = 1, at every step
    values, rewards = namespace["values"], namespace["rewards"]
    bootstrap_values = namespace["bootstrap_values"]
    next_values = torch.cat([values[1:], namespace["value_after_window"][None]])
    lambda_returns = rl_triton.compute_lambda_returns(rewards, next_values, terminateds, truncateds, gamma=GAMMA,
                                                      lambda_=LAMBDA, bootstrap_values=bootstrap_values, time_dim=0)
    torch.testing.assert_close(lambda_returns, advantages + values, rtol=1e-5, atol=1e-5)
    log_pi = torch.zeros_like(rewards)
    vs, _ = rl_triton.compute_vtrace(log_pi, log_pi, values, rewards, terminateds, truncateds, gamma=GAMMA,
                                     bootstrap_values=bootstrap_values, time_dim=0)
    monte_carlo = rl_triton.compute_gae(rewards, values, terminateds, truncateds, gamma=GAMMA, lambda_=1.0,
                                        bootstrap_values=bootstrap_values, time_dim=0)
    torch.testing.assert_close(vs - values, monte_carlo, rtol=1e-5, atol=1e-5)
