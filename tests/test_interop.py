"""The same numbers as the libraries RL code computes these with today, through the recipes of docs/interop.md.

Each test fills another library's inputs from one rollout, in that library's own layout and flag conventions,
runs the library, and checks that the rl_triton call written in docs/interop.md returns the same values, on
both backends. The libraries run as installed (the ``test`` extra pins their versions): TorchRL's functional
estimators and its ``GAE`` module, Stable-Baselines3's ``RolloutBuffer`` and PPO, and rlax's estimators under
JAX in float64. CleanRL's advantage loop lives inside its training scripts, and verl cannot be installed
beside these (it asks for older ``tensordict`` and ``transformers``): both loops are written out below.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import rl_triton
from conftest import DEVICE, TOLERANCE, assert_rel, rel_err

# exact in float32: TorchRL forms its discounts (gamma * not_done, an integer tensor) in float32 even for
# float64 inputs, which with gamma = 0.97 and lambda = 0.9 moves its float64 GAE by 5e-8 to 1.1e-7 relative
GAMMA, LAMBDA = 0.96875, 0.90625
# (rows, steps): one row, and rows of several episodes each (about 5% terminated, 5% truncated)
SHAPES = [pytest.param(1, 7, id="1x7"), pytest.param(3, 200, id="3x200")]
TOL = TOLERANCE[torch.float64]


def _on_device(function):
    """``function`` of rl_triton on the test device: the other libraries take CPU tensors, and their
    results are compared on the CPU."""
    def moved(value):
        return value.to(DEVICE) if isinstance(value, torch.Tensor) else value

    def run(*args, **kwargs):
        result = function(*map(moved, args), **{name: moved(value) for name, value in kwargs.items()})
        return tuple(part.cpu() for part in result) if isinstance(result, tuple) else result.cpu()

    return run


def _rollout(make_rollout, rows: int, steps: int, dtype: torch.dtype = torch.float64, **kwargs):
    """A CPU rollout whose first row terminates at step 1 and is truncated at step 3, so that even 7-step
    cases cross both kinds of episode end (random flags at 5% may leave them none)."""
    rollout = make_rollout(rows, steps, dtype=dtype, device="cpu", **kwargs)
    for name, step, other in (("terminateds", 1, "truncateds"), ("truncateds", 3, "terminateds")):
        getattr(rollout, name)[0, step] = 1
        getattr(rollout, other)[0, step] = 0
        rollout.dones[0, step] = 1
    rollout.bootstrap_values[0, 1] = 0.0
    rollout.bootstrap_values[0, 3] = rollout.next_values[0, 3]  # V of the truncated episode's final observation
    return rollout


# ----- TorchRL: [*batch, T, 1] tensors, time at -2; `done` = terminated or truncated -----------


def _torchrl_inputs(rollout) -> dict[str, torch.Tensor]:
    """A TorchRL batch of ``rollout``: ``[rows, T, 1]``, ``next_state_value`` at every step.

    ``next_state_value[t]`` is ``V(s_{t+1})``: the next step's value inside an episode, the final
    observation's value at a truncated step and in the last column, and another number at a terminated
    step (the value of a terminal state, which TorchRL multiplies by ``not terminated``).
    """
    values, terminated, truncated = rollout.values, rollout.terminateds.bool(), rollout.truncateds.bool()
    next_state_value = torch.cat([values[:, 1:], values[:, -1:]], dim=1)
    window_end = torch.zeros_like(truncated)
    window_end[:, -1] = True
    next_state_value = torch.where(truncated | window_end, rollout.bootstrap_values, next_state_value)
    next_state_value = torch.where(terminated, rollout.next_values, next_state_value)  # counts in neither
    return {
        "state_value": values.unsqueeze(-1),
        "next_state_value": next_state_value.unsqueeze(-1),
        "reward": rollout.rewards.unsqueeze(-1),
        "done": (terminated | truncated).unsqueeze(-1),
        "terminated": terminated.unsqueeze(-1),
    }


def _bootstrap_from_next_state_value(next_state_value: torch.Tensor, done: torch.Tensor,
                                     terminated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """docs/interop.md's recipe: TorchRL's ``next_state_value`` and flags as ``(truncateds, bootstrap_values)``,
    in TorchRL's ``[*batch, T, 1]`` layout (time at -2)."""
    truncated = done & ~terminated
    takes_bootstrap = truncated.clone()
    takes_bootstrap[..., -1, :] = True
    return truncated, torch.where(takes_bootstrap & ~terminated, next_state_value, 0.0)


