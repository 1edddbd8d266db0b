"""MintBackend over the fake mint surface: the contract, translation, errors, deadlines.

Nothing here touches a network: the service is `doubles.fake_mint`,
which takes and returns real `mint.types` and refuses what MinT refuses.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tinker
from hypothesis import given
from tinker import types

import strategies as st_
from cli_process import user_env
from conftest import math_references
from doubles.fake_mint import EOS_TEXT, FakeHFTokenizer, FakeMintServer
from mathrl.backend import (
    BackendError,
    BackendUnreachable,
    CredentialsRejected,
    Datum,
    SampleParams,
    TransientBackendError,
)
from mathrl.checkpoints import checkpoint_name
from mathrl.config import DEFAULT_BASE_URL, Config, TrainConfig
from mathrl.grpo import build_datum
from mathrl.loop import run_grpo_async
from mathrl.losses import Loss
from mathrl.resolved import as_task
from mathrl.service.hf_tokenizer import HFTokenizer, stop_sequences
from mathrl.service.mint_backend import (
    Endpoint,
    MintBackend,
    MintSampler,
    clipped_fraction,
    learner_logprobs,
    open_backend,
    open_sampler,
    to_mint_datum,
    translate_error,
)
from mathrl.tasks.addition import AdditionProblem, MathAdapter
from mathrl.testing import check_backend
from mathrl_fakes import RecordingBackend
from mathrl_fakes.policy import EOS

KEY = "sk-test-SECRET123"
ENDPOINT = Endpoint(KEY, "http://127.0.0.1:9")
PROMPT = MathAdapter().make_prompt(AdditionProblem(12, 30))
ServerFactory = Callable[..., FakeMintServer]
TRAINING_CALLS = ("forward_backward", "optim_step", "save_weights_for_sampler")


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[ServerFactory]:
    """FakeMintServers writing checkpoints under tmp_path; hung calls released at teardown."""
    servers: list[FakeMintServer] = []

    def make(**knobs: Any) -> FakeMintServer:
        knobs.setdefault("checkpoint_dir", tmp_path / f"ckpt{len(servers)}")
        servers.append(FakeMintServer(math_references(), **knobs))
        return servers[-1]

    yield make
    for server in servers:
        server.release.set()


@pytest.fixture(scope="module")
def refusing_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeMintServer]:
    """One FakeMintServer for the tests of what it refuses, which change nothing in it: each
    server learns 10,000 references as it is made."""
    server = FakeMintServer(math_references(), checkpoint_dir=tmp_path_factory.mktemp("mint"))
    yield server
    server.release.set()


def backend_on(server: FakeMintServer) -> MintBackend:
    training = server.connect(api_key=KEY).create_lora_training_client("fake/base", rank=4)
    return MintBackend(training, training.get_tokenizer(), secret=KEY)


def run(awaitable: Awaitable[Any]) -> Any:
    async def wait() -> Any:
        return await awaitable

    return asyncio.run(wait())


# -- the contract ------------------------------------------------------------


def test_mint_backend_passes_the_contract(make_server: ServerFactory) -> None:
    check_backend(lambda: backend_on(make_server()))


def test_open_backend_with_an_injected_service_passes_the_contract(
    make_server: ServerFactory,
) -> None:
    server = make_server()
    config = Config(base_model="fake/base", lora_rank=4)
    check_backend(lambda: run(open_backend(config, ENDPOINT, service_client=server.connect())))
    assert server.log.kinds()[:3] == ["connect", "create_lora_training_client", "get_tokenizer"]


def test_the_tokenizer_is_the_hf_one_adapted(make_server: ServerFactory) -> None:
    tok = backend_on(make_server()).tokenizer
    assert (tok.eos_token_id, tok.vocab_size, tok.decode_special(EOS)) == (EOS, 257, EOS_TEXT)
    assert tok.decode([*tok.encode("A: 42\n"), EOS]) == "A: 42\n"  # EOS is not text


def test_a_tokenizer_without_eos_is_refused(make_server: ServerFactory) -> None:
    class NoEos(FakeHFTokenizer):
        @property
        def eos_token_id(self) -> None:  # type: ignore[override]
            return None

    client = make_server().connect()
    training = client.create_lora_training_client("fake/base")
    training.get_tokenizer = NoEos  # type: ignore[method-assign]
    client.create_lora_training_client = lambda *a, **k: training  # type: ignore[method-assign]
    with pytest.raises(BackendError, match=r"^the model's tokenizer has no EOS token"):
        run(open_backend(Config(), ENDPOINT, service_client=client))


# -- sampling -----------------------------------------------------------------


def sample(server: FakeMintServer, params: SampleParams) -> list[Any]:
    backend = backend_on(server)

    async def go() -> list[Any]:
        path = await (await backend.submit_save_for_sampler("s0"))
        sampler = await backend.create_sampler(path)
        return await sampler.sample(backend.tokenizer.encode(PROMPT), 3, params)

    return asyncio.run(go())


def test_stop_strings_go_out_with_the_eos_text_and_no_stop_means_the_eos_id(
    make_server: ServerFactory,
) -> None:
    server = make_server()
    sample(server, SampleParams(8, 1.0, ("\n",), seed=1))
    sample(server, SampleParams(8, 1.0, (), seed=1))
    sample(server, SampleParams(8, 1.0, ("\n", EOS_TEXT), seed=1))
    # Strings and ids cannot mix in SamplingParams.stop, so EOS goes as text or alone as an id.
    assert [p.stop for p in server.sampling_params] == [["\n", EOS_TEXT], [EOS], ["\n", EOS_TEXT]]
    assert all(isinstance(p, types.SamplingParams) for p in server.sampling_params)
    assert [(p.max_tokens, p.temperature, p.seed) for p in server.sampling_params] == [
        (8, 1.0, 1)
    ] * 3


def test_an_eos_without_text_cannot_join_stop_strings() -> None:
    class SilentEos(FakeHFTokenizer):
        def decode(self, token_ids: Any, skip_special_tokens: bool = False) -> str:
            return super().decode(token_ids, skip_special_tokens=True)

    with pytest.raises(BackendError, match="EOS token decodes to no text"):
        stop_sequences(("\n",), HFTokenizer(SilentEos()))
    assert stop_sequences((), HFTokenizer(SilentEos())) == [EOS]


def test_sequences_without_logprobs_are_an_error_not_zeros(make_server: ServerFactory) -> None:
    with pytest.raises(BackendError, match="sequence 0 without logprobs"):
        sample(make_server(omit_logprobs=True), SampleParams(8, 1.0, ("\n",), seed=1))


def test_a_dropped_stop_shows_in_the_completions(make_server: ServerFactory) -> None:
    # The seed's `stop_token_ids=` was dropped without a word; the fake can do the same.
    params = SampleParams(8, 1.0, ("\n",), seed=3)
    kept = sample(make_server(), params)
    dropped = sample(make_server(drop_stop=True), params)
    decode = FakeHFTokenizer().decode  # EOS shows as its text
    # The same draws either way. Seed 3's third completion writes "\n": with the stop kept it
    # ends there; dropped, it goes on past it (to EOS). The other two never write "\n".
    assert [decode(list(c.tokens)).count("\n") for c in kept] == [0, 0, 1]
    assert decode(list(kept[2].tokens)) == " 42\n"
    assert decode(list(dropped[2].tokens)) == " 42\n" + EOS_TEXT
    assert dropped[2].tokens[: len(kept[2].tokens)] == kept[2].tokens
    assert dropped[:2] == kept[:2]


class OddSamplingClient:
    """Returns whatever response it was built with."""

    def __init__(
        self, response: types.SampleResponse, logprobs: list[float | None] | None = None
    ) -> None:
        self.response = response
        self.prompt_logprobs = logprobs or []

    async def sample_async(self, prompt: Any, num_samples: int, sampling_params: Any) -> Any:
        return self.response

    def get_tokenizer(self) -> FakeHFTokenizer:
        return FakeHFTokenizer()

    async def compute_logprobs_async(self, prompt: types.ModelInput) -> list[float | None]:
        return self.prompt_logprobs


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ([None, -0.5], "asked for 3 tokens' logprobs, MinT returned 2 with 0 missing"),
        ([None, None, -0.5], "returned 3 with 1 missing after the first"),
    ],
)
def test_logprobs_the_service_does_not_give_are_an_error(
    answer: list[float | None], message: str
) -> None:
    client = OddSamplingClient(types.SampleResponse(sequences=[]), answer)
    sampler = MintSampler(client, HFTokenizer(FakeHFTokenizer()))
    with pytest.raises(BackendError, match=message):
        asyncio.run(sampler.logprobs([1, 2, 3]))
    good = OddSamplingClient(types.SampleResponse(sequences=[]), [None, -0.5, -0.25])
    assert asyncio.run(MintSampler(good, HFTokenizer(FakeHFTokenizer())).logprobs([1, 2, 3])) == [
        -0.5,
        -0.25,
    ]


@pytest.mark.parametrize(
    ("sequences", "message"),
    [
        ([], "asked for 1 sequences, MinT returned 0"),
        (
            [types.SampledSequence("stop", _tokens_list=[1, 2], _logprobs_list=[-0.1])],
            "sequence 0 has 2 tokens but 1 logprobs",
        ),
    ],
)
def test_malformed_sample_responses_are_errors(sequences: list[Any], message: str) -> None:
    client = OddSamplingClient(types.SampleResponse(sequences=sequences))
    sampler = MintSampler(client, HFTokenizer(FakeHFTokenizer()))
    with pytest.raises(BackendError, match=message):
        asyncio.run(sampler.sample([1, 2], 1, SampleParams(4, 1.0)))


# -- training -----------------------------------------------------------------


def test_the_loop_pipelines_training_and_keeps_every_sample_in_flight(
    make_server: ServerFactory,
) -> None:
    server = make_server(latency=0.01)
    config = TrainConfig(steps=2, batch=8, group=4)
    result = asyncio.run(run_grpo_async(backend_on(server), MathAdapter(), config))
    trained = sum(1 for m in result.steps if m.datums)
    assert trained == config.steps  # seed 0: no step had only constant groups
    training = [c for c in server.log.calls if c.kind in TRAINING_CALLS]
    # The step-0 save, then per trained step forward_backward, optim_step, save.
    assert [c.kind for c in training] == ["save_weights_for_sampler", *TRAINING_CALLS * trained]
    # Submitted back to back: each optim_step (and save) before its forward_backward finished.
    for forward, step, save in zip(training[1::3], training[2::3], training[3::3], strict=True):
        assert step.submitted < forward.finished
        assert save.submitted < forward.finished
    # Every prompt's sample call of a step was in flight at once.
    assert server.peak_in_flight("sample") == config.batch
    assert server.log.count("sample") == config.batch * config.steps


def test_off_policy_over_mint_samples_one_step_behind(make_server: ServerFactory) -> None:
    # The same schedule as on the fake: step k + 1 samples from the weights step k
    # itself sampled from, while step k trains.
    config = TrainConfig(steps=4, batch=4, group=4, seed=4, max_steps_off_policy=1)
    recorder = RecordingBackend(backend_on(make_server()))
    result = asyncio.run(run_grpo_async(recorder, MathAdapter(), config))
    assert all(m.datums for m in result.steps)
    paths_by_step = [
        {call.path for call in recorder.samples[i : i + config.batch]}
        for i in range(0, len(recorder.samples), config.batch)
    ]
    # Steps 1 and 2 sample the initial weights, step k >= 3 those after step k - 2.
    task = as_task(MathAdapter())
    expected = [
        {f"tinker://fake-run/sampler_weights/{checkpoint_name(task, config, max(step - 2, 0))}"}
        for step in range(1, config.steps + 1)
    ]
    assert paths_by_step == expected


def datums(backend: MintBackend) -> list[Datum]:
    """One datum: the prompt, then ' 42\n' sampled at logprob -0.2 per token, advantage 1."""
    completion = backend.tokenizer.encode(" 42\n")
    datum = build_datum(backend.tokenizer.encode(PROMPT), completion, [-0.2] * 4, 1.0)
    assert datum is not None
    return [datum]


def test_train_step_sends_mint_datums_and_reports_the_loss(make_server: ServerFactory) -> None:
    server = make_server()
    backend = backend_on(server)

    async def go() -> Any:
        return await (await backend.submit_train_step(datums(backend), 1e-4))

    result = asyncio.run(go())
    assert result.loss == pytest.approx(result.metrics["loss:sum"])
    assert result.loss < 0  # positive advantages, ratio ~ exp(logp - (-0.2)) > 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: Datum((), (), (), (), ()), "datum 0: inputs must not be empty"),
        (
            lambda d: replace(d, model_input=(*d.model_input[:-1], -1)),
            "token id -1 is outside the vocabulary",
        ),
        (
            lambda d: replace(d, mask=(True,) * len(d.mask[:-1])),
            r"mask=\d+\)$",
        ),
    ],
)
def test_train_step_refuses_before_calling_mint(
    make_server: ServerFactory, change: Callable[[Datum], Datum], message: str
) -> None:
    server = make_server()
    backend = backend_on(server)
    with pytest.raises(ValueError, match=message):
        asyncio.run(backend.submit_train_step([change(datums(backend)[0])], 1e-4))
    assert server.log.count("forward_backward") == 0


class ShortTokenizer(FakeHFTokenizer):
    """The double's tokenizer, listing only ids 0..127 (ASCII): the model it serves samples
    ids past its list, as Qwen3 may (151,936 embedding rows, 151,669 tokenizer entries)."""

    def __len__(self) -> int:
        return 128


def test_the_vocabulary_bound_is_the_tokenizers_ids_and_those_the_model_sampled(
    make_server: ServerFactory,
) -> None:
    server = make_server()
    training = server.connect(api_key=KEY).create_lora_training_client("fake/base", rank=4)
    backend = MintBackend(training, ShortTokenizer(), secret=KEY)
    prompt_T = backend.tokenizer.encode(PROMPT)
    params = SampleParams(max_tokens=8, temperature=50.0, seed=3)  # near uniform: ids >= 128

    async def go() -> tuple[set[int], int]:
        sampler = await backend.create_sampler(await (await backend.submit_save_for_sampler("a")))
        completions = await sampler.sample(prompt_T, 4, params)
        past = {t for c in completions for t in c.tokens if t >= 128}
        sampled = [
            d
            for c in completions
            if (d := build_datum(prompt_T, c.tokens, c.logprobs, 1.0)) is not None
        ]
        await (await backend.submit_train_step(sampled, 1e-4))  # the model's own ids: sent
        d = sampled[0]
        never = min(set(range(128, 257)) - past)  # past the tokenizer, and never sampled
        unsampled = replace(d, target_tokens=(*d.target_tokens[:-1], never))
        with pytest.raises(ValueError, match=rf"^datum 0: token id {never} is outside the voc"):
            await backend.submit_train_step([unsampled], 1e-4)
        with pytest.raises(ValueError, match=r"token id 257 is outside the vocabulary \(0\.\.127,"):
            await backend.submit_train_step(
                [replace(d, model_input=(257, *d.model_input[1:]))], 1e-4
            )
        return past, never

    past, _ = asyncio.run(go())
    assert past  # the completions held ids the tokenizer does not list
    assert server.log.count("forward_backward") == 1  # the refused ones were never sent


class NoLossTraining:
    """A training client whose forward_backward reports no loss:sum."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def forward_backward_async(
        self, data: Any, loss_fn: Any, loss_fn_config: Any = None
    ) -> Awaitable[Any]:
        future = await self.inner.forward_backward_async(data, loss_fn, loss_fn_config)

        async def without_loss() -> types.ForwardBackwardOutput:
            output = await future
            return types.ForwardBackwardOutput("ArrayRecord", output.loss_fn_outputs)

        return without_loss()


