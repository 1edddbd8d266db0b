"""`check_backend`: the `Backend` contract, checked from the outside, rule by rule.

For: anyone writing a backend (for Tinker, SkyRL-tx or their own service) and
mathrl's own suite, which runs it against the fake and against `MintBackend`
over a double of the mint SDK. It drives a fresh backend through the calls
the GRPO loop makes, in order, and stops at the first rule broken: later
rules build on earlier ones (a sampler needs a save; a restore, training).
It imports no test framework, as `check_adapter` does not.

The rules, each named as a failure names it:

- `tokenizer`: text round-trips through encode and decode (accents, CJK),
  and the end-of-sequence id is in the vocabulary;
- `save`: a save for the sampler returns a non-empty path, a sampler opens
  on it, and one opened on a path never saved raises `BackendError`;
- `sample`: a request gives as many completions as asked, each at most
  `max_tokens` long, with one finite logprob <= 0 per token, none running
  past a stop string or the end-of-sequence token;
- `rescore`: the sampler's `logprobs` of a sampled sequence are the ones it
  sampled with (within 1e-3: the KL penalty's base logprobs come this way);
- `replay`: a retried request (same sampler, prompt and seed) draws the same;
- `in flight`: a step's requests can all be in flight at once;
- `train`: forward_backward + optim_step returns a finite loss (and, if it
  gives the learner's logprobs, one per target token, the sampler's within
  1e-3 on the model's tokens: the datums are on-policy), and a save
  submitted right behind it lands after it, at a new path;
- `pinned`: a sampler keeps the weights it was opened on, whatever trains;
- `optimizer step`: training moves the weights (the loss of the same datums
  changes from one step to the next);
- `state`: a restored state undoes the training since, optimizer moments
  included (the next two losses repeat), and a missing one raises
  `BackendError`;
- `losses`: every loss of `mathrl.losses` trains, and a clipping one says
  how much it clipped as a share in [0, 1];
- `refusals`: what the service refuses is a `ValueError` before anything is
  sent: datums of unequal lengths (naming every length), an advantage off
  the mask, a mask on none of the model's tokens, no datums, a token id
  outside the vocabulary (past the tokenizer's and never sampled, or
  negative), a learning rate that is not a finite number > 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from mathrl.backend import Backend, BackendError, Datum, SampleParams
from mathrl.grpo import build_datum
from mathrl.losses import LOSSES, Loss
from mathrl.tasks.addition import FEWSHOT, AdditionProblem

RULES = (
    "tokenizer", "save", "sample", "rescore", "replay", "in flight", "train", "pinned",
    "optimizer step", "state", "losses", "refusals",
)  # fmt: skip
"""The rules, in the order they are checked (the module docstring says each)."""


class BrokenRule(AssertionError):
    """The backend breaks `rule`; the message says how, in one line."""

    def __init__(self, rule: str, how: str) -> None:
        super().__init__(f"the backend breaks the contract's rule {rule!r}: {how}")
        self.rule = rule


def check_backend(make_backend: Callable[[], Backend]) -> str:
    """Check a fresh backend, made by `make_backend`, against the `Backend` contract; return a
    summary line, or raise `BrokenRule` (an AssertionError) naming the first rule broken."""
    backend = make_backend()
    asyncio.run(_check(backend))
    return f"{type(backend).__name__} keeps the {len(RULES)} rules of the Backend contract"


def _rule(name: str, ok: bool, how: str) -> None:
    if not ok:
        raise BrokenRule(name, how)


async def _refused(call: Callable[[], Awaitable[Any]], kind: type[Exception]) -> str | None:
    """The message of the `kind` error `call` raises; None if it raises none."""
    try:
        await call()
    except kind as exc:
        return str(exc)
    return None


async def _check(backend: Backend) -> None:
    tok = backend.tokenizer
    text = FEWSHOT + AdditionProblem(12, 30).question
    prompt_T = tok.encode(text)
    unicode = "Gr\u00f6\u00dfe \u2019 42 \u2014 \u7b54"  # accents, a curly quote, a dash, CJK
    _rule("tokenizer", tok.decode(prompt_T) == text, "decode(encode(text)) is not the text")
    _rule("tokenizer", tok.decode(tok.encode(unicode)) == unicode, f"{unicode!r} comes back not")
    _rule("tokenizer", 0 <= tok.eos_token_id < tok.vocab_size, "eos_token_id is outside vocab")

    path0 = await (await backend.submit_save_for_sampler("contract-0"))
    _rule("save", isinstance(path0, str) and bool(path0), f"it returned {path0!r}, no path")
    sampler0 = await backend.create_sampler(path0)
    missing = await _refused(lambda: backend.create_sampler(path0 + "-missing"), BackendError)
    _rule("save", missing is not None, "a sampler opened on a path never saved")

    params = SampleParams(max_tokens=6, temperature=1.0, stop=("\n",), seed=7)
    completions_G = await sampler0.sample(prompt_T, 4, params)
    _rule("sample", len(completions_G) == 4, f"4 asked, {len(completions_G)} came")
    for c in completions_G:
        _rule("sample", 1 <= len(c.tokens) <= 6, f"{len(c.tokens)} tokens, max_tokens 6")
        _rule("sample", len(c.logprobs) == len(c.tokens), "not one logprob per token")
        _rule("sample", all(math.isfinite(q) and q <= 0 for q in c.logprobs), "a logprob > 0")
        decoded = tok.decode(c.tokens)
        _rule("sample", "\n" not in decoded[:-1], f"it ran past a stop string: {decoded!r}")
        _rule("sample", tok.eos_token_id not in c.tokens[:-1], "it ran past end-of-sequence")
    for c in completions_G:
        scored = await sampler0.logprobs([*prompt_T, *c.tokens])
        again = scored[len(prompt_T) - 1 :]
        close = len(again) == len(c.logprobs) and all(
            math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-3)
            for a, b in zip(again, c.logprobs, strict=True)
        )
        _rule("rescore", close, f"sampled with {c.logprobs}, rescored {again}")
    replayed = await sampler0.sample(prompt_T, 4, params)
    _rule("replay", replayed == completions_G, "the same seed drew other completions")
    many = await asyncio.gather(*(sampler0.sample(prompt_T, 2, params) for _ in range(8)))
    _rule("in flight", all(len(cs) == 2 for cs in many), "requests in flight at once failed")

    datums_D = [
        d
        for c, advantage in zip(completions_G, (1.0, -1.0, 0.5, -0.5), strict=True)
        if (d := build_datum(prompt_T, c.tokens, c.logprobs, advantage)) is not None
    ]
    training = await backend.submit_train_step(datums_D, 1e-4)
    saving = await backend.submit_save_for_sampler("contract-1")
    result = await training
    path1 = await saving
    _rule("train", math.isfinite(result.loss), f"the loss is {result.loss}")
    learner_D = result.learner_logprobs_D
    if learner_D is not None:  # on-policy at temperature 1: the learner scores as it sampled
        _rule("train", len(learner_D) == len(datums_D), "not one list of learner logprobs each")
        for datum, lp_T in zip(datums_D, learner_D, strict=False):
            _rule("train", len(lp_T) == len(datum.target_tokens), "not one learner logprob each")
            close = all(
                math.isclose(lp, q, rel_tol=1e-3, abs_tol=1e-3)
                for lp, q, mine in zip(lp_T, datum.logprobs, datum.mask, strict=True)
                if mine
            )
            _rule("train", close, f"the learner's logprobs {lp_T} are not the sampler's")
    _rule("train", path1 != path0, "the save after training kept the old path")
    pinned = await (await backend.create_sampler(path0)).sample(prompt_T, 4, params)
    _rule("pinned", pinned == completions_G, "a sampler of the old weights sampled the new")

    state = await (await backend.submit_save_state("contract-state"))
    _rule("state", isinstance(state, str) and bool(state), f"it returned {state!r}, no path")
    losses = [(await (await backend.submit_train_step(datums_D, 1e-3))).loss for _ in range(2)]
    moved = not math.isclose(losses[0], losses[1], rel_tol=1e-6, abs_tol=1e-12)
    _rule("optimizer step", moved, f"two steps on the same datums gave the loss {losses[0]}")
    await (await backend.submit_load_state(state))
    again = [(await (await backend.submit_train_step(datums_D, 1e-3))).loss for _ in range(2)]
    same = all(math.isclose(a, b, rel_tol=1e-4) for a, b in zip(again, losses, strict=True))
    _rule("state", same, f"losses {losses} before the restore, {again} after")
    gone = await _refused(lambda: _loaded(backend, state + "-missing"), BackendError)
    _rule("state", gone is not None, "a state never saved was loaded")

    for loss in [*(Loss(name) for name in LOSSES), Loss("ppo", clip_low=0.9, clip_high=1.1)]:
        await (await backend.submit_load_state(state))
        trained = await (await backend.submit_train_step(datums_D, 1e-3, loss))
        _rule("losses", math.isfinite(trained.loss), f"{loss.name}: the loss {trained.loss}")
        share = trained.metrics.get("clipped:frac", 0.0)
        _rule("losses", not loss.clips or 0 <= share <= 1, f"{loss.name}: clipped {share}")
    await (await backend.submit_load_state(state))
    sampled = {t for cs in (completions_G, replayed, pinned, *many) for c in cs for t in c.tokens}
    await _refusals(backend, datums_D, sampled)


async def _loaded(backend: Backend, path: str) -> None:
    await (await backend.submit_load_state(path))


async def _refusals(backend: Backend, datums_D: list[Datum], sampled: set[int]) -> None:
    good = datums_D[0]
    unlisted = backend.tokenizer.vocab_size
    while unlisted in sampled:  # (a model may sample past its tokenizer's ids)
        unlisted += 1
    short = dataclasses.replace(good, logprobs=good.logprobs[:-1])
    n = len(good.mask)
    cases: list[tuple[str, list[Datum], float, str]] = [
        ("datums of unequal lengths", [good, short], 1e-4, "logprobs="),
        ("an advantage off the mask", [good, dataclasses.replace(
            good, advantages=(1.0, *good.advantages[1:]))], 1e-4, "is not the model's"),
        ("a mask on none of the model's tokens", [dataclasses.replace(
            good, mask=(False,) * n, advantages=(0.0,) * n)], 1e-4, "the mask marks none"),
        ("no datums", [], 1e-4, "datum"),
        ("a token id past the vocabulary", [dataclasses.replace(
            good, model_input=(unlisted, *good.model_input[1:]))], 1e-4, str(unlisted)),
        ("a negative token id", [dataclasses.replace(
            good, target_tokens=(*good.target_tokens[:-1], -1))], 1e-4, "-1"),
        *((f"the learning rate {lr}", datums_D, lr, "learning_rate")
          for lr in (0.0, -1e-4, math.nan, math.inf)),
    ]  # fmt: skip
    for what, datums, lr, said in cases:
        message = await _refused(partial(backend.submit_train_step, datums, lr), ValueError)
        _rule("refusals", message is not None, f"{what} was sent, not refused with ValueError")
        _rule("refusals", said in str(message), f"{what}: the refusal says {message!r}")
    lengths = short.lengths()
    message = await _refused(lambda: backend.submit_train_step([good, short], 1e-4), ValueError)
    named = all(f"{name}={length}" in str(message) for name, length in lengths.items())
    _rule("refusals", named, f"unequal lengths, not every one named: {message!r}")
