"""FakeBackend: the contract, plus what makes it a faithful stand-in.

The backend is the contract alone (calls recorded, misuse refused, training-side order,
faults, checkpoint files, samplers pinned to their weights), whatever policy it serves; the
policy that learns is tests/test_fake_policy.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import strategies as st_
from conftest import math_references
from mathrl.backend import (
    BackendError,
    Completion,
    Datum,
    SampleParams,
    TrainResult,
    TransientBackendError,
    check_train_step,
)
from mathrl.grpo import build_datum
from mathrl.losses import IMPORTANCE_SAMPLING
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl.testing import BrokenRule, check_backend
from mathrl_fakes import (
    ByteTokenizer,
    FakeBackend,
    FakeModel,
    Reference,
)
from mathrl_fakes.policy import (
    EOS,
    VOCAB_SIZE,
)
from virtual_clock import run_virtual

FakeFactory = Callable[..., FakeBackend]
PROMPT = MathAdapter().make_prompt(AdditionProblem(12, 30))


def test_fake_backend_passes_the_contract(fake_backend_factory: FakeFactory) -> None:
    check_backend(fake_backend_factory)


# -- the tokenizer ------------------------------------------------------------------


@given(st_.unicode_text)
def test_the_tokenizer_round_trips_every_string(text: str) -> None:
    tok = ByteTokenizer()
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode([*tok.encode(text), EOS]) == text


@example([97, EOS, 98])  # "a", EOS, "b": EOS mid-sequence
@example([0xE2, 0x80, 0x99, 0xFF, EOS])  # "\u2019", a byte no UTF-8 text holds, EOS
@given(st.lists(st_.fake_token_ids))
def test_decoding_any_tokens_gives_the_text_of_their_bytes(tokens: list[int]) -> None:
    tok = ByteTokenizer()
    text = tok.decode(tokens)  # never raises
    data = [t for t in tokens if t != EOS]
    # EOS, wherever it is, is no text.
    assert text == tok.decode(data)
    # Bytes that are UTF-8 are their text, which encodes back to them; bytes that are not
    # show as U+FFFD, where Python's decoder replaces them.
    if tok.encode(text) != data:
        assert text == bytes(data).decode("utf-8", "replace")
        assert "\ufffd" in text


def test_tokenizer_worked_examples() -> None:
    tok = ByteTokenizer()
    # "é" is two UTF-8 bytes; a curly apostrophe three; a lone surrogate three.
    assert tok.encode("aé") == [97, 0xC3, 0xA9]
    assert tok.encode("\u2019") == [0xE2, 0x80, 0x99]
    assert tok.decode(tok.encode("\ud800")) == "\ud800"
    assert tok.decode([0xFF, 97]) == "\ufffda"  # not UTF-8: replaced, never raised
    with pytest.raises(ValueError, match=r"token ids must be in 0\.\.256"):
        tok.decode([257])


@pytest.mark.slow
def test_sampling_is_deterministic_across_processes(tmp_path: Path) -> None:
    code = (
        "import asyncio, sys, pathlib\n"
        "from conftest import math_references\n"
        "from mathrl_fakes import FakeBackend, FakeModel\n"
        "from mathrl.backend import SampleParams\n"
        "async def go():\n"
        "    folder = pathlib.Path(sys.argv[1])\n"
        "    b = FakeBackend(FakeModel(math_references()), seed=3, checkpoint_dir=folder)\n"
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


# -- training, state and checkpoints -------------------------------------------------


def a_datum(backend: FakeBackend, answer: str = " 42\n", advantage: float = 1.0) -> Datum:
    tok = backend.tokenizer
    datum = build_datum(tok.encode(PROMPT), tok.encode(answer), [-0.2] * len(answer), advantage)
    assert datum is not None
    return datum


def test_checkpoints_are_real_files_and_states_hold_the_optimizer(
    fake_backend_factory: FakeFactory,
) -> None:
    backend = fake_backend_factory()

    async def go() -> tuple[str, str]:
        await (await backend.submit_train_step([a_datum(backend)], 1e-4))
        sampler = await (await backend.submit_save_for_sampler("ckpt"))
        return sampler, await (await backend.submit_save_state("ckpt-state"))

    sampler, state = (json.loads(Path(p).read_text()) for p in asyncio.run(go()))
    assert sampler["theta"] == state["theta"] == backend.theta
    assert (sampler["kind"], sampler["task"], state["kind"], state["t"]) == (
        "sampler", "addition", "state", 1
    )  # fmt: skip
    assert "m" not in sampler
    with pytest.raises(ValueError, match="plain file name"):
        asyncio.run(backend.submit_save_for_sampler("../escape"))


def test_a_restored_state_trains_on_exactly_as_before(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory()
    datum = a_datum(backend)

    async def go() -> None:
        state = await (await backend.submit_save_state("s0"))
        first = [(await (await backend.submit_train_step([datum], 1e-4))).loss for _ in range(3)]
        theta = list(backend.theta)
        await (await backend.submit_load_state(state))
        assert backend.theta == [0.0] * 8
        again = [(await (await backend.submit_train_step([datum], 1e-4))).loss for _ in range(3)]
        assert (again, backend.theta) == (first, theta)

    asyncio.run(go())


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("not json", "not JSON"),
        (json.dumps({"format": "other"}), "is not a mathrl-fake-checkpoint/2 file"),
        (json.dumps({"format": "mathrl-fake-checkpoint/2", "kind": "state"}), "is a state"),
        (json.dumps({"format": "mathrl-fake-checkpoint/2", "kind": "sampler", "theta": ["x"]}),
         "holds no usable weights"),
    ],
)  # fmt: skip
def test_a_bad_checkpoint_file_is_a_backend_error_naming_it(
    fake_backend_factory: FakeFactory, tmp_path: Path, payload: str, message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(payload)
    with pytest.raises(BackendError, match=message):
        asyncio.run(fake_backend_factory().create_sampler(str(path)))


def test_an_unwritable_checkpoint_folder_is_a_backend_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    backend = FakeBackend(FakeModel(math_references()), checkpoint_dir=blocker)
    with pytest.raises(BackendError, match=rf"cannot write the fake checkpoint {blocker}/x\.json"):
        asyncio.run(_saved(backend, "x"))


def test_a_read_only_checkpoint_folder_is_a_backend_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Root writes anywhere, so refuse the write the way a read-only folder would.
    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "write_text", refuse)
    backend = FakeBackend(FakeModel(math_references()), checkpoint_dir=tmp_path)
    with pytest.raises(BackendError, match=r"x\.json \(Permission denied\): the fake needs a"):
        asyncio.run(_saved(backend, "x"))


async def _saved(backend: FakeBackend, name: str) -> str:
    return await (await backend.submit_save_for_sampler(name))


async def _train(backend: FakeBackend, datums: list[Datum]) -> None:
    await (await backend.submit_train_step(datums, 1e-4))


def test_training_calls_complete_in_submission_order(fake_backend_factory: FakeFactory) -> None:
    backend = fake_backend_factory(latency=1.0)  # one round trip = 1.0 on the virtual clock
    datum = a_datum(backend)

    async def go() -> str:
        training = await backend.submit_train_step([datum], 1e-4)
        saving = await backend.submit_save_for_sampler("after")
        await training
        return await saving

    path, elapsed = run_virtual(go())
    # Three calls in flight together cost one round trip, not three...
    assert elapsed == 1.0
    assert backend.log.kinds() == ["forward_backward", "optim_step", "save_weights_for_sampler"]
    assert [c.finished for c in backend.log.calls] == [1.0, 1.0, 1.0]
    assert backend.log.max_in_flight == 3
    # ...and the save, submitted last, holds the trained weights.
    assert json.loads(Path(path).read_text())["theta"] == backend.theta != [0.0] * 8


# -- faults -------------------------------------------------------------------------


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
    assert [c.failed for c in backend.log.calls] == ["", "before", "", "", "before", ""]


@pytest.mark.parametrize("kind", ["forward_backward", "optim_step"])
def test_a_training_fault_may_or_may_not_have_taken_effect(
    fake_backend_factory: FakeFactory, kind: str
) -> None:
    # Retried as it is, a call that failed before taking effect trains once, as
    # a clean step does; one that failed after taking effect trains twice. A
    # client cannot tell them apart, so it must restore a state (mathrl.service.retry).
    def thetas(after_apply: bool | None) -> list[float]:
        backend = fake_backend_factory()
        datum = a_datum(backend)

        async def go() -> None:
            if after_apply is not None:
                backend.fail_next(kind, after_apply=after_apply)
                with pytest.raises(TransientBackendError, match=kind):
                    await _train(backend, [datum])
            await _train(backend, [datum])

        asyncio.run(go())
        return list(backend.theta)

    clean = thetas(None)
    if kind == "forward_backward":
        assert thetas(after_apply=False) == clean
    assert thetas(after_apply=True) != clean


@settings(max_examples=5, deadline=None)
@given(rate=st_.fault_rates, seed=st.integers(0, 1000))
def test_a_fault_rate_fails_a_seeded_share_of_calls(rate: float, seed: int) -> None:
    def failures() -> list[str]:
        backend = FakeBackend(FakeModel({"p": Reference("a")}), seed=seed, fault_rate=rate)

        async def go() -> None:
            for _ in range(400):
                with contextlib.suppress(TransientBackendError):
                    await backend.call("ping", lambda: None)

        asyncio.run(go())
        return [c.failed for c in backend.log.calls]

    first = failures()
    assert first == failures()  # the same calls fail every time
    share = first.count("before") / len(first)
    assert abs(share - rate) < 0.1  # 400 draws: the standard error is at most 0.023


def test_runs_sharing_checkpoint_names_do_not_share_weights(tmp_path: Path) -> None:
    backends = [
        FakeBackend(FakeModel(math_references()), checkpoint_dir=tmp_path) for _ in range(2)
    ]

    async def save_after_training(backend: FakeBackend, lr: float) -> str:
        await (await backend.submit_train_step([a_datum(backend)], lr))
        return await (await backend.submit_save_for_sampler("same-name"))

    async def go() -> None:
        paths = [
            await save_after_training(b, lr) for b, lr in zip(backends, (1e-4, 1e-2), strict=True)
        ]
        assert paths[0] == paths[1]  # one file, written last by the second run
        first = await backends[0].create_sampler(paths[0])
        assert first.theta == tuple(backends[0].theta) != tuple(backends[1].theta)

    asyncio.run(go())


class SkipsTheOptimizerStep(FakeBackend):
    """forward_backward without optim_step: a backend that computes the loss and learns nothing."""

    async def submit_train_step(self, datums_D: Any, learning_rate: float, loss: Any = None) -> Any:
        check_train_step(datums_D, learning_rate, VOCAB_SIZE)
        metrics, _ = self.model.forward_backward(list(datums_D), loss or IMPORTANCE_SAMPLING)

        async def done() -> TrainResult:
            return TrainResult(loss=metrics["loss:sum"], metrics=metrics)

        return asyncio.ensure_future(done())


def test_check_backend_names_the_rule_a_backend_breaks(tmp_path: Path) -> None:
    with pytest.raises(BrokenRule) as broken:
        check_backend(
            lambda: SkipsTheOptimizerStep(FakeModel(math_references()), checkpoint_dir=tmp_path)
        )
    assert broken.value.rule == "optimizer step"
    assert str(broken.value).startswith(
        "the backend breaks the contract's rule 'optimizer step': two steps on the same datums "
        "gave the loss "
    )


class Still:
    """A policy that knows nothing and never learns: it writes "A" to the token limit, each
    token at the uniform logprob, and its weights never move."""

    tokenizer = ByteTokenizer()
    LOGPROB = -math.log(VOCAB_SIZE)

    def __init__(self) -> None:
        self.theta = [0.0]
        self.pending = False

    def sample(
        self, theta: Sequence[float], prompt_T: Sequence[int], key: str, n: int, params: Any
    ) -> list[Completion]:
        return [Completion((65,) * params.max_tokens, (self.LOGPROB,) * params.max_tokens)] * n

    def sequence_logprobs(self, theta: Sequence[float], tokens_T: Sequence[int]) -> list[float]:
        return [self.LOGPROB] * (len(tokens_T) - 1)

    def forward_backward(
        self, datums_D: Sequence[Datum], loss_fn: Any = None
    ) -> tuple[dict[str, float], list[list[float]]]:
        self.pending = True
        loss = -float(sum(sum(d.advantages) for d in datums_D))
        return {"loss:sum": loss}, [[self.LOGPROB] * len(d.target_tokens) for d in datums_D]

    def optim_step(self, lr: float) -> None:
        self.pending = False

    def state(self) -> dict[str, Any]:
        return {"theta": list(self.theta)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.theta = self.parse_weights(state["theta"])

    def check_state(self, state: Mapping[str, Any]) -> None:
        self.parse_weights(state["theta"])

    def parse_weights(self, values: Any) -> list[float]:
        return [float(x) for x in values]


def test_the_backend_keeps_the_contract_whatever_policy_it_serves(tmp_path: Path) -> None:
    # Every rule before "optimizer step" is the backend's own: it keeps them serving a policy
    # that knows no task and never learns, and breaks only the rule that is the policy's.
    with pytest.raises(BrokenRule) as broken:
        check_backend(lambda: FakeBackend(Still(), checkpoint_dir=tmp_path / "a"))
    assert broken.value.rule == "optimizer step"
    # Misuse is refused before the policy is asked anything, and nothing is recorded.
    backend = FakeBackend(Still(), checkpoint_dir=tmp_path / "b")
    prompt = backend.tokenizer.encode(PROMPT)
    datum = build_datum(prompt, [65, VOCAB_SIZE], [Still.LOGPROB] * 2, 1.0)
    assert datum is not None
    with pytest.raises(ValueError, match=rf"token id {VOCAB_SIZE} is outside the vocabulary"):
        asyncio.run(backend.submit_train_step([datum], 1e-4))
    with pytest.raises(ValueError, match="plain file name"):
        asyncio.run(backend.submit_save_for_sampler("../escape"))
    assert backend.log.kinds() == []
    assert not backend.model.pending  # type: ignore[attr-defined]


class ScoresApart(FakeBackend):
    """A backend whose learner's logprobs are not its sampler's: each 0.1 lower."""

    async def submit_train_step(self, datums_D: Any, learning_rate: float, loss: Any = None) -> Any:
        result = await (await super().submit_train_step(datums_D, learning_rate))
        apart = tuple(tuple(lp - 0.1 for lp in lp_T) for lp_T in result.learner_logprobs_D or ())

        async def done() -> TrainResult:
            return replace(result, learner_logprobs_D=apart)

        return asyncio.ensure_future(done())


def test_check_backend_holds_the_learners_logprobs_to_the_samplers(tmp_path: Path) -> None:
    with pytest.raises(BrokenRule, match=r"the learner's logprobs .* are not the sampler's") as b:
        check_backend(lambda: ScoresApart(FakeModel(math_references()), checkpoint_dir=tmp_path))
    assert b.value.rule == "train"
