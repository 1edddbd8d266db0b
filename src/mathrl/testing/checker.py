"""`Checker`: runs the contract's checks on one task and keeps every violation.

For: `mathrl.testing.check_adapter`, which decides the order and the sizes.
Each check is one sentence naming the method and the input when it fails; a
failure with a key is reported once, however often it recurs.
"""

from __future__ import annotations

import math
import random
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from mathrl.adapter import Task
from mathrl.testing.inputs import ADVERSARIAL, WRONG, random_texts
from mathrl.text import describe, shown


class Checker:
    """Runs checks on one task and keeps every violation, one sentence each."""

    def __init__(self, task: Task[Any]) -> None:
        self.task = task
        self.adapter = task.adapter
        self.violations: list[str] = []
        self.checks = 0
        self.seen: list[float] = []
        """Every finite reward seen, for the evaluate checks."""
        self._keys: set[str] = set()

    def expect(self, ok: bool, sentence: str, key: str | None = None) -> bool:
        """Record one check; a failed one with a `key` seen before is not repeated."""
        self.checks += 1
        if not ok and (key is None or key not in self._keys):
            self.violations.append(sentence)
            if key is not None:
                self._keys.add(key)
        return ok

    def call(self, what: str, fn: Callable[[], Any], key: str | None = None) -> tuple[bool, Any]:
        """(True, fn()) or, if it raised, (False, None) with the violation recorded."""
        try:
            return True, fn()
        except Exception as exc:
            detail = describe(exc, 80)
            self.expect(False, f"{what} raised {type(exc).__name__}: {detail}", key or what)
            return False, None

    def prompts(self, what: str, problems: Sequence[Any]) -> list[str] | None:
        ok, prompts = self.call(
            f"make_prompt on a problem of {what}",
            lambda: [self.adapter.make_prompt(p) for p in problems],
            key="make_prompt",
        )
        if ok and self.expect(
            all(isinstance(p, str) and p for p in prompts),
            f"make_prompt must return a non-empty str (got {shown(prompts[:2])} for {what})",
            key="make_prompt-type",
        ):
            return list(prompts)
        return None

    # -- problems -----------------------------------------------------------------

    def dataset(self, seeds: Sequence[int], steps: Sequence[int], size: int) -> list[Any]:
        """Determinism, size and variety of build_dataset; returns some of its problems."""
        saved = random.getstate()
        drawn: dict[tuple[int, int], list[str]] = {}
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
        build = self.adapter.build_dataset
        random.seed(1)
        before = random.getstate()
        ok, problems = self.call(what, lambda: build(seed, step, size), key="build_dataset")
        advanced = random.getstate() != before
        random.seed(2)
        ok_again, again = self.call(what, lambda: build(seed, step, size), key="build_dataset")
        if not (ok and ok_again) or not self.expect(
            isinstance(problems, list) and len(problems) == size,
            f"{what} must return a list of exactly {size} problems (got {_count(problems)})",
        ):
            return None
        prompts, again_prompts = self.prompts(what, problems), self.prompts(what, again)
        self.expect(
            not advanced and prompts == again_prompts,
            f"{what} depends on or advances the global random state: draw from a private "
            "random.Random seeded by (seed, step), never from the `random` module",
            key="global-random",
        )
        sample.extend(problems[:2])
        return prompts

    def heldout(self, seed: int, size: int, guard_steps: int, batch: int) -> list[Any]:
        """Held-out problems: exactly `size`, stable, and never training problems."""
        declared = self.task.declares_heldout
        what = (
            f"heldout_dataset(seed={seed}, size={size})"
            if declared
            else f"the default held-out set (build_dataset(seed={seed}, step=0, size={size}))"
        )
        ok, problems = self.call(what, lambda: self.task.heldout(seed, size))
        if not ok or not self.expect(
            isinstance(problems, list) and len(problems) == size,
            f"{what} must return a list of exactly {size} problems (got {_count(problems)})",
        ):
            return []
        prompts = self.prompts(what, problems) or []
        ok, training = self.call(
            f"build_dataset or make_prompt for training steps 1-{guard_steps} (size {batch})",
            partial(self.task.training_prompts, seed, guard_steps, batch),
            key="build_dataset",
        )
        shared = [p for p in prompts if ok and p in training]
        advice = "" if declared else "; declare heldout_dataset(seed, size) on the task"
        self.expect(
            not shared,
            f"{what} shares {len(shared)} of {size} prompts with training steps 1-{guard_steps} "
            f"(size {batch}), e.g. {shown(shared[:1])}: held-out problems must be ones "
            f"training never draws{advice}",
        )
        return list(problems)

    # -- rewards --------------------------------------------------------------------

    def rewards(self, problems: Sequence[Any], others: Sequence[Any]) -> None:
        """The reference earns the maximum; wrong text earns less; nothing raises."""
        for problem in problems:
            ok, prompt = self.call("make_prompt", partial(self.adapter.make_prompt, problem))
            where = shown(prompt, 40) if ok else "a problem"
            ok, ref = self.call(
                f"reference_completion({where})",
                partial(self.adapter.reference_completion, problem),
                key="reference_completion",
            )
            if not ok or not self.expect(
                isinstance(ref, str),
                f"reference_completion({where}) must return a str (got {shown(ref)})",
                key="reference-type",
            ):
                continue
            best = self._reward(ref, problem, "the reference completion", where)
            if best is None:
                continue
            for stop in self.task.stop:
                self.expect(
                    stop not in ref,
                    f"reference_completion({where}) = {shown(ref)} contains the stop sequence "
                    f"{stop!r}, so sampling would stop before it ends",
                    key=f"stop-in-reference-{stop}",
                )
                with_stop = self._reward(ref + stop, problem, f"the reference + {stop!r}", where)
                self.expect(
                    with_stop is None or with_stop == best,
                    f"compute_reward(reference + {stop!r}, {where}) = {with_stop} but the "
                    f"reference alone earns {best}: the stop that ends a completion must not "
                    "change its reward",
                    key=f"stop-reward-{stop}",
                )
            wrong = [*WRONG, self._other_reference(problem, ref, others)]
            scores = [self._reward(w, problem, f"a wrong answer {shown(w)}", where) for w in wrong]
            self.expect(
                any(s is not None and s < best for s in scores),
                f"compute_reward gave every wrong completion tried ({shown(wrong)}) the "
                f"reference's reward {best} on {where}: it cannot tell right from wrong",
                key="wrong-not-less",
            )
            texts = [*ADVERSARIAL, *((f"random text {t!r:.20}", t) for t in random_texts(12))]
            for label, text in texts:
                score = self._reward(text, problem, label, where)
                self.expect(
                    score is None or score <= best,
                    f"compute_reward({label}, {where}) = {score} beats the reference's "
                    f"{best}: the reference completion must earn the maximum",
                    key=f"beats-{label}",
                )
            self.evaluate(best, self.seen)
        self.evaluate(None, self.seen)  # whatever happened above, evaluate's range is checked

    def _reward(self, text: str, problem: Any, label: str, where: str) -> float | None:
        what = f"compute_reward({label}, {where})"
        ok, value = self.call(what, lambda: self.adapter.compute_reward(text, problem), key=label)
        if ok and self.expect(
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value),
            f"{what} returned {shown(value)}: a reward must be a finite float",
            key=f"finite-{label}",
        ):
            self.seen.append(float(value))
            return float(value)
        return None

    def _other_reference(self, problem: Any, ref: str, others: Sequence[Any]) -> str:
        for other in others:
            try:
                text = self.adapter.reference_completion(other)
            except Exception:
                continue  # reported where it is checked
            if isinstance(text, str) and text != ref:
                return text
        return ref + "0"

    def evaluate(self, best: float | None, seen: Sequence[float]) -> None:
        """evaluate stays in [0, 1], and counts the reference's reward as fully correct."""
        for rewards in ([], [0.0], [1.0, 0.0, 0.5], list(seen)):
            what = f"evaluate({shown(rewards)})"
            ok, value = self.call(what, partial(self.adapter.evaluate, rewards), key="evaluate")
            self.expect(
                not ok
                or (isinstance(value, int | float) and math.isfinite(value) and 0 <= value <= 1),
                f"{what} = {shown(value)}: an accuracy must be a number in [0, 1]",
                key="evaluate-range",
            )
        if best is None:
            return
        ok, full = self.call("evaluate", partial(self.adapter.evaluate, [best] * 4), key="evaluate")
        self.expect(
            not ok or full == 1.0,
            f"the reference completion earns {best}, which evaluate([{best}] * 4) scores "
            f"{shown(full)}, not 1.0: reference_completion must return a fully correct "
            "answer, and evaluate must count the maximum reward as correct",
            key="evaluate-reference",
        )

    # -- learning -------------------------------------------------------------------

    def learning(self) -> None:
        """20 steps on the fake backend raise accuracy by at least 10 points."""
        from mathrl.config import TrainConfig
        from mathrl.loop import run_grpo
        from mathrl_fakes import ByteTokenizer, FakeBackend

        config = TrainConfig(steps=20, batch=8, group=4)
        max_tokens = self.task.max_tokens
        stop = self.task.stop[0] if self.task.stop else ""
        for problem in self.adapter.build_dataset(0, 1, 3):
            ref = self.adapter.reference_completion(problem)
            needed = len(ByteTokenizer().encode(ref + stop)) + 1
            if not self.expect(
                needed <= max_tokens,
                f"reference_completion({shown(self.adapter.make_prompt(problem), 40)}) with "
                f"its stop and end-of-sequence takes {needed} tokens on the fake backend's byte "
                f"tokenizer, more than max_tokens={max_tokens}",
            ):
                return
        with tempfile.TemporaryDirectory(prefix="mathrl-check-") as folder:
            backend = FakeBackend.for_run(self.task, config, checkpoint_dir=Path(folder))
            result = run_grpo(backend, self.task, config)
        accuracy = [m.accuracy for m in result.steps]
        start, end = sum(accuracy[:5]) / 5, sum(accuracy[-5:]) / 5
        self.expect(
            end >= start + 0.10,
            f"a 20-step run on the fake backend did not learn: accuracy went from {start:.1%} "
            f"(steps 1-5) to {end:.1%} (steps 16-20); it must rise by at least 10 points",
        )


def _count(value: Any) -> str:
    return f"{len(value)}" if isinstance(value, list) else shown(value)
