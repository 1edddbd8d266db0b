"""A fake of the mint client surface, for testing `mathrl.service.mint_backend` offline.

For: driving MintBackend the way the SDK is driven. The fake clients take and
return real `mint.types` objects (tinker 0.22.0, which mint re-exports), and
the fake service refuses what MinT refuses: a request it cannot accept fails
with `tinker.RequestFailedError` (category "user") when its result is
awaited, as a real request that fails server-side does. Not for: HTTP, auth
headers, retries, chunking or telemetry; nor a second model. The model,
its checkpoints, its latency and training-order model and its call log are
FakeBackend's (`FakeMintServer.engine`, driven through its public methods);
this module only translates types.

Differences from the SDK worth knowing: the sampler always stops after EOS
(as the fake policy does), so a missing EOS stop shows only in
`FakeMintServer.sampling_params`; sync training calls run at once, without
latency or ordering against async calls in flight; `AdamParams` other than
the contract's (`mathrl.backend.ADAM`, FakeBackend's Adam) are refused.

Only the tests use it, so it lives with them, not in the shipped fakes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import math
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, get_args

import httpx
import tinker
from tinker import types

from mathrl.backend import ADAM, BackendError, Datum, SampleParams
from mathrl.losses import LOSSES, Loss
from mathrl_fakes import (
    ByteTokenizer,
    CallLog,
    CallRecord,
    FakeBackend,
    FakeModel,
    FakeSampler,
    PromptKey,
    Reference,
)
from mathrl_fakes.policy import EOS, VOCAB_SIZE

T = TypeVar("T")
EOS_TEXT = "<|endoftext|>"
IMPORTANCE_SAMPLING_INPUTS = {
    "target_tokens": "int64",
    "logprobs": "float32",
    "advantages": "float32",
}
HANG_POINTS = ("connect", "create_lora_training_client", "create_sampling_client", "get_tokenizer")


class FakeHFTokenizer:
    """The fake's byte tokenizer with a Hugging Face face: EOS decodes to `EOS_TEXT`."""

    eos_token = EOS_TEXT

    def __init__(self) -> None:
        self._bytes = ByteTokenizer()

    @property
    def eos_token_id(self) -> int:
        return EOS

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._bytes.encode(text)  # no BOS, like Qwen's tokenizer

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        eos = "" if skip_special_tokens else EOS_TEXT
        runs: list[list[int]] = [[]]
        for t in token_ids:
            if t == EOS:
                runs.append([])
            else:
                runs[-1].append(t)
        return eos.join(self._bytes.decode(run) for run in runs)

    def __len__(self) -> int:
        return VOCAB_SIZE

    chat_template: str | None = "the fake backend's: role, newline, content, EOS per turn"
    """None: a base model's tokenizer, which has none (see FakeMintServer's `chat_template`)."""

    @property
    def all_special_ids(self) -> list[int]:
        return [EOS]

    def apply_chat_template(self, conversation: list[dict[str, str]], **kwargs: Any) -> Any:
        """As the fake's `ByteTokenizer.render_chat`, with transformers' keyword arguments."""
        opening = kwargs.pop("add_generation_prompt", False)
        kwargs.pop("tokenize", None)
        tokens = self._bytes.render_chat(conversation, kwargs)
        return tokens if opening else tokens[: -len(self._bytes.encode("assistant\n"))]


class FakeAPIFuture(tinker.APIFuture[T]):
    """An `APIFuture` over a concurrent future: awaitable, or `.result()` once done."""

    def __init__(self, future: concurrent.futures.Future[T]) -> None:
        self._future = future

    async def result_async(self, timeout: float | None = None) -> T:
        async with asyncio.timeout(timeout):
            # Shielded: a caller giving up waiting does not cancel the call.
            return await asyncio.shield(asyncio.wrap_future(self._future))

    def result(self, timeout: float | None = None) -> T:
        return self._future.result(timeout)


def refused(message: str) -> tinker.RequestFailedError:
    """The error the service reports for a request it will not run."""
    return tinker.RequestFailedError(
        f"Request failed: {message}", request_id="fake", category=types.RequestErrorCategory.User
    )