def test_a_missing_loss_metric_is_an_error(make_server: ServerFactory) -> None:
    training = make_server().connect().create_lora_training_client("fake/base")
    backend = MintBackend(NoLossTraining(training), training.get_tokenizer())

    async def go() -> Any:
        return await (await backend.submit_train_step(datums(backend), 1e-4))

    with pytest.raises(BackendError, match="reported no loss:sum"):
        asyncio.run(go())


def test_service_refusals_surface_as_backend_errors(make_server: ServerFactory) -> None:
    server = make_server()
    training = server.connect(api_key=KEY).create_lora_training_client("fake/base")
    backend = MintBackend(training, training.get_tokenizer(), secret=KEY)

    async def go() -> None:
        # optim_step with no forward_backward before it: the fake service refuses it.
        refused = training.optim_step(types.AdamParams(learning_rate=1e-4))
        with pytest.raises(tinker.RequestFailedError, match="without a preceding forward_backward"):
            refused.result()
        with pytest.raises(BackendError, match="calling save_weights_for_sampler on MinT failed: "):
            await (await backend.submit_save_for_sampler("not/plain"))

    asyncio.run(go())


# -- errors -------------------------------------------------------------------


def status_error(cls: type[tinker.APIStatusError], status: int) -> tinker.APIStatusError:
    response = httpx.Response(status, request=httpx.Request("POST", "http://x"))
    return cls(f"Error code: {status}\n key {KEY}", response=response, body=None)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (status_error(tinker.AuthenticationError, 401), CredentialsRejected),
        (status_error(tinker.PermissionDeniedError, 403), CredentialsRejected),
        (status_error(tinker.BadRequestError, 400), BackendError),
        (status_error(tinker.RateLimitError, 429), TransientBackendError),
        (status_error(tinker.InternalServerError, 503), TransientBackendError),
        (
            tinker.APIConnectionError(request=httpx.Request("GET", "http://x")),
            TransientBackendError,
        ),
        (
            tinker.RequestFailedError(KEY, "r", types.RequestErrorCategory.Server),
            TransientBackendError,
        ),
        (tinker.RequestFailedError(KEY, "r", types.RequestErrorCategory.User), BackendError),
        (tinker.TinkerError(""), BackendError),
    ],
)
def test_sdk_errors_become_one_line_backend_errors_without_the_key(
    error: tinker.TinkerError, kind: type[BackendError]
) -> None:
    translated = translate_error(error, "calling sample", KEY)
    assert type(translated) is kind
    assert KEY not in str(translated)
    assert "\n" not in str(translated)
    assert "calling sample" in str(translated)


