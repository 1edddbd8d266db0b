"""The episode half of `check_adapter`, for a task whose environment answers (`feedback`).

For each problem it plays episodes without a model: the reference's
(`reference_completion`, then `reference_turn` if the environment goes on),
the reference's cut off at the token limit at every turn, a recovery (a
wrong first turn, then the reference's turns), each of the task's
`wrong_completions` (valid but wrong moves, which reach the game's main
branch) repeated and recovered from, and turns of wrong or adversarial text,
each repeated up to `max_turns`. `feedback` must return a `Feedback` every
time (never raise on what a model may write), with a finite reward, and the
same one for the same history. The reference episode must end (a reply of
None) within `max_turns`, earn the most of all of them and evaluate as
correct; `wrong_completions` played every turn must earn less; the recovery
must earn no less than staying wrong; the episodes that end in the
reference's turns must fit the episode's token budget on the tokenizer in
use. The cut-off reference earning as much is a warning, not a violation.

Per-turn limits (`Feedback.stop`, `Feedback.max_tokens`): every feedback's
must be valid (`mathrl.episodes.limits_error`), and its max_tokens at most
the episode's budget; each of the reference's later turns must fit its own
turn's limits, those its feedback set or else the task's: contain none of
the turn's stop sequences, and take, ended as the turn asks, no more than
the turn's max_tokens.

Tools: for a task with tools every episode is played as a run plays it, its
tools opened, each turn's calls answered by them (a turn without calls goes to
`feedback`, or ends the episode) and closed; the reference episode's calls
must all be answered without an error, and the same when it is played again
after every other episode and the tools' own checks (`tool_checks`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from mathrl.adapter import Ending, Feedback, Prompt, Response
from mathrl.backend import Tokenizer
from mathrl.episodes import limits_error, reply_tokens
from mathrl.rewards import ended_tokens, metric_values, reward_total, text_tokens
from mathrl.testing.checker import Checker
from mathrl.testing.inputs import ADVERSARIAL, WRONG
from mathrl.testing.metric_checks import SHAPE
from mathrl.testing.reward_checks import RewardChecks, ended_as_asked, sampled
from mathrl.testing.tool_checks import ToolSessions
from mathrl.text import shown
from mathrl.tools import Session, ToolCall

RECOVERING_FROM = WRONG[1]
"""The recovery episode's first turn: wrong, so the environment answers it."""
CUT_OFF = "the reference episode cut off at the token limit"


@dataclass(frozen=True, slots=True)
class _Played:
    label: str
    final: Response
    said: tuple[float, ...]
    """The feedback's reward at each turn."""
    finished: bool
    """True when feedback ended the episode (a reply of None) within `max_turns`."""
    calls: tuple[tuple[int, ToolCall], ...] = ()
    """Each tool call the episode made, with its turn, and its answer."""


