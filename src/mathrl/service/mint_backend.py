"""MintBackend: the `Backend` protocol over MinT, the only module that imports mint.

For: turning mathrl's calls and types into mint calls and `mint.types`;
opening a connection under one deadline; turning SDK failures into
`BackendError` one-liners that never contain the API key. Not for: retries
(the SDK retries transient failures itself), GRPO logic, or printing.

Setup is synchronous in the SDK (`ServiceClient()` contacts the server in its
constructor and retries for minutes), so `open_backend` first takes one quick
look at the endpoint (`mathrl.service.probe`), then runs the SDK's set-up with
`mathrl.service.deadline.run_in_daemon_thread` and gives up after
`config.connect_timeout` seconds. Stop sequences are translated by
`mathrl.service.hf_tokenizer.stop_sequences`.

Training on MinT from Python, in asyncio code, with the command line's
deadlines and retries (`Subtraction` is the README's task):

    import asyncio

    from mathrl import Config, RetryingBackend, RetryPolicy, TrainConfig, run_grpo_async
    from mathrl.service.mint_backend import Endpoint, open_backend
    from subtraction import Subtraction


    async def main() -> None:
        config = Config(train=TrainConfig(steps=20, max_tokens=8))
        endpoint = Endpoint(api_key="sk-...")  # and base_url=, for another service
        backend = RetryingBackend(await open_backend(config, endpoint), RetryPolicy())
        result = await run_grpo_async(backend, Subtraction(), config.train)
        print(result.saved_path)


    asyncio.run(main())
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar


class _NoFrameworkAdvice(logging.Filter):
    """Drops transformers' "PyTorch was not found" advice: the tokenizer needs no framework."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "PyTorch was not found" not in record.getMessage()


# Before mint (and through it transformers) is imported: the advice is logged on import.
logging.getLogger("transformers").addFilter(_NoFrameworkAdvice())

# Imported for its side effects: it lets MinT's `sk-` keys through tinker's key
# check. mindlab-toolkit ships no type information (no py.typed), so the typed
# names come from tinker, which mint re-exports unchanged.
import mint  # noqa: E402, F401
import tinker  # noqa: E402
from tinker import types  # noqa: E402

from mathrl.backend import (  # noqa: E402
    ADAM,
    BackendError,
    BackendUnreachable,
    Completion,
    CredentialsRejected,
    Datum,
    SampleParams,
    TrainResult,
    TransientBackendError,
    check_train_step,
)
from mathrl.config import DEFAULT_BASE_URL, Config  # noqa: E402
from mathrl.losses import IMPORTANCE_SAMPLING, Loss, token_loss  # noqa: E402
from mathrl.service.deadline import run_in_daemon_thread  # noqa: E402
from mathrl.service.hf_tokenizer import HFTokenizer, HFTokenizerLike, stop_sequences  # noqa: E402
from mathrl.service.probe import probe_service, retryable_status  # noqa: E402
from mathrl.service.sdk_messages import translation  # noqa: E402
from mathrl.text import one_line  # noqa: E402

Probe = Callable[[str, str, float], None]
"""Checks the endpoint before set-up: (URL, key, timeout) -> None, or a BackendError."""


def sdk_probe(url: str, key: str, timeout: float) -> None:
    """`probe_service` with the SDK's version, as the SDK itself would send it."""
    probe_service(url, key, timeout, sdk_version=tinker.__version__)


T = TypeVar("T")


