"""FakeBackend: the contract, plus what makes it a faithful stand-in."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings

import strategies as st_
from backend_contract import check_backend
from mathrl.backend import SampleParams, TransientBackendError
from mathrl.grpo import build_datum
from mathrl.math_task import AdditionProblem, MathAdapter
from mathrl_fakes import CharTokenizer, FakeBackend
from mathrl_fakes.policy import (
    EOS,
    VOCAB_SIZE,
    WIDTH,
    Step,
    draw,
    initial_theta,
    logprob,
    other_logprob,
    target_logprob,
    uniforms,
)
from virtual_clock import run_virtual

FakeFactory = Callable[..., FakeBackend]
PROMPT = MathAdapter().make_prompt(AdditionProblem(12, 30))


def test_fake_backend_passes_the_contract(fake_backend_factory: FakeFactory) -> None:
    check_backend(fake_backend_factory)


@given(st_.ascii_text)
def test_tokenizer_round_trips_ascii(text: str) -> None:
    tok = CharTokenizer()
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode([*tok.encode(text), EOS]) == text


def test_tokenizer_refuses_what_it_cannot_represent() -> None:
    with pytest.raises(ValueError, match=r"ASCII only \(got 'é' at index 1\)"):
        CharTokenizer().encode("aé")
    with pytest.raises(ValueError, match=r"token ids must be in 0\.\.128"):
        CharTokenizer().decode([129])


@settings(max_examples=25)
@given(theta=st_.policy_thetas, target=st_.fake_token_ids, temperature=st_.temperatures)
def test_reported_logprobs_are_those_of_the_sampled_distribution(
    theta: float, target: int, temperature: float
) -> None:
    params = [theta] * 8
    step = Step(target, 0)
    # The reported distribution is normalised: p(target) + (V - 1) p(other) = 1.
    scaled = WIDTH * theta / temperature
    total = math.exp(target_logprob(scaled)) + (VOCAB_SIZE - 1) * math.exp(other_logprob(scaled))
    assert math.isclose(total, 1.0, rel_tol=1e-9)
    # Drawing by inverse CDF over an even grid of uniforms gives each token a
    # share of the grid equal to exp(its reported logprob), to grid resolution.
    grid = 4_000
    share: dict[int, int] = {}
    reported: dict[int, float] = {}
    for k in range(grid):
        token, lp = draw(params, step, (k + 0.5) / grid, temperature)
        share[token] = share.get(token, 0) + 1
        reported[token] = lp
    for token, count in share.items():
        assert abs(count / grid - math.exp(reported[token])) <= 1.5 / grid
    # At temperature 1 the sampler's logprob is the learner's logprob.
    if temperature == 1.0:
        for token, lp in reported.items():
            assert math.isclose(lp, logprob(params, step, token), rel_tol=1e-12)


def test_logprobs_normalise_over_the_vocabulary() -> None:
    theta = initial_theta()
    for step in (Step(42, 0), Step(None, 0)):
        total = math.fsum(math.exp(logprob(theta, step, t)) for t in range(VOCAB_SIZE))
        assert math.isclose(total, 1.0, rel_tol=1e-12)
    # Initially the target has probability 0.8: logit ln(0.8 * 128 / 0.2) = ln 512.
    assert math.isclose(WIDTH * theta[0], math.log(512))
    assert math.isclose(math.exp(logprob(theta, Step(42, 0), 42)), 0.8)


def test_uniforms_are_stable_and_in_range() -> None:
    u = uniforms("k", 20)
    assert u == uniforms("k", 20)
    assert u != uniforms("j", 20)
    assert all(0.0 <= x < 1.0 for x in u)
    assert uniforms("k", 5) == u[:5]


def test_sampling_is_deterministic_across_processes(tmp_path: Path) -> None:
    code = (
        "import asyncio, sys, pathlib\n"
        "from conftest import math_references\n"
        "from mathrl_fakes import FakeBackend\n"
        "from mathrl.backend import SampleParams\n"
        "async def go():\n"
        "    b = FakeBackend(math_references(), seed=3, checkpoint_dir=pathlib.Path(sys.argv[1]))\n"
        "    s = await b.create_sampler(await (await b.submit_save_for_sampler('x')))\n"
        f"    p = b.tokenizer.encode({PROMPT!r})\n"
        "    print(await s.sample(p, 4, SampleParams(8, 1.0, ('\\n',), seed=11)))\n"
        "asyncio.run(go())\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
            env={"PYTHONHASHSEED": str(h), "PYTHONPATH": str(Path(__file__).parent)},
        ).stdout
        for h in (1, 2, 3)
    }
    assert len(outputs) == 1


def test_checkpoints_are_real_files(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory()

    async def go() -> str:
        return await (await backend.submit_save_for_sampler("ckpt"))

    path = Path(asyncio.run(go()))
    payload = json.loads(path.read_text())
    assert payload["theta"] == initial_theta()
    with pytest.raises(ValueError, match="plain file name"):
        asyncio.run(backend.submit_save_for_sampler("../escape"))


def test_training_moves_the_target_probability_the_right_way(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = fake_backend_factory()
    tok = backend.tokenizer
    prompt = tok.encode(PROMPT)

    async def go() -> None:
        right = tok.encode(" 42\n")
        wrong = tok.encode(" 41\n")
        lp = [logprob(backend.theta, Step(t, 0), t) for t in right]  # not exact; any finite works
        datums = [build_datum(prompt, right, lp, +0.5), build_datum(prompt, wrong, lp, -0.5)]
        before = list(backend.theta)
        await (await backend.submit_train_step([d for d in datums if d], 1e-4))
        # Adam's first step moves every parameter with a gradient by about lr.
        moved = [a - b for a, b in zip(backend.theta, before, strict=True)]
        assert moved[0] == 0.0  # " " is in both completions: equal and opposite pushes
        assert moved[2] > 0  # "2" was rewarded at position 2
        assert math.isclose(moved[2], 1e-4, rel_tol=1e-3)

    asyncio.run(go())


def test_injected_failures_and_call_log(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory()
    backend.fail_next("create_sampler")

    async def go() -> None:
        path = await (await backend.submit_save_for_sampler("a"))
        with pytest.raises(TransientBackendError, match="create_sampler"):
            await backend.create_sampler(path)
        sampler = await backend.create_sampler(path)  # the retry succeeds
        prompt = backend.tokenizer.encode(PROMPT)
        params = SampleParams(8, 1.0, ("\n",), seed=5)
        first = await sampler.sample(prompt, 2, params)
        backend.fail_next("sample")
        with pytest.raises(TransientBackendError):
            await sampler.sample(prompt, 2, params)
        assert await sampler.sample(prompt, 2, params) == first  # a retry replays

    asyncio.run(go())
    assert backend.log.kinds() == [
        "save_weights_for_sampler", "create_sampler", "create_sampler", "sample", "sample", "sample"
    ]  # fmt: skip
    assert all(c.finished >= c.submitted for c in backend.log.calls)


def test_training_calls_complete_in_submission_order(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory(latency=1.0)  # one round trip = 1.0 on the virtual clock
    tok = backend.tokenizer
    prompt = tok.encode(PROMPT)

    async def go() -> str:
        datum = build_datum(prompt, tok.encode(" 42\n"), [-0.1] * 4, 1.0)
        assert datum is not None
        training = await backend.submit_train_step([datum], 1e-4)
        saving = await backend.submit_save_for_sampler("after")
        await training
        return await saving

    path, elapsed = run_virtual(go())
    # Three calls in flight together cost one round trip, not three...
    assert elapsed == 1.0
    assert [c.kind for c in backend.log.calls] == [
        "forward_backward", "optim_step", "save_weights_for_sampler"
    ]  # fmt: skip
    assert [c.finished for c in backend.log.calls] == [1.0, 1.0, 1.0]
    assert backend.log.max_in_flight == 3
    # ...and the save, submitted last, holds the trained weights.
    assert json.loads(Path(path).read_text())["theta"] == backend.theta != initial_theta()


def test_unknown_prompts_get_the_uniform_policy(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory()

    async def go() -> None:
        sampler = await backend.create_sampler(await (await backend.submit_save_for_sampler("u")))
        (c,) = await sampler.sample([1, 2, 3], 1, SampleParams(5, 1.0, (), seed=1))
        assert c.logprobs == (-math.log(VOCAB_SIZE),) * len(c.tokens)
        (g,) = await sampler.sample([1, 2, 3], 1, SampleParams(3, 0.0, (), seed=1))
        assert g.logprobs == (0.0, 0.0, 0.0)

    asyncio.run(go())


def _one_train_step(backend: FakeBackend, fail: str | None) -> list[float]:
    """Train once on a fixed datum; with `fail`, that call fails first and is retried."""
    tok = backend.tokenizer
    datum = build_datum(tok.encode(PROMPT), tok.encode(" 42\n"), [-0.2] * 4, 1.0)
    assert datum is not None

    async def go() -> None:
        if fail is not None:
            backend.fail_next(fail)
            with pytest.raises(TransientBackendError, match=fail):
                await (await backend.submit_train_step([datum], 1e-4))
        await (await backend.submit_train_step([datum], 1e-4))

    asyncio.run(go())
    return list(backend.theta)


@pytest.mark.parametrize("fail", ["forward_backward", "optim_step"])
def test_a_failed_train_step_leaves_no_trace(
    fake_backend_factory: FakeFactory, fail: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A retried step must apply its gradient once, exactly as a clean step does.
    clean = _one_train_step(fake_backend_factory(), None)
    assert _one_train_step(fake_backend_factory(), fail) == clean
    assert not [r for r in caplog.records if r.levelname == "ERROR"]  # nothing left unobserved


def test_runs_sharing_checkpoint_names_do_not_share_weights(tmp_path: Path) -> None:
    from conftest import math_references

    tok = CharTokenizer()
    datum = build_datum(tok.encode(PROMPT), tok.encode(" 42\n"), [-0.2] * 4, 1.0)
    assert datum is not None
    backends = [FakeBackend(math_references(), checkpoint_dir=tmp_path) for _ in range(2)]

    async def save_after_training(backend: FakeBackend, lr: float) -> str:
        await (await backend.submit_train_step([datum], lr))
        return await (await backend.submit_save_for_sampler("same-name"))

    async def go() -> None:
        paths = [
            await save_after_training(b, lr) for b, lr in zip(backends, (1e-4, 1e-2), strict=True)
        ]
        assert paths[0] == paths[1]  # one file, written last by the second run
        first = await backends[0].create_sampler(paths[0])
        assert first._theta == tuple(backends[0].theta) != tuple(backends[1].theta)

    asyncio.run(go())