class FakeMintServer:
    """The service's side: one model, its checkpoints, the call log and the knobs.

    Args:
        references: prompt text -> Reference, as for FakeBackend.
        seed, checkpoint_dir: as for FakeBackend.
        latency: seconds per async call (sample, create_sampling_client and
            the training calls), as FakeBackend's round trip.
        omit_logprobs: return sampled sequences without logprobs.
        drop_stop: ignore `SamplingParams.stop`, as the SDK silently ignores
            unknown keywords such as `stop_token_ids`.
        reject_key: the constructor raises `tinker.AuthenticationError`.
        hang_at: calls that block (in a thread, before doing anything) until
            `release` is set: any of HANG_POINTS; "connect" is the constructor.
        chat_template: False: the tokenizer has no chat template, as a base model's.
    """

    def __init__(
        self,
        references: Mapping[PromptKey, Reference],
        *,
        seed: int = 0,
        checkpoint_dir: Path | None = None,
        latency: float = 0.0,
        omit_logprobs: bool = False,
        drop_stop: bool = False,
        reject_key: bool = False,
        hang_at: Collection[str] = (),
        chat_template: bool = True,
    ) -> None:
        unknown = set(hang_at) - set(HANG_POINTS)
        if unknown:
            raise ValueError(f"hang_at must name calls in {HANG_POINTS} (got {sorted(unknown)})")
        # A service samples and trains on any prompt: unknown ones get the uniform policy.
        self.model = FakeModel(references, "uniform")
        self.engine = FakeBackend(
            self.model,
            task_name="addition",
            seed=seed,
            latency=latency,
            checkpoint_dir=checkpoint_dir,
        )
        self.omit_logprobs = omit_logprobs
        self.drop_stop = drop_stop
        self.reject_key = reject_key
        self.hang_at = set(hang_at)
        self.release = threading.Event()
        self.sampling_params: list[types.SamplingParams] = []
        """Every SamplingParams received, in order."""
        self.logprob_requests: list[int] = []
        """The length of every compute_logprobs prompt, in order."""
        self.loss_fn_configs: list[tuple[str, dict[str, float] | None]] = []
        """Every forward_backward's loss_fn and loss_fn_config, in order."""
        self.tokenizer = FakeHFTokenizer()
        if not chat_template:
            self.tokenizer.chat_template = None
        self.states: set[str] = set()
        """Names save_state has used."""
        self.files: dict[tuple[str, str], str] = {}
        """(kind, tinker:// path) -> the engine's checkpoint file."""

    @property
    def log(self) -> CallLog:
        """Every call received (kind, submit and finish times), and the most in flight."""
        return self.engine.log

    def connect(self, api_key: str | None = None, base_url: str | None = None) -> FakeServiceClient:
        """A service client: a drop-in for `mint.ServiceClient(api_key=..., base_url=...)`."""
        return FakeServiceClient(self, api_key=api_key, base_url=base_url)

    def peak_in_flight(self, kind: str) -> int:
        """The most calls of `kind` that were in flight at one time."""
        records = [r for r in self.log.calls if r.kind == kind]
        return max(
            (sum(1 for o in records if o.submitted <= r.submitted < o.finished) for r in records),
            default=0,
        )

    # -- the service's side -------------------------------------------------

    def enter(self, kind: str) -> None:
        """Record a blocking call; hang first if told to."""
        if kind in self.hang_at:
            self.release.wait()
        now = time.monotonic()
        self.log.calls.append(CallRecord(kind, now, now))

    def file_of(self, path: str, kind: str) -> str:
        """The engine's file behind a `tinker://` path this server handed out."""
        file = self.files.get((kind, path))
        if file is None:
            raise refused(f"no {kind} checkpoint at {path!r}")
        return file

    def load(self, path: str) -> FakeSampler:
        try:
            return self.engine.open_sampler(self.file_of(path, "sampler"))
        except BackendError as exc:
            raise refused(str(exc)) from None

    def base_sampler(self, base_model: str) -> FakeSampler:
        """A sampler for the base model itself: the fake model's weights before any training."""
        if not base_model:
            raise refused(f"need a base model (got {base_model!r})")
        untrained = [0.0] * len(self.engine.theta)  # FakeModel starts at zero
        return FakeSampler(self.engine, f"base/{base_model}", untrained)

    async def open_sampler(self, path: str) -> FakeSamplingClient:
        """create_sampling_client_async: one round trip, then a client pinned to `path`."""
        sampler = await self.engine.call("create_sampling_client", lambda: self.load(path))
        return FakeSamplingClient(self, sampler)

    def check_sampling(
        self, prompt: types.ModelInput, num_samples: int, params: types.SamplingParams
    ) -> SampleParams:
        """Validate a sample request; return it as the engine's SampleParams."""
        if not isinstance(prompt, types.ModelInput) or prompt.length == 0:
            raise refused(f"prompt must be a non-empty ModelInput (got {prompt!r})")
        if not isinstance(params, types.SamplingParams):
            raise refused(f"sampling_params must be a types.SamplingParams (got {params!r})")
        if num_samples < 1:
            raise refused(f"num_samples must be >= 1 (got {num_samples})")
        if params.max_tokens is None or params.max_tokens < 1:
            raise refused(f"max_tokens must be an integer >= 1 (got {params.max_tokens})")
        if not (math.isfinite(params.temperature) and params.temperature >= 0):
            raise refused(f"temperature must be finite and >= 0 (got {params.temperature})")
        self.sampling_params.append(params)
        stop = self._stop_strings(params.stop)
        return SampleParams(params.max_tokens, params.temperature, stop, params.seed)

    def _stop_strings(self, stop: str | Sequence[str] | Sequence[int] | None) -> tuple[str, ...]:
        items = [stop] if isinstance(stop, str) else list(stop or ())
        strings = [s for s in items if isinstance(s, str)]
        ids = [s for s in items if isinstance(s, int)]
        if strings and ids:
            raise refused(f"stop must be strings or token ids, not a mix (got {stop!r})")
        # Char tokenizer: a stop id is a one-character stop string (EOS always stops).
        strings += [self.tokenizer.decode([i]) for i in ids if i != EOS]
        return () if self.drop_stop else tuple(strings)

    def sequence(
        self, tokens: Sequence[int], logprobs: Sequence[float], stop: Sequence[str]
    ) -> types.SampledSequence:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        stopped = tokens[-1] == EOS or any(s and text.endswith(s) for s in stop)
        return types.SampledSequence(
            stop_reason="stop" if stopped else "length",
            _tokens_list=list(tokens),
            _logprobs_list=None if self.omit_logprobs else list(logprobs),
        )

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, float] | None = None,
    ) -> types.ForwardBackwardOutput:
        if loss_fn not in LOSSES:  # the losses of mathrl.losses, which the SDK knows (a test)
            if loss_fn not in get_args(types.LossFnType):
                raise refused(f"unknown loss_fn {loss_fn!r}")
            raise refused(f"the fake implements only {', '.join(LOSSES)} (got {loss_fn!r})")
        self.loss_fn_configs.append(
            (loss_fn, None if loss_fn_config is None else dict(loss_fn_config))
        )
        loss = self._loss(loss_fn, loss_fn_config or {})
        if not data:
            raise refused("forward_backward needs at least one datum")
        datums_D = [self._datum(i, d) for i, d in enumerate(data)]
        model = self.model
        try:
            metrics, learner_D = model.forward_backward(datums_D, loss)
        except BackendError as exc:
            raise refused(str(exc)) from None
        outputs = [{"logprobs": types.TensorData(lp_T, "float32")} for lp_T in learner_D]
        # The service reports the loss; a clip fraction the client works out from the outputs.
        return types.ForwardBackwardOutput(
            "ArrayRecord", outputs, {"loss:sum": metrics["loss:sum"]}
        )

    @staticmethod
    def _loss(name: str, config: Mapping[str, float]) -> Loss:
        """The loss `name` (one of LOSSES) with the service's settings: keys the loss does not
        take are refused."""
        known = next(known for known in LOSSES if known == name)
        fields = {p.key: p.field for p in LOSSES[known].defaults}
        if not set(config) <= set(fields):
            raise refused(
                f"loss_fn_config for {name} takes {sorted(fields)} (got {sorted(config)})"
            )
        try:
            return Loss(known, **{fields[key]: value for key, value in config.items()})
        except ValueError as exc:
            raise refused(str(exc)) from None

    def _datum(self, index: int, datum: types.Datum) -> Datum:
        if not isinstance(datum, types.Datum):
            raise refused(f"datum {index} must be a types.Datum (got {type(datum).__name__})")
        inputs = datum.loss_fn_inputs
        if set(inputs) != set(IMPORTANCE_SAMPLING_INPUTS):
            raise refused(
                f"datum {index}: importance_sampling takes exactly "
                f"{sorted(IMPORTANCE_SAMPLING_INPUTS)} (got {sorted(inputs)})"
            )
        n = datum.model_input.length
        for key, dtype in IMPORTANCE_SAMPLING_INPUTS.items():
            if inputs[key].dtype != dtype:
                raise refused(f"datum {index}: {key} must be {dtype} (got {inputs[key].dtype})")
            if len(inputs[key].data) != n:
                raise refused(
                    f"datum {index}: {key} has {len(inputs[key].data)} entries, model_input has {n}"
                )
        tokens = [*datum.model_input.to_ints(), *inputs["target_tokens"].tolist()]
        if n == 0 or not all(0 <= t < VOCAB_SIZE for t in tokens):
            raise refused(f"datum {index}: empty, or a token id outside 0..{VOCAB_SIZE - 1}")
        # The service is not told which tokens are the model's (mathrl keeps its mask): it
        # scores every position, as the loss is defined.
        return Datum(
            tuple(datum.model_input.to_ints()),
            tuple(inputs["target_tokens"].tolist()),
            tuple(inputs["logprobs"].tolist()),
            tuple(inputs["advantages"].tolist()),
            (True,) * n,
        )

    def optim_step(self, adam_params: types.AdamParams) -> types.OptimStepResponse:
        if not isinstance(adam_params, types.AdamParams):
            raise refused(f"optim_step takes types.AdamParams (got {adam_params!r})")
        lr = adam_params.learning_rate
        if not (math.isfinite(lr) and lr > 0):
            raise refused(f"learning_rate must be finite and > 0 (got {lr})")
        asked = tuple(getattr(adam_params, f) for f in ADAM.__dataclass_fields__)
        if asked != dataclasses.astuple(ADAM):  # the engine steps with the contract's only
            raise refused(f"this double's Adam runs with {ADAM} (got {adam_params!r})")
        try:
            self.engine.model.optim_step(lr)  # refuses a step with no forward_backward before it
        except BackendError as exc:
            raise refused(str(exc)) from None
        return types.OptimStepResponse(metrics={})

    def save(self, name: str) -> types.SaveWeightsForSamplerResponse:
        _check_name(name)
        path = f"tinker://fake-run/sampler_weights/{name}"
        self.files["sampler", path] = self.engine.save(name, "sampler")
        return types.SaveWeightsForSamplerResponse(path=path)

    def save_state(self, name: str, overwrite: bool) -> types.SaveWeightsResponse:
        _check_name(name)
        if name in self.states and not overwrite:
            raise refused(f"a checkpoint named {name!r} exists; pass overwrite=True to replace it")
        self.states.add(name)
        path = f"tinker://fake-run/weights/{name}"
        self.files["state", path] = self.engine.save(name, "state")
        return types.SaveWeightsResponse(path=path)

    def load_state(self, path: str) -> types.LoadWeightsResponse:
        try:
            self.engine.restore(self.file_of(path, "state"))
        except BackendError as exc:
            raise refused(str(exc)) from None
        return types.LoadWeightsResponse(path=path)

    def submit(self, kind: str, size: int, work: Callable[[], T]) -> FakeAPIFuture[T]:
        """A training-side call: done after one round trip, in submission order."""
        result: concurrent.futures.Future[T] = concurrent.futures.Future()
        task = self.engine.training_call(kind, work, size)
        task.add_done_callback(lambda t: _copy(t, result))
        return FakeAPIFuture(result)

    def run_now(self, kind: str, size: int, work: Callable[[], T]) -> FakeAPIFuture[T]:
        """A sync training-side call: it runs at once and returns a finished future."""
        self.enter(kind)
        self.log.calls[-1].size = size
        result: concurrent.futures.Future[T] = concurrent.futures.Future()
        try:
            result.set_result(work())
        except Exception as exc:
            result.set_exception(exc)
        return FakeAPIFuture(result)