def _converted(torchrl: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return _bootstrap_from_next_state_value(torchrl["next_state_value"], torchrl["done"], torchrl["terminated"])


@pytest.mark.parametrize("rows, steps", SHAPES)
@pytest.mark.parametrize("vectorised", [False, True], ids=["loop", "vec"])
def test_torchrl_gae(backend, make_rollout, rows, steps, vectorised):
    torchrl_functional = pytest.importorskip("torchrl.objectives.value.functional")

    torchrl = _torchrl_inputs(_rollout(make_rollout, rows, steps))
    estimate = (torchrl_functional.vec_generalized_advantage_estimate if vectorised
                else torchrl_functional.generalized_advantage_estimate)
    expected_advantage, expected_target = estimate(GAMMA, LAMBDA, **torchrl)

    truncated, bootstrap = _converted(torchrl)
    advantage = _on_device(rl_triton.compute_gae)(
        torchrl["reward"], torchrl["state_value"], torchrl["terminated"], truncated, GAMMA, LAMBDA, bootstrap,
        time_dim=-2)
    assert advantage.shape == expected_advantage.shape
    # TorchRL's vectorised GAE sums each episode's series by a convolution, in another order, and drops terms of
    # weight (gamma * lambda)^k < 1e-7, beyond about 124 steps here: these episodes are shorter (docs/interop.md)
    tol = 1e-9 if vectorised else TOL
    assert_rel(advantage, expected_advantage, tol, "advantage")
    assert_rel(advantage + torchrl["state_value"], expected_target, tol, "value target")


def test_torchrl_gae_rounds_its_discounts_to_float32(backend, make_rollout):
    """docs/interop.md: with float64 inputs TorchRL's GAE uses gamma and gamma * lambda rounded to float32."""
    torchrl_functional = pytest.importorskip("torchrl.objectives.value.functional")
    torchrl = _torchrl_inputs(_rollout(make_rollout, 3, 200))
    gamma, lambda_ = 0.97, 0.9
    expected, _ = torchrl_functional.generalized_advantage_estimate(gamma, lambda_, **torchrl)
    truncated, bootstrap = _converted(torchrl)
    advantage = _on_device(rl_triton.compute_gae)(
        torchrl["reward"], torchrl["state_value"], torchrl["terminated"], truncated, gamma, lambda_, bootstrap,
        time_dim=-2)
    assert 1e-8 < rel_err(advantage, expected) < 1e-6

    def float32(value: float) -> float:
        return torch.tensor(value, dtype=torch.float32).item()

    rounded_gamma = float32(gamma)
    advantage = _on_device(rl_triton.compute_gae)(
        torchrl["reward"], torchrl["state_value"], torchrl["terminated"], truncated, rounded_gamma,
        float32(gamma * lambda_) / rounded_gamma, bootstrap, time_dim=-2)
    assert_rel(advantage, expected, TOL, "advantage with TorchRL's rounded discounts")


def test_torchrl_vectorised_gae_drops_small_terms_of_long_episodes(backend, gen):
    """docs/interop.md's figure: over one 1000-step episode TorchRL's vectorised GAE is about 1e-7 off its loop,
    where rl_triton matches the loop."""
    torchrl_functional = pytest.importorskip("torchrl.objectives.value.functional")
    state_value, reward = (torch.randn(1, 1000, 1, generator=gen, dtype=torch.float64) for _ in range(2))
    next_state_value = torch.cat([state_value[:, 1:], torch.randn(1, 1, 1, generator=gen, dtype=torch.float64)], 1)
    never = torch.zeros_like(reward, dtype=torch.bool)
    loop, _ = torchrl_functional.generalized_advantage_estimate(
        GAMMA, LAMBDA, state_value, next_state_value, reward, never, never)
    vectorised, _ = torchrl_functional.vec_generalized_advantage_estimate(
        GAMMA, LAMBDA, state_value, next_state_value, reward, never, never)
    bootstrap = torch.zeros_like(next_state_value)
    bootstrap[:, -1] = next_state_value[:, -1]
    advantage = _on_device(rl_triton.compute_gae)(
        reward, state_value, never, None, GAMMA, LAMBDA, bootstrap, time_dim=-2)
    assert_rel(advantage, loop, TOL, "advantage against the loop")
    assert 3e-8 < rel_err(vectorised, loop) < 3e-7


@pytest.mark.parametrize("rows, steps", SHAPES)
@pytest.mark.parametrize("module, vectorized", [("GAE", None), ("GAE", True), ("TDLambdaEstimator", None)],
                         ids=["GAE", "GAE-vectorized", "TDLambdaEstimator"])
def test_torchrl_value_modules(backend, gen, rows, steps, module, vectorized):
    """TorchRL's ``GAE`` and ``TDLambdaEstimator`` modules on a TensorDict laid out as its collectors write one:
    the final observation of an episode in ``("next", "observation")``, the next episode's first in the
    following step's ``"observation"``."""
    pytest.importorskip("torchrl")
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule
    from torchrl.objectives import value as torchrl_value

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    draw = torch.rand(rows, steps, 1, generator=gen)
    draw[0, 1], draw[0, 3] = 0.0, 0.07  # a termination and a truncation in every case
    terminated, truncated = draw < 0.05, (draw >= 0.05) & (draw < 0.1)
    observation = normal(rows, steps + 1, 4)
    next_observation = torch.where(terminated | truncated, normal(rows, steps, 4), observation[:, 1:])
    batch = TensorDict({
        "observation": observation[:, :-1],
        "next": {"observation": next_observation, "reward": normal(rows, steps, 1), "done": terminated | truncated,
                 "terminated": terminated, "truncated": truncated},
    }, batch_size=[rows, steps])
    linear = torch.nn.Linear(4, 1, dtype=torch.float64)
    value_network = TensorDictModule(linear, in_keys=["observation"], out_keys=["state_value"])
    options = {} if vectorized is None else {"vectorized": vectorized}
    with torch.no_grad():
        estimator = getattr(torchrl_value, module)(gamma=GAMMA, lmbda=LAMBDA, value_network=value_network, **options)
        batch = estimator(batch)

    truncated, bootstrap = _bootstrap_from_next_state_value(
        batch["next", "state_value"], batch["next", "done"], batch["next", "terminated"])
    if module == "GAE":
        advantage = _on_device(rl_triton.compute_gae)(
            batch["next", "reward"], batch["state_value"], batch["next", "terminated"], truncated, GAMMA, LAMBDA,
            bootstrap, time_dim=-2)
        value_target = advantage + batch["state_value"]
    else:
        value_target = _on_device(rl_triton.compute_lambda_returns)(
            batch["next", "reward"], batch["next", "state_value"], batch["next", "terminated"], truncated, GAMMA,
            LAMBDA, bootstrap, time_dim=-2)
        advantage = value_target - batch["state_value"]
    # GAE runs TorchRL's loop unless vectorized=True; TDLambdaEstimator runs the vectorised TD(lambda) by default
    # (see test_torchrl_gae)
    tol = TOL if module == "GAE" and not vectorized else 1e-9
    assert_rel(advantage, batch["advantage"], tol, "advantage")
    assert_rel(value_target, batch["value_target"], tol, "value target")


@pytest.mark.parametrize("rows, steps", SHAPES)
@pytest.mark.parametrize("clips", [(1.0, 1.0), (2.0, 0.5)], ids=["rho1-c1", "rho2-c0.5"])
def test_torchrl_vtrace(backend, make_rollout, rows, steps, clips):
    vtrace_advantage_estimate = pytest.importorskip("torchrl.objectives.value.functional").vtrace_advantage_estimate

    rollout = _rollout(make_rollout, rows, steps)
    torchrl = _torchrl_inputs(rollout)
    rho_bar, c_bar = clips
    # TorchRL's ratio is exp(log_pi - log_mu): log_pi is the target policy's
    log_pi, log_mu = rollout.log_pi_target.unsqueeze(-1), rollout.log_pi_behavior.unsqueeze(-1)
    expected_advantage, expected_vs = vtrace_advantage_estimate(
        GAMMA, log_pi, log_mu, **torchrl, rho_thresh=rho_bar, c_thresh=c_bar)

    truncated, bootstrap = _converted(torchrl)
    vs, advantage = _on_device(rl_triton.compute_vtrace)(
        log_pi, log_mu, torchrl["state_value"], torchrl["reward"], torchrl["terminated"], truncated, GAMMA, rho_bar,
        c_bar, bootstrap, time_dim=-2)
    assert_rel(vs, expected_vs, TOL, "vs")
    assert_rel(advantage, expected_advantage, TOL, "advantage")


@pytest.mark.parametrize("rows, steps", SHAPES)
@pytest.mark.parametrize("vectorised", [False, True], ids=["loop", "vec"])
def test_torchrl_lambda_returns(backend, make_rollout, rows, steps, vectorised):
    torchrl_functional = pytest.importorskip("torchrl.objectives.value.functional")

    torchrl = _torchrl_inputs(_rollout(make_rollout, rows, steps))
    estimate = (torchrl_functional.vec_td_lambda_return_estimate if vectorised
                else torchrl_functional.td_lambda_return_estimate)
    expected = estimate(GAMMA, LAMBDA, torchrl["next_state_value"], torchrl["reward"], torchrl["done"],
                        torchrl["terminated"])

    truncated, bootstrap = _converted(torchrl)
    returns = _on_device(rl_triton.compute_lambda_returns)(
        torchrl["reward"], torchrl["next_state_value"], torchrl["terminated"], truncated, GAMMA, LAMBDA, bootstrap,
        time_dim=-2)
    assert_rel(returns, expected, 1e-9 if vectorised else TOL, "lambda-returns")


@pytest.mark.parametrize("rows, steps", SHAPES)
def test_torchrl_discounted_returns(backend, make_rollout, rows, steps):
    torchrl_functional = pytest.importorskip("torchrl.objectives.value.functional")
    reward2go, td1_return_estimate = torchrl_functional.reward2go, torchrl_functional.td1_return_estimate

    torchrl = _torchrl_inputs(_rollout(make_rollout, rows, steps))
    truncated, bootstrap = _converted(torchrl)
    # TD(1): bootstrapped from the next state's value where an episode is cut or goes on past the window
    expected = td1_return_estimate(GAMMA, torchrl["next_state_value"], torchrl["reward"], torchrl["done"],
                                   torchrl["terminated"])
    returns = _on_device(rl_triton.compute_discounted_returns)(
        torchrl["reward"], torchrl["terminated"], truncated, GAMMA, bootstrap, time_dim=-2)
    assert_rel(returns, expected, TOL, "TD(1) returns")
    # reward-to-go: rewards only, every episode end a cut
    expected = reward2go(torchrl["reward"], torchrl["done"], GAMMA)
    returns = _on_device(rl_triton.compute_discounted_returns)(
        torchrl["reward"], torchrl["done"], gamma=GAMMA, time_dim=-2)
    assert_rel(returns, expected, TOL, "reward-to-go")


# ----- Stable-Baselines3 and CleanRL: [T, num_envs] arrays, flags of the episode's first step -----


def _sb3_buffer(rollout, rewards: torch.Tensor, episode_ended: torch.Tensor):
    """An SB3 ``RolloutBuffer`` holding ``rollout`` (time-major float32 numpy arrays): ``episode_starts[t]``
    is set where step ``t - 1`` ended an episode, as SB3's ``collect_rollouts`` stores it."""
    RolloutBuffer = pytest.importorskip("stable_baselines3.common.buffers").RolloutBuffer
    from gymnasium import spaces

    steps, envs = rollout.seq_len, rollout.batch[0]
    buffer = RolloutBuffer(steps, spaces.Box(-1.0, 1.0, (1,)), spaces.Discrete(2), device="cpu",
                           gae_lambda=LAMBDA, gamma=GAMMA, n_envs=envs)
    buffer.rewards[:] = rewards.t().numpy()
    buffer.values[:] = rollout.values.t().numpy()
    buffer.episode_starts[:] = 0.0
    buffer.episode_starts[1:] = episode_ended[:, :-1].t().numpy()
    return buffer


@pytest.mark.parametrize("rows, steps", SHAPES)
def test_sb3_rollout_buffer(backend, make_rollout, rows, steps):
    rollout = _rollout(make_rollout, rows, steps, torch.float32)
    terminated, truncated = rollout.terminateds.bool(), rollout.truncateds.bool()
    # episodes that end at the last step, where SB3 reads the `dones` it is given: truncated in the first row,
    # terminated in the second
    terminated[:, -1], truncated[:, -1] = False, False
    truncated[0, -1] = True
    terminated[1:2, -1] = True
    # SB3 adds gamma * V(final observation) to the reward of a truncated step, then treats it as an end
    folded_rewards = rollout.rewards + GAMMA * torch.where(truncated, rollout.bootstrap_values, 0.0)
    buffer = _sb3_buffer(rollout, folded_rewards, terminated | truncated)
    dones = (terminated | truncated)[:, -1].numpy()
    last_values = rollout.last_value[:, None]  # V(s_T) as SB3's policy returns it; ignored where an episode ended
    buffer.compute_returns_and_advantage(last_values, dones)

    # the recipe: SB3's own arrays, read in place as [T, num_envs] (time_dim=0)
    rewards, values = torch.from_numpy(buffer.rewards), torch.from_numpy(buffer.values)
    episode_starts = torch.from_numpy(buffer.episode_starts)
    ended = torch.cat([episode_starts[1:], torch.as_tensor(dones, dtype=torch.float32)[None]])
    advantages = _on_device(rl_triton.compute_gae)(
        rewards, values, ended, gamma=buffer.gamma, lambda_=buffer.gae_lambda, last_value=last_values.flatten(),
        time_dim=0)
    assert_rel(advantages, torch.from_numpy(buffer.advantages), TOLERANCE[torch.float32], "advantages")
    assert_rel(advantages + values, torch.from_numpy(buffer.returns), TOLERANCE[torch.float32], "returns")

    # the same advantages from the environment's rewards, with the truncations as rl_triton takes them, in SB3's
    # [T, num_envs] layout
    rewards, terminateds, truncateds, bootstrap_values = (
        tensor.t() for tensor in (rollout.rewards, terminated, truncated, rollout.bootstrap_values))
    native = _on_device(rl_triton.compute_gae)(
        rewards, values, terminateds, truncateds, GAMMA, LAMBDA, bootstrap_values, time_dim=0)
    assert_rel(native, torch.from_numpy(buffer.advantages), TOLERANCE[torch.float32], "advantages, unfolded")


def _documented_sb3_buffer() -> type:
    """The buffer class that docs/interop.md shows, defined by running its code block."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "interop.md").read_text()
    block = next(block for block in re.findall(r"```python\n(.*?)```", page, re.DOTALL)
                 if "class RLTritonRolloutBuffer" in block)
    namespace: dict = {}
    exec(compile(block, "docs/interop.md", "exec"), namespace)  # noqa: S102 - the page's own example
    return namespace["RLTritonRolloutBuffer"]


def test_sb3_ppo_with_the_documented_buffer(backend):
    pytest.importorskip("stable_baselines3")
    import copy

    from stable_baselines3 import PPO
    from stable_baselines3.common.buffers import RolloutBuffer
    from stable_baselines3.common.env_util import make_vec_env

    rollouts = []

    class CheckedBuffer(_documented_sb3_buffer()):
        def compute_returns_and_advantage(self, last_values: torch.Tensor, dones: np.ndarray) -> None:
            sb3 = copy.deepcopy(self)
            RolloutBuffer.compute_returns_and_advantage(sb3, last_values, dones)
            super().compute_returns_and_advantage(last_values, dones)
            rollouts.append((sb3.episode_starts.sum(), self.advantages.copy(), sb3.advantages, self.returns,
                             sb3.returns))

    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, rollout_buffer_class=CheckedBuffer,
                device=DEVICE, seed=0)
    model.learn(total_timesteps=256)
    assert len(rollouts) == 2
    assert sum(starts for starts, *_ in rollouts) > 0  # episodes ended inside the rollouts
    for _, advantages, sb3_advantages, returns, sb3_returns in rollouts:
        assert_rel(torch.from_numpy(advantages), torch.from_numpy(sb3_advantages), TOLERANCE[torch.float32])
        assert_rel(torch.from_numpy(returns), torch.from_numpy(sb3_returns), TOLERANCE[torch.float32])


def _cleanrl_gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, next_value: torch.Tensor,
                 next_done: torch.Tensor) -> torch.Tensor:
    """CleanRL's PPO advantage loop over ``[T, num_envs]`` buffers: ``dones[t]`` is the done flag that came
    with observation ``t`` (the previous step ended an episode), ``next_done`` the flag after the window."""
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last_gae = 0.0
    for t in reversed(range(steps)):
        if t == steps - 1:
            next_non_terminal, next_values = 1.0 - next_done, next_value
        else:
            next_non_terminal, next_values = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + GAMMA * next_values * next_non_terminal - values[t]
        advantages[t] = last_gae = delta + GAMMA * LAMBDA * next_non_terminal * last_gae
    return advantages


@pytest.mark.parametrize("rows, steps", SHAPES)
def test_cleanrl_ppo_loop(backend, make_rollout, rows, steps):
    rollout = _rollout(make_rollout, rows, steps)
    ended = (rollout.terminateds.bool() | rollout.truncateds.bool()).t().double()  # CleanRL: truncation = end
    rewards, values = rollout.rewards.t().contiguous(), rollout.values.t().contiguous()
    dones = torch.cat([torch.zeros_like(ended[:1]), ended[:-1]])
    next_done, next_value = ended[-1], rollout.last_value
    expected = _cleanrl_gae(rewards, values, dones, next_value, next_done)

    terminateds = torch.cat([dones[1:], next_done[None]])
    advantages = _on_device(rl_triton.compute_gae)(
        rewards, values, terminateds, gamma=GAMMA, lambda_=LAMBDA, last_value=next_value, time_dim=0)
    assert_rel(advantages, expected, TOL, "advantages")


# ----- LLM post-training (verl, TRL): token-level GAE over right-padded responses -------------------


def _masked_token_gae(token_level_rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor,
                      gamma: float, lam: float) -> torch.Tensor:
    """verl's ``compute_gae_advantage_return`` loop (before its whitening), written out: ``[batch,
    response_length]``, steps where ``response_mask`` is 0 pass the next value and the advantage through."""
    next_value = torch.zeros_like(values[:, 0])
    advantage = torch.zeros_like(values[:, 0])
    advantages = torch.empty_like(values)
    for t in reversed(range(values.shape[1])):
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        mask = response_mask[:, t]
        next_value = values[:, t] * mask + (1 - mask) * next_value
        advantage = (delta + gamma * lam * advantage) * mask + (1 - mask) * advantage
        advantages[:, t] = advantage
    return advantages


@pytest.mark.parametrize("rows, steps", [pytest.param(4, 300, id="4x300"), pytest.param(2, 5, id="2x5")])
@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.bool, torch.float64], ids=["int64", "bool", "f64"])
def test_token_level_gae_over_right_padded_responses(backend, gen, rows, steps, mask_dtype):
    lengths = torch.randint(1, steps, (rows,), generator=gen)
    lengths[0] = steps  # one response fills the window, the others are padded
    response_mask = (torch.arange(steps) < lengths[:, None]).to(mask_dtype)
    # a reward at every token (a KL penalty) plus the score at the last one; values everywhere, padding too
    token_level_rewards = torch.randn(rows, steps, generator=gen, dtype=torch.float64) * response_mask
    values = torch.randn(rows, steps, generator=gen, dtype=torch.float64)
    expected = _masked_token_gae(token_level_rewards, values, response_mask.double(), 1.0, 0.95)

    # the recipe: each response ends at its last token, followed by padding or by the window's end
    next_mask = torch.nn.functional.pad(response_mask[:, 1:], (0, 1))
    ends = (response_mask != 0) & (next_mask == 0)
    advantages = _on_device(rl_triton.compute_gae)(token_level_rewards, values, ends, gamma=1.0, lambda_=0.95)
    on_response = response_mask != 0
    assert_rel(advantages[on_response], expected[on_response], TOL, "advantages on response tokens")


# ----- rlax: one trajectory per call, time-major, discount_t = gamma * (1 - terminated) ----------


@pytest.fixture
def jax_float64():
    """rlax under JAX with float64 arrays (JAX's default is float32)."""
    jax = pytest.importorskip("jax")
    # a context manager (JAX's State object); older JAX had it in jax.experimental
    enable_x64 = jax.enable_x64 if hasattr(jax, "enable_x64") else jax.experimental.enable_x64
    with enable_x64(True):
        yield jax


def _rlax_rows(jax, function, *arrays, **scalars):
    """``function`` of rlax over each row of ``[rows, T]`` tensors, as a float64 tensor."""
    import jax.numpy as jnp

    def one_row(*row):
        return function(*row, **scalars)

    result = jax.vmap(one_row)(*(jnp.asarray(array.numpy()) for array in arrays))
    if isinstance(result, tuple):
        return tuple(torch.from_numpy(np.array(part)) for part in result)
    return torch.from_numpy(np.array(result))


def _terminations_only(rollout):
    """rlax has one discount per step, which both drops the bootstrap and cuts the trace: it expresses
    terminations, not truncations. ``v_t[t] = V(s_{t+1})``, ``V(s_T)`` in the last column."""
    terminated = rollout.terminateds.bool()
    discount = GAMMA * (~terminated).double()
    next_values = torch.cat([rollout.values[:, 1:], rollout.last_value[:, None]], dim=1)
    return terminated, discount, next_values


@pytest.mark.parametrize("rows, steps", SHAPES)
@pytest.mark.parametrize("rho_bar", [1.0, 2.0], ids=["rho1", "rho2"])
def test_rlax_vtrace(backend, make_rollout, jax_float64, rows, steps, rho_bar):
    rlax = pytest.importorskip("rlax")

    rollout = _rollout(make_rollout, rows, steps)
    terminated, discount, next_values = _terminations_only(rollout)
    ratios = torch.exp(rollout.log_pi_target - rollout.log_pi_behavior)
    errors, pg_advantages, _ = _rlax_rows(
        jax_float64, rlax.vtrace_td_error_and_advantage, rollout.values, next_values, rollout.rewards, discount,
        ratios, clip_rho_threshold=rho_bar, clip_pg_rho_threshold=rho_bar)

    # rlax clips the traces' ratios at 1 and takes one clip for the TD errors and the advantages
    vs, advantages = _on_device(rl_triton.compute_vtrace)(
        rollout.log_pi_target, rollout.log_pi_behavior, rollout.values, rollout.rewards, terminated, gamma=GAMMA,
        rho_bar=rho_bar, c_bar=1.0, last_value=rollout.last_value)
    assert_rel(vs - rollout.values, errors, TOL, "vs - V")
    assert_rel(advantages, pg_advantages, TOL, "advantages")


@pytest.mark.parametrize("rows, steps", SHAPES)
def test_rlax_returns_and_gae(backend, make_rollout, jax_float64, rows, steps):
    rlax = pytest.importorskip("rlax")

    rollout = _rollout(make_rollout, rows, steps)
    terminated, discount, next_values = _terminations_only(rollout)
    # lambda-returns bootstrap from v_t[-1] after the window: rl_triton's bootstrap_values' last column
    window_end = torch.zeros_like(rollout.values)
    window_end[:, -1] = rollout.last_value

    expected = _rlax_rows(jax_float64, rlax.lambda_returns, rollout.rewards, discount, next_values, lambda_=LAMBDA)
    returns = _on_device(rl_triton.compute_lambda_returns)(
        rollout.rewards, next_values, terminated, gamma=GAMMA, lambda_=LAMBDA, bootstrap_values=window_end)
    assert_rel(returns, expected, TOL, "lambda-returns")

    expected = _rlax_rows(jax_float64, rlax.discounted_returns, rollout.rewards, discount, next_values)
    returns = _on_device(rl_triton.compute_discounted_returns)(
        rollout.rewards, terminated, gamma=GAMMA, bootstrap_values=window_end)
    assert_rel(returns, expected, TOL, "discounted returns")

    # truncated GAE takes the T + 1 values V(s_0) ... V(s_T)
    values_and_last = torch.cat([rollout.values, rollout.last_value[:, None]], dim=1)
    def truncated_gae(r_t, discount_t, values):
        return rlax.truncated_generalized_advantage_estimation(r_t, discount_t, LAMBDA, values)

    expected = _rlax_rows(jax_float64, truncated_gae, rollout.rewards, discount, values_and_last)
    advantages = _on_device(rl_triton.compute_gae)(
        rollout.rewards, rollout.values, terminated, gamma=GAMMA, lambda_=LAMBDA, last_value=rollout.last_value)
    assert_rel(advantages, expected, TOL, "GAE")


@pytest.mark.parametrize("rows, steps", SHAPES)
def test_rlax_retrace_with_a_state_independent_target_policy(backend, make_rollout, jax_float64, rows, steps):
    """rlax's Retrace (c_bar = 1, no advantages) through the trace-index, clipping and discount conventions.

    rlax takes the expectation over next-state actions under pi(. | s_{t+1}); rl_triton's
    ``action_probs_target[t]`` is pi(. | s_t) for the ratio and also the distribution of that
    expectation (docs/conventions.md, "Retrace"). The two agree where pi is the same in every state,
    as here; docs/interop.md says what differs otherwise.
    """
    rlax = pytest.importorskip("rlax")

    rollout = _rollout(make_rollout, rows, steps, num_actions=5)
    terminated, discount, _ = _terminations_only(rollout)
    generator = torch.Generator().manual_seed(rows * 1000 + steps)
    policy = torch.softmax(torch.randn(5, generator=generator, dtype=torch.float64), 0)
    probs_target = policy.expand(rows, steps, 5)
    q_all = torch.randn(rows, steps + 1, 5, generator=generator, dtype=torch.float64)  # Q(s_0 ...s_T, .)
    actions = torch.randint(0, 5, (rows, steps + 1), generator=generator)  # a_0 ... a_T
    behaviour = torch.rand(rows, steps + 1, generator=generator, dtype=torch.float64) * 0.9 + 0.05

    # rlax's step t holds Q(s_t, .) and a_t, then Q(s_{t+1}, .), a_{t+1}, pi(. | s_{t+1}) and mu(a_{t+1} | s_{t+1})
    errors = _rlax_rows(jax_float64, rlax.retrace, q_all[:, :-1], q_all[:, 1:], actions[:, :-1], actions[:, 1:],
                        rollout.rewards, discount, probs_target, behaviour[:, 1:], lambda_=LAMBDA, eps=0.0)

    q_values = q_all[:, :-1].gather(-1, actions[:, :-1, None]).squeeze(-1)
    targets, _ = _on_device(rl_triton.compute_retrace)(
        probs_target, behaviour[:, :-1], q_values, q_all[:, 1:], actions[:, :-1], rollout.rewards, terminated,
        torch.zeros_like(terminated), GAMMA, LAMBDA, c_bar=1.0)
    assert_rel(targets - q_values, errors, TOL, "Retrace targets - Q")
