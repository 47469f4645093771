"""Gradients of every estimator w.r.t. its floating inputs, by float64 gradcheck on every backend.

The differentiable path composes most estimators from elementwise PyTorch and the linear
recurrence op, whose backward is the adjoint recurrence on the same engine; GAE, lambda-returns
and discounted returns run fused on the Triton backend instead (their own forward kernel and one
adjoint kernel that writes every input gradient). gradcheck compares the analytic gradients with
finite differences, and the fused gradients are also compared with the reference composition's.
Small tiles force several chunks and the time-split look-back into both the forward and the
adjoint scans.
"""

from __future__ import annotations

import pytest
import torch

import rl_triton
from conftest import DEVICE
from rl_triton import _autograd, _dispatch, _launch, reference

# small: gradcheck runs the estimator twice per input element (seconds each under the interpreter)
ROWS, STEPS, ACTIONS = 2, 7, 3


def _inputs(seed: int, num_rows: int = ROWS, seq_len: int = STEPS) -> dict:
    g = torch.Generator().manual_seed(seed)

    def leaf(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(DEVICE).requires_grad_(True)

    terminated = torch.rand(num_rows, seq_len, generator=g) < 0.15
    truncated = (torch.rand(num_rows, seq_len, generator=g) < 0.15) & ~terminated
    bootstrap = torch.randn(num_rows, seq_len, generator=g, dtype=torch.float64) * truncated
    bootstrap[:, -1] = torch.randn(num_rows, generator=g, dtype=torch.float64)
    behavior = 0.2 + 0.8 * torch.rand(num_rows, seq_len, generator=g, dtype=torch.float64)
    return {
        "r": leaf(num_rows, seq_len),
        "v": leaf(num_rows, seq_len),
        "q": leaf(num_rows, seq_len),
        "log_target": leaf(num_rows, seq_len),
        "log_behavior": leaf(num_rows, seq_len),
        "boot": bootstrap.to(DEVICE).requires_grad_(True),
        "last": leaf(num_rows),
        "seed": leaf(num_rows),
        "logits": leaf(num_rows, seq_len, ACTIONS),
        "next_q": leaf(num_rows, seq_len, ACTIONS),
        "behavior": behavior.to(DEVICE).requires_grad_(True),
        "actions": torch.randint(0, ACTIONS, (num_rows, seq_len), generator=g).to(DEVICE),
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


# under the interpreter (seconds a case) one estimator per path of a second derivative: the fused GAE's and the
# fused returns' backward recorded through the adjoint recurrence, the recurrence differentiated in turn in both
# directions (V-trace backward in time, eligibility traces forward); the others run on the reference and on CUDA
INTERPRETED_GRADGRADCHECK = ("gae", "lambda_returns", "vtrace", "eligibility_traces")


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_gradgradcheck(backend, estimator: str) -> None:
    """Gradients of gradients (``create_graph=True``), for a gradient penalty or a meta-gradient: the
    recurrence's backward is differentiable in turn, and the fused kernels' gradients, which depend on the
    incoming gradient alone, are recorded through the differentiable adjoint."""
    fast = DEVICE == "cpu" and backend == "triton"
    if fast and estimator not in INTERPRETED_GRADGRADCHECK:
        pytest.skip("its paths run under the interpreter in INTERPRETED_GRADGRADCHECK's estimators")
    x = _inputs(100 + ESTIMATORS.index(estimator), seq_len=5)
    fn, names = _cases(x)[estimator]
    with _launch.tile_override(block_rows=1, block_time=4, split=True):
        assert torch.autograd.gradgradcheck(fn, tuple(x[n] for n in names), eps=1e-6, atol=1e-6, rtol=1e-5,
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


COMPOSED_ESTIMATORS = ["vtrace", "retrace", "eligibility_traces", "prefix_sum_ends_at", "prefix_sum_starts_at"]


@pytest.mark.parametrize("tiles", [pytest.param(None, id="default-plan"), pytest.param((1, True), id="split-r1")])
@pytest.mark.parametrize("estimator", COMPOSED_ESTIMATORS)
def test_composed_gradients_match_loops(monkeypatch, estimator: str, tiles) -> None:
    """V-trace, Retrace, eligibility traces and prefix sums differentiate through elementwise PyTorch
    and the linear-recurrence op, whose Triton kernel runs the forward and the adjoint scans: their
    values and gradients against the same composition run by plain float64 loops."""
    x = _inputs(100 + COMPOSED_ESTIMATORS.index(estimator), num_rows=3, seq_len=65)
    fn, names = _cases(x)[estimator]
    inputs = tuple(x[n] for n in names)
    launches = []
    recurrence = _launch.linear_recurrence
    monkeypatch.setattr(_launch, "linear_recurrence", lambda *a: launches.append(a[-1]) or recurrence(*a))
    with _dispatch.use_backend("triton"), _small_tiles(tiles, 65):
        out = fn(*inputs)
        grad_output = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=out.dtype).to(DEVICE)
        grads = torch.autograd.grad(out, inputs, grad_output)
    # forward and adjoint scans by the kernel
    assert False in launches and True in launches
    detached = [t.detach().clone().requires_grad_(True) for t in inputs]
    with _dispatch.use_backend("reference"):
        expected = fn(*detached)
        expected_grads = torch.autograd.grad(expected, detached, grad_output)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    for name, got, want in zip(names, grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=lambda m, name=name: f"d/d{name}: {m}")


# ----- the fused GAE and return gradients (Triton backend) against the reference composition -----

FUSED_ESTIMATORS = {
    # name -> (call(library, flags, **differentiable), differentiable input names)
    "gae": (lambda lib, f, r, v, b: lib.compute_gae(r, v, f["term"], f["trunc"], 0.9, 0.8, b), ("r", "v", "boot")),
    "gae_no_truncateds": (
        lambda lib, f, r, v, b: lib.compute_gae(r, v, f["term"], None, 0.9, 0.8, b),
        ("r", "v", "boot"),
    ),
    "gae_last_value": (
        lambda lib, f, r, v, lv: lib.compute_gae(r, v, f["term"], None, 0.9, 0.8, last_value=lv),
        ("r", "v", "last"),
    ),
    "lambda_returns": (
        lambda lib, f, r, nv, b: lib.compute_lambda_returns(r, nv, f["term"], f["trunc"], 0.9, 0.8, b),
        ("r", "nv", "boot"),
    ),
    "lambda_returns_no_truncateds": (
        lambda lib, f, r, nv, b: lib.compute_lambda_returns(r, nv, f["term"], None, 0.9, 0.8, b),
        ("r", "nv", "boot"),
    ),
    "lambda_returns_no_bootstrap": (
        lambda lib, f, r, nv: lib.compute_lambda_returns(r, nv, f["term"], f["trunc"], 0.9, 0.8),
        ("r", "nv"),
    ),
    "discounted_returns": (
        lambda lib, f, r, b: lib.compute_discounted_returns(r, f["term"], f["trunc"], 0.9, b),
        ("r", "boot"),
    ),
    "discounted_returns_no_bootstrap": (lambda lib, f, r: lib.compute_discounted_returns(r, f["term"], None, 0.9),
                                        ("r",)),
}

# (block_rows, split) of the small tiles; their chunks are 4 steps long up to 8 steps, 16 beyond
FUSED_TILES = [
    pytest.param(None, id="default-plan"),
    # several chunks walked one after another by each program (with the next chunk prefetched)
    pytest.param((2, False), id="loop"),
    # one chunk per program, carries by look-back
    pytest.param((1, True), id="split-r1"),
    pytest.param((2, True), id="split-r2"),
]
FUSED_SHAPES = [(1, 1), (2, 2), (3, 7), (2, 65)]


def _small_tiles(tiles: tuple[int, bool] | None, seq_len: int):
    if tiles is None:
        return _launch.tile_override()
    block_rows, split = tiles
    return _launch.tile_override(block_rows=block_rows, block_time=4 if seq_len <= 8 else 16, split=split)


def _fused_inputs(gen: torch.Generator, num_rows: int, seq_len: int, time_major: bool = False) -> tuple[dict, dict]:
    """(flags, float64 leaves): ~5% terminated and ~5% truncated steps, never both; legal bootstrap values."""
    draw = torch.rand(num_rows, seq_len, generator=gen)
    terminated, truncated = draw < 0.05, (draw >= 0.05) & (draw < 0.10)
    # one of each at least, wherever there is room, so every gradient term is reached
    if seq_len > 2:
        terminated[0, 1], truncated[0, 1] = False, True
        terminated[-1, seq_len - 2], truncated[-1, seq_len - 2] = True, False
    bootstrap = torch.randn(num_rows, seq_len, generator=gen, dtype=torch.float64) * truncated
    bootstrap[:, -1] = torch.randn(num_rows, generator=gen, dtype=torch.float64)

    def place(x: torch.Tensor) -> torch.Tensor:
        # time-major buffers: [T, rows] in memory, passed as the [rows, T] transpose
        return x.t().contiguous().t().to(DEVICE) if time_major else x.to(DEVICE)

    leaves = {
        "r": torch.randn(num_rows, seq_len, generator=gen, dtype=torch.float64),
        "v": torch.randn(num_rows, seq_len, generator=gen, dtype=torch.float64),
        "nv": torch.randn(num_rows, seq_len, generator=gen, dtype=torch.float64) * ~truncated,
        "boot": bootstrap,
        "last": bootstrap[:, -1].clone(),
    }
    flags = {"term": place(terminated), "trunc": place(truncated)}
    return flags, {name: place(x).requires_grad_(True) for name, x in leaves.items()}


def _oracle_gradients(call, flags: dict, inputs: list[torch.Tensor], grad_output: torch.Tensor):
    """Output and float64 gradients of the reference composition run by plain loops."""
    detached = [x.detach().clone().requires_grad_(True) for x in inputs]
    with _dispatch.use_backend("reference"):
        out = call(reference, flags, *detached)
        return out, torch.autograd.grad(out, detached, grad_output)


MAIN_FUSED_ESTIMATORS = ["gae", "gae_last_value", "lambda_returns", "discounted_returns"]
# every variant on the default plan; the main ones also on small tiles (the largest shape on each)
FUSED_CASES = [
    pytest.param(estimator, num_rows, seq_len, tiles.values[0], id=f"{estimator}-{num_rows}x{seq_len}-{tiles.id}")
    for estimator in FUSED_ESTIMATORS
    for num_rows, seq_len in FUSED_SHAPES
    for tiles in FUSED_TILES
    if tiles.values[0] is None
    or (estimator in MAIN_FUSED_ESTIMATORS and seq_len > 1 and (tiles.id != "split-r2" or seq_len == 65))
]


@pytest.mark.parametrize(("estimator", "num_rows", "seq_len", "tiles"), FUSED_CASES)
def test_fused_gradients_match_reference(backend, gen, estimator: str, num_rows: int, seq_len: int,
                                         tiles: tuple[int, bool] | None) -> None:
    if backend == "reference" and tiles is not None:
        pytest.skip("the reference backend has no tiles")
    call, names = FUSED_ESTIMATORS[estimator]
    flags, leaves = _fused_inputs(gen, num_rows, seq_len)
    inputs = [leaves[name] for name in names]
    grad_output = torch.randn(num_rows, seq_len, generator=gen, dtype=torch.float64).to(DEVICE)
    with _small_tiles(tiles, seq_len):
        out = call(rl_triton, flags, *inputs)
        grads = torch.autograd.grad(out, inputs, grad_output)
    if backend == "triton":
        assert type(out.grad_fn).__name__.startswith("Fused"), "the Triton backend takes the fused autograd path"
    expected_out, expected_grads = _oracle_gradients(call, flags, inputs, grad_output)
    torch.testing.assert_close(out, expected_out, rtol=1e-12, atol=1e-12)
    for name, got, want in zip(names, grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=lambda m, name=name: f"d/d{name}: {m}")


@pytest.mark.parametrize("estimator", MAIN_FUSED_ESTIMATORS)
def test_fused_gradcheck_walked_chunks(backend, gen, estimator: str) -> None:
    """Finite differences over 4 chunks of 4 steps walked by one program (test_gradcheck splits them)."""
    call, names = FUSED_ESTIMATORS[estimator]
    flags, leaves = _fused_inputs(gen, 2, 13)
    fast = DEVICE == "cpu" and backend == "triton"
    with _launch.tile_override(block_rows=2, block_time=4, split=False):
        assert torch.autograd.gradcheck(lambda *x: call(rl_triton, flags, *x), tuple(leaves[n] for n in names),
                                        eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=fast)


@pytest.mark.parametrize("estimator", ["gae", "gae_last_value", "lambda_returns"])
def test_fused_gradients_of_some_inputs_only(backend, gen, estimator: str) -> None:
    """Only the inputs that require gradients get them, each equal to the full computation's."""
    call, names = FUSED_ESTIMATORS[estimator]
    flags, leaves = _fused_inputs(gen, 3, 20)
    inputs = [leaves[name] for name in names]
    grad_output = torch.randn(3, 20, generator=gen, dtype=torch.float64).to(DEVICE)
    _, expected = _oracle_gradients(call, flags, inputs, grad_output)
    for wanted in range(len(names)):
        partial = [x if i == wanted else x.detach() for i, x in enumerate(inputs)]
        (grad,) = torch.autograd.grad(call(rl_triton, flags, *partial), [partial[wanted]], grad_output)
        torch.testing.assert_close(grad, expected[wanted], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("estimator", MAIN_FUSED_ESTIMATORS)
def test_fused_gradients_of_flags_made_in_inference_mode(backend, gen, estimator: str) -> None:
    """Flags recorded under torch.inference_mode (a rollout's) cannot be saved for the backward as they are; the
    gradients are the same as with ordinary flags, on both paths."""
    call, names = FUSED_ESTIMATORS[estimator]
    flags, leaves = _fused_inputs(gen, 3, 20)
    with torch.inference_mode():
        inference_flags = {name: flag.clone() for name, flag in flags.items()}
    inputs = [leaves[name] for name in names]
    grad_output = torch.randn(3, 20, generator=gen, dtype=torch.float64).to(DEVICE)
    _, expected = _oracle_gradients(call, flags, inputs, grad_output)
    grads = torch.autograd.grad(call(rl_triton, inference_flags, *inputs), inputs, grad_output)
    for grad, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(grad, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("estimator", ["gae", "lambda_returns"])
def test_fused_gradients_time_major_and_float32(backend, gen, estimator: str) -> None:
    """Time-major buffers (time_dim=0) and float32 inputs with a float64 result."""
    call, names = FUSED_ESTIMATORS[estimator]
    flags, leaves = _fused_inputs(gen, 5, 33, time_major=True)
    grad_output = torch.randn(5, 33, generator=gen, dtype=torch.float64).to(DEVICE)
    _, expected = _oracle_gradients(call, flags, [leaves[n] for n in names], grad_output)

    time_first = {name: x.detach().t().requires_grad_(True) for name, x in leaves.items()}
    flags_first = {name: x.t() for name, x in flags.items()}
    if estimator == "gae":
        out = rl_triton.compute_gae(time_first["r"], time_first["v"], flags_first["term"], flags_first["trunc"],
                                    0.9, 0.8, time_first["boot"], time_dim=0)
    else:
        out = rl_triton.compute_lambda_returns(time_first["r"], time_first["nv"], flags_first["term"],
                                               flags_first["trunc"], 0.9, 0.8, time_first["boot"], time_dim=0)
    grads = torch.autograd.grad(out, [time_first[n] for n in names], grad_output.t())
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got.t(), want, rtol=1e-12, atol=1e-12)

    singles = [leaves[n].detach().float().requires_grad_(True) for n in names]
    if estimator == "gae":
        out = rl_triton.compute_gae(singles[0], singles[1], flags["term"], flags["trunc"], 0.9, 0.8, singles[2],
                                    out_dtype=torch.float64)
    else:
        out = rl_triton.compute_lambda_returns(singles[0], singles[1], flags["term"], flags["trunc"], 0.9, 0.8,
                                               singles[2], out_dtype=torch.float64)
    assert out.dtype == torch.float64
    grads = torch.autograd.grad(out, singles, grad_output)
    for got, want in zip(grads, expected, strict=True):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want.float(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("estimator", ["gae", "lambda_returns", "discounted_returns"])
def test_adjoint_loops_match_reference(gen, estimator: str) -> None:
    """The plain-loop adjoints that compiled graphs run on the reference path."""
    call, names = FUSED_ESTIMATORS[estimator]
    flags, leaves = _fused_inputs(gen, 3, 20)
    inputs = [leaves[n] for n in names]
    grad_output = torch.randn(3, 20, generator=gen, dtype=torch.float64).to(DEVICE)
    _, expected = _oracle_gradients(call, flags, inputs, grad_output)
    f64 = torch.float64
    if estimator == "gae":
        grads = _autograd._gae_backward_loop(grad_output, flags["term"], flags["trunc"], 0.9, 0.8, f64, f64, f64,
                                             None, f64)[:3]
    else:
        lambda_ = 0.8 if estimator == "lambda_returns" else 1.0
        grads = _autograd._returns_backward_loop(grad_output, flags["term"], flags["trunc"], 0.9, lambda_, f64,
                                                 f64, f64, f64)
        grads = grads if estimator == "lambda_returns" else (grads[0], grads[2])
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_fused_gradients_compile_fullgraph(backend, gen) -> None:
    """torch.compile(fullgraph=True) traces the fused forward and backward ops and matches eager."""
    torch._dynamo.reset()
    flags, leaves = _fused_inputs(gen, 4, 24)
    leaves = {name: x.detach().float().requires_grad_(True) for name, x in leaves.items()}

    def loss(r, v, nv, boot):
        advantages = rl_triton.compute_gae(r, v, flags["term"], flags["trunc"], 0.99, 0.95, boot)
        returns = rl_triton.compute_lambda_returns(r, nv, flags["term"], flags["trunc"], 0.99, 0.95, boot)
        discounted = rl_triton.compute_discounted_returns(r, flags["term"], flags["trunc"], 0.99, boot)
        return (advantages.square() + returns * discounted).sum()

    inputs = [leaves[n] for n in ("r", "v", "nv", "boot")]
    eager = loss(*inputs)
    grads_eager = torch.autograd.grad(eager, inputs)
    traced = torch.compile(loss, fullgraph=True)(*inputs)
    grads_traced = torch.autograd.grad(traced, inputs)
    torch.testing.assert_close(traced, eager, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads_traced, grads_eager, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)



# estimators linear in their inputs whose decays are made of flags: (call, whether the seed is per step)
_LINEAR_CALLS = {
    "gae": (lambda x, dones, seed: rl_triton.compute_gae(x, x.detach(), dones, None, 0.99, 0.95, last_value=seed),
            False),
    "lambda_returns": (lambda x, dones, seed: rl_triton.compute_lambda_returns(
        x, x.detach(), dones, None, 0.99, 0.95, bootstrap_values=seed), True),
    "discounted_returns": (lambda x, dones, seed: rl_triton.compute_discounted_returns(x, dones, None, 0.99, seed),
                           True),
    "eligibility_traces": (lambda x, dones, seed: rl_triton.compute_eligibility_traces(x, dones, 0.99, 0.9, seed),
                           False),
    "prefix_sum": (lambda x, dones, seed: rl_triton.compute_episodic_prefix_sum(x, dones, seed), False),
}


@pytest.mark.parametrize("estimator", list(_LINEAR_CALLS))
def test_outputs_changed_in_place_and_inference_seeds(backend, gen, estimator: str) -> None:
    """Recurrences whose decays need no gradient keep neither their output nor their carry for the backward:
    the output may be changed in place (a normalisation, say) and a seed or bootstrap values made under
    torch.inference_mode passed, on every backend, as with any linear PyTorch op; the gradients are those of
    the same loss computed out of place (the mean's own term vanishes: the centred outputs sum to zero)."""
    call, per_step = _LINEAR_CALLS[estimator]
    inputs = torch.randn(3, 17, generator=gen, dtype=torch.float64).to(DEVICE).requires_grad_(True)
    dones = (torch.rand(3, 17, generator=gen) < 0.2).to(DEVICE)
    seed = torch.randn(*((3, 17) if per_step else (3,)), generator=gen, dtype=torch.float64).to(DEVICE)
    out = call(inputs, dones, seed)
    (expected,) = torch.autograd.grad((out - out.mean()).pow(2).sum(), inputs)
    assert expected.abs().sum() > 0
    out = call(inputs, dones, seed)
    out.sub_(out.mean())
    (in_place,) = torch.autograd.grad(out.pow(2).sum(), inputs)
    torch.testing.assert_close(in_place, expected)
    with torch.inference_mode():
        inference_seed = seed.clone()
    out = call(inputs, dones, inference_seed)
    (from_inference_seed,) = torch.autograd.grad((out - out.mean()).pow(2).sum(), inputs)
    torch.testing.assert_close(from_inference_seed, expected)


_TIME_MAJOR_COMPOSED_CALLS = {
    "vtrace": lambda x, flags, other: rl_triton.compute_vtrace(x, other, other.flip(0), x.detach(), flags, gamma=0.9,
                                                               last_value=other[-1], time_dim=0),
    "retrace": lambda x, flags, other: rl_triton.compute_retrace(
        torch.softmax(torch.stack([x, other], -1), -1), torch.full_like(other, 0.4), other, torch.stack([other, x], -1),
        (other > 0).long(), x.detach(), flags, torch.zeros_like(flags), 0.9, time_dim=0),
    "eligibility_traces": lambda x, flags, other: (rl_triton.compute_eligibility_traces(x, flags, 0.99, 0.9, other[0],
                                                                                        time_dim=0),),
    "prefix_sum": lambda x, flags, other: (rl_triton.compute_episodic_prefix_sum(x, flags, other[0], time_dim=0),),
}


@pytest.mark.parametrize("estimator", list(_TIME_MAJOR_COMPOSED_CALLS))
def test_time_major_composed_gradients_compile_fullgraph(backend, gen, estimator: str) -> None:
    """The recurrence op returns its solution in its inputs' layout on every backend, as its fake kernel does:
    torch.compile checks the strides it traced, and [T, N] inputs make time-major [rows, T] views."""
    torch._dynamo.reset()
    call = _TIME_MAJOR_COMPOSED_CALLS[estimator]
    x = torch.randn(16, 4, generator=gen).to(DEVICE).requires_grad_(True)
    other = torch.randn(16, 4, generator=gen).to(DEVICE)
    flags = (torch.rand(16, 4, generator=gen) < 0.15).to(DEVICE)

    def loss(x):
        return sum(out.square().sum() for out in call(x, flags, other))

    eager = loss(x)
    (grad_eager,) = torch.autograd.grad(eager, x)
    traced = torch.compile(loss, fullgraph=True)(x)
    (grad_traced,) = torch.autograd.grad(traced, x)
    torch.testing.assert_close(traced, eager, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad_traced, grad_eager, rtol=1e-5, atol=1e-5)
    assert grad_eager.abs().sum() > 0


_FUSED_CALLS = {
    "gae": lambda x, flags, other, time_dim: rl_triton.compute_gae(x, other, flags, gamma=0.99, lambda_=0.95,
                                                                   time_dim=time_dim),
    "lambda_returns": lambda x, flags, other, time_dim: rl_triton.compute_lambda_returns(
        x, other, flags, gamma=0.99, lambda_=0.95, time_dim=time_dim),
    "discounted_returns": lambda x, flags, other, time_dim: rl_triton.compute_discounted_returns(
        x, flags, gamma=0.99, time_dim=time_dim),
}


@pytest.mark.parametrize("time_dim", [0, 1])
@pytest.mark.parametrize("estimator", list(_FUSED_CALLS))
def test_fused_gradients_compile_fullgraph_whatever_the_incoming_layout(backend, gen, estimator: str,
                                                                        time_dim: int) -> None:
    """GAE's and the returns' adjoint ops give their gradients in the output's layout on every backend, as their
    fake kernels declare, also where the incoming gradient is laid out the other way (a loss weighted by a
    transposed buffer): torch.compile checks the strides it traced."""
    torch._dynamo.reset()
    call = _FUSED_CALLS[estimator]
    x = torch.randn(6, 10, generator=gen).to(DEVICE).requires_grad_(True)
    other = torch.randn(6, 10, generator=gen).to(DEVICE)
    flags = (torch.rand(6, 10, generator=gen) < 0.15).to(DEVICE)
    # outputs are dense in the call's layout: the weights, and so the incoming gradient, are transposed views
    weights = torch.randn(10, 6, generator=gen).to(DEVICE).t()

    def loss(x):
        return (call(x, flags, other, time_dim) * weights).sum()

    (grad_eager,) = torch.autograd.grad(loss(x), x)
    (grad_traced,) = torch.autograd.grad(torch.compile(loss, fullgraph=True)(x), x)
    torch.testing.assert_close(grad_traced, grad_eager, rtol=1e-5, atol=1e-5)
    assert grad_eager.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clipped_ratios_past_overflow_have_finite_gradients(backend, gen, dtype) -> None:
    """A clipped importance weight passes back no gradient, also where the ratio itself overflows (a log-ratio
    past exp's range in V-trace, a behaviour probability near zero in Retrace): the gradients equal those of the
    same call with that step's ratio large but finite, still clipped, which gives the same outputs."""
    overflow = 100.0 if dtype == torch.float32 else 800.0
    tiny = 1e-30 if dtype == torch.float32 else 1e-300
    shape = (3, 9)

    def leaf(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=gen, dtype=dtype).to(DEVICE)

    flags = (torch.rand(shape, generator=gen) < 0.2).to(DEVICE)
    log_target, log_behavior, values, rewards, last = leaf(*shape), leaf(*shape), leaf(*shape), leaf(*shape), leaf(3)
    q_values, next_q = leaf(*shape), leaf(*shape, 3)
    probs = torch.softmax(leaf(*shape, 3), -1)
    actions = torch.randint(0, 3, shape, generator=gen).to(DEVICE)
    behavior = 0.2 + 0.8 * torch.rand(shape, generator=gen, dtype=dtype).to(DEVICE)

    def vtrace(log_ratio_at_step):
        lb = log_behavior.clone()
        lb[1, 4] = log_target[1, 4] - log_ratio_at_step
        leaves = [t.clone().requires_grad_(True) for t in (log_target, lb, values, rewards, last)]
        targets, advantages = rl_triton.compute_vtrace(*leaves[:4], flags, gamma=0.9, last_value=leaves[4])
        return (targets, advantages), torch.autograd.grad((targets.square() + advantages).sum(), leaves)

    def retrace(behavior_at_step):
        mu = behavior.clone()
        mu[1, 4] = behavior_at_step
        leaves = [t.clone().requires_grad_(True) for t in (probs, mu, q_values, next_q, rewards)]
        targets, advantages = rl_triton.compute_retrace(*leaves[:4], actions, leaves[4], flags, torch.zeros_like(flags), 0.9)
        return (targets, advantages), torch.autograd.grad((targets.square() + advantages).sum(), leaves)

    for call, overflowing, finite in ((vtrace, overflow, 10.0), (retrace, tiny, 1e-3)):
        outputs, grads = call(overflowing)
        expected_outputs, expected_grads = call(finite)
        for got, want in zip(outputs + grads, expected_outputs + expected_grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
