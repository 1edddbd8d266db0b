"""The reward's half of `check_adapter`: the reference wins, and nothing raises.

For each problem it scores the reference completion, ended the way the task
asks, against wrong answers (the task's `wrong_completions` among them),
adversarial text and the reference written with look-alike digits, through
the task's own reward: `compute_reward`, or `compute_group_rewards` on
groups (whose own laws are `group_checks`). It scores the reference and the
wrong completions with every ending sampling can give them, so that partial
credit shows to the evaluate checks (`evaluate_checks`), and warns when the
reference cut off at the token limit earns as much as the finished one. It
checks that the reference fits the task's `max_tokens` on the tokenizer in use.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import threading
from collections.abc import Sequence
from functools import partial
from typing import Any

from mathrl.adapter import Ending, Response
from mathrl.backend import Tokenizer
from mathrl.rewards import ended_tokens, response_key, reward_total, text_tokens
from mathrl.testing.checker import Checker
from mathrl.testing.inputs import ADVERSARIAL, WRONG, random_texts
from mathrl.text import describe, shown

FULL_WIDTH = str.maketrans("0123456789", "".join(chr(0xFF10 + d) for d in range(10)))
"""ASCII digits to their full-width look-alikes, which int() and str.isdigit() accept."""
ENDINGS: tuple[Ending, ...] = ("end_of_turn", "end_of_sequence", "length")
"""The endings sampling can give any completion, besides a stop sequence."""


def sampled(
    tokenizer: Tokenizer, text: str, ended: Ending, stop: str | None = None, turn: int = 1
) -> Response:
    """`text` as a `Response` sampled on `tokenizer` would be, ended `ended`: its `tokens`
    are the text's, and the end-of-turn or end-of-sequence token that ended it."""
    closing = ended in ("end_of_turn", "end_of_sequence")
    return Response(text, ended, stop, turn, len(text_tokens(tokenizer, text)) + closing)


def ended_as_asked(text: str, stops: Sequence[str], chat: bool, tokenizer: Tokenizer) -> Response:
    """`text` as the task asks a completion to end: its first stop, end-of-turn, or EOS."""
    if stops:
        return sampled(tokenizer, text + stops[0], "stop", stops[0])
    return sampled(tokenizer, text, "end_of_turn" if chat else "end_of_sequence")


def wrong_name(text: str) -> str:
    """How a message names one of the wrong texts every task is given (`WRONG`)."""
    return "the empty completion" if not text else shown(text, 30)


