"""The Backend contract, as one function every backend must pass.

`check_backend(make_backend)` drives a fresh backend through the calls the
GRPO loop makes and checks what `mathrl.backend.Backend` promises. The suite
runs it against FakeBackend and against MintBackend over the fake mint
surface; a real-API smoke test may run it against the service.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable

import pytest

from mathrl.backend import Backend, BackendError, SampleParams
from mathrl.grpo import build_datum
from mathrl.losses import LOSSES, Loss
from mathrl.tasks.addition import FEWSHOT, AdditionProblem


def check_backend(make_backend: Callable[[], Backend]) -> None:
    """Fail with an assertion if the backend breaks its contract."""
    asyncio.run(_check(make_backend()))


async def _check(backend: Backend) -> None:
    tok = backend.tokenizer
    prompt_text = FEWSHOT + AdditionProblem(12, 30).question
    prompt_T = tok.encode(prompt_text)
    assert tok.decode(prompt_T) == prompt_text
    unicode = "Gr\u00f6\u00dfe \u2019 42 \u2014 \u7b54"  # accents, a curly quote, a dash, CJK
    assert tok.decode(tok.encode(unicode)) == unicode
    assert 0 <= tok.eos_token_id < tok.vocab_size

    # Saving and sampling.
    path0 = await (await backend.submit_save_for_sampler("contract-0"))
    assert isinstance(path0, str)
    assert path0
    sampler0 = await backend.create_sampler(path0)
    params = SampleParams(max_tokens=6, temperature=1.0, stop=("\n",), seed=7)
    completions_G = await sampler0.sample(prompt_T, 4, params)
    assert len(completions_G) == 4
    for c in completions_G:
        assert 1 <= len(c.tokens) <= params.max_tokens
        assert len(c.logprobs) == len(c.tokens)
        assert all(math.isfinite(lp) and lp <= 0.0 for lp in c.logprobs)
        text = tok.decode(c.tokens)
        assert "\n" not in text[:-1], f"generation ran past a stop string: {text!r}"
        assert tok.eos_token_id not in c.tokens[:-1], "generation ran past EOS"

    # The sampler scores a sequence as it sampled it (at temperature 1): the KL penalty's
    # base logprobs come this way.
    for c in completions_G:
        scored = await sampler0.logprobs([*prompt_T, *c.tokens])
        assert len(scored) == len(prompt_T) + len(c.tokens) - 1
        assert scored[len(prompt_T) - 1 :] == pytest.approx(c.logprobs, rel=1e-3, abs=1e-3)

    # A retried request (same sampler, prompt and seed) replays its samples.
    assert await sampler0.sample(prompt_T, 4, params) == completions_G
    # Requests of one step can all be in flight at once.
    many = await asyncio.gather(*(sampler0.sample(prompt_T, 2, params) for _ in range(8)))
    assert all(len(cs) == 2 for cs in many)

    # Training: forward_backward + optim_step, then a save lands after both.
    datums_D = [
        d
        for c, adv in zip(completions_G, (1.0, -1.0, 0.5, -0.5), strict=True)
        if (d := build_datum(prompt_T, c.tokens, c.logprobs, adv)) is not None
    ]
    training = await backend.submit_train_step(datums_D, 1e-4)
    saving = await backend.submit_save_for_sampler("contract-1")
    result = await training
    assert math.isfinite(result.loss)
    path1 = await saving
    assert path1 != path0
    # The old sampler is pinned to the old weights.
    assert await (await backend.create_sampler(path0)).sample(prompt_T, 4, params) == (
        completions_G
    )
    greedy = SampleParams(max_tokens=6, temperature=0.0, stop=("\n",), seed=1)
    (best,) = await (await backend.create_sampler(path1)).sample(prompt_T, 1, greedy)
    assert len(best.logprobs) == len(best.tokens)

    # The full training state: a restore undoes training, optimizer included.
    state = await (await backend.submit_save_state("contract-state"))
    assert isinstance(state, str)
    assert state
    losses = [(await (await backend.submit_train_step(datums_D, 1e-3))).loss for _ in range(2)]
    await (await backend.submit_load_state(state))
    again = [(await (await backend.submit_train_step(datums_D, 1e-3))).loss for _ in range(2)]
    # The first loss needs the weights back; the second, the Adam moments too.
    assert again == pytest.approx(losses, rel=1e-4)
    assert losses[1] != pytest.approx(losses[0], rel=1e-6)  # training did move the weights
    with pytest.raises(BackendError):
        await (await backend.submit_load_state(state + "-missing"))

    # Every loss of mathrl.losses trains, from the same state; the clipped ones say how much
    # they clipped. At ratio 1 (the weights that sampled) they all start with the same slope.
    choices = [*(Loss(name) for name in LOSSES), Loss("ppo", clip_low=0.9, clip_high=1.1)]
    for loss in choices:
        await (await backend.submit_load_state(state))
        result = await (await backend.submit_train_step(datums_D, 1e-3, loss))
        assert math.isfinite(result.loss)
        if loss.clips and "clipped:frac" in result.metrics:
            assert 0.0 <= result.metrics["clipped:frac"] <= 1.0
    await (await backend.submit_load_state(state))

    # Misuse the service refuses.
    good = datums_D[0]
    short = dataclasses.replace(good, logprobs=good.logprobs[:-1])
    with pytest.raises(ValueError, match=r"logprobs=\d+") as excinfo:
        await backend.submit_train_step([good, short], 1e-4)
    lengths = short.lengths()
    for name in ("model_input", "target_tokens", "logprobs", "advantages", "mask"):
        assert f"{name}={lengths[name]}" in str(excinfo.value)
    # A mask that is not the model's tokens: an advantage off it (the prompt's first position
    # would be trained on), or none of the model's tokens at all.
    prompt_trained = dataclasses.replace(good, advantages=(1.0, *good.advantages[1:]))
    with pytest.raises(ValueError, match=r"position 0 is not the model's \(mask False\)"):
        await backend.submit_train_step([good, prompt_trained], 1e-4)
    n = len(good.mask)
    nobodys = dataclasses.replace(good, mask=(False,) * n, advantages=(0.0,) * n)
    with pytest.raises(ValueError, match="the mask marks none of its"):
        await backend.submit_train_step([nobodys], 1e-4)
    with pytest.raises(ValueError, match="datum"):
        await backend.submit_train_step([], 1e-4)
    for lr in (0.0, -1e-4, math.nan, math.inf):
        with pytest.raises(ValueError, match="learning_rate"):
            await backend.submit_train_step(datums_D, lr)
    with pytest.raises(BackendError):
        await backend.create_sampler(path0 + "-missing")