# -- connecting ---------------------------------------------------------------


def test_the_default_base_url_is_mints() -> None:
    import mint

    assert DEFAULT_BASE_URL == mint.mint._MINT_DEFAULT_BASE_URL


@pytest.mark.parametrize(
    ("hang_at", "opener", "phase"),
    # Every phase has its deadline; two of them here, every one in the slow suite.
    [
        ("connect", "backend", "could not reach MinT at http://127.0.0.1:9 within 0.2 s"),
        pytest.param(
            "create_lora_training_client",
            "backend",
            "did not finish creating a LoRA training",
            marks=pytest.mark.slow,
        ),
        ("get_tokenizer", "backend", "did not finish loading the tokenizer within 0.3 s"),
        pytest.param(
            "create_sampling_client",
            "sampler",
            "did not finish opening a sampler for ckpt",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "connect",
            "sampler",
            "could not reach MinT at http://127.0.0.1:9 within 0.2 s",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_service_that_never_answers_is_unreachable_by_the_deadline(
    make_server: ServerFactory, hang_at: str, opener: str, phase: str
) -> None:
    server = make_server(hang_at={hang_at})
    # Reaching the service and finishing set-up have separate deadlines.
    config = Config(connect_timeout=0.2, setup_timeout=0.3)

    async def go() -> BackendError:
        start = time.monotonic()
        opening = (
            open_backend(config, ENDPOINT, service_factory=server.connect, probe=None)
            if opener == "backend"
            else open_sampler(config, ENDPOINT, "ckpt", service_factory=server.connect, probe=None)
        )
        with pytest.raises(BackendUnreachable) as excinfo:
            await opening
        assert time.monotonic() - start < 5  # generous: the deadline is 0.2 s
        # The abandoned setup may finish later; its result must go nowhere, quietly.
        server.release.set()
        while any(t.name == "mathrl-mint-setup" for t in threading.enumerate()):
            await asyncio.sleep(0.01)
        return excinfo.value

    error = asyncio.run(go())
    message = str(error)
    assert phase in message
    assert "http://127.0.0.1:9" in message
    assert "--" not in message  # the library names settings; the command line spells them
    connect = hang_at == "connect"
    assert error.settings == (("base_url", "connect_timeout") if connect else ("setup_timeout",))


def test_the_deadline_message_names_the_default_url(make_server: ServerFactory) -> None:
    server = make_server(hang_at={"connect"})
    with pytest.raises(BackendUnreachable, match=f"could not reach MinT at {DEFAULT_BASE_URL}"):
        asyncio.run(
            open_backend(
                Config(connect_timeout=0.1),
                Endpoint(KEY),  # and no base_url: the default
                service_factory=server.connect,
                probe=None,
            )
        )


@pytest.mark.parametrize("opener", ["backend", "sampler"])
def test_a_rejected_key_is_credentials_rejected_without_the_key(
    make_server: ServerFactory, opener: str
) -> None:
    server = make_server(reject_key=True)
    opening = (
        open_backend(Config(), ENDPOINT, service_factory=server.connect, probe=None)
        if opener == "backend"
        else open_sampler(Config(), ENDPOINT, "ckpt", service_factory=server.connect, probe=None)
    )
    with pytest.raises(CredentialsRejected) as excinfo:
        run(opening)
    message = str(excinfo.value)
    assert message.startswith("MinT rejected the API key while ")
    assert excinfo.value.settings == ("api_key",)  # the command line names its variable
    assert KEY not in message
    assert "SECRET123" not in message


def test_a_rejection_after_the_deadline_goes_nowhere(make_server: ServerFactory) -> None:
    server = make_server(reject_key=True, hang_at={"connect"})

    async def go() -> None:
        with pytest.raises(BackendUnreachable):
            await open_backend(
                Config(connect_timeout=0.1), ENDPOINT, service_factory=server.connect, probe=None
            )
        server.release.set()
        while any(t.name == "mathrl-mint-setup" for t in threading.enumerate()):
            await asyncio.sleep(0.01)

    asyncio.run(go())


def test_open_sampler_samples_saved_weights(make_server: ServerFactory) -> None:
    server = make_server()
    training = server.connect().create_lora_training_client("fake/base")
    path = training.save_weights_for_sampler("w").result().path
    tokenizer, sampler = run(
        open_sampler(Config(), ENDPOINT, path, service_client=server.connect())
    )
    (completion,) = asyncio.run(
        sampler.sample(tokenizer.encode(PROMPT), 1, SampleParams(8, 0.0, ("\n",)))
    )
    assert tokenizer.decode(completion.tokens) == " 42\n"
    with pytest.raises(BackendError, match="opening a sampler for nowhere failed: "):
        run(open_sampler(Config(), ENDPOINT, "nowhere", service_client=server.connect()))


def test_other_setup_failures_are_one_line_backend_errors(make_server: ServerFactory) -> None:
    server = make_server()
    client = server.connect()

    def offline() -> Any:
        raise OSError(f"cannot reach huggingface.co\nwith {KEY}")

    training = client.create_lora_training_client("m")
    training.get_tokenizer = offline  # type: ignore[method-assign]
    client.create_lora_training_client = lambda *a, **k: training  # type: ignore[method-assign]
    with pytest.raises(BackendError) as excinfo:
        run(open_backend(Config(), ENDPOINT, service_client=client))
    assert str(excinfo.value) == (
        "loading the tokenizer failed: OSError: cannot reach huggingface.co with ***"
    )


def test_no_key_is_refused_before_any_connection(make_server: ServerFactory) -> None:
    server = make_server()
    with pytest.raises(BackendError, match=r"^MinT needs an API key \(got none\)$") as refused:
        run(open_backend(Config(), Endpoint(), service_factory=server.connect, probe=None))
    assert refused.value.settings == ("api_key",)
    assert server.log.calls == []


# -- the fake service refuses what MinT refuses ------------------------------


def mint_datum(**inputs: types.TensorData) -> types.Datum:
    good = {
        "target_tokens": types.TensorData([2, 3], "int64"),
        "logprobs": types.TensorData([0.0, -0.5], "float32"),
        "advantages": types.TensorData([0.0, 1.0], "float32"),
    }
    return types.Datum(types.ModelInput.from_ints([1, 2]), {**good, **inputs})


@pytest.mark.parametrize(
    ("data", "loss_fn", "message"),
    [
        ([mint_datum()], "cross_entropy", "only importance_sampling"),
        ([mint_datum()], "mse", "unknown loss_fn 'mse'"),
        ([], "importance_sampling", "at least one datum"),
        (
            [mint_datum(weights=types.TensorData([1.0, 1.0], "float32"))],
            "importance_sampling",
            "exactly",
        ),
        (
            [mint_datum(target_tokens=types.TensorData([2.0, 3.0], "float32"))],
            "importance_sampling",
            "target_tokens must be int64",
        ),
        (
            [mint_datum(logprobs=types.TensorData([-0.5], "float32"))],
            "importance_sampling",
            "logprobs has 1 entries, model_input has 2",
        ),
        (
            [mint_datum(target_tokens=types.TensorData([2, 999], "int64"))],
            "importance_sampling",
            "outside 0..256",
        ),
        (["not a datum"], "importance_sampling", "must be a types.Datum"),
    ],
)
def test_the_fake_refuses_bad_forward_backward(
    refusing_server: FakeMintServer, data: list[Any], loss_fn: str, message: str
) -> None:
    training = refusing_server.connect().create_lora_training_client("fake/base")
    with pytest.raises(tinker.RequestFailedError, match=message):
        training.forward_backward(data, loss_fn).result()


def test_the_fake_refuses_bad_optim_steps_and_names(make_server: ServerFactory) -> None:
    training = make_server().connect().create_lora_training_client("fake/base")
    with pytest.raises(tinker.RequestFailedError, match="without a preceding forward_backward"):
        training.optim_step(types.AdamParams(learning_rate=1e-4)).result()
    training.forward_backward([mint_datum()], "importance_sampling").result()
    with pytest.raises(tinker.RequestFailedError, match=r"takes types\.AdamParams"):
        training.optim_step({"learning_rate": 1e-4}).result()  # type: ignore[arg-type]
    with pytest.raises(tinker.RequestFailedError, match="learning_rate must be finite and > 0"):
        training.optim_step(types.AdamParams(learning_rate=0.0)).result()
    assert training.optim_step(types.AdamParams(learning_rate=1e-4)).result().metrics == {}
    with pytest.raises(tinker.RequestFailedError, match="plain file name"):
        training.save_weights_for_sampler("../up").result()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_tokens": 4}, "must be a types.SamplingParams"),
        (types.SamplingParams(max_tokens=0), "max_tokens must be an integer >= 1"),
        (types.SamplingParams(max_tokens=None), "max_tokens must be an integer >= 1"),
        (types.SamplingParams(max_tokens=4, temperature=-1), "temperature must be finite"),
        # SamplingParams itself refuses a mix; model_construct skips its validation.
        (types.SamplingParams.model_construct(max_tokens=4, stop=["\n", 10]), "not a mix"),
    ],
)
def test_the_fake_refuses_bad_sampling_params(
    refusing_server: FakeMintServer, params: Any, message: str
) -> None:
    server = refusing_server
    training = server.connect().create_lora_training_client("fake/base")
    path = training.save_weights_for_sampler("w").result().path
    client = server.connect().create_sampling_client(model_path=path)
    with pytest.raises(tinker.RequestFailedError, match=message):
        asyncio.run(client.sample_async(types.ModelInput.from_ints([1]), 1, params))


def test_the_fake_takes_stop_ids_and_single_strings(make_server: ServerFactory) -> None:
    server = make_server()
    training = server.connect().create_lora_training_client("fake/base")
    client = asyncio.run(
        training.create_sampling_client_async(training.save_weights_for_sampler("w").result().path)
    )
    prompt = types.ModelInput.from_ints(FakeHFTokenizer().encode(PROMPT))
    for stop in ("\n", [ord("\n"), EOS]):
        params = types.SamplingParams(max_tokens=8, temperature=0.0, stop=stop)
        (seq,) = asyncio.run(client.sample_async(prompt, 1, params)).sequences
        assert FakeHFTokenizer().decode(seq.tokens) == " 42\n"
        assert seq.stop_reason == "stop"
    with pytest.raises(ValueError, match="hang_at must name calls"):
        make_server(hang_at={"sample"})


# -- what imports mint --------------------------------------------------------


def test_the_fake_backend_never_imports_mint(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from mathrl.cli.commands import main\n"
        "assert main(['--backend', 'fake', '--steps', '1']) == 0\n"
        "assert main(['sample', '--backend', 'fake', '--problems', '2',\n"
        "             '--model-path', 'x']) == 2\n"
        "loaded = sorted(m for m in ('mint', 'tinker') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
        "import mathrl, mathrl_fakes\n"
        "assert 'mint' not in sys.modules and 'tinker' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=user_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@given(st_.stop_strings)
def test_stop_sequences_keep_every_stop_string_and_add_the_eos(stop: tuple[str, ...]) -> None:
    tokenizer = HFTokenizer(FakeHFTokenizer())
    sent = stop_sequences(stop, tokenizer)
    if not stop:
        assert sent == [EOS]  # token ids: SamplingParams cannot mix them with strings
        return
    assert sent == list(dict.fromkeys([*stop, EOS_TEXT]))


@given(st_.prompts_T, st_.completions(), st_.rewards)
def test_mint_datums_carry_the_same_numbers(
    prompt_T: list[int], completion: tuple[list[int], list[float]], advantage: float
) -> None:
    datum = build_datum(prompt_T, *completion, advantage)
    if datum is None:
        return
    sent = to_mint_datum(datum)
    assert sent.model_input.to_ints() == list(datum.model_input)
    inputs = sent.loss_fn_inputs
    assert set(inputs) == {"target_tokens", "logprobs", "advantages"}
    assert inputs["target_tokens"].dtype == "int64"
    assert inputs["target_tokens"].tolist() == list(datum.target_tokens)
    for name in ("logprobs", "advantages"):
        assert inputs[name].dtype == "float32"
        assert inputs[name].shape == [len(datum.target_tokens)]
        # The wire format is float32: equal after rounding to it.
        assert inputs[name].tolist() == np.asarray(getattr(datum, name), np.float32).tolist()


def test_set_up_says_what_it_waits_on_and_for_how_long(make_server: ServerFactory) -> None:
    server = make_server()
    heard: list[str] = []
    config = Config(connect_timeout=7, setup_timeout=90, base_model="Qwen/Qwen3-0.6B")
    run(
        open_backend(
            config, ENDPOINT, service_factory=server.connect, probe=None, waiting=heard.append
        )
    )
    assert heard == [
        "connecting to MinT at http://127.0.0.1:9 (up to 7 s)",
        "creating a LoRA training client for Qwen/Qwen3-0.6B (up to 90 s)",
        "loading the tokenizer (up to 90 s)",
    ]


def test_the_clip_fraction_comes_from_the_learners_logprobs_or_not_at_all() -> None:
    # Two completion tokens, sampled at logprob log 0.5, advantages +1 and -1. The learner now
    # gives them log 0.75: r = 1.5 for both. PPO clips the first (r > 1.2 and A > 0) only.
    datum = build_datum([1, 2], [3, 4], [math.log(0.5)] * 2, 1.0)
    assert datum is not None
    datum = replace(datum, advantages=(0.0, 1.0, -1.0))
    learner = [-1.0, math.log(0.75), math.log(0.75)]
    output = types.ForwardBackwardOutput(
        "ArrayRecord", [{"logprobs": types.TensorData(learner, "float32")}], {}
    )
    learner_D = learner_logprobs([datum], output)
    assert learner_D is not None
    assert list(learner_D[0]) == pytest.approx(learner)  # to float32's rounding
    assert clipped_fraction(Loss("ppo"), [datum], learner_D) == 0.5
    assert learner_logprobs([datum, datum], output) is None  # one output short
    assert clipped_fraction(Loss("ppo"), [datum], None) is None
    empty = types.ForwardBackwardOutput("ArrayRecord", [{}], {})
    assert learner_logprobs([datum], empty) is None  # no logprobs returned
    short = types.ForwardBackwardOutput(
        "ArrayRecord", [{"logprobs": types.TensorData(learner[:2], "float32")}], {}
    )
    assert learner_logprobs([datum], short) is None  # not one per target token
