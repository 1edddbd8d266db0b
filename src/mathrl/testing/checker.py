"""`Checker`: runs the contract's checks on one task and keeps every violation.

For: `mathrl.testing.check_adapter`, which decides the order and the sizes.
Each check is one sentence naming the method and the input when it fails; a
failure with a key is reported once, however often it recurs.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from mathrl.adapter import NoReference, Prompt
from mathrl.problem_keys import Unfingerprintable, problem_fingerprint, problem_key
from mathrl.resolved import Task, prompt_key
from mathrl.text import describe, shown

ROLES = frozenset({"system", "user", "assistant", "tool"})


def is_prompt(prompt: object) -> bool:
    """A non-empty str, or a non-empty list of messages with a known role and str content."""
    if isinstance(prompt, str):
        return bool(prompt)
    return (
        isinstance(prompt, list | tuple)
        and bool(prompt)
        and all(
            isinstance(m, Mapping) and m.get("role") in ROLES and isinstance(m.get("content"), str)
            for m in prompt
        )
    )


def problem_name(prompt: object, shared: tuple[str, str] = ("", "")) -> str:
    """A problem as a message names it: its text prompt, or its conversation's last user message
    (the first message is, as often as not, a system message all problems share), less the
    lines `shared` says every problem's begins and ends with (a few-shot header, an instruction
    after the question), so what tells it apart shows: `...'Q: What is 12 + 30?'...`."""
    if isinstance(prompt, list | tuple) and is_prompt(prompt):
        users = [m["content"] for m in prompt if m["role"] == "user"]
        text = users[-1] if users else prompt_key(prompt)
    elif isinstance(prompt, str):
        text = prompt
    else:
        return shown(prompt, 40)
    head, tail = shared
    start = len(head) if head and text.startswith(head) else 0
    end = len(text) - len(tail) if tail and text.endswith(tail) else len(text)
    if start >= end:
        return shown(text, 40)
    return f"{'...' * bool(start)}{shown(text[start:end], 40)}{'...' * (end < len(text))}"


def shared_lines(prompts: Sequence[object]) -> tuple[str, str]:
    """The whole lines every one of `prompts` (as `problem_name` reads them) begins with, and
    those every one ends with; nothing for fewer than two different prompts."""
    texts = []
    for prompt in prompts:
        if isinstance(prompt, list | tuple) and is_prompt(prompt):
            users = [m["content"] for m in prompt if m["role"] == "user"]
            texts.append(users[-1] if users else prompt_key(prompt))
        elif isinstance(prompt, str):
            texts.append(prompt)
    if len(set(texts)) < 2:
        return "", ""
    head = os.path.commonprefix(texts)  # noqa: RUF071
    head = head[: head.rfind("\n") + 1]  # whole lines only
    tail = os.path.commonprefix([t[::-1] for t in texts])[::-1]  # noqa: RUF071
    tail = tail[tail.find("\n") :] if "\n" in tail else ""
    return head, tail


@dataclass(frozen=True, slots=True)
class Draw:
    """One draw of problems: `what` was called (for messages), as `method` of the task
    (`build_dataset`, or `heldout` for the task's held-out set) on `args`, and gave `problems`."""

    what: str
    method: str
    args: tuple[int, ...]
    problems: list[Any]


class Checker:
    """Runs checks on one task and keeps every violation, one sentence each."""

    def __init__(self, task: Task[Any]) -> None:
        self.task = task
        self.adapter = task.adapter
        self.violations: list[str] = []
        self.warnings: list[str] = []
        """Failed checks of what the contract cannot require (intent), one sentence each."""
        self.checks = 0
        self.seen: list[float] = []
        """Every finite reward seen, for the evaluate checks."""
        self.references: list[float] = []
        """The reward of each problem's reference (its whole episode, for a task that plays
        episodes)."""
        self._repeats: dict[str, int] = {}
        """How often each keyed violation recurred, by key (its sentence is listed once)."""
        self._where: dict[str, int] = {}
        self._warned: set[str] = set()
        self.draws: list[Draw] = []
        """Each draw of problems checked, to draw again in another process."""
        self.no_reference: str | None = None
        """Why the task has no references (`NoReference`), once it said so."""
        self._shared: tuple[str, str] | None = None

    def expect(self, ok: bool, sentence: str, key: str | None = None) -> bool:
        """Record one check; a failed one with a `key` seen before only adds to its count."""
        self.checks += 1
        if ok:
            return True
        if key is not None and key in self._where:
            self._repeats[key] = self._repeats.get(key, 1) + 1
            return False
        if key is not None:
            self._where[key] = len(self.violations)
        self.violations.append(sentence)
        return False

    def warn(self, ok: bool, sentence: str, key: str) -> bool:
        """Record one check that, failed, is a warning rather than a violation (once a key)."""
        self.checks += 1
        if not ok and key not in self._warned:
            self._warned.add(key)
            self.warnings.append(sentence)
        return ok

    def report(self) -> list[str]:
        """Every distinct violation once, with how many times it happened when more than once."""
        lines = list(self.violations)
        for key, count in self._repeats.items():
            lines[self._where[key]] += f" ({count} times)"
        return lines

    def name(self, prompt: object) -> str:
        """A problem as a message names it: what tells its prompt apart from the others drawn
        (`problem_name`, less the lines every prompt drawn so far shares)."""
        if self._shared is None:
            prompts = []
            for draw in self.draws:
                for problem in draw.problems[:64]:
                    try:
                        prompts.append(self.adapter.make_prompt(problem))
                    except Exception:  # a violation of its own already
                        continue
            self._shared = shared_lines(prompts)
        return problem_name(prompt, self._shared)

    def with_references(self, problems: Sequence[Any]) -> Iterator[tuple[Any, Prompt, str]]:
        """(problem, prompt, reference) of each problem whose prompt and reference the task
        gives (what it fails to give is recorded, and the reward checks say more of it)."""
        for problem in problems:
            ok, prompt = self.call("make_prompt", partial(self.adapter.make_prompt, problem))
            if not ok:
                continue
            ok, ref = self.call(
                f"reference_completion({self.name(prompt)})",
                partial(self.adapter.reference_completion, problem),
            )
            if ok and isinstance(ref, str):
                yield problem, prompt, ref

    def call(self, what: str, fn: Callable[[], Any], key: str | None = None) -> tuple[bool, Any]:
        """(True, fn()) or, if it raised, (False, None) with the violation recorded.

        Failures of one method with one type of exception are one violation,
        however many inputs set them off.
        """
        try:
            return True, fn()
        except NoReference as exc:  # no violation: the task has none, and check_adapter says so
            self.no_reference = self.no_reference or describe(exc)
            return False, None
        except Exception as exc:
            method = (key or what).split("(", 1)[0]
            self.expect(
                False,
                f"{what} raised {type(exc).__name__}: {describe(exc, 80)}",
                f"raised-{method}-{type(exc).__name__}",
            )
            return False, None

    def prompts(self, what: str, problems: Sequence[Any]) -> list[str] | None:
        """The problems' prompts as comparable strings, each checked: text or a conversation."""
        ok, prompts = self.call(
            f"make_prompt on a problem of {what}",
            lambda: [self.adapter.make_prompt(p) for p in problems],
            key="make_prompt",
        )
        if ok and self.expect(
            all(is_prompt(p) for p in prompts),
            "make_prompt must return a non-empty str or a non-empty list of "
            f"{{'role', 'content'}} messages (got {shown(prompts[:2])} for {what})",
            key="make_prompt-type",
        ):
            return [prompt_key(p) for p in prompts]
        return None

    def keys(self, what: str, problems: Sequence[Any]) -> list[str]:
        """The problems as compared (`mathrl.problem_keys`): each one's fingerprint, or, with a
        violation saying why it has none, its prompt."""
        keys = []
        for problem in problems:
            try:
                keys.append(problem_fingerprint(problem))
            except Unfingerprintable as exc:
                self.expect(
                    False,
                    f"a problem of {what} cannot be told apart from others by its value: {exc} "
                    "(problems may share a prompt, so they are compared by value; see "
                    "mathrl.problem_keys)",
                    key="fingerprint",
                )
                keys.append(problem_key(self.adapter, problem))
        return keys

    # -- problems -----------------------------------------------------------------

    def shared_prompts(self) -> None:
        """A warning when problems drawn so far share a prompt but not its reference: a model
        sees the prompt, not the problem (a game's hidden secret), so it cannot learn each
        one's; the fake learns the one most of them have."""
        references: dict[str, dict[str, str]] = {}
        for draw in self.draws:
            for problem in draw.problems:
                try:
                    prompt = prompt_key(self.adapter.make_prompt(problem))
                    reference = str(self.adapter.reference_completion(problem))
                except Exception:  # a violation of its own already
                    continue
                references.setdefault(prompt, {}).setdefault(reference, prompt)
        for prompt, by_reference in references.items():
            first, second, *_ = [*by_reference, "", ""]
            self.warn(
                len(by_reference) < 2,
                f"problems that share the prompt {shown(prompt, 40)} have different "
                f"references ({shown(first)} and {shown(second)}), but a model sees the "
                "prompt, not the problem: it cannot learn to write each one's (the fake "
                "learns the one most of them have); make the first turn's reference what the "
                "prompt tells, and let the environment's replies tell the rest "
                "(reference_turn)",
                key="shared-prompt",
            )

    def dataset(self, seeds: Sequence[int], steps: Sequence[int], size: int) -> list[Any]:
        """Determinism, size and variety of build_dataset; returns some of its problems."""
        saved = random.getstate()
        drawn: dict[tuple[int, int], list[str]] = {}
        """Each draw's problems, as compared (`keys`): problems, not prompts, which they may
        share."""
        sample: list[Any] = []
        try:
            for seed in seeds:
                for step in steps:
                    prompts = self._one_draw(seed, step, size, sample)
                    if prompts is not None:
                        drawn[seed, step] = prompts
            for n in (1, 3):
                what = f"build_dataset(seed=0, step=1, size={n})"
                ok, few = self.call(what, partial(self.adapter.build_dataset, 0, 1, n))
                self.expect(
                    not ok or (isinstance(few, list) and len(few) == n),
                    f"{what} must return exactly {n} problems (got {_count(few)})",
                )
        finally:
            random.setstate(saved)
        for (seed, step), prompts in drawn.items():
            for other in ((seed + 1, step), (seed, step + 1)):
                self.expect(
                    drawn.get(other) != prompts,
                    f"build_dataset gave the same problems for (seed={seed}, step={step}) "
                    f"and (seed={other[0]}, step={other[1]}): each seed and step draws its own",
                )
        return list(sample)

    def _one_draw(self, seed: int, step: int, size: int, sample: list[Any]) -> list[str] | None:
        what = f"build_dataset(seed={seed}, step={step}, size={size})"
        build = partial(self.adapter.build_dataset, seed, step, size)
        problems = self._drawn_twice(what, "build_dataset", build, size, "(seed, step)")
        if problems is not None:
            self.draws.append(Draw(what, "build_dataset", (seed, step, size), problems))
        if problems is None:
            return None
        sample.extend(problems[:2])
        if self.prompts(what, problems) is None:
            return None
        return self.keys(what, problems)

    def _drawn_twice(
        self, what: str, method: str, draw: Callable[[], Any], size: int, seeded_by: str
    ) -> list[Any] | None:
        """`draw()` from two global random states: exactly `size` problems, the same both
        times, and the global state left as it was. The first draw; None if a call failed a
        check."""
        saved = random.getstate()
        try:
            random.seed(1)
            before = random.getstate()
            ok, problems = self.call(what, draw, key=method)
            advanced = random.getstate() != before
            random.seed(2)
            ok_again, again = self.call(what, draw, key=method)
        finally:
            random.setstate(saved)
        if not (ok and ok_again) or not self.expect(
            isinstance(problems, list) and len(problems) == size,
            f"{what} must return a list of exactly {size} problems (got {_count(problems)})",
        ):
            return None
        prompts, again_prompts = self.prompts(what, problems), self.prompts(what, again)
        self.expect(
            not advanced
            and isinstance(again, list)
            and prompts == again_prompts
            and equal_by_value(problems, again)
            and _same_keys(problems, again),
            f"{what} depends on or advances the global random state: draw from a private "
            f"random.Random seeded by {seeded_by}, never from the `random` module",
            key=f"global-random-{method}",
        )
        return list(problems)

    def heldout(self, seed: int, size: int, guard_steps: int, batch: int) -> list[Any]:
        """Held-out problems: exactly `size`, stable, and never training problems."""
        declared = self.task.declares_heldout
        what = (
            f"heldout_dataset(seed={seed}, size={size})"
            if declared
            else f"the default held-out set (build_dataset(seed={seed}, step=0, size={size}))"
        )
        method = "heldout_dataset" if declared else "build_dataset"
        draw = partial(self.task.heldout, seed, size)
        problems = self._drawn_twice(
            what, method, draw, size, "the seed" if declared else "(seed, step)"
        )
        if problems is None:
            return []
        self.draws.append(Draw(what, "heldout", (seed, size), problems))
        if self.prompts(what, problems) is None:
            return problems
        keys = self.keys(what, problems)
        ok, training = self.call(
            f"build_dataset or make_prompt for training steps 1-{guard_steps} (size {batch})",
            partial(self.task.training_problems, seed, guard_steps, batch),
            key="build_dataset",
        )
        shared = [p for p, k in zip(problems, keys, strict=True) if ok and k in training]
        advice = "" if declared else "; declare heldout_dataset(seed, size) on the task"
        self.expect(
            not shared,
            f"{what} shares {len(shared)} of {size} problems with training steps "
            f"1-{guard_steps} (size {batch}), e.g. {_named(self, shared[:1])}: "
            f"held-out problems must be ones training never draws{advice}",
        )
        return problems


def equal_by_value(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """False when problems that compare by value (an `==` of their own, as a dataclass or a
    tuple has) differ; problems compared by identity, or that cannot be compared, say nothing."""
    for x, y in zip(a, b, strict=True):
        if not any("__eq__" in vars(k) for k in type(x).__mro__ if k is not object):
            continue
        try:
            if not bool(x == y):
                return False
        except Exception:  # an == that raises (an array's, say) tells nothing either way
            continue
    return True


def _same_keys(problems: Sequence[Any], again: Sequence[Any]) -> bool:
    """Whether two draws gave the same problems by fingerprint (a problem without one says
    nothing here: it is compared by its prompt)."""
    return list(map(_fingerprint, problems)) == list(map(_fingerprint, again))


def _fingerprint(problem: Any) -> str | None:
    try:
        return problem_fingerprint(problem)
    except Unfingerprintable:
        return None


def _named(checker: Checker, problems: Sequence[Any]) -> str:
    """The first of `problems` as a message names it (its prompt, already checked)."""
    return checker.name(checker.adapter.make_prompt(problems[0])) if problems else ""


def _count(value: Any) -> str:
    return f"{len(value)}" if isinstance(value, list) else shown(value)