class RewardChecks:
    """Checks one task's reward, recording into a `Checker`."""

    def __init__(self, checker: Checker, tokenizer: Tokenizer) -> None:
        self.c = checker
        self.task = checker.task
        self.adapter = checker.task.adapter
        self.tokenizer = tokenizer
        self.method = "compute_group_rewards" if self.task.rewards_groups else "compute_reward"
        self._cache: dict[tuple[object, ...], object] = {}
        """compute_reward's answers so far (rewards are pure): the reference is scored once."""

    def one(self, problem: Any, others: Sequence[Any]) -> tuple[Response, float, str] | None:
        """Check the reward on `problem`; the reference, its reward and the problem's name
        for the checks that follow, or None if a call failed a check."""
        c = self.c
        ok, prompt = c.call("make_prompt", lambda: self.adapter.make_prompt(problem))
        if not ok:
            return None
        where = c.name(prompt)
        ok, ref = c.call(
            f"reference_completion({where})", lambda: self.adapter.reference_completion(problem)
        )
        if not ok and c.no_reference is not None:  # the task has none: what needs none
            self.hostile(problem, prompt, where)
            return None
        if not ok or not c.expect(
            isinstance(ref, str),
            f"reference_completion({where}) must return a str (got {shown(ref)})",
            key="reference-type",
        ):
            return None
        stops, chat = self.task.stop_for(prompt), not isinstance(prompt, str)
        for stop in stops:
            c.expect(
                stop not in ref,
                f"reference_completion({where}) = {shown(ref)} contains the stop sequence "
                f"{stop!r}, so sampling would stop before it ends",
                key=f"stop-in-reference-{stop}",
            )
        self.fits(ref, stops, where)
        reference = ended_as_asked(ref, stops, chat, self.tokenizer)
        ok, own = c.call(
            f"wrong_completions({where})", partial(self.task.wrong_completions, problem)
        )
        own = [str(w) for w in own] if ok and isinstance(own, list | tuple) else []
        wrong = [(wrong_name(w), w) for w in WRONG]
        wrong.append(("another problem's reference", self._other_reference(ref, others)))
        wrong += [(f"wrong_completions' {shown(w, 30)}", w) for w in own]
        won = self.wins(problem, reference, wrong, len(own), stops, chat, where)
        if won is None:
            return None
        best, tells = won
        if not self.task.plays_episodes:  # (an episode's is its whole reward: `EpisodeChecks`)
            self.c.references.append(best)
        if not tells:  # a reference that earns no more than wrong answers: say only that
            return reference, best, where
        self.cut_off(problem, reference, best, where)
        self.endings(problem, [("the reference", ref), *wrong[len(wrong) - len(own) :]], where)
        adversarial = [*ADVERSARIAL, *((f"random text {t!r:.20}", t) for t in random_texts(12))]
        for label, text in adversarial:
            # As the task asks it to end, and cut off at the token limit: both happen.
            for response in (
                ended_as_asked(text, stops, chat, self.tokenizer),
                sampled(self.tokenizer, text, "length"),
            ):
                scores = self.score([reference, response], problem, where, ["the reference", label])
                c.expect(
                    scores is None or scores[1] <= scores[0],
                    f"{self.method}({label}, {where}) beats the reference completion: "
                    "the reference must earn the most",
                    key=f"beats-{label}",
                )
        if any(d in ref for d in "0123456789"):
            lookalike = ended_as_asked(ref.translate(FULL_WIDTH), stops, chat, self.tokenizer)
            names = ["the reference", "the reference in full-width digits"]
            scores = self.score([reference, lookalike], problem, where, names)
            c.expect(
                scores is None or scores[1] < scores[0] or self.task.plays_episodes,
                f"{self.method} gives the reference written with full-width digits "
                f"({shown(str(lookalike))}) the reference's reward on {where}: int() and "
                "str.isdigit() accept such digits; match [0-9] instead",
                key="lookalike-digits",
            )
        return reference, best, where

    def hostile(self, problem: Any, prompt: Any, where: str) -> None:
        """Wrong and hostile completions, ended either way, each scored alone: finite, and
        never raising (for a task without references, which nothing can be compared with)."""
        stops, chat = self.task.stop_for(prompt), not isinstance(prompt, str)
        texts = [*((wrong_name(w), w) for w in WRONG), *ADVERSARIAL]
        texts += [(f"random text {t!r:.20}", t) for t in random_texts(12)]
        for label, text in texts:
            for response in (
                ended_as_asked(text, stops, chat, self.tokenizer),
                sampled(self.tokenizer, text, "length"),
            ):
                self.score([response], problem, where, [label])

    def fits(self, ref: str, stops: Sequence[str], where: str) -> None:
        """The reference, ended as asked, fits in the task's max_tokens on this tokenizer."""
        needed = ended_tokens(self.tokenizer, ref, stops)
        self.c.expect(
            needed <= self.task.max_tokens,
            f"reference_completion({where}) ended as the task asks takes {needed} tokens on "
            f"{type(self.tokenizer).__name__}, more than max_tokens={self.task.max_tokens}: "
            "raise the task's max_tokens",
            key="max-tokens",
        )

    def wins(
        self,
        problem: Any,
        reference: Response,
        wrong: Sequence[tuple[str, str]],
        own: int,
        stops: Sequence[str],
        chat: bool,
        where: str,
    ) -> tuple[float, bool] | None:
        """The reference's reward; it must beat at least one wrong answer and lose to none,
        and beat each of the task's own `wrong_completions` (the last `own` of `wrong`).
        With it, whether it beats any: if not, the checks that compare with it would mislead."""
        group = [
            reference,
            *(ended_as_asked(text, stops, chat, self.tokenizer) for _, text in wrong),
        ]
        scores = self.score(group, problem, where, ["the reference", *(n for n, _ in wrong)])
        if scores is None:
            return None
        best, others = scores[0], scores[1:]
        self.c.expect(  # a task with tools: the reference's first turn may be a call alone
            self.task.toolbox is not None or all(s <= best for s in others),
            f"{self.method} gives a wrong completion more than the reference's {best} on "
            f"{where}: the reference, ended as the task asks, must earn the most",
            key="wrong-beats-reference",
        )
        # An episode's task may reward its turns alone: the episode checks see the whole.
        for (name, _), score in zip(
            wrong[len(wrong) - own :], others[len(others) - own :], strict=True
        ):
            self.c.expect(
                self.task.plays_episodes or score < best,
                f"{self.method} gives {name} {score:g}, as much as the reference on {where}: "
                "the task's wrong_completions must earn less than the reference",
                key="wrong-completion-not-less",
            )
        tells = self.c.expect(
            self.task.plays_episodes or any(s < best for s in others),
            f"{self.method} gave every wrong completion tried "
            f"({shown([str(w) for w in group[1:]])}) the reference's reward {best} on {where}: "
            "it cannot tell right from wrong",
            key="wrong-not-less",
        )
        return best, tells

    def cut_off(self, problem: Any, reference: Response, best: float, where: str) -> None:
        """A warning when the reference cut off at the token limit earns the finished one's
        reward: the contract cannot know the task's intent, but it is what the task's ending
        (a stop, a closing sentinel) is for."""
        if self.task.plays_episodes or self.task.cut_off_graded is not None:
            return  # the episode checks play it cut off; or the task says why it pays it
        cut = sampled(self.tokenizer, reference.text, "length")
        names = ["the reference", "the reference cut off at the token limit"]
        scores = self.score([reference, cut], problem, where, names)
        self.c.warn(
            scores is None or scores[1] < scores[0],
            f"{self.method} pays the reference cut off at the token limit (ended='length') "
            f"{scores[1] if scores else best:g}, as much as the reference ended as the task asks, "
            f"on {where}: a completion that ran out of tokens earns full reward; if the task "
            "needs its ending, pay less when completion.ended == 'length'",
            key="cut-off",
        )

    def endings(self, problem: Any, texts: Sequence[tuple[str, str]], where: str) -> None:
        """The reference and the task's wrong completions with every ending, so that the
        evaluate checks see the rewards (partial credit, say) each ending earns."""
        group, names = [], []
        for name, text in texts:
            for ending in ENDINGS:
                group.append(sampled(self.tokenizer, text, ending))
                names.append(f"{name} (ended={ending!r})")
        label = "the reference" + (" and wrong_completions" if len(texts) > 1 else "")
        self.score(group, problem, where, names, f"{label}, each with every ending")

    def score(
        self,
        group: list[Response],
        problem: Any,
        where: str,
        names: Sequence[str] | None = None,
        label: str | None = None,
    ) -> list[float] | None:
        """The rewards of `group` (each alone, or as one group), each checked finite.

        `names` name each member, `label` the group, in a message about them.
        """
        names = list(names or (shown(str(r), 30) for r in group))
        if self.task.rewards_groups:
            values = self._group(group, problem, where, names, label)
        else:
            values = []
            for response, name in zip(group, names, strict=True):
                key = (id(problem), *response_key(response))
                if key not in self._cache:
                    ok, value = self.c.call(
                        f"compute_reward({name}, {where})",
                        partial(self.adapter.compute_reward, response, problem),
                        key="compute_reward",
                    )
                    if not ok or not self._finite(f"compute_reward({name}, {where})", value):
                        return None
                    self._cache[key] = value
                values.append(self._cache[key])
        if values is None:
            return None
        rewards = [t[0] for t in map(reward_total, values) if t is not None]
        self.c.seen.extend(rewards)
        return rewards

    def _finite(self, what: str, value: object) -> bool:
        total = reward_total(value)
        return self.c.expect(
            total is not None and math.isfinite(total[0]),
            f"{what} returned {shown(value)}: a reward must be a finite number or a mapping "
            "of names to finite numbers",
            key="finite",
        )

    def _group(
        self, group: list[Response], problem: Any, where: str, names: list[str], label: str | None
    ) -> list[object] | None:
        """`compute_group_rewards` on `group`; on a failure, the message names the member
        that fails alone too, if one does, else the group."""
        outcome = self._judged(group, problem)
        if not isinstance(outcome, str | BaseException):
            self.c.checks += 1
            return outcome
        culprit = None
        if len(group) > 1:
            culprit = next(
                (n for r, n in zip(group, names, strict=True) if not self._fine([r], problem)),
                None,
            )
        held = f"a group holding {culprit}" if culprit else label or f"a group of {len(group)}"
        what = f"compute_group_rewards({held}, {where})"
        if isinstance(outcome, BaseException):
            self.c.expect(
                False,
                f"{what} raised {type(outcome).__name__}: {describe(outcome, 80)}",
                f"raised-compute_group_rewards-{type(outcome).__name__}",
            )
        elif outcome == "length":
            self.c.expect(
                False,
                f"{what} must return {len(group)} rewards, one each "
                f"(got {shown(self._values(group, problem))})",
                key=f"group-length-{label}",
            )
        else:
            self._finite(what, self._values(group, problem))
        return None

    def _judged(self, group: list[Response], problem: Any) -> list[object] | str | BaseException:
        """The group's rewards; or what is wrong with them ("length" or "finite"); or the
        exception `compute_group_rewards` raised."""
        try:
            values = self._values(group, problem)
        except Exception as exc:
            return exc
        if not (isinstance(values, Sequence) and len(values) == len(group)):
            return "length"
        totals = [reward_total(v) for v in values]
        if not all(t is not None and math.isfinite(t[0]) for t in totals):
            return "finite"
        return list(values)

    def _fine(self, group: list[Response], problem: Any) -> bool:
        return not isinstance(self._judged(group, problem), str | BaseException)

    def _values(self, group: list[Response], problem: Any) -> Any:
        method = self.task.group_rewards
        assert method is not None, "called for a task that scores groups only"
        return _resolve(method(list(group), problem))

    def _other_reference(self, ref: str, others: Sequence[Any]) -> str:
        for other in others:
            try:
                text = self.adapter.reference_completion(other)
            except Exception:
                continue  # reported where it is checked
            if isinstance(text, str) and text != ref:
                return text
        return ref + "0"


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
