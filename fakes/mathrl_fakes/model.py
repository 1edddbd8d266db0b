"""FakeModel: the fake's learning policy, with no I/O and no event loop.

It holds the weights, the Adam state and the reference table, and does what
a training service computes: sample, score a sequence (compute_logprobs),
forward_backward with any loss of `mathrl.losses`, optim_step with Adam, and
state snapshots: a `mathrl_fakes.fake_backend.Policy`. What it learns is each
prompt's reference (`mathrl_fakes.references`), how it writes is
`mathrl_fakes.policy`. `FakeBackend`, the contract, adds latency, ordering,
faults, refusals and checkpoint files around it; the tests' fake of the mint
SDK serves the same policy through its public methods.
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from mathrl.adapter import Ending, Response
from mathrl.backend import ADAM, BackendError, Completion, Datum, SampleParams
from mathrl.losses import IMPORTANCE_SAMPLING, Loss, token_loss
from mathrl_fakes.policy import (
    POSITIONS,
    UNIFORM,
    WIDTH,
    ByteTokenizer,
    Position,
    ReferenceTable,
    Target,
    draw,
    logprob,
    make_target,
    position_at,
    uniforms,
)
from mathrl_fakes.references import TOKENIZER, Known, PromptKey, Reference

P = TypeVar("P")
ADAM_BETA1, ADAM_BETA2, ADAM_EPS = ADAM.beta1, ADAM.beta2, ADAM.eps
"""The Backend contract's optimizer settings (`mathrl.backend.ADAM`)."""
UnknownPrompts = Literal["error", "uniform"]
SERVED_PROMPTS = 4096
"""Prompts of episodes' turns whose completions the fake keeps, to learn the next turns."""


@dataclass
class AdamState:
    """Adam's moment estimates and step count, one entry per parameter."""

    m: list[float] = field(default_factory=lambda: [0.0] * POSITIONS)
    v: list[float] = field(default_factory=lambda: [0.0] * POSITIONS)
    t: int = 0


@functools.lru_cache(maxsize=1 << 16)
def target_of_reference(
    prompt: PromptKey, answer: str, stop: str, wrong: tuple[str, ...], first: tuple[int, ...] = ()
) -> tuple[tuple[int, ...], Target]:
    """A prompt's tokens and its target: the reference's answer, its stop, then EOS. `first`,
    for an episode's later turn, is the episode's first prompt, whose difficulty the turn
    keeps (a problem hard to get right at first stays hard on a second try).

    Kept, for each fake a process makes learns the same task's references again (every
    problem of a task, a few thousand): building them was most of a short fake run's time."""
    prompt_T = tuple(TOKENIZER.encode(prompt) if isinstance(prompt, str) else prompt)
    answer_T = TOKENIZER.encode(answer)
    end_T = (*TOKENIZER.encode(stop), TOKENIZER.eos_token_id)
    wrong_T = [(*TOKENIZER.encode(w), *end_T) for w in wrong]
    target = make_target(first or prompt_T, (*answer_T, *end_T), len(answer_T), wrong_T)
    return prompt_T, target