class EpisodeChecks:
    """Checks one task's `feedback` and reference episodes, recording into a `Checker`."""

    def __init__(self, checker: Checker, rewards: RewardChecks, tokenizer: Tokenizer) -> None:
        self.c, self.rewards, self.tokenizer = checker, rewards, tokenizer
        self.task = checker.task
        self.adapter = checker.task.adapter
        toolbox = self.task.toolbox
        self.tools = ToolSessions(checker, tokenizer, toolbox) if toolbox is not None else None
        if self.tools is not None:
            self.tools.schemas()

    def run(self, problems: Sequence[Any]) -> None:
        for problem in problems:
            self.one(problem)

    def one(self, problem: Any) -> None:
        ok, prompt = self.c.call("make_prompt", lambda: self.adapter.make_prompt(problem))
        if not ok:
            return
        where = self.c.name(prompt)
        reference = self.play(problem, prompt, where, "the reference episode")
        cut = self.play(problem, prompt, where, CUT_OFF, ended="length")
        recovery = self.play(problem, prompt, where, "the recovery episode", RECOVERING_FROM)
        wrong = self.play(problem, prompt, where, "the wrong episode", RECOVERING_FROM, True)
        if reference is None or recovery is None or wrong is None:
            return
        said = (
            "feedback gave a reply after each of its {} turns; once the episode is won, "
            "feedback must end it with Feedback(reply=None)"
            if self.tools is None
            else "its turns were answered up to the last of its {} turns (max_turns); the "
            "reference's answer is a turn without a tool call, which feedback, if the task "
            "has one, ends with Feedback(reply=None)"
        )
        self.c.expect(
            reference.finished,
            f"the reference episode of {where} never ends: {said.format(self.task.max_turns)}",
            key="never-ends",
        )
        self.reference_calls(reference, where)
        ok, own = self.c.call(
            f"wrong_completions({where})", lambda: self.task.wrong_completions(problem)
        )
        own_played = [
            self.play(problem, prompt, where, f"{how} wrong_completions' {shown(w, 30)}", w, stay)
            for w in (own if ok and isinstance(own, list | tuple) else [])
            for how, stay in (("the episode of", True), ("the recovery from", False))
        ]
        others = [
            self.play(problem, prompt, where, f"an episode of {label}", text, True, "length")
            for label, text in ADVERSARIAL
        ]
        if self.tools is not None:
            self.tools.probe(problem, where)
            again = self.play(problem, prompt, where, "the reference episode, played again")
            self.c.expect(
                again is None or again.calls == reference.calls,
                f"the tools answered the reference episode of {where} "
                f"{shown([c.result for _, c in reference.calls], 60)} at first, then "
                f"{shown([c.result for _, c in again.calls] if again else [], 60)} when it was "
                "played again: a tool must keep no state across episodes (in its module, its "
                "class or the task), only on the episode's own tools object, and answer the "
                "same calls alike",
                key="tools-state",
            )
        played = [reference, recovery, wrong, *(o for o in [cut, *own_played, *others] if o)]
        # The episodes' last turns scored together (one group, for a task that scores groups).
        ends = self.rewards.score(
            [p.final for p in played],
            problem,
            where,
            [f"the last turn of {p.label}" for p in played],
        )
        if ends is None:
            return
        # Added as the loop adds them (`math.fsum`), so no rounding tells them apart.
        best, *totals = [math.fsum((*p.said, end)) for p, end in zip(played, ends, strict=True)]
        self.c.seen.extend([best, *totals])
        self.c.references.append(best)
        self.c.expect(
            any(total < best for total in totals),
            f"every episode tried earns the reference episode's {best:g} on {where}: the "
            "task's rewards cannot tell a right episode from a wrong one",
            key="episodes-all-equal",
        )
        for p, total in zip(played[1:], totals, strict=True):
            self.c.expect(
                total <= best,
                f"{p.label} earns {total:g}, more than the reference episode's {best:g} on "
                f"{where}: the reference must earn the most",
                key=f"beats-{p.label}",
            )
            if p.label.startswith("the episode of wrong_completions"):
                self.c.expect(
                    total < best,
                    f"{p.label} at every turn earns {total:g}, as much as the reference "
                    f"episode on {where}: the task's wrong_completions, played every turn, "
                    "must earn less than the reference episode",
                    key="wrong-completion-episode",
                )
            if p.label == CUT_OFF:
                self.c.warn(
                    total < best or self.task.cut_off_graded is not None,  # as it says, and why
                    f"{CUT_OFF} (every turn ended='length') earns {total:g}, as much as the "
                    f"reference episode on {where}: a turn that ran out of tokens earns full "
                    "reward; if the task needs its ending, pay less when "
                    "completion.ended == 'length'",
                    key="cut-off",
                )
        self.c.expect(
            totals[0] >= totals[1],
            f"the recovery episode (a wrong first turn, then the reference's) earns "
            f"{totals[0]:g}, less than staying wrong ({totals[1]:g}) on {where}: "
            "reference_turn must play the best turn after any history",
            key="recovery",
        )
        ok, full = self.c.call("evaluate", lambda: self.adapter.evaluate([best] * 4))
        self.c.expect(
            not ok or full == 1.0,
            f"the reference episode earns {best:g}, which evaluate([{best:g}] * 4) scores "
            f"{shown(full)}, not 1.0 on {where}: reference_completion and reference_turn must "
            "play a fully correct episode",
            key="episode-evaluate",
        )

    def play(
        self,
        problem: Any,
        prompt: Prompt,
        where: str,
        label: str,
        first: str | None = None,
        repeat: bool = False,
        ended: Ending | None = None,
    ) -> _Played | None:
        """One episode, as far as the environment lets it go; None if a call failed a check.

        Turn 1 is `first` (default: the reference's), later turns `first` again if
        `repeat`, else the reference's; each ends as the task asks unless `ended`.
        """
        session = None
        if self.tools is not None:
            session = self.tools.open(problem, where)
            if session is None:
                return None
        try:
            return self._played(problem, prompt, where, label, first, repeat, ended, session)
        finally:
            if self.tools is not None and session is not None:
                self.tools.close(session, where)

    def _played(
        self,
        problem: Any,
        prompt: Prompt,
        where: str,
        label: str,
        first: str | None,
        repeat: bool,
        ended: Ending | None,
        session: Session | None,
    ) -> _Played | None:
        chat = not isinstance(prompt, str)
        stops = self.task.stop_for(prompt)
        set_by: tuple[Feedback, str] | None = None  # the feedback that set the turn's limits
        history: list[Response] = []
        used, said, finished = 0, list[float](), False
        calls: list[tuple[int, ToolCall]] = []
        for turn in range(1, self.task.max_turns + 1):
            text = first if first is not None and (turn == 1 or repeat) else None
            if text is None:
                text = self.reference_turn(problem, history, f"{where}, turn {turn}")
                if text is None:
                    return None
            response = (
                ended_as_asked(text, stops, chat, self.tokenizer)
                if ended is None
                else sampled(self.tokenizer, text, ended)
            )
            history.append(
                Response(str(response), response.ended, response.stop, turn, response.tokens)
            )
            if not repeat and (turn > 1 or first is None):  # a reference turn: within limits
                self.fits(text, stops, where, turn, set_by)
            turn_T = text_tokens(self.tokenizer, str(response))
            closing = {
                "end_of_turn": [self.tokenizer.end_of_turn_id],
                "end_of_sequence": [self.tokenizer.eos_token_id],
            }
            turn_T += closing.get(response.ended, [])
            used += len(turn_T)
            toolbox = self.task.toolbox
            made = toolbox.parse(str(response)) if toolbox is not None and session else []
            if self.tools is not None and session is not None and made:
                if turn == self.task.max_turns:  # the last turn's calls are never run
                    break
                what = f"turn {turn} of {label} of {where}"
                ran = sum(not c.result.startswith("Error: not run:") for _, c in calls)
                answered = self.tools.answer(session, made, ran, what)
                if answered is None:
                    return None
                calls += [(turn, a) for a in answered]
                used += self.tools.reply_tokens(turn_T, answered, what)
                set_by, stops = None, self.task.stop_for(prompt)
                continue
            if self.task.feedback is None:  # a task with tools alone: no call, the answer
                finished = True
                break
            answer = self.feedback(problem, history, label)
            if answer is None:
                return None
            said.append(answer[1])
            if answer[0].reply is None or turn == self.task.max_turns:
                finished = answer[0].reply is None
                break
            used += len(reply_tokens(self.tokenizer, self.task, prompt, turn_T, answer[0]))
            sets = answer[0].stop is not None or answer[0].max_tokens is not None
            set_by = (answer[0], f"feedback(turn {turn} of {label})") if sets else None
            stops = self.task.stop_for(prompt) if answer[0].stop is None else tuple(answer[0].stop)
        budget = self.task.episode_budget(self.task.max_tokens)
        self.c.expect(
            repeat or used <= budget,
            f"{label} of {where} takes {used} tokens on {type(self.tokenizer).__name__}, "
            f"more than the episode's budget of {budget}: raise the task's episode_tokens",
            key="episode-budget",
        )
        return _Played(label, history[-1], tuple(said), finished, tuple(calls))

    def reference_calls(self, reference: _Played, where: str) -> None:
        """The reference episode's calls name the task's tools, with arguments that fit."""
        wrong = [(turn, c) for turn, c in reference.calls if c.failed]
        turn, call = wrong[0] if wrong else (0, None)
        self.c.expect(
            call is None,
            f"the reference episode of {where} makes a tool call answered with an error (turn "
            f"{turn}: {shown(call.result if call else '', 80)}): its calls must name the task's "
            f"tools ({', '.join(self.task.toolbox.tools) if self.task.toolbox else ''}), with "
            "arguments that fit, in its tool_format",
            key="reference-calls",
        )

    def fits(
        self,
        text: str,
        stops: Sequence[str],
        where: str,
        turn: int,
        set_by: tuple[Feedback, str] | None,
    ) -> None:
        """A reference turn fits its turn's limits: those its feedback set (`set_by`, with
        the call that returned it), or the task's. The first turn's stops are the reward
        checks' (`stop-in-reference`)."""
        where = f"{where}, turn {turn}"
        if turn > 1:
            for stop in stops:
                if set_by is not None and set_by[0].stop is not None:
                    origin = f"the stop sequence {stop!r} that {set_by[1]} set for it"
                    fix = f"leave {stop!r} out of Feedback.stop"
                else:
                    origin = f"the task's stop sequence {stop!r}"
                    fix = "set the turn's own stops (Feedback.stop)"
                self.c.expect(
                    stop not in text,
                    f"reference_turn({where}) = {shown(text, 40)} contains {origin}, so "
                    f"sampling would stop before it ends: {fix}, or write the reference "
                    "without it",
                    key=f"stop-in-turn-{stop}",
                )
        if set_by is None or set_by[0].max_tokens is None:
            self.rewards.fits(text, stops, where)
            return
        needed = ended_tokens(self.tokenizer, text, stops)
        self.c.expect(
            needed <= set_by[0].max_tokens,
            f"reference_turn({where}) ended as its turn asks takes {needed} tokens on "
            f"{type(self.tokenizer).__name__}, more than the max_tokens={set_by[0].max_tokens} "
            f"that {set_by[1]} set for it: raise Feedback.max_tokens to at least {needed}",
            key="turn-max-tokens",
        )

    def reference_turn(self, problem: Any, history: Sequence[Response], where: str) -> str | None:
        what = f"reference_turn({where})" if history else f"reference_completion({where})"
        ok, text = self.c.call(what, partial(self.task.reference_turn, problem, tuple(history)))
        if not ok or not self.c.expect(
            isinstance(text, str),
            f"{what} must return a str (got {shown(text)})",
            key="reference-turn-type",
        ):
            return None
        return str(text)

    def feedback(
        self, problem: Any, history: Sequence[Response], label: str
    ) -> tuple[Feedback, float] | None:
        """`feedback(problem, history)`, checked, and its reward; None if it failed a check."""
        what = f"feedback(turn {len(history)} of {label})"
        method = self.task.feedback
        assert method is not None, "checked for a task that plays episodes only"
        # A tuple, as the loop passes it: a task that would append to it fails here too.
        ok, said = self.c.call(what, lambda: method(problem, tuple(history)), key="feedback")
        if not ok:
            return None
        total = reward_total(said.reward) if isinstance(said, Feedback) else None
        if not self.c.expect(
            isinstance(said, Feedback)
            and (said.reply is None or isinstance(said.reply, str))
            and isinstance(said.role, str)
            and total is not None
            and math.isfinite(total[0]),
            f"{what} returned {shown(said)}: it must return a Feedback(reply=text or None, "
            "reward=a finite number or named finite numbers)",
            key="feedback-type",
        ):
            return None
        assert total is not None
        self.c.expect(
            metric_values(said.metrics) is not None,
            f"{what} returned Feedback(metrics={shown(said.metrics, 80)}): {SHAPE}",
            key="feedback-metrics",
        )
        if not self.limits(what, said):
            return None
        ok, again = self.c.call(what, lambda: method(problem, tuple(history)), key="feedback")
        self.c.expect(
            not ok or again == said,
            f"{what} returned {shown(said)} then {shown(again)} for the same history: "
            "the environment must be deterministic",
            key="feedback-determinism",
        )
        return said, total[0]

    def limits(self, what: str, said: Feedback) -> bool:
        """The limits `said` sets for the next turn are valid (else False: the episode cannot
        go on), and its max_tokens fits the episode's budget (what is left of it caps the
        turn at run time)."""
        wrong = limits_error(said)
        if not self.c.expect(
            wrong is None, f"{what} sets the next turn's limits wrong: {wrong}", key="turn-limits"
        ):
            return False
        budget = self.task.episode_budget(self.task.max_tokens)
        self.c.expect(
            said.max_tokens is None or said.max_tokens <= budget,
            f"{what} sets the next turn's max_tokens to {said.max_tokens}, more than the "
            f"episode's budget of {budget} tokens: lower Feedback.max_tokens to at most "
            f"{budget}, or raise the task's episode_tokens",
            key="turn-budget",
        )
        return True