def _check_name(name: str) -> None:
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name[0] == ".":
        raise refused(f"checkpoint name must be a plain file name (got {name!r})")


def _copy(source: asyncio.Future[T], target: concurrent.futures.Future[T]) -> None:
    if source.cancelled():
        target.cancel()
    elif (exc := source.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


class FakeServiceClient:
    """Drop-in for `mint.ServiceClient`, on a FakeMintServer."""

    def __init__(
        self, server: FakeMintServer, api_key: str | None = None, base_url: str | None = None
    ) -> None:
        server.enter("connect")
        if server.reject_key:
            url = base_url or "http://fake.invalid"
            response = httpx.Response(401, request=httpx.Request("POST", url))
            # Echoes the key, as a careless server might: callers must scrub it.
            raise tinker.AuthenticationError(
                f"Error code: 401 - invalid API key {api_key!r}", response=response, body=None
            )
        self.server = server
        self.api_key = api_key
        self.base_url = base_url

    def create_lora_training_client(
        self, base_model: str, rank: int = 32, seed: int | None = None
    ) -> FakeTrainingClient:
        self.server.enter("create_lora_training_client")
        if not base_model or rank < 1:
            raise refused(f"need a base model and rank >= 1 (got {base_model!r}, {rank})")
        return FakeTrainingClient(self.server, base_model)

    async def create_lora_training_client_async(
        self, base_model: str, rank: int = 32, seed: int | None = None
    ) -> FakeTrainingClient:
        return self.create_lora_training_client(base_model, rank, seed)

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> FakeSamplingClient:
        self.server.enter("create_sampling_client")
        if model_path is None:
            return FakeSamplingClient(self.server, self.server.base_sampler(base_model or ""))
        return FakeSamplingClient(self.server, self.server.load(model_path))

    async def create_sampling_client_async(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> FakeSamplingClient:
        if model_path is None:
            return FakeSamplingClient(self.server, self.server.base_sampler(base_model or ""))
        return await self.server.open_sampler(model_path)


class FakeTrainingClient:
    """Drop-in for `mint.TrainingClient`: one LoRA on the server's model."""

    def __init__(self, server: FakeMintServer, base_model: str) -> None:
        self.server = server
        self.base_model = base_model

    def get_tokenizer(self) -> FakeHFTokenizer:
        self.server.enter("get_tokenizer")
        return self.server.tokenizer

    def forward_backward(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> FakeAPIFuture[types.ForwardBackwardOutput]:
        return self.server.run_now(
            "forward_backward",
            len(data),
            lambda: self.server.forward_backward(data, loss_fn, loss_fn_config),
        )

    async def forward_backward_async(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: dict[str, float] | None = None
    ) -> FakeAPIFuture[types.ForwardBackwardOutput]:
        return self.server.submit(
            "forward_backward",
            len(data),
            lambda: self.server.forward_backward(data, loss_fn, loss_fn_config),
        )

    def optim_step(self, adam_params: types.AdamParams) -> FakeAPIFuture[types.OptimStepResponse]:
        return self.server.run_now("optim_step", 0, lambda: self.server.optim_step(adam_params))

    async def optim_step_async(
        self, adam_params: types.AdamParams
    ) -> FakeAPIFuture[types.OptimStepResponse]:
        return self.server.submit("optim_step", 0, lambda: self.server.optim_step(adam_params))

    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None
    ) -> FakeAPIFuture[types.SaveWeightsForSamplerResponse]:
        return self.server.run_now("save_weights_for_sampler", 0, lambda: self.server.save(name))

    async def save_weights_for_sampler_async(
        self, name: str, ttl_seconds: int | None = None
    ) -> FakeAPIFuture[types.SaveWeightsForSamplerResponse]:
        return self.server.submit("save_weights_for_sampler", 0, lambda: self.server.save(name))

    async def save_state_async(
        self, name: str, ttl_seconds: int | None = None, overwrite: bool = False
    ) -> FakeAPIFuture[types.SaveWeightsResponse]:
        return self.server.submit("save_state", 0, lambda: self.server.save_state(name, overwrite))

    async def load_state_with_optimizer_async(
        self, path: str, weights_access_token: str | None = None
    ) -> FakeAPIFuture[types.LoadWeightsResponse]:
        return self.server.submit("load_state", 0, lambda: self.server.load_state(path))

    async def create_sampling_client_async(self, model_path: str) -> FakeSamplingClient:
        return await self.server.open_sampler(model_path)


class FakeSamplingClient:
    """Drop-in for `mint.SamplingClient`: pinned to one checkpoint's weights."""

    def __init__(self, server: FakeMintServer, sampler: FakeSampler) -> None:
        self.server = server
        self._sampler = sampler

    def get_tokenizer(self) -> FakeHFTokenizer:
        self.server.enter("get_tokenizer")
        return self.server.tokenizer

    async def sample_async(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
    ) -> types.SampleResponse:
        params = self.server.check_sampling(prompt, num_samples, sampling_params)
        completions_G = await self._sampler.sample(prompt.to_ints(), num_samples, params)
        return types.SampleResponse(
            sequences=[
                self.server.sequence(c.tokens, c.logprobs, params.stop) for c in completions_G
            ]
        )

    async def compute_logprobs_async(self, prompt: types.ModelInput) -> list[float | None]:
        """As the SDK returns them: one per token of `prompt`, None for the first."""
        if not isinstance(prompt, types.ModelInput) or prompt.length == 0:
            raise refused(f"compute_logprobs takes a non-empty types.ModelInput (got {prompt!r})")
        self.server.logprob_requests.append(prompt.length)
        return [None, *await self._sampler.logprobs(prompt.to_ints())]


if TYPE_CHECKING:
    from mathrl.service.mint_backend import ServiceClientLike

    def _conforms(server: FakeMintServer) -> ServiceClientLike:
        """mypy checks here that the fake has the client surface MintBackend uses."""
        return server.connect()
