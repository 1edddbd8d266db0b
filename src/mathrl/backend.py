"""The `Backend` protocol: the only door between the GRPO loop and a model.

This module is the contract a new backend is written from. It holds types and
protocols only; `mathrl.service.mint_backend` implements it over MinT and
`mathrl_fakes.FakeBackend` implements it in memory.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from mathrl.adapter import Message
from mathrl.losses import IMPORTANCE_SAMPLING, Loss


@dataclass(frozen=True, slots=True)
class Datum:
    """One training example for a policy-gradient loss (`mathrl.losses`).

    Backend-neutral twin of `mint.types.Datum`, plus its action mask. All five
    fields have the same length N; position i is about predicting
    `target_tokens[i]` after `model_input[: i + 1]`. `mask[i]` is True where
    that token is one the model sampled (an action), False where it is the
    prompt's or the environment's. `logprobs` are the sampler's on the
    model's tokens; `advantages` are zero off the mask.

    The mask stays on this side of the backend: MinT's (and Tinker's) policy
    losses take `target_tokens`, `logprobs` and `advantages` only, so a
    backend sends those three and uses the mask for what it works out itself
    (the share of the model's tokens a loss clipped). mathrl reads it for the
    KL penalty and to keep DRO off the prompt (`mathrl.grpo`).
    """

    model_input: tuple[int, ...]
    target_tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    advantages: tuple[float, ...]
    mask: tuple[bool, ...]

    def lengths(self) -> dict[str, int]:
        """The length of each input, by name (for error messages)."""
        return {
            "model_input": len(self.model_input),
            "target_tokens": len(self.target_tokens),
            "logprobs": len(self.logprobs),
            "advantages": len(self.advantages),
            "mask": len(self.mask),
        }

    @property
    def model_tokens(self) -> int:
        """How many of its positions are the model's (True in the mask)."""
        return sum(self.mask)


class BackendError(Exception):
    """A backend call failed. The message says which call and why.

    `settings` names the run settings that bear on the failure, by their
    `Config` field (`call_timeout`, `retries`), or `base_url` and `api_key`
    for the service's address and key; the command line spells them as its
    flags and variables. A library message never names a flag itself.
    """

    def __init__(self, message: str = "", *, settings: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.settings = settings


class TransientBackendError(BackendError):
    """A backend call failed in a way that may succeed if retried unchanged."""


class BackendUnreachable(BackendError):
    """The service did not answer before the deadline. The message names the URL."""


class CredentialsRejected(BackendError):
    """The service refused the API key. The message never contains the key."""


class WrongEndpoint(BackendError):
    """The address answers, but not as the service does (a web page, an unknown path): the
    URL is wrong, and no retry will change that. The message names the URL."""


class Tokenizer(Protocol):
    """The tokenizer the sampler and the learner share."""

    @property
    def eos_token_id(self) -> int:
        """The end-of-sequence token id; sampling always stops after it."""
        ...

    @property
    def vocab_size(self) -> int:
        """How many token ids the tokenizer has (ids 0 to vocab_size - 1), for the `Model:`
        line and the vocabulary bound (`Backend`); the model may sample a few more."""
        ...

    @property
    def end_of_turn_id(self) -> int:
        """The token that ends a turn in the chat template; sampling a conversation stops there."""
        ...

    def encode(self, text: str) -> list[int]:
        """Return the token ids of `text`."""
        ...

    def render_chat(self, messages: Sequence[Message], options: Mapping[str, Any]) -> list[int]:
        """The token ids of a conversation in the model's chat template, the assistant's turn open.

        As transformers' `apply_chat_template(messages, tokenize=True,
        add_generation_prompt=True, **options)`.
        """
        ...

    def render_reply(
        self, message: Message | Sequence[Message], options: Mapping[str, Any]
    ) -> list[int]:
        """The tokens of one more message (or several) after an assistant's turn, the
        assistant's turn open.

        What the chat template writes after an assistant's end-of-turn token:
        any separator, `message` (the environment's turn in an episode; several
        for the results of a turn's tool calls, which a template may group),
        then the opening of the assistant's next turn. Earlier turns are never
        rendered again.
        """
        ...

    def decode(self, tokens: Sequence[int]) -> str:
        """Return the text of `tokens`."""
        ...


@dataclass(frozen=True, slots=True)
class SampleParams:
    """How to sample: at most `max_tokens` tokens at `temperature`.

    Generation stops after the end-of-sequence token, after any string in
    `stop` appears at the end of the text so far, or at `max_tokens`. The stop
    token or string is part of the returned completion. Temperature 0 is
    greedy decoding. The same `seed` on the same sampler and prompt gives the
    same completions, so a retried request reproduces its samples.
    """

    max_tokens: int
    temperature: float
    stop: tuple[str, ...] = ()
    seed: int | None = None
    end_of_turn: bool = False
    """Also stop after the chat template's end-of-turn token (a conversation's prompt)."""


@dataclass(frozen=True, slots=True)
class Completion:
    """One sampled continuation: its tokens and the sampler's logprob of each."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class TrainResult:
    """What one forward_backward + optim_step pair reports."""

    loss: float
    metrics: Mapping[str, float] = field(default_factory=dict)
    learner_logprobs_D: tuple[tuple[float, ...], ...] | None = None
    """The learner's logprob of each datum's target tokens, as forward_backward computed
    them (before the optimizer step), one tuple per datum in order; None where the service
    gives none. A run compares them with the sampler's (`mathrl.grpo.approx_kl`)."""


class Sampler(Protocol):
    """A sampling client pinned to one saved set of weights."""

    async def sample(
        self, prompt_T: Sequence[int], num_samples: int, params: SampleParams
    ) -> list[Completion]:
        """Sample `num_samples` completions of one prompt, in one request.

        One call is one round trip. Calls are independent: the loop keeps
        every prompt's call of a step in flight at once (`asyncio.gather`),
        and a backend must allow that. Each completion carries exactly one
        logprob per token, the log-probability under the distribution it was
        drawn from (at `params.temperature`). A backend whose service returns
        no logprobs raises `BackendError` rather than inventing them.
        """
        ...

    async def logprobs(self, tokens_T: Sequence[int]) -> list[float]:
        """The logprob of each token of `tokens_T` after the ones before it, at
        temperature 1: one fewer than the tokens (the first has none). One round trip.
        The KL penalty asks it of the step-0 sampler, whose weights are the base model's."""
        ...


@dataclass(frozen=True, slots=True)
class AdamSettings:
    """The optimizer step's settings besides the learning rate: Tinker's `AdamParams`
    defaults, which every backend uses (MinT is sent them; the fake steps with them)."""

    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0
    """0: no clipping of the gradient's norm."""


ADAM = AdamSettings()
"""The one place the optimizer's settings are written."""


class Backend(Protocol):
    """A trainable policy, as the GRPO loop uses it.

    Contract for implementers:

    - **Tokenizer.** `tokenizer` is available once the backend is built, and
      is the learner's tokenizer (prompts are encoded with it).
    - **Submit, then wait.** The `submit_*` training-side methods are coroutines
      that return once the call is *submitted*, handing back an awaitable of
      its result. Calls on the training side complete in the order they were
      submitted, so `submit_train_step(...)` immediately followed by
      `submit_save_for_sampler(...)` saves the trained weights, and both cost
      a single round trip together.
    - **Training.** `submit_train_step` runs `loss` (by default the
      importance-sampling loss; each loss's formula and settings are in
      `mathrl.losses`), summed over every position of every datum, as
      forward_backward, then one Adam step at `learning_rate` (with `ADAM`'s
      betas 0.9 and 0.95, eps 1e-12, no weight decay, no gradient clipping)
      as optim_step, submitted back to back. The loss is a sum over tokens,
      not a mean: its gradient grows with the tokens a step trains on, and
      Adam's step, normalized by the gradient's running scale, does not, so
      the learning rate does not need to shrink as batches or completions
      grow, as it would for plain SGD. Its result's metrics hold `loss:sum`, for a
      loss that clips `clipped:frac` (the share of the model's tokens, by the
      mask, whose ratio the clip bound), and what else the service reports;
      its `learner_logprobs_D` are the learner's logprobs of each datum's target
      tokens as forward_backward computed them, where the service gives them
      (one per token: the same as the sampler's, to its numerics, on-policy at
      temperature 1). It raises
      `ValueError` at submission for misuse the service would refuse: no
      datums, a datum whose inputs disagree in length (the message names the
      lengths), a mask that is not one of the model's tokens (`check_mask`),
      a token id outside the vocabulary, or a learning rate that is not a
      finite positive number.
    - **The vocabulary bound.** A datum's token ids are the tokenizer's
      (0 to `tokenizer.vocab_size` - 1: its prompts and replies) or ones the
      backend's own samplers returned (a model may sample an id its tokenizer
      does not list: Qwen3's embedding has 151,936 rows, its tokenizer
      151,669 entries, and no MinT call says how many rows). Any other id is
      refused with `ValueError` before anything is sent (`check_datums`):
      `MintBackend` keeps the ids past the tokenizer that its samplers
      returned, the fake's tokenizer lists every id its model has.
    - **Saving.** `submit_save_for_sampler(name)` persists the weights as they
      are after every training call submitted before it, and its result is a
      path that `create_sampler` accepts, in this process or another one.
      `submit_save_state(name)` does the same for the full training state
      (weights and optimizer), and `submit_load_state(path)` restores one,
      dropping anything accumulated since; both are training-side calls,
      ordered with the rest. Saving again under a name used before replaces
      that checkpoint with the current weights.
    - **Sampling.** `create_sampler(path)` costs one round trip and returns a
      `Sampler` for exactly those weights; later training does not change it.
      It raises `BackendError` for a path it cannot load.
    - **Failures.** A failure that may pass on retry raises
      `TransientBackendError`. A failed training-side call may or may not
      have taken effect (a service can apply a request and lose the answer),
      so a client that retries one must restore a saved state first:
      `mathrl.service.recovery.RetryingBackend` does. Anything else raises
      `BackendError` or `ValueError`, and misuse refused at submission
      leaves the training side untouched.
    """

    @property
    def tokenizer(self) -> Tokenizer: ...

    async def submit_train_step(
        self, datums_D: Sequence[Datum], learning_rate: float, loss: Loss = IMPORTANCE_SAMPLING
    ) -> Awaitable[TrainResult]:
        """Submit forward_backward (with `loss`) then optim_step; await the result for both."""
        ...

    async def submit_save_for_sampler(self, name: str) -> Awaitable[str]:
        """Submit a save of the current weights; await the result for its path."""
        ...

    async def submit_save_state(self, name: str) -> Awaitable[str]:
        """Submit a save of the weights and optimizer state; await the result for its path."""
        ...

    async def submit_load_state(self, path: str) -> Awaitable[None]:
        """Submit a restore of the state saved at `path`; await the result for completion."""
        ...

    async def create_sampler(self, path: str) -> Sampler:
        """Return a sampler for the weights saved at `path`."""
        ...


def check_train_step(
    datums_D: Sequence[Datum],
    learning_rate: float,
    vocab_size: int | None,
    sampled: Collection[int] = frozenset(),
) -> None:
    """Raise ValueError for a train step the service would refuse.

    Backends call it before submitting anything, so a refused step leaves the
    training side untouched. The messages name what is wrong and what was got.
    `vocab_size` and `sampled`: see `check_datums`.
    """
    check_learning_rate(learning_rate)
    check_datums(datums_D, vocab_size, sampled)


def check_learning_rate(learning_rate: float) -> None:
    """Raise ValueError unless the learning rate is a finite number > 0."""
    if not (math.isfinite(learning_rate) and learning_rate > 0):
        raise ValueError(f"learning_rate must be a finite number > 0 (got {learning_rate!r})")


def check_datums(
    datums_D: Sequence[Datum], vocab_size: int | None, sampled: Collection[int] = frozenset()
) -> None:
    """Raise ValueError for datums forward_backward would refuse, or whose mask is malformed.

    The vocabulary bound: every token id is one of the tokenizer's, 0 to
    `vocab_size` - 1, or one the backend's own samplers returned (`sampled`).
    A model may sample ids its tokenizer does not list (Qwen3's embedding
    has 151,936 rows, its tokenizer 151,669 entries), and no service call
    tells how many rows there are; but a datum's ids come from the tokenizer
    (prompts, replies) or from the model's samples, so an id from neither is
    a mistake. `vocab_size` None checks only that ids are not negative.
    """
    if not datums_D:
        raise ValueError("forward_backward needs at least one datum (got 0)")
    for i, datum in enumerate(datums_D):
        lengths = datum.lengths()
        if len(set(lengths.values())) != 1:
            shown = ", ".join(f"{k}={v}" for k, v in lengths.items())
            raise ValueError(f"datum {i}: inputs must have equal lengths (got {shown})")
        if not datum.target_tokens:
            raise ValueError(f"datum {i}: inputs must not be empty")
        check_mask(i, datum)
        limit = vocab_size if vocab_size is not None else float("inf")
        for token in (*datum.model_input, *datum.target_tokens):
            if not (0 <= token < limit or (token >= 0 and token in sampled)):
                bound = f"0..{vocab_size - 1}" if vocab_size is not None else ">= 0"
                raise ValueError(
                    f"datum {i}: token id {token} is outside the vocabulary ({bound}, and no "
                    "sample returned it)"
                )


def check_mask(i: int, datum: Datum) -> None:
    """Raise ValueError unless datum `i`'s mask is a mask of its model's tokens: each entry
    True or False, at least one True, and no advantage off it."""
    for position, (mine, advantage) in enumerate(zip(datum.mask, datum.advantages, strict=True)):
        if mine not in (True, False):
            raise ValueError(
                f"datum {i}: mask entries must be True or False (got {mine!r} at position "
                f"{position})"
            )
        if not mine and advantage != 0.0:
            raise ValueError(
                f"datum {i}: position {position} is not the model's (mask False) but has "
                f"advantage {advantage!r}; only the model's tokens may carry one"
            )
    if not any(datum.mask):
        raise ValueError(
            f"datum {i}: the mask marks none of its {len(datum.mask)} positions as the "
            "model's; a datum trains on the model's tokens"
        )
