"""The reward's half of `check_adapter`: the reference wins, nothing raises, evaluate agrees.

For each problem it scores the reference completion, ended the way the task
asks, against wrong answers, adversarial text and the reference written
with look-alike digits, through the task's own reward: `compute_reward`, or
`compute_group_rewards` on groups (which must also be deterministic and
permutation-equivariant). It checks that the reference fits the task's
`max_tokens` on the tokenizer in use, and that `evaluate` counts correct
completions rather than averaging rewards.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import random
import threading
from collections.abc import Sequence
from functools import partial
from typing import Any

from mathrl.adapter import Ending, Response
from mathrl.backend import Tokenizer
from mathrl.resolved import prompt_key
from mathrl.rewards import reward_total
from mathrl.testing.checker import Checker
from mathrl.testing.inputs import ADVERSARIAL, WRONG, random_texts
from mathrl.text import shown

FULL_WIDTH = str.maketrans("0123456789", "".join(chr(0xFF10 + d) for d in range(10)))
"""ASCII digits to their full-width look-alikes, which int() and str.isdigit() accept."""


def ended_as_asked(text: str, stops: Sequence[str], chat: bool) -> Response:
    """`text` as the task asks a completion to end: its first stop, end-of-turn, or EOS."""
    if stops:
        return Response(text + stops[0], "stop", stops[0])
    ending: Ending = "end_of_turn" if chat else "end_of_sequence"
    return Response(text, ending)


class RewardChecks:
    """Checks one task's reward and evaluate, recording into a `Checker`."""

    def __init__(self, checker: Checker, tokenizer: Tokenizer) -> None:
        self.c = checker
        self.task = checker.task
        self.adapter = checker.task.adapter
        self.tokenizer = tokenizer
        self.method = "compute_group_rewards" if self.task.rewards_groups else "compute_reward"
        self._cache: dict[tuple[int, str, str, str | None, int], object] = {}
        """compute_reward's answers so far (rewards are pure): the reference is scored once."""

    def run(self, problems: Sequence[Any], others: Sequence[Any]) -> None:
        for problem in problems:
            self.one(problem, others)
        self.evaluate(None)  # whatever happened above, evaluate's range is checked

    def one(self, problem: Any, others: Sequence[Any]) -> None:
        c = self.c
        ok, prompt = c.call("make_prompt", lambda: self.adapter.make_prompt(problem))
        if not ok:
            return
        where = shown(prompt_key(prompt), 40)
        ok, ref = c.call(
            f"reference_completion({where})", lambda: self.adapter.reference_completion(problem)
        )
        if not ok or not c.expect(
            isinstance(ref, str),
            f"reference_completion({where}) must return a str (got {shown(ref)})",
            key="reference-type",
        ):
            return
        stops, chat = self.task.stop_for(prompt), not isinstance(prompt, str)
        for stop in stops:
            c.expect(
                stop not in ref,
                f"reference_completion({where}) = {shown(ref)} contains the stop sequence "
                f"{stop!r}, so sampling would stop before it ends",
                key=f"stop-in-reference-{stop}",
            )
        self.fits(ref, stops, chat, where)
        reference = ended_as_asked(ref, stops, chat)
        wrong = [*WRONG, self._other_reference(ref, others)]
        wrong += [str(w) for w in self.task.wrong_completions(problem)]
        best = self.wins(problem, reference, [ended_as_asked(w, stops, chat) for w in wrong], where)
        if best is None:
            return
        adversarial = [*ADVERSARIAL, *((f"random text {t!r:.20}", t) for t in random_texts(12))]
        for label, text in adversarial:
            # As the task asks it to end, and cut off at the token limit: both happen.
            for response in (ended_as_asked(text, stops, chat), Response(text, "length")):
                scores = self.score([reference, response], problem, f"{label}, {where}")
                c.expect(
                    scores is None or scores[1] <= scores[0],
                    f"{self.method}({label}, {where}) beats the reference completion: "
                    "the reference must earn the most",
                    key=f"beats-{label}",
                )
        if any(d in ref for d in "0123456789"):
            lookalike = ended_as_asked(ref.translate(FULL_WIDTH), stops, chat)
            scores = self.score([reference, lookalike], problem, where)
            c.expect(
                scores is None or scores[1] < scores[0] or self.task.plays_episodes,
                f"{self.method} gives the reference written with full-width digits "
                f"({shown(str(lookalike))}) the reference's reward on {where}: int() and "
                "str.isdigit() accept such digits; match [0-9] instead",
                key="lookalike-digits",
            )
        if self.task.rewards_groups:
            self.group_laws(
                problem, [reference, *(Response(t, "length") for _, t in adversarial[:6])]
            )
        self.evaluate(best)

    def fits(self, ref: str, stops: Sequence[str], chat: bool, where: str) -> None:
        """The reference, ended as asked, fits in the task's max_tokens on this tokenizer."""
        ending = 0 if stops else 1  # the end-of-sequence or end-of-turn token
        needed = len(self.tokenizer.encode(ref + (stops[0] if stops else ""))) + ending
        self.c.expect(
            needed <= self.task.max_tokens,
            f"reference_completion({where}) ended as the task asks takes {needed} tokens on "
            f"{type(self.tokenizer).__name__}, more than max_tokens={self.task.max_tokens}: "
            "raise the task's max_tokens",
            key="max-tokens",
        )

    def wins(
        self, problem: Any, reference: Response, wrong: Sequence[Response], where: str
    ) -> float | None:
        """The reference's reward; it must beat at least one wrong answer and lose to none."""
        scores = self.score([reference, *wrong], problem, f"the reference, {where}")
        if scores is None:
            return None
        best, others = scores[0], scores[1:]
        self.c.expect(
            all(s <= best for s in others),
            f"{self.method} gives a wrong completion more than the reference's {best} on "
            f"{where}: the reference, ended as the task asks, must earn the most",
            key="wrong-beats-reference",
        )
        self.c.expect(
            # An episode's task may reward its turns alone: the episode checks see the whole.
            self.task.plays_episodes or any(s < best for s in others),
            f"{self.method} gave every wrong completion tried ({shown([str(w) for w in wrong])}) "
            f"the reference's reward {best} on {where}: it cannot tell right from wrong",
            key="wrong-not-less",
        )
        return best

    def group_laws(self, problem: Any, group: list[Response]) -> None:
        """Deterministic, and shuffling the group shuffles its rewards alike."""
        first = self.score(group, problem, "a group")
        again = self.score(group, problem, "the same group again")
        if first is None or again is None:
            return
        self.c.expect(
            first == again,
            f"compute_group_rewards gave one group {shown(first)} then {shown(again)}: "
            "rewards must be deterministic",
            key="group-determinism",
        )
        order = list(range(len(group)))
        random.Random("mathrl.testing/shuffle").shuffle(order)
        shuffled = self.score([group[i] for i in order], problem, "the group shuffled")
        self.c.expect(
            shuffled is None or shuffled == [first[i] for i in order],
            "compute_group_rewards is not permutation-equivariant: shuffling the group "
            "changed the rewards, not just their order",
            key="group-equivariance",
        )

    def score(self, group: list[Response], problem: Any, label: str) -> list[float] | None:
        """The rewards of `group` (each alone, or as one group), each checked finite."""
        if self.task.rewards_groups:
            what = f"compute_group_rewards({label})"
            method = self.task.group_rewards
            assert method is not None, "checked for a task that scores groups only"
            ok, values = self.c.call(what, lambda: _resolve(method(list(group), problem)))
            if not ok or not self.c.expect(
                isinstance(values, Sequence) and len(values) == len(group),
                f"{what} must return {len(group)} rewards, one each (got {shown(values)})",
                key="group-length",
            ):
                return None
        else:
            values = []
            for response in group:
                key = (id(problem), str(response), response.ended, response.stop, response.turn)
                if key not in self._cache:
                    ok, value = self.c.call(
                        f"compute_reward({shown(str(response), 30)}, {label})",
                        partial(self.adapter.compute_reward, response, problem),
                    )
                    if not ok:
                        return None
                    self._cache[key] = value
                values.append(self._cache[key])
        totals = [reward_total(v) for v in values]
        if not self.c.expect(
            all(t is not None and math.isfinite(t[0]) for t in totals),
            f"{self.method}({label}) returned {shown(values)}: a reward must be a finite "
            "number or a mapping of names to finite numbers",
            key="finite",
        ):
            return None
        rewards = [t[0] for t in totals if t is not None]
        self.c.seen.extend(rewards)
        return rewards

    def _other_reference(self, ref: str, others: Sequence[Any]) -> str:
        for other in others:
            try:
                text = self.adapter.reference_completion(other)
            except Exception:
                continue  # reported where it is checked
            if isinstance(text, str) and text != ref:
                return text
        return ref + "0"

    def evaluate(self, best: float | None) -> None:
        """evaluate counts correct completions: 0 or 1 for one, their mean for several."""
        c, seen = self.c, sorted(set(self.c.seen))[:50]
        for rewards in ([], [0.0], [1.0, 0.0, 0.5], seen):
            what = f"evaluate({shown(rewards)})"
            ok, value = c.call(what, partial(self.adapter.evaluate, rewards), key="evaluate")
            c.expect(
                not ok or (_is_number(value) and 0 <= value <= 1),
                f"{what} = {shown(value)}: an accuracy must be a number in [0, 1]",
                key="evaluate-range",
            )
        if best is None:
            return
        ok, full = c.call("evaluate", lambda: self.adapter.evaluate([best] * 4), key="evaluate")
        c.expect(
            # An episode's reward holds its turns' too: the episode checks evaluate the whole.
            not ok or full == 1.0 or self.task.plays_episodes,
            f"the reference completion earns {best}, which evaluate([{best}] * 4) scores "
            f"{shown(full)}, not 1.0: reference_completion must return a fully correct "
            "answer, and evaluate must count the maximum reward as correct",
            key="evaluate-reference",
        )
        ok, each = c.call("evaluate", lambda: [self.adapter.evaluate([r]) for r in seen])
        if not ok:
            return
        ok, all_at_once = c.call("evaluate", lambda: self.adapter.evaluate(seen))
        agrees = all(v in (0, 1) for v in each) and (
            not seen or math.isclose(all_at_once, sum(each) / len(seen), abs_tol=1e-9)
        )
        c.expect(
            not ok or agrees,
            f"evaluate does not count correct completions: for single rewards it gives "
            f"{shown(dict(zip(seen, each, strict=True)))}, and for all {len(seen)} at once "
            f"{shown(all_at_once)}; each completion is correct (1) or not (0), and the "
            "accuracy is their mean, never the mean reward",
            key="evaluate-agrees",
        )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _resolve(value: Any) -> Any:
    """`value`, or what it resolves to if awaitable (run on a loop of its own)."""
    if not inspect.isawaitable(value):
        return value

    async def wait() -> Any:
        return await value

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    outcome: list[tuple[bool, Any]] = []  # called from a running loop: use a thread's own

    def run() -> None:
        try:
            outcome.append((True, asyncio.run(wait())))
        except BaseException as exc:  # handed to the caller, who reports it
            outcome.append((False, exc))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    ok, result = outcome[0]
    if not ok:
        raise result
    return result