class SamplingClientLike(Protocol):
    """The part of `mint.SamplingClient` mathrl uses."""

    async def sample_async(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> types.SampleResponse: ...
    def get_tokenizer(self) -> HFTokenizerLike: ...
    async def compute_logprobs_async(self, prompt: types.ModelInput) -> list[float | None]: ...


class TrainingClientLike(Protocol):
    """The part of `mint.TrainingClient` mathrl uses."""

    def get_tokenizer(self) -> HFTokenizerLike: ...
    async def forward_backward_async(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: dict[str, float] | None = ...,
    ) -> Awaitable[types.ForwardBackwardOutput]: ...
    async def optim_step_async(
        self, adam_params: types.AdamParams
    ) -> Awaitable[types.OptimStepResponse]: ...
    async def save_weights_for_sampler_async(
        self, name: str
    ) -> Awaitable[types.SaveWeightsForSamplerResponse]: ...
    async def save_state_async(
        self, name: str, ttl_seconds: int | None = ..., overwrite: bool = ...
    ) -> Awaitable[types.SaveWeightsResponse]: ...
    async def load_state_with_optimizer_async(
        self, path: str
    ) -> Awaitable[types.LoadWeightsResponse]: ...
    async def create_sampling_client_async(self, model_path: str) -> SamplingClientLike: ...


class ServiceClientLike(Protocol):
    """The part of `mint.ServiceClient` mathrl uses."""

    def create_lora_training_client(
        self, base_model: str, rank: int = ..., seed: int | None = ...
    ) -> TrainingClientLike: ...
    def create_sampling_client(
        self, model_path: str | None = ..., base_model: str | None = ...
    ) -> SamplingClientLike: ...


class MintSampler:
    """A `mathrl.backend.Sampler` over one `mint.SamplingClient`."""

    def __init__(
        self,
        client: SamplingClientLike,
        tokenizer: HFTokenizer,
        secret: str | None = None,
        past_tokenizer: set[int] | None = None,
    ) -> None:
        self._client = client
        self._tokenizer = tokenizer
        self._secret = secret
        self._past = past_tokenizer if past_tokenizer is not None else set()
        """Where the ids it samples past the tokenizer's are kept (its backend's set)."""

    async def sample(
        self, prompt_T: Sequence[int], num_samples: int, params: SampleParams
    ) -> list[Completion]:
        sampling_params = types.SamplingParams(
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            seed=params.seed,
            stop=stop_sequences(params.stop, self._tokenizer, params.end_of_turn),
        )
        with service_errors("calling sample", self._secret):
            response = await self._client.sample_async(
                prompt=types.ModelInput.from_ints(list(prompt_T)),
                num_samples=num_samples,
                sampling_params=sampling_params,
            )
        if len(response.sequences) != num_samples:
            raise BackendError(
                f"sample: asked for {num_samples} sequences, "
                f"MinT returned {len(response.sequences)}"
            )
        completions = [_completion(i, seq) for i, seq in enumerate(response.sequences)]
        listed = self._tokenizer.vocab_size
        self._past.update(t for c in completions for t in c.tokens if t >= listed)
        return completions

    async def logprobs(self, tokens_T: Sequence[int]) -> list[float]:
        with service_errors("calling compute_logprobs", self._secret):
            values = await self._client.compute_logprobs_async(
                types.ModelInput.from_ints(list(tokens_T))
            )
        if len(values) != len(tokens_T) or any(v is None for v in values[1:]):
            raise BackendError(
                f"compute_logprobs: asked for {len(tokens_T)} tokens' logprobs, MinT returned "
                f"{len(values)} with {sum(v is None for v in values[1:])} missing after the first"
            )
        return [float(v) for v in values[1:] if v is not None]


def _completion(index: int, seq: types.SampledSequence) -> Completion:
    if seq.logprobs is None:
        # Zeros here would turn the importance ratio into p_theta itself.
        raise BackendError(
            f"sample: MinT returned sequence {index} without logprobs; "
            "the importance-sampling loss needs the sampler's logprobs"
        )
    if len(seq.logprobs) != len(seq.tokens):
        raise BackendError(
            f"sample: sequence {index} has {len(seq.tokens)} tokens "
            f"but {len(seq.logprobs)} logprobs"
        )
    return Completion(tuple(seq.tokens), tuple(seq.logprobs))


class MintBackend:
    """`mathrl.backend.Backend` over a mint training client and its tokenizer.

    Args:
        training: a `mint.TrainingClient` (or anything with its methods).
        tokenizer: the training client's Hugging Face tokenizer.
        secret: the API key, scrubbed from every error message.
    """

    def __init__(
        self, training: TrainingClientLike, tokenizer: HFTokenizerLike, secret: str | None = None
    ) -> None:
        self._training = training
        self._tokenizer = HFTokenizer(tokenizer)
        self._secret = secret
        self._past_tokenizer: set[int] = set()
        """Ids past the tokenizer's that its samplers returned: the model's, though the
        tokenizer lists none of them (the vocabulary bound, `mathrl.backend.Backend`)."""

    @property
    def tokenizer(self) -> HFTokenizer:
        return self._tokenizer

    async def submit_train_step(
        self, datums_D: Sequence[Datum], learning_rate: float, loss: Loss = IMPORTANCE_SAMPLING
    ) -> Awaitable[TrainResult]:
        # Before anything is sent: the tokenizer's ids, or ones the model sampled.
        vocab_size = self._tokenizer.vocab_size
        check_train_step(datums_D, learning_rate, vocab_size, self._past_tokenizer)
        data_D = [to_mint_datum(d) for d in datums_D]
        with service_errors("calling forward_backward", self._secret):
            # Submitted back to back, awaited only after: one clock cycle for both.
            forward = await self._training.forward_backward_async(data_D, loss.name, loss.config())
        with service_errors("calling optim_step", self._secret):
            step = await self._training.optim_step_async(
                types.AdamParams(
                    learning_rate=learning_rate,
                    beta1=ADAM.beta1,
                    beta2=ADAM.beta2,
                    eps=ADAM.eps,
                    weight_decay=ADAM.weight_decay,
                    grad_clip_norm=ADAM.grad_clip_norm,
                )
            )

        async def both() -> TrainResult:
            with service_errors("calling forward_backward", self._secret):
                output = await forward
            with service_errors("calling optim_step", self._secret):
                optim = await step
            if "loss:sum" not in output.metrics:
                raise BackendError(f"forward_backward reported no loss:sum (got {output.metrics})")
            metrics = {**output.metrics, **(optim.metrics or {})}
            learner_D = learner_logprobs(datums_D, output)
            if loss.clips and "clipped:frac" not in metrics:  # the service's own, if it says
                share = clipped_fraction(loss, datums_D, learner_D)
                if share is not None:
                    metrics["clipped:frac"] = share
            return TrainResult(output.metrics["loss:sum"], metrics, learner_D)

        return _Later(both)

    async def submit_save_for_sampler(self, name: str) -> Awaitable[str]:
        with service_errors("calling save_weights_for_sampler", self._secret):
            saving = await self._training.save_weights_for_sampler_async(name)

        async def path() -> str:
            with service_errors("calling save_weights_for_sampler", self._secret):
                return (await saving).path

        return _Later(path)

    async def submit_save_state(self, name: str) -> Awaitable[str]:
        with service_errors("calling save_state", self._secret):
            # overwrite: a retried save (see mathrl.service.retry) reuses the name it failed with.
            saving = await self._training.save_state_async(name, overwrite=True)

        async def path() -> str:
            with service_errors("calling save_state", self._secret):
                return (await saving).path

        return _Later(path)

    async def submit_load_state(self, path: str) -> Awaitable[None]:
        with service_errors(f"calling load_state_with_optimizer({path!r})", self._secret):
            loading = await self._training.load_state_with_optimizer_async(path)

        async def done() -> None:
            with service_errors(f"calling load_state_with_optimizer({path!r})", self._secret):
                await loading

        return _Later(done)

    async def create_sampler(self, path: str) -> MintSampler:
        with service_errors(f"calling create_sampling_client({path!r})", self._secret):
            client = await self._training.create_sampling_client_async(model_path=path)
        return MintSampler(client, self._tokenizer, self._secret, self._past_tokenizer)


def learner_logprobs(
    datums_D: Sequence[Datum], output: types.ForwardBackwardOutput
) -> tuple[tuple[float, ...], ...] | None:
    """The learner's logprob of each datum's target tokens, as forward_backward returns them
    (`loss_fn_outputs[i]["logprobs"]`); None unless it returned one per target token of
    every datum."""
    if len(output.loss_fn_outputs) != len(datums_D):
        return None
    learner_D = []
    for datum, outputs in zip(datums_D, output.loss_fn_outputs, strict=True):
        tensor = outputs.get("logprobs")
        if tensor is None:
            return None
        lp_T = tuple(float(lp) for lp in tensor.tolist())
        if len(lp_T) != len(datum.target_tokens):
            return None
        learner_D.append(lp_T)
    return tuple(learner_D)


def clipped_fraction(
    loss: Loss, datums_D: Sequence[Datum], learner_D: Sequence[Sequence[float]] | None
) -> float | None:
    """The share of the model's tokens (the datums' masks) whose ratio `loss` clipped, from
    the learner's logprobs (`learner_logprobs`); None without them."""
    if learner_D is None:
        return None
    clipped = scored = 0
    for datum, lp_T in zip(datums_D, learner_D, strict=True):
        for lp, q, a, mine in zip(lp_T, datum.logprobs, datum.advantages, datum.mask, strict=True):
            if mine:
                scored += 1
                clipped += token_loss(loss, lp, q, a).clipped
    return clipped / scored if scored else None


class _Later(Awaitable[T]):
    """A result to await later. Unlike a bare coroutine, it is fine never to await it."""

    def __init__(self, wait: Callable[[], Awaitable[T]]) -> None:
        self._wait = wait

    def __await__(self) -> Generator[Any, None, T]:
        return self._wait().__await__()


def to_mint_datum(datum: Datum) -> types.Datum:
    """The `mint.types.Datum` of one datum: its target tokens, logprobs and advantages.

    The mask stays here. MinT's policy losses (Tinker's) take those three inputs
    and no other (`weights` is cross_entropy's), and DRO documents no mask at all;
    tinker-cookbook likewise strips its mask before forward_backward. What the mask
    decides is settled before the datum is sent: advantages are 0 off it, and with
    DRO, q there is the policy's own logprob (`mathrl.grpo.anchored`). It is used
    client-side again for the clip fraction (`clipped_fraction`).
    """
    n = len(datum.target_tokens)
    return types.Datum(
        model_input=types.ModelInput.from_ints(list(datum.model_input)),
        loss_fn_inputs={
            "target_tokens": types.TensorData(list(datum.target_tokens), "int64", [n]),
            "logprobs": types.TensorData(list(datum.logprobs), "float32", [n]),
            "advantages": types.TensorData(list(datum.advantages), "float32", [n]),
        },
    )


@contextlib.contextmanager
def service_errors(what: str, secret: str | None) -> Iterator[None]:
    """Re-raise SDK errors raised while `what` (a call: "calling sample") as BackendErrors
    (one line, key scrubbed)."""
    try:
        yield
    except tinker.TinkerError as exc:
        raise translate_error(exc, f"{what} on MinT", secret) from None


def translate_error(exc: tinker.TinkerError, what: str, secret: str | None) -> BackendError:
    """The BackendError for an SDK error raised while `what`: `what failed: why`.

    A rejected key, a failure that may pass on retry, or another; a message
    in `sdk_messages.TRANSLATED` is said in the user's terms first.
    """
    detail = _one_line(exc, secret)
    if isinstance(exc, tinker.AuthenticationError | tinker.PermissionDeniedError):
        return CredentialsRejected(
            f"MinT rejected the API key while {what}: {detail}", settings=("api_key",)
        )
    known = translation(str(exc))
    if known is not None:
        return known.error(
            f"{what} failed: {known.means} (tinker {tinker.__version__} said: {detail})",
            settings=known.settings,
        )
    retryable = (
        isinstance(exc, tinker.APIConnectionError)
        or (isinstance(exc, tinker.APIStatusError) and retryable_status(exc.status_code))
        or (
            isinstance(exc, tinker.RequestFailedError)
            and exc.category is not types.RequestErrorCategory.User
        )
    )
    if retryable:
        return TransientBackendError(f"{what} failed, and may succeed on retry: {detail}")
    return BackendError(f"{what} failed: {detail}")


class _Phases(list[str]):
    """The set-up phases so far; each new one is reported with its deadline."""

    def __init__(self, first: str, config: Config, waiting: Callable[[str], None] | None) -> None:
        super().__init__()
        self._config, self._waiting = config, waiting
        self.append(first)

    def append(self, phase: str) -> None:
        super().append(phase)
        if self._waiting is not None:
            first = len(self) == 1
            limit = self._config.connect_timeout if first else self._config.setup_timeout
            self._waiting(f"{phase} (up to {limit:g} s)")


def _one_line(exc: BaseException, secret: str | None) -> str:
    """The exception as one line, the secret masked before it is cut (so no part of it shows)."""
    text = str(exc).replace(secret, "***") if secret else str(exc)
    return one_line(text) or type(exc).__name__


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the MinT service is, and the key to it (never shown in a message)."""

    api_key: str = field(default="", repr=False)
    base_url: str = DEFAULT_BASE_URL


async def open_backend(
    config: Config,
    endpoint: Endpoint,
    *,
    service_client: ServiceClientLike | None = None,
    service_factory: Callable[..., ServiceClientLike] = tinker.ServiceClient,
    probe: Probe | None = sdk_probe,
    waiting: Callable[[str], None] | None = None,
) -> MintBackend:
    """Connect, create a LoRA training client and load its tokenizer, all by the deadline.

    `service_client` injects a ready client; otherwise `probe` looks at the
    endpoint, then `service_factory` (`mint.ServiceClient`) is called with the
    endpoint's key and URL.
    """

    def build(service: ServiceClientLike, phase: list[str]) -> MintBackend:
        phase.append(f"creating a LoRA training client for {config.base_model}")
        training = service.create_lora_training_client(
            config.base_model, rank=config.lora_rank, seed=config.train.seed
        )
        phase.append("loading the tokenizer")
        return MintBackend(training, training.get_tokenizer(), endpoint.api_key)

    return await _connect(config, endpoint, build, service_client, service_factory, probe, waiting)


async def open_sampler(
    config: Config,
    endpoint: Endpoint,
    model_path: str | None,
    *,
    service_client: ServiceClientLike | None = None,
    service_factory: Callable[..., ServiceClientLike] = tinker.ServiceClient,
    probe: Probe | None = sdk_probe,
) -> tuple[HFTokenizer, MintSampler]:
    """Connect and open a sampler for saved weights (None: the base model
    `config.base_model` itself), with its tokenizer, by the deadline.

    The tokenizer is the sampling client's (the one of the weights' base
    model): a training client would cost a LoRA allocation just for it.
    """

    def build(service: ServiceClientLike, phase: list[str]) -> tuple[HFTokenizer, MintSampler]:
        if model_path is None:
            phase.append(f"opening a sampler for the base model {config.base_model}")
            client = service.create_sampling_client(base_model=config.base_model)
        else:
            phase.append(f"opening a sampler for {model_path}")
            client = service.create_sampling_client(model_path=model_path)
        phase.append("loading the tokenizer")
        tokenizer = HFTokenizer(client.get_tokenizer())
        return tokenizer, MintSampler(client, tokenizer, endpoint.api_key)

    return await _connect(config, endpoint, build, service_client, service_factory, probe)


async def _connect(
    config: Config,
    endpoint: Endpoint,
    build: Callable[[ServiceClientLike, list[str]], T],
    service_client: ServiceClientLike | None,
    service_factory: Callable[..., ServiceClientLike],
    probe: Probe | None,
    waiting: Callable[[str], None] | None = None,
) -> T:
    key, url = endpoint.api_key, endpoint.base_url
    phase = _Phases(f"connecting to MinT at {url}", config, waiting)
    if service_client is None and not key:
        raise BackendError("MinT needs an API key (got none)", settings=("api_key",))

    def connect() -> ServiceClientLike:
        # Explicit arguments: mint copies its variables into tinker's only at import time.
        return service_factory(api_key=key, base_url=url)

    try:
        service = service_client
        if service is None and probe is not None:
            # Its own sockets time out; the thread's deadline only backs them up.
            look, limit = probe, 4 * config.connect_timeout + 10
            try:
                await run_in_daemon_thread(lambda: look(url, key, config.connect_timeout), limit)
            except TimeoutError:
                raise BackendUnreachable(
                    f"could not reach MinT at {url} within {limit:g} s"
                ) from None
        if service is None:
            try:
                service = await run_in_daemon_thread(connect, config.connect_timeout)
            except TimeoutError:
                raise BackendUnreachable(
                    f"could not reach MinT at {url} within {config.connect_timeout:g} s",
                    settings=("base_url", "connect_timeout"),
                ) from None
        # It answers. Creating a LoRA client on a cold service may take minutes.
        ready = service
        try:
            return await run_in_daemon_thread(lambda: build(ready, phase), config.setup_timeout)
        except TimeoutError:
            raise BackendUnreachable(
                f"MinT at {url} did not finish {phase[-1]} within {config.setup_timeout:g} s",
                settings=("setup_timeout",),
            ) from None
    except tinker.TinkerError as exc:
        raise translate_error(exc, phase[-1], key) from None
    except BackendError:
        raise
    except Exception as exc:  # e.g. the tokenizer download failing: still one line for the CLI
        detail = f"{type(exc).__name__}: {_one_line(exc, key)}"
        raise BackendError(f"{phase[-1]} failed: {detail}") from None