class FakeModel:
    """Weights, optimizer and targets, and the computations a service runs on them.

    Args:
        references: prompt text -> Reference.
        unknown_prompts: "error" (the default) raises BackendError for a
            prompt the table lacks, naming it; "uniform" samples it from the
            uniform distribution instead.
        more: called on a miss, with the number of sample requests served so
            far, for more references until it returns None (`StepByStep`).
    """

    def __init__(
        self,
        references: Mapping[PromptKey, Reference],
        unknown_prompts: UnknownPrompts = "error",
        more: Callable[[int], Mapping[PromptKey, Reference] | None] | None = None,
    ) -> None:
        self.tokenizer = ByteTokenizer()
        self.requests = 0
        """Sample requests served: how far a run has got."""
        self.unknown_prompts = unknown_prompts
        self.table = ReferenceTable({})
        self._known: dict[tuple[int, ...], Known[Any]] = {}
        """What each prompt may be (`Reference.known`): merged as more problems are told."""
        self._served: OrderedDict[tuple[int, ...], dict[tuple[int, ...], Response]] = OrderedDict()
        """What was sampled after prompts with a next turn, the latest SERVED_PROMPTS of them."""
        self.learn(references)
        self._more = more
        self.theta = [0.0] * POSITIONS
        self.adam = AdamState()
        self.pending_grad: list[float] | None = None

    # -- looking up what a prompt should get --------------------------------------

    def learn(
        self,
        references: Mapping[PromptKey, Reference],
        earlier: int = 0,
        first: tuple[int, ...] = (),
    ) -> None:
        """Add prompts' targets: the reference, its stop, then EOS (`earlier`: see the table;
        `first`: see `target_of_reference`)."""
        targets: dict[tuple[int, ...], Target] = {}
        for prompt, ref in references.items():
            prompt_T = tuple(TOKENIZER.encode(prompt) if isinstance(prompt, str) else prompt)
            if ref.known is not None:
                before = self._known.get(prompt_T)
                known = ref.known if before is None else before.merged(ref.known)
                if known is before:  # no problem it did not know already
                    continue
                if before is not None:
                    ref = known.reference()
                self._known[prompt_T] = known
            _, targets[prompt_T] = target_of_reference(
                prompt, ref.answer, ref.stop, tuple(ref.wrong), first
            )
        self.table.add(targets, earlier)

    def _next_turn(self, context: Sequence[int], stop: Sequence[str]) -> bool:
        """Learn `context` as an episode's next turn, if it is one; True if it was.

        A later turn's prompt is an earlier turn's prompt, one of the
        completions sampled after it, then the environment's reply: the
        completion is read back as the task's reward would see it, and the
        task's `reference_turn` gives the next reference (`Known.then`), for
        the problems whose environment replies so, which ends as the turn's
        request asks: with its first of `stop` (the stops the environment set
        for the turn), or else end-of-sequence.
        """
        n, _ = self.table.split(context)
        prompt = tuple(context[:n])
        known, served = self._known.get(prompt), self._served.get(prompt, {})
        rest = tuple(context[n:])
        read = [(len(tokens), r) for tokens, r in served.items() if rest[: len(tokens)] == tokens]
        if known is None or not known.goes_on or not read:
            return False
        length, response = max(read, key=lambda pair: pair[0])
        if length == len(rest):  # no reply after it: not a next turn
            return False
        first = tuple(context[: self.table.turns(context[:n])[0][0]])  # the episode's first
        reference = known.then(response, rest[:length], rest[length:], self._known[first])
        if reference is None:  # no problem the fake knows replies so
            return False
        reference = replace(reference, stop=stop[0] if stop else "")
        self.learn({tuple(context): reference}, earlier=n, first=first)
        return True

    def target_of(
        self, context: Sequence[int], *, exact: bool, stop: Sequence[str] = ()
    ) -> tuple[int, Target | None]:
        """(prompt length, target) for a context, refusing unknown prompts unless told not to;
        `stop`: the stops of the request that asks for it (see `_next_turn`)."""
        n, target = self._split(context, exact, stop)
        while self._more is not None and not (
            target is not None and (n == len(context) or not exact)
        ):
            references = self._more(self.requests)
            if references is None:
                break
            self.learn(references)
            n, target = self._split(context, exact, stop)
        if target is not None and (n == len(context) or not exact):
            return n, target
        if self.unknown_prompts == "uniform":
            return len(context) if exact else 0, None
        text = self.tokenizer.decode(context)
        shown = repr(text) if len(text) <= 80 else f"{text[:77]!r}..."
        raise BackendError(
            f"the fake backend has no reference for the prompt {shown} ({len(self.table)} known): "
            "the task drew a problem, or its environment gave a reply, other than those the "
            "fake was told of, so build_dataset, heldout_dataset or feedback is not "
            "deterministic (python -m mathrl check-adapter checks it); from Python, build the "
            "fake with FakeBackend.for_run(task, mathrl.run_problems(task, config)), with "
            "first_step=k + 1 to resume after step k, or with for_problems(task, problems)"
        )

    def _split(
        self, context: Sequence[int], exact: bool, stop: Sequence[str]
    ) -> tuple[int, Target | None]:
        """`table.split`, after learning `context` as an episode's next turn if it is one."""
        n, target = self.table.split(context)
        if exact and n != len(context) and target is not None and self._next_turn(context, stop):
            n, target = self.table.split(context)
        return n, target

    # -- sampling -----------------------------------------------------------------

    def sample(
        self,
        theta: Sequence[float],
        prompt_T: Sequence[int],
        key: str,
        num_samples: int,
        params: SampleParams,
    ) -> list[Completion]:
        """`num_samples` completions under `theta`; sample g draws from `uniforms(key/g)`."""
        self.requests += 1
        _, target = self.target_of(prompt_T, exact=True, stop=params.stop)
        drawn = [
            self._complete(theta, target, uniforms(f"{key}/{g}", params.max_tokens), params)
            for g in range(num_samples)
        ]
        prompt = tuple(prompt_T)
        known = self._known.get(prompt)
        if known is not None and known.goes_on:
            served = self._served.setdefault(prompt, {})
            for completion, response in drawn:
                served[completion.tokens] = response
            self._served.move_to_end(prompt)
            if len(self._served) > SERVED_PROMPTS:
                self._served.popitem(last=False)
        return [completion for completion, _ in drawn]

    def _complete(
        self,
        theta: Sequence[float],
        target: Target | None,
        u_T: list[float],
        params: SampleParams,
    ) -> tuple[Completion, Response]:
        """One completion, and how it reads as a `Response` (how sampling ended it)."""
        tokens: list[int] = []
        logprobs: list[float] = []
        text = bytearray()
        eos = self.tokenizer.eos_token_id
        ended: Ending = "length"
        stop: str | None = None
        stops = [(s, s.encode("utf-8", "surrogatepass")) for s in params.stop if s]
        for u in u_T:
            token, lp = draw(theta, position_at(target, tokens), u, params.temperature)
            tokens.append(token)
            logprobs.append(lp)
            if token == eos:  # also the fake's end of turn
                ended = "end_of_turn" if params.end_of_turn else "end_of_sequence"
                break
            text.append(token)
            stop = next((s for s, encoded in stops if text.endswith(encoded)), None)
            if stop is not None:
                ended = "stop"
                break
        completion = Completion(tuple(tokens), tuple(logprobs))
        return completion, Response(self.tokenizer.decode(text), ended, stop, tokens=len(tokens))

    # -- training -----------------------------------------------------------------

    def positions_of(self, datum: Datum) -> list[Position]:
        """The policy's distribution at each position the datum scores.

        An episode's datum holds several turns: each position is read against
        the prompt of the latest turn that started at or before it.
        """
        full = (*datum.model_input, datum.target_tokens[-1])
        self.target_of(full, exact=False)  # refuses an unknown prompt, naming it
        turns = self.table.turns(full)
        steps = []
        for i in range(len(datum.target_tokens)):
            started = [(n, target) for n, target in turns if n <= i + 1]
            if not started:
                steps.append(UNIFORM)
                continue
            n, target = started[-1]
            steps.append(position_at(target, full[n : i + 1]))
        return steps

    def logprobs(self, datum: Datum, theta: Sequence[float] | None = None) -> list[float]:
        """The policy's logprob of each target token (forward's output): under the current
        weights, or `theta`."""
        weights = self.theta if theta is None else theta
        return [
            logprob(weights, at, token)
            for at, token in zip(self.positions_of(datum), datum.target_tokens, strict=True)
        ]

    def sequence_logprobs(self, theta: Sequence[float], tokens_T: Sequence[int]) -> list[float]:
        """Under `theta`, the logprob of each token after the ones before it (not the first)."""
        if len(tokens_T) < 2:
            return []
        n = len(tokens_T) - 1
        pseudo = Datum(
            tuple(tokens_T[:-1]), tuple(tokens_T[1:]), (0.0,) * n, (0.0,) * n, (True,) * n
        )
        return self.logprobs(pseudo, theta)

    def forward_backward(
        self, datums_D: Sequence[Datum], loss_fn: Loss = IMPORTANCE_SAMPLING
    ) -> tuple[dict[str, float], list[list[float]]]:
        """`loss_fn` summed over every position (`mathrl.losses.token_loss`); its gradient
        accumulates until optim_step. Returns the metrics the service reports (`loss:sum`,
        and for a loss that clips `clipped:frac`, the share of the model's tokens (the
        datums' masks) whose ratio the clip bound), and the learner's logprob of each
        datum's target tokens (forward's output)."""
        grad = list(self.pending_grad or [0.0] * len(self.theta))
        loss, clipped, scored = 0.0, 0, 0
        every_position = loss_fn.every_position
        learner_D: list[list[float]] = []
        for datum in datums_D:
            learner_T: list[float] = []
            learner_D.append(learner_T)
            for at, token, sampled_lp, adv, mine in zip(
                self.positions_of(datum),
                datum.target_tokens,
                datum.logprobs,
                datum.advantages,
                datum.mask,
                strict=True,
            ):
                lp = logprob(self.theta, at, token)
                learner_T.append(lp)
                if not mine and not every_position:
                    continue  # A = 0 off the mask: contributes exactly 0 to loss and gradient
                term = token_loss(loss_fn, lp, sampled_lp, adv)
                loss += term.loss
                scored += mine
                clipped += term.clipped and mine
                if at.target is not None and at.learnable:
                    p = math.exp(lp if token == at.target else logprob(self.theta, at, at.target))
                    dlogp_dlogit = (1.0 if token == at.target else 0.0) - p
                    grad[at.position] += term.gradient * dlogp_dlogit * WIDTH
        self.pending_grad = grad
        metrics = {"loss:sum": loss}
        if loss_fn.clips:
            metrics["clipped:frac"] = clipped / scored if scored else 0.0
        return metrics, learner_D

    def optim_step(self, lr: float) -> None:
        """One Adam step on the accumulated gradient, which it then clears."""
        grad, self.pending_grad = self.pending_grad, None
        if grad is None:
            raise BackendError("optim_step without a preceding forward_backward")
        adam = self.adam
        adam.t += 1
        for j, g in enumerate(grad):
            adam.m[j] = ADAM_BETA1 * adam.m[j] + (1 - ADAM_BETA1) * g
            adam.v[j] = ADAM_BETA2 * adam.v[j] + (1 - ADAM_BETA2) * g * g
            m_hat = adam.m[j] / (1 - ADAM_BETA1**adam.t)
            v_hat = adam.v[j] / (1 - ADAM_BETA2**adam.t)
            self.theta[j] -= lr * m_hat / (math.sqrt(v_hat) + ADAM_EPS)

    # -- state --------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Weights and optimizer, as JSON-ready data (no pending gradient: a step boundary)."""
        adam = self.adam
        return {"theta": list(self.theta), "m": list(adam.m), "v": list(adam.v), "t": adam.t}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore `state()`; any gradient accumulated since is dropped."""
        self.theta, self.adam = parse_state(state)
        self.pending_grad = None

    def check_state(self, state: Mapping[str, Any]) -> None:
        """KeyError, TypeError or ValueError unless `state` is one `load_state` takes."""
        parse_state(state)

    def parse_weights(self, values: Any) -> list[float]:
        """`parse_weights`: the weights of a saved `theta`."""
        return parse_weights(values)


def parse_state(state: Mapping[str, Any]) -> tuple[list[float], AdamState]:
    """`FakeModel.state()`'s weights and optimizer, read back; KeyError, TypeError or
    ValueError if `state` is not one."""
    adam = AdamState(parse_weights(state["m"]), parse_weights(state["v"]), int(state["t"]))
    return parse_weights(state["theta"]), adam


def parse_weights(values: Any) -> list[float]:
    """`values` as the fake's parameter vector; ValueError or TypeError if it is not one."""
    out = [float(x) for x in values]
    if len(out) != POSITIONS or not all(math.isfinite(x) for x in out):
        raise ValueError(f"expected {POSITIONS} finite numbers (got {values!r:.80})")
    return out
